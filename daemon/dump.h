/* SPDX-License-Identifier: MIT */
/*
 * dump: the daemon's dumps, from a trigger to files. A request (signal,
 * control socket, the fleet, a detector, a guest) joins a dump not yet
 * frozen, or starts one:
 *
 *   DELAY  coalesce window, and --post: recording goes on
 *   FLUSH  every wanted agent flushes; bounded by flush_timeout
 *   WRITE  each guest's window is held where it is in its rings
 *          (ring_hold) and handed to the writer thread; the answer goes
 *          out when all are written, and the holds are released
 *
 * Each dump's firing time is set by the request that starts it (now plus
 * the longer of the coalescing window and its --post) and never moves: a
 * request joins a dump only if that fires no later than the request
 * would on its own, and either its post ends by then or it came within
 * the dump's coalescing window asking for no more post than the dump's.
 * So no request waits behind another's post. Dumps in DELAY wait in a
 * queue by firing time; one flushes and writes at a time, the rest that
 * are due wait their turn. At most VMT_DUMP_POSTED_MAX of them were
 * started by a request with a post; past that such a request is refused.
 *
 * Whether an automatic trigger may start one is trigger.h's to say. The
 * module also owns what the writer hands back: samples and aux files
 * written, retention passes (their log and the sample index SAMPLES
 * answers from).
 */
#ifndef VMT_DUMP_H
#define VMT_DUMP_H

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "config.h"
#include "guest.h"
#include "sample.h"
#include "sindex.h"
#include "trigger.h"
#include "writer.h"

struct vmt_client;

enum vmt_dump_phase {
	VMT_DUMP_DELAY,		/* coalescing window and --post: recording goes on */
	VMT_DUMP_FLUSH,		/* waiting for the agents' FLUSHED */
	VMT_DUMP_WRITE,		/* windows held, the writer writes them */
};

/*
 * Dumps started by requests with a --post (control socket, fleet) that
 * may wait at once. A constant, not a key: it only bounds what a few
 * trusted requesters (root's socket, the fleet under its own budget) can
 * queue, each one a sample per guest when it fires; a request without a
 * post never needs room of its own (it joins the dump due within its
 * coalescing window, or starts the one such dump), so automatic
 * triggers, SIGUSR1 and a plain `vmtracectl dump` are never refused.
 */
#define VMT_DUMP_POSTED_MAX 16

/* One dump as it moves from its first trigger to its files. */
struct vmt_dump {
	uint64_t id;		/* given when it starts to flush */
	enum vmt_dump_phase phase;
	struct vmt_dump *later;	/* the queue in DELAY, by firing time */
	bool posted;		/* started by a request with a post */
	bool all_guests;
	char **guests;		/* names when !all_guests */
	uint32_t nguests;
	uint32_t ntriggers;
	struct vmt_trigger triggers[VMT_SAMPLE_MAX_TRIGGERS];
	uint64_t triggers_dropped;	/* served, but beyond the sample's list */
	uint64_t window_ns;	/* keep this much before the trigger, 0 = the whole ring */
	uint64_t post_ns;	/* and record this much after it (the longest asked) */
	uint64_t fire_at_ns;	/* CLOCK_MONOTONIC: end of DELAY, set by its first request */
	uint64_t coalesce_until_ns;	/* CLOCK_MONOTONIC: its coalescing window's end */
	sd_event_source *timer;	/* FLUSH's timeout */
	unsigned jobs_left;
	struct vmt_waiter *waiters;	/* control clients waiting for the answer */
	char **files;		/* written, for the answer */
	uint32_t nfiles;
	int error;
};

/* What one trigger asks for. */
struct vmt_dump_req {
	char *const *names;	/* guests, n = 0: all */
	uint32_t n;
	const struct vmt_trigger *trigger;
	uint64_t window_ns;
	uint64_t post_ns;
	struct vmt_client *client;	/* to answer, or NULL */
	uint32_t request_id;
	/* an automatic trigger the guest's cooldown does not hold back: its
	 * QEMU died, and what the rings hold now is all there will be (the
	 * budgets still apply) */
	bool no_cooldown;
};

struct vmt_waiter {
	struct vmt_client *client;
	uint32_t request_id;
	struct vmt_waiter *next;
};

/*
 * What the dumps keep of one guest: the budget of dumps it causes, what
 * was held back, its last sample. Keyed by the guest; dump_guest_gone()
 * drops it with the guest.
 */
