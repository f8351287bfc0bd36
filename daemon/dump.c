/* SPDX-License-Identifier: MIT */
/*
 * dump: see dump.h. A dump's requests and phases; freezing each guest's
 * window where it is is dump-freeze.c's, what goes to the writer besides
 * and what comes back dump-write.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dump-int.h"
#include "guest.h"
#include "log.h"
#include "guest-sync.h"
#include "trigger.h"

/* ---- requests ------------------------------------------------------------ */

static bool dump_wants(const struct vmt_dump *d, const struct vmt_guest *g)
{
	if (d->all_guests)
		return true;
	for (uint32_t i = 0; i < d->nguests; i++)
		if (!strcmp(d->guests[i], guest_name(g)))
			return true;
	return false;
}

static void dump_free(struct vmt_dump *d)
{
	struct vmt_waiter *w;

	if (!d)
		return;
	while ((w = d->waiters)) {
		d->waiters = w->next;
		free(w);
	}
	for (uint32_t i = 0; i < d->nguests; i++)
		free(d->guests[i]);
	free(d->guests);
	for (uint32_t i = 0; i < d->nfiles; i++)
		free(d->files[i]);
	free(d->files);
	sd_event_source_disable_unref(d->timer);
	free(d);
}

void dump_init(struct vmt_dumps *ds)
{
	ds->cur = ds->pending = NULL;
	ds->npending = ds->nposted = 0;
	ds->timer = NULL;
	ds->policy = (struct vmt_trigger_policy){ 0 };
}

static struct vmt_dump *dump_pop(struct vmt_dumps *ds)
{
	struct vmt_dump *d = ds->pending;

	ds->pending = d->later;
	d->later = NULL;
	ds->npending--;
	if (d->posted)
		ds->nposted--;
	return d;
}

/* ---- what the dumps keep of each guest ------------------------------------ */

struct vmt_dump_guest *dump_guest_state(struct vmt_dumps *ds, const struct vmt_guest *g)
{
	struct vmt_dump_guest *t;

	for (uint32_t i = 0; i < ds->npg; i++)
		if (ds->per_guest[i].g == g)
			return &ds->per_guest[i];
	t = realloc(ds->per_guest, (ds->npg + 1) * sizeof(*t));
	if (!t)
		return NULL;
	ds->per_guest = t;
	t[ds->npg] = (struct vmt_dump_guest){ .g = g };
	return &t[ds->npg++];
}

void dump_guest_gone(struct vmt_dumps *ds, const struct vmt_guest *g)
{
	for (uint32_t i = 0; i < ds->npg; i++)
		if (ds->per_guest[i].g == g) {
			ds->per_guest[i] = ds->per_guest[--ds->npg];
			return;
		}
}

static const struct vmt_dump_guest *dump_guest_find(const struct vmt_dumps *ds,
						     const struct vmt_guest *g)
{
	for (uint32_t i = 0; i < ds->npg; i++)
		if (ds->per_guest[i].g == g)
			return &ds->per_guest[i];
	return NULL;
}

uint64_t dump_guest_suppressed(const struct vmt_dumps *ds, const struct vmt_guest *g)
{
	const struct vmt_dump_guest *dg = dump_guest_find(ds, g);

	return dg ? dg->triggers_suppressed : 0;
}

const char *dump_guest_last(const struct vmt_dumps *ds, const struct vmt_guest *g)
{
	const struct vmt_dump_guest *dg = dump_guest_find(ds, g);

	return dg ? dg->last_dump : "";
}

/* Its held-back trigger counted, for the guest and the daemon. */
static void dump_guest_suppress(struct vmt_dumps *ds, const struct vmt_guest *g)
{
	struct vmt_dump_guest *dg = dump_guest_state(ds, g);

	if (dg)
		dg->triggers_suppressed++;
}

/* Its budget, or NULL (out of memory: the global budget alone decides). */
static struct vmt_trigger_budget *dump_guest_budget(struct vmt_dumps *ds, const struct vmt_guest *g)
{
	struct vmt_dump_guest *dg = g ? dump_guest_state(ds, g) : NULL;

	return dg ? &dg->budget : NULL;
}

