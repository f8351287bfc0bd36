/* SPDX-License-Identifier: MIT */
/*
 * worker: the thread, job queue and hand-back the writer and the fleet are
 * built on. Jobs run on the thread in submission order and come back to
 * the loop in that order; a stop with jobs queued runs them all and hands
 * them back before it returns; a worker whose thread never ran drops what
 * it holds; a batch bounds the done callbacks of one turn of the loop.
 */
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <systemd/sd-event.h>

#include "testutil.h"
#include "worker.h"

#define N 64

struct tjob {
	struct vmt_worker_job wj;
	int seq;
};

struct rec {
	struct vmt_worker *w;
	pthread_t loop;
	int ran[N * 2], nran;		/* the thread's */
	bool run_off_loop;
	int done[N * 2], ndone;		/* the loop's */
	bool done_on_loop;
	int ndrop;
	/* the first job waits for go */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool hold_first, go;
};

static struct tjob *tjob_of(struct vmt_worker_job *j)
{
	return (struct tjob *)((char *)j - offsetof(struct tjob, wj));
}

static void t_run(struct vmt_worker_job *j, void *userdata)
{
	struct rec *r = userdata;

	if (pthread_equal(pthread_self(), r->loop))
		r->run_off_loop = false;
	if (r->hold_first && r->nran == 0) {
		pthread_mutex_lock(&r->lock);
		while (!r->go)
			pthread_cond_wait(&r->cond, &r->lock);
		pthread_mutex_unlock(&r->lock);
	}
	r->ran[r->nran++] = tjob_of(j)->seq;
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
	.run = t_run, .done = t_done, .drop = t_drop,
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

START_TEST(jobs_run_in_order_done_on_the_loop)
{
	static struct tjob jobs[N];
	struct vmt_worker w;
	struct rec r;
	sd_event *e = NULL;
	uint64_t deadline = test_now_ms() + (uint64_t)test_deadline_ms(30000);

	ck_assert_int_eq(sd_event_new(&e), 0);
	rec_init(&r, &w);
	ck_assert_int_eq(worker_init(&w, e, &t_ops, &r), 0);
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
		ck_assert_int_eq(r.done[i], i);
	}
	ck_assert(r.run_off_loop);
	ck_assert(r.done_on_loop);
	worker_stop(&w);
	ck_assert_int_eq(r.ndrop, 0);
	sd_event_unref(e);
}
END_TEST

/* Lets the first job go once worker_stop() has begun: the stop then
 * finds every other job still queued. */
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
	pthread_mutex_lock(&r->lock);
	r->go = true;
	pthread_cond_signal(&r->cond);
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

START_TEST(stop_with_jobs_queued_runs_and_hands_back_all)
{
	static struct tjob jobs[N];
	struct vmt_worker w;
	struct rec r;
	sd_event *e = NULL;
	pthread_t t;

	ck_assert_int_eq(sd_event_new(&e), 0);
	rec_init(&r, &w);
	r.hold_first = true;
	ck_assert_int_eq(worker_init(&w, e, &t_ops, &r), 0);
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
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(r.done[i], i);
	ck_assert(r.done_on_loop);
	ck_assert_int_eq(r.ndrop, 0);
	worker_stop(&w);	/* idempotent */
	sd_event_unref(e);
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
	ck_assert_int_eq(worker_init(&w, e, &t_ops, &r), 0);
	for (int i = 0; i < 5; i++)
		worker_submit(&w, &jobs[i].wj);
	for (int i = 5; i < 8; i++)
		worker_hand_back(&w, &jobs[i].wj);
	worker_stop(&w);
	ck_assert_int_eq(r.nran, 0);
	ck_assert_int_eq(r.ndone, 0);
	ck_assert_int_eq(r.ndrop, 8);
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
	ck_assert_int_eq(worker_init(&w, e, &ops, &r), 0);
	for (int i = 0; i < 10; i++)
		jobs[i].seq = i;
	ck_assert_int_eq(pthread_create(&t, NULL, hand_back_all, &f), 0);
	pthread_join(t, NULL);
	/* one turn of the loop, one batch */
	ck_assert_int_gt(sd_event_run(e, 1000ull * (uint64_t)test_deadline_ms(30000)), 0);
	ck_assert_int_eq(r.ndone, 4);
	ck_assert_int_gt(sd_event_run(e, 1000ull * (uint64_t)test_deadline_ms(30000)), 0);
	ck_assert_int_eq(r.ndone, 8);
	ck_assert_int_gt(sd_event_run(e, 1000ull * (uint64_t)test_deadline_ms(30000)), 0);
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

int main(void)
{
	Suite *s = suite_create("worker");
	TCase *t = tcase_create("worker");

	tcase_add_test(t, jobs_run_in_order_done_on_the_loop);
	tcase_add_test(t, stop_with_jobs_queued_runs_and_hands_back_all);
	tcase_add_test(t, never_started_drops);
	tcase_add_test(t, hand_back_from_another_thread_in_batches);
	suite_add_tcase(s, t);
	return test_run_suite(s);
}
