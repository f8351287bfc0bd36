/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ring.h"
#include "sample.h"
#include "util.h"

uint64_t ring_mem_size(uint32_t nr_pages, uint32_t page_size)
{
	return ((uint64_t)nr_pages + 1) *
	       (page_size + sizeof(struct vmt_ring_slot) + sizeof(((struct vmt_ringmem *)0)->holds[0]));
}

static void ringmem_unref(struct vmt_ringmem *rm)
{
	if (!rm || --rm->refs)
		return;
	munmap(rm->mem, rm->bytes);
	free(rm);
}

int ring_init(struct vmt_ring *r, uint32_t nr_pages, const struct vmt_page_layout *l)
{
	size_t nslots = (size_t)nr_pages + 1, bytes;
	struct vmt_ringmem *rm;
	void *m;

	memset(r, 0, sizeof(*r));
	if (!nr_pages || !l->page_size)
		return -EINVAL;
	bytes = nslots * l->page_size;
	/* pre-faulted: the ring's memory is spent now, not when a guest gets busy */
	m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (m == MAP_FAILED)
		return -ENOMEM;
	rm = calloc(1, sizeof(*rm) + nslots * sizeof(rm->holds[0]));
	r->slots = calloc(nslots, sizeof(*r->slots));
	if (!rm || !r->slots) {
		munmap(m, bytes);
		free(rm);
		free(r->slots);
		r->slots = NULL;
		return -ENOMEM;
	}
	*rm = (struct vmt_ringmem){ .mem = m, .bytes = bytes, .page_size = l->page_size, .refs = 1 };
	for (size_t i = 0; i < nslots; i++)
		r->slots[i].page = rm->mem + i * l->page_size;
	r->rm = rm;
	r->layout = *l;
	r->nr_pages = nr_pages;
	r->mem_pages = nr_pages;
	return 0;
}

static uint8_t *home_page(const struct vmt_ring *r, uint32_t s)
{
	return r->rm->mem + (size_t)s * r->layout.page_size;
}

/* ---- compressed rings ------------------------------------------------- */

/*
 * The raw slots hold the newest batch, the batch being compressed, and
 * what arrives before the compressor's frame is back on the loop: the
 * loop sees it between callbacks, and a callback reads up to
 * VMT_RING_BURST_PAGES of a channel. So at least two bursts and two
 * batches, and a sixteenth of the ring; a ring that cannot give the frames
 * as much again stays raw.
 */
#define RAW_SHARE 16u
#define BATCH_MAX VMT_RING_BATCH_MAX
#define BATCH_MIN 4u

bool ring_plan_compressed(uint32_t nr_pages, uint32_t page_size, struct vmt_ring_plan *p)
{
	uint32_t b = VMT_MIN(VMT_MAX(nr_pages / 64, BATCH_MIN), BATCH_MAX);
	uint32_t raw = VMT_MAX(2 * b + 2 * VMT_RING_BURST_PAGES, nr_pages / RAW_SHARE);
	size_t arena;
	uint32_t cap;

	memset(p, 0, sizeof(*p));
	if (raw > nr_pages / 2)
		return false;
	/* exactly the memory of the raw ring of nr_pages: the frames get what
	 * the slots leave, less their descriptors */
	arena = ring_mem_size(nr_pages, page_size) - ring_mem_size(raw, page_size);
	cap = frames_cap(arena, (size_t)b * page_size);
	arena -= frames_desc_bytes(cap);
	*p = (struct vmt_ring_plan){ .raw_pages = raw, .batch = b, .arena = arena, .cap = cap };
	return true;
}

int ring_init_compressed(struct vmt_ring *r, uint32_t nr_pages, const struct vmt_page_layout *l)
{
	struct vmt_ring_plan p;
	int err;

	if (!ring_plan_compressed(nr_pages, l->page_size, &p))
		return ring_init(r, nr_pages, l);
	err = ring_init(r, p.raw_pages, l);
	if (err < 0)
		return err;
	err = frames_init(&r->fr, p.arena, p.cap);
	if (err < 0) {
		ring_free(r);
		return err;
	}
	r->batch = p.batch;
	r->mem_pages = nr_pages;
	return 0;
}

uint64_t ring_bytes(const struct vmt_ring *r)
{
	return ring_mem_size(r->nr_pages, r->layout.page_size) +
	       (r->fr.fm ? r->fr.fm->bytes + frames_desc_bytes(r->fr.cap) : 0);
}

bool ring_batch_due(const struct vmt_ring *r)
{
	/* the newest batch stays raw; those before it go, several at once */
	return r->fr.fm && !r->frames_blocked && r->count >= r->inflight + 2 * r->batch;
}

