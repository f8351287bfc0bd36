/* SPDX-License-Identifier: MIT */
/* ring: overwrite order, page boundaries, counters; pages held by dumps
 * and the reserve that fills in for them. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pagegen.h"
#include "ring.h"
#include "sample.h"
#include "testutil.h"
#include "util.h"

#define PS 4096
static struct vmt_page_layout L;
static struct vmt_ring R;

static void setup(void)
{
	page_layout_default(&L, PS);
	ck_assert_int_eq(ring_init(&R, 8, &L), 0);
}

static void teardown(void)
{
	ring_free(&R);
}

/* page k: base time k * 1e6, k+1 events */
static void make(uint8_t *p, unsigned k)
{
	pagegen_simple(p, PS, (uint64_t)k * 1000000, k % 50 + 1);
}

START_TEST(fills_then_overwrites_oldest)
{
	uint8_t p[PS];

	for (unsigned k = 0; k < 20; k++) {
		make(p, k);
		ck_assert_int_eq(ring_push(&R, p), 1);
		ck_assert_uint_eq(R.count, k < 8 ? k + 1 : 8);
	}
	ck_assert_uint_eq(R.c.pages_in, 20);
	ck_assert_uint_eq(R.c.pages_overwritten, 12);
	/* oldest first: pages 12..19 */
	for (uint32_t i = 0; i < R.count; i++) {
		ck_assert_uint_eq(get_le64(ring_page(&R, i)), (12 + i) * 1000000ull);
		ck_assert_uint_eq(ring_slot(&R, i)->seq, 12 + i);
		ck_assert_uint_eq(ring_slot(&R, i)->events, (12 + i) % 50 + 1);
		ck_assert_uint_eq(ring_slot(&R, i)->first_ts, (12 + i) * 1000000ull);
	}
	ck_assert_uint_eq(ring_stream_bytes(&R), 20 * PS);
}
END_TEST

/* Reads return arbitrary pieces; pages are only whole ones, and assembling
 * the next page never touches the oldest valid page. */
START_TEST(partial_reads_keep_boundaries)
{
	uint8_t p[PS], before[PS];
	unsigned k;

	for (k = 0; k < 8; k++) {
		make(p, k);
		ring_push(&R, p);
	}
	memcpy(before, ring_page(&R, 0), PS);
	make(p, 100);
	uint32_t cuts[] = { 1, 15, 1000, 3000, 80 };
	uint32_t off = 0;
	for (size_t i = 0; i < 5; i++) {
		uint32_t room;
		uint8_t *dst = ring_fill_space(&R, &room);
		ck_assert_uint_eq(room, PS - off);
		memcpy(dst, p + off, cuts[i]);
		off += cuts[i];
		int r = ring_fill_commit(&R, cuts[i]);
		if (off < PS) {
			ck_assert_int_eq(r, 0);
			ck_assert_uint_eq(R.count, 8);
			ck_assert_mem_eq(ring_page(&R, 0), before, PS);
		} else {
			ck_assert_int_eq(r, 1);
		}
	}
	ck_assert_uint_eq(off, PS);
	ck_assert_uint_eq(get_le64(ring_page(&R, 7)), 100000000ull);
	ck_assert_uint_eq(get_le64(ring_page(&R, 0)), 1000000ull);
	ck_assert_uint_eq(R.c.pages_overwritten, 1);
	ck_assert_uint_eq(R.c.bytes_in, 9 * PS);
}
END_TEST

START_TEST(rejects_bad_pages)
{
	uint8_t p[PS];

	make(p, 1);
	ring_push(&R, p);
	memset(p, 0xff, PS);
	ck_assert_int_eq(ring_push(&R, p), -EBADMSG);
	ck_assert_uint_eq(R.count, 1);
	ck_assert_uint_eq(R.c.pages_rejected, 1);
	ck_assert_uint_eq(R.c.bytes_rejected, PS);
	/* the stream position still moved: the agent counted those bytes too */
	ck_assert_uint_eq(ring_stream_bytes(&R), 2 * PS);
	make(p, 2);
	ck_assert_int_eq(ring_push(&R, p), 1);
	ck_assert_uint_eq(ring_slot(&R, 1)->seq, 2);
}
END_TEST

