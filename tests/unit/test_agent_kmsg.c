/* SPDX-License-Identifier: MIT */
/*
 * The agent's triggers (agent/trigger.c): which /dev/kmsg records are a
 * kernel oops, BUG, WARNING or panic; the rate limit; the request socket.
 * The agent is not part of libvmt, so its one source file is compiled in.
 */
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../agent/trigger.c"
#include "testutil.h"

static bool match(const char *rec, char *text, size_t size)
{
	const char *t;
	size_t n;

	if (!trigger_kmsg_match(rec, strlen(rec), &t, &n))
		return false;
	ck_assert_uint_lt(n, size);
	memcpy(text, t, n);
	text[n] = 0;
	return true;
}

START_TEST(kmsg_markers_of_6_1)
{
	/* as 6.1 prints them (x86 page fault, die(), BUG(), __warn(), lockdep,
	 * panic(), the soft-lockup watchdog, KASAN; arm64's die()) */
	static const char *const lines[] = {
		"BUG: kernel NULL pointer dereference, address: 0000000000000000",
		"BUG: unable to handle page fault for address: ffffc90000a3b000",
		"Oops: 0002 [#1] PREEMPT SMP NOPTI",
		"invalid opcode: 0000 [#1] PREEMPT SMP NOPTI",
		"general protection fault, probably for non-canonical address 0xdead000000000100: 0000 [#1] PREEMPT SMP NOPTI",
		"kernel BUG at mm/slub.c:379!",
		"WARNING: CPU: 1 PID: 123 at kernel/workqueue.c:1438 __queue_work+0x3a1/0x4a0",
		"WARNING: possible circular locking dependency detected",
		"Kernel panic - not syncing: Fatal exception",
		"watchdog: BUG: soft lockup - CPU#0 stuck for 22s! [sh:123]",
		"BUG: KASAN: slab-out-of-bounds in foo+0x1/0x2",
		"Internal error: Oops: 0000000096000005 [#1] PREEMPT SMP",
		"Unable to handle kernel NULL pointer dereference at virtual address 0000000000000000",
	};
	char rec[512], text[512];

	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
		snprintf(rec, sizeof(rec), "%zu,%zu,12345678,-;%s\n SUBSYSTEM=cpu\n DEVICE=+cpu:0\n",
			 i % 8, 1000 + i, lines[i]);
		ck_assert_msg(match(rec, text, sizeof(text)), "not matched: %s", lines[i]);
		ck_assert_str_eq(text, lines[i]);	/* the first line only */
	}
	/* continuation records and the header's flags */
	ck_assert(match("4,7,9,c;WARNING: CPU: 0 PID: 1 at x.c:1 f+0x0/0x1", text, sizeof(text)));
	ck_assert_str_eq(text, "WARNING: CPU: 0 PID: 1 at x.c:1 f+0x0/0x1");
}
END_TEST

START_TEST(kmsg_ordinary_lines)
{
	static const char *const recs[] = {
		"6,1,1,-;virtio_net virtio0 enp0s3: renamed from eth0",
		"6,2,1,-;a line with BUG: in the middle",
		"6,3,1,-;audit: type=1400 audit(1.2:3): apparmor=\"DENIED\" WARNING: x",
		"4,4,1,-;rcu: INFO: rcu_sched detected stalls on CPUs/tasks:",
		"4,5,1,-;two words: BUG: is not a pr_fmt prefix",
		"6,6,1,-;Bugs: none",
		/* user space writing to /dev/kmsg: facility 1, not the kernel's */
		"12,7,1,-;WARNING: CPU: 0 PID: 1 at fake",
		"14,8,1,-;BUG: kernel NULL pointer dereference",
		"9,9,1,-;Kernel panic - not syncing: fake",
		/* malformed */
		"",
		";BUG: x",
		"BUG: x",
		"x,1,1,-;BUG: x",
		"4;BUG: x",
		"99999999999999,1,1,-;BUG: x",
		"4,1,1,-;",
		"4,1,1,-;\nBUG: on a continuation line",
		"4,1,1,-;Oops",
	};
	char text[512];

	for (size_t i = 0; i < sizeof(recs) / sizeof(recs[0]); i++)
		ck_assert_msg(!match(recs[i], text, sizeof(text)), "matched: %s", recs[i]);
}
END_TEST

START_TEST(kmsg_never_reads_past_the_record)
{
	char rec[64];
	const char *t;
	size_t n;

	/* not NUL-terminated: the matcher must keep to len */
	memset(rec, 'A', sizeof(rec));
	memcpy(rec, "4,1,1,-;BUG: ", 13);
	ck_assert(trigger_kmsg_match(rec, sizeof(rec), &t, &n));
	ck_assert_uint_eq(n, sizeof(rec) - 8);
	for (size_t len = 0; len < 13; len++)
		ck_assert(!trigger_kmsg_match(rec, len, &t, &n));
	memcpy(rec, "4,1,1,-;x: 0000 [#", 18);
	ck_assert(!trigger_kmsg_match(rec, 18, &t, &n));
}
END_TEST

START_TEST(sanitize_replaces_non_printable)
{
	char out[8];

	trigger_sanitize(out, "a\tb\x01\xff~ \x7f", 8);
	ck_assert_mem_eq(out, "a?b??~ ?", 8);
}
END_TEST

