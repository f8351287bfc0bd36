/* SPDX-License-Identifier: MIT */
/*
 * vmtb-trigger: SIGUSR1 to window frozen. The time is the sample's
 * created_ns (CLOCK_REALTIME taken at the freeze) minus CLOCK_REALTIME
 * just before kill(); it includes the FLUSH round trip to the guest, which
 * the producer answers at once. One guest x 2 CPUs, 1 MiB rings, triggers
 * not coalesced, no cooldown, no rate limit; each signal is sent once the
 * previous sample is on disk (a signal during a dump would join it, by
 * design). Two cases: the guest quiet, and the guest streaming flat out.
 *
 * Baseline: a bare signal round trip: a child waiting in epoll on a
 * signalfd, as vmtraced's sd-event loop does, stamps CLOCK_REALTIME when
 * it reads the signal and writes the stamp back through a pipe.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "sample.h"

#define TARGET_P99_MS 10.0

static struct bench_corpus corpus;

struct lat {
	uint64_t *v;		/* ns, sorted by lat_stats */
	unsigned n;
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static double pct_ms(struct lat *l, double pct)
{
	size_t i;

	if (!l->n)
		return 0;
	qsort(l->v, l->n, sizeof(*l->v), cmp_u64);
	i = (size_t)(pct / 100.0 * l->n);
	if (i >= l->n)
		i = l->n - 1;
	return l->v[i] / 1e6;
}

/* ---- baseline ------------------------------------------------------------------ */

static void echo_child(int wfd)
{
	struct epoll_event ev = { .events = EPOLLIN };
	sigset_t ss;
	int ep, sfd;

	sigemptyset(&ss);
	sigaddset(&ss, SIGUSR1);
	sigprocmask(SIG_BLOCK, &ss, NULL);
	sfd = signalfd(-1, &ss, SFD_CLOEXEC | SFD_NONBLOCK);
	ep = epoll_create1(EPOLL_CLOEXEC);
	epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev);
	if (write(wfd, "r", 1) != 1)
		_exit(1);
	for (;;) {
		struct signalfd_siginfo si;
		uint64_t t;

		if (epoll_wait(ep, &ev, 1, -1) <= 0)
			continue;
		if (read(sfd, &si, sizeof(si)) != sizeof(si))
			continue;
		t = now_realtime_ns();
		if (write(wfd, &t, sizeof(t)) != sizeof(t))
			_exit(1);
	}
}

static int run_baseline(unsigned n, struct lat *l)
{
	int pfd[2];
	pid_t pid;
	char c;

	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		close(pfd[0]);
		echo_child(pfd[1]);
	}
	close(pfd[1]);
	if (read(pfd[0], &c, 1) != 1)
		return -EIO;
	for (unsigned i = 0; i < n; i++) {
		uint64_t t0, t;

		bench_sleep(0.001);	/* let the child go idle, as vmtraced is between triggers */
		t0 = now_realtime_ns();
		kill(pid, SIGUSR1);
		if (read(pfd[0], &t, sizeof(t)) != sizeof(t))
			break;
		l->v[l->n++] = t - t0;
	}
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(pfd[0]);
	return l->n == n ? 0 : -EIO;
}

/* ---- vmtraced ------------------------------------------------------------------ */

/* Wait for the next NAME.vmts renamed into the watched folder. */
static int wait_sample(int ifd, const char *gdir, char *path, size_t n, int timeout_ms)
{
	char buf[4096] __attribute__((aligned(8)));
	uint64_t until = bench_now_ns() + (uint64_t)timeout_ms * 1000000;

	for (;;) {
		struct pollfd pf = { .fd = ifd, .events = POLLIN };
		int left = (int)(((int64_t)until - (int64_t)bench_now_ns()) / 1000000);
		ssize_t len;

		if (left <= 0 || poll(&pf, 1, left) <= 0)
			return -ETIMEDOUT;
		len = read(ifd, buf, sizeof(buf));
		for (char *p = buf; len > 0 && p < buf + len;) {
			struct inotify_event *e = (struct inotify_event *)p;
			size_t l = e->len ? strlen(e->name) : 0;

			if (l > 5 && !strcmp(e->name + l - 5, ".vmts")) {
				snprintf(path, n, "%s/%s", gdir, e->name);
				return 0;
			}
			p += sizeof(*e) + e->len;
		}
	}
}

