/* SPDX-License-Identifier: MIT */
/*
 * Compressed rings: older pages go into frames and come back byte-exact,
 * in order; the frame store overwrites frame by frame; a late compressor
 * leaves pages raw rather than losing them; frames a dump holds are never
 * overwritten; every page that came in is accounted for.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "compress.h"
#include "cringtest.h"
#include "frame.h"
#include "frames.h"
#include "pagegen.h"
#include "ring.h"
#include "testutil.h"
#include "util.h"

#define PS 4096
#define NPAGES 512	/* the memory of 512 pages: 176 raw, batches of 8, the rest frames */
static struct vmt_page_layout L;
static struct vmt_ring R;
static struct vmt_frame_ctx *Z;

static void setup(void)
{
	page_layout_default(&L, PS);
	ck_assert_int_eq(ring_init_compressed(&R, NPAGES, &L), 0);
	ck_assert_ptr_nonnull(R.fr.fm);
	Z = frame_ctx_new(VMT_FRAME_ZSTD, 1, VMT_RING_BATCH_MAX_BYTES);
	ck_assert_ptr_nonnull(Z);
}

static void teardown(void)
{
	ring_free(&R);
	frame_ctx_free(Z);
}

/* page k: base time k * 1e6, k % 50 + 1 events: compresses well */
static void make(uint8_t *p, uint64_t k)
{
	pagegen_simple(p, PS, k * 1000000, (uint32_t)(k % 50 + 1));
}

static int try_push(uint64_t k, bool compress)
{
	uint8_t p[PS];
	int r;

	make(p, k);
	r = ring_push(&R, p);
	if (r == 1 && compress && ring_batch_due(&R))
		cring_compress_batch(&R, Z);
	return r;
}

static void push(uint64_t k, bool compress)
{
	ck_assert_int_eq(try_push(k, compress), 1);
}

/* Every page of the window, frames then raw, is page seq as made, in order. */
static uint64_t check_window(const struct vmt_ring *r)
{
	uint8_t want[PS], *buf = malloc((size_t)VMT_FRAME_MAX_PAGES * PS);
	uint64_t next = UINT64_MAX, n = 0;
	char why[160];

	for (uint32_t i = 0; i < r->fr.count; i++) {
		const struct vmt_frame_desc *d = frames_at(&r->fr, i);

		ck_assert_int_eq(frame_decode(d->h.codec, frames_payload(&r->fr, d), d->len, buf,
					      (size_t)d->h.npages * PS, why, sizeof(why)), 0);
		if (next != UINT64_MAX)
			ck_assert_uint_eq(d->h.first_seq, next);
		for (uint32_t j = 0; j < d->h.npages; j++) {
			make(want, d->h.first_seq + j);
			ck_assert_mem_eq(buf + (size_t)j * PS, want, PS);
		}
		ck_assert_uint_eq(d->h.first_ts, d->h.first_seq * 1000000);
		next = d->h.first_seq + d->h.npages;
		n += d->h.npages;
	}
	for (uint32_t i = 0; i < r->count; i++) {
		if (next != UINT64_MAX)
			ck_assert_uint_eq(ring_slot(r, i)->seq, next);
		make(want, ring_slot(r, i)->seq);
		ck_assert_mem_eq(ring_page(r, i), want, PS);
		next = ring_slot(r, i)->seq + 1;
		n++;
	}
	free(buf);
	ck_assert_uint_eq(n, ring_window_pages(r));
	return n;
}

/* Every page that came in is in the window or counted as overwritten. */
static void check_accounting(const struct vmt_ring *r)
{
	ck_assert_uint_eq(r->c.pages_in, ring_window_pages(r) + r->c.pages_overwritten);
}

START_TEST(older_pages_become_frames_in_order)
{
	for (uint64_t k = 0; k < 400; k++)
		push(k, true);
	ck_assert_uint_gt(R.fr.count, 0);
	ck_assert_uint_eq(R.c.pages_overwritten, 0);
	ck_assert_uint_eq(check_window(&R), 400);
	ck_assert_uint_eq(R.c.frames_made, R.fr.count);
	ck_assert_uint_eq(R.c.frame_bytes_in, R.fr.pages * PS);
	ck_assert_uint_eq(R.c.frame_bytes_out, R.fr.stored);
	ck_assert_uint_lt(R.fr.stored * 4, R.fr.pages * PS);	/* these pages compress */
	check_accounting(&R);
}
END_TEST