/* The header of a frame of n pages from the first-th oldest, from their slots. */
static void batch_header(const struct vmt_ring *r, uint32_t first, uint32_t n, struct vmt_frame_hdr *h)
{
	*h = (struct vmt_frame_hdr){ .npages = n, .first_seq = ring_slot(r, first)->seq,
				     .first_ts = UINT64_MAX };
	for (uint32_t i = first; i < first + n; i++) {
		const struct vmt_ring_slot *sl = ring_slot(r, i);

		h->first_ts = VMT_MIN(h->first_ts, sl->first_ts);
		h->last_ts = VMT_MAX(h->last_ts, sl->last_ts);
		h->events += sl->events;
		if (sl->flags & VMT_SLOT_MISSED)
			h->flags |= VMT_FRAME_MISSED;
	}
}

int ring_batch_begin(struct vmt_ring *r, struct vmt_ring_hold *hold, struct vmt_frame_hdr *h,
		     uint64_t place[2])
{
	int err;

	if (!ring_batch_due(r))
		return -EAGAIN;
	err = ring_hold(r, r->inflight, r->inflight + r->batch, hold);
	if (err < 0)
		return err;
	batch_header(r, r->inflight, r->batch, h);
	place[0] = r->inflight / r->batch;
	place[1] = __atomic_load_n(&r->rm->spills, __ATOMIC_RELAXED);
	r->inflight += r->batch;
	return 0;
}

bool ring_batch_overtaken(const struct vmt_ring_hold *hold, const uint64_t place[2])
{
	return __atomic_load_n(&hold->rm->spills, __ATOMIC_RELAXED) - place[1] > place[0];
}

/* n oldest pages are in a frame now; frames pushed out for it are counted. */
static void batch_stored(struct vmt_ring *r, uint32_t n, uint64_t bytes,
			 const struct vmt_frames_evicted *ev)
{
	r->count -= n;
	r->c.frames_made++;
	r->c.frame_bytes_in += (uint64_t)n * r->layout.page_size;
	r->c.frame_bytes_out += bytes;
	r->c.frames_overwritten += ev->frames;
	r->c.pages_overwritten += ev->pages;
}

bool ring_batch_end(struct vmt_ring *r, uint64_t gen, const struct vmt_frame_hdr *h,
		    const uint8_t *payload, ssize_t len)
{
	struct vmt_iovec one = { payload, len > 0 ? (size_t)len : 0 };
	struct vmt_frames_evicted ev;
	int err;

	if (gen != r->batch_gen)
		return false;
	/* a batch the slots spilled before it came back (ring_spill took it
	 * out of inflight): its pages are in the store already */
	if (!r->count || ring_slot(r, 0)->seq != h->first_seq)
		return false;
	/* batches come back in order; the first that cannot go in leaves its
	 * pages raw and the later ones too (gen), to be batched again */
	if (len > 0 && r->count >= h->npages && r->inflight >= h->npages) {
		err = frames_append(&r->fr, h, &one, 1, &ev);
		r->c.frames_overwritten += ev.frames;
		r->c.pages_overwritten += ev.pages;
		if (err == 0) {
			r->inflight -= h->npages;
			ev = (struct vmt_frames_evicted){ 0 };
			batch_stored(r, h->npages, (uint64_t)len, &ev);
			return true;
		}
		if (err == -EBUSY)
			r->frames_blocked = true;
	}
	r->inflight = 0;
	r->batch_gen++;
	return false;
}

/*
 * The raw slots are full: the oldest batch goes into the frame store as it
 * is, in place of the compressor's frame, if one was coming. Returns false
 * when the store is blocked by a dump (then the oldest page is overwritten).
 */
static bool ring_spill(struct vmt_ring *r)
{
	uint32_t n = VMT_MIN(r->batch, r->count), ps = r->layout.page_size, k = 0;
	struct vmt_iovec iov[BATCH_MAX];
	struct vmt_frames_evicted ev;
	struct vmt_frame_hdr h;

	if (!r->fr.fm || r->frames_blocked || !n)
		return false;
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *p = ring_page(r, i);

		if (k && (const uint8_t *)iov[k - 1].base + iov[k - 1].len == p)
			iov[k - 1].len += ps;
		else
			iov[k++] = (struct vmt_iovec){ p, ps };
	}
	batch_header(r, 0, n, &h);
	h.codec = VMT_FRAME_NONE;
	if (frames_append(&r->fr, &h, iov, k, &ev) < 0) {
		r->c.frames_overwritten += ev.frames;
		r->c.pages_overwritten += ev.pages;
		r->frames_blocked = true;
		return false;
	}
	/* the first batch in flight is this one: its frame, when it comes,
	 * is not taken (ring_batch_end), and the compressor skips it if it has
	 * not started; the later ones still are taken */
	if (r->inflight) {
		r->inflight -= VMT_MIN(r->inflight, n);
		__atomic_add_fetch(&r->rm->spills, 1, __ATOMIC_RELAXED);
	}
	batch_stored(r, n, (uint64_t)n * ps, &ev);
	r->c.pages_stored_raw += n;
	return true;
}

