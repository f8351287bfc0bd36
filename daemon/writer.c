/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
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
	for (uint32_t c = 0; job->holds && c < job->sample.ncpus; c++)
		ring_release(&job->holds[c]);
	free(job->holds);
	for (uint32_t c = 0; job->fholds && c < job->sample.ncpus; c++)
		frames_release(&job->fholds[c]);
	for (uint32_t c = 0; job->partial && c < job->sample.ncpus; c++)
		free(job->partial[c]);
	free(job->fholds);
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

static void *writer_main(void *arg)
{
	/* the last aux file that could not be written, for the samples after it */
	struct vmt_job failed_aux = { .error = 0 };

	struct vmt_writer *w = arg;

	/* ingestion first: compression (and the zstd workers this thread
	 * starts, which inherit its nice value) takes what the loop leaves */
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10) < 0)
		log_debug("writer thread keeps its priority: %m");

	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct vmt_job *job;
		uint64_t t0;

		while (!w->queue && !w->stopping)
			pthread_cond_wait(&w->cond, &w->lock);
		if (!w->queue)
			break;
		job = w->queue;
		w->queue = job->next;
		if (!w->queue)
			w->queue_tail = &w->queue;
		pthread_mutex_unlock(&w->lock);

		t0 = now_monotonic_ns();
		if (job->kind == VMT_JOB_SAMPLE) {
			job->error = sample_aux_check(job, failed_aux.error ? &failed_aux : NULL);
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
			failed_aux.error = job->error;
			if (job->error < 0) {
				snprintf(failed_aux.dir, sizeof(failed_aux.dir), "%s", job->dir);
				snprintf(failed_aux.name, sizeof(failed_aux.name), "%s", job->name);
			}
		}
		if (job->kind != VMT_JOB_AUX)
			job_retention(job);
		job->duration_ns = now_monotonic_ns() - t0;

		pthread_mutex_lock(&w->lock);
		job->next = NULL;
		*w->done_tail = job;
		w->done_tail = &job->next;
		(void)eventfd_write(w->efd, 1);	/* the counter does not overflow */
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

static void writer_reap(struct vmt_writer *w)
{
	struct vmt_job *list;

	pthread_mutex_lock(&w->lock);
	list = w->done;
	w->done = NULL;
	w->done_tail = &w->done;
	pthread_mutex_unlock(&w->lock);
	while (list) {
		struct vmt_job *next = list->next;
		w->pending--;
		w->done_fn(list, w->userdata);
		list = next;
	}
}

static int writer_event(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct vmt_writer *w = userdata;
	uint64_t v;

	if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		log_warning_errno(-errno, "writer eventfd: %m");
	writer_reap(w);
	return 0;
}

int writer_init(struct vmt_writer *w, sd_event *e,
		void (*fn)(struct vmt_job *job, void *userdata), void *userdata)
{
	int r;

	memset(w, 0, sizeof(*w));
	w->queue_tail = &w->queue;
	w->done_tail = &w->done;
	w->done_fn = fn;
	w->userdata = userdata;
	w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (w->efd < 0)
		return -errno;
	r = sd_event_add_io(e, &w->src, w->efd, EPOLLIN, writer_event, w);
	if (r < 0) {
		close(w->efd);
		w->efd = -1;
		return r;
	}
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	w->inited = 1;
	return 0;
}

int writer_run(struct vmt_writer *w)
{
	int r = -pthread_create(&w->thread, NULL, writer_main, w);

	if (r < 0)
		return r;
	w->started = 1;
	return 0;
}

void writer_submit(struct vmt_writer *w, struct vmt_job *job)
{
	job->next = NULL;
	pthread_mutex_lock(&w->lock);
	*w->queue_tail = job;
	w->queue_tail = &job->next;
	w->pending++;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

void writer_stop(struct vmt_writer *w)
{
	if (!w->inited)
		return;
	if (!w->started) {
		/* never ran (start-up failed): what was queued is dropped */
		while (w->queue) {
			struct vmt_job *j = w->queue;
			w->queue = j->next;
			job_free(j);
		}
		w->src = sd_event_source_unref(w->src);
		close(w->efd);
		w->inited = 0;
		return;
	}
	pthread_mutex_lock(&w->lock);
	w->stopping = 1;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	writer_reap(w);
	w->src = sd_event_source_unref(w->src);
	close(w->efd);
	w->started = 0;
	w->inited = 0;
}
