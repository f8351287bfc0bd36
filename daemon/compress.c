/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "compress.h"
#include "log.h"
#include "util.h"

/* Beside the event loop, above the writer (10): a compressor that is late
 * costs window (batches stored as they are), and on a busy host a nicer
 * thread was late at 50 MB/s a guest (bench/README.md, window). */
#define COMPRESS_NICE 0

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The worker's context for codec at level, made on first use and kept. */
static struct vmt_frame_ctx *worker_ctx(struct vmt_compressor *c, uint32_t codec, int level)
{
	int *levels = c->levels;

	if (codec >= ARRAY_SIZE(c->ctx))
		return NULL;
	if (c->ctx[codec] && levels[codec] != level) {
		frame_ctx_free(c->ctx[codec]);	/* the level changed (a reload) */
		c->ctx[codec] = NULL;
	}
	if (!c->ctx[codec]) {
		c->ctx[codec] = frame_ctx_new(codec, level, c->max_raw);
		levels[codec] = level;
	}
	return c->ctx[codec];
}

static void compress_one(struct vmt_compressor *c, struct vmt_cjob *j)
{
	struct vmt_frame_ctx *ctx = worker_ctx(c, j->h.codec, j->level);
	const struct vmt_ring_hold *h = &j->hold;

	/* behind: the ring stored this batch as it was; compressing it now
	 * would only make the next ones later */
	if (ring_batch_overtaken(h, j->place)) {
		j->len = -ECANCELED;
		return;
	}
	j->len = ctx ? frame_compress(ctx, h->runs, h->nruns, j->out, j->cap) : -ENOMEM;
	/* not worth it: the pages go in as they are (the ring stores the
	 * payload it is given; a stored frame is as long as its pages) */
	if (j->len > 0 && (uint64_t)j->len >= (uint64_t)j->h.npages * h->page_size) {
		size_t off = 0;

		for (uint32_t i = 0; i < h->nruns; i++) {
			memcpy(j->out + off, h->runs[i].base, h->runs[i].len);
			off += h->runs[i].len;
		}
		j->h.codec = VMT_FRAME_NONE;
		j->len = (ssize_t)off;
	}
	/* the frame's check for a successor (ringmem.h), here rather than on the loop */
	j->crc = j->len > 0 && j->h.codec != VMT_FRAME_NONE ? crc32c(0, j->out, (size_t)j->len) : 0;
}

/* Under lock: the queued batch of the guest served least recently (the
 * oldest of its batches: a ring's come back in order), off the queue. */
static struct vmt_cjob *queue_take(struct vmt_compressor *c)
{
	struct vmt_cjob **best = NULL, *j;

	for (struct vmt_cjob **p = &c->queue; *p; p = &(*p)->next)
		if (!best || (*p)->own->served < (*best)->own->served)
			best = p;
	if (!best)
		return NULL;
	j = *best;
	*best = j->next;
	if (!j->next)
		c->queue_tail = best;
	j->own->served = ++c->tick;
	return j;
}

/* Under lock: j is done, to the loop. */
static void done_put(struct vmt_compressor *c, struct vmt_cjob *j)
{
	j->next = NULL;
	*c->done_tail = j;
	c->done_tail = &j->next;
	(void)eventfd_write(c->efd, 1);	/* the counter does not overflow */
}

static void ctx_free_all(struct vmt_compressor *c)
{
	for (size_t i = 0; i < ARRAY_SIZE(c->ctx); i++) {
		frame_ctx_free(c->ctx[i]);
		c->ctx[i] = NULL;
	}
}

static void *compress_main(void *arg)
{
	struct vmt_compressor *c = arg;

	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), COMPRESS_NICE) < 0)
		log_debug("compressor thread keeps its priority: %m");
	pthread_mutex_lock(&c->lock);
	for (;;) {
		struct vmt_cjob *j;

		while (!c->queue && !c->stopping)
			pthread_cond_wait(&c->cond, &c->lock);
		j = queue_take(c);
		if (!j)
			break;
		pthread_mutex_unlock(&c->lock);

		compress_one(c, j);

		pthread_mutex_lock(&c->lock);
		c->st.cpu_ns = thread_cpu_ns();
		done_put(c, j);
	}
	pthread_mutex_unlock(&c->lock);
	ctx_free_all(c);
	return NULL;
}

int compressor_run_manual(struct vmt_compressor *c)
{
	if (!c->inited)
		return -EINVAL;
	c->started = c->manual = 1;
	return 0;
}

