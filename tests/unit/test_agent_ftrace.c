/* SPDX-License-Identifier: MIT */
/*
 * The agent's pure helpers: the per_cpu stats parser (the "nothing lost"
 * accounting rests on its "read events") and the event-list matcher
 * (which decides what a START enables). Built into this test from the
 * agent's own source: the agent is a separate static program.
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

static char *avail[] = {
	"irq:irq_handler_entry", "irq:irq_handler_exit", "sched:sched_switch",
	"sched:sched_wakeup", "timer:hrtimer_start",
};

static size_t match(const char *list, char ***out, char *err, int *r)
{
	size_t n = 0;

	*r = ftrace_match_events(list, strlen(list), avail, ARRAY_SIZE(avail), out, &n, err, 128);
	return n;
}

START_TEST(event_lists)
{
	char **out = NULL, err[128];
	size_t n;
	int r;

	n = match("sched:*, irq:irq_handler_entry", &out, err, &r);
	ck_assert_int_eq(r, 0);
	ck_assert_uint_eq(n, 3);
	ck_assert_str_eq(out[0], "irq:irq_handler_entry");
	ck_assert_str_eq(out[1], "sched:sched_switch");
	free(out);
	/* overlapping patterns give each event once */
	n = match("sched:*,sched:sched_switch,*:sched_switch", &out, err, &r);
	ck_assert_int_eq(r, 0);
	ck_assert_uint_eq(n, 2);
	free(out);
	n = match("nosuch:*", &out, err, &r);
	ck_assert_int_eq(r, -ENOENT);
	ck_assert(strstr(err, "nosuch:*") != NULL);
	n = match("sched:a:b", &out, err, &r);
	ck_assert_int_eq(r, -EINVAL);
	n = match(",, ,", &out, err, &r);
	ck_assert_int_eq(r, 0);
	ck_assert_uint_eq(n, 0);
	free(out);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("agent_ftrace");
	TCase *t = tcase_create("core");

	tcase_add_test(t, stats_of_a_6_1_guest);
	tcase_add_test(t, stats_without_read_events_are_refused);
	tcase_add_test(t, event_lists);
	suite_add_tcase(s, t);
	return test_run_suite(s);
}
