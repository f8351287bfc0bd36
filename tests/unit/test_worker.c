/* SPDX-License-Identifier: MIT */
/*
 * worker: the threads, job queue and hand-back the writer, the compressor
 * and the fleet are built on. One thread runs its jobs in submission order
 * and they come back to the loop in that order; several threads run jobs
 * at once, each thread's start, runs and stop under its own index; a pick
 * chooses the next job under the worker's lock; the done source has the
 * priority asked for; a manual worker runs the picked job on the caller's
 * thread; a stop with jobs queued runs them all and hands them back before
 * it returns; a worker whose thread never ran drops what it holds; a batch
 * bounds the done callbacks of one turn of the loop; a collect takes in
 * what is back without a turn of the loop.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <systemd/sd-event.h>
#include <time.h>

#include "testutil.h"
#include "worker.h"

#define N 64
#define NT 4		/* threads of the several-thread cases */

struct tjob {
	struct vmt_worker_job wj;
	int seq;
	int key;	/* by_key's order */
};

struct rec {
	struct vmt_worker *w;
	pthread_t loop;
	pthread_mutex_t lock;	/* all but done[], the loop's */
	pthread_cond_t cond;
	int ran[N * 2], nran;
	unsigned ran_thread[N * 2];
	bool run_off_loop;
	int done[N * 2], ndone;
	bool done_on_loop;
	int ndrop;
	unsigned started[NT], stopped[NT];	/* per thread index: calls */
	bool index_mismatch;	/* a run's index was not its thread's start's */
	bool pick_unlocked;	/* a pick ran without the worker's lock */
	/* jobs wait for go: the first only, or all */
	bool hold_first, hold_all, go;
	/* the first NT jobs wait until NT run at once */
	bool meet;
	int running, most_running;
};

static __thread int thread_index = -1;	/* what start said to this thread */

static struct tjob *tjob_of(struct vmt_worker_job *j)
{
	return (struct tjob *)((char *)j - offsetof(struct tjob, wj));
}

static void t_start(unsigned thread, void *userdata)
{
	struct rec *r = userdata;

	thread_index = (int)thread;
	pthread_mutex_lock(&r->lock);
	if (thread < NT)
		r->started[thread]++;
	pthread_mutex_unlock(&r->lock);
}

static void t_stop(unsigned thread, void *userdata)
{
	struct rec *r = userdata;

	pthread_mutex_lock(&r->lock);
	if (thread < NT)
		r->stopped[thread]++;
	if ((int)thread != thread_index)
		r->index_mismatch = true;
	pthread_mutex_unlock(&r->lock);
}

/* until cond(r) or the deadline; false at the deadline */
static bool wait_for(struct rec *r, bool (*cond)(const struct rec *r))
{
	uint64_t until = test_now_ms() + (uint64_t)test_deadline_ms(30000);

	while (!cond(r)) {
		struct timespec ts;

		if (test_now_ms() >= until)
			return false;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 1;
		pthread_cond_timedwait(&r->cond, &r->lock, &ts);
	}
	return true;
}

static bool go_given(const struct rec *r)
{
	return r->go;
}

static bool all_meet(const struct rec *r)
{
	return r->running >= NT;
}

static void t_run(struct vmt_worker_job *j, unsigned thread, void *userdata)
{
	struct rec *r = userdata;

	pthread_mutex_lock(&r->lock);
	if (pthread_equal(pthread_self(), r->loop))
		r->run_off_loop = false;
	/* a manual step runs as thread 0 on a thread start never saw */
	if (thread_index >= 0 && (int)thread != thread_index)
		r->index_mismatch = true;
	if (r->hold_all || (r->hold_first && r->nran == 0))
		wait_for(r, go_given);
	if (r->meet && tjob_of(j)->seq < NT) {
		r->running++;
		if (r->running > r->most_running)
			r->most_running = r->running;
		pthread_cond_broadcast(&r->cond);
		wait_for(r, all_meet);	/* a worker of fewer threads: the deadline */
	}
	r->ran_thread[r->nran] = thread;
	r->ran[r->nran++] = tjob_of(j)->seq;
	pthread_mutex_unlock(&r->lock);
}

