/* SPDX-License-Identifier: MIT */
/*
 * prev: the previous boot's trace kept in a persistent ring buffer (Linux
 * >= 6.12: `reserve_mem=12M:4096:trace trace_instance=boot_map@trace` on
 * the kernel command line maps the tracefs instance boot_map onto memory a
 * reboot leaves alone). At the agent's start, before anything is enabled
 * in that instance (which would wipe it), its pages are read
 * (per_cpu/cpuN/trace_pipe_raw) and held; after STREAM, if the host's
 * START asked for them, they go out as PREV_BEGIN, PREV_PAGES..., PREV_END.
 * Then the instance is set up to record this boot for the next one: the
 * session's clock and events. Read once per boot: a stamp in /run says an
 * agent of this boot has read it (a restarted agent would otherwise send
 * this boot's events as the previous one's).
 */
#ifndef VMT_AGENT_PREV_H
#define VMT_AGENT_PREV_H

#include <stdbool.h>
#include <stdint.h>

#include "proto.h"
#include "util.h"

#define VMT_PREV_INSTANCE "boot_map"
#define VMT_PREV_STAMP "/run/vmtrace-agent.prev"
#define VMT_PREV_MAX_BYTES (64u << 20)	/* held at most, all CPUs */
/* the region ends closer than this to the top of RAM: warned (lost at 512
 * MiB, 14 MiB below it; kept at 1 GiB, 22 MiB below it) */
#define VMT_PREV_GAP_MIN (16ull << 20)

struct vmt_prev {
	char dir[512];		/* the instance, "" when there is none */
	unsigned ncpus, page_size;
	struct vmt_prev_begin b;
	struct vmt_buf *cpu;	/* per CPU: whole pages, oldest first */
	int status;		/* 0, or -errno: the read was cut short */
	/* sending */
	bool sending, sent;
	unsigned cur_cpu;
	size_t cur_off;
	uint32_t sent_pages;
};

/* Finds the instance under tracefs and reads it unless this boot's stamp
 * is there; 0 (nothing found is no error) or -errno. */
int prev_read(struct vmt_prev *p, const char *tracefs, unsigned ncpus, unsigned page_size);
/* After START: the instance records what the top-level instance records
 * (the list and clock of s), for the next boot. Failures are logged. */
void prev_setup(struct vmt_prev *p, const struct vmt_start *s);
/* Pages to send? */
bool prev_pending(const struct vmt_prev *p);
/* Queue the next messages into out (a few at a time, so that answers to
 * the host are not stuck behind megabytes); true when PREV_END is queued. */
bool prev_queue(struct vmt_prev *p, struct vmt_buf *out);
void prev_free(struct vmt_prev *p);

#endif
