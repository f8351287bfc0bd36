/* SPDX-License-Identifier: MIT */
/*
 * pump: one thread per CPU moving whole ring-buffer pages from
 * per_cpu/cpuN/trace_pipe_raw into the port trace-path-cpuN with splice(),
 * never through user space; and the flush that gives the host an exact cut:
 * for each CPU, bytes_sent and per_cpu/cpuN/stats are taken at the same point,
 * after the partial page went out and before anything more is consumed.
 *
 * Every flush_interval_ms, a CPU with events the host has not had yet sends
 * its partial page as well (read, not spliced: the kernel copies it and
 * the next read or splice goes on from there, so no event goes twice), so
 * that a guest that dies leaves its last second on the host, not the
 * seconds an idle CPU takes to fill a page.
 *
 * The control loop never blocks on a pump: it asks for a flush, and the
 * notify fd becomes readable when every CPU has answered.
 */
#ifndef VMT_AGENT_PUMP_H
#define VMT_AGENT_PUMP_H

#include <stdbool.h>
#include <stdint.h>

struct vmt_cpu_stats;
struct vmt_pumps;

/*
 * Opens every CPU's trace_pipe_raw and data port (ports_dir/trace-path-cpuN)
 * without starting anything, so that a START can fail before STARTED.
 * notify_fd: an eventfd the pumps write to when a flush completes.
 */
int pump_open(struct vmt_pumps **out, const char *tracing_dir, const char *ports_dir,
	      unsigned ncpus, unsigned page_size, int notify_fd, unsigned flush_interval_ms);
/* Starts the threads. */
int pump_run(struct vmt_pumps *p);

/*
 * Asks every CPU to flush; final: the threads exit after it (tracing_on
 * should be 0 by then so that the cut is the end). -EBUSY while a flush is
 * under way.
 */
int pump_flush(struct vmt_pumps *p, bool final);
/* 1 with st[0..ncpus) filled once the flush asked last is complete, else 0. */
int pump_flush_done(struct vmt_pumps *p, struct vmt_cpu_stats *st);
bool pump_flush_pending(struct vmt_pumps *p);

/* Stops the threads (at once, whether or not a final flush ran), closes, frees. */
void pump_close(struct vmt_pumps *p);

#endif
