/* SPDX-License-Identifier: MIT */
/*
 * Integration: vmtraced recording the host's own ftrace (config `host:`).
 * The daemon runs with the host enabled, this process makes scheduler
 * events (fork/exec, a thread named like QEMU's), the "host" sample is
 * dumped with vmtracectl, merged, and decoded with libtracecmd by event
 * name. The instance "vmtraced" must hold exactly the configured events
 * while the daemon runs and be gone once it exits. Root and tracefs only.
 */
#include <fcntl.h>
#include <fnmatch.h>
#include <dirent.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <trace-cmd.h>
#include <unistd.h>

#include "itest.h"
#include "meta.h"
#include "sample.h"
#include "testd.h"
#include "testutil.h"
#include "util.h"

static const char *const qemu_comms[] = { "qemu*", "CPU *", "vhost-*" };

static char instance[256];	/* TRACEFS/instances/NAME (test_host_instance) */

struct tally {
	struct tally_names names;
	uint64_t total;
	uint64_t not_qemu;	/* qemu_only: sched records naming no QEMU thread */
	uint64_t ours;		/* records naming our stand-in "qemu-vmt-test" */
};

static bool is_qemu(const char *comm)
{
	for (size_t i = 0; i < ARRAY_SIZE(qemu_comms); i++)
		if (!fnmatch(qemu_comms[i], comm, 0))
			return true;
	return false;
}

/* A comm field of the record, NUL-terminated into out ("" if none). */
static void field_comm(struct tep_event *e, struct tep_record *rec, const char *field, char *out,
		       size_t n)
{
	int len = 0;
	const char *p = tep_get_field_raw(NULL, e, field, rec, &len, 0);

	out[0] = 0;
	if (p && len > 0)
		snprintf(out, n, "%.*s", (int)VMT_MIN((size_t)len, n - 1), p);
}

static int tally_cb(struct tracecmd_input *h, struct tep_record *rec, int cpu, void *data)
{
	struct tally *t = data;
	struct tep_event *e = tep_find_event_by_record(tracecmd_get_tep(h), rec);
	char a[32], b[32];

	t->total++;
	tally_name(&t->names, e ? e->name : "(unknown)");
	if (!e)
		return 0;
	if (!strcmp(e->name, "sched_switch")) {
		field_comm(e, rec, "prev_comm", a, sizeof(a));
		field_comm(e, rec, "next_comm", b, sizeof(b));
	} else {
		field_comm(e, rec, "comm", a, sizeof(a));
		b[0] = 0;
	}
	t->not_qemu += !is_qemu(a) && !is_qemu(b);
	t->ours += !strcmp(a, "qemu-vmt-test") || !strcmp(b, "qemu-vmt-test");
	return 0;
}

static void tally_file(const char *path, struct tally *t)
{
	struct tracecmd_input *h = tracecmd_open(path, TRACECMD_FL_LOAD_NO_PLUGINS);

	ck_assert_msg(h != NULL, "libtracecmd cannot open %s", path);
	memset(t, 0, sizeof(*t));
	tracecmd_iterate_events(h, NULL, 0, tally_cb, t);
	tracecmd_close(h);
}

/* fork+exec for scheduler events */
static void spawn_true(unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			execl("/bin/true", "true", (char *)NULL);
			_exit(0);
		}
		if (pid > 0)
			waitpid(pid, NULL, 0);
		if (i % 16 == 15)
			usleep(2000);
	}
}

/* A process named like QEMU's main thread that sleeps and wakes. */
static pid_t spawn_fake_qemu(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		prctl(PR_SET_NAME, "qemu-vmt-test");
		for (int i = 0; i < 2000; i++)
			usleep(500);
		_exit(0);
	}
	return pid;
}

struct run {
	char *dir;
	struct testd d;
};

static const char header_fmt[] = "state_dir: %s\ncontrol_socket: %s\nlog_level: debug\n%s";

/* A configuration file as testd writes them: host: names this test's own
 * instance (test_host_instance). */
static void conf_write(FILE *f, const char *state, const char *sock, const char *body)
{
	char *conf = test_conf_instance(body);

	ck_assert_ptr_nonnull(conf);
	fprintf(f, header_fmt, state, sock, conf);
	free(conf);
}