void ring_free(struct vmt_ring *r)
{
	frames_free(&r->fr);
	for (uint32_t s = 0; r->displaced && s <= r->nr_pages; s++)
		if (r->slots[s].page != home_page(r, s)) {
			pagepool_unslot(r->pool, r->slots[s].page, r->layout.page_size);
			r->displaced--;
		}
	ringmem_unref(r->rm);
	free(r->slots);
	memset(r, 0, sizeof(*r));
}

static bool slot_held(const struct vmt_ring *r, uint32_t s)
{
	const uint8_t *p = r->slots[s].page;

	return p == home_page(r, s) ? r->rm->holds[s] > 0 : pagepool_holds(r->pool, p) > 0;
}

static uint32_t slot_index(const struct vmt_ring *r, uint32_t i)
{
	/* the oldest valid page sits count slots behind the fill slot */
	uint32_t n = r->nr_pages + 1;

	return (r->head + n - r->count + i) % n;
}

uint32_t ring_room(const struct vmt_ring *r, uint32_t want)
{
	uint32_t n = r->nr_pages + 1, ps = r->layout.page_size, s = r->head, off = r->fill;
	uint32_t spare = pagepool_available(r->pool, ps), room = 0;

	/* the fill moves on slot by slot; each held page needs a reserve page
	 * by the time the fill reaches it */
	do {
		if (!off && slot_held(r, s)) {
			if (!spare)
				break;
			spare--;
		}
		room += ps - off;
		off = 0;
		s = (s + 1) % n;
	} while (room < want && s != r->head);
	return VMT_MIN(room, want);
}

uint8_t *ring_fill_space(struct vmt_ring *r, uint32_t *room)
{
	struct vmt_ring_slot *s = &r->slots[r->head];

	if (!r->fill && slot_held(r, r->head)) {
		uint8_t *p = pagepool_get(r->pool, r->layout.page_size);

		if (!p) {
			*room = 0;
			return NULL;
		}
		/* the held page stays the dump's; a reserve page held by a
		 * later dump is freed when that dump is written */
		if (s->page == home_page(r, r->head))
			r->displaced++;
		else
			pagepool_unslot(r->pool, s->page, r->layout.page_size);
		s->page = p;
	}
	*room = r->layout.page_size - r->fill;
	return s->page + r->fill;
}

static int ring_complete(struct vmt_ring *r)
{
	const uint8_t *page = r->slots[r->head].page;
	struct vmt_page_info info;
	struct vmt_ring_slot *s;
	int err;

	r->fill = 0;
	err = page_scan(&r->layout, page, &info);
	if (err < 0) {
		r->c.pages_rejected++;
		r->c.bytes_rejected += r->layout.page_size;
		r->last_error = err;
		r->next_seq++;
		return err;
	}
	s = &r->slots[r->head];
	s->seq = r->next_seq++;
	s->first_ts = info.first_ts;
	s->last_ts = info.last_ts;
	s->events = info.events;
	s->flags = info.missed_flag ? VMT_SLOT_MISSED : 0;
	if (r->c.pages_in && info.first_ts < r->last_ts)
		r->c.ts_backwards++;
	r->last_ts = info.last_ts;
	r->c.pages_in++;
	r->c.events_in += info.events;
	if (info.missed_flag) {
		r->c.pages_guest_lost++;
		r->c.events_guest_lost += info.missed;
	}
	if (r->count == r->nr_pages && !ring_spill(r)) {
		r->c.pages_overwritten++;
		if (r->inflight) {
			/* a page in flight is gone: no batch of them can be taken */
			r->inflight = 0;
			r->batch_gen++;
		}
	}
	else
		r->count++;
	r->head = (r->head + 1) % (r->nr_pages + 1);
	return 1;
}

int ring_fill_commit(struct vmt_ring *r, uint32_t n)
{
	r->fill += n;
	r->c.bytes_in += n;
	if (r->fill < r->layout.page_size)
		return 0;
	return ring_complete(r);
}

int ring_push(struct vmt_ring *r, const uint8_t *page)
{
	uint32_t room;
	uint8_t *dst;

	if (r->fill)
		ring_reset_stream(r, 0);
	if (ring_room(r, r->layout.page_size) < r->layout.page_size)
		return -ENOBUFS;
	dst = ring_fill_space(r, &room);
	if (!dst)
		return -ENOBUFS;
	memcpy(dst, page, room);
	return ring_fill_commit(r, room);
}

