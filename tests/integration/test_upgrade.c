/* SPDX-License-Identifier: MIT */
/*
 * Integration: `vmtracectl upgrade`, the hand-over to the installed
 * binary by execve (daemon/upgrade.h). The daemon runs from a copy of the
 * build's vmtraced in the test's folder, as from /usr/sbin: an upgrade
 * execs what that path names then. Two stand-in guests stream, hold half
 * way, the daemon hands over, they go on: the agents must see no new
 * session (no HOST_HELLO, no START: fakeguest counts them), and the dump
 * must hold every page, before and after, byte-exact and in order. A
 * successor of another state layout (build/tests/vmtraced-layout2) must
 * refuse the state, say so, and start the guests afresh.
 *
 * Every page fed is unique: a corpus page whose header time says which
 * one it is (k), as in test_recover.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"
#include "clocksync.h"
#include "meta.h"
#include "page.h"
#include "sample.h"

#define NG 2
#define NPAGES 300	/* per CPU; the rings hold 512 */
#define HOLD 120	/* pages per CPU before the upgrade */
#define BASE_TS ITEST_UNIQUE_BASE
static struct itest_input in;
static uint64_t step_ns;
static unsigned ncpu;

static const char *TOP = "record:\n  ring_size: 2MiB\n";

/* Page k of cpu, told apart from every other (itest_unique_page). */
static void fed_page(unsigned cpu, uint64_t k, uint8_t *out)
{
	itest_unique_page(&in, step_ns, cpu, k, out);
}

static void feed(struct itest_run *r, int g)
{
	for (unsigned c = 0; c < ncpu; c++) {
		r->own[g][c] = malloc((size_t)NPAGES * ITEST_PS);
		ck_assert_ptr_nonnull(r->own[g][c]);
		for (unsigned i = 0; i < NPAGES; i++)
			fed_page(c, i, r->own[g][c] + (size_t)i * ITEST_PS);
		r->fc[g].pages[c] = r->own[g][c];
		r->fc[g].npages[c] = NPAGES;
	}
	r->fc[g].hold_after = HOLD;
}

/* Every fed page 0..NPAGES-1 of every CPU, once, in order, byte for byte. */
static void check_sample(const char *path)
{
	struct vmt_sample *sm = itest_read_sample(path);
	uint8_t want[ITEST_PS];

	ck_assert_uint_eq(sm->ncpus, ncpu);
	for (unsigned c = 0; c < sm->ncpus; c++) {
		const struct vmt_sample_cpu *sc = &sm->cpus[c];

		ck_assert_msg(sc->npages == NPAGES, "%s cpu%u: %u pages, %u fed", path, c, sc->npages,
			      NPAGES);
		for (uint32_t i = 0; i < sc->npages; i++) {
			fed_page(c, i, want);
			ck_assert_msg(!memcmp(sc->pages + (size_t)i * ITEST_PS, want, ITEST_PS),
				      "%s cpu%u page %u: not the page fed there", path, c, i);
		}
	}
	sample_free(sm);
}

/* The stand-ins let go of the rest of their pages; every page reaches the
 * rings; the first ndump guests' samples hold all of them, byte-exact. */
static void release_and_check(struct itest_run *r, int ndump)
{
	char sample[PATH_MAX], name[8];

	for (int g = 0; g < NG; g++) {
		ck_assert_int_eq(fakeguest_release(&r->fg[g]), 0);
		ck_assert_int_eq(fakeguest_wait_sent(&r->fg[g], 20000), 0);
	}
	for (int g = 0; g < NG; g++) {
		snprintf(name, sizeof(name), "g%d", g + 1);
		itest_expect_pages_in(&r->d, name, NPAGES * ncpu);
	}
	for (int g = 0; g < ndump; g++) {
		snprintf(name, sizeof(name), "g%d", g + 1);
		itest_dump_one(&r->d, name, sample, sizeof(sample));
		check_sample(sample);
	}
}

static int guest_samples(struct itest_run *r, const char *guest, char ***list)
{
	char dir[400];

	snprintf(dir, sizeof(dir), "%s/%s", r->d.state, guest);
	return itest_samples(dir, list);
}

