/* SPDX-License-Identifier: MIT */
/*
 * ring: a fixed-size per-CPU overwrite ring of whole ftrace pages.
 *
 * Memory is allocated once (nr_pages + 1 page slots and a small record per
 * slot) and never grows. Bytes are read straight into the fill slot's page
 * (ring_fill_space), which is never one of the valid pages, so a page being assembled from partial
 * reads cannot tear a page a snapshot may copy. A completed page is checked
 * with page_scan(); a bad page is dropped and its bytes counted as rejected.
 * When the ring is full the oldest page is overwritten and counted.
 *
 * A dump holds the window's pages where they are (ring_hold) while its
 * writer reads them. A held page is not written: when the fill reaches
 * it, the slot fills a page from the dump reserve (pagepool.h) instead,
 * or, with the reserve used up, ring_room() says there is no room and
 * the caller stops reading until the dump is written. ring_settle() puts
 * the ring's own pages back once no dump holds them. The memory a held
 * page is in outlives the ring (ring_free while a dump is written).
 *
 * A compressed ring (ring_init_compressed) keeps its newest pages raw in
 * the slots and its older pages as frames (frames.h) in the rest of the
 * same memory. The raw slots are both the newest window and the
 * compressor's queue: the oldest batch of raw pages is claimed
 * (ring_batch_begin) and compressed off the event loop (compress.h), and
 * its frame replaces the pages when it is back (ring_batch_end). A claim
 * holds nothing: the fill never waits for the compressor. The compressor
 * copies a batch out first and checks that none of its pages left the
 * slots meanwhile (ring_batch_intact), and a frame whose pages left them
 * while it was made is not taken. When the raw slots fill up before the
 * compressor is done, the oldest batch goes into the frame store as it is
 * (ring_spill: a stored frame, counted in pages_stored_raw), a copy on the
 * loop: the window shrinks towards the raw size, nothing is dropped for
 * the compressor's sake.
 *
 * The ring's memory is one sealed memfd (ringmem.h): page slots, their
 * records, and a compressed ring's frames, behind a header published after
 * every change a successor must see (ring_publish), so that another
 * vmtraced can adopt it (persist.h). What only this process needs stays
 * private: where each slot's page is now (its own, or a reserve page) and
 * how many dumps hold it.
 *
 * Pages are numbered by seq, the count of page-sized units received on the
 * channel (good or rejected) since ring_reset_stream(); seq * page_size is
 * the channel's byte offset, which is what the agent's FLUSHED reports.
 */
#ifndef VMT_RING_H
#define VMT_RING_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "frames.h"
#include "page.h"
#include "pagepool.h"
#include "vfile.h"	/* struct vmt_iovec */

struct vmt_ring_counters {
	uint64_t bytes_in;	/* bytes read from the channel */
	uint64_t pages_in;	/* pages accepted */
	uint64_t pages_overwritten;	/* accepted pages pushed out by newer ones */
	uint64_t pages_guest_lost;	/* accepted pages flagged with missed events */
	uint64_t events_guest_lost;	/* missed-event counts stored in those pages */
	uint64_t pages_rejected;
	uint64_t bytes_rejected;	/* bytes of rejected pages and torn tails */
	uint64_t ts_backwards;	/* pages whose time goes back before the previous page */
	uint64_t events_in;	/* events in accepted pages */
	/* a compressed ring's (frames.h) */
	uint64_t frames_made;	/* frames made of older pages */
	uint64_t pages_stored_raw;	/* of their pages, stored uncompressed: the compressor was behind */
	uint64_t frame_bytes_in;	/* page bytes that went into frames */
	uint64_t frame_bytes_out;	/* bytes those frames take */
	uint64_t frames_overwritten;	/* frames pushed out by newer ones */
};

/* A slot's record, in the memfd: fixed widths (docs/FORMAT.md, "Ring memory"). */
struct vmt_ring_slot {
	uint64_t seq;		/* stream position, see above */
	uint64_t first_ts, last_ts;
	uint32_t events;
	uint32_t flags;		/* VMT_SLOT_* */
	uint64_t away;		/* VMT_SLOT_AWAY: its page's offset in the reserve (pagepool_offset) */
};
#define VMT_SLOT_MISSED 0x1
/* its page is a reserve page while a dump holds its own: in the reserve's
 * memfd (the header's reserve_id), at away */
#define VMT_SLOT_AWAY 0x2

