/* SPDX-License-Identifier: MIT */
/*
 * Integration: crash recovery through systemd's fd store, against the
 * protocol (these machines have no systemd as PID 1). sdstore.c plays
 * systemd: it receives FDSTORE=1 and its fds, keeps them by name, drops
 * them on FDSTOREREMOVE=1, and the next vmtraced gets them at 3.. with
 * LISTEN_PID/LISTEN_FDS/LISTEN_FDNAMES. Two stand-in guests (the same
 * boot_id each time, so the aux id matches) stream; the daemon is
 * SIGKILLed at random points; each restart must adopt or refuse with a
 * reason, and its dump must hold, byte-exact, the window the dead daemon
 * had committed.
 *
 * Every page fed is unique: a corpus page whose header time says which
 * one it is (k), so a page in a sample is found among those fed and
 * compared byte for byte.
 */
#include <limits.h>
#include <signal.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"
#include "page.h"
#include "sample.h"
#include "sdstore.h"

#define NG 2
#define SLICE 250	/* pages per CPU a stand-in guest sends in one daemon lifetime */
#define BASE_TS ITEST_UNIQUE_BASE
static struct itest_input in;
static uint64_t step_ns;	/* between pages' times: more than a page spans */
static unsigned ncpu;

static const char *TOP = "record:\n  ring_size: 2MiB\n";

/* Page k of cpu, told apart from every other (itest_unique_page). */
static void fed_page(unsigned cpu, uint64_t k, uint8_t *out)
{
	itest_unique_page(&in, step_ns, cpu, k, out);
}

/* The pages of slice s, per CPU, into the guest's conf. */
static void feed_slice(struct itest_run *r, int g, unsigned s)
{
	for (unsigned c = 0; c < ncpu; c++) {
		if (!r->own[g][c])
			r->own[g][c] = malloc((size_t)SLICE * ITEST_PS);
		ck_assert_ptr_nonnull(r->own[g][c]);
		for (unsigned i = 0; i < SLICE; i++)
			fed_page(c, (uint64_t)s * SLICE + i, r->own[g][c] + (size_t)i * ITEST_PS);
		r->fc[g].pages[c] = r->own[g][c];
		r->fc[g].npages[c] = SLICE;
	}
	r->fc[g].hold_first = 1;
}

/*
 * Every page of the sample is one that was fed, byte for byte, in order;
 * a run breaks only where a slice starts (the stand-in of the dead
 * daemon's lifetime stopped there), unless a ring was refused (gaps_ok:
 * what is left is another lifetime's). A kill during a dump excuses
 * nothing: the pages that came in meanwhile are in the dump reserve,
 * which is in the store too. Returns the pages of slice s (over its CPUs).
 */
static uint64_t check_sample(const char *path, unsigned s, bool gaps_ok, uint32_t *lifetimes)
{
	struct vmt_sample *sm = itest_read_sample(path);
	uint8_t want[ITEST_PS];
	uint64_t in_slice = 0;

	*lifetimes = sm->recovered_lifetimes;
	for (unsigned c = 0; c < sm->ncpus; c++) {
		const struct vmt_sample_cpu *sc = &sm->cpus[c];
		int64_t prev = -1;

		ck_assert_msg(sc->pages_refused == 0, "%s cpu%u: %u pages refused", path, c,
			      sc->pages_refused);
		for (uint32_t i = 0; i < sc->npages; i++) {
			const uint8_t *p = sc->pages + (size_t)i * ITEST_PS;
			uint64_t t = get_le64(p), k = (t - BASE_TS) / step_ns;

			ck_assert_msg(t >= BASE_TS && (t - BASE_TS) % step_ns == 0,
				      "%s cpu%u page %u: not a page that was fed", path, c, i);
			fed_page(c, k, want);
			ck_assert_msg(!memcmp(p, want, ITEST_PS), "%s cpu%u page %u (fed %llu): bytes differ",
				      path, c, i, (unsigned long long)k);
			ck_assert_msg((int64_t)k > prev, "%s cpu%u: page %llu after %lld", path, c,
				      (unsigned long long)k, (long long)prev);
			ck_assert_msg(gaps_ok || prev < 0 || (int64_t)k == prev + 1 || k % SLICE == 0,
				      "%s cpu%u: fed page %llu follows %lld within a slice", path, c,
				      (unsigned long long)k, (long long)prev);
			prev = (int64_t)k;
			in_slice += k / SLICE == s;
		}
	}
	sample_free(sm);
	return in_slice;
}

