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
static struct vmt_frame_ctx *worker_ctx(struct vmt_cworker *w, uint32_t codec, int level, size_t max_raw)
{
	if (codec >= ARRAY_SIZE(w->ctx))
		return NULL;
	if (w->ctx[codec] && w->levels[codec] != level) {
		frame_ctx_free(w->ctx[codec]);	/* the level changed (a reload) */
		w->ctx[codec] = NULL;
	}
	if (!w->ctx[codec]) {
		w->ctx[codec] = frame_ctx_new(codec, level, max_raw);
		w->levels[codec] = level;
	}
	return w->ctx[codec];
}

static void compress_one(struct vmt_compressor *c, struct vmt_cworker *w, struct vmt_cjob *j)
{
	const struct vmt_ring_batch *b = &j->b;
	struct vmt_iovec in = { w->in, 0 };
	struct vmt_frame_ctx *ctx;

	/* behind: the fill took its pages already; compressing them would
	 * only make the next ones later */
	if (!ring_batch_intact(b)) {
		j->len = -ECANCELED;
		return;
	}
	/* the fill may write the slots meanwhile: the copy is checked, then
	 * compressed (ring.h) */
	for (uint32_t i = 0; i < b->nruns; i++) {
		memcpy(w->in + in.len, b->runs[i].base, b->runs[i].len);
		in.len += b->runs[i].len;
	}
	if (!ring_batch_intact(b)) {
		j->len = -ECANCELED;
		return;
	}
	if (j->b.h.codec == VMT_FRAME_TCODE) {
		ctx = worker_ctx(w, VMT_FRAME_TCODE, j->level, c->max_raw);
		j->len = !ctx || frame_ctx_schema(ctx, j->schema ? j->schema->t : NULL) < 0 ? -ENOMEM :
			 frame_compress(ctx, &in, 1, j->out, j->cap);
		/* no schema (formats not in yet) or pages it cannot explain
		 * well enough: a zstd frame, counted (job_done) */
		if (j->len == -ENOKEY || j->len == -ENOSPC)
			j->b.h.codec = VMT_FRAME_ZSTD;
	}
	if (j->b.h.codec != VMT_FRAME_TCODE) {
		ctx = worker_ctx(w, j->b.h.codec, j->level, c->max_raw);
		j->len = ctx ? frame_compress(ctx, &in, 1, j->out, j->cap) : -ENOMEM;
	}
	/* not worth it: the pages go in as they are (the ring stores the
	 * payload it is given; a stored frame is as long as its pages) */
	if (j->len > 0 && (uint64_t)j->len >= in.len) {
		memcpy(j->out, in.base, in.len);
		j->b.h.codec = VMT_FRAME_NONE;
		j->len = (ssize_t)in.len;
	}
	/* the frame's check for a successor (ringmem.h), here rather than on the loop */
	j->crc = j->len > 0 && j->b.h.codec != VMT_FRAME_NONE ? crc32c(0, j->out, (size_t)j->len) : 0;
}

/* Under lock: the queued batch of the guest served least recently (the
 * oldest of its batches: a ring's come back in order), off the queue; or,
 * for a test, the one queued last. */
static struct vmt_cjob *queue_take(struct vmt_compressor *c, bool last)
{
	struct vmt_cjob **best = NULL, *j;

	for (struct vmt_cjob **p = &c->queue; *p; p = &(*p)->next)
		if (!best || (last ? true : (*p)->own->served < (*best)->own->served))
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

static void ctx_free_all(struct vmt_cworker *w)
{
	for (size_t i = 0; i < ARRAY_SIZE(w->ctx); i++) {
		frame_ctx_free(w->ctx[i]);
		w->ctx[i] = NULL;
	}
}

/* Under lock: w's CPU time into the sum status shows. */
static void cpu_account(struct vmt_compressor *c, struct vmt_cworker *w)
{
	uint64_t sum = 0;

	w->cpu_ns = thread_cpu_ns();
	for (uint32_t i = 0; i < c->nthreads; i++)
		sum += c->workers[i].cpu_ns;
	c->st.cpu_ns = sum;
}

static void *compress_main(void *arg)
{
	struct vmt_cworker *w = arg;
	struct vmt_compressor *c = w->c;

	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), COMPRESS_NICE) < 0)
		log_debug("compressor thread keeps its priority: %m");
	pthread_mutex_lock(&c->lock);
	for (;;) {
		struct vmt_cjob *j;

		while (!c->queue && !c->stopping)
			pthread_cond_wait(&c->cond, &c->lock);
		j = queue_take(c, false);
		if (!j)
			break;
		pthread_mutex_unlock(&c->lock);

		compress_one(c, w, j);

		pthread_mutex_lock(&c->lock);
		cpu_account(c, w);
		done_put(c, j);
	}
	pthread_mutex_unlock(&c->lock);
	ctx_free_all(w);
	return NULL;
}