static void t_done(struct vmt_worker_job *j, void *userdata)
{
	struct rec *r = userdata;

	if (!pthread_equal(pthread_self(), r->loop))
		r->done_on_loop = false;
	r->done[r->ndone++] = tjob_of(j)->seq;
}

static void t_drop(struct vmt_worker_job *j, void *userdata)
{
	((struct rec *)userdata)->ndrop++;
}

static const struct vmt_worker_ops t_ops = {
	.start = t_start, .run = t_run, .stop = t_stop, .done = t_done, .drop = t_drop,
};

static void rec_init(struct rec *r, struct vmt_worker *w)
{
	memset(r, 0, sizeof(*r));
	r->w = w;
	r->loop = pthread_self();
	r->run_off_loop = r->done_on_loop = true;
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
}

static void rec_go(struct rec *r)
{
	pthread_mutex_lock(&r->lock);
	r->go = true;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

static uint64_t turn_us(void)
{
	return 1000ull * (uint64_t)test_deadline_ms(30000);
}

START_TEST(jobs_run_in_order_done_on_the_loop)
{
	static struct tjob jobs[N];
	struct vmt_worker w;
	struct rec r;
	sd_event *e = NULL;
	uint64_t deadline = test_now_ms() + (uint64_t)test_deadline_ms(30000);

	ck_assert_int_eq(sd_event_new(&e), 0);
	rec_init(&r, &w);
	ck_assert_int_eq(worker_init(&w, e, &t_ops, 1, &r), 0);
	/* half queued before the thread starts: they wait for it */
	for (int i = 0; i < N / 2; i++) {
		jobs[i].seq = i;
		worker_submit(&w, &jobs[i].wj);
	}
	ck_assert_int_eq(worker_run(&w), 0);
	for (int i = N / 2; i < N; i++) {
		jobs[i].seq = i;
		worker_submit(&w, &jobs[i].wj);
	}
	while (r.ndone < N && test_now_ms() < deadline)
		ck_assert_int_ge(sd_event_run(e, 1000000), 0);
	ck_assert_int_eq(r.ndone, N);
	ck_assert_int_eq(r.nran, N);
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(r.ran[i], i);
		ck_assert_uint_eq(r.ran_thread[i], 0);
		ck_assert_int_eq(r.done[i], i);
	}
	ck_assert(r.run_off_loop);
	ck_assert(r.done_on_loop);
	ck_assert_uint_eq(r.started[0], 1);
	ck_assert_uint_eq(r.stopped[0], 0);
	worker_stop(&w);
	ck_assert_uint_eq(r.stopped[0], 1);
	ck_assert(!r.index_mismatch);
	ck_assert_int_eq(r.ndrop, 0);
	sd_event_unref(e);
}
END_TEST

/*
 * NT threads: the first NT jobs each wait until NT run at once (a worker
 * running fewer at a time meets the deadline instead), then the rest;
 * every job runs once and comes back once, on the loop; each thread's
 * start, runs and stop carry its own index.
 */
