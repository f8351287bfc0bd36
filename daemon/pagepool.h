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
 *
 * Its memory is a sealed memfd (like a ring's, ringmem.h), so that pages
 * a ring filled while a dump held its own outlive a crash: a header page
 * (magic, layout version, a random id, sizes, CRC32C; written once, before
 * the fd goes anywhere) then the pages. A ring's slot record says where in
 * the reserve its page is (ring.h, VMT_SLOT_AWAY) and the ring's header
 * names the reserve's id; the successor maps the reserve handed back
 * (pagepool_read_hdr, persist.c) and copies such pages home.
 */
#ifndef VMT_PAGEPOOL_H
#define VMT_PAGEPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VMT_POOL_UNIT 4096u
#define VMT_POOL_CLASSES 4	/* page sizes served at once */

/* Bump when the reserve memfd's layout or meaning changes. */
#define VMT_RESERVE_LAYOUT 1u
#define VMT_RESERVE_MAGIC 0x56525345544d5600ull	/* "\0VMTESRV" read little-endian */
#define VMT_RESERVE_HDR_BYTES 4096u	/* the header page; pages follow */

/* The reserve memfd's header, in host byte order, written once. */
struct vmt_reserve_hdr {
	uint64_t magic;
	uint32_t layout;	/* VMT_RESERVE_LAYOUT */
	uint32_t hdr_size;	/* sizeof(struct vmt_reserve_hdr) */
	uint64_t id;		/* random: the rings' headers name it (reserve_id) */
	uint64_t created_ns;	/* CLOCK_REALTIME */
	uint64_t bytes;		/* of pages, after the header page */
	uint64_t size;		/* the memfd's bytes: VMT_RESERVE_HDR_BYTES + bytes */
	uint32_t unit;		/* VMT_POOL_UNIT: pages start at multiples of it */
	uint32_t crc;		/* CRC32C (lib/util.h) of every byte before it */
};

/* The fd's name in systemd's fd store: "reserve/<id, 16 hex digits>". */
#define VMT_RESERVE_FDNAME_PREFIX "reserve/"

struct vmt_pagepool {
	int fd;			/* the memfd, close-on-exec; -1 for a reserve of nothing */
	uint64_t id;		/* the header's */
	uint8_t *base;		/* the whole mapping: header page, then mem */
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

/* bytes is rounded down to units; 0 is a reserve of nothing (no memfd). */
int pagepool_init(struct vmt_pagepool *p, size_t bytes);
void pagepool_free(struct vmt_pagepool *p);
/* Where a borrowed page is, in bytes from the first page (a slot's record). */
uint64_t pagepool_offset(const struct vmt_pagepool *p, const uint8_t *page);
/* Its name in the fd store (VMT_RESERVE_FDNAME_PREFIX). */
void pagepool_name(const struct vmt_pagepool *p, char *buf, size_t n);

/* The header of a reserve memfd mapped at base (size bytes): 0, or
 * -EBADMSG / -EPROTO (another layout version) with why. */
int pagepool_read_hdr(const uint8_t *base, size_t size, struct vmt_reserve_hdr *out, char *why, size_t n);

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