START_TEST(counts_guest_losses)
{
	uint8_t p[PS];
	uint32_t commit;

	make(p, 3);
	commit = (uint32_t)get_le64(p + 8);
	put_le64(p + 8, commit | VMT_PAGE_MISSED_EVENTS | VMT_PAGE_MISSED_STORED);
	put_le64(p + 16 + commit, 5);
	ck_assert_int_eq(ring_push(&R, p), 1);
	make(p, 4);
	put_le64(p + 8, get_le64(p + 8) | VMT_PAGE_MISSED_EVENTS);
	ck_assert_int_eq(ring_push(&R, p), 1);
	ck_assert_uint_eq(R.c.pages_guest_lost, 2);
	ck_assert_uint_eq(R.c.events_guest_lost, 5);
	ck_assert(ring_slot(&R, 0)->flags & VMT_SLOT_MISSED);
}
END_TEST

START_TEST(time_going_back_is_counted)
{
	uint8_t p[PS];

	make(p, 10);
	ring_push(&R, p);
	make(p, 5);
	ck_assert_int_eq(ring_push(&R, p), 1);
	ck_assert_uint_eq(R.c.ts_backwards, 1);
}
END_TEST

/* A new boot clears the rings (a new aux): its clock starts over, and its
 * first page is not time going back (status said "! 2 pages back in time"
 * after every reboot, one per CPU). */
START_TEST(new_boot_is_not_time_going_back)
{
	uint8_t p[PS];

	make(p, 10);
	ring_push(&R, p);
	ring_clear(&R);
	make(p, 5);
	ck_assert_int_eq(ring_push(&R, p), 1);
	ck_assert_uint_eq(R.c.ts_backwards, 0);
	make(p, 4);
	ring_push(&R, p);
	ck_assert_uint_eq(R.c.ts_backwards, 1);
}
END_TEST

START_TEST(reset_drops_partial_page)
{
	uint8_t p[PS];
	uint32_t room;

	make(p, 1);
	ring_push(&R, p);
	memcpy(ring_fill_space(&R, &room), p, 100);
	ring_fill_commit(&R, 100);
	ring_reset_stream(&R, 0);
	ck_assert_uint_eq(R.c.bytes_rejected, 100);
	ck_assert_uint_eq(R.count, 1);
	ck_assert_uint_eq(ring_stream_bytes(&R), 2 * PS);
	ring_clear(&R);
	ck_assert_uint_eq(R.count, 0);
	ck_assert_uint_eq(R.c.pages_in, 1);
}
END_TEST

START_TEST(memory_is_fixed)
{
	struct vmt_ring r2;

	/* the memfd (header page, slots, their records, in whole pages) and,
	 * privately, each slot's page pointer and holds */
	ck_assert_uint_eq(ring_mem_size(8, PS), VMT_RINGMEM_HDR_BYTES + 9 * PS + 4096 +
						 9 * (sizeof(uint8_t *) + sizeof(uint32_t)));
	ck_assert_int_eq(ring_init(&r2, 0, &L), -EINVAL);
}
END_TEST

/* ---- holds and the reserve ------------------------------------------------ */

/* Pages from..to-1 into R, each accepted. */
static void push_range(unsigned from, unsigned to)
{
	uint8_t p[PS];

	for (unsigned k = from; k < to; k++) {
		make(p, k);
		ck_assert_int_eq(ring_push(&R, p), 1);
	}
}

/* Bytes of the held runs, in order, into out. */
static size_t hold_bytes(const struct vmt_ring_hold *h, uint8_t *out)
{
	size_t n = 0;

	for (uint32_t k = 0; k < h->nruns; k++) {
		memcpy(out + n, h->runs[k].base, h->runs[k].len);
		n += h->runs[k].len;
	}
	return n;
}