START_TEST(the_store_overwrites_frame_by_frame)
{
	uint64_t held_before = 0;

	for (uint64_t k = 0; k < 20000; k++) {
		push(k, true);
		/* the window never shrinks once full: only whole frames go */
		if (R.c.frames_overwritten)
			ck_assert_uint_ge(ring_window_pages(&R) + R.batch, held_before);
		held_before = ring_window_pages(&R);
	}
	ck_assert_uint_gt(R.c.frames_overwritten, 0);
	ck_assert_uint_eq(R.c.pages_stored_raw, 0);
	/* far more than the 512 pages the same memory holds raw */
	ck_assert_uint_gt(ring_window_pages(&R), 4 * NPAGES);
	check_window(&R);
	check_accounting(&R);
}
END_TEST

/* No compressor at all: the raw slots spill their oldest batch into the
 * store as it is; the window is about what the memory holds raw. */
START_TEST(a_late_compressor_leaves_pages_raw)
{
	for (uint64_t k = 0; k < 3000; k++)
		push(k, false);
	ck_assert_uint_gt(R.c.pages_stored_raw, 0);
	ck_assert_uint_eq(R.c.frames_made, R.c.pages_stored_raw / R.batch);
	ck_assert_uint_ge(ring_window_pages(&R), NPAGES * 7 / 10);
	check_window(&R);
	check_accounting(&R);
}
END_TEST

/* The slots fill while two batches are being compressed: the first is
 * stored as it is and its late frame ignored; the second's frame is taken
 * after it, in order. A batch stored before a worker copied it is skipped
 * unread. */
START_TEST(a_batch_overtaken_is_dropped_not_doubled)
{
	static uint8_t out[2][1 << 20];
	struct vmt_ring_batch b[3];
	uint64_t k = 0;
	ssize_t n[2];

	while (R.count < 3 * R.batch)
		push(k++, false);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(ring_batch_begin(&R, &b[i]), 0);
		ck_assert(ring_batch_intact(&b[i]));
		b[i].h.codec = VMT_FRAME_ZSTD;
		n[i] = cring_compress_copy(&b[i], Z, out[i], sizeof(out[i]));
		ck_assert_int_gt(n[i], 0);
	}
	ck_assert_uint_eq(R.claim - R.tail, 2 * R.batch);
	while (!R.c.pages_stored_raw)
		push(k++, false);
	ck_assert_uint_eq(R.claim - R.tail, R.batch);
	/* what the compressor's thread sees: the first is not worth doing */
	ck_assert(!ring_batch_intact(&b[0]));
	ck_assert(ring_batch_intact(&b[1]));
	for (int i = 0; i < 2; i++) {
		ck_assert(ring_batch_end(&R, &b[i], out[i], n[i], crc32c(0, out[i], (size_t)n[i])) == (i == 1));
		ring_batch_put(&b[i]);
	}
	ck_assert_uint_eq(R.c.frames_made, 2);
	ck_assert_uint_eq(R.c.pages_stored_raw, R.batch);
	ck_assert_uint_eq(frames_at(&R.fr, 0)->h.codec, VMT_FRAME_NONE);
	ck_assert_uint_eq(frames_at(&R.fr, 1)->h.codec, VMT_FRAME_ZSTD);
	check_window(&R);
	check_accounting(&R);
	/* claimed, then stored as it was before the copy: skipped */
	while (!ring_batch_due(&R))
		push(k++, false);
	ck_assert_int_eq(ring_batch_begin(&R, &b[2]), 0);
	b[2].h.codec = VMT_FRAME_ZSTD;
	for (uint32_t i = 0; i < R.nr_pages; i++)
		push(k++, false);
	ck_assert_int_eq(cring_compress_copy(&b[2], Z, out[0], sizeof(out[0])), -ECANCELED);
	ck_assert(!ring_batch_end(&R, &b[2], NULL, -ECANCELED, 0));
	ring_batch_put(&b[2]);
	check_window(&R);
	check_accounting(&R);
}
END_TEST

/*
 * A dump holds every frame: none is overwritten while it does. The ring
 * goes on with its raw slots, overwriting their oldest page (counted), as
 * a raw ring does while a dump holds its pages: reading never waits for
 * the frames. Once they are released, frames are made again.
 */
