/* SPDX-License-Identifier: MIT */
/*
 * Integration: the daemon's files when the disk fails it and when it dies.
 * A stand-in guest streams real ftrace pages; vmtraced runs with
 * tests/tools/faultshim.so preloaded, which fails chosen calls (VMT_FAULT)
 * on the files under the state folder: a sample's write, fsync and rename,
 * an aux file's write, the folder's fsync. Then vmtraced is killed with
 * SIGKILL at random points of 100 dumps, and restarted each time.
 *
 * After each: every file under a final name reads back whole and holds the
 * guest's pages, every sample's aux file is there with the id the sample
 * names, the failed dump is said (exit code, log line, dump_errors) and
 * the rings still hold every page. Each case prints one "faults: " line.
 *
 * A disk that stalls: the sample's first write waits 1.5 s while the guest
 * keeps streaming into full rings. The sample holds the window as it was
 * at the flush, byte for byte (the writer reads it where it is, in the
 * rings); the ring fills from the dump reserve, then stops reading until
 * the sample is written, and every page the guest sent arrives after.
 *
 * VMT_FAULTSHIM names the shim (default BUILD/tests/tools/faultshim.so),
 * VMT_SEED the kill delays' seed, VMT_KILLS their number (100).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "aux.h"
#include "fakeguest.h"
#include "itest.h"
#include "sample.h"
#include "testd.h"
#include "testutil.h"

#define PS ITEST_PS
#define MAX_SAMPLES 5		/* retention: max_samples in the SIGKILL loop */
#define AUX_MAX_META (64u << 20)

static struct itest_input in;

#define NEED_INPUT() ITEST_NEED_INPUT(in)

/* ---- the shim ---------------------------------------------------------------- */


#define NEED_SHIM()                                                                        \
	do {                                                                               \
		if (access(test_shim_path(), R_OK))                                             \
			VMT_SKIP("no %s: build it with make tests", test_shim_path());          \
	} while (0)

/* The environment that preloads the shim with rule: static, one daemon at a time. */
static const struct testd_opts *fault_opts(const char *rule, int append_log)
{
	static char preload[PATH_MAX + 16], fault[2048], asan[1024];
	static const char *env[4];
	static struct testd_opts o;
	const char *a = getenv("ASAN_OPTIONS");

	snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", test_shim_path());
	snprintf(fault, sizeof(fault), "VMT_FAULT=%s", rule);
	/* the shim comes ahead of a sanitizer runtime, which then has to be told */
	snprintf(asan, sizeof(asan), "ASAN_OPTIONS=%s%sverify_asan_link_order=0", a ? a : "",
		 a && *a ? ":" : "");
	env[0] = preload;
	env[1] = fault;
	env[2] = asan;
	env[3] = NULL;
	o = (struct testd_opts){ .env = env, .append_log = append_log };
	return &o;
}

/* ---- what is on disk ------------------------------------------------------------ */

struct dir_report {
	int samples;		/* under a final name, all valid */
	int aux;		/* aux files under a final name, all valid */
	int temps;		/* .NAME.tmp-XXXXXX */
	int temps_whole;	/* temporaries that read back whole (killed before the rename) */
	char tmp_names[16][256];	/* the first 16 temporaries */
	int aux_unused;		/* aux files no sample names */
	char newest[256];	/* newest sample's name, "" if none */
};

static bool ends_with(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && !strcmp(s + a - b, suffix);
}

/* A sample that reads back must hold what the guest sent: its pages, all of them. */
static void check_sample_content(const char *path, const struct vmt_sample *s,
				 const struct fakeguest_conf *fc)
{
	ck_assert_msg(!strcmp(s->guest, "g1"), "%s: guest '%s'", path, s->guest);
	ck_assert_msg(s->ncpus == fc->ncpus && s->page_size == PS, "%s: %u CPUs, page size %u", path,
		      s->ncpus, s->page_size);
	for (uint32_t c = 0; c < s->ncpus; c++) {
		ck_assert_msg(s->cpus[c].npages == fc->npages[c], "%s: cpu%u holds %u pages of %zu",
			      path, c, s->cpus[c].npages, fc->npages[c]);
		ck_assert_msg(!memcmp(s->cpus[c].pages, fc->pages[c], fc->npages[c] * PS),
			      "%s: cpu%u's pages differ from what the guest sent", path, c);
	}
}