/* A window of 8 held; 4 more pages come with a reserve of 4: the held
 * pages stay as they were, the fifth finds no room; released, the ring
 * takes its pages back and holds the newest 8 in order. */
START_TEST(held_pages_stay_while_the_ring_moves_on)
{
	static uint8_t want[8 * PS], got[8 * PS];
	struct vmt_pagepool pool;
	struct vmt_ring_hold h;
	uint8_t p[PS];

	ck_assert_int_eq(pagepool_init(&pool, 4 * PS), 0);
	R.pool = &pool;
	for (unsigned k = 0; k < 8; k++) {
		make(p, k);
		ck_assert_int_eq(ring_push(&R, p), 1);
		memcpy(want + k * PS, p, PS);
	}
	ck_assert_int_eq(ring_hold(&R, 0, 8, &h), 0);
	/* the ring's own memory, oldest first: at most two runs */
	ck_assert_uint_le(h.nruns, 2);
	ck_assert_uint_eq(ring_room(&R, 64 * PS), 5 * PS);	/* the free fill slot, then 4 reserve pages */
	push_range(8, 13);
	ck_assert_uint_eq(pool.in_use, 4 * PS);
	ck_assert_uint_eq(ring_room(&R, PS), 0);
	make(p, 13);
	ck_assert_int_eq(ring_push(&R, p), -ENOBUFS);
	ck_assert_uint_eq(hold_bytes(&h, got), sizeof(got));
	ck_assert_mem_eq(got, want, sizeof(got));
	/* the ring itself sees pages 5..12 */
	for (uint32_t i = 0; i < R.count; i++)
		ck_assert_uint_eq(get_le64(ring_page(&R, i)), (5 + i) * 1000000ull);

	ring_release(&h);
	ring_settle(&R);
	ck_assert_uint_eq(R.displaced, 0);
	ck_assert_uint_eq(pool.in_use, 0);
	ck_assert_uint_eq(pool.top, 0);	/* given back to the kernel */
	for (uint32_t i = 0; i < R.count; i++)
		ck_assert_uint_eq(get_le64(ring_page(&R, i)), (5 + i) * 1000000ull);
	ck_assert_uint_eq(ring_room(&R, 64 * PS), 9 * PS);
	ck_assert_int_eq(ring_push(&R, p), 1);
	ck_assert_uint_eq(get_le64(ring_page(&R, 7)), 13 * 1000000ull);
	ring_free(&R);
	pagepool_free(&pool);
}
END_TEST

/* Without a reserve a ring that is not full still takes pages into free
 * slots; it stops at the first held one. A partial page waits. */
START_TEST(no_reserve_stops_at_the_first_held_page)
{
	struct vmt_ring_hold h;
	uint8_t p[PS];
	uint32_t room;

	push_range(0, 4);
	ck_assert_int_eq(ring_hold(&R, 1, 4, &h), 0);
	ck_assert_uint_eq(h.nruns, 1);
	ck_assert_uint_eq(h.runs[0].len, 3 * PS);
	/* slots 4..8 are free, then slot 0 (not held), then held slot 1 */
	ck_assert_uint_eq(ring_room(&R, 64 * PS), 6 * PS);
	push_range(4, 10);
	ck_assert_uint_eq(ring_room(&R, PS), 0);
	ck_assert_ptr_null(ring_fill_space(&R, &room));
	ck_assert_uint_eq(room, 0);
	ck_assert_int_eq(ring_push(&R, p), -ENOBUFS);
	ck_assert_uint_eq(get_le64(h.runs[0].base), 1000000ull);
	ring_release(&h);
	ck_assert_uint_eq(ring_room(&R, PS), PS);
	make(p, 10);
	ck_assert_int_eq(ring_push(&R, p), 1);
	ck_assert_uint_eq(get_le64(ring_page(&R, 0)), 3 * 1000000ull);
}
END_TEST

/* Two dumps in a row: the second holds a reserve page the first made the
 * ring fill; everything returns once both are done, in either order. */