bool compressor_step(struct vmt_compressor *c)
{
	struct vmt_cjob *j;

	pthread_mutex_lock(&c->lock);
	j = c->manual ? queue_take(c) : NULL;
	pthread_mutex_unlock(&c->lock);
	if (!j)
		return false;
	compress_one(c, j);
	pthread_mutex_lock(&c->lock);
	done_put(c, j);
	pthread_mutex_unlock(&c->lock);
	return true;
}

uint32_t compressor_share(const struct vmt_compressor *c)
{
	return VMT_MAX(c->njobs / (c->nowners + 1), 1u);
}

/* Under lock (the worker reads served): key's entry, taken if need be;
 * there is one free while a job is, as each entry in use holds a job. */
static struct vmt_cowner *owner_get(struct vmt_compressor *c, const void *key, bool take)
{
	struct vmt_cowner *spare = NULL;

	for (uint32_t i = 0; i < c->njobs; i++) {
		if (c->owners[i].key == key)
			return &c->owners[i];
		if (!c->owners[i].key && !spare)
			spare = &c->owners[i];
	}
	if (!take || !spare)
		return NULL;
	*spare = (struct vmt_cowner){ .key = key };
	c->nowners++;
	return spare;
}

static void owner_put(struct vmt_compressor *c, struct vmt_cowner *o)
{
	pthread_mutex_lock(&c->lock);
	if (--o->inflight == 0) {
		o->key = NULL;
		c->nowners--;
	}
	pthread_mutex_unlock(&c->lock);
}

/* A job is back on the loop: its frame into its ring, if the ring is still there. */
static void job_done(struct vmt_compressor *c, struct vmt_cjob *j)
{
	struct vmt_ring *r = j->ring;
	const void *owner = j->own->key;

	owner_put(c, j->own);
	j->own = NULL;
	if (j->len == -ECANCELED)
		c->st.skipped++;
	else if (j->len < 0)
		c->st.errors++;
	/* counted once taken: a batch spilled meanwhile is not a frame */
	if (r && ring_batch_end(r, j->gen, &j->h, j->out, j->len, j->crc)) {
		c->st.frames++;
		c->st.bytes_in += (uint64_t)j->h.npages * j->hold.page_size;
		c->st.bytes_out += (uint64_t)j->len;
	}
	ring_release(&j->hold);
	j->ring = NULL;
	j->next = c->free;
	c->free = j;
	if (r)
		ring_settle_slots(r);
	/* the rings that found no job free first, in turn */
	while (c->free && c->waiting.head) {
		const void *wo;
		uint32_t wc;
		int wl;
		struct vmt_ring *w = ring_queue_pop(&c->waiting, &wo, &wc, &wl);

		compressor_poke(c, wo, w, wc, wl);
	}
	/* a busy guest has its next batch due already */
	if (r && j->len >= 0)
		compressor_poke(c, owner, r, j->codec, j->level);
	/* a reader that found its next slot held by this batch and no reserve
	 * page for it waits for this */
	if (c->released)
		c->released(c->userdata);
}

static void compress_reap(struct vmt_compressor *c)
{
	struct vmt_cjob *list;

	if (!c->done)	/* a racy peek: the eventfd brings what it misses */
		return;
	pthread_mutex_lock(&c->lock);
	list = c->done;
	c->done = NULL;
	c->done_tail = &c->done;
	pthread_mutex_unlock(&c->lock);
	while (list) {
		struct vmt_cjob *next = list->next;

		job_done(c, list);
		list = next;
	}
}

void compressor_collect(struct vmt_compressor *c)
{
	if (c && c->started)
		compress_reap(c);
}

static int compress_event(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	uint64_t v;

	if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		log_warning_errno(-errno, "compressor eventfd: %m");
	compress_reap(userdata);
	return 0;
}