struct vmt_ring {
	struct vmt_page_layout layout;
	uint32_t nr_pages;	/* capacity in valid pages (raw slots) */
	uint32_t mem_pages;	/* the pages its memory holds as a raw ring: ring_size's */
	uint32_t count;		/* valid pages */
	uint32_t head;		/* slot index of the fill slot */
	uint32_t fill;		/* bytes in the fill slot */
	uint64_t next_seq;	/* seq the fill slot will get */
	uint64_t last_ts;	/* newest accepted page's last event */
	struct vmt_ringmem *rm;	/* the memfd: (nr_pages + 1) page slots, their records, frames */
	struct vmt_pagepool *pool;	/* the dump reserve, or NULL */
	uint32_t displaced;	/* slots filling a reserve page */
	struct vmt_ring_slot *slots;	/* nr_pages + 1 records, in rm */
	uint8_t **pages;	/* per slot: its own page in rm, or a reserve page while a dump holds that */
	struct vmt_ring_counters c;
	int last_error;		/* -errno of the last rejected page */
	/* a compressed ring's: fr.fm is NULL for a raw one */
	struct vmt_frames fr;
	uint32_t batch;		/* pages per frame */
	uint64_t tail;		/* pages that left the raw slots, ever: the oldest one's position */
	uint64_t claim;		/* position of the next batch: those before are claimed */
	uint64_t batch_gen;	/* a batch's result counts only with the gen it started with */
	bool frames_blocked;	/* a dump holds the frames in the way: until ring_settle */
	struct vmt_schema *schema;	/* the guest's formats, for TCODE frames: a reference, or NULL */
	/* in a struct vmt_ring_queue (the compressor's, for a free job) */
	struct vmt_ring *qnext;
	const void *qowner;
	uint32_t qcodec;
	int qlevel;
	bool queued;
};

/* Rings waiting their turn (the compressor's, for a free job), linked
 * through the rings, each with what it waits with. */
struct vmt_ring_queue {
	struct vmt_ring *head, **tail;
};
void ring_queue_init(struct vmt_ring_queue *q);
/* r at its tail, unless it waits already. */
void ring_queue_push(struct vmt_ring_queue *q, struct vmt_ring *r, const void *owner,
		     uint32_t codec, int level);
/* Its head taken out, with what it waited with; NULL: none waits. */
struct vmt_ring *ring_queue_pop(struct vmt_ring_queue *q, const void **owner, uint32_t *codec,
				int *level);
/* r out of it, wherever it waits. */
void ring_queue_remove(struct vmt_ring_queue *q, struct vmt_ring *r);
/* Every ring out of it. */
void ring_queue_clear(struct vmt_ring_queue *q);

/*
 * The guest's formats as the transcoder's schema (lib/tcode.h), shared by
 * its rings and the compression jobs under way (references, on the loop).
 */
struct vmt_tcode;
struct vmt_schema {
	struct vmt_tcode *t;
	uint32_t refs;
};
/* From a metadata bundle; NULL when it has no readable header_page or on ENOMEM. */
struct vmt_schema *schema_new(const uint8_t *bundle, size_t len, uint32_t page_size);
struct vmt_schema *schema_ref(struct vmt_schema *s);
void schema_unref(struct vmt_schema *s);
/* What r's TCODE frames are made and decoded with from now on (a reference
 * taken; NULL: none, they are made zstd). Frames made before keep the one
 * they name (tcode_id): one of the same formats decodes them. */
void ring_set_schema(struct vmt_ring *r, struct vmt_schema *s);
const struct vmt_tcode *ring_schema(const struct vmt_ring *r);

/* Allocates and pre-faults the memory; -ENOMEM if it cannot. */
int ring_init(struct vmt_ring *r, uint32_t nr_pages, const struct vmt_page_layout *l);
void ring_free(struct vmt_ring *r);
/* Bytes a ring of nr_pages pages of page_size takes: its memfd and what it keeps privately. */
uint64_t ring_mem_size(uint32_t nr_pages, uint32_t page_size);
/*
 * A ring on rm's memory, whose header (rm->shadow) gives the geometry; it
 * takes over the reference. State empty: the caller sets it (persist.c).
 * -ENOMEM, and then rm is still the caller's.
 */
int ring_attach(struct vmt_ring *r, struct vmt_ringmem *rm, const struct vmt_page_layout *l);
/* How ring_adopt keeps what checks out of a predecessor's ring (persist.c's
 * checks): a frame; where slot s's page is (its own, or a dump reserve's:
 * NULL when that is not here); a page. */
