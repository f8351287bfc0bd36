/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring.h"
#include "sample.h"
#include "tcode.h"
#include "util.h"

_Static_assert(sizeof(struct vmt_ring_slot) == VMT_RINGMEM_SLOT_BYTES, "a slot record is version 2's");
_Static_assert(sizeof(struct vmt_ring_counters) == VMT_RINGMEM_COUNTERS * sizeof(uint64_t),
	       "the header holds every ring counter");

/* What a ring keeps outside its memfd: per slot its page pointer and holds,
 * per frame descriptor its holds. */
static uint64_t private_bytes(uint64_t nslots, uint64_t cap)
{
	return nslots * (sizeof(uint8_t *) + sizeof(uint32_t)) + cap * sizeof(uint32_t);
}

uint64_t ring_mem_size(uint32_t nr_pages, uint32_t page_size)
{
	struct vmt_ringmem_geom g = { .page_size = page_size, .nslots = nr_pages + 1 };
	struct vmt_ringmem_layout l;

	if (nr_pages == UINT32_MAX)
		return UINT64_MAX;
	ringmem_layout(&g, &l);
	return l.size + private_bytes(g.nslots, 0);
}

int ring_attach(struct vmt_ring *r, struct vmt_ringmem *rm, const struct vmt_page_layout *l)
{
	uint32_t nslots = rm->shadow.nr_pages + 1;
	int err;

	memset(r, 0, sizeof(*r));
	r->pages = calloc(nslots, sizeof(*r->pages));
	if (!r->pages)
		return -ENOMEM;
	if (rm->shadow.desc_cap) {
		err = frames_init_in(&r->fr, rm);
		if (err < 0) {
			free(r->pages);
			r->pages = NULL;
			return err;
		}
	}
	for (uint32_t i = 0; i < nslots; i++)
		r->pages[i] = rm->mem + (size_t)i * l->page_size;
	r->rm = rm;
	r->slots = (struct vmt_ring_slot *)(rm->base + rm->shadow.slots_off);
	r->layout = *l;
	r->nr_pages = rm->shadow.nr_pages;
	r->mem_pages = r->nr_pages;	/* a compressed ring's caller sets ring_size's */
	r->batch = rm->shadow.batch;
	return 0;
}

/* A new memfd for nr_pages raw pages and, if cap, a frame store. */
static int ring_init_mem(struct vmt_ring *r, uint32_t nr_pages, const struct vmt_page_layout *l,
			 uint32_t cap, size_t arena, uint32_t batch)
{
	struct vmt_ringmem_geom g = { .page_size = l->page_size, .nslots = nr_pages + 1,
				      .desc_cap = cap, .arena = arena };
	struct vmt_ringmem_hdr *h;
	struct vmt_ringmem *rm;
	int err;

	memset(r, 0, sizeof(*r));
	if (!nr_pages || nr_pages == UINT32_MAX || !l->page_size)
		return -EINVAL;
	err = ringmem_new(&rm, &g);
	if (err < 0)
		return err;
	h = &rm->shadow;
	h->ts_offset = l->ts_offset;
	h->commit_offset = l->commit_offset;
	h->commit_size = l->commit_size;
	h->data_offset = l->data_offset;
	h->batch = batch;
	h->flags = cap ? VMT_RINGMEM_COMPRESSED : 0;
	ringmem_fixed_changed(rm);
	err = ring_attach(r, rm, l);
	if (err < 0) {
		ringmem_unref(rm);
		return err;
	}
	ring_publish(r);
	return 0;
}

int ring_init(struct vmt_ring *r, uint32_t nr_pages, const struct vmt_page_layout *l)
{
	return ring_init_mem(r, nr_pages, l, 0, 0, 0);
}

void ring_publish(struct vmt_ring *r)
{
	struct vmt_ringmem_hdr *h = &r->rm->shadow;

	h->head = r->head;
	h->count = r->count;
	h->fill = r->fill;
	h->next_seq = r->next_seq;
	h->last_ts = r->last_ts;
	h->fr_first = r->fr.first;
	h->fr_dead = r->fr.dead;
	h->fr_count = r->fr.count;
	h->fr_head = r->fr.head;
	memcpy(h->counters, &r->c, sizeof(h->counters));
	h->reserve_id = r->pool ? r->pool->id : 0;
	ringmem_publish(r->rm);
}