/* The aux file sample s names: there, whole, with s's aux id. */
static void check_aux_of(const char *gdir, const char *path, const struct vmt_sample *s)
{
	char aux[600], name[64], why[256] = "";
	struct vmt_aux a;
	int r;

	aux_file_name(name, sizeof(name), s->aux_version);
	snprintf(aux, sizeof(aux), "%s/%s", gdir, name);
	r = aux_read(aux, AUX_MAX_META, &a, why, sizeof(why));
	ck_assert_msg(r == 0, "%s names %s, which %s (%d: %s)", path, name,
		      r == -ENOENT ? "is not there" : "does not read back", r, why);
	ck_assert_msg(a.id == s->aux_id && a.version == s->aux_version,
		      "%s wants aux %u id %016llx, %s is version %u id %016llx", path, s->aux_version,
		      (unsigned long long)s->aux_id, name, a.version, (unsigned long long)a.id);
	aux_free(&a);
}

/*
 * Every file of the guest folder: under a final name it must read back
 * whole (and a sample hold the guest's pages and have its aux file); a
 * temporary that happens to read back must hold them too.
 */
static void check_state(const char *gdir, const struct fakeguest_conf *fc, struct dir_report *rep)
{
	uint32_t used[64] = { 0 };
	unsigned nused = 0;
	DIR *d = opendir(gdir);
	struct dirent *de;

	memset(rep, 0, sizeof(*rep));
	if (!d)
		return;
	while ((de = readdir(d))) {
		char path[600], why[256] = "";
		const char *n = de->d_name;
		struct vmt_sample *s = NULL;
		bool tmp = n[0] == '.' && strstr(n, ".tmp-");
		int r;

		if (!strcmp(n, ".") || !strcmp(n, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", gdir, n);
		if (tmp) {
			if (rep->temps < 16)
				snprintf(rep->tmp_names[rep->temps], sizeof(rep->tmp_names[0]), "%s", n);
			rep->temps++;
			if (strstr(n, ".vmts.tmp-") && sample_read(path, &s, why, sizeof(why)) == 0) {
				rep->temps_whole++;
				check_sample_content(path, s, fc);
				sample_free(s);
			}
			continue;
		}
		if (ends_with(n, ".vmts")) {
			r = sample_read(path, &s, why, sizeof(why));
			ck_assert_msg(r == 0, "%s under its final name does not read back: %s (%d)", path,
				      why, r);
			check_sample_content(path, s, fc);
			check_aux_of(gdir, path, s);
			if (nused < 64)
				used[nused++] = s->aux_version;
			sample_free(s);
			rep->samples++;
			if (strcmp(n, rep->newest) > 0)
				snprintf(rep->newest, sizeof(rep->newest), "%s", n);
		} else if (ends_with(n, ".vmtaux")) {
			struct vmt_aux a;

			r = aux_read(path, AUX_MAX_META, &a, why, sizeof(why));
			ck_assert_msg(r == 0, "%s under its final name does not read back: %s (%d)", path,
				      why, r);
			aux_free(&a);
			rep->aux++;
		}
	}
	closedir(d);
	/* aux files no sample names (the live session's may be one of them) */
	d = opendir(gdir);
	while (d && (de = readdir(d))) {
		unsigned v;
		bool named = false;

		if (sscanf(de->d_name, "aux-%u.vmtaux", &v) != 1 || !ends_with(de->d_name, ".vmtaux"))
			continue;
		for (unsigned i = 0; i < nused; i++)
			named |= used[i] == v;
		rep->aux_unused += !named;
	}
	if (d)
		closedir(d);
}

/* Temporaries younger than the retention's 60 s: make them look left long ago. */
static int age_temporaries(const char *gdir)
{
	struct timespec now;
	DIR *d = opendir(gdir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	clock_gettime(CLOCK_REALTIME, &now);
	while ((de = readdir(d))) {
		struct timespec t[2] = { { now.tv_sec - 120, 0 }, { now.tv_sec - 120, 0 } };
		struct stat st;

		if (de->d_name[0] != '.' || !strstr(de->d_name, ".tmp-") ||
		    fstatat(dirfd(d), de->d_name, &st, 0) < 0 || st.st_mtime < now.tv_sec - 60)
			continue;
		ck_assert_int_eq(utimensat(dirfd(d), de->d_name, t, 0), 0);
		n++;
	}
	closedir(d);
	return n;
}

/* temporaries in a not in b, by name (the first 16 of each) */
static int tmp_diff(const struct dir_report *a, const struct dir_report *b)
{
	int n = 0;

	for (int i = 0; i < VMT_MIN(a->temps, 16); i++) {
		bool in_b = false;
		for (int j = 0; j < VMT_MIN(b->temps, 16); j++)
			in_b |= !strcmp(a->tmp_names[i], b->tmp_names[j]);
		n += !in_b;
	}
	return n;
}

static uint64_t fed_pages(const struct fakeguest_conf *fc)
{
	uint64_t n = 0;

	for (unsigned c = 0; c < fc->ncpus; c++)
		n += fc->npages[c];
	return n;
}

/* ---- 1. one call fails ------------------------------------------------------------- */

struct fault_case {
	const char *what;	/* for the summary line */
	const char *rule;	/* VMT_FAULT, limited to the state folder */
	bool aux;		/* the aux file is the one that fails */
	int left;		/* samples the failed dump leaves under a final name */
	const char *log;	/* the daemon's line for it */
};

static void run_fault_case(const struct fault_case *fc)
{
	struct itest_run r;
	struct dir_report rep;
	char rule[1024], state[400], gdir[420], out[8192], sample[4400], line[600] = "";
	uint64_t fed, errors, injected;
	int rc;

	itest_run_init(&r, &in, "faults");
	snprintf(state, sizeof(state), "%s/state", r.dir);
	snprintf(gdir, sizeof(gdir), "%s/g1", state);
	snprintf(rule, sizeof(rule), "%s:path=%s/", fc->rule, state);
	fed = fed_pages(&r.fc[0]);
	itest_run_guest(&r, 0);
	itest_run_daemon_opts(&r, "record:\n  ring_size: 8MiB\n  flush_timeout: 5000ms\n", 1,
			      fault_opts(rule, 0));
	ck_assert_msg(testd_log_count(&r.d, "faultshim: armed") == 1, "the shim is not armed (log: %s)",
		      r.d.log);
	itest_expect_streaming(&r.d, "g1", 5000);
	itest_expect_pages_in(&r.d, "g1", fed);
	/* the aux file is written with the first sample, not before */
	ck_assert_int_eq(testd_log_count(&r.d, "cannot write aux file"), 0);
	ck_assert_msg(({
			      char a[500];
			      snprintf(a, sizeof(a), "%s/aux-000001.vmtaux", gdir);
			      access(a, F_OK) != 0;
		      }),
		      "an aux file before any dump (log: %s)", r.d.log);

	/* the dump with the fault */
	rc = itest_ctl(&r.d, out, sizeof(out), "dump 2>&1");
	ck_assert_msg(rc == 1, "vmtracectl dump exited %d with %s failing: %s (log: %s)", rc, fc->what,
		      out, r.d.log);
	ck_assert_msg(strstr(out, strstr(fc->rule, "ENOSPC") ? "No space left on device" :
				       "Input/output error") != NULL, "dump said: %s", out);
	ck_assert_msg(testd_log_count(&r.d, "cannot write sample") == 1,
		      "%d 'cannot write sample' lines (log: %s)",
		      testd_log_count(&r.d, "cannot write sample"), r.d.log);
	ck_assert_msg(testd_log_count(&r.d, fc->log) >= 1, "no '%s' in the log (%s)", fc->log, r.d.log);
	errors = itest_num(&r.d, NULL, "dump_errors");
	ck_assert_uint_eq(errors, 1);
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "status"), 0);
	ck_assert_msg(strstr(out, "(1 failed)") != NULL, "status does not say the failure: %s", out);
	injected = (uint64_t)testd_log_count(&r.d, "faultshim: inject");
	ck_assert_uint_ge(injected, 1);
	{
		/* the daemon's own words, for the summary */
		FILE *f = fopen(r.d.log, "r");
		char l[4096];
		while (f && fgets(l, sizeof(l), f))
			if (strstr(l, "cannot write sample")) {
				l[strcspn(l, "\n")] = 0;
				snprintf(line, sizeof(line), "%s", strstr(l, "cannot write sample"));
			}
		if (f)
			fclose(f);
	}

	check_state(gdir, &r.fc[0], &rep);
	ck_assert_msg(rep.samples == fc->left, "%d samples under a final name after the failed dump",
		      rep.samples);
	ck_assert_msg(rep.temps == 0, "%d temporaries left by the failed dump", rep.temps);
	/* the rings are untouched */
	ck_assert_uint_eq(itest_num(&r.d, "g1", "pages_in"), fed);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "pages"), fed);
	ck_assert(itest_state_is(&r.d, "g1", "streaming"));

	/* the fault has passed: the next dump holds every page, with its aux file */
	itest_dump_one(&r.d, "", sample, sizeof(sample));
	check_state(gdir, &r.fc[0], &rep);
	ck_assert_int_eq(rep.samples, fc->left + 1);
	ck_assert_int_eq(rep.temps, 0);
	ck_assert_int_eq(rep.aux_unused, 0);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "dump_errors"), 1);
	ck_assert_int_eq(testd_log_count(&r.d, "cannot write aux file"), fc->aux ? 1 : 0);
	printf("faults: %s, %llu injected: dump failed (vmtracectl exit 1, dump_errors 1, \"%.160s\"), "
	       "%d file(s) under final names after it%s, 0 temporaries; next dump: %llu of %llu pages, "
	       "aux file present with the sample's id\n",
	       fc->what, (unsigned long long)injected, line, fc->left,
	       fc->left ? " (whole)" : "", (unsigned long long)fed, (unsigned long long)fed);
	fflush(stdout);
	itest_run_end(&r);
}

