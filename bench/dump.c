/* SPDX-License-Identifier: MIT */
/*
 * vmtb-dump: how long vmtraced takes to write a full 256 MiB window (one
 * guest, 2 CPUs x 128 MiB rings of real pages, compression_level 1, the
 * writer's 2 zstd workers), end to end as `vmtracectl dump` sees it (flush
 * round trip, hold, compress, write, fsync, rename), against
 * `zstd -1 -T2 -c FILE > /dev/null` on the same bytes (the window read back
 * from the first sample), file in the page cache. Target: vmtraced's
 * throughput >= 0.9 x zstd's. Then the ingest rate while a dump is being
 * written against the rate just before it, guest streaming flat out,
 * with a dump_reserve as large as the window (what new pages may borrow
 * while the dump holds the window in the rings; smaller, reading pauses
 * once it is used up, as bench/memory shows). Target >= 0.9.
 *
 * Twice: rings raw (record.compression: off; the guest fills them flat
 * out) and compressed (zstd -1, the default; filled at FILL_RATE, which
 * the compressor keeps up with, so that the window is frames: flat out,
 * most pages would be stored raw). A compressed window is several times
 * 256 MiB of pages, which the sample holds as frames, as they are.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "sample.h"

#define TARGET 0.9
#define RING_MIB 128
#define FILL_RATE 150000000ull	/* bytes/s: a compressed window fills with frames */

static struct bench_corpus corpus;

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static uint64_t median(uint64_t *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The one sample in DIR (vmtraced writes NAME.vmts under a temporary name). */
static int find_sample(const char *dir, char *out, size_t n)
{
	struct dirent *de;
	DIR *d = opendir(dir);
	int r = -ENOENT;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (l > 5 && !strcmp(de->d_name + l - 5, ".vmts")) {
			snprintf(out, n, "%s/%s", dir, de->d_name);
			r = 0;
			break;
		}
	}
	closedir(d);
	return r;
}

static off_t file_size(const char *p)
{
	struct stat st;

	return stat(p, &st) ? -1 : st.st_size;
}

/* argv with stdout to /dev/null; wall time in ns, or 0 on failure. */
static uint64_t run_timed(char *const argv[])
{
	uint64_t t0 = bench_now_ns();
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);
		dup2(fd, 1);
		execvp(argv[0], argv);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		return 0;
	return bench_now_ns() - t0;
}

