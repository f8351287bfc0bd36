/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"
#include "worker.h"

static void *worker_main(void *arg)
{
	struct vmt_worker *w = arg;

	if (w->ops->start)
		w->ops->start(w->userdata);
	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct vmt_worker_job *j;

		while (!w->queue && !w->stopping)
			pthread_cond_wait(&w->cond, &w->lock);
		if (!w->queue)
			break;	/* stopping, and the queue is done */
		j = w->queue;
		w->queue = j->next;
		if (!w->queue)
			w->queue_tail = &w->queue;
		pthread_mutex_unlock(&w->lock);

		w->ops->run(j, w->userdata);

		pthread_mutex_lock(&w->lock);
		j->next = NULL;
		*w->done_tail = j;
		w->done_tail = &j->next;
		(void)eventfd_write(w->efd, 1);	/* the counter does not overflow */
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

/* The done list to the loop's callback, at most max of it (0: all); the
 * eventfd is written again when some is left. */
static void worker_reap(struct vmt_worker *w, unsigned max)
{
	struct vmt_worker_job *list, *rest = NULL, **tail;
	unsigned n = 0;

	pthread_mutex_lock(&w->lock);
	list = w->done;
	for (tail = &list; *tail && (!max || n < max); tail = &(*tail)->next)
		n++;
	if (*tail) {
		rest = *tail;
		*tail = NULL;
	}
	w->done = rest;
	if (!rest)
		w->done_tail = &w->done;
	else
		(void)eventfd_write(w->efd, 1);
	pthread_mutex_unlock(&w->lock);
	while (list) {
		struct vmt_worker_job *next = list->next;

		w->ops->done(list, w->userdata);
		list = next;
	}
}

static int worker_event(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct vmt_worker *w = userdata;
	uint64_t v;

	if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		log_warning_errno(-errno, "worker eventfd: %m");
	worker_reap(w, w->ops->batch);
	return 0;
}

int worker_init(struct vmt_worker *w, sd_event *e, const struct vmt_worker_ops *ops,
		void *userdata)
{
	int r;

	memset(w, 0, sizeof(*w));
	w->ops = ops;
	w->userdata = userdata;
	w->queue_tail = &w->queue;
	w->done_tail = &w->done;
	w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (w->efd < 0)
		return -errno;
	r = sd_event_add_io(e, &w->src, w->efd, EPOLLIN, worker_event, w);
	if (r < 0) {
		close(w->efd);
		w->efd = -1;
		return r;
	}
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	w->inited = true;
	return 0;
}

int worker_run(struct vmt_worker *w)
{
	int r = -pthread_create(&w->thread, NULL, worker_main, w);

	if (r < 0)
		return r;
	w->started = true;
	return 0;
}

void worker_submit(struct vmt_worker *w, struct vmt_worker_job *j)
{
	j->next = NULL;
	pthread_mutex_lock(&w->lock);
	*w->queue_tail = j;
	w->queue_tail = &j->next;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

void worker_hand_back(struct vmt_worker *w, struct vmt_worker_job *j)
{
	j->next = NULL;
	pthread_mutex_lock(&w->lock);
	*w->done_tail = j;
	w->done_tail = &j->next;
	pthread_mutex_unlock(&w->lock);
	(void)eventfd_write(w->efd, 1);	/* the counter does not overflow */
}

static void worker_drop(struct vmt_worker *w, struct vmt_worker_job *list)
{
	while (list) {
		struct vmt_worker_job *next = list->next;

		if (w->ops->drop)
			w->ops->drop(list, w->userdata);
		list = next;
	}
}

void worker_stop(struct vmt_worker *w)
{
	if (!w->inited)
		return;
	if (w->started) {
		pthread_mutex_lock(&w->lock);
		w->stopping = true;
		pthread_cond_signal(&w->cond);
		pthread_mutex_unlock(&w->lock);
		pthread_join(w->thread, NULL);
		worker_reap(w, 0);
	} else {
		/* never ran (start-up failed, or a hand-back only) */
		worker_drop(w, w->queue);
		worker_drop(w, w->done);
	}
	w->queue = w->done = NULL;
	w->src = sd_event_source_disable_unref(w->src);
	close(w->efd);
	w->efd = -1;
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
	w->started = false;
	w->inited = false;
}
