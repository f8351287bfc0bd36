/* SPDX-License-Identifier: MIT */
/*
 * dump: see dump.h. A dump's requests and phases, and the freezing of each
 * guest's window where it is (freeze_guest); what goes to the writer
 * besides, and what comes back, is dump-write.c's.
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

/* ---- freezing ----------------------------------------------------------- */

/* Sample names carry microseconds and must not collide. */
static uint64_t sample_time(struct vmt_dumps *ds)
{
	uint64_t t = now_realtime_ns();

	if (t / 1000 <= ds->last_sample_ns / 1000)
		t = (ds->last_sample_ns / 1000 + 1) * 1000;
	ds->last_sample_ns = t;
	return t;
}

/* How many of ring r's pages (oldest first) belong to the window. */
static uint32_t window_end(const struct vmt_guest *g, uint32_t c)
{
	const struct vmt_ring *r = &g->rings[c];
	uint32_t n = r->count;

	/* with a flush target the window ends exactly where FLUSHED said;
	 * pages after it belong to the next window and stay in the ring */
	if (g->flushed && g->have_target)
		while (n && ring_slot(r, n - 1)->seq >= g->target_seq[c])
			n--;
	return n;
}

/*
 * Where each CPU's window lies in its ring, [first, end): span_ns > 0
 * keeps only the pages with events of the last span_ns before the newest
 * event of any CPU. Returns that start time (0: no cut).
 */
static uint64_t window_bounds(const struct vmt_guest *g, uint64_t span_ns, uint32_t *first,
			      uint32_t *end)
{
	uint64_t t_end = 0, t_start = 0;

	for (uint32_t c = 0; c < g->nrings; c++) {
		end[c] = window_end(g, c);
		if (end[c])
			t_end = VMT_MAX(t_end, ring_slot(&g->rings[c], end[c] - 1)->last_ts);
	}
	if (span_ns && t_end > span_ns)
		t_start = t_end - span_ns;
	for (uint32_t c = 0; c < g->nrings; c++) {
		while (first[c] < end[c] && ring_slot(&g->rings[c], first[c])->last_ts < t_start)
			first[c]++;
	}
	return t_start;
}

/* The sample's header: who, when, which aux, the triggers, the tasks. */
static int sample_header(struct vmt_dumps *ds, const struct vmt_guest *g, struct vmt_job *job,
			 const struct vmt_trigger *t, uint32_t nt, uint64_t omitted, uint64_t dump_id)
{
	struct vmt_sample *s = &job->sample;

	snprintf(s->guest, sizeof(s->guest), "%s", g->conf.name);
	snprintf(s->host, sizeof(s->host), "%s", ds->hostname);
	s->aux_version = g->aux.version;
	if (g->tasks.len) {
		s->tasks = malloc(g->tasks.len);
		if (!s->tasks)
			return -ENOMEM;
		memcpy(s->tasks, g->tasks.data, g->tasks.len);
		s->tasks_len = (uint32_t)g->tasks.len;
	}
	s->aux_id = g->aux.id;
	s->created_ns = sample_time(ds);
	s->dump_id = dump_id;
	s->page_size = g->layout.page_size;
	s->ntriggers = VMT_MIN(nt, VMT_SAMPLE_MAX_TRIGGERS);
	s->triggers_omitted = omitted;
	memcpy(s->triggers, t, s->ntriggers * sizeof(*t));
	s->ctl_rejected_bytes = guest_ctl_rejected_bytes(g);
	s->ctl_rejected_msgs = guest_ctl_rejected_msgs(g);
	s->flush_timeouts = g->c.flush_timeouts;
	sample_file_name(job->name, sizeof(job->name), g->conf.name, s->created_ns);
	return 0;
}

/*
 * CPU c's part of the sample: its counters, times and events, and the
 * iovecs the writer reads its pages through (into iov; returns how many).
 * The page straddling t_start is replaced by a cut copy in job->cut.
 */