START_TEST(held_frames_are_never_overwritten)
{
	struct vmt_frames_hold fh;
	uint8_t *copy;
	uint64_t k = 0, made, gone;

	while (!R.c.frames_overwritten)	/* the store full */
		push(k++, true);
	ck_assert_int_eq(frames_hold(&R.fr, 0, R.fr.count, &fh), 0);
	copy = malloc(R.fr.fm->bytes);
	memcpy(copy, R.fr.fm->mem, R.fr.fm->bytes);
	for (uint64_t end = k + 3 * R.nr_pages; k < end; k++)
		push(k, true);
	ck_assert(R.frames_blocked);
	ck_assert_uint_eq(R.count, R.nr_pages);
	for (uint32_t i = 0; i < fh.n; i++)
		ck_assert_mem_eq(fh.frames[i].payload, copy + (fh.frames[i].payload - R.fr.fm->mem),
				 fh.frames[i].len);
	check_accounting(&R);
	gone = R.c.frames_overwritten + R.fr.count;	/* once every frame before now is out */
	frames_release(&fh);
	ring_settle(&R);
	made = R.c.frames_made;
	while (R.c.frames_overwritten < gone)
		push(k++, true);
	ck_assert_uint_gt(R.c.frames_made, made);
	check_window(&R);	/* the pages overwritten meanwhile have been pushed out since */
	check_accounting(&R);
	free(copy);
}
END_TEST

/* Frames held by a dump outlive a clear and the ring itself. */
START_TEST(held_frames_outlive_clear_and_free)
{
	struct vmt_frames_hold fh;
	uint8_t buf[4 * PS * 16], want[PS];
	char why[160];

	for (uint64_t k = 0; k < 400; k++)
		push(k, true);
	ck_assert_int_eq(frames_hold(&R.fr, 0, 1, &fh), 0);
	ring_clear(&R);
	ck_assert_uint_eq(ring_window_pages(&R), 0);
	for (uint64_t k = 1000; k < 9000; k++)
		push(k, true);
	ring_free(&R);
	ck_assert_uint_le(fh.frames[0].h.npages * PS, sizeof(buf));
	ck_assert_int_eq(frame_decode(fh.frames[0].h.codec, fh.frames[0].payload, fh.frames[0].len, buf,
				      (size_t)fh.frames[0].h.npages * PS, why, sizeof(why)), 0);
	make(want, fh.frames[0].h.first_seq);
	ck_assert_mem_eq(buf, want, PS);
	frames_release(&fh);
	ck_assert_int_eq(ring_init_compressed(&R, NPAGES, &L), 0);	/* for teardown */
}
END_TEST

/* A frame into the store as ring_batch_end() puts one: room, then the frame. */
static int store_frame(struct vmt_frames *f, const struct vmt_frame_hdr *h,
		       const struct vmt_iovec *one, struct vmt_frames_evicted *ev)
{
	size_t pos;
	int r = frames_make_room(f, one->len, &pos, ev);

	if (r == 0)
		frames_put(f, pos, h, one, 1, 0);
	return r;
}

/* The store alone: random frame sizes never overlap a live frame, FIFO order. */
START_TEST(store_places_frames_without_overlap)
{
	struct vmt_frames f;
	uint8_t payload[5000];
	uint64_t seq = 0;

	ck_assert_int_eq(frames_init(&f, 64 * 1024, frames_cap(64 * 1024, 64 * 1024)), 0);
	srand(7);
	for (int n = 0; n < 20000; n++) {
		struct vmt_frame_hdr h = { .codec = VMT_FRAME_NONE, .npages = 1, .first_seq = seq++ };
		struct vmt_iovec one = { payload, (size_t)(rand() % 5000) + 1 };
		struct vmt_frames_evicted ev;

		memset(payload, (int)(h.first_seq & 0xff), one.len);
		ck_assert_int_eq(store_frame(&f, &h, &one, &ev), 0);
		for (uint32_t i = 0; i < f.count; i++) {
			const struct vmt_frame_desc *d = frames_at(&f, i);
			const uint8_t *p = frames_payload(&f, d);

			ck_assert_uint_le(d->off + d->len, f.fm->bytes);
			ck_assert_uint_eq(d->h.first_seq, seq - f.count + i);
			/* its bytes are still its own: nothing overwrote them */
			ck_assert_uint_eq(p[0], d->h.first_seq & 0xff);
			ck_assert_uint_eq(p[d->len - 1], d->h.first_seq & 0xff);
		}
	}
	frames_free(&f);
}
END_TEST