int compressor_run_manual(struct vmt_compressor *c)
{
	if (!c->inited)
		return -EINVAL;
	c->started = c->manual = 1;
	return 0;
}

static bool manual_step(struct vmt_compressor *c, bool last)
{
	struct vmt_cjob *j;

	pthread_mutex_lock(&c->lock);
	j = c->manual ? queue_take(c, last) : NULL;
	pthread_mutex_unlock(&c->lock);
	if (!j)
		return false;
	compress_one(c, &c->workers[0], j);
	pthread_mutex_lock(&c->lock);
	done_put(c, j);
	pthread_mutex_unlock(&c->lock);
	return true;
}

bool compressor_step(struct vmt_compressor *c)
{
	return manual_step(c, false);
}

bool compressor_step_last(struct vmt_compressor *c)
{
	return manual_step(c, true);
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
	else if (j->codec == VMT_FRAME_TCODE && j->b.h.codec != VMT_FRAME_TCODE)
		c->st.tcode_fallback++;
	schema_unref(j->schema);
	j->schema = NULL;
	/* counted once taken: a batch the fill overtook is not a frame */
	if (r && ring_batch_end(r, &j->b, j->out, j->len, j->crc)) {
		c->st.frames++;
		c->st.bytes_in += (uint64_t)j->b.h.npages * j->b.page_size;
		c->st.bytes_out += (uint64_t)j->len;
	}
	ring_batch_put(&j->b);
	j->ring = NULL;
	j->state = VMT_CJOB_FREE;
	j->next = c->free;
	c->free = j;
	/* the rings that found no job free first, in turn */
	while (c->free && c->waiting.head) {
		const void *wo;
		uint32_t wc;
		int wl;
		struct vmt_ring *wr = ring_queue_pop(&c->waiting, &wo, &wc, &wl);

		compressor_poke(c, wo, wr, wc, wl);
	}
	/* a busy guest has its next batch due already */
	if (r && j->len >= 0)
		compressor_poke(c, owner, r, j->codec, j->level);
}

/* j is back: is a batch of its ring begun before it not taken in yet? */
static bool job_early(const struct vmt_compressor *c, const struct vmt_cjob *j)
{
	for (uint32_t i = 0; j->ring && i < c->njobs; i++) {
		const struct vmt_cjob *k = &c->jobs[i];

		if (k != j && k->ring == j->ring && k->state != VMT_CJOB_FREE && k->b.pos < j->b.pos)
			return true;
	}
	return false;
}

/* The parked jobs whose earlier batches are all taken in, in turn. */
static void parked_drain(struct vmt_compressor *c)
{
	struct vmt_cjob **p = &c->parked;

	while (*p) {
		struct vmt_cjob *j = *p;

		if (job_early(c, j)) {
			p = &j->next;
			continue;
		}
		*p = j->next;
		job_done(c, j);
		p = &c->parked;	/* it may have freed another's turn */
	}
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

		list->state = VMT_CJOB_PARKED;
		list->next = c->parked;
		c->parked = list;
		list = next;
	}
	parked_drain(c);
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

uint32_t compressor_threads_auto(long ncpus)
{
	return (uint32_t)VMT_MIN(VMT_MAX(ncpus / 2, 1), 4);
}

static void compressor_free_mem(struct vmt_compressor *c)
{
	for (uint32_t i = 0; c->jobs && i < c->njobs; i++) {
		free(c->jobs[i].out);
		schema_unref(c->jobs[i].schema);	/* one parked at the stop */
	}
	for (uint32_t i = 0; c->workers && i < c->nthreads; i++) {
		ctx_free_all(&c->workers[i]);	/* a manual run's */
		free(c->workers[i].in);
	}
	free(c->jobs);
	free(c->owners);
	free(c->workers);
}

