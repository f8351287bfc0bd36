/* SPDX-License-Identifier: MIT */
/*
 * vmtb-ingest: sustained ingest of N guests x 2 CPUs (N = 1, 8, 32) whose
 * producers write real pages as fast as they are taken. vmtraced against
 * vmtb-drain, the least a reader can do with the same FIFOs, measured in
 * the same run with the same producer. The figure is the rate the
 * producers got their bytes written at (and vmtraced's own bytes_in);
 * target: vmtraced >= 0.9 x the drain. Also vmtraced's CPU seconds per GB.
 * vmtraced runs three times: with its rings compressed by zstd -1
 * (ingest-NxK), by tcode (ingest-NxK-tcode, whose figure is against raw
 * rings in the same run: issue 27's target, >= 0.9) and raw
 * (record.compression: off, ingest-NxK-off).
 * vmtb-ingest [--corpus NAME] [--vmtraced-only] [N...]
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define TARGET 0.9

static struct bench_corpus corpus;
static double warmup_s = 2, measure_s = 10;

/* Sums over the runs of one kind: rates are taken from the totals. */
struct rate {
	uint64_t ns;		/* measured time */
	uint64_t bytes;		/* written by the producers */
	uint64_t in;		/* the reader's own count (vmtraced's bytes_in) */
	uint64_t cpu_ns;	/* the reader's CPU time */
	uint64_t sys_ns;	/* of which in the kernel */
	uint64_t prod_ns;	/* the producer thread's CPU time */
	uint64_t rejected;
	uint64_t stored_raw;	/* pages the compressor was too late for */
	uint64_t comp_ns, comp_in;	/* the compressor's CPU time, bytes it compressed */
	uint64_t pauses, reserve_peak;	/* reading paused for held pages; most of the reserve borrowed */
};

static double gbps(const struct rate *r)
{
	return r->ns ? (double)r->bytes / (double)r->ns : 0;
}

static double cpu_per_gb(const struct rate *r)
{
	return r->bytes ? (double)r->cpu_ns / (double)r->bytes : 0;
}

static double prod_busy(const struct rate *r)
{
	return r->ns ? (double)r->prod_ns / (double)r->ns : 0;
}

static int run_drain(unsigned n, size_t bufsize, struct rate *out)
{
	char *dir = bench_mkdtemp("drain");
	struct producer_conf pc = { .dir = dir, .nguests = n, .corpus = &corpus, .no_handshake = true };
	struct producer *p;
	char bin[600], bs[32], ng[16], outf[600];
	uint64_t b0, b1, u0, u1, k0, k1, t0, t1, pc0, pc1;
	unsigned long long drained = 0;
	pid_t pid;
	int r, st;
	FILE *f;

	if (!dir)
		return -errno;
	r = producer_start(&p, &pc);
	if (r < 0)
		return r;
	snprintf(bin, sizeof(bin), "%s/bench/vmtb-drain", bench_build());
	snprintf(bs, sizeof(bs), "%zu", bufsize);
	snprintf(ng, sizeof(ng), "%u", n);
	snprintf(outf, sizeof(outf), "%s/drain.out", dir);
	pid = fork();
	if (pid == 0) {
		int fd = open(outf, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 1);
		execl(bin, "vmtb-drain", bs, dir, ng, (char *)NULL);
		_exit(127);
	}
	bench_sleep(warmup_s);
	t0 = bench_now_ns();
	b0 = producer_bytes(p);
	proc_cpu(pid, &u0, &k0);
	pc0 = producer_cpu_ns(p);
	bench_sleep(measure_s);
	t1 = bench_now_ns();
	b1 = producer_bytes(p);
	proc_cpu(pid, &u1, &k1);
	pc1 = producer_cpu_ns(p);
	kill(pid, SIGTERM);
	waitpid(pid, &st, 0);
	producer_stop(p);
	f = fopen(outf, "r");
	if (f) {
		if (fscanf(f, "%llu", &drained) != 1)
			drained = 0;
		fclose(f);
	}
	bench_rmtree(dir);
	free(dir);
	if (!WIFEXITED(st) || WEXITSTATUS(st) || !drained)
		return -EIO;
	out->ns += t1 - t0;
	out->bytes += b1 - b0;
	out->in += b1 - b0;	/* the drain counts only in total */
	out->cpu_ns += u1 + k1 - u0 - k0;
	out->sys_ns += k1 - k0;
	out->prod_ns += pc1 - pc0;
	return 0;
}

