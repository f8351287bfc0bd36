/* SPDX-License-Identifier: MIT */
/*
 * fleet's own: struct vmt_fleet and what its files share. fleet.c is the
 * module (labels, subjects, start and stop, status); fleet-req.c the
 * requests (libnats' threads queue them, the loop checks and answers
 * them); fleet-conn.c the connection (the uploader thread: connect,
 * reconnect, subscriptions); fleet-upload.c the object store (the state
 * folder's scan and each file's upload). No other module includes it.
 */
#ifndef VMT_FLEET_INT_H
#define VMT_FLEET_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "dlnats.h"

#include "fleet.h"
#include "sample.h"	/* VMT_NAME_MAX */
#include "worker.h"

#define CHUNK (128 * 1024)
#define REQ_MAX 1024		/* bytes of a dump request */
#define REQ_QUEUE_MAX 64	/* requests waiting for the loop */
#define MAX_SUBS 256		/* subjects this host subscribes to */
#define DYN_MAX VMT_CONFIG_MAX_GUESTS	/* guests with labels from libvirt */
#define SCAN_MS 1000		/* the state folder is scanned at least this often */
#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 10000
#define PENDING_MAX 64		/* fleet dumps waiting for their files */
#define LOG_EVERY_NS (60ull * 1000000000ull)

struct fleet_req {
	struct vmt_worker_job wj;	/* handed back to the loop */
	char subject[256];
	char reply[VMT_FLEET_REPLY_MAX + 1];	/* checked: an inbox */
	size_t len;
	char data[REQ_MAX];
};

struct fleet_labeled {
	char name[VMT_NAME_MAX];
	char labels[VMT_LABELS_MAX];
};

struct fleet_pending {
	struct fleet_pending *next;
	char reply[VMT_FLEET_REPLY_MAX + 1];
};

struct vmt_fleet {
	sd_event *event;
	struct vmt_fleet_conf conf;	/* a copy: the uploader reads it */
	char state_dir[4096];
	char host[VMT_FLEET_TOKEN_MAX + 1];
	const struct vmt_fleet_ops *ops;
	void *owner;
	/* the guests with labels, the configuration's first (nconf), then
	 * those libvirt's metadata gives (fleet_set_labels): the loop's */
	uint32_t nlabeled, nconf, room;
	struct fleet_labeled *labeled;
	uint64_t over_log_ns;
	/* the subjects the loop wants subscribed, bumped want_gen (the lock) */
	uint32_t nwant;
	char (*want)[256];
	char (*want_next)[256];	/* the loop's scratch */
	uint64_t want_gen;
	/* the uploader's own: what it is subscribed to, as of have_gen */
	uint32_t nhave;
	struct { char subject[256]; natsSubscription *sub; } *have;
	uint64_t have_gen;
	char (*want_copy)[256];

	/* the uploader thread (its one job, upjob, runs until stop), and the
	 * hand-back of requests from libnats' threads to the loop */
	struct vmt_worker worker;
	struct vmt_worker_job upjob;
	bool started;

	pthread_mutex_t lock;	/* what follows, to the counters */
	pthread_cond_t cond;
	bool stop, kick;
	uint32_t q_len;		/* requests handed back, not yet taken */
	uint64_t q_dropped;
	natsConnection *nc;	/* for replies from the loop; NULL when none */
	uint64_t disc_log_ns;	/* a disconnection, logged once a minute */
	uint64_t disconnects;
	struct vmt_fleet_status st;
	uint64_t reply_log_ns;	/* the last line about a reply subject refused */

	/* the loop's own */
	struct fleet_pending *pending;
	uint32_t npending;
	uint64_t budget_start_ns;
	uint32_t budget_used;
	uint64_t last_log_ns;
};

/* fleet-req.c: libnats' threads' handler of a dump request (checked,
 * handed back to the loop), and the loop's side (check, hand to the owner;
 * after fleet_free() began, only freed) */
void fleet_on_msg(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure);
void fleet_req_handle(struct vmt_fleet *f, struct fleet_req *rq);
/* fleet-conn.c: the uploader, until stop (the worker's thread); what the loop wants subscribed, made
 * so (the uploader's only); an error for status */
void fleet_uploader(void *arg);
void fleet_subs_apply(struct vmt_fleet *f, natsConnection *nc);
void fleet_set_error(struct vmt_fleet *f, const char *what, natsStatus s);
/* fleet-upload.c, the uploader's: the bucket's stream there (0, -EIO);
 * count what waits and upload it (nc, js NULL: count only), <0 at the
 * first failure */
int fleet_ensure_stream(struct vmt_fleet *f, jsCtx *js);
int fleet_scan(struct vmt_fleet *f, natsConnection *nc, jsCtx *js);

#endif