/* One failure each; rules are limited to the state folder. */
static const struct fault_case fault_cases[] = {
	/* the sample's 4th write: header, section header, INFO went through */
	{ "EIO on a sample's write (4th pwrite/pwritev of the temporary, once)",
	  "anywrite:EIO:after=3:count=1:name=.vmts.tmp-", false, 0, "cannot write sample" },
	{ "EIO on a sample's fsync (once)", "fsync:EIO:count=1:file:name=.vmts.tmp-", false, 0,
	  "cannot write sample" },
	{ "EIO on a sample's rename (once)", "rename:EIO:count=1:name=.vmts", false, 0,
	  "cannot write sample" },
	/* ENOSPC where a small tmpfs cannot put it: the fsync. The daemon makes
	 * room by the retention rules and tries once more; that fails too. */
	{ "ENOSPC on a sample's fsync (twice: the write and its retry after retention)",
	  "fsync:ENOSPC:count=2:file:name=.vmts.tmp-", false, 0,
	  "(again after the retention rules made room)" },
	/* the aux file, written ahead of the dump's sample, fails: the sample
	 * naming it must not be kept without it; the next dump writes both */
	{ "EIO on the aux file's write (2nd write, at the first dump)",
	  "anywrite:EIO:after=1:count=1:name=.vmtaux.tmp-", true, 0, "cannot write aux file" },
	/* the folder's fsync after the rename: the sample is whole under its
	 * name, but may not survive a crash: the dump says it failed */
	{ "EIO on the folder's fsync after a sample's rename (once)", "fsync:EIO:after=1:count=1:dir",
	  false, 1, "cannot write sample" },
};