struct trig_run {
	struct lat frozen;	/* signal sent -> created_ns */
	struct lat handled;	/* signal sent -> trigger time_ns (the loop read the signal) */
	struct lat after;	/* trigger time_ns -> created_ns: flush round trip and queueing */
	unsigned coalesced;	/* samples that served more than one trigger */
};

static double gap_ms;	/* BENCH_TRIGGER_GAP_MS: a pause after each sample (diagnosis) */

static int run_daemon(unsigned n, bool streaming, struct trig_run *out)
{
	char *dir = bench_mkdtemp("trigger");
	struct producer_conf pc = { .dir = dir, .nguests = 1, .corpus = &corpus };
	struct producer *p;
	struct bench_daemon d;
	char body[1500], gdir[1000], path[1400];
	int r, ifd = -1;

	if (!dir)
		return -errno;
	r = producer_start(&p, &pc);
	if (r < 0)
		return r;
	snprintf(body, sizeof(body),
		 "log_level: warning\ncompression_level: 1\n"
		 "triggers:\n  coalesce: 0ms\n  cooldown: 0s\n  max_per_minute: 0\n  per_guest_per_minute: 0\n"
		 "record:\n  ring_size: 1MiB\n  flush_timeout: 5s\n"
		 "guests:\n  - name: g0\n    path: %s\n    transport: fifo\n    cpus: %u\n",
		 producer_guest_dir(p, 0), BENCH_CPUS);
	r = daemon_start(&d, dir, body);
	if (r < 0)
		goto out;
	r = daemon_wait_streaming(&d, 1, 60);
	snprintf(gdir, sizeof(gdir), "%s/g0", d.state);
	/* the daemon makes the folder with the first sample (and its aux
	 * file): made here, so that it can be watched before */
	if (r == 0 && ((mkdir(d.state, 0750) < 0 && errno != EEXIST) ||
		       (mkdir(gdir, 0750) < 0 && errno != EEXIST)))
		r = -errno;
	ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
	if (r == 0 && (ifd < 0 || inotify_add_watch(ifd, gdir, IN_MOVED_TO) < 0))
		r = -errno;
	if (r < 0)
		goto stop;
	/* a first dump, not measured: it writes the aux file too */
	kill(d.pid, SIGUSR1);
	r = wait_sample(ifd, gdir, path, sizeof(path), 10000);
	if (r < 0) {
		fprintf(stderr, "vmtb-trigger: first dump: no sample within 10 s; log: %s\n", d.log);
		goto stop;
	}
	unlink(path);
	if (!streaming)
		producer_pause(p, true);
	bench_sleep(0.5);
	for (unsigned i = 0; i < n; i++) {
		struct vmt_sample s;
		char why[256];
		uint64_t t0;

		t0 = now_realtime_ns();
		kill(d.pid, SIGUSR1);
		r = wait_sample(ifd, gdir, path, sizeof(path), 10000);
		if (r == 0)
			r = sample_read_info(path, &s, why, sizeof(why));
		if (r < 0) {
			fprintf(stderr, "vmtb-trigger: trigger %u: %s; log: %s\n", i,
				r == -ETIMEDOUT ? "no sample within 10 s" : why, d.log);
			goto stop;
		}
		unlink(path);
		out->frozen.v[out->frozen.n++] = s.created_ns - t0;
		if (gap_ms)
			bench_sleep(gap_ms / 1000.0);
		if (s.ntriggers) {
			out->handled.v[out->handled.n++] = s.triggers[0].time_ns - t0;
			out->after.v[out->after.n++] = s.created_ns - s.triggers[0].time_ns;
		}
		out->coalesced += s.ntriggers > 1;
	}
stop:
	r = daemon_stop_run(&d, r);
out:
	if (ifd >= 0)
		close(ifd);
	producer_stop(p);
	if (r == 0)
		bench_rmtree(dir);
	free(dir);
	return r;
}

