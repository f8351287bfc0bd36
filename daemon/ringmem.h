/* SPDX-License-Identifier: MIT */
/*
 * ringmem: the memory of one ring (one guest CPU) in one sealed memfd, so
 * that a successor (an execve'd upgrade, or the next daemon after a crash,
 * through systemd's fd store) can map it and take the window over. It
 * holds a header page, the raw page slots, their records, a compressed
 * ring's frame descriptors and its frame arena (docs/FORMAT.md, "Ring
 * memory (memfd) layout"). Its size is sealed (F_SEAL_SHRINK|GROW|SEAL):
 * a successor may map all of it without fearing SIGBUS.
 *
 * The header is kept twice, copies A and B, each with a generation and a
 * CRC32C. A publish writes the whole state into the older copy; the newer
 * one stays intact meanwhile, so a SIGKILL between any two stores leaves
 * at least one valid copy, and a reader takes the valid copy with the
 * larger generation. Why two copies rather than a seqlock: a seqlock tells
 * a reader that the writer died mid-write but leaves it nothing to read.
 *
 * What a published header covers must not be written until a newer
 * publish stops covering it: the ring (ring.c) publishes after each page
 * it completes, before it fills the slot that page's overwrite freed, and
 * the frame store publishes the frames it pushed out before it writes
 * over their bytes. So a valid header only ever describes pages and frames
 * that were complete when it was published; the successor still checks
 * each of them (persist.c), since a dump's reserve page is in another
 * memfd (VMT_SLOT_AWAY, pagepool.h) and memory may be damaged. The cost: one publish
 * per page, about a hundred nanoseconds (a CRC32C of the header's changing
 * part only: its fixed part's CRC is kept and continued).
 *
 * What a crash loses: the page being filled (its bytes since the last
 * publish; the stream resumes at an unknown position). Every completed
 * page is kept: in the memfd, or in the dump reserve's memfd where a dump
 * held its slot's own page (VMT_SLOT_AWAY; the successor copies it home).
 *
 * The memory outlives its ring while a dump holds part of it (refs).
 */
#ifndef VMT_RINGMEM_H
#define VMT_RINGMEM_H

#include <stddef.h>
#include <stdint.h>

/* Bump when anything in the memfd's layout or meaning changes. */
#define VMT_PERSIST_LAYOUT 2u	/* 2: a slot says where its reserve page is */
#define VMT_PERSIST_MAGIC 0x474e4952544d5600ull	/* "\0VMTRING" read little-endian */
#define VMT_RINGMEM_HDR_BYTES 4096u	/* the header page: copy A at 0, copy B at 2048 */
#define VMT_RINGMEM_COPY_OFF 2048u
#define VMT_RINGMEM_NAME 72u	/* guest names are at most 64 characters */
#define VMT_RINGMEM_COUNTERS 14u	/* struct vmt_ring_counters, in its order */

#define VMT_RINGMEM_COMPRESSED 0x1u	/* it has frames */

