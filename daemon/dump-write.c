/* SPDX-License-Identifier: MIT */
/*
 * dump-write: the dumps' side of the writer thread: the jobs queued
 * besides a sample (an aux file ahead of the first sample that needs it,
 * retention passes), and what the writer hands back (dump_writer_done):
 * the log, the sample index SAMPLES answers from, the dump's files.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dump-int.h"
#include "guest.h"
#include "log.h"

/* ---- retention ----------------------------------------------------------- */

/* What the writer needs to apply the retention rules after a job: the
 * limits, and the aux versions live sessions will still write samples for. */
void dump_job_retention(struct vmt_dumps *ds, struct vmt_job *job)
{
	snprintf(job->state_dir, sizeof(job->state_dir), "%s", ds->conf->state_dir);
	job->retention = ds->conf->retention;
	job->pins = calloc(ds->guests->n ? ds->guests->n : 1, sizeof(*job->pins));
	if (!job->pins)
		return;
	for (uint32_t i = 0; i < ds->guests->n; i++) {
		const struct vmt_guest *g = ds->guests->v[i];
		uint32_t version;

		if (!guest_aux_in_force(g, &version))
			continue;
		snprintf(job->pins[job->npins].guest, sizeof(job->pins[0].guest), "%s", guest_name(g));
		job->pins[job->npins++].aux_version = version;
	}
}

void dump_submit_retention(struct vmt_dumps *ds)
{
	struct vmt_job *job = calloc(1, sizeof(*job));

	if (!job)
		return;
	job->kind = VMT_JOB_RETENTION;
	dump_job_retention(ds, job);
	writer_submit(ds->writer, job);
}

static void log_retention(struct vmt_dumps *ds, const struct vmt_job *job)
{
	const struct vmt_retention_result *r = &job->ret;

	if (!job->state_dir[0])
		return;
	if (job->ret_error < 0 && job->ret_error != -ENOENT) {
		log_full(VMT_LOG_WARNING, job->ret_error, NULL, "retention: cannot scan %s: %m",
			 job->state_dir);
		return;
	}
	ds->retention_deleted += r->samples + r->aux;
	if (r->samples || r->aux || r->temps)
		log_info("retention: deleted %u sample(s), %u aux file(s) (%llu KiB), %u stale temporary file(s); "
			 "%u sample(s) kept (%llu KiB)",
			 r->samples, r->aux, (unsigned long long)(r->bytes >> 10), r->temps,
			 r->kept_samples, (unsigned long long)(r->kept_bytes >> 10));
	if (r->errors)
		log_full(VMT_LOG_WARNING, r->first_error, NULL, "retention: %u file(s) could not be deleted: %m",
			 r->errors);
	if (r->unmet)
		log_warning("retention: limits not met: what is left is needed by live sessions");
	if (r->unuploaded)
		log_warning("retention: max_bytes deleted %u sample(s) the fleet had not uploaded yet",
			    r->unuploaded);
}

/*
 * The index SAMPLES answers from, from what the writer saw: the list a
 * retention pass left, else the sample it just wrote. Jobs come back in
 * the order they were done, so the index follows the folder. A job queued
 * before a reload moved state_dir says nothing of the new one.
 */
static void index_update(struct vmt_dumps *ds, struct vmt_job *job)
{
	const struct vmt_sample *s = &job->sample;
	char path[PATH_MAX + 400];
	struct vmt_sindex_entry e = { .path = path };

	if (!job->state_dir[0] || strcmp(job->state_dir, ds->conf->state_dir))
		return;
	if (job->have_index) {
		sindex_take(ds->samples, &job->index);
		job->have_index = 0;
		return;
	}
	if (job->ret_error < 0)
		ds->samples->error = job->ret_error;
	if (job->kind != VMT_JOB_SAMPLE || job->error < 0)
		return;
	snprintf(path, sizeof(path), "%s/%s", job->dir, job->name);
	snprintf(e.guest, sizeof(e.guest), "%s", s->guest);
	e.created_ns = s->created_ns / 1000 * 1000;	/* as the name says it */
	e.bytes = job->bytes;
	e.aux_version = s->aux_version;
	e.text = s->ntriggers ? (char *)s->triggers[0].reason : NULL;
	if (sindex_add(ds->samples, &e) < 0)
		log_error_errno(-ENOMEM, "%s is not in the sample index until the next retention "
			       "pass: %m", path);
}

/*
 * At start, before any guest connects and anything is written: a daemon
 * killed between a sample's rename and the retention pass after it left
 * one sample too many, and its next dump must not add another. Run here,
 * in the loop's thread while the writer is idle, so that no session looks
 * up an aux file the pass is deleting. What it leaves is the first index
 * SAMPLES answers from.
 */