/* The daemon of configuration top, with what the store keeps passed as
 * systemd passes it, and more environment (up to 3, NULL-ended) if any. */
static void start_daemon_top(struct itest_run *r, struct sdstore *st, const char *top,
			     const char *const *more, bool append)
{
	const char *env[5] = { st->env };
	char names[SDSTORE_MAX * 256];
	int fds[SDSTORE_MAX];
	struct testd_opts o = { .env = env, .append_log = append };

	for (unsigned i = 0; more && more[i] && i < 3; i++)
		env[i + 1] = more[i];
	o.npass = sdstore_listen(st, fds, names, sizeof(names));
	o.pass_fds = fds;
	o.pass_names = names;
	itest_run_daemon_opts(r, top, NG, &o);
	for (unsigned i = 0; i < o.npass; i++)
		close(fds[i]);
}

static void start_daemon(struct itest_run *r, struct sdstore *st, bool append)
{
	start_daemon_top(r, st, TOP, NULL, append);
}

static void kill_daemon(struct itest_run *r, struct sdstore *st)
{
	kill(r->d.pid, SIGKILL);
	waitpid(r->d.pid, NULL, 0);
	r->d.pid = 0;
	sdstore_sync(st);	/* all it sent is queued now */
}

/* Lines of the daemon's log holding both a and b; the last one into last. */
static int log_find2(const struct testd *d, const char *a, const char *b, char *last, size_t n)
{
	FILE *f = fopen(d->log, "r");
	char line[4096];
	int k = 0;

	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, a) && strstr(line, b)) {
			k++;
			if (last)
				snprintf(last, n, "%.*s", (int)strcspn(line, "\n"), line);
		}
	if (f)
		fclose(f);
	return k;
}

static int log_count2(const struct testd *d, const char *a, const char *b)
{
	return log_find2(d, a, b, NULL, 0);
}

/* Pages brought home from the dump reserve, over the adoption lines of who. */
static long log_sum(const struct testd *d, const char *who, const char *tail)
{
	FILE *f = fopen(d->log, "r");
	char line[4096];
	long sum = 0;

	while (f && fgets(line, sizeof(line), f)) {
		char *p = strstr(line, " brought home from the ");
		char *q = p;

		if (!p || !strstr(line, who) || !strstr(line, tail))
			continue;
		while (q > line && q[-1] >= '0' && q[-1] <= '9')
			q--;
		sum += strtol(q, NULL, 10);
	}
	if (f)
		fclose(f);
	return sum;
}

static uint64_t brought_home;	/* over the run: kills during a dump kept their pages */

/* why the last guest started afresh, for the final assertion */
static char last_refusal[512] = "(none)";

/* Fds in the store whose name starts with prefix; the last name into last. */
static unsigned store_count_prefix(struct sdstore *st, const char *prefix, char *last, size_t n)
{
	unsigned k = 0;

	pthread_mutex_lock(&st->lock);
	for (unsigned i = 0; i < st->n; i++)
		if (!strncmp(st->name[i], prefix, strlen(prefix))) {
			k++;
			if (last)
				snprintf(last, n, "%s", st->name[i]);
		}
	pthread_mutex_unlock(&st->lock);
	return k;
}

/* Every ring in the store, and one dump reserve: the daemon's own, the
 * one handed back let go once the rings were adopted. */
static void expect_store_full(struct sdstore *st)
{
	char name[64];

	ck_assert_msg(ITEST_WAIT(store_count_prefix(st, "reserve/", NULL, 0) == 1, 5000),
		      "the store holds %u dump reserves", store_count_prefix(st, "reserve/", NULL, 0));

	for (int g = 0; g < NG; g++)
		for (unsigned c = 0; c < ncpu; c++) {
			snprintf(name, sizeof(name), "ring/g%d/%u", g + 1, c);
			ck_assert_msg(ITEST_WAIT(sdstore_count(st, name) == 1, 5000),
				      "the store holds %u fds named %s", sdstore_count(st, name), name);
		}
}

/* After a restart: each ring adopted or refused with its reason; an
 * adopted window holds what the dead daemon committed. Returns whether
 * guest g was adopted; base is its pages_in at this lifetime's start. */