/* The daemon from DIR/vmtraced (a copy of the build's), guests held at
 * HOLD; discovered: the guests are not configured but found in DIR/guests
 * (a discovery folder, vmtraced layout). */
static void start_as(struct itest_run *r, char *bin, size_t n, bool discovered)
{
	struct testd_opts o = { 0 };

	snprintf(bin, n, "%s/vmtraced", r->dir);
	ck_assert_int_eq(itest_sh("cp %s/%s/vmtraced %s", test_srcdir(), test_builddir(), bin), 0);
	o.bin = bin;
	if (discovered) {
		ck_assert_int_eq(itest_sh("mkdir -p %s/guests", r->dir), 0);
		for (int g = 0; g < NG; g++)
			snprintf(r->chan[g], sizeof(r->chan[g]), "%s/guests/g%d", r->dir, g + 1);
	}
	for (int g = 0; g < NG; g++) {
		feed(r, g);
		itest_run_guest(r, g);
	}
	if (discovered) {
		snprintf(r->body, sizeof(r->body), "%sdiscovery:\n  - path: %s/guests\n", TOP, r->dir);
		ck_assert_msg(testd_start_opts(&r->d, r->dir, r->body, &o) == 0,
			      "vmtraced did not start (log: %s)", r->d.log);
	} else {
		itest_run_daemon_opts(r, TOP, NG, &o);
	}
	itest_expect_streaming(&r->d, "g1", 20000);
	itest_expect_streaming(&r->d, "g2", 20000);
	itest_expect_pages_in(&r->d, "g1", HOLD * ncpu);
	itest_expect_pages_in(&r->d, "g2", HOLD * ncpu);
	for (int g = 0; g < NG; g++) {
		fakeguest_poll(&r->fg[g]);
		ck_assert_uint_eq(r->fg[g].starts, 1);
	}
}

static void start(struct itest_run *r, char *bin, size_t n)
{
	start_as(r, bin, n, false);
}

/* The keeper that held the old address space across execve: its exit
 * said and reaped (no zombie left under the daemon). */
static void expect_keeper_reaped(struct itest_run *r)
{
	const char *key = "the old address space is let go (keeper ";
	char line[1024];
	pid_t keeper = 0;
	FILE *f;

	ck_assert_msg(ITEST_WAIT(testd_log_count(&r->d, key) == 1, 20000), "log: %s", r->d.log);
	f = fopen(r->d.log, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		if (strstr(line, key))
			keeper = (pid_t)atoi(strstr(line, key) + strlen(key));
	fclose(f);
	ck_assert_int_gt(keeper, 0);
	ck_assert_msg(kill(keeper, 0) < 0 && errno == ESRCH, "keeper %d still there", (int)keeper);
}

/* Two guests held half way; the upgrade asked by vmtracectl, or by
 * SIGUSR2; the guests configured, or found by discovery (libvirt's are). */
static void keeps_sessions(bool by_signal, bool discovered)
{
	unsigned hellos[NG];
	char bin[PATH_MAX], out[256];
	struct itest_run r;
	pid_t pid;

	itest_run_init(&r, &in, by_signal ? "upgrade-sig" : discovered ? "upgrade-disc" : "upgrade");
	start_as(&r, bin, sizeof(bin), discovered);
	for (int g = 0; g < NG; g++)
		hellos[g] = r.fg[g].host_hellos;
	pid = r.d.pid;
	if (by_signal)
		ck_assert_int_eq(kill(pid, SIGUSR2), 0);
	else
		ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "upgrade"), 0);
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, "upgrade: 2 guest session(s) taken over, 0 "
						 "started afresh") == 1, 20000), "log: %s", r.d.log);
	ck_assert_int_eq(r.d.pid, pid);	/* the same process, another program */
	/* the control socket itself taken over, not bound anew: a client that
	 * connected during the hand-over is answered by the successor */
	ck_assert_int_eq(testd_log_count(&r.d, "control socket passed by systemd"), 1);
	ck_assert_int_eq(testd_log_count(&r.d, "running:"), 2);
	/* the sessions first, then the detectors and host source; the old
	 * address space let go beside it, by a keeper the successor reaps */
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, "detectors and host source set up after "
						 "the take-over") == 1, 20000), "log: %s", r.d.log);
	expect_keeper_reaped(&r);
	release_and_check(&r, NG);
	for (int g = 0; g < NG; g++) {
		fakeguest_poll(&r.fg[g]);
		ck_assert_msg(r.fg[g].host_hellos == hellos[g] && r.fg[g].starts == 1,
			      "g%d: %u HOST_HELLOs (%u before), %u STARTs", g + 1, r.fg[g].host_hellos,
			      hellos[g], r.fg[g].starts);
	}
	ck_assert_uint_eq(itest_num(&r.d, "g1", "sessions"), 1);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "upgrades"), 1);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "sessions_adopted"), 2);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "sessions_refused"), 0);
	itest_run_end(&r);
}