START_TEST(injected)
{
	NEED_INPUT();
	NEED_SHIM();
	run_fault_case(&fault_cases[_i]);
}
END_TEST

/* ---- 2. SIGKILL at random points of dumps ------------------------------------------- */

static uint64_t rng_state;

static uint32_t rng_next(void)
{
	uint64_t x = rng_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	rng_state = x;
	return (uint32_t)(x >> 32);
}

/* pages_in == want, polled every 10 ms */
static bool wait_pages(struct testd *d, uint64_t want, int timeout_ms)
{
	return ITEST_WAIT_MS(itest_num(d, "g1", "pages_in") == want, (uint64_t)timeout_ms, 10);
}

START_TEST(sigkill_during_dumps)
{
	struct itest_run r;
	struct dir_report rep;
	const struct testd_opts o = { .append_log = 1 };
	char gdir[400], prev_newest[256] = "", sample[4400], young[600], top[512];
	int kills = 100, completed = 0, mid_write = 0, whole_temps = 0, over = 0;
	int cleaned = 0, new_temps = 0;
	struct dir_report known = { 0 };	/* the temporaries after the last kill */
	int max_seen = 0, st;
	uint64_t fed, t0, hist[6] = { 0 };
	const char *e;

	NEED_INPUT();
	e = getenv("VMT_KILLS");
	if (e && atoi(e) > 0)
		kills = atoi(e);
	e = getenv("VMT_SEED");
	rng_state = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
	if (!rng_state)
		rng_state = 1;
	printf("sigkill_during_dumps: VMT_SEED=%llu\n", (unsigned long long)rng_state);

	itest_run_init(&r, &in, "sigkill100");
	/* a small window, so that a dump takes about as long as the kill delays
	 * span and they land before, in and after the write */
	for (unsigned c = 0; c < in.ncpus; c++)
		r.fc[0].npages[c] = VMT_MIN(r.fc[0].npages[c], 200);
	fed = fed_pages(&r.fc[0]);
	snprintf(gdir, sizeof(gdir), "%s/state/g1", r.dir);
	itest_run_guest(&r, 0);
	snprintf(top, sizeof(top),
		 "triggers:\n  coalesce: 0ms\nretention:\n  max_samples: %d\n"
		 "record:\n  ring_size: 4MiB\n  flush_timeout: 5000ms\n",
		 MAX_SAMPLES);
	itest_run_daemon(&r, top, 1);

	t0 = itest_now_ms();
	for (int i = 0; i < kills; i++) {
		struct dir_report before;
		unsigned delay = rng_next() % 51;

		if (i)
			ck_assert_msg(testd_start_opts(&r.d, r.dir, r.body, &o) == 0,
				      "vmtraced does not start after SIGKILL %d (log: %s)", i, r.d.log);
		ck_assert_msg(wait_pages(&r.d, fed, 15000), "kill %d: pages_in %llu of %llu (log: %s)", i,
			      (unsigned long long)itest_num(&r.d, "g1", "pages_in"),
			      (unsigned long long)fed, r.d.log);
		check_state(gdir, &r.fc[0], &before);

		ck_assert_int_eq(kill(r.d.pid, SIGUSR1), 0);
		usleep(delay * 1000);
		ck_assert_int_eq(kill(r.d.pid, SIGKILL), 0);
		ck_assert_int_eq(waitpid(r.d.pid, &st, 0), r.d.pid);
		ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL,
			      "kill %d: vmtraced ended otherwise (status 0x%x, log: %s)", i, st, r.d.log);
		r.d.pid = 0;

		check_state(gdir, &r.fc[0], &rep);
		if (strcmp(rep.newest, prev_newest)) {
			completed++;
			hist[delay / 10]++;
		}
		snprintf(prev_newest, sizeof(prev_newest), "%s", rep.newest);
		mid_write += rep.temps > before.temps;
		/* by name: which temporaries are new, which left by earlier kills are
		 * gone (a start's retention pass removes those aged past 60 s) */
		new_temps += tmp_diff(&rep, &known);
		cleaned += tmp_diff(&known, &rep);
		known = rep;
		whole_temps += rep.temps_whole > before.temps_whole;
		/* one over the limit: killed between a sample's rename and the
		 * retention pass after it; the next pass brings it back */
		ck_assert_msg(rep.samples <= MAX_SAMPLES + 1, "kill %d: %d samples, limit %d", i,
			      rep.samples, MAX_SAMPLES);
		over += rep.samples > MAX_SAMPLES;
		max_seen = VMT_MAX(max_seen, rep.samples);
		age_temporaries(gdir);
	}

	/* one more start: its housekeeping (5 s in) deletes the temporaries
	 * left by the kills, but not a young one, which may be a writer's */
	{
		int fd;

		snprintf(young, sizeof(young), "%s/.g1-20200101T000000.000000Z.vmts.tmp-Young1", gdir);
		fd = open(young, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		ck_assert_int_ge(fd, 0);
		close(fd);
	}
	check_state(gdir, &r.fc[0], &rep);
	{
		int left_before = rep.temps - 1, over_before = rep.samples;

		ck_assert_msg(testd_start_opts(&r.d, r.dir, r.body, &o) == 0,
			      "vmtraced does not start after the last SIGKILL (log: %s)", r.d.log);
		ck_assert_msg(ITEST_WAIT(itest_count_tmp(gdir) == 1, 8000),
			      "%d temporaries 8 s after the restart (log: %s)", itest_count_tmp(gdir),
			      r.d.log);
		ck_assert_msg(access(young, F_OK) == 0, "the young temporary was deleted");
		check_state(gdir, &r.fc[0], &rep);
		cleaned += tmp_diff(&known, &rep);
		ck_assert_msg(ITEST_WAIT(({
						 check_state(gdir, &r.fc[0], &rep);
						 rep.samples <= MAX_SAMPLES;
					 }),
					 2000),
			      "%d samples after the restart's retention pass", rep.samples);
		ck_assert_msg(wait_pages(&r.d, fed, 15000), "pages_in %llu of %llu after the last restart",
			      (unsigned long long)itest_num(&r.d, "g1", "pages_in"),
			      (unsigned long long)fed);
		itest_dump_one(&r.d, "", sample, sizeof(sample));
		check_state(gdir, &r.fc[0], &rep);
		ck_assert_int_le(rep.samples, MAX_SAMPLES);
		ck_assert_int_eq(rep.temps, 1);
		ck_assert_int_eq(rep.aux, 1);
		ck_assert_int_eq(rep.aux_unused, 0);
		ck_assert_int_ge(testd_log_count(&r.d, "stale temporary file"), 1);
		printf("faults: SIGKILL x%d during dumps (0-50 ms after SIGUSR1, a restart after each, "
		       "%.1f s): %d kills after the sample was complete, %d in the write (temporary left, "
		       "%d of them whole but not renamed), %d kills before it; never a partial or corrupt "
		       "file under a final name, every sample valid with all %llu pages and its aux file "
		       "(0 orphan samples); %d temporaries left by kills, %d removed by the daemon's "
		       "next start (%d were there for the last one), a young one kept; retention max_samples %d: at most %d samples after a "
		       "kill (%d times one over, killed before the retention pass), %d after the "
		       "restart's pass, %d after a last dump\n",
		       kills, (itest_now_ms() - t0) / 1000.0, completed, mid_write, whole_temps,
		       kills - completed - mid_write, (unsigned long long)fed, new_temps, cleaned, left_before,
		       MAX_SAMPLES, max_seen, over, over_before > MAX_SAMPLES ? MAX_SAMPLES : over_before,
		       rep.samples);
		printf("sigkill_during_dumps: complete samples by delay (0-9, 10-19, ... 50 ms): "
		       "%llu %llu %llu %llu %llu %llu\n",
		       (unsigned long long)hist[0], (unsigned long long)hist[1], (unsigned long long)hist[2],
		       (unsigned long long)hist[3], (unsigned long long)hist[4], (unsigned long long)hist[5]);
		fflush(stdout);
	}
	unlink(young);
	itest_run_end(&r);
}
END_TEST

