/* SPDX-License-Identifier: MIT */
/*
 * persist: a successor's side of a ring's memfd (ringmem.h). Given an fd
 * handed over (execve, or systemd's fd store after a crash), check it and
 * rebuild the ring from it, keeping only what checks out:
 *
 *   - the memfd: sealed size (F_SEAL_SHRINK|F_SEAL_GROW), the size its
 *     header says;
 *   - the header: magic, layout version, size, CRC32C (the newer valid of
 *     copies A and B); -EBADMSG when neither is valid, -EPROTO for another
 *     layout version;
 *   - whose and what shape: guest name, aux version and content id, CPU,
 *     CPU count, page size and layout, and the geometry the successor's
 *     own ring_size would make (raw pages, batch, arena, descriptors);
 *     -EPROTO when they differ: the caller starts that guest afresh;
 *   - each page the header covers: page_scan() passes and its record
 *     agrees (first and last time, events, the missed flag), seqs
 *     increase and stay below the header's next_seq; a page a dump had
 *     sent to the reserve (VMT_SLOT_AWAY) is read from the reserve the
 *     header names (reserve_id) if it was handed back and checked
 *     (persist_reserve_open), within its bounds, always scanned, and
 *     copied home; each frame: its header checks
 *     (frame_hdr_get), its payload lies in the arena, a compressed one's
 *     CRC32C matches its descriptor, a stored one's pages scan and add up
 *     to its header. What fails is dropped (the rest is compacted, in
 *     order) and counted in struct vmt_persist_adopted.
 *
 * The drops go to a result of their own, not to the ring's counters: those
 * are the guest's stream as it came (and a sample's format); an adoption
 * is an event of the daemon's life, which the caller logs and counts.
 */
#ifndef VMT_PERSIST_H
#define VMT_PERSIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "page.h"
#include "ring.h"

/* A predecessor's dump reserve (pagepool.h), mapped read-only once its
 * seals and header check out. */
struct vmt_persist_reserve {
	uint8_t *base;
	size_t size;
	const uint8_t *pages;	/* after the header page */
	uint64_t bytes;		/* of pages */
	uint64_t id;
};
/* Map and check memfd (the caller keeps fd): 0, or -EBADMSG / -EPROTO /
 * -errno with why, and nothing mapped. */
int persist_reserve_open(int memfd, struct vmt_persist_reserve *v, char *why, size_t n);
void persist_reserve_close(struct vmt_persist_reserve *v);

/* What the successor would make for this guest CPU itself. */
struct vmt_persist_expect {
	const char *guest;
	uint32_t cpu, ncpus;
	uint32_t aux_version;
	uint64_t aux_id;
	struct vmt_page_layout layout;
	uint32_t ring_pages;	/* record.ring_size / page_size, as guest-data.c makes rings */
	bool compressed;	/* record.compression is not off */
	/*
	 * Handed over by a predecessor that published the ring just before
	 * its execve: pages and frames were checked when they came in and
	 * nothing but vmtraced writes the memfd, so they are not scanned
	 * again (records, bounds and seq order still are). A crash's rings
	 * are scanned: the writer may have died mid-page.
	 */
	bool handed_over;
	/* reserves handed back and checked: an AWAY slot's page is read from
	 * the one its ring's header names */
	const struct vmt_persist_reserve *reserves;
	unsigned nreserves;
};

struct vmt_persist_adopted {
	uint32_t pages, pages_dropped;
	uint32_t frames, frames_dropped;
	uint32_t pages_home;	/* of pages, those brought home from a dump reserve */
	uint32_t pages_no_reserve;	/* of pages_dropped, those in a reserve not handed back or refused */
	uint32_t fill_dropped;	/* bytes of a partial page that were not in the memfd */
	uint32_t lifetimes;	/* daemons that have held the ring, this one included */
	uint64_t created_ns;	/* CLOCK_REALTIME the ring was made */
};

/*
 * Map memfd (the caller keeps its fd: the ring holds a duplicate), check it
 * and rebuild r from it as above; r->pool is left for the caller. 0, or
 * -EBADMSG / -EPROTO / -errno with why; r is then untouched memory.
 */
int persist_adopt_ring(int memfd, const struct vmt_persist_expect *want, struct vmt_ring *r,
		       struct vmt_persist_adopted *res, char *why, size_t n);

/* The fd to hand over (the ring keeps it open until it is freed). */
int persist_ring_fd(const struct vmt_ring *r);

/*
 * The fd's name in FDNAME= and LISTEN_FDNAMES: "ring/<guest>/<cpu>".
 * sd_notify(3) (systemd 252, FDNAME=): "The name may consist of arbitrary
 * ASCII characters except control characters or ":". It may not be longer
 * than 255 characters." Guest names are [A-Za-z0-9_.-], at most 64: at
 * most 80 characters, never a ':' or a '/' of their own. -EINVAL for a
 * name that would not be valid.
 */
#define VMT_PERSIST_FDNAME_MAX 256	/* with the NUL */
int persist_ring_name(char *buf, size_t n, const char *guest, uint32_t cpu);
/* 0 and its parts when name is a ring's; -EINVAL otherwise (another fd). */
int persist_ring_name_parse(const char *name, char *guest, size_t n, uint32_t *cpu);

#endif
