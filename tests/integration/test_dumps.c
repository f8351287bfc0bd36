/* SPDX-License-Identifier: MIT */
/*
 * Integration: the daemon's pending dumps (daemon/dump.h). A request's
 * --post delays only its own dump: while one waits an hour, SIGUSR1, a
 * `vmtracectl dump` and a guest's TRIGGER each get their sample at once;
 * two requests with different posts are two dumps, each answered when
 * its own post is over; requests with a post that find as many such dumps
 * waiting as may are refused, and what has not fired when the daemon stops
 * answers its clients. Every wait is on an answer, a counter or a file.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctlproto.h"
#include "dump.h"
#include "itest.h"
#include "sample.h"
#include "testd.h"
#include "testutil.h"
#include "tlv.h"

static struct itest_input in;

#define NEED_INPUT() ITEST_NEED_INPUT(in)

/* The sample at path holds one trigger, of kind, whose reason holds what;
 * its dump id. */
static uint64_t expect_only_trigger(const char *path, uint32_t kind, const char *what)
{
	struct vmt_sample *s = itest_read_sample(path);
	uint64_t id = s->dump_id;

	ck_assert_msg(s->ntriggers == 1, "%s holds %u triggers (the first: %s), only '%s' asked for it",
		      path, s->ntriggers, s->ntriggers ? s->triggers[0].reason : "-", what);
	ck_assert_uint_eq(s->triggers[0].kind, kind);
	ck_assert_msg(strstr(s->triggers[0].reason, what), "%s: trigger '%s', not '%s'", path,
		      s->triggers[0].reason, what);
	sample_free(s);
	return id;
}

/*
 * A `vmtracectl dump --post 3600` waits; SIGUSR1, a `vmtracectl dump` and
 * the guest's TRIGGER each make their own sample meanwhile (on the old
 * rule they joined the hour-long dump and waited with it). Status shows
 * the one pending, an upgrade is refused saying so; the daemon's stop
 * answers its client.
 */
START_TEST(long_post_holds_no_other_dump)
{
	struct itest_run r;
	char out[8192], sample[4400], **list;
	uint64_t held = 0, next_ns;
	const size_t hold = 100;
	FILE *lng;
	int n, rc;

	NEED_INPUT();
	itest_run_init(&r, &in, "longpost");
	r.fc[0].hold_after = hold;	/* the TRIGGER comes once the rest is out */
	r.fc[0].triggers = 1;
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "triggers:\n  cooldown: 0s\nrecord:\n  ring_size: 16MiB\n", 1);
	itest_expect_streaming(&r.d, "g1", 5000);
	for (unsigned c = 0; c < in.ncpus; c++)
		held += VMT_MIN(hold, in.npages[c]);
	itest_expect_pages_in(&r.d, "g1", held);

	lng = testd_ctl_begin(&r.d, "dump --post 3600 --reason long-post 2>&1");
	ck_assert_ptr_nonnull(lng);
	ck_assert_msg(itest_wait_num_ge(&r.d, NULL, "triggers", 1, 10000),
		      "the daemon did not take the --post 3600 request (log: %s)", r.d.log);

	/* SIGUSR1: a sample of its own, written now */
	ck_assert_int_eq(kill(r.d.pid, SIGUSR1), 0);
	ck_assert_msg(ITEST_WAIT(itest_count_samples(&r.d, "g1") == 1, 30000),
		      "no sample for SIGUSR1 while a --post 3600 dump waits (log: %s)", r.d.log);
	n = itest_guest_samples(&r.d, "g1", &list);
	expect_only_trigger(list[0], VMT_TRIGGER_SIGNAL, "SIGUSR1");
	itest_free_list(list, n);

	/* root's `vmtracectl dump`: answered with its own sample */
	itest_dump_one(&r.d, "--reason quick", sample, sizeof(sample));
	expect_only_trigger(sample, VMT_TRIGGER_CONTROL, "quick");

	/* the guest's TRIGGER, sent once the rest of its pages are out */
	ck_assert_int_eq(fakeguest_release(&r.fg[0]), 0);
	ck_assert_msg(ITEST_WAIT(itest_count_samples(&r.d, "g1") == 3, 30000),
		      "no sample for the guest's TRIGGER while a --post 3600 dump waits (log: %s)",
		      r.d.log);
	n = itest_guest_samples(&r.d, "g1", &list);
	expect_only_trigger(list[2], VMT_TRIGGER_GUEST, "fake trigger");
	itest_free_list(list, n);

	/* the hour-long one is still there, and says so */
	ck_assert_uint_eq(itest_num(&r.d, NULL, "dumps_pending"), 1);
	next_ns = itest_num(&r.d, NULL, "dump_next_ns");
	ck_assert_msg(next_ns > 3000 * 1000000000ull && next_ns <= 3600 * 1000000000ull,
		      "the pending dump fires in %llu ns", (unsigned long long)next_ns);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "dumps"), 3);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "triggers"), 4);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "triggers_suppressed"), 0);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "dumps_refused"), 0);
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "status"), 0);
	ck_assert_msg(strstr(out, "dumps pending: 1, next in "), "status says:\n%s", out);
	/* no hand-over while a dump waits: the refusal says until when */
	rc = itest_ctl(&r.d, out, sizeof(out), "upgrade 2>&1");
	ck_assert_msg(rc != 0 && strstr(out, "1 dump(s) pending, the next due in "),
		      "upgrade with a dump pending: exit %d, %s", rc, out);

	/* the daemon stops: the waiting client is told, nothing else written */
	rc = testd_stop(&r.d);
	ck_assert_msg(rc == 0, "vmtraced exited with %d (log: %s)", rc, r.d.log);
	rc = testd_ctl_end(lng, out, sizeof(out));
	ck_assert_msg(rc == 1 && strstr(out, "vmtraced stopped before the dump was taken"),
		      "the --post 3600 client exited %d: %s", rc, out);
	ck_assert_int_eq(testd_log_count(&r.d, "not yet due dropped"), 1);
	ck_assert_int_eq(itest_count_samples(&r.d, "g1"), 3);
	printf("long_post_holds_no_other_dump: with a --post 3600 dump pending, SIGUSR1, vmtracectl "
	       "dump and a guest TRIGGER made a sample each; the long one's client told at stop\n");
	itest_run_end(&r);
}
END_TEST

