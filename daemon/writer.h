/* SPDX-License-Identifier: MIT */
/*
 * writer: the one thread that writes files, so the event loop never waits
 * on compression or fsync. Jobs (a sample, or an aux file) are done
 * in submission order, so an aux file is on disk before any sample that
 * needs it (an aux job whose file is there already leaves it as it is).
 * Finished jobs come back to the loop and the done callback runs there
 * (the thread, the queue and the hand-back are a worker, worker.h).
 */
#ifndef VMT_WRITER_H
#define VMT_WRITER_H

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "aux.h"
#include "retention.h"
#include "sample.h"
#include "sindex.h"
#include "vfile.h"
#include "worker.h"

enum vmt_job_kind { VMT_JOB_SAMPLE, VMT_JOB_AUX, VMT_JOB_RETENTION };

struct vmt_job {
	enum vmt_job_kind kind;
	char dir[PATH_MAX + 80];	/* state_dir/guest */
	char name[256];		/* file name in dir */
	int zstd_level;
	int zstd_workers;
	/* VMT_JOB_SAMPLE: cpus[].iov (in iovs) point at pages their maker
	 * holds where they are (a window's, in the rings), or at cut, a copy
	 * of each CPU's first page when --window cut it; cpus[].frames (in
	 * frames) at held frames, or after the frame --window cut, decoded,
	 * in partial[cpu]. job_free() calls release(release_arg), on the
	 * loop: the maker lets go of what it holds (NULL: nothing held). */
	struct vmt_sample sample;
	struct vmt_iovec *iovs;
	struct vmt_sample_frame *frames;
	uint8_t *cut;
	uint8_t **partial;	/* per CPU, or NULL */
	void (*release)(void *arg);
	void *release_arg;
	struct vmt_aux aux;	/* VMT_JOB_AUX */
	uint64_t dump_id;	/* which dump request it belongs to, 0 for none */
	/* retention, run after a sample (and alone as VMT_JOB_RETENTION) */
	char state_dir[PATH_MAX];
	struct vmt_retention_conf retention;
	struct vmt_aux_pin *pins;
	size_t npins;
	struct vmt_retention_result ret;
	int ret_error;
	/* the samples the pass left, for the loop's index (when have_index) */
	struct vmt_sindex index;
	int have_index;
	int retried;		/* the write failed, retention ran, it was tried again */
	int aux_missing;	/* a sample not written: its aux file is not there */
	int existed;		/* an aux file already there, left as it was */
	int error;		/* result, -errno */
	uint64_t bytes;		/* file size written */
	uint64_t duration_ns;
	struct vmt_worker_job wj;	/* the worker's */
};

struct vmt_writer {
	struct vmt_worker worker;
	void (*done_fn)(struct vmt_job *job, void *userdata);
	void *userdata;
	/* the last aux file that could not be written, for the samples after
	 * it: the thread's own */
	struct vmt_job failed_aux;
	unsigned pending;	/* submitted and not yet handed back (the loop's) */
};

/* The queue and the hand-back, without the thread: jobs submitted now wait
 * for writer_run(), which starts it (after the daemon has dropped its
 * privileges, which are per thread). */
int writer_init(struct vmt_writer *w, sd_event *e,
		void (*fn)(struct vmt_job *job, void *userdata), void *userdata);
int writer_run(struct vmt_writer *w);
void writer_submit(struct vmt_writer *w, struct vmt_job *job);
/* Finish the queued jobs, hand them back, join the thread. */
void writer_stop(struct vmt_writer *w);
/* In the event loop only: the job's release (what its maker holds), then
 * what the job owns. */
void job_free(struct vmt_job *job);

#endif
