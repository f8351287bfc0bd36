/* SPDX-License-Identifier: MIT */
/*
 * vmtb-upgrade: how long an upgrade's hand-over keeps the guests' channels
 * unread. G guests x 2 CPUs x R MiB rings stream at a fixed rate until
 * every guest has pushed out a page (the rings full, so that adopting
 * them re-scans full rings), then `vmtracectl upgrade`. The hand-over
 * time is from the moment the old process stopped reading (its "handing
 * over" line: nothing is read once the upgrade request is being served)
 * to the successor's first read of each guest's channels (a line per
 * guest), both CLOCK_MONOTONIC, which execve does not reset; the figure
 * is the last guest's first read. The successor's line says when its
 * manager was made and when it took the sessions, which splits the time:
 * the old process and execve up to the successor's start, start-up, the
 * take-over (rings re-scanned), the loop's first read; then what the
 * successor sets up after the take-over (detectors, host source: the loop
 * waits for them) and when the old address space was let go (its keeper
 * reaped, upgrade.c). Then the producer stops and the daemon must have
 * every byte it wrote: nothing lost.
 * Target: <= 100 ms (issue 17).
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define TARGET_MS 100.0

static struct bench_corpus corpus;
static unsigned nguests = 8, ring_mib = 64;
static double rate_mbs = 50;

/* The stamps the daemon's log gives, ns CLOCK_MONOTONIC. */
struct stamps {
	uint64_t stopped;		/* old process: reading stopped */
	double old_ms;			/* old process: from then to its execve, about */
	uint64_t started;		/* successor: manager made */
	uint64_t take0, take1;		/* successor: sessions taken over, from, to */
	uint64_t first_min, first_max;	/* successor: first read of a guest */
	unsigned firsts;		/* guests that read again */
	double rest_ms;			/* successor: detectors and host source, after (the loop waits) */
	uint64_t let_go;		/* the old address space torn down (its keeper reaped) */
};

struct run {
	double fill_s;
	unsigned tries;			/* upgrade requests (EBUSY is tried again) */
	struct stamps t;
	struct bench_status before, after;
	uint64_t produced;		/* bytes the producer wrote */
};