static bool check_restart(struct itest_run *r, int g, unsigned s, uint64_t seen, uint64_t *base,
			  bool *gaps_ok)
{
	char who[32], line[128], sample[PATH_MAX], name[8];
	unsigned adopted = 0;
	uint32_t lifetimes;
	uint64_t now, in_slice;

	snprintf(who, sizeof(who), "guest g%d: ", g + 1);
	snprintf(name, sizeof(name), "g%d", g + 1);
	for (unsigned c = 0; c < ncpu; c++) {
		int a, f;

		snprintf(line, sizeof(line), "%scpu%u: window adopted", who, c);
		a = testd_log_count(&r->d, line);
		snprintf(line, sizeof(line), "%scpu%u: ring handed back refused", who, c);
		f = testd_log_count(&r->d, line);
		ck_assert_msg(a + f == 1, "%scpu%u: adopted %d, refused %d (log: %s)", who, c, a, f,
			      r->d.log);
		adopted += a;
	}
	now = itest_num(&r->d, name, "pages_in");
	if (adopted != ncpu) {
		log_find2(&r->d, who, "refused", last_refusal, sizeof(last_refusal));
		printf("lifetime %u: %s started afresh: %s\n", s + 1, name, last_refusal);
		fflush(stdout);
		*base = now;
		*gaps_ok = true;	/* what is left is another lifetime's */
		return false;
	}
	/* counters continue: at least what status said just before the kill */
	ck_assert_msg(now >= seen, "%spages_in %llu after the restart, %llu before", who,
		      (unsigned long long)now, (unsigned long long)seen);
	/* nothing fails its checks, a kill during a dump included: the pages
	 * that came in meanwhile are brought home from the reserve handed back */
	ck_assert_msg(log_count2(&r->d, who, ", 0 pages and 0 frames dropped") == (int)ncpu,
		      "%spages or frames dropped at an adoption (log: %s)", who, r->d.log);
	/* and the reserve was in the store: none of its pages is lost either */
	ck_assert_msg(log_count2(&r->d, who, "lost with a dump reserve") == 0,
		      "%spages lost with the dump reserve (log: %s)", who, r->d.log);
	brought_home += (uint64_t)log_sum(&r->d, who, "dump reserve)");
	itest_dump_one(&r->d, name, sample, sizeof(sample));
	in_slice = check_sample(sample, s, *gaps_ok, &lifetimes);
	ck_assert_msg(lifetimes >= 2, "%s: INFO says no recovery (%u)", sample, lifetimes);
	/* the stand-in holds at its first page: the sample is the adopted window,
	 * and it holds every page the dead daemon committed of its slice */
	if (*gaps_ok)
		ck_assert_uint_le(in_slice, now - *base);
	else
		ck_assert_msg(in_slice == now - *base, "%s: %llu pages of slice %u, %llu committed",
			      sample, (unsigned long long)in_slice, s,
			      (unsigned long long)(now - *base));
	if (s % 10 == 9) {
		char dat[PATH_MAX + 16];

		snprintf(dat, sizeof(dat), "%s/m.dat", r->dir);
		ck_assert_int_eq(itest_ctl(&r->d, NULL, 0, "merge -o %s %s >/dev/null", dat, sample), 0);
		unlink(dat);
	}
	*base = now;
	return true;
}

/* A random point of the lifetime: streaming, a dump, compression. */
static void kill_somewhere(struct itest_run *r, struct sdstore *st, uint64_t base, uint64_t *seen)
{
	int mode = rand() % 3;
	FILE *dump = NULL;

	if (mode == 0) {
		uint64_t target = base + (uint64_t)(rand() % (SLICE * (int)ncpu));
		ITEST_WAIT_MS(itest_num(&r->d, "g1", "pages_in") >= target, 10000, 5);
	} else if (mode == 1) {
		dump = testd_ctl_begin(&r->d, "dump g1 g2 2>/dev/null");
		usleep((useconds_t)(rand() % 40000));	/* where it dies, not a wait for an event */
	} else {
		usleep((useconds_t)(rand() % 150000));
	}
	seen[0] = itest_num(&r->d, "g1", "pages_in");
	seen[1] = itest_num(&r->d, "g2", "pages_in");
	kill_daemon(r, st);
	if (dump)
		testd_ctl_end(dump, NULL, 0);
}

#define KILLS 50

