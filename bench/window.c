/* SPDX-License-Identifier: MIT */
/*
 * vmtb-window: how far back the rings see for their memory. G guests x 2
 * CPUs, the same ring_size each, the corpus replayed at a fixed rate per
 * guest; for each codec the guests stream until every one of them has
 * pushed out a page (the window is full), then status says how many pages
 * the window holds. Window seconds = pages x page size / rate: the
 * producer loops the same corpus pages, so the guests' event times repeat
 * and FIRST_TS/LAST_TS cannot say it. Baseline: the same with compression
 * off, in the same run. Target: window with compression / without >= 5.
 * Also the frames' ratio, the compressor's CPU seconds per GB it took in,
 * the daemon's CPU seconds per GB ingested, and the pages the compressor
 * was too late for (stored raw: at this rate there should be none).
 * window-tcode's target is issue 27's: >= 6 on guest-6.1, >= 8 on the busy
 * guest's corpus. On another corpus than guest-6.1 the RESULT names end
 * in "@CORPUS", so that one run.sh summary can hold both.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define TARGET 5.0
#define TARGET_TCODE 6.0
#define TARGET_TCODE_BUSY 8.0

static struct bench_corpus corpus;

struct codec {
	const char *name;	/* record.compression */
	unsigned level;		/* record.compression_level */
	const char *tag;	/* RESULT name: window-TAG */
};

static const struct codec codecs[] = {
	{ "off", 1, "off" },
	{ "zstd", 1, "zstd1" },
	{ "zstd", 3, "zstd3" },
	{ "lz4", 1, "lz4" },
	{ "tcode", 1, "tcode" },	/* zstd -1 behind the transcoding */
};

struct run {
	double fill_s;		/* streaming to every guest overwriting */
	double pages;		/* window pages, all guests, mean over the samples */
	uint64_t pages_min, pages_max;
	double rate;		/* bytes/s per guest the producer achieved while measured */
	struct bench_status end;
	uint64_t bytes_in;	/* the daemon's, from STREAM to the end */
	uint64_t cpu_ns;	/* the daemon's, the same span */
	double secs;		/* the same span */
};

static unsigned nguests = 2, ring_mib = 16;
static double rate_mbs = 50, measure_s = 5;

static int run_codec(const struct codec *k, struct run *out)
{
	char *dir = bench_mkdtemp("window");
	struct producer_conf pc = { .dir = dir, .nguests = nguests, .corpus = &corpus,
				    .rate = (uint64_t)(rate_mbs * 1e6) };
	struct producer *p;
	struct bench_daemon d;
	struct bench_status st;
	char line[1200];
	uint64_t t0, t1, u0, k0, u1, k1, b0, b1, tm0, tm1, n = 0;
	double sum = 0;
	int r;

	memset(out, 0, sizeof(*out));
	if (!dir)
		return -errno;
	r = producer_start(&p, &pc);
	if (r < 0) {
		free(dir);
		return r;
	}
	snprintf(line, sizeof(line),
		 "log_level: notice\nmemory_max: 0\nrecord:\n  ring_size: %uMiB\n  flush_timeout: 5s\n"
		 "  compression: %s\n  compression_level: %u\nguests:\n", ring_mib, k->name, k->level);
	r = daemon_start_guests(&d, dir, line, p, nguests, 60);
	if (r < 0) {
		if (d.pid > 0)
			goto stop;
		goto out;
	}
	t0 = bench_now_ns();
	proc_cpu(d.pid, &u0, &k0);
	/* full: every guest has pushed out a page (a frame, or a raw page) */
	for (;;) {
		r = daemon_status(&d, &st);
		if (r < 0)
			goto stop;
		if (st.guests_overwriting >= nguests)
			break;
		if (bench_now_ns() - t0 > 300 * 1000000000ull) {
			fprintf(stderr, "vmtb-window: %s: the window did not fill in 300 s; log: %s\n",
				k->tag, d.log);
			r = -ETIMEDOUT;
			goto stop;
		}
		bench_sleep(0.05);
	}
	out->fill_s = (double)(bench_now_ns() - t0) / 1e9;
	/* a guest's two CPUs fill at about the same time: half as long
	 * again lets the later ring fill too */
	bench_sleep(VMT_MAX(1.0, out->fill_s / 2));
	tm0 = bench_now_ns();
	b0 = producer_bytes(p);
	out->pages_min = UINT64_MAX;
	while (r == 0 && bench_now_ns() - tm0 < (uint64_t)(measure_s * 1e9)) {
		bench_sleep(0.25);
		r = daemon_status(&d, &st);
		if (r < 0)
			break;
		sum += (double)st.pages;
		n++;
		out->pages_min = VMT_MIN(out->pages_min, st.pages);
		out->pages_max = VMT_MAX(out->pages_max, st.pages);
	}
	tm1 = bench_now_ns();
	b1 = producer_bytes(p);
	t1 = tm1;
	proc_cpu(d.pid, &u1, &k1);
	if (r == 0 && n) {
		out->pages = sum / (double)n;
		out->rate = (double)(b1 - b0) / ((double)(tm1 - tm0) / 1e9) / nguests;
		out->end = st;
		out->bytes_in = st.bytes_in;
		out->cpu_ns = u1 + k1 - u0 - k0;
		out->secs = (double)(t1 - t0) / 1e9;
	}
stop:
	r = daemon_stop_run(&d, r);
out:
	producer_stop(p);
	if (r == 0)
		bench_rmtree(dir);
	else
		printf("   %s: run failed (%s); files kept in %s\n", k->tag, strerror(-r), dir);
	free(dir);
	return r;
}

