/* SPDX-License-Identifier: MIT */
/* ring: overwrite order, page boundaries, counters. */
#include <stdlib.h>
#include <string.h>

#include "pagegen.h"
#include "ring.h"
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

	ck_assert_uint_eq(ring_mem_size(8, PS), 9 * (PS + sizeof(struct vmt_ring_slot)));
	ck_assert_int_eq(ring_init(&r2, 0, &L), -EINVAL);
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
	tcase_add_test(t, reset_drops_partial_page);
	tcase_add_test(t, memory_is_fixed);
	suite_add_tcase(s, t);
	return test_run_suite(s);
}
