/* SPDX-License-Identifier: MIT */
/*
 * dump-int: what dump.c (requests, phases, freezing) and dump-write.c
 * (the writer's jobs and its answers) share. Not for other modules.
 */
#ifndef VMT_DUMP_INT_H
#define VMT_DUMP_INT_H

#include "dump.h"

/* dump.c: the current dump's last job is back: answer its clients, start
 * the next. */
void dump_finish(struct vmt_dumps *ds);

/* dump-freeze.c: g's window (span_ns 0: all of it) held in a sample job for
 * the writer, or NULL (nothing recorded yet; out of memory, counted). */
struct vmt_job *freeze_guest(struct vmt_dumps *ds, struct vmt_guest *g, const struct vmt_trigger *t,
			     uint32_t nt, uint64_t omitted, uint64_t dump_id, uint64_t span_ns);

/* dump-write.c */
/* What the writer needs to apply the retention rules after job. */
void dump_job_retention(struct vmt_dumps *ds, struct vmt_job *job);
/* Queue g's aux file (its bundle copied) ahead of the sample that needs it. */
void dump_submit_aux(struct vmt_dumps *ds, struct vmt_guest *g);
/* dump-prev.c: a previous boot's sample came back from the writer */
void dump_prev_done(struct vmt_dumps *ds, const struct vmt_job *job);

#endif
