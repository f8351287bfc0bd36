/* SPDX-License-Identifier: MIT */
/*
 * Integration: guests found in discovery folders by a running vmtraced.
 * A stand-in guest appears in a watched folder (vmtraced layout with FIFO
 * pairs, libvirt layout with sockets) and must be found and streamed; its
 * folder going away takes it offline, forget_after drops it, and a folder
 * that comes back (under a new libvirt domain id) is the same guest.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fakeguest.h"
#include "itest.h"
#include "sample.h"
#include "testd.h"
#include "testutil.h"

static struct itest_input in;

static uint64_t fed_pages(void)
{
	uint64_t n = 0;

	for (unsigned c = 0; c < in.ncpus; c++)
		n += in.npages[c];
	return n;
}

struct disc {
	char *dir;
	char root[300];
	struct testd d;
};

/* The body is pre, then a discovery entry for DIR/guests, then entry (more
 * keys of that entry). */
static void disc_start(struct disc *x, const char *tag, const char *pre, const char *entry,
		       bool make_root)
{
	char body[2048];

	memset(x, 0, sizeof(*x));
	x->dir = test_mkdtemp(tag);
	ck_assert_ptr_nonnull(x->dir);
	ck_assert_int_eq(chmod(x->dir, 0711), 0);	/* reached by a daemon run as nobody */
	snprintf(x->root, sizeof(x->root), "%s/guests", x->dir);
	if (make_root)
		ck_assert_int_eq(mkdir(x->root, 0755), 0);
	snprintf(body, sizeof(body), "%sdiscovery:\n  - path: %s\n%s", pre, x->root, entry);
	ck_assert_int_eq(testd_start(&x->d, x->dir, body), 0);
}

static void disc_end(struct disc *x)
{
	int rc = testd_stop(&x->d);

	ck_assert_msg(rc == 0, "vmtraced exited with %d (log: %s)", rc, x->d.log);
	test_rmtree(x->dir);
	free(x->dir);
}

static void guest_start(struct fakeguest *fg, struct fakeguest_conf *fc, const char *path,
			int sockets)
{
	itest_fg_conf(fc, &in, path, sockets);
	ck_assert_int_eq(fakeguest_start(fg, fc), 0);
}

/* Found, streaming, and every page fed has come in. */
static void expect_found(struct testd *d, const char *name, uint64_t pages_in, int timeout_ms)
{
	itest_expect_streaming(d, name, timeout_ms);
	itest_expect_pages_in(d, name, pages_in);
}

/* vmtraced layout, FIFO pairs: found after the daemon started, offline when
 * its folder goes, back when it comes back. */
START_TEST(vmtraced_layout_fifo)
{
	struct disc x;
	struct fakeguest fg;
	struct fakeguest_conf fc;
	char path[400], junk[400], st[64];

	if (!in.ncpus)
		VMT_SKIP("no ftrace pages: not root and no corpus");
	disc_start(&x, "disc-fifo", "record:\n  ring_size: 16MiB\n", "", true);
	ck_assert_int_eq(itest_nguests(&x.d), 0);

	/* folders that are no guest: no channels, a hidden one, a bad name */
	snprintf(junk, sizeof(junk), "%s/empty", x.root);
	ck_assert_int_eq(mkdir(junk, 0755), 0);
	snprintf(junk, sizeof(junk), "%s/.hidden", x.root);
	ck_assert_int_eq(mkdir(junk, 0755), 0);
	snprintf(path, sizeof(path), "%s/g2", x.root);
	guest_start(&fg, &fc, path, 0);
	expect_found(&x.d, "g2", fed_pages(), 5000);
	ck_assert_uint_eq(itest_num(&x.d, "g2", "flags"), 1);	/* discovered */
	ck_assert_uint_eq(itest_num(&x.d, "g2", "ncpus"), in.ncpus);
	ck_assert_int_eq(itest_nguests(&x.d), 1);
	ck_assert_int_ge(testd_log_count(&x.d, "guest g2: discovered in"), 1);

	/* a reload keeps it, and says so */
	ck_assert_int_eq(itest_ctl(&x.d, st, sizeof(st), "reload"), 0);
	ck_assert_int_eq(testd_log_count(&x.d, "configuration reloaded: 1 guest(s) kept "
					 "(1 discovered), 0 started, 0 removed"), 1);
	ck_assert_uint_eq(itest_num(&x.d, "g2", "sessions"), 1);

	/* the folder goes while the guest still holds its FIFOs open: only
	 * discovery can tell */
	test_rmtree(path);
	ck_assert_int_ne(access(path, F_OK), 0);
	ck_assert_msg(itest_wait_state(&x.d, "g2", "offline", 3000, st, sizeof(st)),
		      "g2 is '%s' 3 s after its folder went", st);
	ck_assert_uint_eq(itest_num(&x.d, "g2", "sessions"), 1);
	/* its rings stay (forget_after 1h) */
	ck_assert_uint_eq(itest_num(&x.d, "g2", "pages"), fed_pages());
	fakeguest_stop(&fg);

	/* back at the same place: the same guest, a second session */
	guest_start(&fg, &fc, path, 0);
	expect_found(&x.d, "g2", 2 * fed_pages(), 6000);
	ck_assert_uint_eq(itest_num(&x.d, "g2", "sessions"), 2);
	ck_assert_int_eq(itest_nguests(&x.d), 1);
	fakeguest_stop(&fg);
	disc_end(&x);
}
END_TEST