START_TEST(upgrade_keeps_sessions)
{
	ITEST_NEED_INPUT(in);
	keeps_sessions(false, false);
}
END_TEST

/* The successor finds the discovered guests before it takes the sessions
 * over: found after, their channels were closed and they started afresh. */
START_TEST(upgrade_keeps_discovered_sessions)
{
	ITEST_NEED_INPUT(in);
	keeps_sessions(false, true);
}
END_TEST

START_TEST(sigusr2_upgrades)
{
	ITEST_NEED_INPUT(in);
	keeps_sessions(true, false);
}
END_TEST

/* Under its own system call filter the daemon cannot execve: the upgrade
 * is refused, said to the client, and recording goes on untouched. */
START_TEST(upgrade_refused_under_the_sandbox)
{
	char out[512];
	struct itest_run r;

	ITEST_NEED_INPUT(in);
	itest_run_init(&r, &in, "upgrade-sandbox");
	feed(&r, 0);
	r.fc[0].hold_after = 0;
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "sandbox: true\nrecord:\n  ring_size: 2MiB\n", 1);
	itest_expect_streaming(&r.d, "g1", 20000);
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "upgrade 2>&1"), 1);
	ck_assert_msg(strstr(out, "does not allow execve") != NULL, "vmtracectl said: %s", out);
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg[0], 20000), 0);
	itest_expect_pages_in(&r.d, "g1", NPAGES * ncpu);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "sessions"), 1);
	itest_run_end(&r);
}
END_TEST

/*
 * The guests go on writing, in pieces that cut pages, while the hand-over
 * runs: what lands in the FIFOs meanwhile (and the page half filled) is
 * the successor's to read. Upgrades refused while a control message is
 * under way (EBUSY) are tried again.
 */
START_TEST(upgrade_while_streaming)
{
	char bin[PATH_MAX], out[256], sample[PATH_MAX];
	struct itest_run r;
	struct testd_opts o = { 0 };
	int tries = 0;

	ITEST_NEED_INPUT(in);
	itest_run_init(&r, &in, "upgrade-stream");
	snprintf(bin, sizeof(bin), "%s/vmtraced", r.dir);
	ck_assert_int_eq(itest_sh("cp %s/%s/vmtraced %s", test_srcdir(), test_builddir(), bin), 0);
	o.bin = bin;
	for (int g = 0; g < NG; g++) {
		feed(&r, g);
		r.fc[g].hold_after = 0;
		r.fc[g].pages_per_sec = 400;
		r.fc[g].chunk = 1000;
		itest_run_guest(&r, g);
	}
	itest_run_daemon_opts(&r, TOP, NG, &o);
	ck_assert(itest_wait_num_ge(&r.d, "g1", "pages_in", 40 * ncpu, 20000));
	while (itest_ctl(&r.d, out, sizeof(out), "upgrade 2>/dev/null") != 0 && tries++ < 50)
		;
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, "upgrade: 2 guest session(s) taken over, 0 "
						 "started afresh") == 1, 20000), "log: %s", r.d.log);
	for (int g = 0; g < NG; g++) {
		ck_assert_int_eq(fakeguest_wait_sent(&r.fg[g], 30000), 0);
		fakeguest_poll(&r.fg[g]);
		ck_assert_uint_eq(r.fg[g].starts, 1);
	}
	itest_expect_pages_in(&r.d, "g1", NPAGES * ncpu);
	itest_expect_pages_in(&r.d, "g2", NPAGES * ncpu);
	itest_dump_one(&r.d, "g1", sample, sizeof(sample));
	check_sample(sample);
	itest_dump_one(&r.d, "g2", sample, sizeof(sample));
	check_sample(sample);
	itest_run_end(&r);
}
END_TEST

