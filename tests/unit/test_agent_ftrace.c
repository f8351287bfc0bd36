/* SPDX-License-Identifier: MIT */
/*
 * The agent's pure helper: the per_cpu stats parser (the "nothing lost"
 * accounting rests on its "read events"). Built into this test from the
 * agent's own source: the agent is a separate static program. The
 * event-list matcher is lib/ftmeta's now: test_ftmeta.
 */
#include "../../agent/ftrace.c"

#include "testutil.h"

START_TEST(stats_of_a_6_1_guest)
{
	static const char text[] = "entries: 12\noverrun: 3\ncommit overrun: 1\nbytes: 4096\n"
				   "oldest event ts:    13.895376\nnow ts:    14.580681\n"
				   "dropped events: 7\nread events: 58959\n";
	struct vmt_cpu_stats st = { .bytes_sent = 99 };

	ck_assert_int_eq(ftrace_parse_stats(text, strlen(text), &st), 0);
	ck_assert_uint_eq(st.entries, 12);
	ck_assert_uint_eq(st.overrun, 3);
	ck_assert_uint_eq(st.commit_overrun, 1);
	ck_assert_uint_eq(st.bytes, 4096);
	ck_assert_uint_eq(st.oldest_ts, 13895376000ull);
	ck_assert_uint_eq(st.now_ts, 14580681000ull);
	ck_assert_uint_eq(st.dropped, 7);
	ck_assert_uint_eq(st.read, 58959);
	ck_assert_uint_eq(st.bytes_sent, 99);	/* not the parser's */
}
END_TEST

START_TEST(stats_without_read_events_are_refused)
{
	static const char text[] = "entries: 12\noverrun: 3\nread event: 5\n";
	struct vmt_cpu_stats st = { 0 };

	ck_assert_int_eq(ftrace_parse_stats(text, strlen(text), &st), -EBADMSG);
	/* nanosecond clocks print more digits; a line with no newline at the end */
	static const char ns[] = "now ts: 5.123456789\nread events: 1";
	ck_assert_int_eq(ftrace_parse_stats(ns, strlen(ns), &st), 0);
	ck_assert_uint_eq(st.now_ts, 5123456789ull);
	ck_assert_uint_eq(st.read, 1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("agent_ftrace");
	TCase *t = tcase_create("core");

	tcase_add_test(t, stats_of_a_6_1_guest);
	tcase_add_test(t, stats_without_read_events_are_refused);
	suite_add_tcase(s, t);
	return test_run_suite(s);
}