START_TEST(several_threads_run_jobs_at_once)
{
	static struct tjob jobs[N];
	bool seen[N] = { false };
	struct vmt_worker w;
	struct rec r;
	sd_event *e = NULL;
	uint64_t deadline = test_now_ms() + (uint64_t)test_deadline_ms(30000);

	ck_assert_int_eq(sd_event_new(&e), 0);
	rec_init(&r, &w);
	r.meet = true;
	ck_assert_int_eq(worker_init(&w, e, &t_ops, NT, &r), 0);
	ck_assert_int_eq(worker_run(&w), 0);
	for (int i = 0; i < N; i++) {
		jobs[i].seq = i;
		worker_submit(&w, &jobs[i].wj);
	}
	while (r.ndone < N && test_now_ms() < deadline)
		ck_assert_int_ge(sd_event_run(e, 1000000), 0);
	ck_assert_int_eq(r.ndone, N);
	pthread_mutex_lock(&r.lock);
	ck_assert_int_eq(r.most_running, NT);
	ck_assert_int_eq(r.nran, N);
	pthread_mutex_unlock(&r.lock);
	for (int i = 0; i < N; i++) {
		ck_assert_int_lt(r.done[i], N);
		ck_assert(!seen[r.done[i]]);
		seen[r.done[i]] = true;
	}
	ck_assert(r.run_off_loop);
	ck_assert(r.done_on_loop);
	worker_stop(&w);
	for (int t = 0; t < NT; t++) {
		ck_assert_uint_eq(r.started[t], 1);
		ck_assert_uint_eq(r.stopped[t], 1);
	}
	ck_assert(!r.index_mismatch);
	ck_assert_int_eq(r.ndrop, 0);
	sd_event_unref(e);
}
END_TEST

/* Lets the jobs go once worker_stop() has begun: the stop then finds
 * every job but those on a thread still queued. */
static void *release_at_stop(void *arg)
{
	struct rec *r = arg;
	bool stopping = false;

	while (!stopping) {
		pthread_mutex_lock(&r->w->lock);
		stopping = r->w->stopping;
		pthread_mutex_unlock(&r->w->lock);
		if (!stopping)
			sched_yield();
	}
	rec_go(r);
	return NULL;
}

static void stop_queued(unsigned nthreads)
{
	static struct tjob jobs[N];
	bool seen[N] = { false };
	struct vmt_worker w;
	struct rec r;
	sd_event *e = NULL;
	pthread_t t;

	ck_assert_int_eq(sd_event_new(&e), 0);
	rec_init(&r, &w);
	r.hold_all = true;
	ck_assert_int_eq(worker_init(&w, e, &t_ops, nthreads, &r), 0);
	ck_assert_int_eq(worker_run(&w), 0);
	for (int i = 0; i < N; i++) {
		jobs[i].seq = i;
		worker_submit(&w, &jobs[i].wj);
	}
	ck_assert_int_eq(pthread_create(&t, NULL, release_at_stop, &r), 0);
	worker_stop(&w);	/* no turn of the loop: the stop hands them back */
	pthread_join(t, NULL);
	ck_assert_int_eq(r.nran, N);
	ck_assert_int_eq(r.ndone, N);
	for (int i = 0; i < N; i++) {
		if (nthreads == 1)
			ck_assert_int_eq(r.done[i], i);
		ck_assert(!seen[r.done[i]]);
		seen[r.done[i]] = true;
	}
	for (unsigned i = 0; i < nthreads; i++)
		ck_assert_uint_eq(r.stopped[i], 1);
	ck_assert(r.done_on_loop);
	ck_assert_int_eq(r.ndrop, 0);
	worker_stop(&w);	/* idempotent */
	sd_event_unref(e);
}

START_TEST(stop_with_jobs_queued_runs_and_hands_back_all)
{
	stop_queued(1);
}
END_TEST

START_TEST(stop_with_jobs_queued_on_several_threads)
{
	stop_queued(NT);
}
END_TEST

START_TEST(never_started_drops)
{
	static struct tjob jobs[8];
	struct vmt_worker w;
	struct rec r;
	sd_event *e = NULL;

	ck_assert_int_eq(sd_event_new(&e), 0);
	rec_init(&r, &w);
	ck_assert_int_eq(worker_init(&w, e, &t_ops, 1, &r), 0);
	for (int i = 0; i < 5; i++)
		worker_submit(&w, &jobs[i].wj);
	for (int i = 5; i < 8; i++)
		worker_hand_back(&w, &jobs[i].wj);
	worker_stop(&w);
	ck_assert_int_eq(r.nran, 0);
	ck_assert_int_eq(r.ndone, 0);
	ck_assert_int_eq(r.ndrop, 8);
	ck_assert_uint_eq(r.started[0], 0);
	sd_event_unref(e);
}
END_TEST

