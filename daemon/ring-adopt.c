/* SPDX-License-Identifier: MIT */
/*
 * ring-adopt: a ring attached to a predecessor's memory takes the state its
 * header says, keeping the pages and frames that check out (persist.c says
 * how they are checked and where a page in a dump reserve is). The ring
 * module's: a ring's fields are written by its files alone.
 */
#include <string.h>

#include "ring.h"
#include "ringmem.h"

/*
 * The frames in the window, oldest first: those that check out, in seq
 * order, moved together towards the oldest end. Returns the seq after the
 * newest kept.
 */
static uint64_t adopt_frames(struct vmt_ring *r, const struct vmt_ringmem_hdr *h,
			     const struct vmt_ring_adopt *a, struct vmt_ring_adopted *res)
{
	struct vmt_frames *f = &r->fr;
	uint64_t end = 0;
	uint32_t keep = 0;

	if (!f->fm)
		return 0;
	/* frames taken out of the window (a new aux version) stay out */
	f->first = (h->fr_first + h->fr_dead) % f->cap;
	for (uint32_t i = 0; i < h->fr_count; i++) {
		const struct vmt_frame_desc *d = &f->d[(f->first + i) % f->cap];

		if (d->h.first_seq < end || !a->frame_ok(a->arg, r, d) ||
		    d->h.first_seq + d->h.npages > h->next_seq) {
			res->frames_dropped++;
			continue;
		}
		end = d->h.first_seq + d->h.npages;
		if (keep != i)
			f->d[(f->first + keep) % f->cap] = *d;
		f->pages += d->h.npages;
		f->stored += d->len;
		keep++;
	}
	f->count = keep;
	f->head = keep ? (size_t)h->fr_head : 0;
	res->frames = keep;
	return end;
}

/*
 * The raw pages, newest first: those that check out, seqs decreasing and
 * not below min_seq, moved together towards the fill slot, those in a
 * dump's reserve copied home (page, then its record: a crash meanwhile
 * leaves a copy the next check refuses or a duplicate seq it drops).
 */
static void adopt_pages(struct vmt_ring *r, const struct vmt_ringmem_hdr *h, uint64_t min_seq,
			const struct vmt_ring_adopt *a, struct vmt_ring_adopted *res)
{
	uint32_t n = r->nr_pages + 1, ps = r->layout.page_size, keep = 0;
	uint64_t below = h->next_seq;

	for (uint32_t k = h->count; k-- > 0;) {
		uint32_t s = (h->head + n - h->count + k) % n, dst = (h->head + n - 1 - keep) % n;
		struct vmt_ring_slot rec = r->slots[s];
		const uint8_t *p = a->page_at(a->arg, r, s, &rec);
		bool away = rec.flags & VMT_SLOT_AWAY;

		if (rec.seq >= below || rec.seq < min_seq || !p || !a->page_ok(a->arg, r, p, &rec)) {
			res->pages_dropped++;
			res->pages_no_reserve += away && !p;
			continue;
		}
		below = rec.seq;
		if (dst != s || away) {
			memcpy(r->pages[dst], p, ps);
			__atomic_thread_fence(__ATOMIC_RELEASE);
			rec.flags &= ~(uint32_t)VMT_SLOT_AWAY;
			rec.away = 0;
			r->slots[dst] = rec;
		}
		res->pages_home += away;
		keep++;
	}
	r->count = keep;
	res->pages = keep;
}

void ring_adopt(struct vmt_ring *r, const struct vmt_ringmem_hdr *h, const struct vmt_ring_adopt *a,
		struct vmt_ring_adopted *res)
{
	memset(res, 0, sizeof(*res));
	r->mem_pages = a->mem_pages;
	memcpy(&r->c, h->counters, sizeof(r->c));
	r->head = h->head;
	r->next_seq = h->next_seq;
	r->last_ts = h->last_ts;
	adopt_pages(r, h, adopt_frames(r, h, a, res), a, res);
	r->fill = h->fill;
	if (r->fill && (r->slots[r->head].flags & VMT_SLOT_AWAY)) {
		/* the partial page was in a reserve page: as a torn stream */
		res->fill_dropped = r->fill;
		r->c.bytes_rejected += r->fill;
		r->fill = 0;	/* not counted as a page: its bytes are gone */
	}
	r->slots[r->head].flags &= ~(uint32_t)VMT_SLOT_AWAY;
}