/* compression: record.compression ("zstd" or "tcode" at level 1, or "off") */
static int run_daemon(unsigned n, const char *compression, struct rate *out)
{
	char *dir = bench_mkdtemp("ingest");
	struct producer_conf pc = { .dir = dir, .nguests = n, .corpus = &corpus };
	struct producer *p;
	struct bench_daemon d;
	struct bench_status s0, s1;
	uint64_t b0, b1, u0, u1, k0, k1, t0, t1, pc0, pc1;
	char line[1200];
	int r;

	if (!dir)
		return -errno;
	r = producer_start(&p, &pc);
	if (r < 0)
		return r;
	snprintf(line, sizeof(line),
		 "log_level: notice\nmemory_max: 0\ncompression_level: 1\nrecord:\n  ring_size: 4MiB\n"
		 "  flush_timeout: 5s\n  compression: %s\n  compression_level: 1\nguests:\n", compression);
	r = daemon_start_guests(&d, dir, line, p, n, 60);
	if (r < 0) {
		if (d.pid > 0)
			goto stop;
		goto out;
	}
	bench_sleep(warmup_s);
	t0 = bench_now_ns();
	b0 = producer_bytes(p);
	proc_cpu(d.pid, &u0, &k0);
	pc0 = producer_cpu_ns(p);
	r = daemon_status(&d, &s0);
	bench_sleep(measure_s);
	t1 = bench_now_ns();
	b1 = producer_bytes(p);
	proc_cpu(d.pid, &u1, &k1);
	pc1 = producer_cpu_ns(p);
	if (r == 0)
		r = daemon_status(&d, &s1);
	if (r == 0) {
		out->ns += t1 - t0;
		out->bytes += b1 - b0;
		out->in += s1.bytes_in - s0.bytes_in;
		out->cpu_ns += u1 + k1 - u0 - k0;
		out->sys_ns += k1 - k0;
		out->prod_ns += pc1 - pc0;
		out->rejected += s1.pages_rejected;
		out->stored_raw += s1.pages_stored_raw - s0.pages_stored_raw;
		out->comp_ns += s1.compress_cpu_ns - s0.compress_cpu_ns;
		out->comp_in += s1.compress_bytes_in - s0.compress_bytes_in;
		out->pauses += s1.read_pauses - s0.read_pauses;
		out->reserve_peak = VMT_MAX(out->reserve_peak, s1.reserve_peak);
	}
stop:
	r = daemon_stop_run(&d, r);
out:
	producer_stop(p);
	if (r == 0)
		bench_rmtree(dir);
	free(dir);
	return r;
}

static void show(unsigned n, const char *what, const struct rate *r)
{
	printf("   N=%-2u %-16s %6.3f GB/s, reader %.3f CPU-s/GB (%.0f%% in the kernel), "
	       "producer thread busy %3.0f%%", n, what, gbps(r), cpu_per_gb(r),
	       r->cpu_ns ? 100.0 * (double)r->sys_ns / (double)r->cpu_ns : 0, 100 * prod_busy(r));
	if (r->in != r->bytes)
		printf(", bytes_in %.3f GB/s", (double)r->in / (double)r->ns);
	if (r->rejected)
		printf(", %llu pages rejected", (unsigned long long)r->rejected);
	if (r->comp_in || r->stored_raw)
		printf("\n          compressor %.0f%% of a CPU, %.3f GB/s compressed (%.0f%% of the bytes), "
		       "%.3f GB/s stored raw (it was behind)", 100.0 * (double)r->comp_ns / (double)r->ns,
		       (double)r->comp_in / (double)r->ns, 100.0 * (double)r->comp_in / (double)r->in,
		       (double)r->stored_raw * BENCH_PS / (double)r->ns);
	/* a batch being compressed is held: the fill borrows the dump reserve past it */
	if (r->pauses || r->reserve_peak)
		printf("; dump reserve borrowed up to %.1f MiB, reading paused %llu time(s)",
		       (double)r->reserve_peak / (1 << 20), (unsigned long long)r->pauses);
	printf("\n");
}