void dump_free_all(struct vmt_dumps *ds)
{
	free(ds->per_guest);
	ds->per_guest = NULL;
	ds->npg = 0;
	dump_free(ds->cur);
	ds->cur = NULL;
	while (ds->pending)
		dump_free(dump_pop(ds));
	ds->timer = sd_event_source_disable_unref(ds->timer);
}

static void dump_answer_all(struct vmt_dumps *ds, struct vmt_dump *d)
{
	for (struct vmt_waiter *w = d->waiters; w; w = w->next)
		ds->answer(ds->owner, w->client, w->request_id, d->files, d->nfiles, d->error);
}

void dump_cancel(struct vmt_dumps *ds)
{
	if (ds->cur && ds->cur->phase == VMT_DUMP_FLUSH) {
		ds->cur->error = -ECANCELED;
		dump_answer_all(ds, ds->cur);
		dump_free(ds->cur);
		ds->cur = NULL;
	}
	if (ds->npending)
		log_notice("%u dump(s) not yet due dropped: vmtraced is stopping", ds->npending);
	while (ds->pending) {
		struct vmt_dump *d = dump_pop(ds);

		d->error = -ECANCELED;
		dump_answer_all(ds, d);
		dump_free(d);
	}
	ds->timer = sd_event_source_disable_unref(ds->timer);
}

uint64_t dump_next_ns(const struct vmt_dumps *ds)
{
	uint64_t now = now_monotonic_ns();

	if (!ds->pending)
		return UINT64_MAX;
	return ds->pending->fire_at_ns > now ? ds->pending->fire_at_ns - now : 0;
}

static void dump_flush(struct vmt_dumps *ds);
static void dump_guest_flushed(void *userdata, struct vmt_guest *g);

static int dump_due_cb(sd_event_source *s, uint64_t usec, void *userdata);

/* The soonest pending dump starts once it is due and none is under way;
 * otherwise the timer waits for it (finishing the current one calls back). */
static void dump_next(struct vmt_dumps *ds)
{
	struct vmt_dump *d = ds->pending;
	int r;

	if (ds->cur || !d)
		return;
	if (d->fire_at_ns > now_monotonic_ns()) {
		uint64_t usec = (d->fire_at_ns + 999) / 1000;	/* not a moment early */

		if (ds->timer) {
			sd_event_source_set_time(ds->timer, usec);
			sd_event_source_set_enabled(ds->timer, SD_EVENT_ONESHOT);
			return;
		}
		r = sd_event_add_time(ds->event, &ds->timer, CLOCK_MONOTONIC, usec, 1000,
				      dump_due_cb, ds);
		if (r >= 0)
			return;
		log_error_errno(r, "cannot arm the dump delay: dumping at once: %m");
	}
	ds->cur = dump_pop(ds);
	ds->cur->id = ++ds->next_dump_id;
	dump_flush(ds);
}

static int dump_due_cb(sd_event_source *s, uint64_t usec, void *userdata)
{
	dump_next(userdata);
	return 0;
}

void dump_finish(struct vmt_dumps *ds)
{
	struct vmt_dump *d = ds->cur;

	dump_answer_all(ds, d);
	log_info("dump %llu: done, %u file(s)", (unsigned long long)d->id, d->nfiles);
	dump_free(d);
	ds->cur = NULL;
	dump_next(ds);
}

static void dump_freeze(struct vmt_dumps *ds)
{
	struct vmt_dump *d = ds->cur;
	/* 0: the whole ring; otherwise the moments before the trigger and after */
	const struct freeze_req fr = { .triggers = d->triggers, .ntriggers = d->ntriggers,
				       .omitted = d->triggers_dropped, .dump_id = d->id,
				       .span_ns = d->window_ns ? d->window_ns + d->post_ns : 0,
				       .to_target = true };

	d->timer = sd_event_source_disable_unref(d->timer);
	d->phase = VMT_DUMP_WRITE;
	for (uint32_t i = 0; i < ds->guests->n; i++) {
		struct vmt_guest *g = ds->guests->v[i];
		struct vmt_job *job;

		if (!dump_wants(d, g))
			continue;
		job = freeze_guest(ds, g, &fr);
		guest_flush_over(g);
		if (!job)
			continue;
		d->jobs_left++;
		writer_submit(ds->writer, job);
	}
	ds->dumps++;
	if (!d->jobs_left)
		dump_finish(ds);
}

