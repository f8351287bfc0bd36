/* SPDX-License-Identifier: MIT */
/*
 * probe: the BPF detectors for real (root, BTF). The probe runs in this
 * process on a bare manager (event loop, config, hand-made guests); its
 * fire callback (struct vmt_probe_env) records the triggers, with a
 * cooldown like the real one, so what is checked is exactly what
 * daemon/probe.c hands its owner. probe.c is compiled into this file
 * (the test rule links no daemon object): with -DVMT_HAVE_BPF and the
 * skeleton for real, else its stub, and the tests skip.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../daemon/guest.h"
#include "../../daemon/manager.h"
#include "../../daemon/probe.c"
#include "../../daemon/probe-maps.c"
#include "../../daemon/qemu.c"
#include "testutil.h"
#include "util.h"

/* The guest module is not linked in: the probe knows a guest through
 * guest_name() and guest_qemu_pid() (guest.h), answered here for guests of
 * the test's own making, as guest-status.c answers for an agent's. */
struct vmt_guest {
	struct vmt_guest_conf conf;
	struct vmt_channel ctl;
	struct vmt_guest_alive alive;
};

const char *guest_name(const struct vmt_guest *g)
{
	return g->conf.name;
}

pid_t guest_qemu_pid(const struct vmt_guest *g)
{
	return qemu_pid_find(g->conf.pidfile, g->ctl.peer_pid, NULL);
}

#define MAX_SEEN 256

static struct vmt_trigger seen[MAX_SEEN];
static char seen_guest[MAX_SEEN][VMT_NAME_MAX];
static bool seen_last_word[MAX_SEEN];
static unsigned nseen;
static uint64_t cooldown_ns, last_fire_ns;

/* The manager's side, for this test: record, and a global cooldown. */
static int test_fire(void *owner, const char *guest, const struct vmt_trigger *t, bool last_word)
{
	struct vmt_manager *m = owner;
	uint64_t now = now_monotonic_ns();

	m->dumps.triggers_total++;
	if (cooldown_ns && last_fire_ns && now - last_fire_ns < cooldown_ns) {
		m->dumps.triggers_suppressed++;
		return -EBUSY;
	}
	last_fire_ns = now;
	if (nseen < MAX_SEEN) {
		seen[nseen] = *t;
		seen_last_word[nseen] = last_word;
		snprintf(seen_guest[nseen], VMT_NAME_MAX, "%s", guest ? guest : "*");
		nseen++;
	}
	return 0;
}

struct tp {
	struct vmt_manager *m;
	struct vmt_probe *p;
	struct vmt_guest guests[2];
	struct vmt_guest *gp[2];
	char *dir;
};

static bool can_run(void)
{
	struct vmt_probe_status st;

	probe_status(NULL, &st);	/* built: false in a build without BPF */
	return st.built && test_have_root() && access("/sys/kernel/btf/vmlinux", R_OK) == 0;
}

static void tp_init(struct tp *t)
{
	memset(t, 0, sizeof(*t));
	nseen = 0;
	cooldown_ns = last_fire_ns = 0;
	t->m = calloc(1, sizeof(*t->m));
	ck_assert_ptr_nonnull(t->m);
	config_init(&t->m->conf);
	ck_assert_int_ge(sd_event_new(&t->m->event), 0);
	t->dir = test_mkdtemp("probe");
	for (int i = 0; i < 2; i++) {
		snprintf(t->guests[i].conf.name, sizeof(t->guests[i].conf.name), "vm%d", i + 1);
		t->guests[i].ctl.rfd = t->guests[i].ctl.wfd = -1;	/* no channel */
		t->gp[i] = &t->guests[i];
	}
	t->m->guests.v = t->gp;
	t->m->guests.n = 2;
}

/* as guest_exit_unclean() answers the manager (the guest module is not
 * linked in here: no channel to read) */
static bool test_exit_unclean(void *owner, const char *guest)
{
	struct vmt_manager *m = owner;

	for (uint32_t i = 0; i < m->guests.n; i++)
		if (!strcmp(m->guests.v[i]->conf.name, guest)) {
			bool r = m->guests.v[i]->alive.unclean;

			m->guests.v[i]->alive.unclean = false;
			return r;
		}
	return false;
}

