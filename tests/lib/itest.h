/* SPDX-License-Identifier: MIT */
/*
 * itest: what the daemon integration suites (test_daemon, test_discovery)
 * share on top of testd and fakeguest: the real ftrace input, a small JSON
 * parser for `vmtracectl --json status`, bounded waits on the daemon's
 * status, a raw control-socket client, and the files a dump leaves.
 */
#ifndef VMT_ITEST_H
#define VMT_ITEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fakeguest.h"
#include "testd.h"
#include "testutil.h"
#include "util.h"

struct vmt_sample;

#define ITEST_PS 4096
#define ITEST_MAX_CPUS 8
#define ITEST_MAX_PAGES 1000	/* per CPU, of the input */

/* ---- input: real pages ---------------------------------------------------- */

struct itest_input {
	struct vmt_buf bundle;	/* metadata bundle */
	uint8_t *pages[ITEST_MAX_CPUS];
	size_t npages[ITEST_MAX_CPUS];
	unsigned ncpus;		/* 0: no input, the tests skip */
	const char *source;
};

/* The fixed corpus (or, with VMT_TEST_INPUT=tracefs and root, two seconds
 * of this machine's sched:* and irq:*), at most ITEST_MAX_PAGES per CPU;
 * in->ncpus is 0 when there is none. */
/* A case that needs guest pages skips, saying why, when in has none. */
#define ITEST_NEED_INPUT(in)                                                \
	do {                                                                \
		if (!(in).ncpus)                                            \
			VMT_SKIP("no ftrace pages: not root and no corpus"); \
	} while (0)

void itest_input_prepare(struct itest_input *in);
/*
 * Pages that can each be told apart: page k of a CPU is the input's page
 * k mod its count with its time moved to ITEST_UNIQUE_BASE + k * step,
 * step more than any input page spans (returned; 0 with no input).
 */
#define ITEST_UNIQUE_BASE 1000000000000ull
uint64_t itest_unique_step(const struct itest_input *in);
void itest_unique_page(const struct itest_input *in, uint64_t step, unsigned cpu, uint64_t k,
		       uint8_t *out);
void itest_input_free(struct itest_input *in);
/* in's bundle into b, its trace_clock file replaced by clock_file (e.g. one
 * saying x86-tsc is in force). */
void itest_bundle_with_clock(const struct itest_input *in, struct vmt_buf *b, const char *clock_file);
/* Events in n pages, as page_scan() counts them. */
uint64_t itest_events_of(const uint8_t *p, size_t n);
/* A fakeguest that sends in's pages (the caller may change them after). */
void itest_fg_conf(struct fakeguest_conf *fc, const struct itest_input *in, const char *dir,
		   int sockets);
/* npages pages per CPU, in's pages repeated; malloc'd into out[cpu]. */
int itest_repeat_pages(const struct itest_input *in, size_t npages, uint8_t *out[ITEST_MAX_CPUS]);

/* ---- JSON ----------------------------------------------------------------- */

enum ijson_type { IJ_NULL, IJ_BOOL, IJ_NUM, IJ_STR, IJ_ARR, IJ_OBJ };

struct ijson {
	enum ijson_type type;
	uint64_t u;		/* IJ_NUM: the value if a non-negative integer; IJ_BOOL */
	bool is_uint;
	double d;		/* IJ_NUM */
	char *s;		/* IJ_STR */
	size_t n;		/* IJ_ARR, IJ_OBJ: items */
	char **keys;		/* IJ_OBJ */
	struct ijson *items;
};

/* Strict RFC 8259 (no trailing commas, no duplicate keys, nothing after the
 * value); 0, or -EBADMSG with err saying where. */
int ijson_parse(const char *text, struct ijson *out, char *err, size_t err_len);
void ijson_free(struct ijson *j);
const struct ijson *ijson_get(const struct ijson *obj, const char *key);
/* Member key of obj as a non-negative integer, UINT64_MAX if absent or not one. */
uint64_t ijson_u64(const struct ijson *obj, const char *key);
/* Member key of obj as a string, NULL if absent or not one. */
const char *ijson_str(const struct ijson *obj, const char *key);

/* ---- status ----------------------------------------------------------------- */