/* Write the sample's pages, CPU after CPU, to path: the bytes of the window. */
static int export_window(const char *sample, const char *path, uint64_t *bytes)
{
	struct vmt_sample *s;
	char why[256];
	int r, fd;

	r = sample_read(sample, &s, why, sizeof(why));
	if (r < 0) {
		fprintf(stderr, "vmtb-dump: %s: %s\n", sample, why);
		return r;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	*bytes = 0;
	for (uint32_t c = 0; fd >= 0 && r == 0 && c < s->ncpus; c++) {
		size_t n = (size_t)s->cpus[c].npages * s->page_size;
		r = write_full(fd, s->cpus[c].pages, n);
		*bytes += n;
	}
	if (fd < 0)
		r = -errno;
	else
		close(fd);
	sample_free(s);
	return r;
}

/* Every guest pushed out a page: a compressed window passes CAPACITY, the
 * raw count, long before. */
static int wait_full(struct bench_daemon *d, double timeout)
{
	uint64_t until = bench_now_ns() + (uint64_t)(timeout * 1e9);
	struct bench_status st;

	do {
		if (daemon_status(d, &st) == 0 && st.guests && st.guests_overwriting >= st.guests)
			return 0;
		bench_sleep(0.2);
	} while (bench_now_ns() < until);
	return -ETIMEDOUT;
}

/* Bytes the producer wrote and vmtraced took in between two points. */
struct span {
	uint64_t t, prod, in;
};

static void span_mark(struct span *s, struct producer *p, struct bench_daemon *d)
{
	struct bench_status st;

	s->t = bench_now_ns();
	s->prod = producer_bytes(p);
	s->in = daemon_status(d, &st) == 0 ? st.bytes_in : 0;
}

/* One daemon with record.compression: compression; RESULT names end in sfx. */
static int run(const char *compression, const char *sfx)
{
	bool quick = bench_quick(), frames = strcmp(compression, "off") != 0;
	unsigned reps = quick ? 1 : 3;
	char *dir = bench_mkdtemp("dump");
	struct producer_conf pc = { .dir = dir, .nguests = 1, .corpus = &corpus };
	struct producer *p;
	struct bench_daemon d;
	struct bench_status st_end = { 0 }, st_full = { 0 };
	char body[2000], gdir[1000], sample[1400], window[600], name[64];
	uint64_t t_dump[5], t_zstd[5], t_load[5], wbytes = 0, q_prod = 0, q_ns = 0, d_prod = 0,
		 d_ns = 0, q_in = 0, d_in = 0;
	uint64_t wms[5] = { 0 };
	off_t ssize = 0;
	int r, rc;

	if (!dir) {
		fprintf(stderr, "vmtb-dump: no scratch folder\n");
		return -errno;
	}
	{
		struct statfs sf;
		bool tmpfs = statfs(dir, &sf) == 0 && sf.f_type == TMPFS_MAGIC;
		printf("== dump: 1 guest x %u CPUs x %u MiB rings of corpus pages, record.compression %s, "
		       "compression_level 1, state_dir in %s (%s)\n", BENCH_CPUS, RING_MIB, compression,
		       dir, tmpfs ? "tmpfs: no disk" : "on disk: written and fsynced");
	}
	if (frames)
		printf("   the window filled at %.0f MB/s (flat out, the compressor would store most "
		       "pages raw)\n", FILL_RATE / 1e6);
	printf("   baseline: zstd -1 -T2 -c WINDOW > /dev/null, the same bytes, in the page cache; "
	       "median of %u\n", reps);
	if (frames)
		pc.rate = FILL_RATE;
	r = producer_start(&p, &pc);
	if (r < 0) {
		free(dir);
		return r;
	}
	snprintf(body, sizeof(body),
		 "log_level: notice\nmemory_max: 0\ncompression_level: 1\ndump_reserve: %uMiB\n"
		 "triggers:\n  coalesce: 0ms\n"
		 "record:\n  ring_size: %uMiB\n  flush_timeout: 5s\n  compression: %s\n"
		 "  compression_level: 1\n"
		 "guests:\n  - name: g0\n    path: %s\n    transport: fifo\n    cpus: %u\n",
		 RING_MIB * BENCH_CPUS, RING_MIB, compression, producer_guest_dir(p, 0), BENCH_CPUS);
	r = daemon_start(&d, dir, body);
	if (r < 0)
		goto out;
	snprintf(gdir, sizeof(gdir), "%s/g0", d.state);
	snprintf(window, sizeof(window), "%s/window.raw", dir);
	if (daemon_wait_streaming(&d, 1, 60) < 0 || wait_full(&d, 120) < 0) {
		fprintf(stderr, "vmtb-dump: the rings did not fill; log: %s\n", d.log);
		r = -ETIMEDOUT;
		goto stop;
	}
	if (frames)
		bench_sleep(2);	/* the other CPU's ring fills too */

	/* 1. the guest goes quiet: the same full window dumped each time */
	producer_pause(p, true);
	bench_sleep(0.3);
	daemon_status(&d, &st_full);
	if (daemon_dump(&d, &t_dump[0]) != 0 || find_sample(gdir, sample, sizeof(sample)) < 0 ||
	    export_window(sample, window, &wbytes) < 0) {
		fprintf(stderr, "vmtb-dump: first dump failed; log: %s\n", d.log);
		r = -EIO;
		goto stop;
	}
	unlink(sample);
	for (unsigned i = 0; i < reps; i++) {
		if (daemon_dump(&d, &t_dump[i]) != 0 || find_sample(gdir, sample, sizeof(sample)) < 0) {
			r = -EIO;
			goto stop;
		}
		wms[i] = (uint64_t)VMT_MAX(daemon_last_write_ms(&d), 0);
		ssize = file_size(sample);
		unlink(sample);
	}
	{
		char *cat[] = { "cat", window, NULL };
		char *z[] = { "zstd", "-q", "-1", "-T2", "-c", window, NULL };

		run_timed(cat);	/* into the page cache */
		for (unsigned i = 0; i < reps; i++)
			if (!(t_zstd[i] = run_timed(z))) {
				fprintf(stderr, "vmtb-dump: zstd failed\n");
				r = -EIO;
				goto stop;
			}
	}

	/* 2. the guest streams flat out: ingest during a dump vs just before */
	producer_set_rate(p, 0);
	producer_pause(p, false);
	bench_sleep(1);
	for (unsigned i = 0; i < reps; i++) {
		struct span a, b, c;
		uint64_t ns;

		span_mark(&a, p, &d);
		bench_sleep(quick ? 1 : 2);
		span_mark(&b, p, &d);
		rc = daemon_dump(&d, &ns);
		span_mark(&c, p, &d);
		if (rc != 0 || find_sample(gdir, sample, sizeof(sample)) < 0) {
			r = -EIO;
			goto stop;
		}
		unlink(sample);
		t_load[i] = ns;
		q_prod += b.prod - a.prod;
		q_in += b.in - a.in;
		q_ns += b.t - a.t;
		d_prod += c.prod - b.prod;
		d_in += c.in - b.in;
		d_ns += c.t - b.t;
		bench_sleep(1);
	}
	daemon_status(&d, &st_end);
	r = 0;
stop:
	rc = daemon_stop(&d);
	if (rc != 0)
		fprintf(stderr, "vmtraced exited with %d; log: %s\n", rc, d.log);
out:
	producer_stop(p);
	if (r < 0) {
		printf("   run failed (%s); files kept in %s\n", strerror(-r), dir);
		free(dir);
		return r;
	}
	{
		double mib = (double)wbytes / (1 << 20);
		uint64_t td = median(t_dump, reps), tz = median(t_zstd, reps), tl = median(t_load, reps);
		double qrate = (double)q_prod / (double)q_ns, drate = (double)d_prod / (double)d_ns;
		double qin = (double)q_in / (double)q_ns, din = (double)d_in / (double)d_ns;
		char detail[400];

		printf("   window %.0f MiB, sample %.1f MiB (%.1f%%)\n", mib, (double)ssize / (1 << 20),
		       100.0 * (double)ssize / (double)wbytes);
		if (frames)
			printf("   the window in the rings: %llu pages, %llu of them in frames (%.1f MiB, "
			       "%.2f:1), %llu stored raw\n", (unsigned long long)st_full.pages,
			       (unsigned long long)st_full.frame_pages,
			       (double)st_full.frame_bytes / (1 << 20),
			       st_full.frame_bytes ? (double)st_full.frame_pages * st_full.page_size /
							     (double)st_full.frame_bytes : 0,
			       (unsigned long long)st_full.pages_stored_raw);
		printf("   vmtraced dump, guest quiet:  %7.1f ms = %6.0f MiB/s (writer alone %llu ms: "
		       "compress + write + fsync)\n", td / 1e6, mib / (td / 1e9),
		       (unsigned long long)median(wms, reps));
		printf("   zstd -1 -T2:                 %7.1f ms = %6.0f MiB/s\n", tz / 1e6,
		       mib / (tz / 1e9));
		printf("   vmtraced dump, guest flat out: %5.1f ms\n", tl / 1e6);
		printf("   dump reserve %u MiB: at most %.1f MiB borrowed, reading paused %llu time(s)\n",
		       RING_MIB * BENCH_CPUS, (double)st_end.reserve_peak / (1 << 20),
		       (unsigned long long)st_end.read_pauses);
		printf("   ingest just before a dump: %.3f GB/s (bytes_in %.3f); while dumping: %.3f GB/s "
		       "(bytes_in %.3f)\n", qrate, qin, drate, din);
		snprintf(detail, sizeof(detail), "vmtraced %.0f ms vs zstd %.0f ms for %.0f MiB",
			 td / 1e6, tz / 1e6, mib);
		snprintf(name, sizeof(name), "dump-256MiB%s", sfx);
		bench_result(name, (double)tz / (double)td, "ratio", TARGET, true, detail);
		snprintf(detail, sizeof(detail), "%.3f GB/s while dumping vs %.3f GB/s before",
			 drate, qrate);
		snprintf(name, sizeof(name), "ingest-during-dump%s", sfx);
		bench_result(name, drate / qrate, "ratio", TARGET, true, detail);
	}
	bench_rmtree(dir);
	free(dir);
	return 0;
}

int main(void)
{
	int r;

	if (corpus_open(&corpus) < 0) {
		fprintf(stderr, "vmtb-dump: no corpus at %s\n", corpus.dir);
		return 1;
	}
	r = run("off", "-off");
	printf("\n");
	return run("zstd", "") < 0 || r < 0 ? 1 : 0;
}