/* ---- 3. a slow disk: the window is held where it is --------------------------------- */

#define SLOW_RING_PAGES 64	/* per CPU */
#define SLOW_PAGES 600		/* per CPU, at SLOW_RATE pages/s */
#define SLOW_RATE 200
#define SLOW_RESERVE_PAGES 16
#define SLOW_DELAY_MS 1500

/* s holds, per CPU, SLOW_RING_PAGES pages exactly as the guest sent them
 * from first_seq on; *first gets cpu0's first_seq */
static void check_window(const char *path, const struct vmt_sample *s, const struct fakeguest_conf *fc,
			 uint64_t *first)
{
	ck_assert_uint_eq(s->ncpus, fc->ncpus);
	for (uint32_t c = 0; c < s->ncpus; c++) {
		const struct vmt_sample_cpu *sc = &s->cpus[c];

		ck_assert_msg(sc->npages == SLOW_RING_PAGES, "%s: cpu%u holds %u pages, not %u", path, c,
			      sc->npages, SLOW_RING_PAGES);
		ck_assert_msg(sc->first_seq + sc->npages <= fc->npages[c], "%s: cpu%u from page %llu", path,
			      c, (unsigned long long)sc->first_seq);
		ck_assert_msg(!memcmp(sc->pages, fc->pages[c] + sc->first_seq * PS, (size_t)sc->npages * PS),
			      "%s: cpu%u's pages %llu.. differ from what the guest sent", path, c,
			      (unsigned long long)sc->first_seq);
	}
	*first = s->cpus[0].first_seq;
}

