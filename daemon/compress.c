/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>

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

#define CJOB(p) ((struct vmt_cjob *)((char *)(p) - offsetof(struct vmt_cjob, wj)))

/* The worker's pick, under its lock: the queued batch of the guest served
 * least recently (the oldest of its batches: a ring's come back in order). */
static struct vmt_worker_job **pick_served(struct vmt_worker_job **queue, void *userdata)
{
	struct vmt_compressor *c = userdata;
	struct vmt_worker_job **best = queue;

	for (struct vmt_worker_job **p = &(*queue)->next; *p; p = &(*p)->next)
		if (CJOB(*p)->own->served < CJOB(*best)->own->served)
			best = p;
	CJOB(*best)->own->served = ++c->tick;
	return best;
}

/* For a test: the batch queued last, as a second thread may finish a later
 * batch first. */
static struct vmt_worker_job **pick_last(struct vmt_worker_job **queue, void *userdata)
{
	struct vmt_compressor *c = userdata;
	struct vmt_worker_job **last = queue;

	while ((*last)->next)
		last = &(*last)->next;
	CJOB(*last)->own->served = ++c->tick;
	return last;
}

static void ctx_free_all(struct vmt_cworker *w)
{
	for (size_t i = 0; i < ARRAY_SIZE(w->ctx); i++) {
		frame_ctx_free(w->ctx[i]);
		w->ctx[i] = NULL;
	}
}

static void compress_start(unsigned thread, void *userdata)
{
	if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), COMPRESS_NICE) < 0)
		log_debug("compressor thread keeps its priority: %m");
}

static void compress_run(struct vmt_worker_job *wj, unsigned thread, void *userdata)
{
	struct vmt_compressor *c = userdata;
	struct vmt_cworker *w = &c->workers[thread];

	compress_one(c, w, CJOB(wj));
	/* a manual run's thread is the caller's: not the compressor's time */
	if (!c->manual)
		__atomic_store_n(&w->cpu_ns, thread_cpu_ns(), __ATOMIC_RELAXED);
}

static void compress_thread_stop(unsigned thread, void *userdata)
{
	struct vmt_compressor *c = userdata;

	ctx_free_all(&c->workers[thread]);
}

int compressor_run_manual(struct vmt_compressor *c)
{
	int r = c->inited ? worker_run_manual(&c->worker) : -EINVAL;

	if (r >= 0)
		c->started = c->manual = 1;
	return r;
}

bool compressor_step(struct vmt_compressor *c)
{
	return worker_step(&c->worker, NULL);
}

bool compressor_step_last(struct vmt_compressor *c)
{
	return worker_step(&c->worker, pick_last);
}

uint32_t compressor_share(const struct vmt_compressor *c)
{
	return VMT_MAX(c->njobs / (c->nowners + 1), 1u);
}

/* key's entry, taken if need be; there is one free while a job is, as
 * each entry in use holds a job. A spare one's served is no pick's: none
 * of its jobs is queued, and the job submitted next publishes the reset. */
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
	if (--o->inflight == 0) {
		o->key = NULL;
		c->nowners--;
	}
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

/* On the loop: a job is back from a worker, in the order they finished;
 * its ring's frames are taken in the order they were begun. */
static void compress_done(struct vmt_worker_job *wj, void *userdata)
{
	struct vmt_compressor *c = userdata;
	struct vmt_cjob *j = CJOB(wj);
	uint64_t sum = 0;

	for (uint32_t i = 0; i < c->nthreads; i++)
		sum += __atomic_load_n(&c->workers[i].cpu_ns, __ATOMIC_RELAXED);
	c->st.cpu_ns = sum;
	j->state = VMT_CJOB_PARKED;
	j->next = c->parked;
	c->parked = j;
	parked_drain(c);
}

static const struct vmt_worker_ops compress_ops = {
	.start = compress_start,
	.run = compress_run,
	.stop = compress_thread_stop,
	.done = compress_done,
	/* no drop: a job is submitted only once the threads run */
	.pick = pick_served,
	/* frames back before more pages are read: the fill overtakes a
	 * frame that waits */
	.priority = SD_EVENT_PRIORITY_IMPORTANT,
};

void compressor_collect(struct vmt_compressor *c)
{
	if (c && c->started)
		worker_collect(&c->worker);
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
	if (!nthreads || nthreads > VMT_COMPRESS_THREADS_MAX || !njobs)
		return -EINVAL;
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
		/* address space: a batch of 4 KiB pages touches 256 KiB of it */
		c->workers[i].in = malloc(max_raw ? max_raw : 1);
		if (!c->workers[i].in)
			goto fail;
	}
	r = worker_init(&c->worker, e, &compress_ops, nthreads, c);
	if (r < 0)
		goto fail;
	c->inited = 1;
	return 0;
fail:
	compressor_free_mem(c);
	memset(c, 0, sizeof(*c));
	return r;
}

int compressor_run(struct vmt_compressor *c)
{
	/* threads that did start are joined by compressor_stop() */
	int r = c->inited ? worker_run(&c->worker) : -EINVAL;

	if (r >= 0)
		c->started = 1;
	return r;
}

void compressor_poke(struct vmt_compressor *c, const void *owner, struct vmt_ring *r,
		     uint32_t codec, int level)
{
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
		if (!o)
			o = owner_get(c, owner, true);
		o->inflight++;
		j->own = o;
		worker_submit(&c->worker, &j->wj);
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
	/* the jobs coming back now queue no more batches */
	c->stopping = 1;
	/* a manual run's queue on this thread; the threads' finished, joined;
	 * either way every job back through compress_done */
	worker_stop(&c->worker);
	ring_queue_clear(&c->waiting);
	compressor_free_mem(c);
	/* the guests are freed after this: compressor_forget finds no job */
	memset(c, 0, sizeof(*c));
}