static uint64_t after_key(const char *s, const char *key)
{
	const char *p = strstr(s, key);

	return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

/* Read the stamps of the log; 0 once all are there. */
static int read_stamps(const char *log, struct stamps *t)
{
	char line[8192];
	FILE *f = fopen(log, "r");

	if (!f)
		return -errno;
	memset(t, 0, sizeof(*t));
	while (fgets(line, sizeof(line), f)) {
		uint64_t v;

		if (strstr(line, "upgrade: handing over")) {
			const char *ago = strstr(line, " ns monotonic, ");

			t->stopped = after_key(line, "reading stopped at ");
			t->old_ms = ago ? strtod(ago + strlen(" ns monotonic, "), NULL) : 0;
		}
		else if (strstr(line, "guest session(s) taken over")) {
			t->started = after_key(line, "process start at ");
			t->take0 = after_key(line, "sessions taken from ");
			if (t->take0)
				t->take1 = after_key(strstr(line, "sessions taken from "), " to ");
		} else if (strstr(line, "detectors and host source set up after the take-over (")) {
			t->rest_ms = strtod(strstr(line, "take-over (") + strlen("take-over ("), NULL);
		} else if (strstr(line, "the old address space is let go")) {
			t->let_go = after_key(line, " reaped at ");
		} else if ((v = after_key(line, "first read after the hand-over at "))) {
			t->first_min = t->firsts ? VMT_MIN(t->first_min, v) : v;
			t->first_max = VMT_MAX(t->first_max, v);
			t->firsts++;
		}
	}
	fclose(f);
	return t->stopped && t->take1 && t->firsts >= nguests && t->rest_ms > 0 && t->let_go ? 0
											     : -EAGAIN;
}

/* `vmtracectl upgrade`, tried again while it is refused (EBUSY: a control
 * message or a flush under way); the number of tries, or -errno. */
static int upgrade(struct bench_daemon *d)
{
	char bin[600];

	snprintf(bin, sizeof(bin), "%s/vmtracectl", bench_build());
	for (int i = 1; i <= 100; i++) {
		pid_t pid = fork();
		int st;

		if (pid < 0)
			return -errno;
		if (pid == 0) {
			int fd = open("/dev/null", O_WRONLY);
			dup2(fd, 1);
			dup2(fd, 2);
			execl(bin, "vmtracectl", "-s", d->sock, "upgrade", (char *)NULL);
			_exit(127);
		}
		if (waitpid(pid, &st, 0) < 0)
			return -errno;
		if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
			return i;
		bench_sleep(0.01);
	}
	return -EBUSY;
}

/* Stream until every guest has pushed out a page. */
static int fill(struct bench_daemon *d, struct run *out)
{
	uint64_t t0 = bench_now_ns();
	struct bench_status st;
	int r;

	for (;;) {
		r = daemon_status(d, &st);
		if (r < 0)
			return r;
		if (st.guests_overwriting >= nguests)
			break;
		if (bench_now_ns() - t0 > 300 * 1000000000ull) {
			fprintf(stderr, "vmtb-upgrade: the rings did not fill in 300 s; log: %s\n", d->log);
			return -ETIMEDOUT;
		}
		bench_sleep(0.1);
	}
	out->fill_s = (double)(bench_now_ns() - t0) / 1e9;
	out->before = st;
	return 0;
}

/* The producer stops; the daemon must end up with every byte it wrote. */
static int settle(struct bench_daemon *d, struct producer *p, struct run *out)
{
	uint64_t t0 = bench_now_ns();
	int r;

	bench_sleep(0.5);	/* streaming on after the hand-over */
	producer_pause(p, true);
	bench_sleep(0.1);
	out->produced = producer_bytes(p);
	do {
		r = daemon_status(d, &out->after);
		if (r == 0 && out->after.bytes_in >= out->produced)
			return 0;
		bench_sleep(0.1);
	} while (bench_now_ns() - t0 < 20 * 1000000000ull);
	return r;
}

static int measure(struct bench_daemon *d, struct producer *p, struct run *out)
{
	uint64_t t0;
	int r = fill(d, out);

	if (r < 0)
		return r;
	r = upgrade(d);
	if (r < 0) {
		fprintf(stderr, "vmtb-upgrade: upgrade refused 100 times; log: %s\n", d->log);
		return r;
	}
	out->tries = (unsigned)r;
	t0 = bench_now_ns();
	while ((r = read_stamps(d->log, &out->t)) == -EAGAIN && bench_now_ns() - t0 < 60000000000ull)
		bench_sleep(0.05);
	if (r < 0) {
		fprintf(stderr, "vmtb-upgrade: no hand-over in the log after 60 s (%u of %u guests "
			"read again); log: %s\n", out->t.firsts, nguests, d->log);
		return r;
	}
	return settle(d, p, out);
}

static int run(struct run *out)
{
	char *dir = bench_mkdtemp("upgrade");
	struct producer_conf pc = { .dir = dir, .nguests = nguests, .corpus = &corpus,
				    .rate = (uint64_t)(rate_mbs * 1e6) };
	struct producer *p;
	struct bench_daemon d;
	char top[600];
	int r;

	memset(out, 0, sizeof(*out));
	if (!dir)
		return -errno;
	r = producer_start(&p, &pc);
	if (r < 0) {
		free(dir);
		return r;
	}
	snprintf(top, sizeof(top), "log_level: notice\nmemory_max: 0\nrecord:\n  ring_size: %uMiB\n"
		 "  flush_timeout: 5s\nguests:\n", ring_mib);
	r = daemon_start_guests(&d, dir, top, p, nguests, 60);
	if (r >= 0)
		r = measure(&d, p, out);
	if (d.pid > 0) {
		r = daemon_stop_run(&d, r);
	}
	producer_stop(p);
	if (r == 0)
		bench_rmtree(dir);
	else
		printf("   run failed (%s); files kept in %s\n", strerror(-r), dir);
	free(dir);
	return r;
}

static double ms(uint64_t a, uint64_t b)
{
	return b > a ? (double)(b - a) / 1e6 : 0;
}

/* The figure, its split, and whether the daemon has every byte; false if not. */
static bool show(const struct run *w)
{
	const struct stamps *t = &w->t;
	const struct bench_status *a = &w->after;
	uint32_t ps = a->page_size ? a->page_size : BENCH_PS;
	bool whole = a->bytes_in == w->produced;
	char name[64], detail[600];

	printf("   full after %.1f s: %llu pages held, %llu overwritten, %llu in frames; upgrade "
	       "asked %u time(s)\n", w->fill_s, (unsigned long long)w->before.pages,
	       (unsigned long long)w->before.pages_overwritten,
	       (unsigned long long)w->before.frame_pages, w->tries);
	printf("   stopped reading -> successor's manager %.2f ms (the old process %.2f ms: "
	       "compressor stopped, rings published; then state, execve, start-up); -> take-over "
	       "%.2f ms; take-over (rings re-scanned) %.2f ms; -> first read %.2f ms (first guest) "
	       ".. %.2f ms (last)\n", ms(t->stopped, t->started), t->old_ms,
	       ms(t->started, t->take0), ms(t->take0, t->take1), ms(t->take1, t->first_min),
	       ms(t->take1, t->first_max));
	printf("   then: detectors and host source set up on the loop %.2f ms (reading waits); the "
	       "old address space torn down beside the successor, its keeper reaped %.2f ms after "
	       "reading stopped\n", t->rest_ms, ms(t->stopped, t->let_go));
	printf("   after: upgrades %llu, sessions taken over %llu, afresh %llu; bytes in %llu vs "
	       "produced %llu (%s); pages in %llu, produced %llu pages\n",
	       (unsigned long long)a->upgrades, (unsigned long long)a->sessions_adopted,
	       (unsigned long long)a->sessions_refused, (unsigned long long)a->bytes_in,
	       (unsigned long long)w->produced, whole ? "nothing lost" : "LOST",
	       (unsigned long long)a->pages_in, (unsigned long long)(w->produced / ps));
	snprintf(name, sizeof(name), "upgrade-%ux%ux%uMiB", nguests, BENCH_CPUS, ring_mib);
	snprintf(detail, sizeof(detail), "stopped reading -> last guest's first read; of it "
		 "take-over %.1f ms, exec+start-up %.1f ms; first guest %.1f ms; %s",
		 ms(t->take0, t->take1), ms(t->stopped, t->take0), ms(t->stopped, t->first_min),
		 whole ? "nothing lost" : "BYTES LOST");
	bench_result(name, ms(t->stopped, t->first_max), "ms", TARGET_MS, false, detail);
	return whole && a->sessions_adopted == nguests && a->upgrades == 1;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "guests", required_argument, NULL, 'g' },
		{ "ring", required_argument, NULL, 'r' },
		{ "rate", required_argument, NULL, 'R' },
		{ 0 }
	};
	struct run w;
	int o;

	if (bench_quick()) {
		nguests = 2;
		ring_mib = 8;
	}
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (o == 'g')
			nguests = (unsigned)VMT_MAX(1, VMT_MIN(BENCH_MAX_GUESTS, atoi(optarg)));
		else if (o == 'r')
			ring_mib = (unsigned)VMT_MAX(1, atoi(optarg));
		else if (o == 'R')
			rate_mbs = VMT_MAX(0.1, atof(optarg));
		else {
			fprintf(stderr, "usage: vmtb-upgrade [--guests N] [--ring MiB] [--rate MB/s]\n");
			return 2;
		}
	}
	if (corpus_open(&corpus) < 0) {
		fprintf(stderr, "vmtb-upgrade: no corpus at %s\n", corpus.dir);
		return 1;
	}
	printf("== upgrade: %u guest(s) x %u CPUs x %u MiB rings (zstd -1), %.0f MB/s per guest "
	       "until every guest overwrites, then vmtracectl upgrade\n", nguests, BENCH_CPUS,
	       ring_mib, rate_mbs);
	printf("   hand-over = old process stops reading -> the successor's first read of the last "
	       "guest (CLOCK_MONOTONIC, from the daemon's log)\n");
	if (run(&w) < 0)
		return 1;
	return show(&w) ? 0 : 1;
}
