/* SPDX-License-Identifier: MIT */
/*
 * hostsrc-int: what hostsrc.c (the instance, its events and metadata, the
 * "host" guest, its life cycle) and hostsrc-read.c (each CPU's
 * trace_pipe_raw read into the rings) share. Not for other modules.
 */
#ifndef VMT_HOSTSRC_INT_H
#define VMT_HOSTSRC_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "guest.h"
#include "hostpriv.h"
#include "hostsrc.h"

#define HOST_GUEST "host"

struct vmt_hostsrc_cpu {
	struct vmt_hostsrc *h;
	uint32_t cpu;
	int fd;			/* per_cpu/cpuN/trace_pipe_raw, -1 if none */
	int pipe[2];
	size_t in_pipe;		/* spliced bytes not yet in the ring */
	sd_event_source *src;
	bool broken;		/* reading failed: logged once, stopped */
	bool paused;		/* the ring's next page is held, no reserve: hostsrc_resume */
	unsigned rejected_logged;
	unsigned empty_wakeups;	/* in a row */
};

struct vmt_hostsrc {
	const struct vmt_guest_env *env;
	struct vmt_hostpriv *hp;	/* the helper that made the instance */
	struct vmt_hostpriv_inst in;	/* what it handed back; cpu_fd[] move to cpus[] */
	bool set_up;		/* the helper made it: it removes it at the end */
	struct vmt_guest *g;
	uint32_t ncpus, page_size;
	uint32_t pipe_pages;
	uint32_t kernel_pages;	/* per CPU: bounds a flush */
	struct vmt_hostsrc_cpu *cpus;
	sd_event_source *timer;	/* when trace_pipe_raw cannot be polled */
};

/* hostsrc.c */
/* The host's task tables into its guest, for a dump (a flush). */
void hostsrc_tasks(struct vmt_hostsrc *h);

/* hostsrc-read.c */
/* Take each CPU's trace_pipe_raw from h->in, make its splice pipe; -errno, logged. */
int hostsrc_open(struct vmt_hostsrc *h);
/* Read as pages come: poll on trace_pipe_raw, else a timer. */
int hostsrc_watch(struct vmt_hostsrc *h);
/* Stop reading: what hostsrc_open and hostsrc_watch set up is closed. */
void hostsrc_close(struct vmt_hostsrc *h);

#endif
