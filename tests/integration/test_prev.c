/* SPDX-License-Identifier: MIT */
/*
 * Integration: the previous boot's pages (PREV_BEGIN, PREV_PAGES,
 * PREV_END; daemon/guest-prev.c, dump-prev.c) from a stand-in guest that
 * sends them as it gets STREAM. A well-made set becomes one sample, reason
 * "previous boot (persistent ring buffer)", its bad page left out and
 * counted; ill-made ones are refused and counted, no sample, the session
 * streams on. (The real kernel's buffer: tests/e2e/test_pstore.sh.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"
#include "page.h"
#include "sample.h"
#include "testd.h"
#include "testutil.h"
#include "util.h"

static struct itest_input in;

static void put_begin(struct vmt_buf *b, uint32_t ncpus, uint32_t pages)
{
	struct vmt_prev_begin pb = { .ncpus = ncpus, .flags = VMT_PREV_DELTA, .pages = pages };

	ck_assert_int_eq(proto_put_prev_begin(b, &pb), 0);
}

/* n pages of cpu from p, in messages of VMT_PREV_PAGES_MAX at most */
static void put_pages(struct vmt_buf *b, uint32_t cpu, const uint8_t *p, uint32_t n, uint32_t ps)
{
	static uint8_t m[VMT_PROTO_MAX_PAYLOAD];

	for (uint32_t i = 0; i < n;) {
		uint32_t k = VMT_MIN(n - i, (uint32_t)VMT_PREV_PAGES_MAX);

		put_le32(m, cpu);
		put_le32(m + 4, k);
		memcpy(m + 8, p + (size_t)i * ps, (size_t)k * ps);
		ck_assert_int_eq(proto_put(b, VMT_MSG_PREV_PAGES, m, 8 + k * ps), 0);
		i += k;
	}
}

static void put_end(struct vmt_buf *b, uint32_t pages)
{
	uint8_t m[8] = { 0 };

	put_le32(m + 4, pages);
	ck_assert_int_eq(proto_put(b, VMT_MSG_PREV_END, m, 8), 0);
}

static void start(struct itest_run *r, const char *tag, const struct vmt_buf *set)
{
	char top[2048], g[600];

	itest_run_init(r, &in, tag);
	r->fc[0].after_stream = set->data;
	r->fc[0].after_stream_len = set->len;
	itest_run_guest(r, 0);
	itest_guest_yaml(g, sizeof(g), r, 0);
	snprintf(top, sizeof(top), "triggers:\n  cooldown: 0ms\nguests:\n%s", g);
	ck_assert_int_eq(testd_start(&r->d, r->dir, top), 0);
	itest_expect_streaming(&r->d, "g1", 5000);
	ck_assert_int_eq(fakeguest_wait_sent(&r->fg[0], 10000), 0);
}

START_TEST(prev_set_is_a_sample)
{
	const uint32_t ps = 4096;
	uint32_t n0 = VMT_MIN((uint32_t)in.npages[0], 20u), n1 = VMT_MIN((uint32_t)in.npages[1], 3u);
	uint8_t *bad = malloc((size_t)n0 * ps);
	struct vmt_buf set = { 0 };
	struct itest_run r;
	struct vmt_sample *s;
	char **list;
	int n;

	ITEST_NEED_INPUT(in);
	ck_assert_uint_ge(in.ncpus, 2);
	/* cpu0's pages with one broken (commit past the page end) */
	memcpy(bad, in.pages[0], (size_t)n0 * ps);
	put_le32(bad + ps + 8, 0xffffff);
	put_begin(&set, 2, n0 + n1);
	put_pages(&set, 0, bad, n0, ps);
	put_pages(&set, 1, in.pages[1], n1, ps);
	put_end(&set, n0 + n1);
	start(&r, "good", &set);
	ck_assert_msg(ITEST_WAIT(itest_count_samples(&r.d, "g1") >= 1, 30000),
		      "no sample of the previous boot (log: %s)", r.d.log);
	n = itest_guest_samples(&r.d, "g1", &list);
	ck_assert_int_eq(n, 1);
	s = itest_read_sample(list[0]);
	ck_assert_msg(!strncmp(s->triggers[0].reason, VMT_PREV_BOOT_REASON, strlen(VMT_PREV_BOOT_REASON)),
		      "reason '%s'", s->triggers[0].reason);
	ck_assert_msg(strstr(s->triggers[0].reason, "boot not held by this daemon"), "reason '%s'",
		      s->triggers[0].reason);
	ck_assert_uint_eq(s->cpus[0].npages, n0 - 1);
	ck_assert_uint_eq(s->cpus[0].counters.pages_rejected, 1);
	ck_assert_uint_eq(s->cpus[1].npages, n1);
	ck_assert_int_eq(memcmp(s->cpus[1].pages, in.pages[1], (size_t)n1 * ps), 0);
	ck_assert_int_eq(memcmp(s->cpus[0].pages + ps, in.pages[0] + 2 * ps, (size_t)(n0 - 2) * ps), 0);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "msgs_unexpected"), 0);
	ck_assert(itest_state_is(&r.d, "g1", "streaming"));
	sample_free(s);
	itest_free_list(list, n);
	itest_run_end(&r);
	buf_free(&set);
	free(bad);
}
END_TEST

START_TEST(bad_sets_refused_and_counted)
{
	const uint32_t ps = 4096;
	struct vmt_buf set = { 0 };
	struct itest_run r;

	ITEST_NEED_INPUT(in);
	/* pages outside a set */
	put_pages(&set, 0, in.pages[0], 1, ps);
	/* a set of more CPUs than the guest has: refused, and that was its one */
	put_begin(&set, 99, 1);
	put_pages(&set, 0, in.pages[0], 1, ps);
	put_begin(&set, 1, 1);
	put_end(&set, 1);
	start(&r, "bad", &set);
	ck_assert_msg(itest_wait_num_ge(&r.d, "g1", "msgs_unexpected", 5, 30000),
		      "not counted: %llu (log: %s)",
		      (unsigned long long)itest_num(&r.d, "g1", "msgs_unexpected"), r.d.log);
	ck_assert_int_eq(itest_count_samples(&r.d, "g1"), 0);
	ck_assert(itest_state_is(&r.d, "g1", "streaming"));
	ck_assert_int_ge(testd_log_count(&r.d, "previous boot's pages refused"), 1);
	itest_run_end(&r);
	buf_free(&set);

	/* more pages than announced */
	put_begin(&set, 1, 1);
	put_pages(&set, 0, in.pages[0], 2, ps);
	put_end(&set, 2);
	start(&r, "more", &set);
	ck_assert_msg(itest_wait_num_ge(&r.d, "g1", "msgs_unexpected", 2, 30000),
		      "not counted (log: %s)", r.d.log);
	ck_assert_int_eq(itest_count_samples(&r.d, "g1"), 0);
	itest_run_end(&r);
	buf_free(&set);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("prev");
	TCase *t = tcase_create("prev");
	int rc;

	itest_input_prepare(&in);
	TEST_ADD(t, prev_set_is_a_sample);
	TEST_ADD(t, bad_sets_refused_and_counted);
	tcase_set_timeout(t, 120);
	suite_add_tcase(s, t);
	rc = test_run_suite(s);
	itest_input_free(&in);
	return rc;
}
