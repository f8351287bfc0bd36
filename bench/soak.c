/* SPDX-License-Identifier: MIT */
/*
 * vmtb-soak (`make soak`): 64 stand-in guests x 2 CPUs flood real pages
 * into vmtraced for SOAK_SECONDS (default 600), a dump of one guest is
 * asked every second (round robin, `vmtracectl dump gN`), and two control
 * clients poll `vmtracectl status` five times a second. Every 30 s (5 s
 * with BENCH_QUICK) a line: RSS, open fds, dumps asked/written, pages in;
 * dump errors at the end. At the end: RSS flat (the last line within 16 MiB of
 * the line after warm-up), fds flat (within 8), every dump asked written
 * (operator dumps are never rate-limited), no dump error, and every sample
 * left on disk (retention keeps 3 per guest) reads back whole with each
 * page walking. Exit 1 on a miss, so `make soak` fails.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "bench.h"
#include "page.h"
#include "sample.h"

#define NGUESTS BENCH_MAX_GUESTS

/* The sum of a metric's lines (one per guest) in `vmtracectl metrics`. */
static uint64_t metric_sum(const char *out, const char *name)
{
	uint64_t sum = 0;
	size_t n = strlen(name);

	for (const char *p = out; (p = strstr(p, name)); p += n)
		if ((p == out || p[-1] == '\n') && (p[n] == ' ' || p[n] == '{')) {
			const char *v = strchr(p, ' ');
			if (v)
				sum += strtoull(v + 1, NULL, 10);
		}
	return sum;
}

static struct bench_corpus corpus;

struct pollers {
	const char *sock;
	int stop;
	uint64_t polls, failures;
};

static int run(const char *cmd, char *out, size_t n)
{
	FILE *f = popen(cmd, "r");
	size_t len = 0;
	int st;

	if (!f)
		return -errno;
	if (out) {
		len = fread(out, 1, n - 1, f);
		out[len] = 0;
	} else {
		char sink[4096];
		while (fread(sink, 1, sizeof(sink), f) > 0)
			;
	}
	st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void *poll_status(void *arg)
{
	struct pollers *p = arg;
	char cmd[700];

	snprintf(cmd, sizeof(cmd), "%s/vmtracectl -s %s status 2>&1", bench_build(), p->sock);
	while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
		if (run(cmd, NULL, 0) != 0)
			__atomic_add_fetch(&p->failures, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&p->polls, 1, __ATOMIC_RELAXED);
		bench_sleep(0.2);
	}
	return NULL;
}

static unsigned count_fds(pid_t pid)
{
	char path[64];
	unsigned n = 0;
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return 0;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	return n;
}

/* Every sample in the state folder: read whole, every page walks. */
static int check_samples(const char *state, unsigned *nsamples, uint64_t *npages)
{
	struct dirent *g;
	DIR *top = opendir(state);
	int bad = 0;

	if (!top)
		return -errno;
	while ((g = readdir(top))) {
		char gdir[1200];
		struct dirent *f;
		DIR *d;

		if (g->d_name[0] == '.')
			continue;
		snprintf(gdir, sizeof(gdir), "%s/%s", state, g->d_name);
		d = opendir(gdir);
		if (!d)
			continue;
		while ((f = readdir(d))) {
			size_t l = strlen(f->d_name);
			char path[2600], why[256];
			struct vmt_sample *s;
			struct vmt_page_layout lay;

			if (f->d_name[0] == '.' || l < 6 || strcmp(f->d_name + l - 5, ".vmts"))
				continue;
			snprintf(path, sizeof(path), "%s/%s", gdir, f->d_name);
			if (sample_read(path, &s, why, sizeof(why)) < 0) {
				fprintf(stderr, "soak: %s: %s\n", path, why);
				bad++;
				continue;
			}
			(*nsamples)++;
			page_layout_default(&lay, s->page_size);
			for (uint32_t c = 0; c < s->ncpus; c++)
				for (uint32_t p = 0; p < s->cpus[c].npages; p++) {
					struct vmt_page_info info;
					if (page_scan(&lay, s->cpus[c].pages + (size_t)p * s->page_size, &info) < 0) {
						fprintf(stderr, "soak: %s cpu%u page %u does not walk\n", path, c, p);
						bad++;
					}
					(*npages)++;
				}
			sample_free(s);
		}
		closedir(d);
	}
	closedir(top);
	return bad;
}