/*
 * A guest's QEMU that is gone when the successor's detectors load (it died
 * while none watched: from the old process's execve on) is noticed: the
 * successor checks the pid the old process knew and dumps the guest. Here
 * the stand-in QEMU (the pidfile's pid) exits 0 before the upgrade, which
 * the old process's detector leaves alone (on_clean_exit: false): only the
 * successor's check can say it.
 */
/* The stand-in QEMU's end: a clean exit, as at virsh shutdown. */
static void exit_clean(int sig)
{
	_exit(0);
}

START_TEST(upgrade_notices_a_qemu_gone)
{
	char bin[PATH_MAX], out[256], body[8192], g[600], pidfile[PATH_MAX], **list = NULL;
	struct testd_opts o = { 0 };
	struct itest_run r;
	sigset_t term, old;
	int st, n;
	pid_t qemu;
	FILE *f;

	ITEST_NEED_INPUT(in);
	itest_run_init(&r, &in, "upgrade-qemu");
	snprintf(bin, sizeof(bin), "%s/vmtraced", r.dir);
	ck_assert_int_eq(itest_sh("cp %s/%s/vmtraced %s", test_srcdir(), test_builddir(), bin), 0);
	o.bin = bin;
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_BLOCK, &term, &old);	/* until the child's handler is in place */
	qemu = fork();
	ck_assert_int_ge(qemu, 0);
	if (!qemu) {
		signal(SIGTERM, exit_clean);
		sigprocmask(SIG_SETMASK, &old, NULL);
		for (;;)
			pause();
	}
	sigprocmask(SIG_SETMASK, &old, NULL);
	snprintf(pidfile, sizeof(pidfile), "%s/qemu.pid", r.dir);
	f = fopen(pidfile, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "%d\n", (int)qemu);
	fclose(f);
	feed(&r, 0);
	r.fc[0].hold_after = 0;
	itest_run_guest(&r, 0);
	itest_guest_yaml(g, sizeof(g), &r, 0);
	snprintf(body, sizeof(body), "%sguests:\n%s    pidfile: %s\n", TOP, g, pidfile);
	ck_assert_int_eq(testd_start_opts(&r.d, r.dir, body, &o), 0);
	itest_expect_streaming(&r.d, "g1", 20000);
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg[0], 20000), 0);
	itest_expect_pages_in(&r.d, "g1", NPAGES * ncpu);
	ck_assert_int_eq(kill(qemu, SIGTERM), 0);
	ck_assert_int_eq(waitpid(qemu, &st, 0), qemu);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "upgrade"), 0);
	snprintf(g, sizeof(g), "process_death: guest process %d exited during the hand-over "
		 "(status unknown)", (int)qemu);
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, g) == 1, 20000), "log: %s", r.d.log);
	ck_assert_msg(ITEST_WAIT((n = guest_samples(&r, "g1", &list), itest_free_list(list, n),
				  n == 1), 20000), "no sample of g1; log: %s", r.d.log);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "sessions_adopted"), 1);
	itest_run_end(&r);
}
END_TEST

/*
 * A reload that changes what only a new process takes (dump_reserve, the
 * memory allocated at start) hands over to one that reads the file: the
 * client has its answer, the sessions are kept, the new size is in force,
 * and every page is still in the dump.
 */