START_TEST(memory_stays_that_of_the_raw_ring)
{
	uint64_t raw = ring_mem_size(16384, PS);
	struct vmt_ring big;

	ck_assert_int_eq(ring_init_compressed(&big, 16384, &L), 0);
	ck_assert_ptr_nonnull(big.fr.fm);
	ck_assert_uint_eq(ring_bytes(&big), ring_bytes_planned(16384, PS, true));
	ck_assert_uint_le(ring_bytes(&big), raw);
	ck_assert_uint_gt(ring_bytes(&big), raw - 4096);	/* to a page */
	ck_assert_uint_eq(big.batch, 64);
	ring_free(&big);
	/* too small to compress (the slots would take more than half): a raw ring */
	ck_assert_int_eq(ring_init_compressed(&big, 256, &L), 0);
	ck_assert_ptr_null(big.fr.fm);
	ck_assert_uint_eq(big.nr_pages, 256);
	ring_free(&big);
}
END_TEST

/*
 * Guests share the compressor's 16 jobs: nflat of them stream flat out
 * (together at least twice the batches the worker can make), B at a
 * modest pace.
 * They may not hold the jobs that B's batches need, nor get ahead of B at
 * the worker: B's pages are all compressed, their excess is what goes raw.
 * The worker runs on this thread, one batch per step: no timing.
 */
static void share_run(uint32_t nflat)
{
	static struct vmt_ring A[20], B;
	struct vmt_compressor c;
	sd_event *e = NULL;
	uint64_t ka[20] = { 0 }, kb = 0, raw = 0;
	uint8_t p[PS];

	ck_assert_uint_le(nflat, 20);
	ck_assert_int_ge(sd_event_new(&e), 0);
	for (uint32_t g = 0; g < nflat; g++)
		ck_assert_int_eq(ring_init_compressed(&A[g], NPAGES, &L), 0);
	ck_assert_int_eq(ring_init_compressed(&B, NPAGES, &L), 0);
	ck_assert_int_eq(compressor_init(&c, e, 16, 1, VMT_RING_BATCH_MAX_BYTES), 0);
	ck_assert_int_eq(compressor_run_manual(&c), 0);
	for (uint32_t step = 0; step < 3000; step++) {
		for (uint32_t n = 0; n < VMT_MAX(2 * B.batch, nflat); n++) {
			uint32_t g = n % nflat;
			int r;

			make(p, ka[g]);
			r = ring_push(&A[g], p);
			if (r != -ENOBUFS) {	/* -ENOBUFS: its slots held, the reader pauses */
				ck_assert_int_eq(r, 1);
				ka[g]++;
			}
			compressor_poke(&c, &A[g], &A[g], VMT_FRAME_ZSTD, 1);
		}
		if (step % 4 == 0) {
			make(p, kb++);
			ck_assert_int_eq(ring_push(&B, p), 1);
			compressor_poke(&c, &B, &B, VMT_FRAME_ZSTD, 1);
		}
		compressor_step(&c);
		compressor_collect(&c);
	}
	for (uint32_t g = 0; g < nflat; g++)
		raw += A[g].c.pages_stored_raw;
	ck_assert_uint_gt(raw, 0);	/* their own excess */
	ck_assert_uint_eq(B.c.pages_stored_raw, 0);
	ck_assert_uint_gt(B.c.frames_made, kb / B.batch / 2);
	compressor_stop(&c);
	for (uint32_t g = 0; g < nflat; g++) {
		check_window(&A[g]);
		ring_free(&A[g]);
	}
	check_window(&B);
	ring_free(&B);
	sd_event_unref(e);
}

START_TEST(a_flat_out_guest_does_not_push_anothers_pages_raw)
{
	share_run(1);
}
END_TEST

/* more guests streaming than there are jobs: B still gets its turn */
START_TEST(twenty_flat_out_guests_do_not_push_anothers_pages_raw)
{
	share_run(20);
}
END_TEST

/*
 * A guest streaming four times faster than the compressor (one batch of
 * eight pages compressed per 32 pages in), with no dump reserve: the fill
 * never waits for a batch being compressed (its claim holds no page), and
 * every page that came in is in the window, in order, or counted.
 */