static uint32_t freeze_cpu(const struct vmt_guest *g, struct vmt_job *job, uint32_t c,
			   uint32_t first, uint32_t end, uint64_t t_start, struct vmt_iovec *iov)
{
	const struct vmt_ring *r = &g->rings[c];
	const struct vmt_ring_hold *h = &job->holds[c];
	struct vmt_sample_cpu *sc = &job->sample.cpus[c];
	uint32_t ps = g->layout.page_size;
	struct vmt_page_info cut_info;
	bool cut = false;
	uint32_t k = 0;

	sc->cpu = c;
	sc->npages = end - first;
	ring_counters_to_sample(&r->c, &sc->counters);
	sc->have_guest_stats = g->have_stats;
	if (g->have_stats)
		sc->guest = g->stats[c];
	if (first < end && t_start && ring_slot(r, first)->first_ts < t_start) {
		/* the page straddling the start: a cut copy in its place */
		uint8_t *cp = job->cut + (size_t)c * ps;

		memcpy(cp, ring_page(r, first), ps);
		cut = page_cut_before(&g->layout, cp, t_start) > 0 &&
		      page_scan(&g->layout, cp, &cut_info) >= 0;
		if (cut)
			iov[k++] = (struct vmt_iovec){ cp, ps };
	}
	for (uint32_t j = 0; j < h->nruns; j++) {
		struct vmt_iovec run = h->runs[j];

		if (cut && !j) {
			run.base = (const uint8_t *)run.base + ps;
			run.len -= ps;
		}
		if (run.len)
			iov[k++] = run;
	}
	for (uint32_t i = first; i < end; i++) {
		const struct vmt_ring_slot *sl = ring_slot(r, i);
		struct vmt_page_info info = { .first_ts = sl->first_ts, .last_ts = sl->last_ts,
					      .events = sl->events };

		if (i == first && cut)
			info = cut_info;
		if (i == first) {
			sc->first_seq = sl->seq;
			sc->first_ts = info.first_ts;
		}
		sc->last_ts = info.last_ts;
		sc->events += info.events;
	}
	sc->iov = iov;
	sc->niov = k;
	return k;
}

/* The clock points around the window, over all CPUs. */
static int sample_clock(struct vmt_guest *g, struct vmt_sample *s)
{
	uint64_t lo = UINT64_MAX, hi = 0;

	for (uint32_t c = 0; c < g->nrings; c++)
		if (s->cpus[c].npages) {
			lo = VMT_MIN(lo, s->cpus[c].first_ts);
			hi = VMT_MAX(hi, s->cpus[c].last_ts);
		}
	if (sync_clock_info(g, lo == UINT64_MAX ? 0 : lo, hi, &s->clock) < 0)
		return -ENOMEM;
	s->have_clock = true;
	return 0;
}

/*
 * Copy one guest's window out of its rings. span_ns > 0 keeps only the
 * events of the last span_ns before the newest event of any CPU, the same
 * start time on every CPU, cut inside the page that straddles it.
 */
static struct vmt_job *freeze_guest(struct vmt_dumps *ds, struct vmt_guest *g,
				    const struct vmt_trigger *t, uint32_t nt, uint64_t omitted,
				    uint64_t dump_id, uint64_t span_ns)
{
	struct vmt_job *job;
	uint32_t ps = g->layout.page_size;
	uint64_t t_start;
	uint32_t *first, *end;
	size_t niov = 0;

	if (!g->nrings || !g->have_aux) {
		log_guest(VMT_LOG_NOTICE, 0, g->conf.name, "nothing recorded yet: no sample written");
		return NULL;
	}
	first = calloc(g->nrings, sizeof(*first));
	end = calloc(g->nrings, sizeof(*end));
	job = calloc(1, sizeof(*job));
	if (!job || !first || !end)
		goto oom;
	t_start = window_bounds(g, span_ns, first, end);

	job->kind = VMT_JOB_SAMPLE;
	job->dump_id = dump_id;
	dump_job_retention(ds, job);
	job->zstd_level = ds->conf->zstd_level;
	job->zstd_workers = 2;
	snprintf(job->dir, sizeof(job->dir), "%s/%s", ds->conf->state_dir, g->conf.name);
	job->holds = calloc(g->nrings, sizeof(*job->holds));
	job->sample.cpus = calloc(g->nrings, sizeof(*job->sample.cpus));
	if (!job->holds || !job->sample.cpus)
		goto oom;
	job->sample.ncpus = g->nrings;	/* job_free releases the holds taken */
	if (sample_header(ds, g, job, t, nt, omitted, dump_id) < 0)
		goto oom;

	/* no copy: the writer reads the pages where they are, held */
	for (uint32_t c = 0; c < g->nrings; c++) {
		if (ring_hold(&g->rings[c], first[c], end[c], &job->holds[c]) < 0)
			goto oom;
		niov += job->holds[c].nruns + 1;
	}
	job->iovs = calloc(niov, sizeof(*job->iovs));
	job->cut = t_start ? malloc((size_t)g->nrings * ps) : NULL;
	if (!job->iovs || (t_start && !job->cut))
		goto oom;
	niov = 0;
	for (uint32_t c = 0; c < g->nrings; c++)
		niov += freeze_cpu(g, job, c, first[c], end[c], t_start, &job->iovs[niov]);
	if (sample_clock(g, &job->sample) < 0)
		goto oom;
	free(first);
	free(end);
	g->dumps.last_dump_ns = now_monotonic_ns();
	/*
	 * Aux files are written only for samples: the first sample of a
	 * session (or the next, after a failed write) queues its aux ahead of
	 * it; the writer is FIFO, so the file is there first, or the sample
	 * fails with it. Once written, the bundle is dropped.
	 */
	if (g->have_aux && g->aux.meta && !g->aux_pending)
		dump_submit_aux(ds, g);
	return job;
oom:
	log_guest(VMT_LOG_ERR, -ENOMEM, g->conf.name, "cannot freeze the window: %m");
	free(first);
	free(end);
	job_free(job);
	ds->dump_errors++;
	return NULL;
}