static void tp_start(struct tp *t)
{
	struct vmt_probe_env env = { .event = t->m->event, .conf = &t->m->conf,
				     .guests = &t->m->guests, .fire = test_fire,
				     .exit_unclean = test_exit_unclean, .owner = t->m };

	ck_assert_int_eq(probe_new(&t->p, &env), 0);
	ck_assert_ptr_nonnull(t->p);
}

static void tp_free(struct tp *t)
{
	probe_free(t->p);
	sd_event_unref(t->m->event);
	free(t->m);
	test_rmtree(t->dir);
	free(t->dir);
}

/* Run the loop until a trigger whose reason has what, or ms pass. */
/* The first trigger seen whose reason holds what and whose value is at
 * least min (a loaded machine may starve a vCPU a little before the test
 * starves it a lot: those are right, and not the one looked for). */
static const struct vmt_trigger *wait_trigger_min(struct tp *t, const char *what, uint64_t min,
						  int ms)
{
	uint64_t end = now_monotonic_ns() + (uint64_t)test_deadline_ms(ms) * 1000000ull;

	for (;;) {
		for (unsigned i = 0; i < nseen; i++)
			if (strstr(seen[i].reason, what) && seen[i].value >= min)
				return &seen[i];
		if (now_monotonic_ns() > end)
			return NULL;
		sd_event_run(t->m->event, 50000);
	}
}

static const struct vmt_trigger *wait_trigger(struct tp *t, const char *what, int ms)
{
	return wait_trigger_min(t, what, 0, ms);
}

static void write_pidfile(struct tp *t, struct vmt_guest *g, pid_t pid)
{
	FILE *f;

	snprintf(g->conf.pidfile, sizeof(g->conf.pidfile), "%s/%s.pid", t->dir, g->conf.name);
	f = fopen(g->conf.pidfile, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "%d\n", (int)pid);
	fclose(f);
}

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

/* A child named like a QEMU vCPU thread ("CPU 0/KVM"); busy when spin. */
static pid_t spawn_vcpu(bool spin, int cpu)
{
	int fds[2];
	pid_t pid;
	char c;

	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		signal(SIGSEGV, SIG_DFL);	/* ASan's handler would turn it into exit(1) */
		prctl(PR_SET_NAME, "CPU 0/KVM");
		if (cpu >= 0)
			pin(cpu);
		(void)!write(fds[1], "x", 1);
		for (;;)
			if (!spin)
				pause();
	}
	close(fds[1]);
	ck_assert_int_eq(read(fds[0], &c, 1), 1);
	close(fds[0]);
	return pid;
}

static struct vmt_probe_status status_of(struct tp *t)
{
	struct vmt_probe_status st;

	probe_status(t->p, &st);
	return st;
}

START_TEST(death_fires_with_signal)
{
	struct vmt_probe_status st;
	const struct vmt_trigger *tr;
	struct tp t;
	pid_t pid;
	char want[64];

	if (!can_run())
		VMT_SKIP("needs BPF in the build, root and /sys/kernel/btf/vmlinux");
	tp_init(&t);
	pid = spawn_vcpu(false, -1);
	t.guests[0].ctl.peer_pid = pid;	/* as SO_PEERCRED gives it */
	tp_start(&t);
	st = status_of(&t);
	ck_assert_msg(st.det[VMT_DET_PROCESS_DEATH].loaded, "not loaded: %s",
		      st.det[VMT_DET_PROCESS_DEATH].reason);
	ck_assert_uint_eq(st.pids, 1);
	kill(pid, SIGSEGV);
	waitpid(pid, NULL, 0);
	snprintf(want, sizeof(want), "process_death: guest process %d died (SIGSEGV", (int)pid);
	tr = wait_trigger(&t, want, 3000);
	ck_assert_msg(tr, "no trigger for the death of %d (%u others, first: %s)", (int)pid, nseen,
		      nseen ? seen[0].reason : "-");
	ck_assert_uint_eq(tr->kind, VMT_TRIGGER_BPF);
	ck_assert_uint_eq(tr->pid, (uint32_t)pid);
	ck_assert_str_eq(seen_guest[tr - seen], "vm1");
	/* its QEMU's last word: the owner's cooldown does not hold it back */
	ck_assert(seen_last_word[tr - seen]);
	ck_assert_uint_ge(status_of(&t).det[VMT_DET_PROCESS_DEATH].fired, 1);
	tp_free(&t);
}
END_TEST