START_TEST(a_guest_faster_than_the_compressor_loses_nothing_silently)
{
	struct vmt_compressor c;
	sd_event *e = NULL;
	uint32_t steps = 0;
	uint8_t p[PS];
	uint64_t k = 0;

	ck_assert_int_ge(sd_event_new(&e), 0);
	ck_assert_int_eq(compressor_init(&c, e, 16, 1, VMT_RING_BATCH_MAX_BYTES), 0);
	ck_assert_int_eq(compressor_run_manual(&c), 0);
	for (; steps < 400; steps++) {
		for (uint32_t i = 0; i < 4 * R.batch; i++) {
			make(p, k++);
			ck_assert_int_eq(ring_push(&R, p), 1);	/* never -ENOBUFS: no wait */
			compressor_poke(&c, &R, &R, VMT_FRAME_ZSTD, 1);
		}
		/* one batch compressed: those stored meanwhile are skipped
		 * unread, at no cost */
		for (uint64_t sk = c.st.skipped; compressor_step(&c); sk = c.st.skipped) {
			compressor_collect(&c);
			if (c.st.skipped == sk)
				break;
		}
	}
	compressor_stop(&c);
	ck_assert_uint_eq(R.c.pages_in, k);
	ck_assert_uint_gt(R.c.frames_made - R.c.pages_stored_raw / R.batch, 0);
	check_window(&R);
	check_accounting(&R);
	sd_event_unref(e);
}
END_TEST

/* The compressor's jobs that are out, now. */
static uint32_t jobs_out(const struct vmt_compressor *c)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < c->njobs; i++)
		n += c->jobs[i].state != VMT_CJOB_FREE;
	return n;
}

/* Two batches of a ring back the other way round (two workers): the later
 * waits for the earlier, and both are taken, in order. */
START_TEST(batches_back_out_of_order_are_taken_in_order)
{
	struct vmt_compressor c;
	sd_event *e = NULL;
	uint64_t k = 0;

	ck_assert_int_ge(sd_event_new(&e), 0);
	ck_assert_int_eq(compressor_init(&c, e, 16, 2, VMT_RING_BATCH_MAX_BYTES), 0);
	ck_assert_int_eq(compressor_run_manual(&c), 0);
	while (R.count < 3 * R.batch)	/* two batches due: the newest stays raw */
		push(k++, false);
	compressor_poke(&c, &R, &R, VMT_FRAME_ZSTD, 1);
	ck_assert_uint_eq(jobs_out(&c), 2);
	ck_assert(compressor_step_last(&c));
	compressor_collect(&c);
	ck_assert_uint_eq(R.c.frames_made, 0);	/* parked */
	ck_assert(compressor_step(&c));
	compressor_collect(&c);
	ck_assert_uint_eq(R.c.frames_made, 2);
	ck_assert_uint_eq(R.c.pages_overwritten, 0);
	ck_assert_uint_eq(frames_at(&R.fr, 1)->h.first_seq, R.batch);
	compressor_stop(&c);
	check_window(&R);
	check_accounting(&R);
	sd_event_unref(e);
}
END_TEST

/* The workers take the queued batch of the guest served least recently,
 * not the oldest: R's three batches are queued before B's one, and B's is
 * the second taken. */
START_TEST(the_guest_served_least_recently_goes_first)
{
	static struct vmt_ring B;
	struct vmt_compressor c;
	sd_event *e = NULL;
	uint64_t k = 0, kb = 0;
	uint8_t p[PS];

	ck_assert_int_ge(sd_event_new(&e), 0);
	ck_assert_int_eq(ring_init_compressed(&B, NPAGES, &L), 0);
	ck_assert_int_eq(compressor_init(&c, e, 16, 1, VMT_RING_BATCH_MAX_BYTES), 0);
	ck_assert_int_eq(compressor_run_manual(&c), 0);
	while (R.count < 4 * R.batch)	/* three batches due */
		push(k++, false);
	compressor_poke(&c, &R, &R, VMT_FRAME_ZSTD, 1);
	while (B.count < 2 * B.batch) {
		make(p, kb++);
		ck_assert_int_eq(ring_push(&B, p), 1);
	}
	compressor_poke(&c, &B, &B, VMT_FRAME_ZSTD, 1);
	ck_assert_uint_eq(jobs_out(&c), 4);
	ck_assert(compressor_step(&c));
	compressor_collect(&c);
	ck_assert_uint_eq(R.c.frames_made, 1);
	ck_assert_uint_eq(B.c.frames_made, 0);
	ck_assert(compressor_step(&c));
	compressor_collect(&c);
	ck_assert_uint_eq(R.c.frames_made, 1);
	ck_assert_uint_eq(B.c.frames_made, 1);
	while (compressor_step(&c))
		compressor_collect(&c);
	ck_assert_uint_eq(R.c.frames_made, 3);
	compressor_stop(&c);
	check_window(&R);
	check_window(&B);
	ring_free(&B);
	sd_event_unref(e);
}
END_TEST