START_TEST(sigkill_fd_store_recovery)
{
	unsigned seed = getenv("VMT_TEST_SEED") ? (unsigned)atoi(getenv("VMT_TEST_SEED"))
						: (unsigned)time(NULL);
	uint64_t base[NG] = { 0 }, seen[NG] = { 0 }, t0;
	bool gaps_ok[NG] = { false };
	unsigned adopted = 0, refused = 0;
	struct itest_run r;
	struct sdstore st;

	ITEST_NEED_INPUT(in);
	printf("sigkill_fd_store_recovery: seed %u (VMT_TEST_SEED)\n", seed);
	fflush(stdout);
	srand(seed);
	itest_run_init(&r, &in, "recover");
	ck_assert_int_eq(sdstore_start(&st, r.dir), 0);
	t0 = itest_now_ms();
	for (unsigned it = 0; it <= KILLS; it++) {
		for (int g = 0; g < NG; g++) {
			feed_slice(&r, g, it);
			itest_run_guest(&r, g);
		}
		start_daemon(&r, &st, false);
		itest_expect_streaming(&r.d, "g1", 20000);
		itest_expect_streaming(&r.d, "g2", 20000);
		for (int g = 0; it && g < NG; g++) {
			bool a = check_restart(&r, g, it - 1, seen[g], &base[g], &gaps_ok[g]);
			adopted += a;
			refused += !a;
		}
		if (it)
			ck_assert_uint_eq(itest_num(&r.d, NULL, "rings_adopted") +
						  itest_num(&r.d, NULL, "rings_refused"), NG * ncpu);
		expect_store_full(&st);
		if (it == KILLS)
			break;
		for (int g = 0; g < NG; g++)
			ck_assert_int_eq(fakeguest_release(&r.fg[g]), 0);
		kill_somewhere(&r, &st, base[0], seen);
		for (int g = 0; g < NG; g++)
			itest_run_guest_stop(&r, g);
	}
	printf("sigkill_fd_store_recovery: %u kills, guests adopted %u times, started afresh %u "
	       "times, %llu pages brought home from a dump reserve, %.1f s\n", KILLS, adopted, refused,
	       (unsigned long long)brought_home, (double)(itest_now_ms() - t0) / 1000);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "reserves_refused"), 0);
	/* the same boot each time: nothing gives a reason to refuse */
	ck_assert_msg(refused == 0, "started afresh %u times (seed %u); the last: %s", refused, seed,
		      last_refusal);
	itest_run_end(&r);
	sdstore_stop(&st);
}
END_TEST


#define SMALL_RING_PAGES 64
static const char *SMALL_TOP = "record:\n  ring_size: 256KiB\n  compression: off\n";

/*
 * The kill comes while a dump holds the window for sure: its sample's
 * first write stalls (the shim), the guests go on streaming into full raw
 * rings, and the daemon dies once the reserve holds pages. The next one
 * brings them home: the window is whole, byte-exact, nothing dropped.
 */