/* A child that exits with code once *go is written to. */
static pid_t spawn_exit(int code, int *go)
{
	int fds[2];
	pid_t pid;
	char c;

	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(fds[1]);
		(void)!read(fds[0], &c, 1);
		_exit(code);
	}
	close(fds[0]);
	*go = fds[1];
	return pid;
}

static void release(pid_t pid, int go)
{
	ck_assert_int_eq(write(go, "x", 1), 1);
	close(go);
	ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
}

/* The exit policy: a non-zero status dumps; status 0 only with
 * on_clean_exit, else it is counted as filtered (in BPF: no record). */
START_TEST(death_exit_policy)
{
	const struct vmt_trigger *tr;
	struct vmt_probe_status st;
	struct tp t;
	pid_t clean, failed;
	int go_clean, go_failed;
	char want[80];

	if (!can_run())
		VMT_SKIP("needs BPF in the build, root and /sys/kernel/btf/vmlinux");
	tp_init(&t);
	clean = spawn_exit(0, &go_clean);
	failed = spawn_exit(3, &go_failed);
	t.guests[0].ctl.peer_pid = clean;
	t.guests[1].ctl.peer_pid = failed;
	tp_start(&t);
	st = status_of(&t);
	ck_assert_msg(st.det[VMT_DET_PROCESS_DEATH].loaded, "not loaded: %s",
		      st.det[VMT_DET_PROCESS_DEATH].reason);
	ck_assert_uint_eq(st.pids, 2);
	/* the clean one first: when the failed one's record is read, the
	 * clean one's exit was decided long before */
	release(clean, go_clean);
	release(failed, go_failed);
	snprintf(want, sizeof(want), "process_death: guest process %d exited (status 3)", (int)failed);
	tr = wait_trigger(&t, want, 3000);
	ck_assert_msg(tr, "no trigger for the exit of %d (%u others, first: %s)", (int)failed, nseen,
		      nseen ? seen[0].reason : "-");
	ck_assert_str_eq(seen_guest[tr - seen], "vm2");
	snprintf(want, sizeof(want), "guest process %d ", (int)clean);
	ck_assert_ptr_null(wait_trigger(&t, want, 0));
	st = status_of(&t);
	ck_assert_uint_eq(st.det[VMT_DET_PROCESS_DEATH].filtered, 1);
	ck_assert_uint_eq(st.det[VMT_DET_PROCESS_DEATH].fired, 1);
	tp_free(&t);

	/* on_clean_exit: true, status 0 dumps as well */
	tp_init(&t);
	t.m->conf.detectors[VMT_DET_PROCESS_DEATH].on_clean_exit = 1;
	clean = spawn_exit(0, &go_clean);
	t.guests[0].ctl.peer_pid = clean;
	tp_start(&t);
	release(clean, go_clean);
	snprintf(want, sizeof(want), "process_death: guest process %d exited (status 0)", (int)clean);
	tr = wait_trigger(&t, want, 3000);
	ck_assert_msg(tr, "no trigger for the clean exit of %d with on_clean_exit (%u others)",
		      (int)clean, nseen);
	ck_assert_str_eq(seen_guest[tr - seen], "vm1");
	ck_assert_uint_eq(status_of(&t).det[VMT_DET_PROCESS_DEATH].filtered, 0);
	tp_free(&t);

	/* its agent (one that says BYE) streamed and said no BYE: status 0
	 * is a death without on_clean_exit; asked once, the next is clean */
	tp_init(&t);
	clean = spawn_exit(0, &go_clean);
	t.guests[0].ctl.peer_pid = clean;
	t.guests[0].alive.unclean = true;
	tp_start(&t);
	release(clean, go_clean);
	snprintf(want, sizeof(want), "process_death: guest process %d exited (status 0) without "
		 "its agent's BYE", (int)clean);
	tr = wait_trigger(&t, want, 3000);
	ck_assert_msg(tr, "no trigger for the exit 0 of %d without BYE (%u others, first: %s)",
		      (int)clean, nseen, nseen ? seen[0].reason : "-");
	ck_assert_str_eq(seen_guest[tr - seen], "vm1");
	ck_assert(!t.guests[0].alive.unclean);
	ck_assert_uint_eq(status_of(&t).det[VMT_DET_PROCESS_DEATH].filtered, 0);
	tp_free(&t);
}
END_TEST

