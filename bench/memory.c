/* SPDX-License-Identifier: MIT */
/*
 * vmtb-memory: vmtraced's peak RSS (VmHWM) with G guests x 2 CPUs
 * streaming flat out into full rings, then while it dumps them all, and
 * once the dumps are over, against the memory the configuration asks for:
 * the rings (G x 2 x ring_size), and during the dumps the dump reserve as
 * well (dump_reserve: new pages borrow it while a dump holds the window in
 * the rings; it is touched only then). Target: peak <= that + 16 MiB, in
 * each of the three. Twice: rings compressed (zstd -1, the default: the
 * compressor's jobs and contexts are allocated once) and raw.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

#define SLACK_MIB 16.0
#define RESERVE_MIB 16	/* dump_reserve */

static struct bench_corpus corpus;

/* VmHWM is kept by the kernel from approximate counters; a poller of
 * VmRSS every 2 ms gives a second opinion on the peak, and what it was
 * made of then (anonymous: heap, stacks; shmem: the rings and reserve). */
struct poller {
	pid_t pid;
	int stop;
	uint64_t max_kib, anon_kib, shmem_kib;
	const char *smaps_dir, *sfx;	/* VMTB_MEMORY_SMAPS: smaps at the peak, there */
};

/* /proc/PID/smaps to DIR/WHATSFX.smaps (a diagnosis: where the RSS is). */
static void smaps_copy(pid_t pid, const char *dir, const char *what, const char *sfx)
{
	char src[64], dst[600], buf[65536];
	int in, out;
	ssize_t n;

	snprintf(src, sizeof(src), "/proc/%d/smaps", (int)pid);
	snprintf(dst, sizeof(dst), "%s/%s%s.smaps", dir, what, sfx);
	in = open(src, O_RDONLY | O_CLOEXEC);
	out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, (size_t)n) != n)
			break;
	if (in < 0 || out < 0)
		fprintf(stderr, "vmtb-memory: cannot copy %s to %s\n", src, dst);
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
}

/* Where the resident memory is: the rings and reserve are memfd pages
 * (RssShmem), the heap, stacks and buffers RssAnon, code RssFile. With
 * VMTB_MEMORY_SMAPS=DIR, /proc/PID/smaps is copied there as well. */
static void show_split(pid_t pid, const char *what, const char *sfx)
{
	const char *dir = getenv("VMTB_MEMORY_SMAPS");

	printf("   %s: RssAnon %.1f MiB, RssShmem %.1f MiB, RssFile %.1f MiB, %llu threads\n", what,
	       proc_status_kib(pid, "RssAnon:") / 1024.0, proc_status_kib(pid, "RssShmem:") / 1024.0,
	       proc_status_kib(pid, "RssFile:") / 1024.0,
	       (unsigned long long)proc_status_kib(pid, "Threads:"));
	if (dir && *dir)
		smaps_copy(pid, dir, what, sfx);
}

static int proc_status3(pid_t pid, uint64_t *rss, uint64_t *anon, uint64_t *shmem)
{
	char *buf;
	int r = proc_read(pid, "status", &buf);

	if (r < 0)
		return r;
	*rss = proc_kib(buf, "VmRSS:");
	*anon = proc_kib(buf, "RssAnon:");
	*shmem = proc_kib(buf, "RssShmem:");
	r = strstr(buf, "RssShmem:") ? 0 : -EBADMSG;
	free(buf);
	return r;
}

static void *poll_rss(void *arg)
{
	struct poller *p = arg;

	while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
		uint64_t v, anon, shmem;

		/* one read: the three figures of the same moment */
		if (proc_status3(p->pid, &v, &anon, &shmem) == 0 && v > p->max_kib) {
			p->max_kib = v;
			p->anon_kib = anon;
			p->shmem_kib = shmem;
			if (p->smaps_dir)
				smaps_copy(p->pid, p->smaps_dir, "dump-peak", p->sfx);
		}
		bench_sleep(0.002);
	}
	return NULL;
}