void ring_reset_stream(struct vmt_ring *r, int restart_seq)
{
	if (r->fill) {
		r->c.bytes_rejected += r->fill;
		r->fill = 0;
		r->next_seq++;
	}
	if (restart_seq) {
		r->next_seq = 0;
		/* seqs start again: batches in flight could be taken for others */
		r->inflight = 0;
		r->batch_gen++;
	}
}

void ring_clear(struct vmt_ring *r)
{
	r->count = 0;
	r->fill = 0;
	frames_clear(&r->fr);
	r->inflight = 0;
	r->batch_gen++;
}

uint64_t ring_stream_bytes(const struct vmt_ring *r)
{
	return r->next_seq * r->layout.page_size + r->fill;
}

const uint8_t *ring_page(const struct vmt_ring *r, uint32_t i)
{
	return r->slots[slot_index(r, i)].page;
}

const struct vmt_ring_slot *ring_slot(const struct vmt_ring *r, uint32_t i)
{
	return &r->slots[slot_index(r, i)];
}

int ring_hold(struct vmt_ring *r, uint32_t first, uint32_t end, struct vmt_ring_hold *h)
{
	uint32_t ps = r->layout.page_size, nruns = 0;
	const uint8_t *prev = NULL;

	memset(h, 0, sizeof(*h));
	if (first > end || end > r->count)
		return -EINVAL;
	for (uint32_t i = first; i < end; i++) {
		const uint8_t *p = ring_page(r, i);
		nruns += !prev || p != prev + ps;
		prev = p;
	}
	h->runs = calloc(nruns ? nruns : 1, sizeof(*h->runs));
	if (!h->runs)
		return -ENOMEM;
	for (uint32_t i = first; i < end; i++) {
		uint32_t s = slot_index(r, i);
		const uint8_t *p = r->slots[s].page;
		struct vmt_iovec *run = &h->runs[h->nruns ? h->nruns - 1 : 0];

		if (p == home_page(r, s))
			r->rm->holds[s]++;
		else
			pagepool_hold(r->pool, p);
		if (h->nruns && (const uint8_t *)run->base + run->len == p)
			run->len += ps;
		else
			h->runs[h->nruns++] = (struct vmt_iovec){ p, ps };
	}
	h->rm = r->rm;
	h->rm->refs++;
	h->pool = r->pool;
	h->page_size = ps;
	return 0;
}

void ring_release(struct vmt_ring_hold *h)
{
	struct vmt_ringmem *rm = h->rm;

	for (uint32_t k = 0; rm && k < h->nruns; k++)
		for (size_t off = 0; off < h->runs[k].len; off += h->page_size) {
			uint8_t *p = (uint8_t *)h->runs[k].base + off;

			if (p >= rm->mem && p < rm->mem + rm->bytes)
				rm->holds[(size_t)(p - rm->mem) / h->page_size]--;
			else
				pagepool_release(h->pool, p, h->page_size);
		}
	ringmem_unref(rm);
	free(h->runs);
	memset(h, 0, sizeof(*h));
}

void ring_settle(struct vmt_ring *r)
{
	r->frames_blocked = false;
	ring_settle_slots(r);
}

void ring_settle_slots(struct vmt_ring *r)
{
	uint32_t ps = r->layout.page_size;
	for (uint32_t s = 0; r->displaced && s <= r->nr_pages; s++) {
		struct vmt_ring_slot *sl = &r->slots[s];
		uint8_t *home = home_page(r, s);

		if (sl->page == home || r->rm->holds[s])
			continue;
		memcpy(home, sl->page, ps);
		pagepool_unslot(r->pool, sl->page, ps);
		sl->page = home;
		r->displaced--;
	}
}

/* A counter added to the ring needs a tag in the sample format (docs/FORMAT.md). */
_Static_assert(sizeof(struct vmt_ring_counters) == sizeof(struct vmt_sample_counters),
	       "ring and sample counters differ");

void ring_counters_to_sample(const struct vmt_ring_counters *c, struct vmt_sample_counters *out)
{
	*out = (struct vmt_sample_counters){
		.bytes_in = c->bytes_in,
		.pages_in = c->pages_in,
		.pages_overwritten = c->pages_overwritten,
		.pages_guest_lost = c->pages_guest_lost,
		.events_guest_lost = c->events_guest_lost,
		.pages_rejected = c->pages_rejected,
		.bytes_rejected = c->bytes_rejected,
		.ts_backwards = c->ts_backwards,
		.events_in = c->events_in,
		.frames_made = c->frames_made,
		.pages_stored_raw = c->pages_stored_raw,
		.frame_bytes_in = c->frame_bytes_in,
		.frame_bytes_out = c->frame_bytes_out,
		.frames_overwritten = c->frames_overwritten,
	};
}