/* The queued job of the lowest key; checks that it runs under the lock. */
static struct vmt_worker_job **by_key(struct vmt_worker_job **queue, void *userdata)
{
	struct rec *r = userdata;
	struct vmt_worker_job **best = queue;

	if (pthread_mutex_trylock(&r->w->lock) != EBUSY)
		r->pick_unlocked = true;	/* (and it now holds it: the case fails) */
	for (struct vmt_worker_job **p = queue; *p; p = &(*p)->next)
		if (tjob_of(*p)->key < tjob_of(*best)->key)
			best = p;
	return best;
}

static struct vmt_worker_job **last_one(struct vmt_worker_job **queue, void *userdata)
{
	while ((*queue)->next)
		queue = &(*queue)->next;
	return queue;
}

/* The thread takes the job the pick chooses, not the head: the first job
 * holds the thread until all are queued, keys the reverse of the order. */
START_TEST(the_pick_chooses_the_next_job)
{
	static const struct vmt_worker_ops ops = {
		.run = t_run, .done = t_done, .drop = t_drop, .pick = by_key,
	};
	static struct tjob jobs[N];
	struct vmt_worker w;
	struct rec r;
	sd_event *e = NULL;
	uint64_t deadline = test_now_ms() + (uint64_t)test_deadline_ms(30000);

	ck_assert_int_eq(sd_event_new(&e), 0);
	rec_init(&r, &w);
	r.hold_first = true;
	ck_assert_int_eq(worker_init(&w, e, &ops, 1, &r), 0);
	ck_assert_int_eq(worker_run(&w), 0);
	for (int i = 0; i < N; i++) {
		jobs[i].seq = i;
		jobs[i].key = i ? N - i : 0;	/* the first taken alone, at once */
		worker_submit(&w, &jobs[i].wj);
	}
	rec_go(&r);
	while (r.ndone < N && test_now_ms() < deadline)
		ck_assert_int_ge(sd_event_run(e, 1000000), 0);
	ck_assert_int_eq(r.ndone, N);
	pthread_mutex_lock(&r.lock);
	ck_assert_int_eq(r.ran[0], 0);
	for (int i = 1; i < N; i++)
		ck_assert_int_eq(r.ran[i], N - i);
	ck_assert(!r.pick_unlocked);
	pthread_mutex_unlock(&r.lock);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(r.done[i], r.ran[i]);
	worker_stop(&w);
	sd_event_unref(e);
}
END_TEST

/* Ready in the same turn, the done sources are dispatched by the priority
 * each worker asked for, whatever order the hand-backs came in. */
START_TEST(the_done_source_has_its_priority)
{
	static const struct vmt_worker_ops ops[3] = {
		{ .done = t_done, .priority = SD_EVENT_PRIORITY_IMPORTANT },
		{ .done = t_done },
		{ .done = t_done, .priority = SD_EVENT_PRIORITY_IDLE },
	};
	static struct tjob jobs[3];
	struct vmt_worker w[3];
	struct rec r;
	sd_event *e = NULL;
	int64_t prio;

	ck_assert_int_eq(sd_event_new(&e), 0);
	rec_init(&r, &w[0]);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(worker_init(&w[i], e, &ops[i], 1, &r), 0);
		jobs[i].seq = i;
	}
	for (int i = 2; i >= 0; i--)
		worker_hand_back(&w[i], &jobs[i].wj);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_gt(sd_event_run(e, turn_us()), 0);
		ck_assert_int_eq(r.ndone, i + 1);
		ck_assert_int_eq(r.done[i], i);
	}
	ck_assert_int_eq(sd_event_source_get_priority(w[0].src, &prio), 0);
	ck_assert_int_eq(prio, SD_EVENT_PRIORITY_IMPORTANT);
	for (int i = 0; i < 3; i++)
		worker_stop(&w[i]);
	sd_event_unref(e);
}
END_TEST