/* libvirt layout: DIR/domain-<id>-<name> with sockets; gone -> offline ->
 * forgotten after forget_after (housekeeping every 5 s); a folder that
 * appears later under another id is the guest again. */
START_TEST(libvirt_layout_forget_and_return)
{
	struct disc x;
	struct fakeguest fg;
	struct fakeguest_conf fc;
	char path[400], st[64];
	uint64_t t0;

	if (!in.ncpus)
		VMT_SKIP("no ftrace pages: not root and no corpus");
	disc_start(&x, "disc-virt", "forget_after: 1s\nrecord:\n  ring_size: 16MiB\n",
		   "    layout: libvirt\n", true);
	snprintf(path, sizeof(path), "%s/domain-5-web", x.root);
	guest_start(&fg, &fc, path, 1);
	expect_found(&x.d, "web", fed_pages(), 5000);
	ck_assert_int_eq(itest_nguests(&x.d), 1);
	ck_assert_uint_eq(itest_num(&x.d, "web", "flags"), 1);
	ck_assert_uint_gt(itest_num(&x.d, NULL, "mem_used"), 0);

	/* the guest keeps its sockets connected: only the folder tells */
	test_rmtree(path);
	ck_assert_msg(itest_wait_state(&x.d, "web", "offline", 3000, st, sizeof(st)),
		      "web is '%s' 3 s after its folder went", st);
	t0 = itest_now_ms();
	ck_assert_msg(ITEST_WAIT(itest_nguests(&x.d) == 0, 12000),
		      "web still listed %llu ms after going offline with forget_after 1s",
		      (unsigned long long)(itest_now_ms() - t0));
	ck_assert_int_eq(testd_log_count(&x.d, "guest web: forgotten"), 1);
	ck_assert_uint_eq(itest_num(&x.d, NULL, "mem_used"), 0);
	fakeguest_stop(&fg);

	/* the domain starts again, under a new id */
	snprintf(path, sizeof(path), "%s/domain-6-web", x.root);
	guest_start(&fg, &fc, path, 1);
	expect_found(&x.d, "web", fed_pages(), 5000);
	ck_assert_uint_eq(itest_num(&x.d, "web", "sessions"), 1);
	ck_assert_int_eq(itest_nguests(&x.d), 1);
	fakeguest_stop(&fg);
	disc_end(&x);
}
END_TEST

/* A restart under a new domain id before forget_after: the same guest,
 * with the rings and counters it had. */