START_TEST(two_dumps_share_pages)
{
	struct vmt_pagepool pool;
	struct vmt_ring_hold h1, h2;
	uint8_t p[PS], a[8 * PS], b[8 * PS], c[8 * PS];

	for (int order = 0; order < 2; order++) {
		ring_free(&R);
		ck_assert_int_eq(ring_init(&R, 8, &L), 0);
		ck_assert_int_eq(pagepool_init(&pool, 8 * PS), 0);
		R.pool = &pool;
		push_range(0, 10);
		ck_assert_int_eq(ring_hold(&R, 0, 8, &h1), 0);
		hold_bytes(&h1, a);
		push_range(10, 13);
		/* the free fill slot took page 10, reserve pages 11 and 12 */
		ck_assert_uint_eq(R.displaced, 2);
		ck_assert_int_eq(ring_hold(&R, 0, 8, &h2), 0);
		hold_bytes(&h2, b);
		for (uint32_t i = 0; i < 8; i++)
			ck_assert_uint_eq(get_le64(b + i * PS), (5 + i) * 1000000ull);
		push_range(13, 19);
		/* the 2 reserve pages are held by the second dump now: 2 + 6 */
		ck_assert_uint_eq(pool.in_use, 8 * PS);
		ck_assert_int_eq(ring_push(&R, p), -ENOBUFS);
		hold_bytes(&h1, c);
		ck_assert_mem_eq(a, c, sizeof(a));
		hold_bytes(&h2, c);
		ck_assert_mem_eq(b, c, sizeof(b));
		ring_release(order ? &h2 : &h1);
		ring_settle(&R);
		ring_release(order ? &h1 : &h2);
		ring_settle(&R);
		ck_assert_uint_eq(R.displaced, 0);
		ck_assert_uint_eq(pool.in_use, 0);
		for (uint32_t i = 0; i < 8; i++)
			ck_assert_uint_eq(get_le64(ring_page(&R, i)), (11 + i) * 1000000ull);
		ring_free(&R);
		pagepool_free(&pool);
		ck_assert_int_eq(ring_init(&R, 8, &L), 0);
	}
}
END_TEST

/* A ring freed while a dump holds its pages (a guest forgotten, a reload):
 * the pages stay readable until the dump is done. */
START_TEST(held_pages_outlive_the_ring)
{
	struct vmt_pagepool pool;
	struct vmt_ring_hold h;

	ck_assert_int_eq(pagepool_init(&pool, 2 * PS), 0);
	R.pool = &pool;
	push_range(0, 9);
	ck_assert_int_eq(ring_hold(&R, 0, 8, &h), 0);
	push_range(9, 10);
	ring_free(&R);
	ck_assert_uint_eq(pool.in_use, 0);	/* the reserve page left with the slot */
	ck_assert_uint_eq(get_le64(h.runs[0].base), 1000000ull);
	ck_assert_uint_eq(get_le64((const uint8_t *)h.runs[h.nruns - 1].base + h.runs[h.nruns - 1].len - PS),
			  8 * 1000000ull);
	ring_release(&h);
	pagepool_free(&pool);
	ck_assert_int_eq(ring_init(&R, 8, &L), 0);
}
END_TEST

/* 512-byte blocks the memfd holds in memory */
static long long memfd_blocks(int fd)
{
	struct stat st;

	ck_assert_int_eq(fstat(fd, &st), 0);
	return (long long)st.st_blocks;
}