/* host: settings as YAML lines under "host:" */
static void run_start(struct run *r, const char *host_yaml)
{
	char body[1024];

	memset(r, 0, sizeof(*r));
	r->dir = test_mkdtemp("hostsrc");
	ck_assert_ptr_nonnull(r->dir);
	snprintf(body, sizeof(body), "host:\n  enabled: true\n%s", host_yaml);
	ck_assert_int_eq(testd_start(&r->d, r->dir, body), 0);
	/* the control socket answers before the host source is set up */
	ITEST_WAIT(testd_log_count(&r->d, " running: ") > 0, 10000);
	ck_assert_msg(testd_log_count(&r->d, " running: ") == 1, "vmtraced not running (log: %s)",
		      r->d.log);
}

static void run_end(struct run *r)
{
	int rc = testd_stop(&r->d);

	/* a sanitizer finding (leak, UB) makes the daemon exit non-zero */
	ck_assert_msg(rc == 0, "vmtraced exited with %d (log: %s)", rc, r->d.log);
	ck_assert_msg(access(instance, F_OK) != 0, "%s is still there after the daemon exited",
		      instance);
	test_rmtree(r->dir);
	free(r->dir);
}

/* The instance's set_event, sorted lines joined with ','. */
static void read_set_event(char *out, size_t n)
{
	char path[400], line[256];
	char *lines[64];
	unsigned k = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/set_event", instance);
	f = fopen(path, "r");
	ck_assert_msg(f != NULL, "%s cannot be read", path);
	while (k < ARRAY_SIZE(lines) && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		lines[k++] = strdup(line);
	}
	fclose(f);
	for (unsigned i = 0; i < k; i++)
		for (unsigned j = i + 1; j < k; j++)
			if (strcmp(lines[j], lines[i]) < 0) {
				char *t = lines[i];
				lines[i] = lines[j];
				lines[j] = t;
			}
	out[0] = 0;
	for (unsigned i = 0; i < k; i++) {
		size_t o = strlen(out);
		snprintf(out + o, n - o, "%s%s", i ? "," : "", lines[i]);
		free(lines[i]);
	}
}

static void dump_host(struct run *r, char *sample, size_t n)
{
	char out[8192];
	int rc = testd_ctl(&r->d, out, sizeof(out), "dump --reason test host");

	ck_assert_msg(rc == 0, "vmtracectl dump host failed (%d): %s", rc, out);
	ck_assert_msg(strstr(out, ".vmts\n") != NULL, "no sample in '%s'", out);
	*strchr(out, '\n') = 0;
	ck_assert_uint_lt(strlen(out), n);
	memcpy(sample, out, strlen(out) + 1);
}

static void merge_and_tally(struct run *r, const char *sample, struct tally *t)
{
	char args[1200], out[8192], dat[400];

	snprintf(dat, sizeof(dat), "%s/out.dat", r->dir);
	snprintf(args, sizeof(args), "merge -o %s %s", dat, sample);
	ck_assert_msg(testd_ctl(&r->d, out, sizeof(out), args) == 0, "merge failed: %s", out);
	tally_file(dat, t);
}

/* The instance's set_event is want. */
static void expect_set_event(const char *want)
{
	char set[1024];

	read_set_event(set, sizeof(set));
	ck_assert_str_eq(set, want);
}

/* Processes started now show in a host dump as event records. */
static void expect_host_records(struct run *r, const char *event)
{
	char sample[4400];
	struct tally t;

	spawn_true(100);
	dump_host(r, sample, sizeof(sample));
	merge_and_tally(r, sample, &t);
	ck_assert_uint_gt(tally_of(&t.names, event), 0);
}

#define NEED_TRACEFS()                                         \
	do {                                                   \
		if (!test_have_root())                         \
			VMT_SKIP("not root");                  \
		if (!test_tracefs())                           \
			VMT_SKIP("no tracefs");                \
	} while (0)

