/* SPDX-License-Identifier: MIT */
/*
 * tracedat: writes trace-cmd's trace.dat, version 7 (man 5 trace-cmd.dat.v7),
 * from a guest's metadata bundle (meta.h) and its raw ftrace pages, so that
 * stock trace-cmd and KernelShark open it. Written from the format's
 * documentation; libtracecmd is only used to read the result in tests.
 *
 * Pages are taken by pointer, so a dump can hand in the pages of several
 * samples, duplicates left out, without copying them together first. A
 * host/guest merge will add TIME_SHIFT and GUEST options to the input.
 */
#ifndef VMT_TRACEDAT_H
#define VMT_TRACEDAT_H

#include <stddef.h>
#include <stdint.h>

struct vmt_tracedat_cpu {
	uint32_t cpu;
	const uint8_t *const *pages;	/* npages pointers to page_size bytes each */
	uint64_t npages;
	const char *stats;	/* per_cpu/cpuN/stats text for CPUSTAT, or NULL */
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
	int zstd_level;		/* 0 = "none" compression */
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
