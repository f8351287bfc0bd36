/* SPDX-License-Identifier: MIT */
/*
 * pagepool: the dump reserve.
 *
 * A dump's writer reads the window's pages straight out of the rings; a
 * page it holds must not be written until the sample is on disk. When a
 * ring's next page to fill is held, the ring fills a page borrowed from
 * here instead, and takes its own page back once no dump holds it
 * (ring_settle). So a dump costs no copy of its window, and the memory it
 * can add is this reserve, a fixed size set by the configuration.
 *
 * The reserve is address space touched only as pages are borrowed, and
 * given back to the kernel whenever nothing is borrowed. Pages are
 * multiples of VMT_POOL_UNIT; each has a count of the dumps holding it and
 * a mark while it sits in a ring slot: it returns to the free list when it
 * has neither.
 */
#ifndef VMT_PAGEPOOL_H
#define VMT_PAGEPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VMT_POOL_UNIT 4096u
#define VMT_POOL_CLASSES 4	/* page sizes served at once */

struct vmt_pagepool {
	uint8_t *mem;
	size_t bytes;		/* the reserve */
	size_t top;		/* bytes carved so far */
	size_t in_use;		/* bytes borrowed now */
	size_t peak;		/* most bytes borrowed at once */
	uint64_t borrowed;	/* pages ever borrowed */
	uint32_t *holds;	/* per unit, at a page's first unit */
	uint8_t *in_slot;	/* per unit, at a page's first unit */
	struct {
		uint32_t size;
		uint32_t head;	/* first free page's unit + 1; 0: none */
		uint32_t n;
	} cls[VMT_POOL_CLASSES];
};

/* bytes is rounded down to units; 0 is a reserve of nothing. */
int pagepool_init(struct vmt_pagepool *p, size_t bytes);
void pagepool_free(struct vmt_pagepool *p);

/* Pages of size bytes that pagepool_get() can hand out now. */
uint32_t pagepool_available(const struct vmt_pagepool *p, uint32_t size);
/* A page for a ring slot (marked in_slot), or NULL when the reserve is used up. */
uint8_t *pagepool_get(struct vmt_pagepool *p, uint32_t size);
uint32_t pagepool_holds(const struct vmt_pagepool *p, const uint8_t *page);
void pagepool_hold(struct vmt_pagepool *p, const uint8_t *page);
/* A dump is done with the page; free once it is in no slot either. */
void pagepool_release(struct vmt_pagepool *p, uint8_t *page, uint32_t size);
/* The page left its ring slot; free once no dump holds it. */
void pagepool_unslot(struct vmt_pagepool *p, uint8_t *page, uint32_t size);

#endif
