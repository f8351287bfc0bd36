/* SPDX-License-Identifier: MIT */
/*
 * lvmeta-int: what lvmeta.c (the thread, the connection, the labels) and
 * lvmeta-events.c (lifecycle and watchdog events) share.
 */
#ifndef VMT_LVMETA_INT_H
#define VMT_LVMETA_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "lvmeta-dl.h"	/* libvirt, libxml2: loaded when a guest needs them */

#include "config.h"	/* VMT_LABELS_MAX */
#include "lvmeta.h"
#include "sample.h"	/* VMT_NAME_MAX */
#include "worker.h"

#define LV_LOG_EVERY_NS (60ull * 1000000000ull)
#define LV_EVENTS_MAX 64	/* events waiting for the loop; more are dropped, counted */

struct lv_guest {
	char name[VMT_NAME_MAX];
	int id;
	bool dirty;		/* to read */
	uint64_t log_ns;	/* its last refusal said, once a minute */
	int crashed_id;		/* the domain id libvirt said crashed last, 0: none */
};

struct lv_result {
	struct lv_result *next;
	char name[VMT_NAME_MAX];
	int id;
	char labels[VMT_LABELS_MAX];
};

/* What libvirt said of a guest, for the loop. */
struct lv_event {
	struct lv_event *next;
	char name[VMT_NAME_MAX];
	int id;
	char what[VMT_LVMETA_WHAT_MAX];
	uint64_t time_ns;	/* CLOCK_REALTIME when it came */
	bool crashed;		/* a crash, not a watchdog */
};

struct vmt_lvmeta {
	sd_event *event;
	char uri[256];
	bool labels, events;	/* what is wanted of libvirt */
	const struct vmt_lvmeta_ops *ops;
	void *owner;
	/* the thread (its one job, job, runs libvirt's loop until stop), and
	 * the hand-back to the loop: wake, handed back when results or events
	 * wait and it is not already (wake_pending) */
	struct vmt_worker worker;
	struct vmt_worker_job job, wake;
	atomic_bool wake_pending;
	int thread_efd;		/* the loop wakes the thread (in libvirt's loop) */
	bool started;
	bool no_library;	/* libvirt or libxml2 could not be loaded: no thread */

	pthread_mutex_t lock;	/* what follows */
	bool stop;
	struct lv_guest *g;
	uint32_t n;
	struct lv_result *r_head;
	struct lv_event *e_head, **e_tail;	/* in order */
	uint32_t nevents;
	const char *state;
	char error[512];
	uint64_t reads, refused, connect_failures;
	uint64_t ev_seen, ev_incidents, ev_dropped, ev_folded;

	/* the loop's own */
	uint64_t ev_fired, ev_suppressed;
	uint64_t ev_dropped_said, ev_drop_log_ns;

	/* the thread's own */
	virConnectPtr conn;
	int meta_cb;		/* the metadata-change registration, -1 when none */
	int life_cb, dog_cb;	/* lifecycle and watchdog registrations, -1 when none */
	int timer, watch;
	bool lost;		/* libvirt closed the connection */
	uint32_t backoff_ms;
	uint64_t next_try_ns;
	uint64_t log_ns;	/* connection trouble, said once a minute */
	uint64_t left_out_ns;	/* more guests than GUESTS_MAX, said once a minute (loop) */
};

/* lvmeta.c */
bool lv_name_matches(const char *full, const char *name);
void lv_wake_loop(struct vmt_lvmeta *l);
/* The guest of the set dom is (by id, else by name), under the lock. */
struct lv_guest *lv_guest_of(struct vmt_lvmeta *l, virDomainPtr dom);

/* lvmeta-events.c: on the thread, with l->conn; -1 (libvirt's error set) */
int lv_events_register(struct vmt_lvmeta *l);
void lv_events_deregister(struct vmt_lvmeta *l);
/* on the loop: the events waiting, to the owner */
void lv_events_deliver(struct vmt_lvmeta *l);
void lv_events_free(struct vmt_lvmeta *l);

#endif