/* The configured events, and only those, come out of a dump. */
START_TEST(records_host_events)
{
	struct run r;
	struct tally t;
	struct vmt_sample *s;
	char sample[4400], why[256], aux[4600];

	NEED_TRACEFS();
	run_start(&r, "  events: [sched:sched_switch, sched:sched_wakeup]\n  qemu_only: false\n");
	expect_set_event("sched:sched_switch,sched:sched_wakeup");
	spawn_true(300);
	dump_host(&r, sample, sizeof(sample));
	merge_and_tally(&r, sample, &t);
	ck_assert_msg(tally_of(&t.names, "sched_switch") > 0, "no sched_switch among %llu events",
		      (unsigned long long)t.total);
	ck_assert_uint_eq(tally_of(&t.names, "sched_switch") + tally_of(&t.names, "sched_wakeup"), t.total);

	ck_assert_int_eq(sample_read(sample, &s, why, sizeof(why)), 0);
	ck_assert_str_eq(s->guest, "host");
	/* tracefs has a buffer for every possible CPU */
	ck_assert_uint_ge(s->ncpus, (unsigned)sysconf(_SC_NPROCESSORS_ONLN));
	for (uint32_t c = 0; c < s->ncpus; c++)
		ck_assert_uint_eq(s->cpus[c].counters.bytes_rejected, 0);
	snprintf(aux, sizeof(aux), "%s/host/aux-%06u.vmtaux", r.d.state, s->aux_version);
	ck_assert_msg(access(aux, R_OK) == 0, "%s missing", aux);
	/* the host's task tables at the dump: the tasks spawned after the start */
	{
		struct vmt_meta_entry e;
		const char *why2;

		ck_assert_uint_gt(s->tasks_len, 0);
		ck_assert_int_eq(meta_tasks_validate(s->tasks, s->tasks_len, &why2), 0);
		ck_assert_int_eq(meta_find(s->tasks, s->tasks_len, "saved_cmdlines", &e), 0);
		ck_assert_msg(memmem(e.data, e.data_len, " true\n", 6) != NULL,
			      "no 'true' among the host's %u bytes of task names", e.data_len);
	}
	sample_free(s);

	/* recording goes on after a flush read the partial pages */
	expect_host_records(&r, "sched_switch");
	ck_assert_int_eq(testd_log_count(&r.d, "failed, its events are lost"), 0);
	ck_assert_int_eq(testd_log_count(&r.d, "rejected"), 0);
	run_end(&r);
}
END_TEST

/* qemu_only: sched records name a QEMU-like thread, and ours is among them. */
START_TEST(qemu_only_filters_sched)
{
	struct run r;
	struct tally t;
	char sample[4400];
	pid_t q;

	NEED_TRACEFS();
	run_start(&r, "  events: [sched:sched_switch, sched:sched_wakeup]\n  qemu_only: true\n");
	q = spawn_fake_qemu();
	ck_assert_int_gt(q, 0);
	spawn_true(200);
	waitpid(q, NULL, 0);
	dump_host(&r, sample, sizeof(sample));
	merge_and_tally(&r, sample, &t);
	ck_assert_msg(t.ours > 0, "no event of qemu-vmt-test among %llu",
		      (unsigned long long)t.total);
	ck_assert_msg(t.not_qemu == 0, "%llu of %llu sched events name no QEMU thread",
		      (unsigned long long)t.not_qemu, (unsigned long long)t.total);
	run_end(&r);
}
END_TEST

/* An instance left by a daemon that died is replaced, not added to. */
START_TEST(stale_instance_is_replaced)
{
	struct run r;
	char path[400];
	FILE *f;

	NEED_TRACEFS();
	ck_assert_msg(access(instance, F_OK) != 0 || rmdir(instance) == 0, "cannot clear %s",
		      instance);
	ck_assert_int_eq(mkdir(instance, 0755), 0);
	snprintf(path, sizeof(path), "%s/events/irq/enable", instance);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("1\n", f);
	fclose(f);
	run_start(&r, "  events: [sched:sched_switch]\n  qemu_only: false\n");
	ck_assert_int_eq(testd_log_count(&r.d, "left from an earlier run"), 1);
	expect_set_event("sched:sched_switch");
	run_end(&r);
}
END_TEST

/* Events this kernel lacks are named once and left out; with none left
 * the daemon runs without the host. */
START_TEST(missing_events)
{
	struct run r;
	char out[1024];

	NEED_TRACEFS();
	run_start(&r, "  events: [nosuchsys:*, sched:sched_switch]\n  qemu_only: false\n");
	ck_assert_int_eq(testd_log_count(&r.d, "left out: nosuchsys:*"), 1);
	expect_set_event("sched:sched_switch");
	expect_host_records(&r, "sched_switch");
	run_end(&r);

	run_start(&r, "  events: [nosuchsys:*]\n  qemu_only: false\n");
	ck_assert_int_eq(testd_log_count(&r.d, "none of the host events can be enabled"), 1);
	ck_assert_msg(access(instance, F_OK) != 0, "%s left after a failed start", instance);
	ck_assert_int_ne(testd_ctl(&r.d, out, sizeof(out), "dump host 2>&1"), 0);
	ck_assert_msg(strstr(out, "no such guest") != NULL, "got '%s'", out);
	run_end(&r);
}
END_TEST