START_TEST(starved_vcpu_fires)
{
	struct vmt_probe_status st;
	const struct vmt_trigger *tr;
	struct sched_param sp = { .sched_priority = 10 };
	struct tp t;
	pid_t vcpu, hog;
	int status;

	if (!can_run())
		VMT_SKIP("needs BPF in the build, root and /sys/kernel/btf/vmlinux");
	tp_init(&t);
	t.m->conf.detectors[VMT_DET_VCPU_STARVATION].threshold_ms = 100;
	vcpu = spawn_vcpu(true, 0);
	write_pidfile(&t, &t.guests[1], vcpu);
	tp_start(&t);
	st = status_of(&t);
	ck_assert_msg(st.det[VMT_DET_VCPU_STARVATION].loaded, "not loaded: %s",
		      st.det[VMT_DET_VCPU_STARVATION].reason);
	ck_assert_uint_eq(st.tids, 1);
	/* a real-time hog on the vCPU's CPU keeps it runnable, off-CPU, 300ms */
	hog = fork();
	ck_assert_int_ge(hog, 0);
	if (!hog) {
		uint64_t end;

		pin(0);
		if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0)
			_exit(2);
		end = now_monotonic_ns() + 300000000ull;
		while (now_monotonic_ns() < end)
			;
		_exit(0);
	}
	waitpid(hog, &status, 0);
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	tr = wait_trigger_min(&t, "runnable", 250000000ull, 3000);
	kill(vcpu, SIGKILL);
	waitpid(vcpu, NULL, 0);
	ck_assert_msg(tr, "no starvation trigger");
	ck_assert(!seen_last_word[tr - seen]);
	ck_assert_msg(strstr(tr->reason, "vcpu_starvation: vCPU 0 (tid ") &&
			      strstr(tr->reason, "threshold 100 ms"),
		      "reason: %s", tr->reason);
	ck_assert_uint_ge(tr->value, 250000000ull);
	ck_assert_uint_eq(tr->threshold, 100000000ull);
	ck_assert_str_eq(seen_guest[tr - seen], "vm2");
	tp_free(&t);
}
END_TEST

START_TEST(kvm_exit_loads_or_says_why)
{
	struct vmt_probe_status st;
	struct tp t;

	if (!can_run())
		VMT_SKIP("needs BPF in the build, root and /sys/kernel/btf/vmlinux");
	tp_init(&t);
	tp_start(&t);
	st = status_of(&t);
	/* kvm built in, or its module loaded: the tracepoints are there */
	if (access("/sys/kernel/tracing/events/kvm/kvm_exit", F_OK) == 0 ||
	    access("/sys/kernel/debug/tracing/events/kvm/kvm_exit", F_OK) == 0)
		ck_assert_msg(st.det[VMT_DET_KVM_EXIT].loaded, "kvm there but not loaded: %s",
			      st.det[VMT_DET_KVM_EXIT].reason);
	else
		ck_assert_msg(!st.det[VMT_DET_KVM_EXIT].loaded &&
				      st.det[VMT_DET_KVM_EXIT].reason[0],
			      "no kvm tracepoints, yet loaded");
	/* whatever kvm did, the others are there */
	ck_assert(st.det[VMT_DET_PROCESS_DEATH].loaded);
	ck_assert(st.det[VMT_DET_VCPU_STARVATION].loaded);
	printf("kvm_exit: %s%s\n", st.det[VMT_DET_KVM_EXIT].loaded ? "loaded" : "not loaded: ",
	       st.det[VMT_DET_KVM_EXIT].reason);
	tp_free(&t);
}
END_TEST