START_TEST(pool_hands_out_what_it_has)
{
	struct vmt_pagepool pool;
	uint8_t *pg[5];

	ck_assert_int_eq(pagepool_init(&pool, 4 * PS + 100), 0);
	ck_assert_uint_eq(pool.bytes, 4 * PS);
	ck_assert_uint_eq(pagepool_available(&pool, PS), 4);
	ck_assert_uint_eq(pagepool_available(&pool, 2 * PS), 2);
	ck_assert_uint_eq(pagepool_available(&pool, 100), 0);	/* not a unit multiple */
	for (int i = 0; i < 4; i++)
		ck_assert_ptr_nonnull(pg[i] = pagepool_get(&pool, PS));
	ck_assert_ptr_null(pagepool_get(&pool, PS));
	ck_assert_uint_eq(pool.peak, 4 * PS);
	pagepool_hold(&pool, pg[0]);
	pagepool_unslot(&pool, pg[0], PS);	/* still held */
	ck_assert_uint_eq(pagepool_available(&pool, PS), 0);
	pagepool_release(&pool, pg[0], PS);
	ck_assert_uint_eq(pagepool_available(&pool, PS), 1);
	ck_assert_ptr_eq(pg[4] = pagepool_get(&pool, PS), pg[0]);
	for (int i = 1; i < 5; i++)
		memset(pg[i], 0x5a, PS);	/* in the memfd now */
	ck_assert_int_ge(memfd_blocks(pool.fd), 5 * PS / 512);
	for (int i = 1; i < 5; i++)
		pagepool_unslot(&pool, pg[i], PS);
	/* nothing borrowed: the memfd holds its header page only */
	ck_assert_int_eq(memfd_blocks(pool.fd), VMT_RESERVE_HDR_BYTES / 512);
	ck_assert_uint_eq(pool.in_use, 0);
	ck_assert_uint_eq(pool.top, 0);
	ck_assert_uint_eq(pool.borrowed, 5);
	pagepool_free(&pool);
	/* no reserve at all: no memfd either */
	ck_assert_int_eq(pagepool_init(&pool, 0), 0);
	ck_assert_int_eq(pool.fd, -1);
	ck_assert_uint_eq(pagepool_available(&pool, PS), 0);
	ck_assert_ptr_null(pagepool_get(&pool, PS));
	pagepool_free(&pool);
}
END_TEST

/* a sample stores each of the ring's counters, none swapped or left out */
START_TEST(counters_go_into_a_sample_field_by_field)
{
	struct vmt_ring_counters c = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14 };
	struct vmt_sample_counters k;

	memset(&k, 0xff, sizeof(k));
	ring_counters_to_sample(&c, &k);
	ck_assert_uint_eq(k.bytes_in, 1);
	ck_assert_uint_eq(k.pages_in, 2);
	ck_assert_uint_eq(k.pages_overwritten, 3);
	ck_assert_uint_eq(k.pages_guest_lost, 4);
	ck_assert_uint_eq(k.events_guest_lost, 5);
	ck_assert_uint_eq(k.pages_rejected, 6);
	ck_assert_uint_eq(k.bytes_rejected, 7);
	ck_assert_uint_eq(k.ts_backwards, 8);
	ck_assert_uint_eq(k.events_in, 9);
	ck_assert_uint_eq(k.frames_made, 10);
	ck_assert_uint_eq(k.pages_stored_raw, 11);
	ck_assert_uint_eq(k.frame_bytes_in, 12);
	ck_assert_uint_eq(k.frame_bytes_out, 13);
	ck_assert_uint_eq(k.frames_overwritten, 14);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ring");
	TCase *t = tcase_create("core");

	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, fills_then_overwrites_oldest);
	tcase_add_test(t, partial_reads_keep_boundaries);
	tcase_add_test(t, rejects_bad_pages);
	tcase_add_test(t, counts_guest_losses);
	tcase_add_test(t, time_going_back_is_counted);
	tcase_add_test(t, new_boot_is_not_time_going_back);
	tcase_add_test(t, reset_drops_partial_page);
	tcase_add_test(t, memory_is_fixed);
	tcase_add_test(t, held_pages_stay_while_the_ring_moves_on);
	tcase_add_test(t, no_reserve_stops_at_the_first_held_page);
	tcase_add_test(t, two_dumps_share_pages);
	tcase_add_test(t, held_pages_outlive_the_ring);
	tcase_add_test(t, pool_hands_out_what_it_has);
	tcase_add_test(t, counters_go_into_a_sample_field_by_field);
	suite_add_tcase(s, t);
	return test_run_suite(s);
}
