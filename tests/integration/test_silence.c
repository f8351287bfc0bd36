/* SPDX-License-Identifier: MIT */
/*
 * Integration: detectors.guest_silence (daemon/guest-alive.c). Stand-in
 * guests that say VMT_HELLO_BYE answer the host's pings; one stopped with
 * SIGSTOP (its "QEMU" alive, nothing answering: a guest halted by a panic)
 * is dumped once, and again only after it spoke; one that says BYE first is
 * not; one whose answers come late is counted, not dumped; one whose
 * "QEMU" died and is not reaped yet (a zombie) is no silence. Waits are on
 * the daemon's status and log and the stand-in's pipe; the timeouts are
 * short (config) and stretched by VMT_TEST_TIMEOUT_SCALE like deadlines.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"
#include "sample.h"
#include "testd.h"
#include "testutil.h"

static struct itest_input in;

/* g1, watched, FIFOs, its pid in a pidfile (it plays QEMU too); more:
 * more detectors' settings. */
static void start_with(struct itest_run *r, const char *tag, unsigned timeout_ms,
		       unsigned delay_ms, const char *more)
{
	char pf[400], top[2048], g[600];
	FILE *f;

	itest_run_init(r, &in, tag);
	r->fc[0].watched = 1;
	r->fc[0].sync_delay_ms = delay_ms;
	itest_run_guest(r, 0);
	snprintf(pf, sizeof(pf), "%s/qemu.pid", r->dir);
	f = fopen(pf, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "%d\n", (int)r->fg[0].pid);
	fclose(f);
	itest_guest_yaml(g, sizeof(g), r, 0);
	snprintf(top, sizeof(top), "triggers:\n  coalesce: 0ms\n  cooldown: 0ms\n"
		 "detectors:\n  guest_silence: {timeout: %ums}\n%sguests:\n%s    pidfile: %s\n",
		 timeout_ms, more, g, pf);
	ck_assert_int_eq(testd_start(&r->d, r->dir, top), 0);
	itest_expect_streaming(&r->d, "g1", 5000);
	ck_assert_int_eq(fakeguest_wait_sent(&r->fg[0], 10000), 0);
}

static void start(struct itest_run *r, const char *tag, unsigned timeout_ms, unsigned delay_ms)
{
	start_with(r, tag, timeout_ms, delay_ms, "");
}

/* The stand-in answered n pings (it tells each on its pipe). */
static bool synced(struct itest_run *r, unsigned n)
{
	fakeguest_poll(&r->fg[0]);
	return r->fg[0].syncs >= n;
}

/* No sample, no silence counted, and g1 in state. */
static void expect_no_incident(struct itest_run *r, const char *state)
{
	ck_assert_int_eq(itest_count_samples(&r->d, "g1"), 0);
	ck_assert_uint_eq(itest_num(&r->d, "g1", "silences"), 0);
	ck_assert(itest_state_is(&r->d, "g1", state));
}

START_TEST(silent_guest_dumped_once)
{
	unsigned to = (unsigned)test_deadline_ms(1500);
	struct itest_run r;
	struct vmt_sample *s;
	char **list;
	int n;

	ITEST_NEED_INPUT(in);
	start(&r, "silent", to, 0);
	ck_assert_msg(ITEST_WAIT(synced(&r, 2), 30000), "no ping answered (log: %s)", r.d.log);
	ck_assert_int_eq(itest_count_samples(&r.d, "g1"), 0);
	/* halted: "QEMU" lives, nothing comes from it */
	ck_assert_int_eq(kill(r.fg[0].pid, SIGSTOP), 0);
	ck_assert_msg(ITEST_WAIT(itest_count_samples(&r.d, "g1") >= 1, 30000),
		      "no sample of the silent guest (log: %s)", r.d.log);
	ck_assert(itest_state_is(&r.d, "g1", "silent"));
	n = itest_guest_samples(&r.d, "g1", &list);
	s = itest_read_sample(list[0]);
	ck_assert_uint_eq(s->triggers[0].kind, VMT_TRIGGER_SILENCE);
	ck_assert_msg(strstr(s->triggers[0].reason, "guest stopped answering: silent for") &&
			      strstr(s->triggers[0].reason, "process T"),
		      "reason '%s'", s->triggers[0].reason);
	ck_assert_uint_eq(s->triggers[0].pid, (uint32_t)r.fg[0].pid);
	ck_assert_uint_ge(s->triggers[0].value, (uint64_t)to * 1000000);
	/* every page it sent is in it */
	for (unsigned c = 0; c < in.ncpus; c++)
		ck_assert_uint_eq(s->cpus[c].npages, in.npages[c]);
	sample_free(s);
	itest_free_list(list, n);
	/* once: an operator's dump later finds it still silent, no second
	 * silence (and does not wait for its flush) */
	{
		char out[4096];
		ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "dump g1"), 0);
	}
	ck_assert_int_eq(itest_count_samples(&r.d, "g1"), 2);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "silences"), 1);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "flush_timeouts"), 0);
	/* it speaks again, then falls silent again: a second incident */
	ck_assert_int_eq(kill(r.fg[0].pid, SIGCONT), 0);
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, "speaks again") >= 1, 30000),
		      "not heard again (log: %s)", r.d.log);
	ck_assert(itest_state_is(&r.d, "g1", "streaming"));
	ck_assert_int_eq(kill(r.fg[0].pid, SIGSTOP), 0);
	ck_assert_msg(ITEST_WAIT(itest_count_samples(&r.d, "g1") >= 3, 30000),
		      "no second silence (log: %s)", r.d.log);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "silences"), 2);
	kill(r.fg[0].pid, SIGCONT);
	itest_run_end(&r);
}
END_TEST