/* `vmtracectl --json status` parsed into *root: the exit code (0), or
 * non-zero (then *root is IJ_NULL); -EBADMSG if the output is not JSON. */
int itest_status(struct testd *d, struct ijson *root);
/* The guest object named name in a status, or NULL. */
const struct ijson *itest_guest(const struct ijson *root, const char *name);
/* One number of a guest (or of the daemon, name NULL) from a fresh status;
 * UINT64_MAX if the guest or the field is not there. */
uint64_t itest_num(struct testd *d, const char *name, const char *key);
/* A guest's state ("" if the guest is not listed, "?" if no answer). */
void itest_state(struct testd *d, const char *name, char *out, size_t n);
/* Guests listed by status; -1 without an answer. */
int itest_nguests(struct testd *d);

/* Poll every 50 ms until the condition holds or timeout_ms (a deadline,
 * test_deadline_ms()) passes. Every use waits for what must come, so the
 * deadline only catches a hang: never under 30 s (itest_hang_ms()). */
#define ITEST_WAIT(cond, timeout_ms)                                           \
	({                                                                     \
		uint64_t _end = itest_now_ms() +                               \
				test_deadline_ms(itest_hang_ms(timeout_ms));   \
		bool _ok;                                                      \
		while (!(_ok = (cond)) && itest_now_ms() < _end)               \
			usleep(50000);                                         \
		_ok;                                                           \
	})
/* Polling every poll_ms, with the caller's deadline as it is (a wait that
 * may end without its condition, e.g. to place a kill). */
#define ITEST_WAIT_MS(cond, timeout_ms, poll_ms)                               \
	({                                                                     \
		uint64_t _end = itest_now_ms() + test_deadline_ms(timeout_ms); \
		bool _ok;                                                      \
		while (!(_ok = (cond)) && itest_now_ms() < _end)               \
			usleep((poll_ms) * 1000);                              \
		_ok;                                                           \
	})
uint64_t itest_now_ms(void);
/* timeout_ms, or 30 s if that is more: a deadline that only catches hangs. */
int itest_hang_ms(int timeout_ms);
bool itest_state_is(struct testd *d, const char *name, const char *state);
/* Wait for a guest's state; false (and the last state in last) on timeout. */
bool itest_wait_state(struct testd *d, const char *name, const char *state, int timeout_ms,
		      char *last, size_t n);
/* Wait until itest_num(d, name, key) >= min (and is not UINT64_MAX). */
bool itest_wait_num_ge(struct testd *d, const char *name, const char *key, uint64_t min,
		       int timeout_ms);

/* Wait until every trigger sent is counted, taken or suppressed. */
void itest_expect_triggers_counted(struct testd *d, uint64_t sent, int timeout_ms);

/* vmtracectl with printf-style arguments (see testd_ctl). */
__attribute__((format(printf, 4, 5)))
int itest_ctl(struct testd *d, char *out, size_t n, const char *fmt, ...);
/* Rewrite the daemon's configuration as testd_start wrote it, with another
 * body, atomically (a rename), for SIGHUP and reload. */
int itest_write_conf(const struct testd *d, const char *body);
/* Write text to path (whole, atomically). */
int itest_write_file(const char *path, const char *text);

/* ---- a daemon and its guests ------------------------------------------------- */

#define ITEST_GUESTS 3

/* vmtraced and up to ITEST_GUESTS stand-in guests g1, g2, g3 (FIFO pairs in
 * DIR/gN by default), in one folder. The functions check with ck_assert. */
struct itest_run {
	char *dir;
	struct testd d;
	struct fakeguest fg[ITEST_GUESTS];
	struct fakeguest_conf fc[ITEST_GUESTS];	/* change before itest_run_guest() */
	bool fg_on[ITEST_GUESTS];
	char chan[ITEST_GUESTS][300];
	uint8_t *own[ITEST_GUESTS][ITEST_MAX_CPUS];	/* page sets the run built */
	char body[4096];	/* the configuration's body, for restarts */
	bool keep_dir;		/* someone else (a fixture) removes the folder */
};