/*
 * A manual worker: no thread; a step runs the job the worker's pick (or
 * the step's) chooses on the caller's thread, as thread 0, start and stop
 * not called; what is done comes back with a collect, no turn of the loop;
 * the stop runs the rest here. A threaded worker does not step.
 */
START_TEST(a_manual_worker_steps_on_the_callers_thread)
{
	static const struct vmt_worker_ops ops = {
		.start = t_start, .run = t_run, .stop = t_stop, .done = t_done, .pick = by_key,
	};
	static struct tjob jobs[5];
	struct vmt_worker w, wt;
	struct rec r, rt;
	sd_event *e = NULL;

	ck_assert_int_eq(sd_event_new(&e), 0);
	rec_init(&r, &w);
	ck_assert_int_eq(worker_init(&w, e, &ops, 2, &r), 0);
	ck_assert(!worker_step(&w, NULL));	/* not manual yet */
	ck_assert_int_eq(worker_run_manual(&w), 0);
	ck_assert(!worker_step(&w, NULL));	/* nothing queued */
	for (int i = 0; i < 5; i++) {
		jobs[i].seq = i;
		jobs[i].key = (i + 3) % 5;	/* by_key: 2, 3, 4, 0, 1 */
		worker_submit(&w, &jobs[i].wj);
	}
	ck_assert_int_eq(r.nran, 0);
	ck_assert(worker_step(&w, NULL));
	ck_assert_int_eq(r.nran, 1);
	ck_assert_int_eq(r.ran[0], 2);
	ck_assert_uint_eq(r.ran_thread[0], 0);
	ck_assert(!r.run_off_loop);	/* it ran here */
	ck_assert_int_eq(r.ndone, 0);
	worker_collect(&w);
	ck_assert_int_eq(r.ndone, 1);
	ck_assert_int_eq(r.done[0], 2);
	ck_assert(worker_step(&w, last_one));
	ck_assert_int_eq(r.ran[1], 4);
	worker_collect(&w);
	worker_collect(&w);	/* nothing more */
	ck_assert_int_eq(r.ndone, 2);
	ck_assert_int_eq(r.done[1], 4);
	worker_stop(&w);
	ck_assert_int_eq(r.nran, 5);
	ck_assert_int_eq(r.ran[2], 3);
	ck_assert_int_eq(r.ran[3], 0);
	ck_assert_int_eq(r.ran[4], 1);
	ck_assert_int_eq(r.ndone, 5);
	ck_assert(r.done_on_loop);
	ck_assert_uint_eq(r.started[0] + r.started[1] + r.stopped[0] + r.stopped[1], 0);

	rec_init(&rt, &wt);
	ck_assert_int_eq(worker_init(&wt, e, &t_ops, 1, &rt), 0);
	ck_assert_int_eq(worker_run(&wt), 0);
	ck_assert_int_eq(worker_run_manual(&wt), -EINVAL);
	worker_submit(&wt, &jobs[0].wj);
	ck_assert(!worker_step(&wt, NULL));
	worker_stop(&wt);
	ck_assert_int_eq(rt.ndone, 1);
	sd_event_unref(e);
}
END_TEST

struct foreign {
	struct vmt_worker *w;
	struct tjob *jobs;
	int n;
};

static void *hand_back_all(void *arg)
{
	struct foreign *f = arg;

	for (int i = 0; i < f->n; i++)
		worker_hand_back(f->w, &f->jobs[i].wj);
	return NULL;
}

