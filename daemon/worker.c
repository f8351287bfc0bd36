/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "log.h"
#include "worker.h"

/* Under lock: the job pick chooses, off the queue; NULL when it is empty. */
static struct vmt_worker_job *queue_take(struct vmt_worker *w,
					 struct vmt_worker_job **(*pick)(struct vmt_worker_job **,
									 void *))
{
	struct vmt_worker_job **link, *j;

	if (!w->queue)
		return NULL;
	link = pick ? pick(&w->queue, w->userdata) : &w->queue;
	j = *link;
	*link = j->next;
	if (!j->next)
		w->queue_tail = link;
	return j;
}

/* Under lock: j to the loop. The head is stored atomically for
 * worker_collect()'s peek without the lock. */
static void done_put(struct vmt_worker *w, struct vmt_worker_job *j)
{
	j->next = NULL;
	__atomic_store_n(w->done_tail, j, __ATOMIC_RELEASE);
	w->done_tail = &j->next;
	(void)eventfd_write(w->efd, 1);	/* the counter does not overflow */
}

static void *worker_main(void *arg)
{
	struct vmt_worker_thread *t = arg;
	struct vmt_worker *w = t->w;

	if (w->ops->start)
		w->ops->start(t->index, w->userdata);
	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct vmt_worker_job *j;

		while (!w->queue && !w->stopping)
			pthread_cond_wait(&w->cond, &w->lock);
		j = queue_take(w, w->ops->pick);
		if (!j)
			break;	/* stopping, and the queue is done */
		pthread_mutex_unlock(&w->lock);

		w->ops->run(j, t->index, w->userdata);

		pthread_mutex_lock(&w->lock);
		done_put(w, j);
	}
	pthread_mutex_unlock(&w->lock);
	if (w->ops->stop)
		w->ops->stop(t->index, w->userdata);
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
	__atomic_store_n(&w->done, rest, __ATOMIC_RELAXED);
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

void worker_collect(struct vmt_worker *w)
{
	/* a racy peek: the eventfd brings what it misses */
	if (w->inited && __atomic_load_n(&w->done, __ATOMIC_ACQUIRE))
		worker_reap(w, w->ops->batch);
}

int worker_init(struct vmt_worker *w, sd_event *e, const struct vmt_worker_ops *ops,
		unsigned nthreads, void *userdata)
{
	int r = -ENOMEM;

	memset(w, 0, sizeof(*w));
	w->efd = -1;
	if (!nthreads)
		return -EINVAL;
	w->ops = ops;
	w->userdata = userdata;
	w->nthreads = nthreads;
	w->queue_tail = &w->queue;
	w->done_tail = &w->done;
	w->threads = calloc(nthreads, sizeof(*w->threads));
	if (!w->threads)
		goto fail;
	w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (w->efd < 0) {
		r = -errno;
		goto fail;
	}
	r = sd_event_add_io(e, &w->src, w->efd, EPOLLIN, worker_event, w);
	if (r >= 0 && ops->priority)
		r = sd_event_source_set_priority(w->src, ops->priority);
	if (r < 0)
		goto fail;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	w->inited = true;
	return 0;
fail:
	w->src = sd_event_source_unref(w->src);
	if (w->efd >= 0)
		close(w->efd);
	free(w->threads);
	memset(w, 0, sizeof(*w));
	w->efd = -1;
	return r;
}

int worker_run(struct vmt_worker *w)
{
	int r = 0;

	if (!w->inited || w->started)
		return -EINVAL;
	for (; w->nrunning < w->nthreads; w->nrunning++) {
		struct vmt_worker_thread *t = &w->threads[w->nrunning];

		*t = (struct vmt_worker_thread){ .w = w, .index = w->nrunning };
		r = -pthread_create(&t->id, NULL, worker_main, t);
		if (r < 0)
			break;
	}
	/* those started are joined by worker_stop(), which then hands back */
	w->started = w->nrunning > 0;
	return r;
}

int worker_run_manual(struct vmt_worker *w)
{
	if (!w->inited || w->started)
		return -EINVAL;
	w->started = w->manual = true;
	return 0;
}

bool worker_step(struct vmt_worker *w,
		 struct vmt_worker_job **(*pick)(struct vmt_worker_job **queue, void *userdata))
{
	struct vmt_worker_job *j;

	if (!w->inited || !w->manual)
		return false;
	pthread_mutex_lock(&w->lock);
	j = queue_take(w, pick ? pick : w->ops->pick);
	pthread_mutex_unlock(&w->lock);
	if (!j)
		return false;
	w->ops->run(j, 0, w->userdata);
	pthread_mutex_lock(&w->lock);
	done_put(w, j);
	pthread_mutex_unlock(&w->lock);
	return true;
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
	pthread_mutex_lock(&w->lock);
	done_put(w, j);
	pthread_mutex_unlock(&w->lock);
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
	if (w->manual) {
		while (worker_step(w, NULL))
			;
		worker_reap(w, 0);
	} else if (w->started) {
		pthread_mutex_lock(&w->lock);
		w->stopping = true;
		pthread_cond_broadcast(&w->cond);
		pthread_mutex_unlock(&w->lock);
		for (unsigned i = 0; i < w->nrunning; i++)
			pthread_join(w->threads[i].id, NULL);
		worker_reap(w, 0);
	} else {
		/* never ran (start-up failed, or a hand-back only) */
		worker_drop(w, w->done);
	}
	/* what is queued now no thread will run: submitted before any
	 * started, or by a done callback of the stop's */
	worker_drop(w, w->queue);
	w->src = sd_event_source_disable_unref(w->src);
	close(w->efd);
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
	free(w->threads);
	memset(w, 0, sizeof(*w));
	w->efd = -1;
}