START_TEST(libvirt_new_id_same_guest)
{
	struct disc x;
	struct fakeguest fg;
	struct fakeguest_conf fc;
	char path[400], st[64], out[8192];
	struct vmt_sample *s;
	char why[256];

	if (!in.ncpus)
		VMT_SKIP("no ftrace pages: not root and no corpus");
	disc_start(&x, "disc-virt2", "record:\n  ring_size: 16MiB\n  flush_timeout: 5000ms\n",
		   "    layout: libvirt\n", true);
	snprintf(path, sizeof(path), "%s/domain-5-web", x.root);
	guest_start(&fg, &fc, path, 1);
	expect_found(&x.d, "web", fed_pages(), 5000);
	fakeguest_stop(&fg);	/* sockets close: offline */
	ck_assert_msg(itest_wait_state(&x.d, "web", "offline", 3000, st, sizeof(st)),
		      "web is '%s' after its sockets closed", st);
	test_rmtree(path);

	snprintf(path, sizeof(path), "%s/domain-6-web", x.root);
	guest_start(&fg, &fc, path, 1);
	expect_found(&x.d, "web", 2 * fed_pages(), 8000);
	ck_assert_int_eq(itest_nguests(&x.d), 1);
	ck_assert_uint_eq(itest_num(&x.d, "web", "sessions"), 2);
	ck_assert_uint_eq(itest_num(&x.d, "web", "aux_version"), 1);
	ck_assert_int_ge(testd_log_count(&x.d, "domain-6-web"), 1);
	ck_assert_int_eq(fakeguest_wait_sent(&fg, 10000), 0);

	/* the rings kept both sessions' pages */
	ck_assert_int_eq(itest_ctl(&x.d, out, sizeof(out), "dump web"), 0);
	*strchrnul(out, '\n') = 0;
	ck_assert_int_eq(sample_read(out, &s, why, sizeof(why)), 0);
	for (unsigned c = 0; c < in.ncpus; c++)
		ck_assert_uint_eq(s->cpus[c].npages, 2 * in.npages[c]);
	sample_free(s);
	fakeguest_stop(&fg);
	disc_end(&x);
}
END_TEST

/* Two live folders with one name (libvirt keeps 20 characters of a domain's
 * name: production-database-01 and -02 both become production-database-):
 * the guest recording keeps its folder, the other is said and counted, not
 * mixed into its samples. */
START_TEST(libvirt_same_name_twice)
{
	struct disc x;
	struct fakeguest fg, fg2;
	struct fakeguest_conf fc, fc2;
	char path[400], path2[400];

	if (!in.ncpus)
		VMT_SKIP("no ftrace pages: not root and no corpus");
	disc_start(&x, "disc-twice", "record:\n  ring_size: 16MiB\n", "    layout: libvirt\n", true);
	snprintf(path, sizeof(path), "%s/domain-5-web", x.root);
	guest_start(&fg, &fc, path, 1);
	expect_found(&x.d, "web", fed_pages(), 5000);
	snprintf(path2, sizeof(path2), "%s/domain-6-web", x.root);
	guest_start(&fg2, &fc2, path2, 1);
	ck_assert_msg(ITEST_WAIT(itest_num(&x.d, NULL, "discovery_refused") >= 1, 15000),
		      "discovery_refused is %llu (log: %s)",
		      (unsigned long long)itest_num(&x.d, NULL, "discovery_refused"), x.d.log);
	ck_assert_int_ge(testd_log_count(&x.d, "domain-6-web not recorded: another folder of that "
					 "name is being recorded"), 1);
	ck_assert_int_eq(itest_nguests(&x.d), 1);
	ck_assert_uint_eq(itest_num(&x.d, "web", "sessions"), 1);
	ck_assert_int_eq(testd_log_count(&x.d, "now at"), 0);	/* web did not move */
	fakeguest_stop(&fg2);
	fakeguest_stop(&fg);
	disc_end(&x);
}
END_TEST

/* The ports of a guest appear one by one (channels hot-plugged with virsh
 * attach-device, FIFOs made by a shell loop): the guest found with fewer
 * data channels than its agent has CPUs must be streamed once they are all
 * there. */