/* Window seconds: the pages at the nominal rate (both guests' pages over
 * both guests' bytes per second). */
static double window_s(const struct run *w)
{
	return w->pages * (w->end.page_size ? w->end.page_size : BENCH_PS) /
	       (rate_mbs * 1e6 * nguests);
}

static double frame_ratio(const struct bench_status *s)
{
	return s->frame_bytes ? (double)s->frame_pages * s->page_size / (double)s->frame_bytes : 0;
}

static double compress_cpu_per_gb(const struct bench_status *s)
{
	return s->compress_bytes_in ? (double)s->compress_cpu_ns / (double)s->compress_bytes_in : 0;
}

static double daemon_cpu_per_gb(const struct run *w)
{
	return w->bytes_in ? (double)w->cpu_ns / (double)w->bytes_in : 0;
}

static void show(const struct codec *k, const struct run *w)
{
	const struct bench_status *s = &w->end;

	printf("   %-4s -%u  window %8.0f pages (%llu..%llu) = %6.1f MiB of pages = %6.2f s "
	       "(full after %.1f s); producer %.1f MB/s per guest\n", k->name, k->level, w->pages,
	       (unsigned long long)w->pages_min, (unsigned long long)w->pages_max,
	       w->pages * s->page_size / (1 << 20), window_s(w), w->fill_s, w->rate / 1e6);
	printf("            daemon %.3f CPU-s/GB ingested (%.1f%% of a CPU)", daemon_cpu_per_gb(w),
	       100.0 * (double)w->cpu_ns / 1e9 / w->secs);
	if (strcmp(k->name, "off"))
		printf("; frames %llu pages in %.1f MiB = %.2f:1 (all made: %.2f:1); "
		       "compressor %.3f CPU-s/GB (%.1f%% of a CPU), %llu frames made, %llu pages stored "
		       "raw, %llu batches found no job", (unsigned long long)s->frame_pages,
		       (double)s->frame_bytes / (1 << 20), frame_ratio(s),
		       s->compress_bytes_out ? (double)s->compress_bytes_in / (double)s->compress_bytes_out : 0,
		       compress_cpu_per_gb(s), 100.0 * (double)s->compress_cpu_ns / 1e9 / w->secs,
		       (unsigned long long)s->frames_made, (unsigned long long)s->pages_stored_raw,
		       (unsigned long long)s->compress_busy);
	if (!strcmp(k->name, "tcode"))
		printf("; %llu batches made zstd frames (tcode fallback)",
		       (unsigned long long)s->compress_tcode_fallback);
	printf("\n");
}

