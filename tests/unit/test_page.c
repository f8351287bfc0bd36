/* SPDX-License-Identifier: MIT */
/* page: walking untrusted ftrace pages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "page.h"
#include "pagegen.h"
#include "testutil.h"
#include "util.h"

static struct vmt_page_layout L;
static uint8_t page[4096];

static void setup(void)
{
	page_layout_default(&L, 4096);
}

START_TEST(events_and_times)
{
	struct pagegen g;
	struct vmt_page_info i;

	pagegen_init(&g, page, 4096, 1000);
	ck_assert_int_eq(pagegen_event(&g, 5, 12, 1), 0);
	ck_assert_int_eq(pagegen_event(&g, 7, 200, 2), 0);	/* long form (type_len 0) */
	ck_assert_int_eq(pagegen_padding(&g, 16), 0);		/* discarded event: delta 1 */
	ck_assert_int_eq(pagegen_event(&g, 1ull << 30, 8, 3), 0);	/* time extend */
	pagegen_finish(&g, 0);
	ck_assert_int_eq(page_scan(&L, page, &i), 0);
	ck_assert_uint_eq(i.events, 3);
	ck_assert_uint_eq(i.base_ts, 1000);
	ck_assert_uint_eq(i.first_ts, 1005);
	ck_assert_uint_eq(i.last_ts, 1005 + 7 + 1 + (1ull << 30));
	ck_assert(!i.missed_flag);
	ck_assert_uint_eq(i.commit, g.pos);
}
END_TEST

START_TEST(empty_page)
{
	struct pagegen g;
	struct vmt_page_info i;

	pagegen_init(&g, page, 4096, 42);
	pagegen_finish(&g, 0);
	ck_assert_int_eq(page_scan(&L, page, &i), 0);
	ck_assert_uint_eq(i.events, 0);
	ck_assert_uint_eq(i.first_ts, 42);
}
END_TEST

START_TEST(missed_events)
{
	struct vmt_page_info i;
	uint32_t commit;

	pagegen_simple(page, 4096, 10, 5);
	commit = (uint32_t)get_le64(page + 8);
	put_le64(page + 8, commit | VMT_PAGE_MISSED_EVENTS | VMT_PAGE_MISSED_STORED);
	put_le64(page + 16 + commit, 77);
	ck_assert_int_eq(page_scan(&L, page, &i), 0);
	ck_assert(i.missed_flag);
	ck_assert_uint_eq(i.missed, 77);
	ck_assert_uint_eq(i.events, 5);
}
END_TEST

START_TEST(bad_commit)
{
	struct vmt_page_info i;

	pagegen_simple(page, 4096, 10, 5);
	put_le64(page + 8, 4081);	/* one past the data area */
	ck_assert_int_eq(page_scan(&L, page, &i), -EBADMSG);
	put_le64(page + 8, 4080);
	/* events stop before 4080 but the rest is zero: a zero word is a
	 * type_len 0 event whose length 0 is invalid */
	ck_assert_int_eq(page_scan(&L, page, &i), -EBADMSG);
}
END_TEST

START_TEST(event_past_commit)
{
	struct pagegen g;
	struct vmt_page_info i;

	pagegen_init(&g, page, 4096, 0);
	pagegen_event(&g, 0, 8, 1);
	pagegen_event(&g, 0, 200, 1);
	pagegen_finish(&g, 0);
	put_le64(page + 8, g.pos - 4);	/* cut the long event short */
	ck_assert_int_eq(page_scan(&L, page, &i), -EBADMSG);
	/* a long-form event claiming more than the page */
	pagegen_init(&g, page, 4096, 0);
	pagegen_event(&g, 0, 200, 1);
	pagegen_finish(&g, 0);
	put_le32(page + 20, 0x7fffffff);
	ck_assert_int_eq(page_scan(&L, page, &i), -EBADMSG);
}
END_TEST

START_TEST(random_pages_never_crash)
{
	struct vmt_page_info i;
	unsigned ok = 0;

	srand(1);
	for (int n = 0; n < 20000; n++) {
		for (size_t k = 0; k < sizeof(page); k++)
			page[k] = (uint8_t)rand();
		/* half the time keep the commit plausible so the walk runs deep */
		if (n & 1)
			put_le64(page + 8, (uint64_t)(rand() % 4081));
		if (page_scan(&L, page, &i) == 0) {
			ok++;
			ck_assert_uint_le(i.commit, 4080);
		}
	}
	ck_assert_uint_lt(ok, 20000);
}
END_TEST