START_TEST(reload_hands_over)
{
	char bin[PATH_MAX], out[256], body[8192], sample[PATH_MAX], g[600];
	struct itest_run r;
	pid_t pid;

	ITEST_NEED_INPUT(in);
	itest_run_init(&r, &in, "upgrade-reload");
	start(&r, bin, sizeof(bin));
	pid = r.d.pid;
	ck_assert_uint_eq(itest_num(&r.d, NULL, "reserve"), 32u << 20);
	snprintf(body, sizeof(body), "%sdump_reserve: 16MiB\nguests:\n", TOP);
	for (int i = 0; i < NG; i++) {
		itest_guest_yaml(g, sizeof(g), &r, i);
		strncat(body, g, sizeof(body) - strlen(body) - 1);
	}
	ck_assert_int_eq(itest_write_conf(&r.d, body), 0);
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "reload"), 0);
	ck_assert_str_eq(out, "configuration reloaded\n");
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, "upgrade: 2 guest session(s) taken over, 0 "
						 "started afresh") == 1, 20000), "log: %s", r.d.log);
	ck_assert_int_eq(testd_log_count(&r.d, "dump_reserve changed: handing over to a new "
					 "vmtraced that reads them"), 1);
	ck_assert_int_eq(r.d.pid, pid);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "reserve"), 16u << 20);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "upgrades"), 1);
	for (int i = 0; i < NG; i++) {
		ck_assert_int_eq(fakeguest_release(&r.fg[i]), 0);
		ck_assert_int_eq(fakeguest_wait_sent(&r.fg[i], 20000), 0);
		fakeguest_poll(&r.fg[i]);
		ck_assert_uint_eq(r.fg[i].starts, 1);
	}
	itest_expect_pages_in(&r.d, "g1", NPAGES * ncpu);
	itest_dump_one(&r.d, "g1", sample, sizeof(sample));
	check_sample(sample);
	/* the same file again: nothing left to hand over for */
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "reload"), 0);
	ck_assert_int_eq(testd_log_count(&r.d, "handing over to a new vmtraced"), 1);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "upgrades"), 1);
	itest_run_end(&r);
}
END_TEST


/*
 * Started as root without user:, the daemon gave up what becoming another
 * user takes. A reload that names one says it waits for the next start and
 * hands over for the rest (dump_reserve here); the successor, which reads
 * the file itself, keeps the identity it was given instead of failing to
 * become the user and exiting (it did).
 */
START_TEST(reload_new_user_waits_for_a_restart)
{
	char bin[PATH_MAX], out[256], body[8192], g[600];
	struct itest_run r;
	pid_t pid;

	ITEST_NEED_INPUT(in);
	if (geteuid() != 0)
		VMT_SKIP("not root: the daemon has no privilege to give up");
	itest_run_init(&r, &in, "upgrade-user");
	start(&r, bin, sizeof(bin));
	pid = r.d.pid;
	snprintf(body, sizeof(body), "%suser: nobody\ndump_reserve: 16MiB\nguests:\n", TOP);
	for (int i = 0; i < NG; i++) {
		itest_guest_yaml(g, sizeof(g), &r, i);
		strncat(body, g, sizeof(body) - strlen(body) - 1);
	}
	ck_assert_int_eq(itest_write_conf(&r.d, body), 0);
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "reload"), 0);
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, "upgrade: 2 guest session(s) taken over, 0 "
						 "started afresh") == 1, 20000), "log: %s", r.d.log);
	ck_assert_int_eq(testd_log_count(&r.d, "user changed to 'nobody': it takes effect at the "
					 "next start"), 1);
	ck_assert_int_eq(testd_log_count(&r.d, "dump_reserve changed: handing over"), 1);
	ck_assert_int_eq(testd_log_count(&r.d, "user: nobody takes effect at the next start (this "
					 "process, handed over to, cannot change user): running as uid 0"), 1);
	ck_assert_int_eq(r.d.pid, pid);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "reserve"), 16u << 20);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "upgrades"), 1);
	release_and_check(&r, NG);
	for (int i = 0; i < NG; i++) {
		fakeguest_poll(&r.fg[i]);
		ck_assert_uint_eq(r.fg[i].starts, 1);
	}
	itest_run_end(&r);
}
END_TEST

