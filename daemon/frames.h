/* SPDX-License-Identifier: MIT */
/*
 * frames: where a compressed ring keeps its older pages, as frames
 * (lib/frame.h): a fixed byte arena written as a circular log, and a
 * fixed table of frame descriptors, oldest first. Memory is allocated once
 * and never grows; appending a frame pushes out the oldest frames until
 * the new one fits, counted.
 *
 * A dump holds the frames of its window where they are (frames_hold) and
 * the writer reads their bytes as they are. A held frame is never
 * overwritten: an append that would need its room fails with -EBUSY, and
 * the ring keeps those pages raw or overwrites its oldest raw page (ring.c)
 * until the dump is written. The arena outlives the store while a dump
 * holds part of it.
 *
 * The arena and the descriptors are part of the ring's memfd (ringmem.h),
 * so a successor can adopt them: an append first makes room
 * (frames_make_room), the ring publishes the header that no longer covers
 * the frames pushed out, and only then are their bytes written over
 * (frames_put). A compressed frame's descriptor carries the CRC32C of its
 * payload (computed on the compressor's thread) for the successor to check.
 */
#ifndef VMT_FRAMES_H
#define VMT_FRAMES_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#include "frame.h"
#include "ringmem.h"
#include "sample.h"	/* struct vmt_sample_frame */

/* In the memfd: fixed widths (docs/FORMAT.md, "Ring memory"). */
struct vmt_frame_desc {
	struct vmt_frame_hdr h;
	uint64_t off;		/* of the payload in the arena */
	uint32_t len;		/* payload bytes */
	uint32_t crc;		/* CRC32C of the payload; 0 for codec NONE (its pages are checked) */
};

/* The arena and the per-descriptor hold counts: shared with dumps. */
struct vmt_framemem {
	struct vmt_ringmem *rm;	/* the memory the arena is in: a reference */
	uint8_t *mem;
	size_t bytes;
	uint32_t refs;
	uint32_t holds[];	/* per descriptor slot */
};

struct vmt_frames {
	struct vmt_framemem *fm;
	struct vmt_frame_desc *d;	/* cap slots, a circular FIFO, in the memfd */
	uint32_t cap, first;
	uint32_t dead;		/* oldest frames no longer in the window (frames_clear), still in place */
	uint32_t count;		/* frames in the window, after the dead ones */
	size_t head;		/* where the next payload goes */
	uint64_t pages;		/* pages in the frames now */
	uint64_t stored;	/* payload bytes of the frames now */
};

/* The descriptor slots a store of arena bytes for frames of batch_bytes
 * of pages gets. */
uint32_t frames_cap(size_t arena, size_t batch_bytes);
/* A store in a memfd of its own (tests, and a store without a ring) of
 * arena bytes and cap descriptors (frames_cap). */
int frames_init(struct vmt_frames *f, size_t arena, uint32_t cap);
/* A store in rm's descriptors and arena (ring.c); it takes a reference. */
int frames_init_in(struct vmt_frames *f, struct vmt_ringmem *rm);
void frames_free(struct vmt_frames *f);

/* What an append pushed out: frames and their pages. */
struct vmt_frames_evicted {
	uint32_t frames;
	uint64_t pages;
};
/*
 * Room for a payload of len bytes at *pos, oldest frames pushed out until
 * it fits (into *ev). -EBUSY when that would overwrite a frame a dump holds
 * (what was pushed out before stays out); -E2BIG when len can never fit.
 */
int frames_make_room(struct vmt_frames *f, size_t len, size_t *pos, struct vmt_frames_evicted *ev);
/* The frame (its payload in pieces, len bytes in all) at pos from frames_make_room. */
void frames_put(struct vmt_frames *f, size_t pos, const struct vmt_frame_hdr *h,
		const struct vmt_iovec *iov, size_t n, uint32_t crc);
/* i-th frame, oldest first (0 <= i < count). */
const struct vmt_frame_desc *frames_at(const struct vmt_frames *f, uint32_t i);
const uint8_t *frames_payload(const struct vmt_frames *f, const struct vmt_frame_desc *d);
/* Take every frame out of the window; they keep their room (a dump may
 * hold them) until appends push them out, uncounted. */
void frames_clear(struct vmt_frames *f);

/* Frames held by a dump, as the sample writer takes them. */
struct vmt_frames_hold {
	struct vmt_framemem *fm;
	uint32_t n;
	uint32_t *slots;	/* descriptor slot of each, for the release */
	struct vmt_sample_frame *frames;
};
int frames_hold(struct vmt_frames *f, uint32_t first, uint32_t end, struct vmt_frames_hold *h);
void frames_release(struct vmt_frames_hold *h);

#endif