START_TEST(hand_back_from_another_thread_in_batches)
{
	static const struct vmt_worker_ops ops = {
		.run = t_run, .done = t_done, .drop = t_drop, .batch = 4,
	};
	static struct tjob jobs[10];
	struct vmt_worker w;
	struct rec r;
	struct foreign f = { &w, jobs, 10 };
	sd_event *e = NULL;
	pthread_t t;

	ck_assert_int_eq(sd_event_new(&e), 0);
	rec_init(&r, &w);
	ck_assert_int_eq(worker_init(&w, e, &ops, 1, &r), 0);
	for (int i = 0; i < 10; i++)
		jobs[i].seq = i;
	ck_assert_int_eq(pthread_create(&t, NULL, hand_back_all, &f), 0);
	pthread_join(t, NULL);
	/* one turn of the loop, one batch */
	ck_assert_int_gt(sd_event_run(e, turn_us()), 0);
	ck_assert_int_eq(r.ndone, 4);
	ck_assert_int_gt(sd_event_run(e, turn_us()), 0);
	ck_assert_int_eq(r.ndone, 8);
	ck_assert_int_gt(sd_event_run(e, turn_us()), 0);
	ck_assert_int_eq(r.ndone, 10);
	for (int i = 0; i < 10; i++)
		ck_assert_int_eq(r.done[i], i);
	ck_assert(r.done_on_loop);
	ck_assert_int_eq(r.nran, 0);
	worker_stop(&w);	/* never started: nothing left to drop */
	ck_assert_int_eq(r.ndrop, 0);
	sd_event_unref(e);
}
END_TEST

/* A foreign thread's hand-backs beside a running worker's jobs, taken in
 * by collects between the loop's turns (none here): all come back, the
 * hand-backs in the order handed, never run. */
START_TEST(hand_back_beside_running_threads_collected)
{
	static struct tjob jobs[N], foreign_jobs[N];
	struct vmt_worker w;
	struct rec r;
	struct foreign f = { &w, foreign_jobs, N };
	sd_event *e = NULL;
	uint64_t deadline = test_now_ms() + (uint64_t)test_deadline_ms(30000);
	int next_foreign = N;
	pthread_t t;

	ck_assert_int_eq(sd_event_new(&e), 0);
	rec_init(&r, &w);
	ck_assert_int_eq(worker_init(&w, e, &t_ops, 2, &r), 0);
	ck_assert_int_eq(worker_run(&w), 0);
	for (int i = 0; i < N; i++) {
		jobs[i].seq = i;
		foreign_jobs[i].seq = N + i;
		worker_submit(&w, &jobs[i].wj);
	}
	ck_assert_int_eq(pthread_create(&t, NULL, hand_back_all, &f), 0);
	pthread_join(t, NULL);
	worker_collect(&w);	/* the foreign ones are back now, at least */
	ck_assert_int_ge(r.ndone, N);
	while (r.ndone < 2 * N && test_now_ms() < deadline) {
		sched_yield();
		worker_collect(&w);
	}
	ck_assert_int_eq(r.ndone, 2 * N);
	for (int i = 0; i < 2 * N; i++)
		if (r.done[i] >= N)
			ck_assert_int_eq(r.done[i], next_foreign++);
	ck_assert_int_eq(next_foreign, 2 * N);
	pthread_mutex_lock(&r.lock);
	ck_assert_int_eq(r.nran, N);
	pthread_mutex_unlock(&r.lock);
	ck_assert(r.done_on_loop);
	worker_stop(&w);
	ck_assert_int_eq(r.ndrop, 0);
	sd_event_unref(e);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("worker");
	TCase *t = tcase_create("worker");

	tcase_add_test(t, jobs_run_in_order_done_on_the_loop);
	tcase_add_test(t, several_threads_run_jobs_at_once);
	tcase_add_test(t, stop_with_jobs_queued_runs_and_hands_back_all);
	tcase_add_test(t, stop_with_jobs_queued_on_several_threads);
	tcase_add_test(t, never_started_drops);
	tcase_add_test(t, the_pick_chooses_the_next_job);
	tcase_add_test(t, the_done_source_has_its_priority);
	tcase_add_test(t, a_manual_worker_steps_on_the_callers_thread);
	tcase_add_test(t, hand_back_from_another_thread_in_batches);
	tcase_add_test(t, hand_back_beside_running_threads_collected);
	suite_add_tcase(s, t);
	return test_run_suite(s);
}
