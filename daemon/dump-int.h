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

/* dump.c: what the dumps keep of g (made on first use); NULL only when
 * out of memory. */
struct vmt_dump_guest *dump_guest_state(struct vmt_dumps *ds, const struct vmt_guest *g);

/* dump.c: a dump the guest caused: may it happen now? If not, it is
 * counted as suppressed (the guest's and the daemon's triggers_suppressed). */
bool dump_guest_may(struct vmt_dumps *ds, struct vmt_guest *g);

/* What one guest's sample is made of. */
struct freeze_req {
	const struct vmt_trigger *triggers;
	uint32_t ntriggers;
	uint64_t omitted;	/* triggers beyond the list */
	uint64_t dump_id;	/* 0: none (a guest's window about to be replaced) */
	uint64_t span_ns;	/* 0: all of it */
	bool to_target;		/* up to its flush target, if its FLUSHED came */
};
/* dump-freeze.c: g's window held in a sample job for the writer, or NULL
 * (nothing recorded yet; out of memory, counted). */
struct vmt_job *freeze_guest(struct vmt_dumps *ds, struct vmt_guest *g, const struct freeze_req *fr);

/* dump-write.c */
/* What the writer needs to apply the retention rules after job. */
void dump_job_retention(struct vmt_dumps *ds, struct vmt_job *job);
/* Queue g's aux file (its bundle copied) ahead of the sample that needs
 * it, if its bundle waits for one and no copy is queued already. */
void dump_submit_aux(struct vmt_dumps *ds, struct vmt_guest *g);
/* dump-prev.c: a previous boot's sample came back from the writer */
void dump_prev_done(struct vmt_dumps *ds, const struct vmt_job *job);

#endif