void dump_guest_now(struct vmt_dumps *ds, struct vmt_guest *g, const struct vmt_trigger *t)
{
	struct vmt_job *job;
	bool flushed = g->flushed;

	g->flushed = false;	/* no flush target: take every page */
	job = freeze_guest(ds, g, t, 1, 0, 0, 0);
	g->flushed = flushed;
	if (job) {
		ds->dumps++;
		writer_submit(ds->writer, job);
	}
}

/* ---- requests ------------------------------------------------------------ */

static bool dump_wants(const struct vmt_dump *d, const struct vmt_guest *g)
{
	if (d->all_guests)
		return true;
	for (uint32_t i = 0; i < d->nguests; i++)
		if (!strcmp(d->guests[i], g->conf.name))
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
	ds->cur = ds->next = NULL;
	ds->policy = (struct vmt_trigger_policy){ 0 };
}

void dump_free_all(struct vmt_dumps *ds)
{
	dump_free(ds->cur);
	dump_free(ds->next);
	ds->cur = ds->next = NULL;
}

static void dump_begin(struct vmt_dumps *ds);

void dump_finish(struct vmt_dumps *ds)
{
	struct vmt_dump *d = ds->cur;

	for (struct vmt_waiter *w = d->waiters; w; w = w->next)
		ds->answer(ds->owner, w->client, w->request_id, d->files, d->nfiles,
				    d->error);
	log_info("dump %llu: done, %u file(s)", (unsigned long long)d->id, d->nfiles);
	dump_free(d);
	ds->cur = ds->next;
	ds->next = NULL;
	if (ds->cur)
		dump_begin(ds);
}

static void dump_freeze(struct vmt_dumps *ds)
{
	struct vmt_dump *d = ds->cur;
	/* 0: the whole ring; otherwise the moments before the trigger and after */
	uint64_t span = d->window_ns ? d->window_ns + d->post_ns : 0;

	d->timer = sd_event_source_disable_unref(d->timer);
	d->phase = VMT_DUMP_WRITE;
	for (uint32_t i = 0; i < ds->guests->n; i++) {
		struct vmt_guest *g = ds->guests->v[i];
		struct vmt_job *job;

		if (!dump_wants(d, g))
			continue;
		job = freeze_guest(ds, g, d->triggers, d->ntriggers, d->triggers_dropped, d->id, span);
		g->flushed = false;
		g->have_target = false;
		g->flush_wait = false;
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
		if (g->flush_wait && dump_wants(ds->cur, g)) {
			g->flush_wait = false;
			g->c.flush_timeouts++;
			log_guest(VMT_LOG_WARNING, 0, g->conf.name,
				  "no FLUSHED within %u ms: dumping what has arrived",
				  g->conf.rec.flush_timeout_ms);
		}
	}
	dump_freeze(ds);
	return 0;
}