/* A reload that changes host: applies the new events. */
START_TEST(reload_applies_host_changes)
{
	struct run r;
	char out[1024];
	FILE *f;

	NEED_TRACEFS();
	run_start(&r, "  events: [sched:sched_switch]\n  qemu_only: false\n");
	f = fopen(r.d.conf, "w");
	ck_assert_ptr_nonnull(f);
	conf_write(f, r.d.state, r.d.sock,
		"host:\n  enabled: true\n  events: [sched:sched_wakeup]\n  qemu_only: false\n");
	fclose(f);
	ck_assert_int_eq(testd_ctl(&r.d, out, sizeof(out), "reload"), 0);
	expect_set_event("sched:sched_wakeup");
	run_end(&r);
}
END_TEST

/* A capability field ("CapEff") of /proc/PID/status, hex; UINT64_MAX if none. */
static uint64_t status_field(pid_t pid, const char *field)
{
	char path[64], line[256];
	uint64_t v = UINT64_MAX;
	size_t n = strlen(field);
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, field, n) && line[n] == ':')
			v = strtoull(line + n + 1, NULL, !strncmp(field, "Cap", 3) ? 16 : 10);
	if (f)
		fclose(f);
	return v;
}

/* The child of pid named comm, 0 if none. */
static pid_t child_named(pid_t pid, const char *comm)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	pid_t found = 0;

	while (d && !found && (de = readdir(d))) {
		char path[300], buf[512], *rp;
		FILE *f;
		int ppid;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		buf[0] = 0;
		if (!fgets(buf, sizeof(buf), f))
			buf[0] = 0;
		fclose(f);
		rp = strrchr(buf, ')');
		if (rp && sscanf(rp + 2, "%*c %d", &ppid) == 1 && ppid == pid &&
		    !strncmp(buf + strcspn(buf, "(") + 1, comm, strlen(comm)) &&
		    buf[strcspn(buf, "(") + 1 + strlen(comm)] == ')')
			found = atoi(de->d_name);
	}
	if (d)
		closedir(d);
	return found;
}

#define CAP_BIT(c) (1ull << (c))
#define DAC_AND_ADMIN (CAP_BIT(1) | CAP_BIT(2) | CAP_BIT(21))	/* DAC_OVERRIDE, DAC_READ_SEARCH, SYS_ADMIN */

static void assert_no_dac(pid_t pid, const char *when)
{
	uint64_t eff = status_field(pid, "CapEff"), prm = status_field(pid, "CapPrm");

	ck_assert_msg(eff != UINT64_MAX && !(eff & DAC_AND_ADMIN), "%s: CapEff %016llx holds "
		      "DAC_OVERRIDE, DAC_READ_SEARCH or SYS_ADMIN", when, (unsigned long long)eff);
	ck_assert_msg(prm != UINT64_MAX && !(prm & DAC_AND_ADMIN), "%s: CapPrm %016llx holds "
		      "DAC_OVERRIDE, DAC_READ_SEARCH or SYS_ADMIN", when, (unsigned long long)prm);
}

/*
 * As its own user, with the host source on: the daemon holds none of
 * DAC_OVERRIDE, DAC_READ_SEARCH, SYS_ADMIN once set up, and its helper
 * (which makes the instance) only what tracefs and kallsyms take; the
 * host source records and dumps, and a reload that changes host: sets it
 * up anew through the helper, still without them.
 */