struct vmt_dump_guest {
	const struct vmt_guest *g;
	struct vmt_trigger_budget budget;	/* of dumps it causes (trigger.h) */
	uint64_t triggers_suppressed;	/* automatic triggers held back by the cooldown */
	char last_dump[PATH_MAX + 400];
};

/* The dumps of one daemon: what it is given, and what it owns. */
struct vmt_dumps {
	/* given at dump_init() */
	sd_event *event;
	const struct vmt_config *conf;	/* the daemon's, as reloads change it */
	struct vmt_guest_list *guests;
	struct vmt_writer *writer;
	struct vmt_sindex *samples;	/* SAMPLES answers from it */
	const char *hostname;
	/* the files of a dump a control client asked for (error < 0: not all) */
	void (*answer)(void *owner, struct vmt_client *cl, uint32_t id, char *const *files,
		       uint32_t nfiles, int error);
	void *owner;

	/* its own */
	uint64_t next_dump_id;
	uint64_t last_sample_ns;
	struct vmt_dump *cur;	/* flushing or writing */
	struct vmt_dump *pending;	/* in DELAY, the soonest to fire first */
	uint32_t npending;
	uint32_t nposted;	/* of them, started by a request with a post */
	sd_event_source *timer;	/* the soonest pending's firing, while none is current */
	uint64_t refused_logged_ns;	/* the last refusal logged (at most one a minute) */
	uint64_t refused_unlogged;	/* refusals since */
	struct vmt_trigger_policy policy;
	struct vmt_dump_guest *per_guest;	/* npg of them, in no order */
	uint32_t npg;
	/* counters */
	uint64_t triggers_total;
	uint64_t triggers_suppressed;
	uint64_t retention_deleted;	/* files deleted by the retention rules */
	uint64_t dumps;
	uint64_t dump_errors;
	uint64_t dumps_refused;	/* requests with a post refused: VMT_DUMP_POSTED_MAX waiting */
	uint64_t samples_written;
};

/* The writer's answers go to dump_writer_done(job, ds). */
void dump_init(struct vmt_dumps *ds);
void dump_free_all(struct vmt_dumps *ds);

/*
 * Ask for a dump. 0: it will happen (the client, if any, gets the files);
 * -ENOENT: a named guest does not exist; -EBUSY: an automatic trigger was
 * suppressed by the cooldown or the rate limit (and counted); -EAGAIN: a
 * request with a post found VMT_DUMP_POSTED_MAX such dumps waiting
 * (counted in dumps_refused).
 */
int dump_request(struct vmt_dumps *ds, const struct vmt_dump_req *rq);
/* A control client went away: forget it in pending answers. */
void dump_forget_client(struct vmt_dumps *ds, struct vmt_client *client);
/* Nanoseconds until the soonest pending dump fires (0: due, waiting for
 * the current one), UINT64_MAX if none is pending. */
uint64_t dump_next_ns(const struct vmt_dumps *ds);
/* The daemon stops: the dumps not yet frozen (pending, or flushing) will
 * not be; their clients are answered -ECANCELED and the dumps dropped. */
void dump_cancel(struct vmt_dumps *ds);

/* The guest's window is about to be replaced (struct vmt_guest_events):
 * written now, whole, without a flush, if its budgets allow (true);
 * false: held back (counted), the guest drops it. */
bool dump_guest_window_replaced(struct vmt_dumps *ds, struct vmt_guest *g, const char *why);
/* The guest is about to be freed: what the dumps kept of it goes. */
void dump_guest_gone(struct vmt_dumps *ds, const struct vmt_guest *g);
/* For the status: its automatic triggers held back, its last sample's
 * path ("" if none yet). */
uint64_t dump_guest_suppressed(const struct vmt_dumps *ds, const struct vmt_guest *g);
const char *dump_guest_last(const struct vmt_dumps *ds, const struct vmt_guest *g);

/* The writer's answer for job (a sample, an aux file, a retention pass). */
void dump_writer_done(struct vmt_job *job, void *ds);
/* dump-prev.c: a sample of g's previous boot from the pages its persistent
 * ring buffer kept (taken from set: the job frees them). */
struct vmt_prev_set;
void dump_guest_prev(struct vmt_dumps *ds, struct vmt_guest *g, struct vmt_prev_set *set);
/* Apply the retention rules (and clear stale temporaries) in the writer. */
void dump_submit_retention(struct vmt_dumps *ds);
/* The retention rules applied now, in the caller's thread (at start);
 * the sample index is built from what they leave. */
void dump_retention_now(struct vmt_dumps *ds);

#endif