/* One copy of the header, in host byte order (the memfd never leaves the host). */
struct vmt_ringmem_hdr {
	/* fixed from creation (or adoption, or a new aux version) */
	uint64_t magic;
	uint32_t layout;	/* VMT_PERSIST_LAYOUT */
	uint32_t hdr_size;	/* sizeof(struct vmt_ringmem_hdr) */
	uint64_t created_ns;	/* CLOCK_REALTIME when the ring was made */
	uint32_t lifetimes;	/* daemons that have held it, its creator included */
	uint32_t flags;		/* VMT_RINGMEM_* */
	char guest[VMT_RINGMEM_NAME];	/* NUL-terminated and -padded */
	uint64_t aux_id;	/* the aux bundle's content id the pages decode with */
	uint32_t aux_version;
	uint32_t cpu, ncpus;
	uint32_t page_size;
	uint32_t ts_offset, commit_offset, commit_size, data_offset;	/* struct vmt_page_layout */
	uint32_t nr_pages;	/* raw pages; slots are one more */
	uint32_t batch;		/* pages per frame; 0 for a raw ring */
	uint32_t desc_cap;	/* frame descriptors */
	uint32_t pad3;		/* 0: no implicit padding, the CRC covers every byte */
	uint64_t arena_bytes;
	uint64_t size;		/* the memfd's bytes */
	uint64_t pages_off, slots_off, desc_off, arena_off;
	/* changed by every publish */
	uint64_t gen;		/* +1 per publish: the valid copy with the larger wins */
	uint64_t updated_ns;	/* CLOCK_REALTIME of the publish */
	uint32_t head, count, fill, pad0;
	uint64_t next_seq, last_ts;
	uint32_t fr_first, fr_dead, fr_count, pad1;
	uint64_t fr_head;
	uint64_t counters[VMT_RINGMEM_COUNTERS];
	uint64_t reserve_id;	/* the dump reserve VMT_SLOT_AWAY slots' pages are in (pagepool.h) */
	uint32_t pad2;
	uint32_t crc;		/* CRC32C (lib/util.h) of every byte before it */
};
#define VMT_RINGMEM_FIXED_BYTES offsetof(struct vmt_ringmem_hdr, gen)

/* Where things are in the memfd, from the geometry alone. */
struct vmt_ringmem_geom {
	uint32_t page_size;
	uint32_t nslots;	/* page slots (a ring's nr_pages + 1); may be 0 */
	uint32_t desc_cap;	/* frame descriptors; 0 for a raw ring */
	size_t arena;		/* frame arena bytes */
};
struct vmt_ringmem_layout {
	size_t pages_off, slots_off, desc_off, arena_off;
	size_t size;		/* of the memfd, a multiple of 4096 */
};
void ringmem_layout(const struct vmt_ringmem_geom *g, struct vmt_ringmem_layout *l);
/* Bytes per slot record and per frame descriptor in the memfd (ring.h, frames.h). */
#define VMT_RINGMEM_SLOT_BYTES 40u
#define VMT_RINGMEM_DESC_BYTES 56u

struct vmt_ringmem {
	uint8_t *base;		/* the whole mapping */
	size_t size;
	int fd;			/* the memfd, close-on-exec */
	uint8_t *mem;		/* the page slots */
	size_t bytes;		/* their bytes */
	uint32_t page_size;
	uint32_t refs;
	uint32_t fixed_crc;	/* of the header's fixed part, continued by each publish */
	/* pages that left the ring's raw slots, ever (ring.c's tail: stored,
	 * framed, overwritten or cleared): read by
	 * the compressor's workers (atomic) to check a batch they copied */
	uint64_t gone;
	struct vmt_ringmem_hdr shadow;	/* the next publish's header, in private memory */
	uint32_t holds[];	/* per slot: dumps holding its own page */
};

/* A new memfd of that geometry, sealed, mapped and pre-faulted; its header
 * not yet published. -ENOMEM, or -errno of memfd_create and the rest. */
int ringmem_new(struct vmt_ringmem **out, const struct vmt_ringmem_geom *g);
/* Take over a mapping of fd (persist.c has checked it): the ringmem owns fd
 * from then on. */
int ringmem_wrap(struct vmt_ringmem **out, int fd, uint8_t *base, size_t size,
		 const struct vmt_ringmem_hdr *h);
void ringmem_ref(struct vmt_ringmem *rm);
void ringmem_unref(struct vmt_ringmem *rm);
/* The fixed part of the shadow changed: its CRC again. */
void ringmem_fixed_changed(struct vmt_ringmem *rm);
/* Write the shadow header (its state filled in by the ring) into the older copy. */
void ringmem_publish(struct vmt_ringmem *rm);

/* The newer of the two copies that passes its checks, or -EBADMSG /
 * -EPROTO (another layout version) with why. */
int ringmem_read_hdr(const uint8_t *base, size_t size, struct vmt_ringmem_hdr *out, char *why,
		     size_t n);

#endif