/* A fresh folder under $TMPDIR named after tag; every guest sends in's pages. */
void itest_run_init(struct itest_run *r, const struct itest_input *in, const char *tag);
/* The same in an existing folder, which itest_run_end() leaves. */
void itest_run_init_in(struct itest_run *r, const struct itest_input *in, const char *dir);
/* Guest i sends npages pages per CPU, in's pages repeated. */
void itest_run_pages(struct itest_run *r, const struct itest_input *in, int i, size_t npages);
void itest_run_guest(struct itest_run *r, int i);
void itest_run_guest_stop(struct itest_run *r, int i);
/* A `guests:` entry for guest i. */
void itest_guest_yaml(char *out, size_t n, const struct itest_run *r, int i);
/* The daemon with top (top-level keys, may be NULL) and guests g1..gN. */
void itest_run_daemon_opts(struct itest_run *r, const char *top, int nguests,
			   const struct testd_opts *o);
void itest_run_daemon(struct itest_run *r, const char *top, int nguests);
/* Stop everything; the daemon must exit 0 (a sanitizer finding does not). */
void itest_run_end(struct itest_run *r);

void itest_expect_streaming(struct testd *d, const char *name, int timeout_ms);
/* Wait for pages_in to reach want, and check it is exactly want. */
void itest_expect_pages_in(struct testd *d, const char *name, uint64_t want);
/* `vmtracectl dump ARGS` must print a sample: its path. */
void itest_dump_one(struct testd *d, const char *args, char *sample, size_t n);
/* sample_read() that must succeed. */
struct vmt_sample *itest_read_sample(const char *path);

/* ---- raw control socket ----------------------------------------------------- */

struct ictl_msg {
	unsigned type;
	uint32_t id;
	uint32_t err;		/* ERROR: ERRNO */
	char message[1024];	/* ERROR: MESSAGE */
	const uint8_t *payload;
	uint32_t plen;
	uint8_t buf[70000];
};

/* A connected SOCK_SEQPACKET socket, or -errno. */
int ictl_connect(const char *path);
/* Send p as one packet; 0 or -errno. */
int ictl_send(int fd, const void *p, size_t n);
/* A request of type with the TLVs in tlv (may be NULL). */
int ictl_request(int fd, unsigned type, uint32_t id, const struct vmt_buf *tlv);
/* The next packet: 1, 0 if the daemon closed, -ETIMEDOUT, -EBADMSG if it is
 * not a well-formed message. */
int ictl_recv(int fd, struct ictl_msg *m, int timeout_ms);
/* Packets up to END or ERROR, counting those of type count_type; returns
 * the last type (VMT_CTL_END or VMT_CTL_ERROR, m holds it) or -errno. */
int ictl_collect(int fd, struct ictl_msg *m, unsigned count_type, unsigned *count,
		 int timeout_ms);

/* ---- files ---------------------------------------------------------------- */

/* Sample files under their final name in dir (NAME.vmts, not hidden),
 * sorted, as full paths; the count (0 if dir is missing). */
int itest_samples(const char *dir, char ***paths);
void itest_free_list(char **list, int n);
/* The same for guest's folder in d's state folder; itest_count_samples:
 * only their count. */
int itest_guest_samples(const struct testd *d, const char *guest, char ***paths);
int itest_count_samples(const struct testd *d, const char *guest);
/* Samples under their final name in dir, each of which must read back whole
 * (ck_assert); their count. */
int itest_samples_check(const char *dir);
/* Files whose name starts with '.' and holds ".tmp-" (writer temporaries). */
int itest_count_tmp(const char *dir);
/* "merge -o DAT SAMPLE" with vmtracectl; its exit code. */
int itest_merge(struct testd *d, const char *sample, const char *dat);

struct itest_rec {
	uint64_t ts;
	int cpu;
};
/* Every record of a trace.dat, in file order per CPU (libtracecmd). */
int itest_trace_records(const char *dat, struct itest_rec **recs, size_t *n);

/* ---- processes -------------------------------------------------------------- */

/* Run fn(arg) in a child as uid and gid 65534 (nobody, nogroup, no other
 * groups); the child's exit code (fn's return), or -errno. What fn writes
 * into its out (4096 bytes, NUL-terminated) comes back in out. */
int itest_as_nobody(int (*fn)(void *arg, char *out), void *arg, char *out);
/* Is a group named name there? */
bool itest_group_exists(const char *name);
/* Run a shell command; its exit code. */
__attribute__((format(printf, 1, 2)))
int itest_sh(const char *fmt, ...);

#endif