START_TEST(a_kill_during_a_dump_keeps_the_reserve_pages)
{
	char rule[1024], preload[PATH_MAX + 16], asan[1024], sample[PATH_MAX], name[8], who[32];
	const char *a = getenv("ASAN_OPTIONS");
	const char *more[4] = { preload, rule, asan, NULL };
	uint64_t home = 0;
	struct itest_run r;
	struct sdstore st;
	uint32_t lifetimes;
	FILE *dump;

	ITEST_NEED_INPUT(in);
	if (access(test_shim_path(), R_OK))
		VMT_SKIP("no %s: build it with make tests", test_shim_path());
	itest_run_init(&r, &in, "recover-dump");
	ck_assert_int_eq(sdstore_start(&st, r.dir), 0);
	snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", test_shim_path());
	snprintf(rule, sizeof(rule), "VMT_FAULT=anywrite:delay=60000:count=1:name=.vmts.tmp-:path=%s/state/",
		 r.dir);
	/* the shim comes ahead of a sanitizer runtime, which then has to be told */
	snprintf(asan, sizeof(asan), "ASAN_OPTIONS=%s%sverify_asan_link_order=0", a ? a : "",
		 a && *a ? ":" : "");
	for (int g = 0; g < NG; g++) {
		feed_slice(&r, g, 0);
		r.fc[g].hold_first = 0;
		/* full rings and a few pages more, then held until the dump
		 * holds the window: the rest of the slice comes during it */
		r.fc[g].hold_after = SMALL_RING_PAGES + 8;
		itest_run_guest(&r, g);
	}
	start_daemon_top(&r, &st, SMALL_TOP, more, false);
	expect_store_full(&st);
	/* full rings, then the dump: it holds every page, the write stalls */
	for (int g = 0; g < NG; g++) {
		snprintf(name, sizeof(name), "g%d", g + 1);
		ck_assert_msg(itest_wait_num_ge(&r.d, name, "pages_in", (SMALL_RING_PAGES + 8) * ncpu,
						20000),
			      "guest %s: pages_in %llu, state %s (log: %s)", name,
			      (unsigned long long)itest_num(&r.d, name, "pages_in"),
			      itest_state_is(&r.d, name, "streaming") ? "streaming" : "not streaming",
			      r.d.log);
	}
	dump = testd_ctl_begin(&r.d, "dump g1 g2 2>/dev/null");
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, "faultshim: delay") == 1, 20000), "log: %s", r.d.log);
	for (int g = 0; g < NG; g++)
		ck_assert_int_eq(fakeguest_release(&r.fg[g]), 0);
	/* pages that came in since fill the reserve: the daemon dies now */
	ck_assert(itest_wait_num_ge(&r.d, NULL, "reserve_used", 2 * ncpu * ITEST_PS, 20000));
	kill_daemon(&r, &st);
	testd_ctl_end(dump, NULL, 0);
	for (int g = 0; g < NG; g++) {
		itest_run_guest_stop(&r, g);
		feed_slice(&r, g, 1);	/* held at its first page: the window is the dead daemon's */
		r.fc[g].hold_after = 0;
		itest_run_guest(&r, g);
	}
	start_daemon_top(&r, &st, SMALL_TOP, NULL, false);
	for (int g = 0; g < NG; g++) {
		snprintf(who, sizeof(who), "guest g%d: ", g + 1);
		snprintf(name, sizeof(name), "g%d", g + 1);
		itest_expect_streaming(&r.d, name, 20000);
		ck_assert_msg(log_count2(&r.d, who, ", 0 pages and 0 frames dropped") == (int)ncpu,
			      "%spages dropped at the adoption (log: %s)", who, r.d.log);
		home += (uint64_t)log_sum(&r.d, who, "dump reserve)");
		itest_dump_one(&r.d, name, sample, sizeof(sample));
		/* byte-exact, in order, no gap: the pages of the dump's time included */
		ck_assert_uint_eq(check_sample(sample, 0, false, &lifetimes), SMALL_RING_PAGES * ncpu);
		ck_assert_uint_eq(lifetimes, 2);
	}
	ck_assert_msg(home >= 2 * ncpu, "%llu pages brought home (log: %s)", (unsigned long long)home, r.d.log);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "reserves_refused"), 0);
	expect_store_full(&st);	/* the old reserve let go, the new one in */
	printf("a_kill_during_a_dump_keeps_the_reserve_pages: %llu pages brought home from the dump "
	       "reserve, every window whole\n", (unsigned long long)home);
	for (int g = 0; g < NG; g++)
		ck_assert_int_eq(fakeguest_release(&r.fg[g]), 0);
	itest_run_end(&r);
	sdstore_stop(&st);
}
END_TEST

/* Spoil both header copies of a stored ring: the CRC no longer matches. */
static void spoil_header(int fd)
{
	uint8_t *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	ck_assert_ptr_ne(m, MAP_FAILED);
	m[40] ^= 0x5a;	/* in the fixed part of copy A and of copy B */
	m[2048 + 40] ^= 0x5a;
	munmap(m, 4096);
}

