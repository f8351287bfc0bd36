/* SPDX-License-Identifier: MIT */
/*
 * compress: the worker that turns a compressed ring's oldest raw pages
 * into frames, off the event loop.
 *
 * One thread, at the event loop's priority, with one compression
 * context per codec made on first use and kept, and a fixed set of jobs
 * whose output buffers are allocated once: memory does not grow with the
 * guests. A ring has at most one batch in flight; the pages stay in the
 * ring, held (ring_batch_begin), until the frame is back on the loop and
 * replaces them (ring_batch_end). When every job is busy, the batch waits
 * for the ring's next pages; should the raw slots fill meanwhile, the ring
 * stores the batch uncompressed itself (ring.h).
 *
 * The jobs are shared fairly among the guests (owners): one may hold at
 * most its share of them (compressor_share) so that a guest streaming flat
 * out leaves jobs free for the others' batches, and the worker takes the
 * queued batch of the guest it served least recently, not the oldest: a
 * guest's pages go raw for its own excess, never for a neighbour's. A
 * ring that found no job free waits in a queue that a job coming back
 * serves first (past njobs guests holding a job each too).
 */
#ifndef VMT_COMPRESS_H
#define VMT_COMPRESS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "frame.h"
#include "ring.h"

/* A guest with batches in flight: at most njobs of them at once. */
struct vmt_cowner {
	const void *key;	/* NULL: unused */
	uint32_t inflight;	/* jobs it holds (loop) */
	uint64_t served;	/* the worker's tick when it last took one of its batches */
};

struct vmt_cjob {
	struct vmt_cjob *next;
	struct vmt_cowner *own;
	struct vmt_ring *ring;	/* NULL once the ring is gone (compressor_forget) */
	uint64_t gen;		/* the ring's batch_gen at the start */
	struct vmt_ring_hold hold;
	struct vmt_frame_hdr h;	/* h.codec: what the payload is */
	uint32_t codec;		/* what was asked */
	int level;
	uint8_t *out;
	size_t cap;
	ssize_t len;		/* the payload's, or -errno (-ECANCELED: overtaken, skipped) */
	uint32_t crc;		/* the payload's CRC32C (not for codec NONE) */
	uint64_t place[2];	/* ring_batch_begin's: to skip it once overtaken */
};

struct vmt_compress_stats {
	uint64_t frames;	/* frames made */
	uint64_t bytes_in, bytes_out;
	uint64_t cpu_ns;	/* the worker thread's CPU time */
	uint64_t busy;		/* batches due that found every job taken */
	uint64_t errors;	/* batches that could not be compressed (left raw) */
	uint64_t skipped;	/* batches stored as they were before the worker got to them */
	uint64_t over_share;	/* batches due that waited: their guest held its share of the jobs */
};

struct vmt_compressor {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct vmt_cjob *queue, **queue_tail;
	struct vmt_cjob *done, **done_tail;
	struct vmt_cjob *free;	/* jobs not in use (loop only) */
	struct vmt_ring_queue waiting;	/* rings that found no job free (loop only) */
	struct vmt_cjob *jobs;
	uint32_t njobs;
	struct vmt_cowner *owners;	/* njobs: one per guest with jobs in flight */
	uint32_t nowners;	/* of them in use */
	uint64_t tick;		/* the worker's: batches taken */
	int levels[3];		/* by codec: the level ctx[] was made with */
	size_t max_raw;
	struct vmt_frame_ctx *ctx[3];	/* by codec: the worker's */
	int efd;
	sd_event_source *src;
	int stopping, started, inited, manual;
	struct vmt_compress_stats st;	/* loop's copy; cpu_ns written by the worker under lock */
	void (*released)(void *userdata);	/* a batch let go of its pages */
	void *userdata;
};

/* njobs jobs for batches of at most max_raw bytes; released runs on the
 * loop each time a batch lets go of its pages (a reader paused for one of
 * them may go on). */
int compressor_init(struct vmt_compressor *c, sd_event *e, uint32_t njobs, size_t max_raw,
		    void (*released)(void *userdata), void *userdata);
/* Start the worker (after the daemon dropped its privileges). */
int compressor_run(struct vmt_compressor *c);
/* Finish what is queued, hand it back, join. */
void compressor_stop(struct vmt_compressor *c);
/* Compress r's oldest batches with codec at level while they are due, a
 * job is free and owner (r's guest) holds less than its share. */
void compressor_poke(struct vmt_compressor *c, const void *owner, struct vmt_ring *r,
		     uint32_t codec, int level);
/* The jobs a guest may hold now: an equal share among those holding some
 * and one more that may come, so that a newcomer finds a job free. */
uint32_t compressor_share(const struct vmt_compressor *c);
/* Tests: no thread; compressor_step runs the next batch on the caller's
 * thread and says whether there was one (compressor_collect takes it in). */
int compressor_run_manual(struct vmt_compressor *c);
bool compressor_step(struct vmt_compressor *c);
/* Take in the frames that are back now (the loop; between reads of a busy
 * channel, so that a frame done is not overtaken by the slots filling). */
void compressor_collect(struct vmt_compressor *c);
/* r is about to be freed or cleared: a batch of it in flight will not come back to it. */
void compressor_forget(struct vmt_compressor *c, struct vmt_ring *r);

#endif