START_TEST(own_user_keeps_no_dac)
{
	struct run r;
	struct passwd *pw;
	char out[1024], body[1024];
	pid_t helper;
	FILE *f;

	NEED_TRACEFS();
	pw = getpwnam("nobody");
	if (!pw)
		VMT_SKIP("no user nobody");
	memset(&r, 0, sizeof(r));
	r.dir = test_mkdtemp("hostsrc");
	ck_assert_ptr_nonnull(r.dir);
	ck_assert_int_eq(chmod(r.dir, 0711), 0);	/* nobody reaches its state folder */
	snprintf(body, sizeof(body), "user: nobody\nhost:\n  enabled: true\n"
		 "  events: [sched:sched_switch]\n  qemu_only: false\n");
	ck_assert_int_eq(testd_start(&r.d, r.dir, body), 0);
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, " running: ") > 0, 10000),
		      "vmtraced not running (log: %s)", r.d.log);
	ck_assert_int_eq(testd_log_count(&r.d, "privilege: running as nobody"), 1);
	ck_assert_uint_eq(status_field(r.d.pid, "Uid"), pw->pw_uid);
	assert_no_dac(r.d.pid, "after start-up");
	helper = child_named(r.d.pid, "vmtraced-priv");
	ck_assert_msg(helper > 0, "no helper vmtraced-priv under %d", (int)r.d.pid);
	/* the helper: DAC_OVERRIDE, DAC_READ_SEARCH, SYSLOG at most */
	ck_assert_uint_eq(status_field(helper, "CapPrm") & ~(CAP_BIT(1) | CAP_BIT(2) | CAP_BIT(34)), 0);
	ck_assert_uint_eq(status_field(helper, "CapBnd") & ~(CAP_BIT(1) | CAP_BIT(2) | CAP_BIT(34)), 0);

	expect_set_event("sched:sched_switch");
	expect_host_records(&r, "sched_switch");

	/* a reload that changes host: a new instance, through the helper */
	f = fopen(r.d.conf, "w");
	ck_assert_ptr_nonnull(f);
	conf_write(f, r.d.state, r.d.sock,
		"user: nobody\nhost:\n  enabled: true\n  events: [sched:sched_wakeup, "
		"sched:sched_switch]\n  qemu_only: false\n");
	fclose(f);
	ck_assert_int_eq(testd_ctl(&r.d, out, sizeof(out), "reload"), 0);
	expect_set_event("sched:sched_switch,sched:sched_wakeup");
	assert_no_dac(r.d.pid, "after the reload");
	expect_host_records(&r, "sched_wakeup");
	ck_assert_int_eq(testd_log_count(&r.d, "take effect at the next start"), 0);
	run_end(&r);
	/* the helper went with the daemon */
	ck_assert_int_ne(kill(helper, 0), 0);
}
END_TEST

/*
 * As vmtraced.service runs it (its user through setpriv, its ambient
 * capabilities) with the host source: an upgrade's successor, which has
 * no capability left, sets the host source up again through the helper
 * handed over, and keeps no DAC capability either.
 */
START_TEST(upgrade_as_user_keeps_host)
{
	const char *caps = "+bpf,+perfmon,+dac_override,+syslog";
	char inh[64], amb[64], bound[80];
	const char *argv_[] = { "setpriv", "--reuid=nobody", "--regid=nogroup", "--init-groups",
				inh, amb, bound, NULL };
	const char *env[] = { "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1", NULL };
	struct testd_opts o = { .env = env, .wrapper = argv_ };
	struct run r;
	char out[1024];

	NEED_TRACEFS();
	if (!getpwnam("nobody") || itest_sh("command -v setpriv >/dev/null && getent group nogroup >/dev/null"))
		VMT_SKIP("no user nobody, group nogroup or setpriv");
	snprintf(inh, sizeof(inh), "--inh-caps=%s", caps);
	snprintf(amb, sizeof(amb), "--ambient-caps=%s", caps);
	snprintf(bound, sizeof(bound), "--bounding-set=-all,%s", caps);
	memset(&r, 0, sizeof(r));
	r.dir = test_mkdtemp("hostsrc");
	ck_assert_ptr_nonnull(r.dir);
	ck_assert_int_eq(chmod(r.dir, 0711), 0);
	ck_assert_int_eq(itest_sh("mkdir -p '%s/state' && chown -R nobody '%s'", r.dir, r.dir), 0);
	ck_assert_msg(testd_start_opts(&r.d, r.dir, "host:\n  enabled: true\n  events: "
				       "[sched:sched_switch]\n  qemu_only: false\n", &o) == 0,
		      "log: %s", r.d.log);
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, " running: ") > 0, 10000),
		      "vmtraced not running (log: %s)", r.d.log);
	assert_no_dac(r.d.pid, "after start-up");
	ck_assert_int_eq(testd_ctl(&r.d, out, sizeof(out), "upgrade"), 0);
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, "detectors and host source set up after") == 1,
				 30000), "no set-up after the take-over (log: %s)", r.d.log);
	ck_assert_int_eq(testd_log_count(&r.d, "root needed"), 0);
	/* set up anew once the predecessor's keeper let the old instance go */
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, "recording sched:sched_switch in ftrace "
						 "instance") == 2, 30000),
		      "the host source not set up again (log: %s)", r.d.log);
	ck_assert_int_eq(testd_log_count(&r.d, "cannot remove the ftrace instance"), 0);
	assert_no_dac(r.d.pid, "after the upgrade");
	expect_set_event("sched:sched_switch");
	expect_host_records(&r, "sched_switch");
	run_end(&r);
}
END_TEST