START_TEST(disabled_detectors_stay_out)
{
	struct vmt_probe_status st;
	struct tp t;

	if (!can_run())
		VMT_SKIP("needs BPF in the build, root and /sys/kernel/btf/vmlinux");
	tp_init(&t);
	t.m->conf.detectors[VMT_DET_KVM_EXIT].enabled = 0;
	t.m->conf.detectors[VMT_DET_OOM].enabled = 0;
	tp_start(&t);
	st = status_of(&t);
	ck_assert(!st.det[VMT_DET_KVM_EXIT].loaded);
	ck_assert_str_eq(st.det[VMT_DET_KVM_EXIT].reason, "disabled in the config");
	ck_assert(st.det[VMT_DET_PROCESS_DEATH].loaded);
	tp_free(&t);
}
END_TEST

/* Without privileges: nothing loads, each detector says why, no error. */
START_TEST(unprivileged_degrades)
{
	struct vmt_probe_status st;
	struct tp t;

	if (!can_run())
		VMT_SKIP("needs BPF in the build, root and /sys/kernel/btf/vmlinux");
	tp_init(&t);
	test_rmtree(t.dir);	/* not removable once we are nobody */
	ck_assert_int_eq(setresuid(65534, 65534, 65534), 0);
	tp_start(&t);
	st = status_of(&t);
	for (unsigned d = 0; d < VMT_DET_COUNT; d++) {
		ck_assert_msg(!st.det[d].loaded, "%s loaded without privileges", st.det[d].name);
		ck_assert_msg(strstr(st.det[d].reason, "not permitted"), "%s: %s", st.det[d].name,
			      st.det[d].reason);
	}
	probe_sync_guests_now(t.p);	/* harmless */
	probe_free(t.p);
	t.p = NULL;
	sd_event_unref(t.m->event);
	free(t.m);
	free(t.dir);
}
END_TEST

START_TEST(oom_in_a_small_cgroup)
{
	/* cgroup v2, or v1's memory controller */
	bool v2 = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0;
	const char *cg = v2 ? "/sys/fs/cgroup/vmt-test" : "/sys/fs/cgroup/memory/vmt-test";
	const struct vmt_trigger *tr;
	char path[128], want[64];
	struct tp t;
	pid_t pid;
	int go[2];
	FILE *f;

	if (!can_run())
		VMT_SKIP("needs BPF in the build, root and /sys/kernel/btf/vmlinux");
	if (!v2 && access("/sys/fs/cgroup/memory/memory.limit_in_bytes", F_OK) < 0)
		VMT_SKIP("no cgroup v2 at /sys/fs/cgroup and no v1 memory controller");
	if (mkdir(cg, 0755) < 0 && errno != EEXIST)
		VMT_SKIP("cannot make %s: %s", cg, strerror(errno));
	snprintf(path, sizeof(path), "%s/%s", cg, v2 ? "memory.max" : "memory.limit_in_bytes");
	f = fopen(path, "w");
	if (!f || fprintf(f, "33554432\n") < 0 || fclose(f) != 0) {
		rmdir(cg);
		VMT_SKIP("no memory controller in %s", cg);
	}
	snprintf(path, sizeof(path), "%s/memory.swap.max", cg);
	if ((f = fopen(path, "w"))) {
		fprintf(f, "0\n");
		fclose(f);
	}
	tp_init(&t);
	pid = spawn_vcpu(false, -1);	/* waits in pause() until told */
	snprintf(path, sizeof(path), "%s/cgroup.procs", cg);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "%d\n", (int)pid);
	fclose(f);
	write_pidfile(&t, &t.guests[0], pid);
	tp_start(&t);
	ck_assert(status_of(&t).det[VMT_DET_OOM].loaded);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	/* the hog itself: registered, then it eats 64M in a 32M cgroup */
	ck_assert_int_eq(pipe(go), 0);
	pid = fork();
	if (!pid) {
		FILE *cf = fopen(path, "w");
		char *mem, ch;

		fprintf(cf, "0\n");
		fclose(cf);
		close(go[1]);
		/* until the detectors know this pid */
		if (read(go[0], &ch, 1) != 1)
			_exit(1);
		mem = mmap(NULL, 64 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		for (size_t i = 0; mem != MAP_FAILED && i < (64u << 20); i += 4096)
			mem[i] = 1;
		_exit(0);
	}
	close(go[0]);
	write_pidfile(&t, &t.guests[0], pid);
	probe_sync_guests_now(t.p);
	ck_assert_int_eq(write(go[1], "g", 1), 1);
	close(go[1]);
	waitpid(pid, NULL, 0);
	snprintf(want, sizeof(want), "OOM killer picked pid %d", (int)pid);
	tr = wait_trigger(&t, want, 3000);
	rmdir(cg);
	ck_assert_msg(tr, "no OOM trigger");
	ck_assert_str_eq(seen_guest[tr - seen], "vm1");
	tp_free(&t);
}
END_TEST