struct vmt_ringmem_hdr;
struct vmt_ring_adopt {
	bool (*frame_ok)(void *arg, const struct vmt_ring *r, const struct vmt_frame_desc *d);
	const uint8_t *(*page_at)(void *arg, const struct vmt_ring *r, uint32_t s,
				  const struct vmt_ring_slot *rec);
	bool (*page_ok)(void *arg, const struct vmt_ring *r, const uint8_t *p,
			const struct vmt_ring_slot *rec);
	void *arg;
	uint32_t mem_pages;	/* what the memory holds raw, as a fresh ring's */
};
struct vmt_ring_adopted {
	uint32_t pages, pages_dropped, frames, frames_dropped;
	uint32_t pages_home;	/* of pages, those brought home from a dump reserve */
	uint32_t pages_no_reserve;	/* of pages_dropped, those in a reserve not here */
	uint32_t fill_dropped;	/* bytes of a partial page that were in a reserve page */
};
/* r, attached (ring_attach) to a predecessor's memory whose header is h,
 * takes the state h says: the frames and raw pages that check out, in
 * order, moved together (those in a reserve copied home); the rest
 * dropped and counted in *res. */
void ring_adopt(struct vmt_ring *r, const struct vmt_ringmem_hdr *h, const struct vmt_ring_adopt *a,
		struct vmt_ring_adopted *res);
/* Write the ring's state into its memfd's header (ringmem.h). The ring does
 * so itself after each change a successor must see; a hand-over calls it
 * last, for the fill and the counters of that moment. */
void ring_publish(struct vmt_ring *r);
/* Whose pages these are, in the header: a successor checks them. */
void ring_describe(struct vmt_ring *r, const char *guest, uint32_t cpu, uint32_t ncpus,
		   uint32_t aux_version, uint64_t aux_id);

/*
 * How a compressed ring of the memory of nr_pages pages splits it: raw
 * pages, the frame arena's bytes and the pages per frame. Returns false
 * when it is too small to compress (then it is a raw ring).
 */
#define VMT_RING_BATCH_MAX 64u	/* pages per frame, at most */
/* Pages a source reads into a ring in one event-loop callback, at most,
 * of 4 KiB (guest-int.h's READ_BUDGET_BYTES and one more read; hostsrc's
 * READ_BUDGET_PAGES): both check it. */
#define VMT_RING_BURST_PAGES 80u
#define VMT_RING_BATCH_MAX_BYTES ((size_t)VMT_RING_BATCH_MAX * 65536)
struct vmt_ring_plan {
	uint32_t raw_pages;
	uint32_t batch;
	size_t arena;
	uint32_t cap;		/* frame descriptors */
};
bool ring_plan_compressed(uint32_t nr_pages, uint32_t page_size, struct vmt_ring_plan *p);
/* Bytes a ring of nr_pages takes, compressed if it can be: what
 * ring_bytes() will say once it is made (at most ring_mem_size()). */
uint64_t ring_bytes_planned(uint32_t nr_pages, uint32_t page_size, bool compressed);
/* A compressed ring in about the memory of nr_pages raw pages; a raw ring
 * when that is too small to compress. */
int ring_init_compressed(struct vmt_ring *r, uint32_t nr_pages, const struct vmt_page_layout *l);
/* Bytes the ring takes, whichever kind. */
uint64_t ring_bytes(const struct vmt_ring *r);

/* The next batch of raw pages is due for compression. */
bool ring_batch_due(const struct vmt_ring *r);
/*
 * A batch claimed for the compressor: where its pages are, no hold. The
 * worker copies them out, then asks ring_batch_intact() whether the copy
 * is good.
 */
struct vmt_ring_batch {
	struct vmt_ringmem *rm;	/* a reference: the mapping outlives the ring */
	uint64_t pos;		/* of its first page, in the ring's tail positions */
	uint64_t gen;		/* the ring's batch_gen then */
	uint32_t page_size;
	uint32_t nruns;		/* the slots wrap at most once */
	struct vmt_iovec runs[2];
	struct vmt_frame_hdr h;	/* from the slots' records; h.codec the caller's */
};
/* Claim the next batch into *b (its header from the slots' records).
 * -EAGAIN when none is due, -EBUSY while one of its pages is in the dump
 * reserve (until ring_settle). */
int ring_batch_begin(struct vmt_ring *r, struct vmt_ring_batch *b);
/* From any thread, after copying the pages out: none of them was
 * overwritten before the copy was done. */
