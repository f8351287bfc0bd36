/* SPDX-License-Identifier: MIT */
/*
 * worker: threads off the event loop, their job queue, and the done list
 * handed back to sd-event through an eventfd, where ops->done runs. The
 * writer, the compressor, the fleet uploader and lvmeta are built on it.
 *
 * Which job a thread takes next is ops->pick's, under the worker's lock;
 * without one, the head: a worker of one thread runs its jobs in the order
 * submitted and hands them back in that order (the writer's contract).
 * With several threads, jobs come back in the order they were done.
 *
 * A thread of someone else's (libnats', libvirt's) may hand a result to
 * the loop the same way with worker_hand_back(), without the worker's
 * threads: the hand-back half works whether or not worker_run() was called.
 *
 * The job is the caller's struct with a struct vmt_worker_job in it
 * (container_of); the worker never allocates nor frees one.
 */
#ifndef VMT_WORKER_H
#define VMT_WORKER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

struct vmt_worker_job {
	struct vmt_worker_job *next;
};

/* thread: the thread's index, 0 .. nthreads-1, for state of its own */
struct vmt_worker_ops {
	/* on each thread, once, before its first job (its priority); may be NULL */
	void (*start)(unsigned thread, void *userdata);
	/* on a thread, one job at a time, as picked */
	void (*run)(struct vmt_worker_job *j, unsigned thread, void *userdata);
	/* on each thread, once, after its last job (at worker_stop); may be NULL */
	void (*stop)(unsigned thread, void *userdata);
	/* on the loop: a job done, or handed back */
	void (*done)(struct vmt_worker_job *j, void *userdata);
	/* a job the threads never ran (none started, or one a done callback
	 * submitted during worker_stop) or a hand-back the loop never took,
	 * at worker_stop(); may be NULL */
	void (*drop)(struct vmt_worker_job *j, void *userdata);
	/* which queued job a thread takes next: the link that points at it,
	 * of a queue (*queue) that is not empty. Under the worker's lock, on
	 * the thread that takes it: it may read and write what the jobs and
	 * the caller share under that lock, and calls no worker_*(). NULL:
	 * the head. */
	struct vmt_worker_job **(*pick)(struct vmt_worker_job **queue, void *userdata);
	/* done callbacks per wake-up of the loop, the rest at the next turn
	 * (so a flood takes its turn with the loop's other inputs); 0: all */
	unsigned batch;
	/* the done source's sd-event priority (0: SD_EVENT_PRIORITY_NORMAL) */
	int64_t priority;
};

struct vmt_worker_thread {
	struct vmt_worker *w;
	pthread_t id;
	unsigned index;
};

struct vmt_worker {
	const struct vmt_worker_ops *ops;
	void *userdata;
	struct vmt_worker_thread *threads;
	unsigned nthreads, nrunning;	/* asked for, started */
	pthread_mutex_t lock;	/* the queue, the done list, stopping */
	pthread_cond_t cond;
	struct vmt_worker_job *queue, **queue_tail;
	struct vmt_worker_job *done, **done_tail;
	bool stopping;
	int efd;
	sd_event_source *src;
	bool inited;		/* worker_init() done: jobs may be submitted */
	bool started;		/* worker_run() or worker_run_manual() done: jobs are taken */
	bool manual;		/* worker_run_manual(): no thread, worker_step() runs them */
};

/* The queue and the hand-back for nthreads threads (at least 1), without
 * them: jobs submitted now wait for worker_run() (threads started later:
 * after privileges are dropped, which are per thread; or never, for a
 * hand-back only). 0 or -errno. */
int worker_init(struct vmt_worker *w, sd_event *e, const struct vmt_worker_ops *ops,
		unsigned nthreads, void *userdata);
/* Start the threads. -errno if one could not be: those started run until
 * worker_stop(). */
int worker_run(struct vmt_worker *w);
/* Any thread. */
void worker_submit(struct vmt_worker *w, struct vmt_worker_job *j);
/* Any thread: j to the loop's done callback, not run. */
void worker_hand_back(struct vmt_worker *w, struct vmt_worker_job *j);
/* On the loop: the done callbacks of what is back now (at most a batch),
 * without waiting for the eventfd's turn (a caller between reads of a busy
 * input). Cheap when nothing is. */
void worker_collect(struct vmt_worker *w);
/* On the loop. A worker whose threads ran (or a manual one) finishes its
 * queue, joins, and hands every job back (done runs here); one whose
 * threads never ran drops what it holds (drop). Idempotent; w may be
 * zeroed and never inited. */
void worker_stop(struct vmt_worker *w);

/* Tests: no thread. worker_step() takes the job pick chooses (NULL: the
 * worker's own), runs it on the caller's thread as thread 0 (start and
 * stop are not called) and puts it on the done list, for worker_collect()
 * or the loop; false when nothing is queued or the worker is not manual.
 * worker_stop() runs what is left the same way. */
int worker_run_manual(struct vmt_worker *w);
bool worker_step(struct vmt_worker *w,
		 struct vmt_worker_job **(*pick)(struct vmt_worker_job **queue, void *userdata));

#endif