int main(void)
{
	bool quick = bench_quick();
	const char *e = getenv("SOAK_SECONDS");
	unsigned secs = e ? (unsigned)atoi(e) : quick ? 60 : 600, every = quick ? 5 : 30;
	char *dir = bench_mkdtemp("soak");
	struct producer_conf pc = { .dir = dir, .nguests = NGUESTS, .corpus = &corpus };
	struct producer *p;
	struct bench_daemon d;
	struct bench_status st = { 0 };
	struct pollers pol = { 0 };
	struct vmt_buf body = { 0 };
	pthread_t th[2];
	char line[1200], cmd[900], out[8192];
	uint64_t t0, asked = 0, written = 0, rss0 = 0, rss_last = 0, npages = 0, silences, late;
	unsigned fds0 = 0, fds_last = 0, nsamples = 0;
	int r, bad, fail = 0;

	if (!dir || corpus_open(&corpus) < 0) {
		fprintf(stderr, "vmtb-soak: no scratch folder or no corpus\n");
		return 1;
	}
	printf("== soak: %u guests x %u CPUs flooding, a dump a second, 2 status pollers, %u s\n",
	       NGUESTS, BENCH_CPUS, secs);
	if (producer_start(&p, &pc) < 0)
		return 1;
	{
		static const char top[] = "log_level: notice\nmemory_max: 0\ncompression_level: 1\n"
					  "retention:\n  max_samples: 3\n"
					  "record:\n  ring_size: 1MiB\n  flush_timeout: 5s\nguests:\n";
		buf_append(&body, top, sizeof(top) - 1);
	}
	for (unsigned g = 0; g < NGUESTS; g++) {
		snprintf(line, sizeof(line), "  - name: g%u\n    path: %s\n    transport: fifo\n    cpus: %u\n",
			 g, producer_guest_dir(p, g), BENCH_CPUS);
		buf_append(&body, line, strlen(line));
	}
	buf_append(&body, "", 1);
	r = daemon_start(&d, dir, (const char *)body.data);
	buf_free(&body);
	if (r < 0 || daemon_wait_streaming(&d, NGUESTS, 120) < 0) {
		fprintf(stderr, "vmtb-soak: the guests did not all stream; log: %s\n", d.log);
		return 1;
	}
	pol.sock = d.sock;
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, poll_status, &pol);
	printf("   %6s %9s %5s %7s %7s %12s\n", "t (s)", "RSS (MiB)", "fds", "asked", "written",
	       "pages in");
	t0 = bench_now_ns();
	for (unsigned s = 1; s <= secs; s++) {
		snprintf(cmd, sizeof(cmd), "%s/vmtracectl -s %s dump g%u --reason soak 2>&1", bench_build(),
			 d.sock, (unsigned)(asked % NGUESTS));
		asked++;
		if (run(cmd, out, sizeof(out)) == 0 && strstr(out, ".vmts"))
			written++;
		else
			fprintf(stderr, "soak: dump %llu: %s", (unsigned long long)asked, out);
		if (s % every == 0 || s == secs) {
			uint64_t rss = proc_status_kib(d.pid, "VmRSS:");
			unsigned fds = count_fds(d.pid);
			daemon_status(&d, &st);
			printf("   %6u %9.1f %5u %7llu %7llu %12llu\n", s, rss / 1024.0, fds,
			       (unsigned long long)asked, (unsigned long long)written,
			       (unsigned long long)st.bytes_in / BENCH_PS);
			fflush(stdout);
			/* after a minute (or the first line, if shorter) is the baseline */
			if (!rss0 && (s >= 60 || s >= secs / 2)) {
				rss0 = rss;
				fds0 = fds;
			}
			rss_last = rss;
			fds_last = fds;
		}
		/* one a second, whatever the dump took */
		{
			double next = (double)s - (double)(bench_now_ns() - t0) / 1e9;
			if (next > 0)
				bench_sleep(next);
		}
	}
	__atomic_store_n(&pol.stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	snprintf(cmd, sizeof(cmd), "%s/vmtracectl -s %s --json status 2>&1", bench_build(), d.sock);
	run(cmd, out, sizeof(out));
	{
		char *de = strstr(out, "\"dump_errors\": ");
		unsigned long long errs = de ? strtoull(de + 15, NULL, 10) : 0;
		printf("   dump errors: %llu; status polls: %llu (%llu failed)\n", errs,
		       (unsigned long long)pol.polls, (unsigned long long)pol.failures);
		fail |= errs != 0 || pol.failures != 0;
	}
	/* the producer answers SYNC and says BYE: guest_silence watches every
	 * guest, and a loaded machine must give late answers, not silences */
	snprintf(cmd, sizeof(cmd), "%s/vmtracectl -s %s metrics 2>&1", bench_build(), d.sock);
	run(cmd, out, sizeof(out));
	silences = metric_sum(out, "vmtraced_guest_silences_total");
	late = metric_sum(out, "vmtraced_guest_late_answers_total");
	daemon_stop(&d);
	producer_stop(p);
	bad = check_samples(d.state, &nsamples, &npages);
	printf("   samples on disk: %u (%llu pages), %d unreadable or with a page that does not walk\n",
	       nsamples, (unsigned long long)npages, bad);
	snprintf(line, sizeof(line), "RSS %.1f MiB after warm-up, %.1f MiB at the end", rss0 / 1024.0,
		 rss_last / 1024.0);
	bench_result("soak-rss-growth", (double)((int64_t)rss_last - (int64_t)rss0) / 1024.0, "MiB", 16,
		     false, line);
	snprintf(line, sizeof(line), "%u fds after warm-up, %u at the end", fds0, fds_last);
	bench_result("soak-fd-growth", (double)fds_last - fds0, "fds", 8, false, line);
	snprintf(line, sizeof(line), "%llu dumps asked, %llu written", (unsigned long long)asked,
		 (unsigned long long)written);
	bench_result("soak-dumps-missed", (double)(asked - written), "dumps", 0, false, line);
	snprintf(line, sizeof(line), "%llu silences, %llu late answers (counted, not dumped)",
		 (unsigned long long)silences, (unsigned long long)late);
	bench_result("soak-silences", (double)silences, "silences", 0, false, line);
	fail |= rss_last > rss0 + 16 * 1024 || fds_last > fds0 + 8 || written != asked || bad ||
		silences;
	bench_rmtree(dir);
	free(dir);
	return fail;
}