/* KVM's debugfs as the kernel lays it out, for the stand-in's pid: each
 * vCPU c's tsc-offset base + c. */
static void kvm_offsets(const char *kvm, pid_t pid, int64_t base)
{
	for (unsigned c = 0; c < ncpu; c++)
		ck_assert_int_eq(itest_sh("mkdir -p %s/%d-11/vcpu%u && echo %lld > %s/%d-11/vcpu%u/"
					  "tsc-offset.new && mv %s/%d-11/vcpu%u/tsc-offset.new "
					  "%s/%d-11/vcpu%u/tsc-offset", kvm, (int)pid, c,
					  (long long)(base + c), kvm, (int)pid, c, kvm, (int)pid, c, kvm,
					  (int)pid, c), 0);
}

/*
 * Clock points go across the hand-over: KVM's offsets (clock_sync from
 * kvm debugfs) are A before the upgrade, B after. The guest times of the
 * points (host TSC + 1e15 or 2e15) are past every page fed (from 1e12 on),
 * so a sample's points start at the oldest point held: A's, which only
 * the old process read, if they were carried.
 */
START_TEST(upgrade_keeps_clock_points)
{
	const int64_t A = 1000000000000000ll, B = 2000000000000000ll;
	char bin[PATH_MAX], out[256], body[8192], g[600], kvm[400], sample[PATH_MAX];
	struct vmt_buf bundle = { 0 };
	struct testd_opts o = { 0 };
	struct vmt_sample *s;
	struct itest_run r;
	unsigned from_a = 0;

	ITEST_NEED_INPUT(in);
	itest_run_init(&r, &in, "upgrade-clock");
	snprintf(bin, sizeof(bin), "%s/vmtraced", r.dir);
	ck_assert_int_eq(itest_sh("cp %s/%s/vmtraced %s", test_srcdir(), test_builddir(), bin), 0);
	o.bin = bin;
	itest_bundle_with_clock(&in, &bundle, "local global counter [x86-tsc]\n");
	feed(&r, 0);
	r.fc[0].bundle = bundle.data;
	r.fc[0].bundle_len = bundle.len;
	itest_run_guest(&r, 0);
	snprintf(kvm, sizeof(kvm), "%s/kvm", r.dir);
	kvm_offsets(kvm, r.fg[0].pid, A);
	ck_assert_int_eq(itest_sh("echo %d > %s/qemu.pid", (int)r.fg[0].pid, r.dir), 0);
	itest_guest_yaml(g, sizeof(g), &r, 0);
	snprintf(body, sizeof(body), "%shost:\n  clock: x86-tsc\nclock_sync:\n  kvm_debugfs: %s\n"
		 "guests:\n%s    pidfile: %s/qemu.pid\n", TOP, kvm, g, r.dir);
	ck_assert_int_eq(testd_start_opts(&r.d, r.dir, body, &o), 0);
	itest_expect_streaming(&r.d, "g1", 20000);
	itest_expect_pages_in(&r.d, "g1", HOLD * ncpu);
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, "clock sync from KVM's TSC offsets") == 1,
				 20000), "log: %s", r.d.log);
	kvm_offsets(kvm, r.fg[0].pid, B);
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "upgrade"), 0);
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, "upgrade: 1 guest session(s) taken over, 0 "
						 "started afresh") == 1, 20000), "log: %s", r.d.log);
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, "clock sync from KVM's TSC offsets") == 2,
				 20000), "log: %s", r.d.log);
	ck_assert_int_eq(fakeguest_release(&r.fg[0]), 0);
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg[0], 20000), 0);
	itest_expect_pages_in(&r.d, "g1", NPAGES * ncpu);
	itest_dump_one(&r.d, "g1", sample, sizeof(sample));
	check_sample(sample);
	s = itest_read_sample(sample);
	ck_assert_msg(s->have_clock && s->clock.method == VMT_SYNC_KVM, "method %s: %s",
		      sync_method_name(s->clock.method), s->clock.why);
	for (uint32_t i = 0; i < s->clock.npoints; i++) {
		const struct vmt_sync_point *p = &s->clock.points[i];

		ck_assert_uint_lt(p->cpu, ncpu);
		ck_assert_msg(p->offset == -(A + p->cpu) || p->offset == -(B + p->cpu),
			      "point %u: offset %lld", i, (long long)p->offset);
		from_a += p->offset == -(A + p->cpu);
	}
	ck_assert_msg(from_a == ncpu, "%u of %u points from before the upgrade (of %u)", from_a,
		      ncpu, s->clock.npoints);
	sample_free(s);
	buf_free(&bundle);
	itest_run_end(&r);
}
END_TEST