/* Many anomalies: a bounded number of events, the rest counted. */
START_TEST(storm_is_rate_limited)
{
	struct vmt_probe_status st;
	const struct vmt_probe_detector *d;
	struct tp t;
	pid_t vcpu[8];
	uint64_t start, end, secs;
	int n = 8;

	if (!can_run())
		VMT_SKIP("needs BPF in the build, root and /sys/kernel/btf/vmlinux");
	tp_init(&t);
	t.m->conf.detectors[VMT_DET_VCPU_STARVATION].threshold_ms = 1;
	t.m->conf.detectors[VMT_DET_VCPU_STARVATION].min_interval_ms = 1000;
	cooldown_ns = 2000000000ull;	/* the manager's own, behind the BPF one */
	/* eight busy "vCPUs" on two CPUs: each waits for the three others */
	for (int i = 0; i < n; i++)
		vcpu[i] = spawn_vcpu(true, i % 2);
	t.guests[0].ctl.peer_pid = vcpu[0];
	t.guests[1].ctl.peer_pid = vcpu[1];
	tp_start(&t);
	/* all eight, as threads of two guests would be */
	t.m->guests.n = 2;
	for (int i = 2; i < n; i++) {
		t.guests[i % 2].ctl.peer_pid = vcpu[i];
		probe_sync_guests_now(t.p);
	}
	t.guests[0].ctl.peer_pid = vcpu[0];
	t.guests[1].ctl.peer_pid = vcpu[1];
	/* a storm of 100 anomalies, however long the machine takes to make it;
	 * the deadline only catches a detector that sees none */
	start = now_monotonic_ns();
	end = start + (uint64_t)test_deadline_ms(40000) * 1000000ull;
	do {
		sd_event_run(t.m->event, 100000);
		st = status_of(&t);
	} while (st.det[VMT_DET_VCPU_STARVATION].seen < 100 && now_monotonic_ns() < end);
	secs = (now_monotonic_ns() - start + 999999999ull) / 1000000000ull;
	for (int i = 0; i < n; i++) {
		kill(vcpu[i], SIGKILL);
		waitpid(vcpu[i], NULL, 0);
	}
	d = &st.det[VMT_DET_VCPU_STARVATION];
	printf("storm: %lu anomalies in %lus, %lu events sent, %lu fired, %lu suppressed (daemon %lu)\n",
	       (unsigned long)d->seen, (unsigned long)secs,
	       (unsigned long)(d->seen - (d->suppressed - t.m->dumps.triggers_suppressed) - d->dropped),
	       (unsigned long)d->fired, (unsigned long)d->suppressed,
	       (unsigned long)t.m->dumps.triggers_suppressed);
	ck_assert_uint_ge(d->seen, 100);
	/* at most one per second per CPU gets past BPF (and one more at the start) */
	ck_assert_uint_le(d->seen - (d->suppressed - t.m->dumps.triggers_suppressed) - d->dropped,
			  (secs + 1) * (uint64_t)sysconf(_SC_NPROCESSORS_ONLN));
	/* and the manager's cooldown of 2 s lets one in per cooldown */
	ck_assert_uint_le(d->fired, secs / 2 + 1);
	tp_free(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("probe");
	TCase *t = tcase_create("bpf");

	tcase_add_test(t, death_fires_with_signal);
	tcase_add_test(t, death_exit_policy);
	tcase_add_test(t, starved_vcpu_fires);
	tcase_add_test(t, kvm_exit_loads_or_says_why);
	tcase_add_test(t, disabled_detectors_stay_out);
	tcase_add_test(t, unprivileged_degrades);
	tcase_add_test(t, oom_in_a_small_cgroup);
	tcase_add_test(t, storm_is_rate_limited);
	tcase_set_timeout(t, 60);
	suite_add_tcase(s, t);
	return test_run_suite(s);
}