START_TEST(bad_rings_refused_and_counted)
{
	char names[SDSTORE_MAX * 256], old_reserve[256] = "";
	int fds[SDSTORE_MAX];
	struct itest_run r;
	struct sdstore st;
	unsigned n;
	int mfd;

	ITEST_NEED_INPUT(in);
	itest_run_init(&r, &in, "recover-bad");
	ck_assert_int_eq(sdstore_start(&st, r.dir), 0);
	for (int g = 0; g < NG; g++) {
		feed_slice(&r, g, 0);
		r.fc[g].hold_first = 0;
		itest_run_guest(&r, g);
	}
	start_daemon(&r, &st, false);
	itest_expect_pages_in(&r.d, "g1", SLICE * ncpu);
	itest_expect_pages_in(&r.d, "g2", SLICE * ncpu);
	expect_store_full(&st);
	kill_daemon(&r, &st);
	for (int g = 0; g < NG; g++)
		itest_run_guest_stop(&r, g);

	/* g1 cpu0: a bad checksum; g1 cpu1: a memfd that is not sealed; g2:
	 * another boot (its aux id differs); ring/g9/0: no such guest */
	n = sdstore_listen(&st, fds, names, sizeof(names));
	for (unsigned i = 0; i < n; i++)
		close(fds[i]);
	ck_assert_uint_eq(store_count_prefix(&st, "reserve/", old_reserve, sizeof(old_reserve)), 1);
	pthread_mutex_lock(&st.lock);
	for (unsigned i = 0; i < st.n; i++)
		if (!strcmp(st.name[i], "ring/g1/0") || !strcmp(st.name[i], old_reserve))
			spoil_header(st.fd[i]);	/* the reserve's too: its CRC */
	pthread_mutex_unlock(&st.lock);
	mfd = memfd_create("not-a-ring", MFD_CLOEXEC);
	ck_assert_int_eq(ftruncate(mfd, 1 << 20), 0);
	{
		char nm[] = "ring/g1/1";
		pthread_mutex_lock(&st.lock);
		for (unsigned i = 0; i < st.n; i++)
			if (!strcmp(st.name[i], nm))
				dup2(mfd, st.fd[i]);
		pthread_mutex_unlock(&st.lock);
	}
	sdstore_put(&st, mfd, "ring/g9/0");
	for (int g = 0; g < NG; g++) {
		feed_slice(&r, g, 1);
		r.fc[g].hold_first = 0;
		r.fc[g].boot_id = g == 1 ? "another-boot" : NULL;
		itest_run_guest(&r, g);
	}
	start_daemon(&r, &st, false);
	itest_expect_pages_in(&r.d, "g1", SLICE * ncpu);	/* afresh: from 0 */
	itest_expect_pages_in(&r.d, "g2", SLICE * ncpu);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "rings_refused"), NG * ncpu);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "rings_adopted"), 0);
	ck_assert_int_eq(testd_log_count(&r.d, "guest g1: cpu0: ring handed back refused, starting "
					 "afresh: header checksum mismatch"), 1);
	ck_assert_int_eq(testd_log_count(&r.d, "guest g1: cpu1: ring handed back refused, starting "
					 "afresh: not a sealed memfd"), 1);
	ck_assert_int_eq(log_count2(&r.d, "guest g2: cpu0: ring handed back refused", "aux content id"), 1);
	/* the dump reserve handed back: refused, counted, out of the store */
	ck_assert_uint_eq(itest_num(&r.d, NULL, "reserves_refused"), 1);
	ck_assert_int_eq(log_count2(&r.d, "the dump reserve handed back", "is refused, the pages a dump had "
				    "sent there are lost: header checksum mismatch"), 1);
	ck_assert(ITEST_WAIT(sdstore_count(&st, old_reserve) == 0, 5000));
	/* the daemon's own rings and reserve took their places in the store */
	expect_store_full(&st);
	/* the ring of no guest: closed, out of the store, at the first housekeeping */
	ck_assert(itest_wait_num_ge(&r.d, NULL, "rings_unclaimed", 1, 15000));
	ck_assert_int_eq(testd_log_count(&r.d, "guest g9: cpu0: the ring handed back is closed: "
					 "no such guest in the configuration"), 1);
	ck_assert(ITEST_WAIT(sdstore_count(&st, "ring/g9/0") == 0, 5000));
	itest_run_end(&r);
	sdstore_stop(&st);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("recover");
	TCase *t = tcase_create("recover");
	int rc;

	itest_input_prepare(&in);
	ncpu = in.ncpus;
	if (ncpu)
		step_ns = itest_unique_step(&in);
	TEST_ADD(t, bad_rings_refused_and_counted);
	TEST_ADD(t, sigkill_fd_store_recovery);
	TEST_ADD(t, a_kill_during_a_dump_keeps_the_reserve_pages);
	tcase_set_timeout(t, 600);
	suite_add_tcase(s, t);
	rc = test_run_suite(s);
	itest_input_free(&in);
	return rc;
}