int compressor_init(struct vmt_compressor *c, sd_event *e, uint32_t njobs, size_t max_raw,
		    void (*released)(void *userdata), void *userdata)
{
	size_t cap = VMT_MAX(frame_bound(VMT_FRAME_ZSTD, max_raw), frame_bound(VMT_FRAME_LZ4, max_raw));
	int r;

	memset(c, 0, sizeof(*c));
	c->queue_tail = &c->queue;
	c->done_tail = &c->done;
	ring_queue_init(&c->waiting);
	c->max_raw = max_raw;
	c->released = released;
	c->userdata = userdata;
	c->jobs = calloc(njobs, sizeof(*c->jobs));
	c->owners = calloc(njobs, sizeof(*c->owners));
	if (!c->jobs || !c->owners) {
		free(c->jobs);
		free(c->owners);
		memset(c, 0, sizeof(*c));
		return -ENOMEM;
	}
	c->njobs = njobs;
	for (uint32_t i = 0; i < njobs; i++) {
		struct vmt_cjob *j = &c->jobs[i];

		j->out = malloc(VMT_MAX(cap, max_raw));
		j->cap = VMT_MAX(cap, max_raw);
		if (!j->out)
			goto oom;
		j->next = c->free;
		c->free = j;
	}
	c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (c->efd < 0) {
		r = -errno;
		goto fail;
	}
	r = sd_event_add_io(e, &c->src, c->efd, EPOLLIN, compress_event, c);
	/* frames back before more pages are read: the raw slots take only a
	 * few callbacks' reading before they spill */
	if (r >= 0)
		r = sd_event_source_set_priority(c->src, SD_EVENT_PRIORITY_IMPORTANT);
	if (r < 0)
		goto fail;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	c->inited = 1;
	return 0;
oom:
	r = -ENOMEM;
fail:
	for (uint32_t i = 0; i < njobs; i++)
		free(c->jobs[i].out);
	free(c->jobs);
	free(c->owners);
	if (c->efd >= 0)
		close(c->efd);
	memset(c, 0, sizeof(*c));
	return r;
}

int compressor_run(struct vmt_compressor *c)
{
	int r;

	if (!c->inited)
		return -EINVAL;
	r = -pthread_create(&c->thread, NULL, compress_main, c);
	if (r == 0)
		c->started = 1;
	return r;
}

void compressor_poke(struct vmt_compressor *c, const void *owner, struct vmt_ring *r,
		     uint32_t codec, int level)
{
	bool queued = false;

	/* no worker yet (start-up): the pages stay raw until there is one */
	if (!c || !c->started || c->stopping || codec == VMT_FRAME_NONE)
		return;
	while (ring_batch_due(r)) {
		struct vmt_cjob *j = c->free;
		struct vmt_cowner *o;

		if ((size_t)r->batch * r->layout.page_size > c->max_raw) {
			c->st.busy++;
			break;
		}
		if (!j) {
			c->st.busy++;
			ring_queue_push(&c->waiting, r, owner, codec, level);
			break;
		}
		/* its share taken: its batches wait (and go raw if they must),
		 * the free jobs stay for the other guests */
		o = owner_get(c, owner, false);
		if (o && o->inflight >= compressor_share(c)) {
			c->st.over_share++;
			break;
		}
		if (ring_batch_begin(r, &j->hold, &j->h, j->place) < 0)
			break;
		c->free = j->next;
		j->ring = r;
		j->gen = r->batch_gen;
		j->h.codec = j->codec = codec;
		j->level = level;
		j->len = 0;
		pthread_mutex_lock(&c->lock);
		if (!o)
			o = owner_get(c, owner, true);
		o->inflight++;
		j->own = o;
		j->next = NULL;
		*c->queue_tail = j;
		c->queue_tail = &j->next;
		pthread_mutex_unlock(&c->lock);
		queued = true;
	}
	if (queued && !c->manual) {
		pthread_mutex_lock(&c->lock);
		pthread_cond_signal(&c->cond);
		pthread_mutex_unlock(&c->lock);
	}
}

void compressor_forget(struct vmt_compressor *c, struct vmt_ring *r)
{
	if (c)
		ring_queue_remove(&c->waiting, r);
	for (uint32_t i = 0; c && i < c->njobs; i++)
		if (c->jobs[i].ring == r)
			c->jobs[i].ring = NULL;
}

void compressor_stop(struct vmt_compressor *c)
{
	if (!c->inited)
		return;
	if (c->manual) {
		while (compressor_step(c))
			;
		c->started = 0;
	} else if (c->started) {
		pthread_mutex_lock(&c->lock);
		c->stopping = 1;
		pthread_cond_signal(&c->cond);
		pthread_mutex_unlock(&c->lock);
		pthread_join(c->thread, NULL);
		c->started = 0;
	}
	compress_reap(c);
	ring_queue_clear(&c->waiting);
	c->src = sd_event_source_unref(c->src);
	close(c->efd);
	for (uint32_t i = 0; i < c->njobs; i++)
		free(c->jobs[i].out);
	free(c->jobs);
	free(c->owners);
	ctx_free_all(c);	/* a manual run's */
	/* the guests are freed after this: compressor_forget finds no job */
	memset(c, 0, sizeof(*c));
}