START_TEST(channels_appear_one_by_one)
{
	struct disc x;
	struct fakeguest fg;
	struct fakeguest_conf fc;
	static const char *const first[] = { "agent-ctl-path", "trace-path-cpu0" };
	char path[400], p[500], st[64];

	if (!in.ncpus)
		VMT_SKIP("no ftrace pages: not root and no corpus");
	if (in.ncpus < 2)
		VMT_SKIP("the input has one CPU");
	disc_start(&x, "disc-late-cpu", "record:\n  ring_size: 16MiB\n", "", true);
	snprintf(path, sizeof(path), "%s/g4", x.root);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	for (int i = 0; i < 2; i++) {
		snprintf(p, sizeof(p), "%s/%s.in", path, first[i]);
		ck_assert_int_eq(mkfifo(p, 0600), 0);
		snprintf(p, sizeof(p), "%s/%s.out", path, first[i]);
		ck_assert_int_eq(mkfifo(p, 0600), 0);
	}
	ck_assert_msg(itest_wait_state(&x.d, "g4", "connecting", 3000, st, sizeof(st)),
		      "g4 is '%s' with its control port there", st);
	/* the other ports, and the agent */
	guest_start(&fg, &fc, path, 0);
	ck_assert_msg(itest_wait_state(&x.d, "g4", "streaming", 35000, st, sizeof(st)),
		      "g4 is '%s' 35 s after all its %u data ports were there (log: %s)", st,
		      in.ncpus, x.d.log);
	ck_assert_uint_eq(itest_num(&x.d, "g4", "ncpus"), in.ncpus);
	itest_expect_pages_in(&x.d, "g4", fed_pages());
	fakeguest_stop(&fg);
	disc_end(&x);
}
END_TEST

/* A discovery folder made after the daemon started is found by the
 * periodic pass (inotify cannot watch what is not there). */
/* A guest folder (its control port there) whose name is no guest name:
 * passed over, but logged and counted, never silently. */