struct sent {
	int calls, refuse;
	char last[VMT_TRIGGER_REASON_MAX + 1];
	size_t len;
};

static int fake_send(void *ctx, const char *reason, size_t len)
{
	struct sent *s = ctx;

	s->calls++;
	if (s->refuse)
		return -ENOTCONN;
	ck_assert_uint_le(len, VMT_TRIGGER_REASON_MAX);
	memcpy(s->last, reason, len);
	s->last[len] = 0;
	s->len = len;
	return 0;
}

START_TEST(fire_is_rate_limited_and_bounded)
{
	struct vmt_agent_trigger t = { .sock_fd = -1, .kmsg_fd = -1, .send = fake_send };
	struct sent s = { .refuse = 1 };
	char big[400];

	t.ctx = &s;
	/* not streaming: refused, and it does not start the limiter */
	ck_assert_int_eq(trigger_fire(&t, "one", 3), -ENOTCONN);
	ck_assert_uint_eq(t.last_ns, 0);
	s.refuse = 0;
	ck_assert_int_eq(trigger_fire(&t, "one\n", 4), 0);
	ck_assert_str_eq(s.last, "one?");
	for (int i = 0; i < 50; i++)
		ck_assert_int_eq(trigger_fire(&t, "flood", 5), -EAGAIN);
	ck_assert_uint_eq(t.limited, 50);
	ck_assert_int_eq(s.calls, 2);
	/* a second later the next one goes, and the count starts again */
	t.last_ns -= VMT_TRIGGER_INTERVAL_NS;
	memset(big, 'x', sizeof(big));
	ck_assert_int_eq(trigger_fire(&t, big, sizeof(big)), 0);
	ck_assert_uint_eq(s.len, VMT_TRIGGER_REASON_MAX);
	ck_assert_uint_eq(t.limited, 0);
	ck_assert_uint_eq(t.sent, 2);
}
END_TEST

/* One `vmtrace-agent trigger` in a child; the agent side answers here. */
static int request(struct vmt_agent_trigger *t, const char *path, const char *reason)
{
	pid_t pid = fork();
	int st;

	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(trigger_request(path, reason) < 0 ? 1 : 0);
	for (int i = 0; i < 50; i++) {
		struct pollfd p = { t->sock_fd, POLLIN, 0 };

		if (waitpid(pid, &st, WNOHANG) == pid)
			return WEXITSTATUS(st);
		if (poll(&p, 1, 100) > 0)
			trigger_on_request(t);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	return WEXITSTATUS(st);
}

START_TEST(request_socket_round_trip)
{
	struct vmt_agent_trigger t, t2;
	struct sent s = { 0 };
	char *dir = test_mkdtemp("trig"), path[256];
	struct stat st;

	snprintf(path, sizeof(path), "%s/agent.sock", dir);
	ck_assert_int_ne(request(&(struct vmt_agent_trigger){ .sock_fd = -1 }, path, "x"), 0);
	trigger_open(&t, path, false, fake_send, &s);
	ck_assert_int_ge(t.sock_fd, 0);
	ck_assert_int_eq(t.kmsg_fd, -1);
	ck_assert_int_eq(lstat(path, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	ck_assert_uint_eq(st.st_mode & 0777, 0600);
	/* a second agent does not steal the socket of a running one */
	trigger_open(&t2, path, false, fake_send, &s);
	ck_assert_int_eq(t2.sock_fd, -1);

	ck_assert_int_eq(request(&t, path, "disk \x1b[31mfull"), 0);
	ck_assert_str_eq(s.last, "disk ?[31mfull");
	ck_assert_int_ne(request(&t, path, "again"), 0);	/* rate limited */
	ck_assert_uint_eq(t.limited, 1);
	t.last_ns -= VMT_TRIGGER_INTERVAL_NS;
	s.refuse = 1;
	ck_assert_int_ne(request(&t, path, "idle"), 0);		/* not streaming */
	ck_assert_int_eq(s.calls, 2);

	trigger_close(&t, path);
	ck_assert_int_lt(lstat(path, &st), 0);
	/* a stale socket file is replaced; something else is never removed */
	trigger_open(&t, path, false, fake_send, &s);
	ck_assert_int_ge(t.sock_fd, 0);
	close(t.sock_fd);
	trigger_open(&t2, path, false, fake_send, &s);
	ck_assert_int_ge(t2.sock_fd, 0);
	trigger_close(&t2, path);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	trigger_open(&t, path, false, fake_send, &s);
	ck_assert_int_eq(t.sock_fd, -1);
	ck_assert_int_eq(rmdir(path), 0);
	test_rmtree(dir);
	free(dir);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("agent_kmsg");
	TCase *t = tcase_create("core");

	tcase_add_test(t, kmsg_markers_of_6_1);
	tcase_add_test(t, kmsg_ordinary_lines);
	tcase_add_test(t, kmsg_never_reads_past_the_record);
	tcase_add_test(t, sanitize_replaces_non_printable);
	tcase_add_test(t, fire_is_rate_limited_and_bounded);
	tcase_add_test(t, request_socket_round_trip);
	suite_add_tcase(s, t);
	return test_run_suite(s);
}