static int dump_flush_timeout_cb(sd_event_source *s, uint64_t usec, void *userdata)
{
	struct vmt_dumps *ds = userdata;

	for (uint32_t i = 0; i < ds->guests->n; i++) {
		struct vmt_guest *g = ds->guests->v[i];
		if (guest_flush_state(g) == GUEST_FLUSH_WAITING && dump_wants(ds->cur, g))
			guest_flush_timed_out(g);
	}
	dump_freeze(ds);
	return 0;
}

static bool dump_flushing_done(struct vmt_dumps *ds)
{
	for (uint32_t i = 0; i < ds->guests->n; i++)
		if (guest_flush_state(ds->guests->v[i]) == GUEST_FLUSH_WAITING &&
		    dump_wants(ds->cur, ds->guests->v[i]))
			return false;
	return true;
}

/* Ask the wanted agents to flush; freeze when all answered or time is up. */
static void dump_flush(struct vmt_dumps *ds)
{
	struct vmt_dump *d = ds->cur;
	unsigned waiting = 0;
	uint32_t timeout_ms = 0;
	int r;

	d->timer = sd_event_source_disable_unref(d->timer);
	d->phase = VMT_DUMP_FLUSH;
	for (uint32_t i = 0; i < ds->guests->n; i++) {
		struct vmt_guest *g = ds->guests->v[i];
		if (dump_wants(d, g) && guest_flush(g, d->id, dump_guest_flushed, ds)) {
			waiting++;
			timeout_ms = VMT_MAX(timeout_ms, guest_flush_timeout_ms(g));
		}
	}
	log_info("dump %llu: %s (%s), waiting for %u agent(s) to flush", (unsigned long long)d->id,
		 trigger_kind_name(d->triggers[0].kind), d->triggers[0].reason, waiting);
	if (!waiting || dump_flushing_done(ds)) {
		dump_freeze(ds);
		return;
	}
	r = sd_event_add_time_relative(ds->event, &d->timer, CLOCK_MONOTONIC,
				       (uint64_t)timeout_ms * 1000, 1000, dump_flush_timeout_cb, ds);
	if (r < 0) {
		log_error_errno(r, "cannot arm the flush timeout: %m");
		dump_freeze(ds);
	}
}

/* A guest's flush asked by dump_flush() is over (FLUSHED and its bytes
 * came, or its session ended). */
static void dump_guest_flushed(void *userdata, struct vmt_guest *g)
{
	struct vmt_dumps *ds = userdata;

	if (!ds->cur || ds->cur->phase != VMT_DUMP_FLUSH || !dump_wants(ds->cur, g))
		return;
	if (dump_flushing_done(ds))
		dump_freeze(ds);
}

static int dump_add_guest(struct vmt_dump *d, const char *name)
{
	char **t;

	for (uint32_t i = 0; i < d->nguests; i++)
		if (!strcmp(d->guests[i], name))
			return 0;
	t = realloc(d->guests, (d->nguests + 1) * sizeof(*t));
	if (!t)
		return -ENOMEM;
	d->guests = t;
	d->guests[d->nguests] = strdup(name);
	if (!d->guests[d->nguests])
		return -ENOMEM;
	d->nguests++;
	return 0;
}

bool dump_guest_may(struct vmt_dumps *ds, struct vmt_guest *g)
{
	const struct vmt_trigger_conf *tc = &ds->conf->triggers;
	uint64_t now = now_monotonic_ns();

	struct vmt_trigger_budget *b = dump_guest_budget(ds, g);

	if ((b && trigger_cooling(tc, b, now)) || !trigger_take(&ds->policy, tc, b, now)) {
		dump_guest_suppress(ds, g);
		ds->triggers_suppressed++;
		return false;
	}
	return true;
}

/*
 * An automatic trigger: which of the guests it names (n 0: all) may be
 * dumped now. A guest cooling down after its last dump is left out, unless
 * the dump still open takes it anyway; a guest's own trigger spends its
 * own budget too. 0 with *names, *n narrowed to the one eligible guest when
 * only one is, or -EBUSY (counted).
 */
