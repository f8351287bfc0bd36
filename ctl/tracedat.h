/* SPDX-License-Identifier: MIT */
/*
 * tracedat: writes trace-cmd's trace.dat, version 7 (man 5 trace-cmd.dat.v7),
 * from a guest's metadata bundle (meta.h) and its raw ftrace pages, so that
 * stock trace-cmd and KernelShark open it. Written from the format's
 * documentation; libtracecmd is only used to read the result in tests.
 *
 * Pages are taken by pointer, so a dump can hand in the pages of several
 * samples, duplicates left out, without copying them together first. A
 * host/guest merge links the files as trace-cmd does: TRACEID in each,
 * GUEST options (vCPU -> host thread) in the host's, TIME_SHIFT (the clock
 * points, at least two per vCPU) in each guest's.
 */
#ifndef VMT_TRACEDAT_H
#define VMT_TRACEDAT_H

#include <stddef.h>
#include <stdint.h>

#include "clocksync.h"

struct vmt_tracedat_cpu {
	uint32_t cpu;
	const uint8_t *const *pages;	/* npages pointers to page_size bytes each */
	uint64_t npages;
	const char *stats;	/* per_cpu/cpuN/stats text for CPUSTAT, or NULL */
};

/* TIME_SHIFT of a guest's file: host time = guest time + offset, per vCPU. */
struct vmt_tracedat_shift {
	uint64_t peer_trace_id;	/* the host file's TRACEID */
	uint32_t ncpus;		/* vCPUs; each gets the points that apply to it */
	const struct vmt_sync_point *points;	/* clocksync.h; cpu VMT_SYNC_ALL_CPUS or a vCPU */
	uint32_t npoints;
};

/* GUEST option of the host's file: one per guest linked to it. */
struct vmt_tracedat_guest {
	const char *name;
	uint64_t trace_id;	/* the guest file's TRACEID */
	uint32_t nvcpus;
	const uint32_t *vcpu_tid;	/* host thread running vCPU i */
};

struct vmt_tracedat_input {
	const uint8_t *meta;	/* bundle: events/header_page, formats, kallsyms... */
	size_t meta_len;
	uint32_t page_size;	/* a power of two; header_page must fit it */
	uint32_t ncpus;		/* CPUCOUNT: CPUs of the traced machine; 0 = highest cpu + 1 */
	const char *clock;	/* trace clock name, e.g. "mono"; NULL: the one trace_clock marks */
	const char *uname;	/* UNAME option, or NULL */
	const struct vmt_tracedat_cpu *cpus;
	uint32_t nr_cpus;	/* entries in cpus, ascending cpu */
	uint64_t trace_id;	/* TRACEID option, 0 = none */
	const struct vmt_tracedat_shift *shift;	/* guest file: TIME_SHIFT, or NULL */
	const struct vmt_tracedat_guest *guests;	/* host file: GUEST options */
	uint32_t nguests;
	int zstd_level;		/* 0 = "none" compression */
	/*
	 * Pages on demand, one CPU at a time (NULL: cpus[] hold them all):
	 * before cpus[i] is written, load() gives its pages (0, or -errno to
	 * fail the file); after, unload() lets them go. cpus[i].pages is then
	 * not read.
	 */
	int (*load)(void *arg, uint32_t i, const uint8_t *const **pages, uint64_t *npages);
	void (*unload)(void *arg, uint32_t i);
	void *load_arg;
};

/*
 * Write the whole file to fd, starting at its current position. fd must be
 * seekable and not O_APPEND: section sizes and the options offset are
 * patched in place. 0 or -errno; -EBADMSG if the bundle lacks what the
 * format needs, -EINVAL for bad arguments, -ESPIPE for a pipe (why says
 * what, if given).
 */
int tracedat_write(int fd, const struct vmt_tracedat_input *in, char *why, size_t why_len);

#endif
