/* SPDX-License-Identifier: MIT */
/*
 * compress: the workers that turn a compressed ring's raw pages into
 * frames, off the event loop.
 *
 * nthreads threads (a worker, worker.h: its pick is the fair share below,
 * its hand-back ahead of the loop's other inputs), at the event loop's
 * priority, each with one compression context per codec made on first use
 * and kept and a buffer a batch is copied into; a fixed set of jobs whose output buffers are
 * allocated once: memory does not grow with the guests. A batch holds no
 * page (ring.h): the worker copies its pages out, checks that the fill did
 * not overwrite them meanwhile (else it is skipped, counted), and
 * compresses the copy; the frame replaces the pages back on the loop
 * (ring_batch_end), a ring's batches in the order they were begun even
 * when two threads finish them the other way round. The fill never waits
 * for a worker: a page no worker took in time is overwritten and counted,
 * as in a raw ring.
 *
 * The jobs are shared fairly among the guests (owners): one may hold at
 * most its share of them (compressor_share) so that a guest streaming flat
 * out leaves jobs free for the others' batches, and the workers take the
 * queued batch of the guest served least recently, not the oldest: a
 * guest's pages are overwritten uncompressed for its own excess, never for
 * a neighbour's. A ring that found no job free waits in a queue that a job
 * coming back serves first (past njobs guests holding a job each too).
 */
#ifndef VMT_COMPRESS_H
#define VMT_COMPRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "frame.h"
#include "ring.h"
#include "worker.h"

/* A guest with batches in flight: at most njobs of them at once. */
struct vmt_cowner {
	const void *key;	/* NULL: unused (loop) */
	uint32_t inflight;	/* jobs it holds (loop) */
	uint64_t served;	/* the tick when a worker last took one of its batches (the pick;
				 * reset by the loop only while none of its jobs is out) */
};

enum vmt_cjob_state { VMT_CJOB_FREE, VMT_CJOB_OUT, VMT_CJOB_PARKED };

struct vmt_cjob {
	struct vmt_worker_job wj;	/* the worker's, while OUT */
	struct vmt_cjob *next;	/* the free or the parked list (loop) */
	struct vmt_cowner *own;
	struct vmt_ring *ring;	/* NULL once the ring is gone (compressor_forget) */
	enum vmt_cjob_state state;	/* OUT: queued or on a worker; PARKED: back, an earlier
					 * batch of its ring is not (loop) */
	struct vmt_ring_batch b;	/* b.h.codec: what the payload is */
	uint32_t codec;		/* what was asked */
	int level;
	struct vmt_schema *schema;	/* TCODE: the ring's when begun, a reference (loop) */
	uint8_t *out;
	size_t cap;
	ssize_t len;		/* the payload's, or -errno (-ECANCELED: overtaken, skipped) */
	uint32_t crc;		/* the payload's CRC32C (not for codec NONE) */
};

/* A worker thread's own (by the worker's thread index): contexts, the copy
 * of its batch, its CPU time. */
struct vmt_cworker {
	struct vmt_frame_ctx *ctx[VMT_FRAME_NCODECS];	/* by codec */
	int levels[VMT_FRAME_NCODECS];	/* by codec: the level ctx[] was made with */
	uint8_t *in;		/* max_raw bytes */
	uint64_t cpu_ns;	/* its thread's, after its last batch (atomic) */
};

struct vmt_compress_stats {
	uint64_t frames;	/* frames made */
	uint64_t bytes_in, bytes_out;
	uint64_t cpu_ns;	/* the worker threads' CPU time, summed (as of the last batch back) */
	uint64_t busy;		/* batches due that found every job taken */
	uint64_t errors;	/* batches that could not be compressed (left raw) */
	uint64_t skipped;	/* batches whose pages the fill overwrote before a worker copied them */
	uint64_t over_share;	/* batches due that waited: their guest held its share of the jobs */
	uint64_t tcode_fallback;	/* TCODE batches made zstd frames: no schema yet, or pages
					 * whose transcoding did not fit */
};

#define VMT_COMPRESS_THREADS_MAX 16u

struct vmt_compressor {
	struct vmt_worker worker;	/* nthreads threads; its pick is the fair share */
	struct vmt_cjob *free;	/* jobs not in use (loop only) */
	struct vmt_cjob *parked;	/* back before an earlier batch of their ring (loop only) */
	struct vmt_ring_queue waiting;	/* rings that found no job free (loop only) */
	struct vmt_cjob *jobs;
	uint32_t njobs;
	struct vmt_cowner *owners;	/* njobs: one per guest with jobs in flight */
	uint32_t nowners;	/* of them in use (loop) */
	uint64_t tick;		/* batches taken (the pick, under the worker's lock) */
	struct vmt_cworker *workers;
	uint32_t nthreads;	/* workers (a manual run uses the first, on the caller's thread) */
	size_t max_raw;
	int stopping, started, inited, manual;
	struct vmt_compress_stats st;	/* the loop's */
};

/* njobs jobs for batches of at most max_raw bytes, nthreads workers
 * (1..VMT_COMPRESS_THREADS_MAX). */
int compressor_init(struct vmt_compressor *c, sd_event *e, uint32_t njobs, uint32_t nthreads,
		    size_t max_raw);
/* The workers a host of ncpus CPUs gets when the configuration says auto:
 * one for two CPUs, one more per two, at most 4. */
uint32_t compressor_threads_auto(long ncpus);
/* Start the workers (after the daemon dropped its privileges); -errno if
 * one could not be (those started are joined by compressor_stop()). */
int compressor_run(struct vmt_compressor *c);
/* Finish what is queued (a manual run's on this thread), take it back
 * into the rings, join. */
void compressor_stop(struct vmt_compressor *c);
/* Compress r's batches with codec at level while they are due, a job is
 * free and owner (r's guest) holds less than its share. */
void compressor_poke(struct vmt_compressor *c, const void *owner, struct vmt_ring *r,
		     uint32_t codec, int level);
/* The jobs a guest may hold now: an equal share among those holding some
 * and one more that may come, so that a newcomer finds a job free. */
uint32_t compressor_share(const struct vmt_compressor *c);
/* Tests: no thread; compressor_step runs the next batch on the caller's
 * thread and says whether there was one (compressor_collect takes it in);
 * compressor_step_last the batch queued last, as a second thread may
 * finish a later batch first. */
int compressor_run_manual(struct vmt_compressor *c);
bool compressor_step(struct vmt_compressor *c);
bool compressor_step_last(struct vmt_compressor *c);
/* Take in the frames that are back now (the loop; between reads of a busy
 * channel, so that a frame done is not overtaken by the slots filling). */
void compressor_collect(struct vmt_compressor *c);
/* r is about to be freed or cleared: a batch of it in flight will not come back to it. */
void compressor_forget(struct vmt_compressor *c, struct vmt_ring *r);

#endif