/* `vmtracectl dump --post POST --reason REASON` begun (*asked: when), once
 * the daemon has counted triggers requests. */
static FILE *post_begin(struct itest_run *r, int post_ms, const char *reason, uint64_t triggers,
			uint64_t *asked)
{
	char args[200];
	FILE *f;

	snprintf(args, sizeof(args), "dump --post %d.%03d --reason %s", post_ms / 1000,
		 post_ms % 1000, reason);
	*asked = itest_now_ms();
	f = testd_ctl_begin(&r->d, args);
	ck_assert_ptr_nonnull(f);
	ck_assert(itest_wait_num_ge(&r->d, NULL, "triggers", triggers, 10000));
	return f;
}

/*
 * --post 5 asked, then --post 2: two dumps. The second does not join the
 * first (that fires later than its own would) nor does it move it; it is
 * answered when its post is over, with its own sample, ahead of the first.
 */
START_TEST(two_posts_two_dumps)
{
	struct itest_run r;
	char out[2][8192];
	const int p_short = test_deadline_ms(2000), p_long = test_deadline_ms(5000);
	uint64_t t0, t1, asked, took[2], id[2];
	FILE *f[2];
	int rc;

	NEED_INPUT();
	itest_run_init(&r, &in, "twoposts");
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "triggers:\n  coalesce: 100ms\nrecord:\n  ring_size: 16MiB\n", 1);
	itest_expect_streaming(&r.d, "g1", 5000);

	f[1] = post_begin(&r, p_long, "five", 1, &t0);
	f[0] = post_begin(&r, p_short, "two", 2, &t1);
	asked = itest_now_ms() - t0;
	/* the short one fires first only if it came before the long one's end
	 * less its own post: on any machine that is not hanging */
	ck_assert_msg(asked < (uint64_t)(p_long - p_short) - 500,
		      "the two requests took %llu ms: a hang, or set VMT_TEST_TIMEOUT_SCALE",
		      (unsigned long long)asked);

	rc = testd_ctl_end(f[0], out[0], sizeof(out[0]));
	took[0] = itest_now_ms() - t1;
	ck_assert_msg(rc == 0 && strstr(out[0], ".vmts\n"), "dump --post 2 failed (%d): %s", rc,
		      out[0]);
	rc = testd_ctl_end(f[1], out[1], sizeof(out[1]));
	took[1] = itest_now_ms() - t0;
	ck_assert_msg(rc == 0 && strstr(out[1], ".vmts\n"), "dump --post 5 failed (%d): %s", rc,
		      out[1]);
	*strchr(out[0], '\n') = 0;
	*strchr(out[1], '\n') = 0;
	ck_assert_str_ne(out[0], out[1]);
	id[0] = expect_only_trigger(out[0], VMT_TRIGGER_CONTROL, "two");
	id[1] = expect_only_trigger(out[1], VMT_TRIGGER_CONTROL, "five");
	/* dumps are numbered as they fire */
	ck_assert_msg(id[0] < id[1], "the --post 2 dump is %llu, the --post 5 one %llu",
		      (unsigned long long)id[0], (unsigned long long)id[1]);
	ck_assert_msg(took[0] >= (uint64_t)p_short, "--post %d ms answered after %llu ms", p_short,
		      (unsigned long long)took[0]);
	ck_assert_msg(took[1] >= (uint64_t)p_long, "--post %d ms answered after %llu ms", p_long,
		      (unsigned long long)took[1]);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "dumps"), 2);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "dumps_pending"), 0);
	printf("two_posts_two_dumps: --post %d ms answered after %llu ms, --post %d ms (asked first) "
	       "after %llu ms, each with its own sample\n", p_short, (unsigned long long)took[0],
	       p_long, (unsigned long long)took[1]);
	itest_run_end(&r);
}
END_TEST