START_TEST(slow_disk_holds_the_window)
{
	struct itest_run r;
	char rule[1024], state[400], top[512], sample[4400];
	uint64_t fed, t0, dump_ms, first1, first2, pauses, peak, in_at_dump;
	struct vmt_sample *s;

	NEED_INPUT();
	NEED_SHIM();
	itest_run_init(&r, &in, "slowdisk");
	itest_run_pages(&r, &in, 0, SLOW_PAGES);
	r.fc[0].pages_per_sec = SLOW_RATE;
	fed = fed_pages(&r.fc[0]);
	snprintf(state, sizeof(state), "%s/state", r.dir);
	snprintf(rule, sizeof(rule), "anywrite:delay=%u:count=1:name=.vmts.tmp-:path=%s/", SLOW_DELAY_MS,
		 state);
	snprintf(top, sizeof(top),
		 "dump_reserve: %uKiB\ntriggers:\n  coalesce: 0ms\n"
		 "record:\n  ring_size: %uKiB\n  flush_timeout: 5000ms\n",
		 SLOW_RESERVE_PAGES * PS / 1024, SLOW_RING_PAGES * PS / 1024);
	itest_run_guest(&r, 0);
	itest_run_daemon_opts(&r, top, 1, fault_opts(rule, 0));
	itest_expect_streaming(&r.d, "g1", 5000);
	/* full rings, and the guest goes on sending: pages_in is the sum of
	 * the CPUs, which need not go at one pace, so the window says that
	 * every ring is full */
	ck_assert(itest_wait_num_ge(&r.d, "g1", "pages_in", (SLOW_RING_PAGES + 20) * in.ncpus, 20000));
	ck_assert(itest_wait_num_ge(&r.d, "g1", "pages", SLOW_RING_PAGES * in.ncpus, 20000));

	t0 = itest_now_ms();
	itest_dump_one(&r.d, "", sample, sizeof(sample));
	dump_ms = itest_now_ms() - t0;
	in_at_dump = itest_num(&r.d, "g1", "pages_in");
	ck_assert_msg(testd_log_count(&r.d, "faultshim: delay") == 1, "the write was not delayed (log: %s)",
		      r.d.log);
	ck_assert_uint_ge(dump_ms, SLOW_DELAY_MS);
	s = itest_read_sample(sample);
	check_window(sample, s, &r.fc[0], &first1);
	sample_free(s);
	pauses = itest_num(&r.d, "g1", "read_pauses");
	peak = itest_num(&r.d, NULL, "reserve_peak");
	ck_assert_msg(pauses >= 1, "reading never paused in %llu ms at %u pages/s (log: %s)",
		      (unsigned long long)dump_ms, SLOW_RATE, r.d.log);
	ck_assert_uint_eq(peak, SLOW_RESERVE_PAGES * PS);
	ck_assert_int_ge(testd_log_count(&r.d, "reading paused"), 1);

	/* reading went on: every page the guest sent arrives, the reserve is back */
	itest_expect_pages_in(&r.d, "g1", fed);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "reserve_used"), 0);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "pages_rejected"), 0);
	itest_dump_one(&r.d, "", sample, sizeof(sample));
	s = itest_read_sample(sample);
	check_window(sample, s, &r.fc[0], &first2);
	ck_assert_uint_eq(first2, SLOW_PAGES - SLOW_RING_PAGES);
	sample_free(s);
	printf("faults: a sample's first write stalled %u ms, the guest streaming %u pages/s per CPU into "
	       "full rings of %u pages: the sample held cpu0's pages %llu-%llu byte for byte (dump "
	       "%llu ms); the reserve (%u pages) was used up and reading paused %llu time(s); then all "
	       "%llu pages arrived (%llu by the end of the dump), reserve back to 0, the next dump "
	       "exact (pages %llu-%llu)\n",
	       SLOW_DELAY_MS, SLOW_RATE, SLOW_RING_PAGES, (unsigned long long)first1,
	       (unsigned long long)(first1 + SLOW_RING_PAGES - 1), (unsigned long long)dump_ms,
	       SLOW_RESERVE_PAGES, (unsigned long long)pauses, (unsigned long long)fed,
	       (unsigned long long)in_at_dump, (unsigned long long)first2,
	       (unsigned long long)(first2 + SLOW_RING_PAGES - 1));
	fflush(stdout);
	itest_run_end(&r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("faults");
	TCase *t = tcase_create("injected");
	TCase *k = tcase_create("sigkill");
	int rc;

	itest_input_prepare(&in);
	printf("input: %s, %u CPUs; shim: %s\n", in.source, in.ncpus, test_shim_path());
	fflush(stdout);

	if (!getenv("VMT_TEST") || strstr("injected", getenv("VMT_TEST")))
		tcase_add_loop_test(t, injected, 0, sizeof(fault_cases) / sizeof(fault_cases[0]));
	tcase_set_timeout(t, 60);
	suite_add_tcase(s, t);

	TEST_ADD(k, sigkill_during_dumps);
	tcase_set_timeout(k, 300);	/* a hang: it restarts the daemon many times */
	suite_add_tcase(s, k);

	{
		TCase *w = tcase_create("slow");
		TEST_ADD(w, slow_disk_holds_the_window);
		tcase_set_timeout(w, 60);
		suite_add_tcase(s, w);
	}

	rc = test_run_suite(s);
	itest_input_free(&in);
	return rc;
}
