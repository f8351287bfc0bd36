/* SPDX-License-Identifier: MIT */
/*
 * ftrace: everything the agent does to the guest's top-level tracefs
 * instance through libtracefs: set-up for a START (tracing off, buffer size,
 * clock, enabled events, buffer clear), tracing_on, the metadata bundle the
 * host needs to decode pages, and per_cpu/cpuN/stats. Event lists, the
 * bundle and the task tables are lib/ftmeta's, shared with the host source.
 *
 * Only the top-level instance: `trace_event=` on the kernel command line
 * enables events there before the secondary CPUs run, and an event set that
 * already matches is left alone so that no kernel text gets patched at run
 * time (which can hang multi-threaded TCG guests).
 */
#ifndef VMT_AGENT_FTRACE_H
#define VMT_AGENT_FTRACE_H

#include <stddef.h>
#include <stdint.h>

struct vmt_buf;
struct vmt_start;
struct vmt_cpu_stats;

/* Finds tracefs (mounting it at /sys/kernel/tracing if needed); 0 or -errno. */
int ftrace_open(void);
/* The tracefs directory, valid after ftrace_open(). */
const char *ftrace_dir(void);

/* The clock in force ("local"), into buf; 0 or -errno. */
int ftrace_clock(char *buf, size_t size);

int ftrace_tracing_on(int on);
/* trace_marker of the top instance, write-only; fd or -errno (logged). */
int ftrace_marker_open(void);

/*
 * Everything a START asks for, in order: tracing_on=0, buffer size, clock,
 * events (unless VMT_START_KEEP_EVENTS), clear. On failure returns -errno
 * with a one-line reason in err. *changed is the number of event enable
 * files written (0 when the set already matched).
 */
int ftrace_setup(const struct vmt_start *s, unsigned *changed, char *err, size_t errlen);

/* Builds the metadata bundle (ftmeta_bundle) into b, kptr_restrict lowered
 * first; *files counts entries. Failures are logged. */
int ftrace_meta(struct vmt_buf *b, uint32_t *files);

/*
 * The task tables as they are now (saved_cmdlines, saved_tgids: a bundle
 * meta_tasks_validate() accepts) into b, emptied first. saved_tgids is left
 * out if both do not fit in VMT_TASKS_MAX; -EFBIG if saved_cmdlines alone
 * does not.
 */
int ftrace_tasks(struct vmt_buf *b);

/* Reads per_cpu/cpuN/stats into st (bytes_sent untouched). */
int ftrace_cpu_stats(unsigned cpu, struct vmt_cpu_stats *st);

/* Pure parser of a stats file's text: "name: value" lines, timestamps
 * "sec.usec" turned into ns. -EBADMSG if "read events" is missing. */
int ftrace_parse_stats(const char *text, size_t len, struct vmt_cpu_stats *st);

#endif