int compressor_init(struct vmt_compressor *c, sd_event *e, uint32_t njobs, uint32_t nthreads,
		    size_t max_raw)
{
	size_t cap = VMT_MAX(frame_bound(VMT_FRAME_ZSTD, max_raw), frame_bound(VMT_FRAME_LZ4, max_raw));
	int r = -ENOMEM;

	memset(c, 0, sizeof(*c));
	c->efd = -1;
	if (!nthreads || nthreads > VMT_COMPRESS_THREADS_MAX || !njobs)
		return -EINVAL;
	c->queue_tail = &c->queue;
	c->done_tail = &c->done;
	ring_queue_init(&c->waiting);
	c->max_raw = max_raw;
	c->jobs = calloc(njobs, sizeof(*c->jobs));
	c->owners = calloc(njobs, sizeof(*c->owners));
	c->workers = calloc(nthreads, sizeof(*c->workers));
	if (!c->jobs || !c->owners || !c->workers)
		goto fail;
	c->njobs = njobs;
	c->nthreads = nthreads;
	for (uint32_t i = 0; i < njobs; i++) {
		struct vmt_cjob *j = &c->jobs[i];

		j->out = malloc(VMT_MAX(cap, max_raw));
		j->cap = VMT_MAX(cap, max_raw);
		if (!j->out)
			goto fail;
		j->next = c->free;
		c->free = j;
	}
	for (uint32_t i = 0; i < nthreads; i++) {
		c->workers[i].c = c;
		/* address space: a batch of 4 KiB pages touches 256 KiB of it */
		c->workers[i].in = malloc(max_raw ? max_raw : 1);
		if (!c->workers[i].in)
			goto fail;
	}
	c->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (c->efd < 0) {
		r = -errno;
		goto fail;
	}
	r = sd_event_add_io(e, &c->src, c->efd, EPOLLIN, compress_event, c);
	/* frames back before more pages are read: the fill overtakes a
	 * frame that waits */
	if (r >= 0)
		r = sd_event_source_set_priority(c->src, SD_EVENT_PRIORITY_IMPORTANT);
	if (r < 0)
		goto fail;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	c->inited = 1;
	return 0;
fail:
	c->src = sd_event_source_unref(c->src);
	compressor_free_mem(c);
	if (c->efd >= 0)
		close(c->efd);
	memset(c, 0, sizeof(*c));
	return r;
}

static void threads_stop(struct vmt_compressor *c)
{
	pthread_mutex_lock(&c->lock);
	c->stopping = 1;
	pthread_cond_broadcast(&c->cond);
	pthread_mutex_unlock(&c->lock);
	for (uint32_t i = 0; i < c->nrunning; i++)
		pthread_join(c->workers[i].thread, NULL);
	c->nrunning = 0;
}

int compressor_run(struct vmt_compressor *c)
{
	int r = 0;

	if (!c->inited)
		return -EINVAL;
	for (; c->nrunning < c->nthreads; c->nrunning++) {
		r = -pthread_create(&c->workers[c->nrunning].thread, NULL, compress_main,
				    &c->workers[c->nrunning]);
		if (r < 0)
			break;
	}
	if (r < 0) {
		threads_stop(c);
		c->stopping = 0;
		return r;
	}
	c->started = 1;
	return 0;
}

void compressor_poke(struct vmt_compressor *c, const void *owner, struct vmt_ring *r,
		     uint32_t codec, int level)
{
	bool queued = false;

	/* no worker yet (start-up): the pages stay raw until there is one;
	 * codec NONE (a reload to off) stores a compressed ring's batches as
	 * they are, through the workers too */
	if (!c || !c->started || c->stopping)
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
		/* its share taken: its batches wait (and are overwritten if
		 * they must), the free jobs stay for the other guests */
		o = owner_get(c, owner, false);
		if (o && o->inflight >= compressor_share(c)) {
			c->st.over_share++;
			break;
		}
		if (ring_batch_begin(r, &j->b) < 0)
			break;
		c->free = j->next;
		j->ring = r;
		j->state = VMT_CJOB_OUT;
		j->b.h.codec = j->codec = codec;
		j->level = level;
		j->schema = codec == VMT_FRAME_TCODE ? schema_ref(r->schema) : NULL;
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
	/* a parked job of r waited for one that will not come back to r */
	if (c)
		parked_drain(c);
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
		threads_stop(c);
		c->started = 0;
	}
	compress_reap(c);
	ring_queue_clear(&c->waiting);
	c->src = sd_event_source_unref(c->src);
	close(c->efd);
	compressor_free_mem(c);
	/* the guests are freed after this: compressor_forget finds no job */
	memset(c, 0, sizeof(*c));
}