int main(int argc, char **argv)
{
	unsigned ns[8] = { 1, 8, 32 }, nn = 3, reps = 2;
	bool quick = bench_quick(), only_daemon = false;
	int fails = 0;

	if (argc > 2 && !strcmp(argv[1], "--corpus")) {
		setenv("VMT_BENCH_CORPUS", argv[2], 1);	/* corpus_open() reads it */
		argc -= 2;
		argv += 2;
	}
	if (corpus_open(&corpus) < 0) {
		fprintf(stderr, "vmtb-ingest: no corpus at %s\n", corpus.dir);
		return 1;
	}
	if (argc > 1 && !strcmp(argv[1], "--vmtraced-only")) {
		/* for profiling: the daemon alone, no baseline */
		only_daemon = true;
		argc--;
		argv++;
	}
	if (argc > 1) {
		/* vmtb-ingest N...: other guest counts */
		nn = 0;
		for (int i = 1; i < argc && nn < ARRAY_SIZE(ns); i++)
			ns[nn++] = (unsigned)VMT_MAX(1, VMT_MIN(BENCH_MAX_GUESTS, atoi(argv[i])));
	}
	if (quick) {
		warmup_s = 1;
		measure_s = 2.5;
		reps = 1;
	} else {
		warmup_s = 1.5;
		measure_s = 5;
	}
	printf("== ingest: N guests x %u CPUs, FIFO pairs, corpus %s pages looped (%zu + %zu pages)\n"
	       "   %u x %.1f s per reader, measured after %.1f s, baseline and vmtraced runs alternated\n",
	       BENCH_CPUS, corpus.name, corpus.npages[0], corpus.npages[1], reps, measure_s, warmup_s);
	printf("   baseline: vmtb-drain, one epoll loop, read() into a 64 KiB buffer; "
	       "rates are the bytes the producers got written (GB = 1e9 B)\n");
	printf("   vmtraced with 4 MiB rings, record.compression off (ingest-NxK-off), zstd -1 "
	       "(ingest-NxK) and tcode (ingest-NxK-tcode, against off)\n");
	for (unsigned i = 0; i < nn; i++) {
		unsigned n = ns[i];
		struct rate base = { 0 }, base4k = { 0 }, vmt = { 0 }, raw = { 0 }, tc = { 0 };
		char name[64], detail[400];
		int r = 0;

		for (unsigned k = 0; r == 0 && k < reps; k++) {
			if (!only_daemon)
				r = run_drain(n, 65536, &base);
			if (r == 0 && !only_daemon && !quick && k == 0)
				r = run_drain(n, 4096, &base4k);
			if (r == 0)
				r = run_daemon(n, "off", &raw);
			if (r == 0)
				r = run_daemon(n, "zstd", &vmt);
			if (r == 0)
				r = run_daemon(n, "tcode", &tc);
		}
		if (r < 0) {
			printf("   N=%u: run failed (%s)\n", n, strerror(-r));
			fails++;
			continue;
		}
		if (!only_daemon)
			show(n, "drain read(64K):", &base);
		if (base4k.ns)
			show(n, "drain read(4K):", &base4k);
		show(n, "vmtraced, off:", &raw);
		show(n, "vmtraced, zstd:", &vmt);
		show(n, "vmtraced, tcode:", &tc);
		if (only_daemon)
			continue;
		snprintf(name, sizeof(name), "ingest-%ux%u-off", n, BENCH_CPUS);
		snprintf(detail, sizeof(detail), "vmtraced %.3f GB/s vs drain %.3f GB/s; vmtraced %.2f CPU-s/GB",
			 gbps(&raw), gbps(&base), cpu_per_gb(&raw));
		if (base4k.ns) {
			char more[120];
			snprintf(more, sizeof(more), "; vs 4K-read drain %.2f", gbps(&raw) / gbps(&base4k));
			strncat(detail, more, sizeof(detail) - strlen(detail) - 1);
		}
		bench_result(name, gbps(&raw) / gbps(&base), "ratio", TARGET, true, detail);
		snprintf(name, sizeof(name), "ingest-%ux%u", n, BENCH_CPUS);
		snprintf(detail, sizeof(detail),
			 "zstd rings: vmtraced %.3f GB/s vs drain %.3f GB/s (%.2f x off); vmtraced %.2f CPU-s/GB; "
			 "%.0f%% of the bytes compressed", gbps(&vmt), gbps(&base), gbps(&vmt) / gbps(&raw),
			 cpu_per_gb(&vmt), vmt.in ? 100.0 * (double)vmt.comp_in / (double)vmt.in : 0);
		bench_result(name, gbps(&vmt) / gbps(&base), "ratio", TARGET, true, detail);
		snprintf(name, sizeof(name), "ingest-%ux%u-tcode", n, BENCH_CPUS);
		snprintf(detail, sizeof(detail),
			 "tcode rings %.3f GB/s vs off %.3f GB/s (zstd %.2f x off; drain %.3f GB/s); "
			 "%.2f CPU-s/GB (off %.2f, zstd %.2f); %.0f%% of the bytes compressed (zstd %.0f%%)",
			 gbps(&tc), gbps(&raw), gbps(&vmt) / gbps(&raw), gbps(&base), cpu_per_gb(&tc),
			 cpu_per_gb(&raw), cpu_per_gb(&vmt),
			 tc.in ? 100.0 * (double)tc.comp_in / (double)tc.in : 0,
			 vmt.in ? 100.0 * (double)vmt.comp_in / (double)vmt.in : 0);
		bench_result(name, gbps(&tc) / gbps(&raw), "ratio", TARGET, true, detail);
	}
	return fails ? 1 : 0;
}