void dump_retention_now(struct vmt_dumps *ds)
{
	struct vmt_job job = { .kind = VMT_JOB_RETENTION };
	struct vmt_store kept;

	dump_job_retention(ds, &job);
	job.ret_error = retention_apply_kept(job.state_dir, &job.retention, job.pins, job.npins,
					     now_realtime_ns() / 1000000000, &job.ret, &kept);
	if (job.ret_error == 0)
		job.have_index = sindex_from_store(&job.index, &kept) == 0;
	retention_store_free(&kept);
	log_retention(ds, &job);
	index_update(ds, &job);
	free(job.pins);
	sindex_free(&job.index);
}

/* ---- aux files ---------------------------------------------------------- */

void dump_submit_aux(struct vmt_dumps *ds, struct vmt_guest *g)
{
	struct vmt_job *job;
	int r;

	if (!guest_aux_due(g))
		return;
	job = calloc(1, sizeof(*job));
	r = job ? guest_aux_copy(g, &job->aux) : -ENOMEM;
	if (r < 0) {
		free(job);
		log_guest(VMT_LOG_ERR, r, guest_name(g), "cannot queue the aux file: %m");
		return;
	}
	job->kind = VMT_JOB_AUX;
	snprintf(job->dir, sizeof(job->dir), "%s/%s", ds->conf->state_dir, guest_name(g));
	aux_file_name(job->name, sizeof(job->name), job->aux.version);
	writer_submit(ds->writer, job);
}

/* ---- the writer's answers ------------------------------------------------- */

void dump_writer_done(struct vmt_job *job, void *userdata)
{
	struct vmt_dumps *ds = userdata;
	char path[PATH_MAX + 400];
	char field[PATH_MAX + 420];
	const char *fields[2] = { field, NULL };

	snprintf(path, sizeof(path), "%s/%s", job->dir, job->name);
	log_retention(ds, job);
	/* before the dump's answer: who got it may ask for SAMPLES at once */
	index_update(ds, job);
	if (job->kind == VMT_JOB_RETENTION) {
		job_free(job);
		return;
	}
	if (job->kind == VMT_JOB_AUX) {
		struct vmt_guest *g = guest_list_find(ds->guests, job->aux.guest);
		bool again = g && guest_aux_holds(g, job->aux.id);

		if (job->error < 0) {
			log_full(VMT_LOG_ERR, job->error, NULL, "cannot write aux file %s: %m%s", path,
				 again ? "; the next dump tries again" : "");
		} else if (job->existed) {
			log_debug("%s is on disk already (%llu bytes)", path,
				  (unsigned long long)job->bytes);
		} else {
			log_info("wrote %s (%llu bytes)", path, (unsigned long long)job->bytes);
		}
		if (g)
			guest_aux_done(g, job->aux.id, job->error >= 0);
		job_free(job);
		return;
	}
	snprintf(field, sizeof(field), "SAMPLE=%s", path);
	if (job->sample.ntriggers && !strncmp(job->sample.triggers[0].reason, VMT_PREV_BOOT_REASON,
					      strlen(VMT_PREV_BOOT_REASON)))
		dump_prev_done(ds, job);
	if (job->error < 0) {
		ds->dump_errors++;
		char aux[64] = "";

		if (job->aux_missing)
			aux_file_name(aux, sizeof(aux), job->sample.aux_version);
		log_full(VMT_LOG_ERR, job->error, fields,
			 "cannot write sample %s%s%s%s: %m; the rings are untouched, the next dump tries again",
			 path, job->aux_missing ? ": its aux file " : "", aux,
			 job->aux_missing ? " could not be written" :
			 job->retried ? " (again after the retention rules made room)" : "");
	} else {
		uint64_t pages = 0;
		struct vmt_guest *g = guest_list_find(ds->guests, job->sample.guest);
		struct vmt_dump_guest *dg = g ? dump_guest_state(ds, g) : NULL;

		for (uint32_t c = 0; c < job->sample.ncpus; c++)
			pages += job->sample.cpus[c].npages;
		ds->samples_written++;
		if (dg)
			snprintf(dg->last_dump, sizeof(dg->last_dump), "%s", path);
		log_full(VMT_LOG_NOTICE, 0, fields, "wrote %s: %llu pages, %llu bytes, %llu ms", path,
			 (unsigned long long)pages, (unsigned long long)job->bytes,
			 (unsigned long long)(job->duration_ns / 1000000));
	}
	if (ds->cur && ds->cur->phase == VMT_DUMP_WRITE && job->dump_id == ds->cur->id) {
		struct vmt_dump *d = ds->cur;
		if (job->error < 0) {
			d->error = job->error;
		} else {
			char **f = realloc(d->files, (d->nfiles + 1) * sizeof(*f));
			if (f) {
				d->files = f;
				d->files[d->nfiles] = strdup(path);
				if (d->files[d->nfiles])
					d->nfiles++;
			}
		}
		if (!--d->jobs_left)
			dump_finish(ds);
	}
	job_free(job);
	/* its pages are free: rings take theirs back, paused reading goes on */
	for (uint32_t i = 0; i < ds->guests->n; i++)
		guest_resume(ds->guests->v[i]);
}