START_TEST(bye_then_silence_is_no_incident)
{
	unsigned to = (unsigned)test_deadline_ms(500);
	struct itest_run r;
	unsigned hellos;

	ITEST_NEED_INPUT(in);
	start(&r, "bye", to, 0);
	ck_assert_msg(ITEST_WAIT(synced(&r, 1), 30000), "no ping answered (log: %s)", r.d.log);
	ck_assert_int_eq(fakeguest_bye(&r.fg[0]), 0);
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, "the agent stops (signal 15)") >= 1, 30000),
		      "the daemon did not say the agent stopped (log: %s)", r.d.log);
	/* its silence outlasts the timeout: the host asks every 2 s (a
	 * HOST_HELLO each) until an agent answers; two of them are 2 s at
	 * least, past the timeout (the mute stand-in tells them) */
	fakeguest_poll(&r.fg[0]);
	hellos = r.fg[0].host_hellos;
	ck_assert_msg(ITEST_WAIT((fakeguest_poll(&r.fg[0]), r.fg[0].host_hellos >= hellos + 2 + to / 2000),
				 30000),
		      "no HOST_HELLO after BYE (log: %s)", r.d.log);
	expect_no_incident(&r, "connecting");
	itest_run_end(&r);
}
END_TEST

START_TEST(slow_answers_counted_not_dumped)
{
	/* answers half the timeout late and a bit: late for sure, and well
	 * before a silence (the next ping goes a fifth of it after) */
	unsigned to = (unsigned)test_deadline_ms(4000);
	struct itest_run r;

	ITEST_NEED_INPUT(in);
	start(&r, "slow", to, to / 2 + 100);
	ck_assert_msg(itest_wait_num_ge(&r.d, "g1", "late_answers", 3, 60000),
		      "late answers not counted (log: %s)", r.d.log);
	expect_no_incident(&r, "streaming");
	itest_run_end(&r);
}
END_TEST

/* A QEMU that died is process_death's (off here, as where it cannot
 * load): not a silent guest, even while its parent has not reaped it. */
START_TEST(zombie_qemu_is_no_silence)
{
	unsigned to = (unsigned)test_deadline_ms(500);
	struct itest_run r;

	ITEST_NEED_INPUT(in);
	start_with(&r, "zombie", to, 0, "  process_death: {enabled: false}\n");
	ck_assert_msg(ITEST_WAIT(synced(&r, 1), 30000), "no ping answered (log: %s)", r.d.log);
	/* this test is its parent and does not wait for it: a zombie, and
	 * the channels stay open (they were made before it forked) */
	ck_assert_int_eq(kill(r.fg[0].pid, SIGKILL), 0);
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, ") is gone") >= 1, 30000),
		      "its QEMU not found gone (log: %s)", r.d.log);
	expect_no_incident(&r, "silent");
	itest_run_end(&r);	/* reaps it */
}
END_TEST

int main(void)
{
	Suite *s = suite_create("silence");
	TCase *t = tcase_create("silence");
	int rc;

	itest_input_prepare(&in);
	TEST_ADD(t, silent_guest_dumped_once);
	TEST_ADD(t, bye_then_silence_is_no_incident);
	TEST_ADD(t, slow_answers_counted_not_dumped);
	TEST_ADD(t, zombie_qemu_is_no_silence);
	tcase_set_timeout(t, 180);
	suite_add_tcase(s, t);
	rc = test_run_suite(s);
	itest_input_free(&in);
	return rc;
}