static int automatic_allowed(struct vmt_dumps *ds, const struct vmt_dump *open,
			     char *const **names, uint32_t *n, const char **only,
			     const struct vmt_trigger *t, bool no_cooldown, uint64_t now)
{
	uint32_t eligible = 0;
	const char *first = NULL;
	struct vmt_trigger_budget *b;
	struct vmt_guest *by;

	for (uint32_t i = 0; i < ds->guests->n; i++) {
		struct vmt_guest *g = ds->guests->v[i];
		bool named = !*n;

		for (uint32_t k = 0; k < *n && !named; k++)
			named = !strcmp((*names)[k], guest_name(g));
		if (!named)
			continue;
		b = dump_guest_budget(ds, g);
		if (!no_cooldown && b && trigger_cooling(&ds->conf->triggers, b, now) &&
		    !(open && dump_wants(open, g))) {
			dump_guest_suppress(ds, g);
			continue;
		}
		eligible++;
		first = first ? first : guest_name(g);
	}
	if (!eligible) {
		ds->triggers_suppressed++;
		return -EBUSY;
	}
	if (eligible == 1 && *n != 1) {
		only[0] = first;
		*names = (char *const *)only;
		*n = 1;
	}
	/* a guest's silence, or a crash libvirt reports, is its own doing
	 * too: its budget pays */
	by = (t->kind == VMT_TRIGGER_GUEST || t->kind == VMT_TRIGGER_SILENCE ||
	      t->kind == VMT_TRIGGER_LIBVIRT) && *n == 1
		     ? guest_list_find(ds->guests, (*names)[0]) : NULL;
	if (!open && !trigger_take(&ds->policy, &ds->conf->triggers, dump_guest_budget(ds, by), now)) {
		ds->triggers_suppressed++;
		if (by)
			dump_guest_suppress(ds, by);
		return -EBUSY;
	}
	return 0;
}

/* The request joins d: its guests, its trigger, its window, its client. */
static int dump_join(struct vmt_dumps *ds, struct vmt_dump *d, bool fresh,
		     const struct vmt_dump_req *rq, char *const *names, uint32_t n)
{
	if (!n)
		d->all_guests = true;
	for (uint32_t i = 0; i < n; i++)
		if (dump_add_guest(d, names[i]) < 0)
			return -ENOMEM;
	if (d->ntriggers < VMT_SAMPLE_MAX_TRIGGERS)
		d->triggers[d->ntriggers++] = *rq->trigger;
	else
		d->triggers_dropped++;
	ds->triggers_total++;
	/* the widest window asked for; 0 means the whole ring and wins */
	if (fresh || !rq->window_ns || !d->window_ns)
		d->window_ns = fresh ? rq->window_ns : 0;
	else
		d->window_ns = VMT_MAX(d->window_ns, rq->window_ns);
	/* its firing time stays: dump_target() chose a dump that serves the
	 * request's post, or a near enough one within the coalescing window */
	d->post_ns = VMT_MAX(d->post_ns, rq->post_ns);
	if (rq->client) {
		struct vmt_waiter *w = calloc(1, sizeof(*w));
		if (!w)
			return -ENOMEM;
		w->client = rq->client;
		w->request_id = rq->request_id;
		w->next = d->waiters;
		d->waiters = w;
	}
	return 0;
}

/*
 * The dump a request with this post, made now, joins: the first (the one
 * flushing, then the queue, soonest first) that fires no later than the
 * request would on its own (own_at), and by then has recorded its post, or
 * that it reached within its coalescing window asking for no more post
 * than it was started with. NULL: it starts its own.
 */
static struct vmt_dump *dump_target(struct vmt_dumps *ds, uint64_t post, uint64_t now,
				    uint64_t own_at)
{
	struct vmt_dump *flushing = ds->cur && ds->cur->phase == VMT_DUMP_FLUSH ? ds->cur : NULL;

	for (struct vmt_dump *d = flushing ? flushing : ds->pending; d;
	     d = d == flushing ? ds->pending : d->later) {
		/* a dump that is due fires when the current one is done */
		uint64_t at = VMT_MAX(d->fire_at_ns, now);

		if (at > own_at)
			continue;
		if (now + post <= at || (now <= d->coalesce_until_ns && post <= d->post_ns))
			return d;
	}
	return NULL;
}