bool ring_batch_intact(const struct vmt_ring_batch *b);
/*
 * The compressor is back with b (in the order the batches were begun):
 * its frame (codec in b->h, len bytes at payload, crc its CRC32C unless
 * codec NONE) replaces the pages; or, on len < 0 (-ECANCELED: the copy was
 * overtaken) or when its pages left the slots meanwhile (stored as they
 * were, or overwritten) or the ring was cleared, nothing happens. Put the batch after. True when the frame was
 * taken.
 */
bool ring_batch_end(struct vmt_ring *r, const struct vmt_ring_batch *b, const uint8_t *payload,
		    ssize_t len, uint32_t crc);
/* Drop the batch's reference to the ring's memory. */
void ring_batch_put(struct vmt_ring_batch *b);
/* Window pages: in frames, and all. */
static inline uint64_t ring_window_pages(const struct vmt_ring *r)
{
	return r->fr.pages + r->count;
}

/*
 * Bytes (at most want) that can be taken now without writing a page a
 * dump holds; 0 when the fill slot's page is held and the reserve has no
 * page for it. Read no more than this.
 */
uint32_t ring_room(const struct vmt_ring *r, uint32_t want);
/* Where the next bytes go and how many fit before the page is whole; NULL
 * (room 0) when ring_room() is 0. */
uint8_t *ring_fill_space(struct vmt_ring *r, uint32_t *room);
/*
 * n bytes were written at ring_fill_space(). Returns 1 when this completed
 * a page that was accepted, 0 when the page is not yet whole, -EBADMSG when
 * the completed page was rejected (counted; the ring is unchanged).
 */
int ring_fill_commit(struct vmt_ring *r, uint32_t n);
/* Push one whole page (tests, and sources that have pages in hand);
 * -ENOBUFS when there is no room (ring_room: a held page and no reserve). */
int ring_push(struct vmt_ring *r, const uint8_t *page);

/* Pages held by a dump: runs of contiguous memory, oldest page first. */
struct vmt_ring_hold {
	struct vmt_ringmem *rm;
	struct vmt_pagepool *pool;
	uint32_t page_size;
	uint32_t nruns;
	struct vmt_iovec *runs;
};
/* Hold valid pages [first, end): they stay as they are until ring_release. */
int ring_hold(struct vmt_ring *r, uint32_t first, uint32_t end, struct vmt_ring_hold *h);
/* The dump is written; the ring may be gone by now. Call ring_settle on
 * the rings that are left. */
void ring_release(struct vmt_ring_hold *h);
/* Slots filling reserve pages go back to their own memory where no dump
 * holds it any more. */
void ring_settle(struct vmt_ring *r);

/*
 * A new stream starts (the channel reconnected, or the agent restarted):
 * a partial page in the fill slot is dropped and counted as rejected; seq
 * restarts at 0 if restart_seq. The valid pages stay.
 */
void ring_reset_stream(struct vmt_ring *r, int restart_seq);
/* A new stream in another page layout (a new aux version, the host
 * source's start): as ring_reset_stream(r, 0) after it. */
void ring_set_layout(struct vmt_ring *r, const struct vmt_page_layout *l);
/* Where a slot's page goes while a dump holds its own (the dump reserve). */
void ring_set_pool(struct vmt_ring *r, struct vmt_pagepool *pool);
/* n bytes of its stream refused before they reached it (counted). */
void ring_reject_bytes(struct vmt_ring *r, uint64_t n);
/* *dst (freed already) becomes src, a predecessor's adopted after a crash:
 * the partial page it was filling is torn, its bytes counted as rejected
 * (not as a page: seq stays). */
void ring_take_torn(struct vmt_ring *dst, const struct vmt_ring *src);
/* Forget every valid page (a new aux version starts); counters stay. */
void ring_clear(struct vmt_ring *r);
/* Byte position of the stream: what the agent's bytes_sent is compared to. */
uint64_t ring_stream_bytes(const struct vmt_ring *r);

/* The counters as a sample stores them (sample.h), field by field. */
struct vmt_sample_counters;
void ring_counters_to_sample(const struct vmt_ring_counters *c, struct vmt_sample_counters *out);

/* i-th valid page, oldest first (0 <= i < count). */
const uint8_t *ring_page(const struct vmt_ring *r, uint32_t i);
const struct vmt_ring_slot *ring_slot(const struct vmt_ring *r, uint32_t i);

#endif
