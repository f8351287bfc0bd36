/* SPDX-License-Identifier: MIT */
/*
 * bench: what the benchmark programs share.
 *
 * producer: a fast stand-in for QEMU + vmtrace-agent, for many guests at
 * once, in one thread of the benchmark process: makes each guest's FIFO
 * pairs, speaks just enough of the control protocol to reach STREAM
 * (HELLO, STARTED, a small metadata bundle, FLUSHED), then writes real
 * ftrace pages, looped, into every data FIFO as fast as the reader takes
 * them (non-blocking writes of up to 16 pages from one epoll loop), or at
 * a fixed rate per guest (a token bucket per channel).
 *
 * harness: runs vmtraced from $VMT_BUILD with a generated configuration,
 * reads its counters through `vmtracectl --json status` and its CPU time
 * and memory from /proc, and prints results the same way everywhere:
 * the figure, the baseline measured in the same run, their ratio, and a
 * PASS/MISS line against the target (informational).
 */
#ifndef VMT_BENCH_H
#define VMT_BENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "util.h"

#define BENCH_PS 4096
#define BENCH_CPUS 2		/* per guest */
#define BENCH_MAX_GUESTS 64

/* ---- corpus ---------------------------------------------------------------- */

/* Real pages per CPU, looped by the producer, and a small metadata bundle. */
struct bench_corpus {
	unsigned ncpus;
	uint8_t *pages[BENCH_CPUS];
	size_t npages[BENCH_CPUS];
	uint64_t *ev_prefix[BENCH_CPUS];	/* events in pages [0, i) */
	struct vmt_buf bundle;
	uint32_t bundle_files;
	char dir[512];
	char name[128];		/* VMT_BENCH_CORPUS's, or VMT_CORPUS */
};

/* $VMT_CORPUS, else the corpus named by $VMT_BENCH_CORPUS (default guest-6.1;
 * vmtb-window and vmtb-ingest take --corpus NAME) in BUILD/corpus/, else in
 * ../shared/corpus/ beside the tree. */
int corpus_open(struct bench_corpus *c);
/* Events in the first n pages of the endless loop of cpu's pages. */
uint64_t corpus_events(const struct bench_corpus *c, unsigned cpu, uint64_t n);

/* ---- producer -------------------------------------------------------------- */

struct producer;

struct producer_conf {
	const char *dir;	/* guest folders DIR/gN are made here */
	unsigned nguests;
	const struct bench_corpus *corpus;
	bool no_handshake;	/* baseline: write pages at once, ignore control */
	uint64_t rate;		/* bytes/s per guest, shared by its CPUs; 0: as fast as taken */
};

/* Make the channels (FIFO pairs, like QEMU's -chardev pipe) and start the
 * thread; it answers the daemon from then on. */
int producer_start(struct producer **out, const struct producer_conf *c);
void producer_stop(struct producer *p);
/* Stop writing pages (the guest goes quiet) or go on. */
void producer_pause(struct producer *p, bool paused);
/* Another rate (bytes/s per guest; 0: as fast as taken), from now on. */
void producer_set_rate(struct producer *p, uint64_t rate);
/* Bytes written into data channels since start, all guests. */
uint64_t producer_bytes(const struct producer *p);
/* CPU time of the producer's thread, ns. */
uint64_t producer_cpu_ns(const struct producer *p);
/* Guest folder path of guest i. */
const char *producer_guest_dir(const struct producer *p, unsigned i);

/* ---- harness --------------------------------------------------------------- */

struct bench_daemon {
	pid_t pid;
	char dir[400];
	char state[480];
	char sock[480];
	char conf[480];
	char log[480];
};

struct bench_status {
	unsigned guests;
	unsigned streaming;
	uint64_t bytes_in;
	uint64_t pages;
	uint64_t capacity;
	uint64_t mem_used;
	uint64_t pages_rejected;
	uint64_t dumps;
	uint64_t reserve, reserve_used, reserve_peak;	/* the dump reserve: size, borrowed, most borrowed */
	uint64_t read_pauses;	/* all guests: reading stopped for a held page */
	/* compressed rings (all guests; the compressor's are the daemon's) */
	uint64_t pages_overwritten;
	uint64_t frame_pages, frame_bytes, frames_made, pages_stored_raw, frames_overwritten;
	uint32_t page_size;
	unsigned guests_overwriting;	/* guests that pushed out a page or frame */
	uint64_t compress_cpu_ns, compress_busy, compress_bytes_in, compress_bytes_out;
	uint64_t compress_tcode_fallback;	/* tcode batches made zstd frames */
	uint64_t pages_in;	/* all guests */
	uint64_t uptime_ns;	/* the daemon's: starts again at an upgrade (same pid) */
	uint64_t upgrades, sessions_adopted, sessions_refused;
};

/* CLOCK_MONOTONIC ns / s; sleep for s seconds. */
uint64_t bench_now_ns(void);
void bench_sleep(double s);
/* $BENCH_QUICK set to something other than 0 or "". */
bool bench_quick(void);
/* A fresh scratch folder under $TMPDIR (or /tmp); removed by bench_rmtree. */
char *bench_mkdtemp(const char *tag);
void bench_rmtree(const char *path);
/* $VMT_BUILD (default build) and the tree's top. */
const char *bench_build(void);

/* Write DIR/vmtraced.yaml: state_dir and control_socket, then body; start
 * vmtraced; return once its control socket answers. */
int daemon_start(struct bench_daemon *d, const char *dir, const char *body);
int daemon_stop(struct bench_daemon *d);
/* daemon_stop at the end of a run whose result is r: a daemon that did not
 * exit 0 is said (with its log) and makes a good run -EIO. Returns the run's. */
int daemon_stop_run(struct bench_daemon *d, int r);
int daemon_status(struct bench_daemon *d, struct bench_status *st);
/* Wait until n guests stream (timeout in seconds). */
int daemon_wait_streaming(struct bench_daemon *d, unsigned n, double timeout);
/* daemon_start with top (up to and including "guests:\n") and the first n
 * guests of p as g0.., then daemon_wait_streaming(n, timeout). */
int daemon_start_guests(struct bench_daemon *d, const char *dir, const char *top,
			const struct producer *p, unsigned n, double timeout);
/* `vmtracectl dump`: exit code; wall time in *ns. */
int daemon_dump(struct bench_daemon *d, uint64_t *ns);
/* The last "wrote ... N ms" the writer logged, in ms; -1 if none. */
long daemon_last_write_ms(struct bench_daemon *d);

/* /proc/PID/FILE into a malloc'd, NUL-ended *buf (lib/util.h read_file); -errno. */
int proc_read(pid_t pid, const char *file, char **buf);
/* utime and stime of a process in ns (/proc/PID/stat, all its threads). */
int proc_cpu(pid_t pid, uint64_t *user_ns, uint64_t *sys_ns);
/* A "Vm...:" line of /proc/PID/status, in KiB. */
uint64_t proc_status_kib(pid_t pid, const char *key);
/* The figure after key ("VmRSS:") in a /proc/PID/status text; 0 if none. */
uint64_t proc_kib(const char *status, const char *key);

/*
 * One "RESULT name value unit target PASS|MISS detail" line, which run.sh
 * gathers into its summary. value is what the target applies to: a ratio
 * against the baseline, or an absolute figure where the target is one.
 */
void bench_result(const char *name, double value, const char *unit, double target,
		  bool higher_is_better, const char *detail);

#endif
