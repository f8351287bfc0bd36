/* SPDX-License-Identifier: MIT */
/*
 * hostpriv: the host source's privileged half, a process of its own (as
 * OpenBSD's privsep parents are). tracefs is root's (its top folder 0700,
 * instances/ 0750, every file 0640 or 0440) and /proc/kallsyms hides its
 * addresses without CAP_SYSLOG; the daemon, which parses what every guest
 * sends, keeps neither once set up. This process, forked while the daemon
 * is still privileged, keeps only CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
 * and CAP_SYSLOG (of those it had), closes every other descriptor, and
 * does five things on request over a socketpair: make and configure the
 * instance "vmtraced" and hand back its descriptors (each CPU's
 * trace_pipe_raw, trace_marker, the metadata in a memfd), turn it on, read
 * the host's task tables, remove it, say hello. Nothing else: requests are
 * checked (size, version, strings) as any input from a less privileged
 * peer. It exits when the daemon's end closes, leaving the instance as a
 * crash leaves it (the next start makes it afresh), and is handed over to
 * an upgrade's successor with the rest.
 */
#ifndef VMT_HOSTPRIV_H
#define VMT_HOSTPRIV_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"
#include "proto.h"
#include "util.h"

struct vmt_hostpriv;

/* The instance set up: its descriptors are the caller's to close
 * (hostpriv_inst_close). cpu_fd[i] -1 where CPU i has no buffer. */
struct vmt_hostpriv_inst {
	struct vmt_buf meta;	/* the host's metadata bundle (meta.h) */
	int marker_fd;		/* trace_marker, write only; -1 if it cannot be opened */
	uint32_t ncpus;
	int cpu_fd[VMT_MAX_CPUS];	/* per_cpu/cpuN/trace_pipe_raw, O_NONBLOCK */
	bool poll_ok;		/* buffer_percent is there */
	uint32_t buffer_kb;	/* per CPU, as the kernel set it; 0 unknown */
	char clock[32];		/* the instance's trace clock */
	char dir[256];		/* where it is, for messages */
};

/*
 * Fork the helper. Call before any thread starts (it runs library code
 * after fork). Without privilege it still runs and says so when asked to
 * set up. -errno if it cannot be made.
 */
int hostpriv_start(struct vmt_hostpriv **out);
/* An upgrade's successor: the helper's end handed over (fd, taken). It
 * says hello (its pid, its protocol version): -EPROTO and fd closed if it
 * speaks another version. */
int hostpriv_adopt(int fd, struct vmt_hostpriv **out);
/* The end to hand over to an upgrade's successor. */
int hostpriv_fd(const struct vmt_hostpriv *h);
/* Close the daemon's end (the helper exits) and reap it. NULL is fine. */
void hostpriv_free(struct vmt_hostpriv *h);

/* Make the instance with hc's events, clock, buffer and filters, tracing
 * off; the helper logs what failed. 0, or -errno with nothing left. */
int hostpriv_setup(struct vmt_hostpriv *h, const struct vmt_host_conf *hc,
		   struct vmt_hostpriv_inst *out);
/* tracing_on=1 */
int hostpriv_trace_on(struct vmt_hostpriv *h);
/* The host's task tables now (meta_tasks_validate's format) into *out. */
int hostpriv_tasks(struct vmt_hostpriv *h, struct vmt_buf *out);
/* Tracing off, events off, the instance removed: close its descriptors
 * first (an open trace_pipe_raw keeps it busy). */
int hostpriv_destroy(struct vmt_hostpriv *h);
void hostpriv_inst_close(struct vmt_hostpriv_inst *in);

/* The helper's side (hostpriv-tracefs.c): one request handled, its reply
 * sent on fd. 0 to go on; < 0 when the peer is gone or broke the protocol. */
int hostpriv_serve_one(int fd);

#endif