/* Without root the daemon says why once and runs on without the host. */
START_TEST(not_root_runs_without_host)
{
	struct testd d = { 0 };
	char *dir, bin[512], out[1024];
	FILE *f;
	int fd;

	NEED_TRACEFS();	/* root is needed to become someone else */
	dir = test_mkdtemp("hostsrc");
	ck_assert_ptr_nonnull(dir);
	ck_assert_int_eq(chmod(dir, 0777), 0);
	snprintf(d.dir, sizeof(d.dir), "%s", dir);
	snprintf(d.state, sizeof(d.state), "%s/state", dir);
	snprintf(d.sock, sizeof(d.sock), "%s/control.sock", dir);
	snprintf(d.conf, sizeof(d.conf), "%s/vmtraced.yaml", dir);
	snprintf(d.log, sizeof(d.log), "%s/vmtraced.log", dir);
	f = fopen(d.conf, "w");
	ck_assert_ptr_nonnull(f);
	conf_write(f, d.state, d.sock,
		"host:\n  enabled: true\n  events: [sched:sched_switch]\n  qemu_only: false\n");
	fclose(f);
	chmod(d.conf, 0644);
	snprintf(bin, sizeof(bin), "%s/%s/vmtraced", test_srcdir(), test_builddir());
	fd = open(d.log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	d.pid = fork();
	ck_assert_int_ge(d.pid, 0);
	if (d.pid == 0) {
		dup2(fd, 1);
		dup2(fd, 2);
		if (setgroups(0, NULL) < 0 || setresgid(65534, 65534, 65534) < 0 ||
		    setresuid(65534, 65534, 65534) < 0)
			_exit(126);
		execl(bin, "vmtraced", "-c", d.conf, (char *)NULL);
		_exit(127);
	}
	close(fd);
	ITEST_WAIT(testd_log_count(&d, " running: ") > 0, 10000);
	ck_assert_msg(testd_log_count(&d, " running: ") == 1, "vmtraced not running (log: %s)", d.log);
	ck_assert_int_eq(testd_log_count(&d, "root needed"), 1);
	ck_assert_msg(access(instance, F_OK) != 0, "%s made without root?", instance);
	ck_assert_int_ne(testd_ctl(&d, out, sizeof(out), "dump host 2>&1"), 0);
	ck_assert_msg(strstr(out, "no such guest") != NULL, "got '%s'", out);
	ck_assert_int_eq(testd_stop(&d), 0);
	test_rmtree(dir);
	free(dir);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("hostsrc");
	TCase *t = tcase_create("daemon");
	const char *tfs = test_tracefs();
	int rc;

	snprintf(instance, sizeof(instance), "%s/instances/%s", tfs ? tfs : "/nonexistent",
		 test_host_instance());
	tcase_add_test(t, records_host_events);
	tcase_add_test(t, qemu_only_filters_sched);
	tcase_add_test(t, stale_instance_is_replaced);
	tcase_add_test(t, missing_events);
	tcase_add_test(t, reload_applies_host_changes);
	tcase_add_test(t, not_root_runs_without_host);
	tcase_add_test(t, own_user_keeps_no_dac);
	tcase_add_test(t, upgrade_as_user_keeps_host);
	tcase_set_timeout(t, 120);
	suite_add_tcase(s, t);
	rc = test_run_suite(s);
	/* a test that failed may have left the instance; a live daemon's is busy */
	if (tfs && access(instance, F_OK) == 0 && rmdir(instance) == 0)
		printf("removed %s left by a failed test\n", instance);
	return rc;
}