/* A request with a post that would start a dump: is there room? */
static int dump_room(struct vmt_dumps *ds, const struct vmt_dump_req *rq, uint64_t now)
{
	if (!rq->post_ns || ds->nposted < VMT_DUMP_POSTED_MAX)
		return 0;
	ds->dumps_refused++;
	ds->refused_unlogged++;
	if (!ds->refused_logged_ns || now - ds->refused_logged_ns >= 60000000000ull) {
		log_notice("dump request with --post %.3f s (%s) refused: %u dumps waiting for their "
			   "post already; %llu refused since the last such line",
			   rq->post_ns / 1e9, rq->trigger->reason, ds->nposted,
			   (unsigned long long)ds->refused_unlogged);
		ds->refused_logged_ns = now;
		ds->refused_unlogged = 0;
	}
	return -EAGAIN;
}

static void dump_enqueue(struct vmt_dumps *ds, struct vmt_dump *d)
{
	struct vmt_dump **pp = &ds->pending;

	/* after those due no later: first come, first served */
	while (*pp && (*pp)->fire_at_ns <= d->fire_at_ns)
		pp = &(*pp)->later;
	d->later = *pp;
	*pp = d;
	ds->npending++;
	if (d->posted) {
		ds->nposted++;
		log_info("dump for %s: fires in %.3f s (its post), %u dump(s) pending",
			 d->triggers[0].reason, (d->fire_at_ns - now_monotonic_ns()) / 1e9,
			 ds->npending);
	}
	dump_next(ds);
}

int dump_request(struct vmt_dumps *ds, const struct vmt_dump_req *rq)
{
	uint64_t now = now_monotonic_ns();
	uint64_t coalesce = (uint64_t)ds->conf->triggers.coalesce_ms * 1000000;
	uint64_t own_at = now + VMT_MAX(coalesce, rq->post_ns);
	const char *only[1];
	char *const *names = rq->names;
	uint32_t n = rq->n;
	struct vmt_dump *d, *target;
	bool fresh = false;
	int r;

	for (uint32_t i = 0; i < n; i++)
		if (!guest_list_find(ds->guests, names[i]))
			return -ENOENT;
	target = dump_target(ds, rq->post_ns, now, own_at);
	if (!target) {
		r = dump_room(ds, rq, now);
		if (r < 0)
			return r;
	}
	if (trigger_is_automatic(rq->trigger)) {
		r = automatic_allowed(ds, target, &names, &n, only, rq->trigger, rq->no_cooldown, now);
		if (r < 0)
			return r;
	}
	if (target) {
		d = target;
	} else {
		d = calloc(1, sizeof(*d));
		if (!d)
			return -ENOMEM;
		fresh = true;
		d->phase = VMT_DUMP_DELAY;
		d->posted = rq->post_ns > 0;
		d->fire_at_ns = own_at;
		d->coalesce_until_ns = now + coalesce;
	}
	if (dump_join(ds, d, fresh, rq, names, n) < 0) {
		if (fresh)
			dump_free(d);
		return -ENOMEM;
	}
	if (fresh) {
		dump_enqueue(ds, d);
	} else if (d == ds->cur) {
		/* guests added while flushing are asked too */
		for (uint32_t i = 0; i < ds->guests->n; i++) {
			struct vmt_guest *g = ds->guests->v[i];
			if (dump_wants(d, g) && guest_flush_state(g) == GUEST_FLUSH_NONE)
				guest_flush(g, d->id, dump_guest_flushed, ds);
		}
	}
	return 0;
}

static void dump_forget_in(struct vmt_dump *d, struct vmt_client *client)
{
	struct vmt_waiter **pp;

	for (pp = &d->waiters; *pp;) {
		if ((*pp)->client == client) {
			struct vmt_waiter *w = *pp;
			*pp = w->next;
			free(w);
		} else {
			pp = &(*pp)->next;
		}
	}
}

void dump_forget_client(struct vmt_dumps *ds, struct vmt_client *client)
{
	if (ds->cur)
		dump_forget_in(ds->cur, client);
	for (struct vmt_dump *d = ds->pending; d; d = d->later)
		dump_forget_in(d, client);
}
