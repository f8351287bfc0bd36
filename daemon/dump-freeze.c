/* SPDX-License-Identifier: MIT */
/*
 * dump-freeze: a guest's window frozen into a writer job. The guest holds
 * its window where it is (guest_hold_window: the pages up to its flush
 * target, or all, no page copied); the dump adds what it knows (which
 * dump, the triggers, the file's name and folder, the retention rules)
 * and queues the guest's aux file ahead of the sample when one is due.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dump-int.h"
#include "guest.h"
#include "log.h"

/* ---- freezing ----------------------------------------------------------- */

/* Sample names carry microseconds and must not collide. */
static uint64_t sample_time(struct vmt_dumps *ds)
{
	uint64_t t = now_realtime_ns();

	if (t / 1000 <= ds->last_sample_ns / 1000)
		t = (ds->last_sample_ns / 1000 + 1) * 1000;
	ds->last_sample_ns = t;
	return t;
}

/* The sample's header: what the dump knows (who asked, when, which dump). */
static void sample_header(struct vmt_dumps *ds, struct vmt_job *job, const struct vmt_trigger *t,
			  uint32_t nt, uint64_t omitted, uint64_t dump_id)
{
	struct vmt_sample *s = &job->sample;

	snprintf(s->host, sizeof(s->host), "%s", ds->hostname);
	s->created_ns = sample_time(ds);
	s->dump_id = dump_id;
	s->ntriggers = VMT_MIN(nt, VMT_SAMPLE_MAX_TRIGGERS);
	s->triggers_omitted = omitted;
	memcpy(s->triggers, t, s->ntriggers * sizeof(*t));
	sample_file_name(job->name, sizeof(job->name), s->guest, s->created_ns);
}

/* Raw pages of the window (the PAGES sections the writer compresses; frames
 * go as they are). Below this, zstd's worker threads cost more memory (a
 * context and buffers each) than they save time. */
#define ZSTD_WORKERS_FROM (16u << 20)

/*
 * Hold one guest's window in its rings for the writer (guest_hold_window):
 * up to its flush target when to_target, else every page. span_ns > 0
 * keeps only the events of the last span_ns before the newest event of
 * any CPU, the same start time on every CPU, cut inside the page (or the
 * frame) that straddles it.
 */
struct vmt_job *freeze_guest(struct vmt_dumps *ds, struct vmt_guest *g, const struct freeze_req *fr)
{
	const struct vmt_window_req wr = { .span_ns = fr->span_ns, .to_target = fr->to_target };
	struct vmt_dump_guest *dg;
	struct vmt_job *job = calloc(1, sizeof(*job));
	uint64_t raw = 0;
	int r = -ENOMEM;

	if (job)
		r = guest_hold_window(g, &wr, job, &raw);
	if (r == -ENOENT) {
		log_guest(VMT_LOG_NOTICE, 0, guest_name(g), "nothing recorded yet: no sample written");
		job_free(job);
		return NULL;
	}
	if (r < 0) {
		log_guest(VMT_LOG_ERR, r, guest_name(g), "cannot freeze the window: %m");
		job_free(job);
		ds->dump_errors++;
		return NULL;
	}
	job->kind = VMT_JOB_SAMPLE;
	job->dump_id = fr->dump_id;
	dump_job_retention(ds, job);
	job->zstd_level = ds->conf->zstd_level;
	job->zstd_workers = raw >= ZSTD_WORKERS_FROM ? 2 : 0;
	snprintf(job->dir, sizeof(job->dir), "%s/%s", ds->conf->state_dir, guest_name(g));
	sample_header(ds, job, fr->triggers, fr->ntriggers, fr->omitted, fr->dump_id);
	dg = dump_guest_state(ds, g);
	if (dg)
		dg->budget.last_dump_ns = now_monotonic_ns();
	/*
	 * Aux files are written only for samples: the first sample of a
	 * session (or the next, after a failed write) queues its aux ahead of
	 * it; the writer is FIFO, so the file is there first, or the sample
	 * fails with it. Once written, the bundle is dropped.
	 */
	dump_submit_aux(ds, g);
	return job;
}

/* The guest's window is about to be replaced (a new boot, new events, a
 * new shape): what the rings hold decodes only with what goes, so it is
 * written now, whole and without a flush, if the guest's budgets allow. */
bool dump_guest_window_replaced(struct vmt_dumps *ds, struct vmt_guest *g, const char *why)
{
	struct vmt_trigger t = { .kind = VMT_TRIGGER_GUEST, .time_ns = now_realtime_ns() };
	struct freeze_req fr = { .triggers = &t, .ntriggers = 1 };
	struct vmt_job *job;

	if (!dump_guest_may(ds, g))
		return false;
	snprintf(t.reason, sizeof(t.reason), "%s", why);
	job = freeze_guest(ds, g, &fr);
	if (job) {
		ds->dumps++;
		writer_submit(ds->writer, job);
	}
	return true;
}