/* One daemon with record.compression: compression; RESULT names end in sfx. */
static int run(const char *compression, const char *sfx)
{
	bool quick = bench_quick();
	unsigned ng = quick ? 4 : 8, ring_mib = quick ? 8 : 16, dumps = quick ? 1 : 2;
	char *dir = bench_mkdtemp("memory");
	struct producer_conf pc = { .dir = dir, .nguests = ng, .corpus = &corpus };
	struct producer *p;
	struct bench_daemon d;
	struct bench_status st = { 0 };
	char line[1200], detail[300], name[64];
	uint64_t hwm_start = 0, hwm_stream, rss_stream, hwm_dump = 0, rss_after, dump_ns[4] = { 0 };
	double rings_mib = (double)ng * BENCH_CPUS * ring_mib;
	struct poller poller = { 0 };
	pthread_t pth;
	int r, rc = 0;

	if (!dir) {
		fprintf(stderr, "vmtb-memory: no scratch folder\n");
		return -errno;
	}
	printf("== memory: %u guests x %u CPUs x %u MiB rings = %.0f MiB configured, "
	       "guests streaming flat out, record.compression %s, compression_level 1\n", ng,
	       BENCH_CPUS, ring_mib, rings_mib, compression);
	printf("   figure: VmHWM - configured rings; target <= %.0f MiB (baseline: the rings)\n",
	       SLACK_MIB);
	/* what the daemon takes with no guest at all: code, libraries, loop */
	{
		char *d0 = bench_mkdtemp("memory0");
		if (d0 && daemon_start(&d, d0, "log_level: notice\n") == 0) {
			bench_sleep(0.3);
			hwm_start = proc_status_kib(d.pid, "VmHWM:");
			daemon_stop(&d);
		}
		bench_rmtree(d0);
		free(d0);
	}
	r = producer_start(&p, &pc);
	if (r < 0) {
		free(dir);
		return r;
	}
	snprintf(line, sizeof(line),
		 "log_level: notice\nmemory_max: 0\ncompression_level: 1\ndump_reserve: %uMiB\ntriggers:\n  coalesce: 0ms\n"
		 "record:\n  ring_size: %uMiB\n  flush_timeout: 5s\n  compression: %s\n  compression_level: 1\n"
		 "guests:\n", RESERVE_MIB, ring_mib, compression);
	r = daemon_start_guests(&d, dir, line, p, ng, 60);
	if (r < 0 && d.pid <= 0)
		goto out;
	/* full rings, overwriting: the steady state (a compressed window
	 * holds more pages than capacity, the raw count, before it is full) */
	for (int i = 0; r == 0 && i < 600; i++) {
		r = daemon_status(&d, &st);
		if (r == 0 && st.guests_overwriting >= ng)
			break;
		bench_sleep(0.1);
	}
	if (r < 0 || st.guests_overwriting < ng) {
		fprintf(stderr, "vmtb-memory: rings did not fill; log: %s\n", d.log);
		r = r < 0 ? r : -ETIMEDOUT;
		goto stop;
	}
	bench_sleep(quick ? 1 : 3);
	hwm_stream = proc_status_kib(d.pid, "VmHWM:");
	rss_stream = proc_status_kib(d.pid, "VmRSS:");
	daemon_status(&d, &st);
	show_split(d.pid, "streaming", sfx);
	printf("   vmtraced with no guest:  VmHWM %.1f MiB\n", hwm_start / 1024.0);
	printf("   streaming, rings full:   VmHWM %.1f MiB, VmRSS %.1f MiB; the daemon counts %.1f MiB "
	       "of rings (pages and slot records)\n", hwm_stream / 1024.0, rss_stream / 1024.0,
	       (double)st.mem_used / (1 << 20));
	if (st.frames_made)
		printf("   compressed: %llu pages in the windows for %llu raw (%.2fx), %llu stored raw\n",
		       (unsigned long long)st.pages, (unsigned long long)st.capacity,
		       (double)st.pages / (double)st.capacity, (unsigned long long)st.pages_stored_raw);
	snprintf(detail, sizeof(detail), "VmHWM %.1f MiB = %.3f x rings %.0f MiB",
		 hwm_stream / 1024.0, hwm_stream / 1024.0 / rings_mib, rings_mib);
	snprintf(name, sizeof(name), "memory-streaming%s", sfx);
	bench_result(name, hwm_stream / 1024.0 - rings_mib, "MiB", SLACK_MIB, false,
		     detail);
	poller.pid = d.pid;
	poller.sfx = sfx;
	poller.smaps_dir = getenv("VMTB_MEMORY_SMAPS") && *getenv("VMTB_MEMORY_SMAPS") ?
			   getenv("VMTB_MEMORY_SMAPS") : NULL;
	if (pthread_create(&pth, NULL, poll_rss, &poller) != 0) {
		r = -EAGAIN;
		goto stop;
	}
	for (unsigned i = 0; i < dumps; i++) {
		rc = daemon_dump(&d, &dump_ns[i]);
		if (rc != 0)
			break;
		bench_sleep(0.5);
	}
	__atomic_store_n(&poller.stop, 1, __ATOMIC_RELEASE);
	pthread_join(pth, NULL);
	if (rc != 0) {
		fprintf(stderr, "vmtb-memory: dump failed (%d); log: %s\n", rc, d.log);
		r = -EIO;
		goto stop;
	}
	hwm_dump = proc_status_kib(d.pid, "VmHWM:");
	rss_after = proc_status_kib(d.pid, "VmRSS:");
	daemon_status(&d, &st);
	printf("   at the polled peak of the dumps: RssAnon %.1f MiB, RssShmem %.1f MiB, the rest "
	       "(RssFile) %.1f MiB\n", poller.anon_kib / 1024.0, poller.shmem_kib / 1024.0,
	       (poller.max_kib - poller.anon_kib - poller.shmem_kib) / 1024.0);
	show_split(d.pid, "after", sfx);
	printf("   during %u dump(s) of all guests (%.0f ms each): VmHWM %.1f MiB, VmRSS polled every "
	       "2 ms peaked at %.1f MiB; VmRSS %.1f MiB after\n", dumps, dump_ns[0] / 1e6,
	       hwm_dump / 1024.0, poller.max_kib / 1024.0, rss_after / 1024.0);
	if (poller.max_kib > hwm_dump)
		hwm_dump = poller.max_kib;
	printf("   dump reserve %u MiB: at most %.1f MiB borrowed, %.1f MiB after; reading paused %llu "
	       "time(s)\n", RESERVE_MIB, (double)st.reserve_peak / (1 << 20),
	       (double)st.reserve_used / (1 << 20), (unsigned long long)st.read_pauses);
	snprintf(detail, sizeof(detail),
		 "peak %.1f MiB = %.3f x rings %.0f MiB; rings + dump_reserve %u MiB = %.0f MiB",
		 hwm_dump / 1024.0, hwm_dump / 1024.0 / rings_mib, rings_mib, RESERVE_MIB,
		 rings_mib + RESERVE_MIB);
	snprintf(name, sizeof(name), "memory-dumping%s", sfx);
	bench_result(name, hwm_dump / 1024.0 - rings_mib - RESERVE_MIB, "MiB", SLACK_MIB, false,
		     detail);
	/* streaming again: what the dumps left behind */
	snprintf(detail, sizeof(detail), "VmRSS %.1f MiB = %.3f x rings %.0f MiB after the dumps",
		 rss_after / 1024.0, rss_after / 1024.0 / rings_mib, rings_mib);
	snprintf(name, sizeof(name), "memory-after-dump%s", sfx);
	bench_result(name, rss_after / 1024.0 - rings_mib, "MiB", SLACK_MIB, false,
		     detail);
	r = 0;
stop:
	r = daemon_stop_run(&d, r);
out:
	producer_stop(p);
	if (r == 0)
		bench_rmtree(dir);
	else
		printf("   run failed (%s); files kept in %s\n", strerror(-r), dir);
	free(dir);
	return r;
}

int main(void)
{
	int r;

	if (corpus_open(&corpus) < 0) {
		fprintf(stderr, "vmtb-memory: no corpus at %s\n", corpus.dir);
		return 1;
	}
	r = run("off", "-off");
	printf("\n");
	return run("zstd", "") < 0 || r < 0 ? 1 : 0;
}