/*
 * Four workers and four guests, the fill racing the workers' copies (run
 * under ASan): first each batch waited for (its frame is made), then flat
 * out. Whatever the interleaving, every window is the pages as made, in
 * order, and every page is in it or counted.
 */
START_TEST(several_workers_race_the_fill)
{
	static struct vmt_ring G[4];
	struct vmt_compressor c;
	uint64_t kg[4] = { 0 }, made = 0;
	sd_event *e = NULL;
	uint8_t p[PS];

	ck_assert_int_ge(sd_event_new(&e), 0);
	for (uint32_t g = 0; g < 4; g++)
		ck_assert_int_eq(ring_init_compressed(&G[g], NPAGES, &L), 0);
	ck_assert_int_eq(compressor_init(&c, e, 16, 4, VMT_RING_BATCH_MAX_BYTES), 0);
	ck_assert_int_eq(compressor_run(&c), 0);
	for (uint32_t round = 0; round < 40; round++) {
		for (uint32_t g = 0; g < 4; g++)
			for (uint32_t i = 0; i < 2 * G[g].batch; i++) {
				make(p, kg[g]++);
				ck_assert_int_eq(ring_push(&G[g], p), 1);
				compressor_poke(&c, &G[g], &G[g], VMT_FRAME_ZSTD, 1);
			}
		while (jobs_out(&c))	/* the eventfd: a hang is the deadline's */
			ck_assert_int_gt(sd_event_run(e, (uint64_t)test_deadline_ms(30000) * 1000), 0);
	}
	for (uint32_t g = 0; g < 4; g++)
		made += G[g].c.frames_made;
	ck_assert_uint_gt(made, 0);
	for (uint32_t n = 0; n < 20000; n++) {
		uint32_t g = n % 4;

		make(p, kg[g]++);
		ck_assert_int_eq(ring_push(&G[g], p), 1);
		compressor_poke(&c, &G[g], &G[g], VMT_FRAME_ZSTD, 1);
		if (n % 16 == 0)
			compressor_collect(&c);
	}
	compressor_stop(&c);
	ck_assert_uint_eq(jobs_out(&c), 0);
	for (uint32_t g = 0; g < 4; g++) {
		ck_assert_uint_eq(G[g].c.pages_in, kg[g]);
		check_window(&G[g]);
		check_accounting(&G[g]);
		ring_free(&G[g]);
	}
	sd_event_unref(e);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cring");
	TCase *t = tcase_create("core");

	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 120);
	tcase_add_test(t, older_pages_become_frames_in_order);
	tcase_add_test(t, the_store_overwrites_frame_by_frame);
	tcase_add_test(t, a_late_compressor_leaves_pages_raw);
	tcase_add_test(t, a_batch_overtaken_is_dropped_not_doubled);
	tcase_add_test(t, held_frames_are_never_overwritten);
	tcase_add_test(t, held_frames_outlive_clear_and_free);
	tcase_add_test(t, store_places_frames_without_overlap);
	tcase_add_test(t, memory_stays_that_of_the_raw_ring);
	tcase_add_test(t, a_flat_out_guest_does_not_push_anothers_pages_raw);
	tcase_add_test(t, twenty_flat_out_guests_do_not_push_anothers_pages_raw);
	tcase_add_test(t, a_guest_faster_than_the_compressor_loses_nothing_silently);
	tcase_add_test(t, batches_back_out_of_order_are_taken_in_order);
	tcase_add_test(t, the_guest_served_least_recently_goes_first);
	tcase_add_test(t, several_workers_race_the_fill);
	suite_add_tcase(s, t);
	return test_run_suite(s);
}
