/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include "afile.h"
#include "aux.h"
#include "log.h"
#include "util.h"
#include "writer.h"

void job_free(struct vmt_job *job)
{
	if (!job)
		return;
	if (job->release)
		job->release(job->release_arg);
	for (uint32_t c = 0; job->partial && c < job->sample.ncpus; c++)
		free(job->partial[c]);
	free(job->frames);
	free(job->partial);
	free(job->cut);
	free(job->iovs);
	free(job->sample.cpus);
	free(job->sample.tasks);
	clock_info_free(&job->sample.clock);
	free(job->pins);
	sindex_free(&job->index);
	aux_free(&job->aux);
	free(job);
}

static int mkdir_p(const char *dir)
{
	char p[PATH_MAX + 80];

	snprintf(p, sizeof(p), "%s", dir);
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		if (mkdir(p, 0750) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	if (mkdir(p, 0750) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static int job_run(struct vmt_job *job)
{
	char path[PATH_MAX + 400];
	struct vmt_afile a;
	struct stat st;
	int r;

	r = mkdir_p(job->dir);
	if (r < 0)
		return r;
	/*
	 * An aux file is queued ahead of each session's first sample, also
	 * when its version is on disk already (a reconnecting agent, a
	 * restarted daemon): here, after every retention pass queued before
	 * it, is where that can be known. A version always names the same
	 * content, so the file there is the one; it is not written again.
	 */
	snprintf(path, sizeof(path), "%s/%s", job->dir, job->name);
	if (job->kind == VMT_JOB_AUX && lstat(path, &st) == 0 && S_ISREG(st.st_mode)) {
		job->existed = 1;
		job->bytes = (uint64_t)st.st_size;
		return 0;
	}
	r = afile_create(&a, job->dir, job->name);
	if (r < 0)
		return r;
	if (job->kind == VMT_JOB_SAMPLE)
		r = sample_write(a.fd, &job->sample, job->zstd_level, job->zstd_workers);
	else
		r = aux_write(a.fd, &job->aux);
	if (r >= 0 && fstat(a.fd, &st) == 0)
		job->bytes = (uint64_t)st.st_size;
	if (r < 0) {
		afile_abort(&a);
		return r;
	}
	return afile_commit(&a);
}

/* The pass reads every sample's INFO anyway: what it leaves becomes the
 * index SAMPLES is answered from, here, out of the event loop. */
static void job_retention(struct vmt_job *job)
{
	struct vmt_store kept;

	if (!job->state_dir[0])
		return;
	memset(&job->ret, 0, sizeof(job->ret));
	sindex_free(&job->index);
	job->have_index = 0;
	job->ret_error = retention_apply_kept(job->state_dir, &job->retention, job->pins,
					      job->npins, now_realtime_ns() / 1000000000, &job->ret,
					      &kept);
	if (job->ret_error == 0)
		job->have_index = sindex_from_store(&job->index, &kept) == 0;
	retention_store_free(&kept);
}

/*
 * A sample is only worth keeping with the aux file that decodes it. The
 * aux job is queued ahead of the sample that needs it, so by now the file
 * is there, or writing it failed: then the sample fails too, with that
 * error, and the rings keep the window for the next dump.
 */
static int sample_aux_check(const struct vmt_job *job, const struct vmt_job *failed_aux)
{
	char name[64], path[PATH_MAX + 400];

	if (aux_file_name(name, sizeof(name), job->sample.aux_version) < 0)
		return 0;
	snprintf(path, sizeof(path), "%s/%s", job->dir, name);
	if (access(path, F_OK) == 0 || errno != ENOENT)
		return 0;
	if (failed_aux && !strcmp(failed_aux->dir, job->dir) && !strcmp(failed_aux->name, name))
		return failed_aux->error;
	return -ENOENT;
}

#define JOB_OF(j) ((struct vmt_job *)((char *)(j) - offsetof(struct vmt_job, wj)))

static void writer_start(unsigned thread, void *userdata)
{
	/* ingestion first: compression (and the zstd workers this thread
	 * starts, which inherit its nice value) takes what the loop leaves */
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10) < 0)
		log_debug("writer thread keeps its priority: %m");
}

static void writer_job(struct vmt_worker_job *wj, unsigned thread, void *userdata)
{
	struct vmt_writer *w = userdata;
	struct vmt_job *job = JOB_OF(wj), *failed_aux = &w->failed_aux;
	uint64_t t0 = now_monotonic_ns();

	if (job->kind == VMT_JOB_SAMPLE) {
		job->error = sample_aux_check(job, failed_aux->error ? failed_aux : NULL);
		job->aux_missing = job->error < 0;
	}
	if (job->kind != VMT_JOB_RETENTION && !job->error)
		job->error = job_run(job);
	if (job->error == -ENOSPC || job->error == -EDQUOT) {
		/* make room by the retention rules, then try once more */
		job_retention(job);
		job->retried = 1;
		job->error = job->aux_missing ? sample_aux_check(job, NULL) : job_run(job);
		if (job->aux_missing && job->error == -ENOENT)
			job->error = -ENOSPC;
	}
	if (job->kind == VMT_JOB_AUX) {
		failed_aux->error = job->error;
		if (job->error < 0) {
			snprintf(failed_aux->dir, sizeof(failed_aux->dir), "%s", job->dir);
			snprintf(failed_aux->name, sizeof(failed_aux->name), "%s", job->name);
		}
	}
	if (job->kind != VMT_JOB_AUX)
		job_retention(job);
	job->duration_ns = now_monotonic_ns() - t0;
}

static void writer_done(struct vmt_worker_job *wj, void *userdata)
{
	struct vmt_writer *w = userdata;

	w->pending--;
	w->done_fn(JOB_OF(wj), w->userdata);
	/* the last of a dump's files is written and its buffers freed: the
	 * free pages inside the heaps go back too (bench/README.md, memory) */
	if (!w->pending)
		malloc_trim(0);
}

/* never ran (start-up failed): what was queued is dropped */
static void writer_drop(struct vmt_worker_job *wj, void *userdata)
{
	struct vmt_writer *w = userdata;

	w->pending--;
	job_free(JOB_OF(wj));
}

static const struct vmt_worker_ops writer_ops = {
	.start = writer_start,
	.run = writer_job,
	.done = writer_done,
	.drop = writer_drop,
};

int writer_init(struct vmt_writer *w, sd_event *e,
		void (*fn)(struct vmt_job *job, void *userdata), void *userdata)
{
	memset(w, 0, sizeof(*w));
	w->done_fn = fn;
	w->userdata = userdata;
	return worker_init(&w->worker, e, &writer_ops, 1, w);
}

int writer_run(struct vmt_writer *w)
{
	return worker_run(&w->worker);
}

void writer_submit(struct vmt_writer *w, struct vmt_job *job)
{
	w->pending++;
	worker_submit(&w->worker, &job->wj);
}

void writer_stop(struct vmt_writer *w)
{
	worker_stop(&w->worker);
}