START_TEST(layout_from_header_page)
{
	static const char hp64[] =
		"\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
		"\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n"
		"\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n"
		"\tfield: char data;\toffset:16;\tsize:4080;\tsigned:1;\n";
	static const char hp32[] =
		"\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
		"\tfield: local_t commit;\toffset:8;\tsize:4;\tsigned:1;\n"
		"\tfield: char data;\toffset:12;\tsize:4084;\tsigned:1;\n";
	struct vmt_page_layout l;

	ck_assert_int_eq(page_layout_parse(&l, hp64, strlen(hp64), 4096), 0);
	ck_assert_uint_eq(l.commit_offset, 8);
	ck_assert_uint_eq(l.commit_size, 8);
	ck_assert_uint_eq(l.data_offset, 16);
	ck_assert_int_eq(page_layout_parse(&l, hp32, strlen(hp32), 4096), 0);
	ck_assert_uint_eq(l.commit_size, 4);
	ck_assert_uint_eq(l.data_offset, 12);
	ck_assert_int_eq(page_layout_parse(&l, "garbage", 7, 4096), -EINVAL);
	ck_assert_int_eq(page_layout_parse(&l, hp64, strlen(hp64) / 2, 4096), -EINVAL);
	/* guest text with pieces missing, or the name at the start of a line */
	static const char *bad[] = {
		"\tfield: u64 timestamp;\n\tfield: local_t commit;\n\tfield: char data;\n",
		"timestamp;\toffset:0;\tsize:8;\nfield:\n",
		"\tfield: u64 timestamp;\toffset:0;\n",
	};
	for (size_t i = 0; i < 3; i++)
		ck_assert_int_eq(page_layout_parse(&l, bad[i], strlen(bad[i]), 4096), -EINVAL);
}
END_TEST

START_TEST(cut_before_keeps_times)
{
	struct pagegen g;
	struct vmt_page_info i;
	uint8_t orig[4096];

	pagegen_init(&g, page, 4096, 1000);
	pagegen_event(&g, 0, 8, 1);		/* 1000 */
	pagegen_event(&g, 10, 200, 2);		/* 1010, long form */
	pagegen_event(&g, 1ull << 28, 8, 3);	/* time extend, then 1010 + 2^28 */
	pagegen_event(&g, 5, 12, 4);		/* +5 */
	pagegen_finish(&g, 0);
	memcpy(orig, page, sizeof(page));

	/* nothing before the start: unchanged */
	ck_assert_int_eq(page_cut_before(&L, page, 1000), 0);
	ck_assert_mem_eq(page, orig, sizeof(page));
	/* cut the first two: the extended event keeps its time */
	ck_assert_int_eq(page_cut_before(&L, page, 1011), 2);
	ck_assert_int_eq(page_scan(&L, page, &i), 0);
	ck_assert_uint_eq(i.events, 2);
	ck_assert_uint_eq(i.first_ts, 1010 + (1ull << 28));
	ck_assert_uint_eq(i.last_ts, 1015 + (1ull << 28));
	/* cut all */
	memcpy(page, orig, sizeof(page));
	ck_assert_int_eq(page_cut_before(&L, page, 1ull << 40), 4);
	ck_assert_int_eq(page_scan(&L, page, &i), 0);
	ck_assert_uint_eq(i.events, 0);
	/* cut the first one of a page whose second event has delta 0 */
	pagegen_init(&g, page, 4096, 500);
	pagegen_event(&g, 0, 8, 1);
	pagegen_event(&g, 0, 8, 2);
	pagegen_event(&g, 3, 8, 3);
	pagegen_finish(&g, 0);
	ck_assert_int_eq(page_cut_before(&L, page, 501), 2);
	ck_assert_int_eq(page_scan(&L, page, &i), 0);
	ck_assert_uint_eq(i.events, 1);
	ck_assert_uint_eq(i.first_ts, 503);
}
END_TEST

/* The real pages of the shared corpus: every page walks, and the events
 * counted per CPU are what stock trace-cmd decodes. */
START_TEST(corpus_pages)
{
	const char *dir = test_corpus_dir();
	static const uint64_t expect[2] = { 58959, 80552 };

	if (!dir)
		VMT_SKIP("no corpus (../shared/corpus/guest-6.1)");
	for (int c = 0; c < 2; c++) {
		char path[4200], *data;
		size_t len;
		uint64_t events = 0;

		snprintf(path, sizeof(path), "%s/pages/cpu%d.raw", dir, c);
		ck_assert_int_eq(read_file(path, 64 << 20, &data, &len), 0);
		ck_assert_uint_eq(len % 4096, 0);
		for (size_t off = 0; off < len; off += 4096) {
			struct vmt_page_info i;
			ck_assert_int_eq(page_scan(&L, (uint8_t *)data + off, &i), 0);
			ck_assert(!i.missed_flag);
			events += i.events;
		}
		ck_assert_uint_eq(events, expect[c]);
		free(data);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("page");
	TCase *t = tcase_create("core");

	tcase_add_checked_fixture(t, setup, NULL);
	tcase_add_test(t, events_and_times);
	tcase_add_test(t, empty_page);
	tcase_add_test(t, missed_events);
	tcase_add_test(t, bad_commit);
	tcase_add_test(t, event_past_commit);
	tcase_add_test(t, random_pages_never_crash);
	tcase_add_test(t, layout_from_header_page);
	tcase_add_test(t, cut_before_keeps_times);
	tcase_add_test(t, corpus_pages);
	tcase_set_timeout(t, 60);
	suite_add_tcase(s, t);
	return test_run_suite(s);
}