static struct lat lat_new(unsigned n)
{
	return (struct lat){ .v = calloc(n, sizeof(uint64_t)) };
}

int main(void)
{
	bool quick = bench_quick();
	unsigned n = quick ? 150 : 1000;
	struct lat base = lat_new(n);
	struct trig_run quiet = { lat_new(n), lat_new(n), lat_new(n), 0 },
			busy = { lat_new(n), lat_new(n), lat_new(n), 0 };
	char detail[400];

	if (corpus_open(&corpus) < 0) {
		fprintf(stderr, "vmtb-trigger: no corpus\n");
		return 1;
	}
	if (getenv("BENCH_TRIGGER_GAP_MS"))
		gap_ms = atof(getenv("BENCH_TRIGGER_GAP_MS"));
	printf("== trigger: SIGUSR1 -> window frozen (sample created_ns), %u triggers per case, "
	       "1 guest x %u CPUs, 1 MiB rings\n", n, BENCH_CPUS);
	printf("   baseline: bare signal round trip to a process idle in epoll on a signalfd, "
	       "answering through a pipe\n");
	if (run_baseline(n, &base) < 0 || run_daemon(n, false, &quiet) < 0 ||
	    run_daemon(n, true, &busy) < 0) {
		printf("   run failed\n");
		return 1;
	}
	if (gap_ms)
		printf("   (a pause of %.0f ms after each sample: BENCH_TRIGGER_GAP_MS)\n", gap_ms);
	printf("   baseline (signal round trip):     p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms\n",
	       pct_ms(&base, 50), pct_ms(&base, 99), pct_ms(&base, 100));
	printf("   vmtraced, guest quiet:  frozen    p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms\n",
	       pct_ms(&quiet.frozen, 50), pct_ms(&quiet.frozen, 99), pct_ms(&quiet.frozen, 100));
	printf("     of which: signal read   p50 %7.3f ms  p99 %7.3f ms; read -> frozen p50 %.3f ms  p99 %.3f ms\n",
	       pct_ms(&quiet.handled, 50), pct_ms(&quiet.handled, 99), pct_ms(&quiet.after, 50),
	       pct_ms(&quiet.after, 99));
	printf("   vmtraced, guest flat out: frozen  p50 %7.3f ms  p99 %7.3f ms  max %7.3f ms\n",
	       pct_ms(&busy.frozen, 50), pct_ms(&busy.frozen, 99), pct_ms(&busy.frozen, 100));
	printf("     of which: signal read   p50 %7.3f ms  p99 %7.3f ms; read -> frozen p50 %.3f ms  p99 %.3f ms\n",
	       pct_ms(&busy.handled, 50), pct_ms(&busy.handled, 99), pct_ms(&busy.after, 50),
	       pct_ms(&busy.after, 99));
	if (quiet.coalesced + busy.coalesced)
		printf("   %u samples served more than one trigger\n", quiet.coalesced + busy.coalesced);
	snprintf(detail, sizeof(detail), "p50 %.3f ms = %.1f x baseline p50 %.3f ms; target is mine, see README",
		 pct_ms(&quiet.frozen, 50), pct_ms(&quiet.frozen, 50) / pct_ms(&base, 50),
		 pct_ms(&base, 50));
	bench_result("trigger-p99-quiet", pct_ms(&quiet.frozen, 99), "ms", TARGET_P99_MS, false, detail);
	snprintf(detail, sizeof(detail), "p50 %.3f ms = %.1f x baseline p50 %.3f ms",
		 pct_ms(&busy.frozen, 50), pct_ms(&busy.frozen, 50) / pct_ms(&base, 50),
		 pct_ms(&base, 50));
	bench_result("trigger-p99-streaming", pct_ms(&busy.frozen, 99), "ms", TARGET_P99_MS, false,
		     detail);
	return 0;
}