/*
 * VMT_DUMP_POSTED_MAX requests with different posts wait as as many dumps;
 * one more with a post is refused (EAGAIN, counted), SIGUSR1 is not. At
 * the stop every waiting request gets ECANCELED.
 */
START_TEST(posted_dumps_are_bounded)
{
	struct itest_run r;
	struct vmt_buf tlv = { 0 };
	struct ictl_msg *m = malloc(sizeof(*m));
	unsigned cancelled = 0;
	int fd, rc;

	NEED_INPUT();
	ck_assert_ptr_nonnull(m);
	itest_run_init(&r, &in, "bounded");
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "record:\n  ring_size: 16MiB\n", 1);
	itest_expect_streaming(&r.d, "g1", 5000);
	fd = ictl_connect(r.d.sock);
	ck_assert_int_ge(fd, 0);

	/* a longer post each: none fires as soon as the next would on its own */
	for (uint32_t i = 0; i < VMT_DUMP_POSTED_MAX; i++) {
		buf_free(&tlv);
		tlv_put_u64(&tlv, VMT_CTAG_POST_NS, (3000ull + i * 10) * 1000000000ull);
		tlv_put_str(&tlv, VMT_CTAG_REASON, "waits");
		ck_assert_int_eq(ictl_request(fd, VMT_CTL_DUMP, i + 1, &tlv), 0);
	}
	ck_assert_msg(itest_wait_num_ge(&r.d, NULL, "dumps_pending", VMT_DUMP_POSTED_MAX, 10000),
		      "%d requests with a post are not %d dumps pending (log: %s)",
		      VMT_DUMP_POSTED_MAX, VMT_DUMP_POSTED_MAX, r.d.log);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "dumps_pending"), VMT_DUMP_POSTED_MAX);

	buf_free(&tlv);
	tlv_put_u64(&tlv, VMT_CTAG_POST_NS, 3590ull * 1000000000ull);
	ck_assert_int_eq(ictl_request(fd, VMT_CTL_DUMP, 100, &tlv), 0);
	ck_assert_int_eq(ictl_recv(fd, m, 10000), 1);
	ck_assert_uint_eq(m->type, VMT_CTL_ERROR);
	ck_assert_uint_eq(m->id, 100);
	ck_assert_uint_eq(m->err, EAGAIN);
	ck_assert_msg(strstr(m->message, "waiting for their --post"), "refused with '%s'", m->message);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "dumps_refused"), 1);
	ck_assert_int_eq(testd_log_count(&r.d, "16 dumps waiting for their post already"), 1);

	/* no post: never refused, and written now */
	ck_assert_int_eq(kill(r.d.pid, SIGUSR1), 0);
	ck_assert(ITEST_WAIT(itest_count_samples(&r.d, "g1") == 1, 30000));
	ck_assert_uint_eq(itest_num(&r.d, NULL, "dumps_pending"), VMT_DUMP_POSTED_MAX);

	rc = testd_stop(&r.d);
	ck_assert_msg(rc == 0, "vmtraced exited with %d (log: %s)", rc, r.d.log);
	for (uint32_t i = 0; i < VMT_DUMP_POSTED_MAX; i++) {
		ck_assert_int_eq(ictl_recv(fd, m, 10000), 1);
		cancelled += m->type == VMT_CTL_ERROR && m->err == ECANCELED && m->id >= 1 &&
			     m->id <= VMT_DUMP_POSTED_MAX;
	}
	ck_assert_uint_eq(cancelled, VMT_DUMP_POSTED_MAX);
	close(fd);
	buf_free(&tlv);
	free(m);
	itest_run_end(&r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("dumps");
	TCase *t = tcase_create("pending dumps");
	int rc;

	itest_input_prepare(&in);
	TEST_ADD(t, long_post_holds_no_other_dump);
	TEST_ADD(t, two_posts_two_dumps);
	TEST_ADD(t, posted_dumps_are_bounded);
	tcase_set_timeout(t, 120);
	suite_add_tcase(s, t);
	rc = test_run_suite(s);
	itest_input_free(&in);
	return rc;
}