static bool dump_flushing_done(struct vmt_dumps *ds)
{
	for (uint32_t i = 0; i < ds->guests->n; i++)
		if (ds->guests->v[i]->flush_wait && dump_wants(ds->cur, ds->guests->v[i]))
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
		if (dump_wants(d, g) && guest_flush(g, d->id)) {
			waiting++;
			timeout_ms = VMT_MAX(timeout_ms, g->conf.rec.flush_timeout_ms);
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

static int dump_delay_cb(sd_event_source *s, uint64_t usec, void *userdata)
{
	dump_flush(userdata);
	return 0;
}

/* Wait for the coalescing window and --post, then flush. */
static void dump_schedule(struct vmt_dumps *ds)
{
	struct vmt_dump *d = ds->cur;
	uint64_t now = now_monotonic_ns();
	int r;

	if (d->fire_at_ns <= now) {
		dump_flush(ds);
		return;
	}
	if (d->timer) {
		sd_event_source_set_time(d->timer, d->fire_at_ns / 1000);
		sd_event_source_set_enabled(d->timer, SD_EVENT_ONESHOT);
		return;
	}
	r = sd_event_add_time(ds->event, &d->timer, CLOCK_MONOTONIC, d->fire_at_ns / 1000, 1000,
			      dump_delay_cb, ds);
	if (r < 0) {
		log_error_errno(r, "cannot arm the dump delay: %m");
		dump_flush(ds);
	}
}

static void dump_begin(struct vmt_dumps *ds)
{
	ds->cur->id = ++ds->next_dump_id;
	ds->cur->phase = VMT_DUMP_DELAY;
	dump_schedule(ds);
}

void dump_guest_flushed(struct vmt_dumps *ds, struct vmt_guest *g)
{
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

	if (trigger_cooling(tc, &g->dumps, now) || !trigger_take(&ds->policy, tc, &g->dumps, now)) {
		g->c.triggers_suppressed++;
		ds->triggers_suppressed++;
		return false;
	}
	return true;
}

int dump_request(struct vmt_dumps *ds, const struct vmt_dump_req *rq)
{
	uint64_t now = now_monotonic_ns();
	const char *only[1];
	char *const *names = rq->names;
	uint32_t n = rq->n;
	struct vmt_dump *d, *open = ds->cur && ds->cur->phase != VMT_DUMP_WRITE ? ds->cur : ds->next;
	bool fresh = false, automatic = trigger_is_automatic(rq->trigger);

	for (uint32_t i = 0; i < n; i++)
		if (!guest_list_find(ds->guests, names[i]))
			return -ENOENT;

	if (automatic) {
		/* a guest cooling down after its last dump is left out, unless
		 * the dump still open takes it anyway */
		uint32_t eligible = 0;
		const char *first = NULL;

		for (uint32_t i = 0; i < ds->guests->n; i++) {
			struct vmt_guest *g = ds->guests->v[i];
			bool named = !n;
			for (uint32_t k = 0; k < n && !named; k++)
				named = !strcmp(names[k], g->conf.name);
			if (!named)
				continue;
			if (trigger_cooling(&ds->conf->triggers, &g->dumps, now) &&
			    !(open && dump_wants(open, g))) {
				g->c.triggers_suppressed++;
				continue;
			}
			eligible++;
			first = first ? first : g->conf.name;
		}
		if (!eligible) {
			ds->triggers_suppressed++;
			return -EBUSY;
		}
		if (eligible == 1 && n != 1) {
			only[0] = first;
			names = (char *const *)only;
			n = 1;
		}
		/* a guest's own trigger spends its own budget too */
		struct vmt_guest *by = rq->trigger->kind == VMT_TRIGGER_GUEST && n == 1 ?
				       guest_list_find(ds->guests, names[0]) : NULL;

		if (!open && !trigger_take(&ds->policy, &ds->conf->triggers, by ? &by->dumps : NULL,
					   now)) {
			ds->triggers_suppressed++;
			if (by)
				by->c.triggers_suppressed++;
			return -EBUSY;
		}
	}

	if (open) {
		d = open;
	} else {
		d = calloc(1, sizeof(*d));
		if (!d)
			return -ENOMEM;
		fresh = true;
		d->fire_at_ns = now + (uint64_t)ds->conf->triggers.coalesce_ms * 1000000;
	}
	if (!n)
		d->all_guests = true;
	for (uint32_t i = 0; i < n; i++)
		if (dump_add_guest(d, names[i]) < 0)
			goto oom;
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
	d->post_ns = VMT_MAX(d->post_ns, rq->post_ns);
	d->fire_at_ns = VMT_MAX(d->fire_at_ns, now + rq->post_ns);
	if (rq->client) {
		struct vmt_waiter *w = calloc(1, sizeof(*w));
		if (!w)
			goto oom;
		w->client = rq->client;
		w->request_id = rq->request_id;
		w->next = d->waiters;
		d->waiters = w;
	}
	if (fresh) {
		if (!ds->cur) {
			ds->cur = d;
			dump_begin(ds);
		} else {
			ds->next = d;
		}
	} else if (d == ds->cur && d->phase == VMT_DUMP_DELAY) {
		dump_schedule(ds);
	} else if (d == ds->cur && d->phase == VMT_DUMP_FLUSH) {
		/* guests added while flushing are asked too */
		for (uint32_t i = 0; i < ds->guests->n; i++) {
			struct vmt_guest *g = ds->guests->v[i];
			if (dump_wants(d, g) && !g->flush_wait && !g->flushed)
				guest_flush(g, d->id);
		}
	}
	return 0;
oom:
	if (fresh)
		dump_free(d);
	return -ENOMEM;
}

void dump_forget_client(struct vmt_dumps *ds, struct vmt_client *client)
{
	struct vmt_dump *both[2] = { ds->cur, ds->next };

	for (int k = 0; k < 2; k++) {
		struct vmt_waiter **pp;
		if (!both[k])
			continue;
		for (pp = &both[k]->waiters; *pp;) {
			if ((*pp)->client == client) {
				struct vmt_waiter *w = *pp;
				*pp = w->next;
				free(w);
			} else {
				pp = &(*pp)->next;
			}
		}
	}
}