/*
 * An execve that fails (the path names something that is not a program
 * once the request was accepted): the daemon says so and goes on with
 * every session and page, its keeper ended and reaped.
 */
START_TEST(upgrade_failed_exec_goes_on)
{
	char bin[PATH_MAX], out[256];
	struct itest_run r;

	ITEST_NEED_INPUT(in);
	itest_run_init(&r, &in, "upgrade-noexec");
	start(&r, bin, sizeof(bin));
	ck_assert_int_eq(itest_sh("echo 'not a program' > %s.new && chmod 755 %s.new && mv %s.new %s",
				  bin, bin, bin, bin), 0);
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "upgrade"), 0);
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, "upgrade failed, going on: execve") == 1,
				 20000), "log: %s", r.d.log);
	release_and_check(&r, 1);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "upgrades"), 0);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "sessions"), 1);
	itest_run_end(&r);
}
END_TEST

START_TEST(upgrade_other_layout_starts_afresh)
{
	char bin[PATH_MAX], out[256], line[256];
	struct itest_run r;

	ITEST_NEED_INPUT(in);
	itest_run_init(&r, &in, "upgrade-layout");
	start(&r, bin, sizeof(bin));
	/* the package manager puts another vmtraced at the path */
	ck_assert_int_eq(itest_sh("cp %s/%s/tests/vmtraced-layout2 %s.new && mv %s.new %s",
				  test_srcdir(), test_builddir(), bin, bin, bin), 0);
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "upgrade"), 0);
	snprintf(line, sizeof(line), "the state handed over is refused (state layout version 1, "
		 "this vmtraced reads 2): every guest starts afresh");
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, line) == 1, 20000), "log: %s", r.d.log);
	for (int g = 0; g < NG; g++) {
		ck_assert_msg(ITEST_WAIT((fakeguest_poll(&r.fg[g]), r.fg[g].starts == 2), 20000),
			      "g%d: %u STARTs", g + 1, r.fg[g].starts);
	}
	itest_expect_streaming(&r.d, "g1", 20000);
	itest_expect_streaming(&r.d, "g2", 20000);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "upgrades"), 1);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "sessions_adopted"), 0);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "sessions_refused"), NG);	/* the state refused */
	itest_run_end(&r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("upgrade");
	TCase *t = tcase_create("upgrade");
	int rc;

	itest_input_prepare(&in);
	ncpu = in.ncpus;
	if (ncpu)
		step_ns = itest_unique_step(&in);
	TEST_ADD(t, upgrade_keeps_sessions);
	TEST_ADD(t, upgrade_keeps_discovered_sessions);
	TEST_ADD(t, sigusr2_upgrades);
	TEST_ADD(t, upgrade_refused_under_the_sandbox);
	TEST_ADD(t, upgrade_while_streaming);
	TEST_ADD(t, upgrade_notices_a_qemu_gone);
	TEST_ADD(t, reload_hands_over);
	TEST_ADD(t, reload_new_user_waits_for_a_restart);
	TEST_ADD(t, upgrade_keeps_clock_points);
	TEST_ADD(t, upgrade_failed_exec_goes_on);
	TEST_ADD(t, upgrade_other_layout_starts_afresh);
	tcase_set_timeout(t, 300);
	suite_add_tcase(s, t);
	rc = test_run_suite(s);
	itest_input_free(&in);
	return rc;
}