static void make_ports(const char *root, const char *entry)
{
	char path[600];

	snprintf(path, sizeof(path), "%s/%s", root, entry);
	ck_assert_int_eq(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/%s/agent-ctl-path.in", root, entry);
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	snprintf(path, sizeof(path), "%s/%s/agent-ctl-path.out", root, entry);
	ck_assert_int_eq(mkfifo(path, 0600), 0);
}

START_TEST(bad_names_counted)
{
	struct disc x;
	struct fakeguest fg;
	struct fakeguest_conf fc;
	char path[400], longname[80];

	if (!in.ncpus)
		VMT_SKIP("no ftrace pages: not root and no corpus");
	disc_start(&x, "disc-names", "record:\n  ring_size: 16MiB\n", "", true);
	memset(longname, 'n', 70);
	longname[70] = 0;
	make_ports(x.root, longname);
	make_ports(x.root, "two words");
	make_ports(x.root, "host");
	/* a folder without ports is no guest: nothing to say about it */
	snprintf(path, sizeof(path), "%s/no ports!", x.root);
	ck_assert_int_eq(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/good", x.root);
	guest_start(&fg, &fc, path, 0);
	expect_found(&x.d, "good", fed_pages(), 5000);
	ck_assert_msg(ITEST_WAIT(itest_num(&x.d, NULL, "discovery_refused") >= 3, 5000),
		      "discovery_refused is %llu",
		      (unsigned long long)itest_num(&x.d, NULL, "discovery_refused"));
	ck_assert_int_eq(itest_nguests(&x.d), 1);
	ck_assert_int_ge(testd_log_count(&x.d, "/two words not recorded: a guest name"), 1);
	ck_assert_int_ge(testd_log_count(&x.d, "/host not recorded"), 1);
	ck_assert_int_ge(testd_log_count(&x.d, "nnnnnnnnnn not recorded"), 1);
	ck_assert_int_eq(testd_log_count(&x.d, "no ports!"), 0);
	fakeguest_stop(&fg);
	disc_end(&x);
}
END_TEST

/*
 * As its own user, the daemon cannot enter a guest folder of another
 * user's (mode 0700, as libvirt's are QEMU's user's): the folder is named
 * with its errno in the log, in status (a "!" line) and --json, and
 * counted in metrics, each rescan again; never skipped without a word.
 */
START_TEST(unreadable_folder_counted)
{
	struct disc x;
	char path[400], out[65536];

	if (!test_have_root())
		VMT_SKIP("not root: cannot run the daemon as another user");
	disc_start(&x, "disc-locked", "user: nobody\n", "", true);
	ck_assert(ITEST_WAIT(testd_log_count(&x.d, "privilege: running as nobody") == 1, 10000));
	make_ports(x.root, "locked");
	snprintf(path, sizeof(path), "%s/locked", x.root);
	ck_assert_int_eq(chmod(path, 0700), 0);	/* root's: nobody cannot enter */
	/* UINT64_MAX: no such counter */
	ck_assert_msg(ITEST_WAIT(itest_num(&x.d, NULL, "discovery_unreadable") >= 2 &&
				 itest_num(&x.d, NULL, "discovery_unreadable") != UINT64_MAX, 30000),
		      "discovery_unreadable is %llu (log: %s)",
		      (unsigned long long)itest_num(&x.d, NULL, "discovery_unreadable"), x.d.log);
	ck_assert_uint_eq(itest_num(&x.d, NULL, "discovery_unreadable_errno"), 13);
	ck_assert_int_eq(itest_nguests(&x.d), 0);
	ck_assert_int_eq(itest_ctl(&x.d, out, sizeof(out), "status"), 0);
	ck_assert_msg(strstr(out, "! discovery: ") && strstr(out, "/guests/locked: Permission "
							      "denied (errno 13)"),
		      "no '!' line naming the folder in:\n%s", out);
	ck_assert_int_eq(itest_ctl(&x.d, out, sizeof(out), "--json status"), 0);
	ck_assert_msg(strstr(out, "/guests/locked\"") != NULL, "no path in --json:\n%s", out);
	ck_assert_int_eq(itest_ctl(&x.d, out, sizeof(out), "metrics"), 0);
	ck_assert_msg(strstr(out, "\nvmtraced_discovery_unreadable_total ") != NULL,
		      "no counter in metrics:\n%s", out);
	/* logged once, not each rescan (the rate limit allows a few a minute) */
	ck_assert_int_ge(testd_log_count(&x.d, "/guests/locked: Permission denied (errno 13)"), 1);
	ck_assert_int_le(testd_log_count(&x.d, "/guests/locked: Permission denied (errno 13)"), 4);
	disc_end(&x);
}
END_TEST

START_TEST(root_created_later)
{
	struct disc x;
	struct fakeguest fg;
	struct fakeguest_conf fc;
	char path[400];

	if (!in.ncpus)
		VMT_SKIP("no ftrace pages: not root and no corpus");
	disc_start(&x, "disc-late", "record:\n  ring_size: 16MiB\n", "", false);
	ck_assert_int_eq(itest_nguests(&x.d), 0);
	ck_assert_int_eq(mkdir(x.root, 0755), 0);
	snprintf(path, sizeof(path), "%s/g3", x.root);
	guest_start(&fg, &fc, path, 0);
	expect_found(&x.d, "g3", fed_pages(), 15000);
	fakeguest_stop(&fg);
	disc_end(&x);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("discovery");
	TCase *t = tcase_create("discovery");
	int rc;

	itest_input_prepare(&in);
	printf("input: %s, %u CPUs\n", in.source, in.ncpus);
	fflush(stdout);
	TEST_ADD(t, vmtraced_layout_fifo);
	TEST_ADD(t, libvirt_layout_forget_and_return);
	TEST_ADD(t, libvirt_new_id_same_guest);
	TEST_ADD(t, libvirt_same_name_twice);
	TEST_ADD(t, root_created_later);
	TEST_ADD(t, channels_appear_one_by_one);
	TEST_ADD(t, bad_names_counted);
	TEST_ADD(t, unreadable_folder_counted);
	tcase_set_timeout(t, 90);
	suite_add_tcase(s, t);
	rc = test_run_suite(s);
	itest_input_free(&in);
	return rc;
}
