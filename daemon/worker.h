/* SPDX-License-Identifier: MIT */
/*
 * worker: one thread off the event loop, its job queue, and the done list
 * handed back to sd-event through an eventfd. Jobs run on the thread in
 * the order submitted; done jobs come back to the loop in the order they
 * were done, where ops->done runs. A thread of someone else's (libnats',
 * libvirt's) may hand a result to the loop the same way with
 * worker_hand_back(), without the worker's thread: the hand-back half
 * works whether or not worker_run() was called.
 *
 * The job is the caller's struct with a struct vmt_worker_job in it
 * (container_of); the worker never allocates nor frees one.
 */
#ifndef VMT_WORKER_H
#define VMT_WORKER_H

#include <pthread.h>
#include <stdbool.h>
#include <systemd/sd-event.h>

struct vmt_worker_job {
	struct vmt_worker_job *next;
};

struct vmt_worker_ops {
	/* on the thread, once, before the first job (its priority); may be NULL */
	void (*start)(void *userdata);
	/* on the thread, one job at a time, in submission order */
	void (*run)(struct vmt_worker_job *j, void *userdata);
	/* on the loop: a job done, or handed back */
	void (*done)(struct vmt_worker_job *j, void *userdata);
	/* a job the thread never ran (it never started) or a hand-back the
	 * loop never took, at worker_stop(); may be NULL */
	void (*drop)(struct vmt_worker_job *j, void *userdata);
	/* done callbacks per wake-up of the loop, the rest at the next turn
	 * (so a flood takes its turn with the loop's other inputs); 0: all */
	unsigned batch;
};

struct vmt_worker {
	const struct vmt_worker_ops *ops;
	void *userdata;
	pthread_t thread;
	pthread_mutex_t lock;	/* the queue, the done list, stopping */
	pthread_cond_t cond;
	struct vmt_worker_job *queue, **queue_tail;
	struct vmt_worker_job *done, **done_tail;
	bool stopping;
	int efd;
	sd_event_source *src;
	bool inited;		/* worker_init() done: jobs may be submitted */
	bool started;		/* worker_run() done: the thread takes them */
};

/* The queue and the hand-back, without the thread: jobs submitted now wait
 * for worker_run() (a thread started later: after privileges are dropped,
 * which are per thread; or never, for a hand-back only). 0 or -errno. */
int worker_init(struct vmt_worker *w, sd_event *e, const struct vmt_worker_ops *ops,
		void *userdata);
int worker_run(struct vmt_worker *w);
/* Any thread. */
void worker_submit(struct vmt_worker *w, struct vmt_worker_job *j);
/* Any thread: j to the loop's done callback, not run. */
void worker_hand_back(struct vmt_worker *w, struct vmt_worker_job *j);
/* On the loop. A worker whose thread ran finishes its queue, joins, and
 * hands every job back (done runs here); one whose thread never ran drops
 * what it holds (drop). Idempotent; w may be zeroed and never inited. */
void worker_stop(struct vmt_worker *w);

#endif