static int usage(void)
{
	fprintf(stderr, "usage: vmtb-window [--guests N] [--ring MiB] [--rate MB/s] [--seconds S] "
		"[--corpus NAME]\n");
	return 2;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "guests", required_argument, NULL, 'g' },
		{ "ring", required_argument, NULL, 'r' },
		{ "rate", required_argument, NULL, 'R' },
		{ "seconds", required_argument, NULL, 's' },
		{ "corpus", required_argument, NULL, 'c' },
		{ 0 }
	};
	struct run runs[ARRAY_SIZE(codecs)];
	const struct run *off = &runs[0];
	const char *sfx;
	int o, fails = 0;

	if (bench_quick()) {
		nguests = 1;
		ring_mib = 8;
		measure_s = 2;
	}
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 'g':
			nguests = (unsigned)VMT_MAX(1, VMT_MIN(BENCH_MAX_GUESTS, atoi(optarg)));
			break;
		case 'r':
			ring_mib = (unsigned)VMT_MAX(1, atoi(optarg));
			break;
		case 'R':
			rate_mbs = VMT_MAX(0.1, atof(optarg));
			break;
		case 's':
			measure_s = VMT_MAX(0.5, atof(optarg));
			break;
		case 'c':
			setenv("VMT_BENCH_CORPUS", optarg, 1);	/* corpus_open() reads it */
			break;
		default:
			return usage();
		}
	}
	if (corpus_open(&corpus) < 0) {
		fprintf(stderr, "vmtb-window: no corpus at %s\n", corpus.dir);
		return 1;
	}
	sfx = strcmp(corpus.name, "guest-6.1") ? corpus.name : NULL;
	printf("== window: %u guest(s) x %u CPUs x %u MiB rings, corpus %s (%zu + %zu pages) replayed "
	       "at %.0f MB/s per guest (%.1f per CPU)\n", nguests, BENCH_CPUS, ring_mib, corpus.name,
	       corpus.npages[0], corpus.npages[1], rate_mbs, rate_mbs / BENCH_CPUS);
	printf("   each codec: stream until every guest overwrites, then status every 0.25 s for "
	       "%.0f s; window s = pages x page size / rate\n", measure_s);
	printf("   baseline: compression off, the same rings, in this run\n");
	for (unsigned i = 0; i < ARRAY_SIZE(codecs); i++) {
		if (run_codec(&codecs[i], &runs[i]) < 0) {
			if (i == 0)
				return 1;	/* no baseline, no ratio */
			fails++;
			continue;
		}
		show(&codecs[i], &runs[i]);
	}
	for (unsigned i = 1; i < ARRAY_SIZE(codecs); i++) {
		const struct run *w = &runs[i];
		char name[200], detail[400];

		if (!w->pages)
			continue;
		snprintf(name, sizeof(name), "window-%s%s%s", codecs[i].tag, sfx ? "@" : "", sfx ? sfx : "");
		snprintf(detail, sizeof(detail),
			 "window %.2f s vs off %.2f s at %.0f MB/s; frames %.2f:1; compress %.2f CPU-s/GB; "
			 "daemon %.2f CPU-s/GB (off %.2f); %llu pages stored raw",
			 window_s(w), window_s(off), rate_mbs, frame_ratio(&w->end),
			 compress_cpu_per_gb(&w->end), daemon_cpu_per_gb(w), daemon_cpu_per_gb(off),
			 (unsigned long long)w->end.pages_stored_raw);
		bench_result(name, w->pages / off->pages, "ratio",
			     strcmp(codecs[i].name, "tcode") ? TARGET : sfx ? TARGET_TCODE_BUSY : TARGET_TCODE,
			     true, detail);
		if (w->end.pages_stored_raw)
			printf("   %s: the compressor was behind: %llu pages went into the frame store "
			       "raw at %.0f MB/s\n", codecs[i].tag,
			       (unsigned long long)w->end.pages_stored_raw, rate_mbs);
	}
	return fails ? 1 : 0;
}
