/* SPDX-License-Identifier: MIT */
/* testd: run vmtraced and vmtracectl from the build under test. */
#ifndef VMT_TESTD_H
#define VMT_TESTD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

struct testd {
	pid_t pid;
	char dir[256];		/* scratch folder of the test */
	char state[300];	/* state_dir */
	char sock[300];		/* control socket */
	char conf[300];
	char log[300];		/* the daemon's stderr */
};

/* Write DIR/vmtraced.yaml (state_dir, control_socket, then body) and start
 * the daemon; returns once the control socket answers. The daemon gets
 * SIGKILL if the test process dies first (a failed check). */
int testd_start(struct testd *d, const char *dir, const char *body);

/* What testd_start_opts() may change. */
struct testd_opts {
	const char *const *env;		/* "NAME=value" added to the daemon's environment */
	const char *const *wrapper;	/* argv run first, NULL-ended: vmtraced -c FILE follows */
	const char *connect;		/* talk to this socket, not control_socket (activation) */
	int append_log;			/* keep the log of an earlier start */
	/* fds passed as systemd passes them: at 3.., LISTEN_PID (the daemon's),
	 * LISTEN_FDS and LISTEN_FDNAMES (names joined by ':') */
	const int *pass_fds;
	unsigned npass;
	const char *pass_names;
	const char *bin;		/* this vmtraced, not the build's */
};
int testd_start_opts(struct testd *d, const char *dir, const char *body,
		     const struct testd_opts *o);
/* Run `vmtracectl -s SOCK ARGS...` (a shell-quoted string), stdout into
 * out; returns the exit code. */
int testd_ctl(struct testd *d, char *out, size_t n, const char *args);
/* The same in two steps, for a command that waits (dump --post): begin
 * starts it (NULL and errno on failure), end reads its output and exit. */
FILE *testd_ctl_begin(struct testd *d, const char *args);
int testd_ctl_end(FILE *p, char *out, size_t n);
/* SIGTERM and wait: the daemon's exit code, or 128+signal. */
int testd_stop(struct testd *d);
/* Lines of the daemon's log matching needle. */
int testd_log_count(const struct testd *d, const char *needle);

/* Events counted by name. */
struct tally_names {
	struct {
		char name[64];
		uint64_t n;
	} ev[512];
	unsigned nev;
};
/* One more of name (NULL: "(unknown)"); names past the table are dropped. */
void tally_name(struct tally_names *t, const char *name);
uint64_t tally_of(const struct tally_names *t, const char *name);

/* Count the events of a trace.dat per CPU with libtracecmd; -errno. */
int tdread_counts(const char *file, uint64_t *per_cpu, unsigned max_cpus, uint64_t *total);
/* A CRC32C per CPU of every record of a trace.dat (its time, size, missed
 * events and bytes, in order) and their counts: two files of the same
 * pages give the same; -errno. */
int tdread_digest(const char *file, uint32_t *crc, uint64_t *per_cpu, unsigned max_cpus);

#endif