void ring_describe(struct vmt_ring *r, const char *guest, uint32_t cpu, uint32_t ncpus,
		   uint32_t aux_version, uint64_t aux_id)
{
	struct vmt_ringmem_hdr *h = &r->rm->shadow;

	memset(h->guest, 0, sizeof(h->guest));
	snprintf(h->guest, sizeof(h->guest), "%s", guest);
	h->cpu = cpu;
	h->ncpus = ncpus;
	h->aux_version = aux_version;
	h->aux_id = aux_id;
	ringmem_fixed_changed(r->rm);
	ring_publish(r);
}

static uint8_t *home_page(const struct vmt_ring *r, uint32_t s)
{
	return r->rm->mem + (size_t)s * r->layout.page_size;
}

static uint32_t slot_index(const struct vmt_ring *r, uint32_t i)
{
	/* the oldest valid page sits count slots behind the fill slot */
	uint32_t n = r->nr_pages + 1;

	return (r->head + n - r->count + i) % n;
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

/* Bytes a compressed ring of raw slots, cap descriptors and an arena takes. */
static uint64_t plan_bytes(uint32_t raw, uint32_t page_size, uint32_t cap, size_t arena)
{
	struct vmt_ringmem_geom g = { .page_size = page_size, .nslots = raw + 1, .desc_cap = cap,
				      .arena = arena };
	struct vmt_ringmem_layout l;

	ringmem_layout(&g, &l);
	return l.size + private_bytes((uint64_t)raw + 1, cap);
}

bool ring_plan_compressed(uint32_t nr_pages, uint32_t page_size, struct vmt_ring_plan *p)
{
	uint32_t b = VMT_MIN(VMT_MAX(nr_pages / 64, BATCH_MIN), BATCH_MAX);
	uint32_t raw = VMT_MAX(2 * b + 2 * VMT_RING_BURST_PAGES, nr_pages / RAW_SHARE);
	uint64_t total, base;
	size_t arena;
	uint32_t cap;

	memset(p, 0, sizeof(*p));
	if (raw > nr_pages / 2)
		return false;
	/* the memory of the raw ring of nr_pages, to a page: the frames get
	 * what the slots and the descriptors leave, in whole pages */
	total = ring_mem_size(nr_pages, page_size);
	cap = frames_cap(total - ring_mem_size(raw, page_size), (size_t)b * page_size);
	base = plan_bytes(raw, page_size, cap, 0);
	if (base >= total)
		return false;
	arena = (size_t)((total - base) & ~(uint64_t)4095);
	*p = (struct vmt_ring_plan){ .raw_pages = raw, .batch = b, .arena = arena, .cap = cap };
	return true;
}

uint64_t ring_bytes_planned(uint32_t nr_pages, uint32_t page_size, bool compressed)
{
	struct vmt_ring_plan p;

	if (!compressed || !ring_plan_compressed(nr_pages, page_size, &p))
		return ring_mem_size(nr_pages, page_size);
	return plan_bytes(p.raw_pages, page_size, p.cap, p.arena);
}

int ring_init_compressed(struct vmt_ring *r, uint32_t nr_pages, const struct vmt_page_layout *l)
{
	struct vmt_ring_plan p;
	int err;

	if (!ring_plan_compressed(nr_pages, l->page_size, &p))
		return ring_init(r, nr_pages, l);
	err = ring_init_mem(r, p.raw_pages, l, p.cap, p.arena, p.batch);
	if (err == 0)
		r->mem_pages = nr_pages;
	return err;
}

uint64_t ring_bytes(const struct vmt_ring *r)
{
	return r->rm->size + private_bytes((uint64_t)r->nr_pages + 1, r->fr.cap);
}

/*
 * n pages leave the raw slots at the oldest end. The compressor's workers
 * read the position after copying a batch out (ring_batch_intact): it is
 * stored before the fill writes a byte into a slot it freed, as a
 * seqlock's writer bumps its count before the data.
 */
static void ring_gone(struct vmt_ring *r, uint32_t n)
{
	r->tail += n;
	__atomic_store_n(&r->rm->gone, r->tail, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

/* Where the next batch starts: after those claimed, at the oldest page. */
static uint64_t batch_start(const struct vmt_ring *r)
{
	return VMT_MAX(r->claim, r->tail);
}

bool ring_batch_due(const struct vmt_ring *r)
{
	return r->fr.fm && !r->frames_blocked && batch_start(r) + 2 * r->batch <= r->tail + r->count;
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

int ring_batch_begin(struct vmt_ring *r, struct vmt_ring_batch *b)
{
	uint32_t ps = r->layout.page_size, first;
	uint64_t start;

	memset(b, 0, sizeof(*b));
	if (!ring_batch_due(r))
		return -EAGAIN;
	start = batch_start(r);
	first = (uint32_t)(start - r->tail);
	for (uint32_t i = first; i < first + r->batch; i++) {
		uint32_t s = slot_index(r, i);
		const uint8_t *p = r->pages[s];
		struct vmt_iovec *run = &b->runs[b->nruns ? b->nruns - 1 : 0];

		/* a reserve page goes back to the pool when its slot settles:
		 * only the ring's own memory is read off the loop */
		if (p != home_page(r, s))
			return -EBUSY;
		if (b->nruns && (const uint8_t *)run->base + run->len == p)
			run->len += ps;
		else
			b->runs[b->nruns++] = (struct vmt_iovec){ p, ps };
	}
	batch_header(r, first, r->batch, &b->h);
	b->rm = r->rm;
	ringmem_ref(r->rm);
	b->pos = start;
	b->gen = r->batch_gen;
	b->page_size = ps;
	r->claim = start + r->batch;
	return 0;
}

bool ring_batch_intact(const struct vmt_ring_batch *b)
{
	/* the copy's reads are done before the position is read */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return __atomic_load_n(&b->rm->gone, __ATOMIC_RELAXED) <= b->pos;
}

void ring_batch_put(struct vmt_ring_batch *b)
{
	ringmem_unref(b->rm);
	b->rm = NULL;
}

/* n oldest pages are in a frame now (frames_room counted what it pushed out). */
static void batch_stored(struct vmt_ring *r, uint32_t n, uint64_t bytes)
{
	r->count -= n;
	ring_gone(r, n);
	r->c.frames_made++;
	r->c.frame_bytes_in += (uint64_t)n * r->layout.page_size;
	r->c.frame_bytes_out += bytes;
}

/*
 * Room for len bytes of frame; the header stops covering the frames pushed
 * out before their bytes are written over. -EBUSY: a dump holds them.
 */
static int frames_room(struct vmt_ring *r, size_t len, size_t *pos)
{
	uint32_t first = r->fr.first;
	struct vmt_frames_evicted ev;
	int err = frames_make_room(&r->fr, len, pos, &ev);

	r->c.frames_overwritten += ev.frames;
	r->c.pages_overwritten += ev.pages;
	if (r->fr.first != first)
		ring_publish(r);
	return err;
}

/* A batch could not go in for want of room or a frame: it and the ones
 * after it are claimed again (gen), their pages still raw. */
static void batch_reset(struct vmt_ring *r)
{
	r->claim = r->tail;
	r->batch_gen++;
}

bool ring_batch_end(struct vmt_ring *r, const struct vmt_ring_batch *b, const uint8_t *payload,
		    ssize_t len, uint32_t crc)
{
	struct vmt_iovec one = { payload, len > 0 ? (size_t)len : 0 };
	size_t pos;
	int err;

	if (b->gen != r->batch_gen)
		return false;
	/* its pages left the slots meanwhile: stored as they were (ring_spill)
	 * or overwritten, counted either way */
	if (b->pos < r->tail || len == -ECANCELED)
		return false;
	/* batches come back in order (compress.c): the first that cannot go
	 * in leaves its pages raw and the later ones too (gen), to be batched
	 * again */
	if (len <= 0 || b->pos != r->tail || b->h.npages > r->count ||
	    ring_slot(r, 0)->seq != b->h.first_seq) {
		batch_reset(r);
		return false;
	}
	err = frames_room(r, one.len, &pos);
	if (err < 0) {
		if (err == -EBUSY)
			r->frames_blocked = true;
		batch_reset(r);
		return false;
	}
	frames_put(&r->fr, pos, &b->h, &one, 1, b->h.codec == VMT_FRAME_NONE ? 0 : crc);
	batch_stored(r, b->h.npages, (uint64_t)len);
	ring_publish(r);
	return true;
}

/*
 * The raw slots are full: the oldest batch goes into the frame store as it
 * is. A batch claimed for the compressor is passed by (ring_batch_intact,
 * ring_batch_end). Returns false when the store is blocked by a dump (then
 * the oldest page is overwritten).
 */
static bool ring_spill(struct vmt_ring *r)
{
	uint32_t n = VMT_MIN(r->batch, r->count), ps = r->layout.page_size, k = 0;
	struct vmt_iovec iov[BATCH_MAX];
	struct vmt_frame_hdr h;
	size_t pos;

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
	if (frames_room(r, (size_t)n * ps, &pos) < 0) {
		r->frames_blocked = true;
		return false;
	}
	/* a stored frame's pages are checked one by one by a successor: no CRC
	 * of 256 KiB on the loop */
	frames_put(&r->fr, pos, &h, iov, k, 0);
	batch_stored(r, n, (uint64_t)n * ps);
	r->c.pages_stored_raw += n;
	return true;
}

void ring_free(struct vmt_ring *r)
{
	schema_unref(r->schema);
	frames_free(&r->fr);
	for (uint32_t s = 0; r->displaced && s <= r->nr_pages; s++)
		if (r->pages[s] != home_page(r, s)) {
			pagepool_unslot(r->pool, r->pages[s], r->layout.page_size);
			r->displaced--;
		}
	ringmem_unref(r->rm);
	free(r->pages);
	memset(r, 0, sizeof(*r));
}

static bool slot_held(const struct vmt_ring *r, uint32_t s)
{
	const uint8_t *p = r->pages[s];

	return p == home_page(r, s) ? r->rm->holds[s] > 0 : pagepool_holds(r->pool, p) > 0;
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
	uint8_t **page = &r->pages[r->head];

	if (!r->fill && slot_held(r, r->head)) {
		uint8_t *p = pagepool_get(r->pool, r->layout.page_size);

		if (!p) {
			*room = 0;
			return NULL;
		}
		/* the held page stays the dump's; a reserve page held by a
		 * later dump is freed when that dump is written */
		if (*page == home_page(r, r->head))
			r->displaced++;
		else
			pagepool_unslot(r->pool, *page, r->layout.page_size);
		*page = p;
		/* a hand-over's fill is not in the memfd either */
		r->slots[r->head].away = pagepool_offset(r->pool, p);
		r->slots[r->head].flags |= VMT_SLOT_AWAY;
	}
	*room = r->layout.page_size - r->fill;
	return *page + r->fill;
}

static int ring_complete(struct vmt_ring *r)
{
	const uint8_t *page = r->pages[r->head];
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
	s->away = page != home_page(r, r->head) ? pagepool_offset(r->pool, page) : 0;
	s->flags = (info.missed_flag ? VMT_SLOT_MISSED : 0) |
		   (page != home_page(r, r->head) ? VMT_SLOT_AWAY : 0);
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
		ring_gone(r, 1);
	} else if (r->count < r->nr_pages) {
		r->count++;
	}
	r->head = (r->head + 1) % (r->nr_pages + 1);
	/* before a byte goes into the new fill slot, which the header covered
	 * when the ring was full */
	ring_publish(r);
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
		batch_reset(r);
	}
	ring_publish(r);
}

void ring_set_layout(struct vmt_ring *r, const struct vmt_page_layout *l)
{
	r->layout = *l;
	ring_reset_stream(r, 0);
}

void ring_set_pool(struct vmt_ring *r, struct vmt_pagepool *pool)
{
	r->pool = pool;
}

void ring_reject_bytes(struct vmt_ring *r, uint64_t n)
{
	r->c.bytes_rejected += n;
}

void ring_take_torn(struct vmt_ring *dst, const struct vmt_ring *src)
{
	*dst = *src;
	dst->c.bytes_rejected += dst->fill;
	dst->fill = 0;
}

void ring_clear(struct vmt_ring *r)
{
	ring_gone(r, r->count);
	r->count = 0;
	r->fill = 0;
	/* a new boot's clock starts over: its first page is not time going back */
	r->last_ts = 0;
	frames_clear(&r->fr);
	batch_reset(r);
	/* the pages belonged to the aux version before: a successor must not take them */
	ring_publish(r);
}

uint64_t ring_stream_bytes(const struct vmt_ring *r)
{
	return r->next_seq * r->layout.page_size + r->fill;
}

const uint8_t *ring_page(const struct vmt_ring *r, uint32_t i)
{
	return r->pages[slot_index(r, i)];
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
		const uint8_t *p = r->pages[s];
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
	uint32_t ps = r->layout.page_size;

	r->frames_blocked = false;
	for (uint32_t s = 0; r->displaced && s <= r->nr_pages; s++) {
		uint8_t *home = home_page(r, s);

		if (r->pages[s] == home || r->rm->holds[s])
			continue;
		memcpy(home, r->pages[s], ps);
		/* the page is whole in the memfd before its record says so, and
		 * the record no longer names the reserve page before the free
		 * list writes into it */
		__atomic_thread_fence(__ATOMIC_RELEASE);
		r->slots[s].flags &= ~VMT_SLOT_AWAY;
		__atomic_thread_fence(__ATOMIC_RELEASE);
		pagepool_unslot(r->pool, r->pages[s], ps);
		r->pages[s] = home;
		r->displaced--;
	}
}
