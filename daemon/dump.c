/* SPDX-License-Identifier: MIT */
/*
 * dump: the manager's dumps. A request (signal, control socket, later BPF
 * and guests) joins the dump that is not yet frozen, or starts one:
 *
 *   DELAY  coalesce window, and --post: recording goes on
 *   FLUSH  every wanted agent flushes; bounded by flush_timeout
 *   WRITE  each guest's window is held where it is in its rings
 *          (ring_hold) and handed to the writer thread; the answer goes
 *          out when all are written, and the holds are released
 *
 * Automatic triggers (BPF, guest) are held back by a per-guest cooldown and
 * a global rate limit and counted when suppressed; an operator's dump
 * (signal, vmtracectl) always happens. Every dump a guest causes (TRIGGER,
 * an oops line, a new boot, new metadata, a new shape) also spends that
 * guest's own budget (per_guest_per_minute), and may not take the last
 * quarter of the global one, kept for the BPF detectors, nor (once it has
 * caused a dump in the last minute) the quarter before it, kept for the
 * guests that have not.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"
#include "guest.h"
#include "log.h"
#include "manager.h"
#include "guest-sync.h"

/* ---- retention ----------------------------------------------------------- */

/* What the writer needs to apply the retention rules after a job: the
 * limits, and the aux versions live sessions will still write samples for. */
static void job_set_retention(struct vmt_manager *m, struct vmt_job *job)
{
	snprintf(job->state_dir, sizeof(job->state_dir), "%s", m->conf.state_dir);
	job->retention = m->conf.retention;
	job->pins = calloc(m->guests.n ? m->guests.n : 1, sizeof(*job->pins));
	if (!job->pins)
		return;
	for (uint32_t i = 0; i < m->guests.n; i++) {
		const struct vmt_guest *g = m->guests.v[i];
		if (!g->have_aux)
			continue;
		snprintf(job->pins[job->npins].guest, sizeof(job->pins[0].guest), "%s", g->conf.name);
		job->pins[job->npins++].aux_version = g->aux.version;
	}
}

void manager_submit_retention(struct vmt_manager *m)
{
	struct vmt_job *job = calloc(1, sizeof(*job));

	if (!job)
		return;
	job->kind = VMT_JOB_RETENTION;
	job_set_retention(m, job);
	writer_submit(&m->writer, job);
}

static void log_retention(struct vmt_manager *m, const struct vmt_job *job)
{
	const struct vmt_retention_result *r = &job->ret;

	if (!job->state_dir[0])
		return;
	if (job->ret_error < 0 && job->ret_error != -ENOENT) {
		log_full(VMT_LOG_WARNING, job->ret_error, NULL, "retention: cannot scan %s: %m",
			 job->state_dir);
		return;
	}
	m->retention_deleted += r->samples + r->aux;
	if (r->samples || r->aux || r->temps)
		log_info("retention: deleted %u sample(s), %u aux file(s) (%llu KiB), %u stale temporary file(s); "
			 "%u sample(s) kept (%llu KiB)",
			 r->samples, r->aux, (unsigned long long)(r->bytes >> 10), r->temps,
			 r->kept_samples, (unsigned long long)(r->kept_bytes >> 10));
	if (r->errors)
		log_full(VMT_LOG_WARNING, r->first_error, NULL, "retention: %u file(s) could not be deleted: %m",
			 r->errors);
	if (r->unmet)
		log_warning("retention: limits not met: what is left is needed by live sessions");
}

/*
 * The index SAMPLES answers from, from what the writer saw: the list a
 * retention pass left, else the sample it just wrote. Jobs come back in
 * the order they were done, so the index follows the folder. A job queued
 * before a reload moved state_dir says nothing of the new one.
 */
static void index_update(struct vmt_manager *m, struct vmt_job *job)
{
	const struct vmt_sample *s = &job->sample;
	char path[PATH_MAX + 400];
	struct vmt_sindex_entry e = { .path = path };

	if (!job->state_dir[0] || strcmp(job->state_dir, m->conf.state_dir))
		return;
	if (job->have_index) {
		sindex_take(&m->samples, &job->index);
		job->have_index = 0;
		return;
	}
	if (job->ret_error < 0)
		m->samples.error = job->ret_error;
	if (job->kind != VMT_JOB_SAMPLE || job->error < 0)
		return;
	snprintf(path, sizeof(path), "%s/%s", job->dir, job->name);
	snprintf(e.guest, sizeof(e.guest), "%s", s->guest);
	e.created_ns = s->created_ns / 1000 * 1000;	/* as the name says it */
	e.bytes = job->bytes;
	e.aux_version = s->aux_version;
	e.text = s->ntriggers ? (char *)s->triggers[0].reason : NULL;
	if (sindex_add(&m->samples, &e) < 0)
		log_error_errno(-ENOMEM, "%s is not in the sample index until the next retention "
			       "pass: %m", path);
}

/*
 * At start, before any guest connects and anything is written: a daemon
 * killed between a sample's rename and the retention pass after it left
 * one sample too many, and its next dump must not add another. Run here,
 * in the loop's thread while the writer is idle, so that no session looks
 * up an aux file the pass is deleting. What it leaves is the first index
 * SAMPLES answers from.
 */
void manager_apply_retention_now(struct vmt_manager *m)
{
	struct vmt_job job = { .kind = VMT_JOB_RETENTION };
	struct vmt_store kept;

	job_set_retention(m, &job);
	job.ret_error = retention_apply_kept(job.state_dir, &job.retention, job.pins, job.npins,
					     now_realtime_ns() / 1000000000, &job.ret, &kept);
	if (job.ret_error == 0)
		job.have_index = sindex_from_store(&job.index, &kept) == 0;
	retention_store_free(&kept);
	log_retention(m, &job);
	index_update(m, &job);
	free(job.pins);
	sindex_free(&job.index);
}

/* ---- freezing ----------------------------------------------------------- */

/* Sample names carry microseconds and must not collide. */
static uint64_t manager_sample_time(struct vmt_manager *m)
{
	uint64_t t = now_realtime_ns();

	if (t / 1000 <= m->last_sample_ns / 1000)
		t = (m->last_sample_ns / 1000 + 1) * 1000;
	m->last_sample_ns = t;
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
 * Copy one guest's window out of its rings. span_ns > 0 keeps only the
 * events of the last span_ns before the newest event of any CPU, the same
 * start time on every CPU, cut inside the page that straddles it.
 */
static struct vmt_job *freeze_guest(struct vmt_manager *m, struct vmt_guest *g,
				    const struct vmt_trigger *t, uint32_t nt, uint64_t omitted,
				    uint64_t dump_id, uint64_t span_ns)
{
	struct vmt_job *job;
	uint32_t ps = g->layout.page_size;
	uint64_t t_end = 0, t_start = 0;
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

	job->kind = VMT_JOB_SAMPLE;
	job->dump_id = dump_id;
	job_set_retention(m, job);
	job->zstd_level = m->conf.zstd_level;
	job->zstd_workers = 2;
	snprintf(job->dir, sizeof(job->dir), "%s/%s", m->conf.state_dir, g->conf.name);
	job->holds = calloc(g->nrings, sizeof(*job->holds));
	job->sample.cpus = calloc(g->nrings, sizeof(*job->sample.cpus));
	if (!job->holds || !job->sample.cpus)
		goto oom;
	job->sample.ncpus = g->nrings;	/* job_free releases the holds taken */

	struct vmt_sample *s = &job->sample;
	snprintf(s->guest, sizeof(s->guest), "%s", g->conf.name);
	snprintf(s->host, sizeof(s->host), "%s", m->hostname);
	s->aux_version = g->aux.version;
	if (g->tasks.len) {
		s->tasks = malloc(g->tasks.len);
		if (!s->tasks)
			goto oom;
		memcpy(s->tasks, g->tasks.data, g->tasks.len);
		s->tasks_len = (uint32_t)g->tasks.len;
	}
	s->aux_id = g->aux.id;
	s->created_ns = manager_sample_time(m);
	s->dump_id = dump_id;
	s->page_size = ps;
	s->ntriggers = VMT_MIN(nt, VMT_SAMPLE_MAX_TRIGGERS);
	s->triggers_omitted = omitted;
	memcpy(s->triggers, t, s->ntriggers * sizeof(*t));
	s->ctl_rejected_bytes = guest_ctl_rejected_bytes(g);
	s->ctl_rejected_msgs = guest_ctl_rejected_msgs(g);
	s->flush_timeouts = g->c.flush_timeouts;
	sample_file_name(job->name, sizeof(job->name), g->conf.name, s->created_ns);

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
	for (uint32_t c = 0; c < g->nrings; c++) {
		const struct vmt_ring *r = &g->rings[c];
		const struct vmt_ring_hold *h = &job->holds[c];
		struct vmt_sample_cpu *sc = &s->cpus[c];
		struct vmt_iovec *iov = &job->iovs[niov];
		struct vmt_page_info cut_info;
		bool cut = false;
		uint32_t k = 0;

		sc->cpu = c;
		sc->npages = end[c] - first[c];
		ring_counters_to_sample(&r->c, &sc->counters);
		sc->have_guest_stats = g->have_stats;
		if (g->have_stats)
			sc->guest = g->stats[c];
		if (first[c] < end[c] && t_start && ring_slot(r, first[c])->first_ts < t_start) {
			/* the page straddling the start: a cut copy in its place */
			uint8_t *cp = job->cut + (size_t)c * ps;

			memcpy(cp, ring_page(r, first[c]), ps);
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
		for (uint32_t i = first[c]; i < end[c]; i++) {
			const struct vmt_ring_slot *sl = ring_slot(r, i);
			struct vmt_page_info info = { .first_ts = sl->first_ts, .last_ts = sl->last_ts,
						      .events = sl->events };

			if (i == first[c] && cut)
				info = cut_info;
			if (i == first[c]) {
				sc->first_seq = sl->seq;
				sc->first_ts = info.first_ts;
			}
			sc->last_ts = info.last_ts;
			sc->events += info.events;
		}
		sc->iov = iov;
		sc->niov = k;
		niov += k;
	}
	{
		/* the clock points around the window, over all CPUs */
		uint64_t lo = UINT64_MAX, hi = 0;
		for (uint32_t c = 0; c < g->nrings; c++)
			if (s->cpus[c].npages) {
				lo = VMT_MIN(lo, s->cpus[c].first_ts);
				hi = VMT_MAX(hi, s->cpus[c].last_ts);
			}
		if (sync_clock_info(g, lo == UINT64_MAX ? 0 : lo, hi, &s->clock) < 0)
			goto oom;
		s->have_clock = true;
	}
	free(first);
	free(end);
	g->last_freeze_ns = now_monotonic_ns();
	/*
	 * Aux files are written only for samples: the first sample of a
	 * session (or the next, after a failed write) queues its aux ahead of
	 * it; the writer is FIFO, so the file is there first, or the sample
	 * fails with it. Once written, the bundle is dropped.
	 */
	if (g->have_aux && g->aux.meta && !g->aux_pending)
		manager_submit_aux(m, g);
	return job;
oom:
	log_guest(VMT_LOG_ERR, -ENOMEM, g->conf.name, "cannot freeze the window: %m");
	free(first);
	free(end);
	job_free(job);
	m->dump_errors++;
	return NULL;
}

void manager_dump_guest_now(struct vmt_manager *m, struct vmt_guest *g, const struct vmt_trigger *t)
{
	struct vmt_job *job;
	bool flushed = g->flushed;

	g->flushed = false;	/* no flush target: take every page */
	job = freeze_guest(m, g, t, 1, 0, 0, 0);
	g->flushed = flushed;
	if (job) {
		m->dumps++;
		writer_submit(&m->writer, job);
	}
}


void manager_submit_aux(struct vmt_manager *m, struct vmt_guest *g)
{
	struct vmt_job *job = calloc(1, sizeof(*job));

	if (!job || !g->aux.meta)
		goto fail;
	job->kind = VMT_JOB_AUX;
	snprintf(job->dir, sizeof(job->dir), "%s/%s", m->conf.state_dir, g->conf.name);
	aux_file_name(job->name, sizeof(job->name), g->aux.version);
	job->aux = g->aux;
	job->aux.meta = malloc(g->aux.meta_len);
	if (!job->aux.meta)
		goto fail;
	/* the clocks and the method as they are now; the points are in samples */
	job->aux.have_clock = sync_clock_info(g, 0, 0, &job->aux.sync) == 0;
	memcpy(job->aux.meta, g->aux.meta, g->aux.meta_len);
	g->aux_pending = true;
	guest_settle_meta(g);	/* the job's copy counts too */
	writer_submit(&m->writer, job);
	return;
fail:
	free(job);
	log_guest(VMT_LOG_ERR, -ENOMEM, g->conf.name, "cannot queue the aux file: %m");
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

void manager_free_dumps(struct vmt_manager *m)
{
	dump_free(m->cur);
	dump_free(m->next);
	m->cur = m->next = NULL;
}

static void dump_begin(struct vmt_manager *m);

static void dump_finish(struct vmt_manager *m)
{
	struct vmt_dump *d = m->cur;

	for (struct vmt_waiter *w = d->waiters; w; w = w->next)
		manager_answer_dump(w->client, w->request_id, d->files, d->nfiles,
				    d->error);
	log_info("dump %llu: done, %u file(s)", (unsigned long long)d->id, d->nfiles);
	dump_free(d);
	m->cur = m->next;
	m->next = NULL;
	if (m->cur)
		dump_begin(m);
}

static void dump_freeze(struct vmt_manager *m)
{
	struct vmt_dump *d = m->cur;
	/* 0: the whole ring; otherwise the moments before the trigger and after */
	uint64_t span = d->window_ns ? d->window_ns + d->post_ns : 0;

	d->timer = sd_event_source_disable_unref(d->timer);
	d->phase = VMT_DUMP_WRITE;
	for (uint32_t i = 0; i < m->guests.n; i++) {
		struct vmt_guest *g = m->guests.v[i];
		struct vmt_job *job;

		if (!dump_wants(d, g))
			continue;
		job = freeze_guest(m, g, d->triggers, d->ntriggers, d->triggers_dropped, d->id, span);
		g->flushed = false;
		g->have_target = false;
		g->flush_wait = false;
		if (!job)
			continue;
		d->jobs_left++;
		writer_submit(&m->writer, job);
	}
	m->dumps++;
	if (!d->jobs_left)
		dump_finish(m);
}

static int dump_flush_timeout_cb(sd_event_source *s, uint64_t usec, void *userdata)
{
	struct vmt_manager *m = userdata;

	for (uint32_t i = 0; i < m->guests.n; i++) {
		struct vmt_guest *g = m->guests.v[i];
		if (g->flush_wait && dump_wants(m->cur, g)) {
			g->flush_wait = false;
			g->c.flush_timeouts++;
			log_guest(VMT_LOG_WARNING, 0, g->conf.name,
				  "no FLUSHED within %u ms: dumping what has arrived",
				  g->conf.rec.flush_timeout_ms);
		}
	}
	dump_freeze(m);
	return 0;
}

static bool dump_flushing_done(struct vmt_manager *m)
{
	for (uint32_t i = 0; i < m->guests.n; i++)
		if (m->guests.v[i]->flush_wait && dump_wants(m->cur, m->guests.v[i]))
			return false;
	return true;
}

/* Ask the wanted agents to flush; freeze when all answered or time is up. */
static void dump_flush(struct vmt_manager *m)
{
	struct vmt_dump *d = m->cur;
	unsigned waiting = 0;
	uint32_t timeout_ms = 0;
	int r;

	d->timer = sd_event_source_disable_unref(d->timer);
	d->phase = VMT_DUMP_FLUSH;
	for (uint32_t i = 0; i < m->guests.n; i++) {
		struct vmt_guest *g = m->guests.v[i];
		if (dump_wants(d, g) && guest_flush(g, d->id)) {
			waiting++;
			timeout_ms = VMT_MAX(timeout_ms, g->conf.rec.flush_timeout_ms);
		}
	}
	log_info("dump %llu: %s (%s), waiting for %u agent(s) to flush", (unsigned long long)d->id,
		 trigger_kind_name(d->triggers[0].kind), d->triggers[0].reason, waiting);
	if (!waiting || dump_flushing_done(m)) {
		dump_freeze(m);
		return;
	}
	r = sd_event_add_time_relative(m->event, &d->timer, CLOCK_MONOTONIC,
				       (uint64_t)timeout_ms * 1000, 1000, dump_flush_timeout_cb, m);
	if (r < 0) {
		log_error_errno(r, "cannot arm the flush timeout: %m");
		dump_freeze(m);
	}
}

static int dump_delay_cb(sd_event_source *s, uint64_t usec, void *userdata)
{
	dump_flush(userdata);
	return 0;
}

/* Wait for the coalescing window and --post, then flush. */
static void dump_schedule(struct vmt_manager *m)
{
	struct vmt_dump *d = m->cur;
	uint64_t now = now_monotonic_ns();
	int r;

	if (d->fire_at_ns <= now) {
		dump_flush(m);
		return;
	}
	if (d->timer) {
		sd_event_source_set_time(d->timer, d->fire_at_ns / 1000);
		sd_event_source_set_enabled(d->timer, SD_EVENT_ONESHOT);
		return;
	}
	r = sd_event_add_time(m->event, &d->timer, CLOCK_MONOTONIC, d->fire_at_ns / 1000, 1000,
			      dump_delay_cb, m);
	if (r < 0) {
		log_error_errno(r, "cannot arm the dump delay: %m");
		dump_flush(m);
	}
}

static void dump_begin(struct vmt_manager *m)
{
	m->cur->id = ++m->next_dump_id;
	m->cur->phase = VMT_DUMP_DELAY;
	dump_schedule(m);
}

void manager_guest_flushed(struct vmt_manager *m, struct vmt_guest *g)
{
	if (!m->cur || m->cur->phase != VMT_DUMP_FLUSH || !dump_wants(m->cur, g))
		return;
	if (dump_flushing_done(m))
		dump_freeze(m);
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

static bool trigger_is_automatic(const struct vmt_trigger *t)
{
	return t->kind == VMT_TRIGGER_BPF || t->kind == VMT_TRIGGER_GUEST;
}

/* A bucket of per_min tokens, refilled evenly; per_min 0: no limit. */
static void bucket_fill(double *tokens, uint64_t *at, uint32_t per_min, uint64_t now)
{
	if (!*at) {
		*tokens = per_min;
		*at = now;
	}
	*tokens += (double)(now - *at) * per_min / 60e9;
	if (*tokens > per_min)
		*tokens = per_min;
	*at = now;
}

/* A share of the global bucket: a quarter of it, at least one token. The
 * detectors may take every token; a guest whose own budget is full (it
 * caused no dump for a minute) must leave one share for the detectors; a
 * guest that has been causing dumps must leave two: the detectors' and the
 * quiet guests'. */
static double global_share(uint32_t per_min)
{
	return per_min < 2 ? 0 : VMT_MAX(1.0, per_min / 4.0);
}

/* Is the guest's own budget full (nothing spent for a minute)? */
static bool guest_budget_full(struct vmt_manager *m, struct vmt_guest *g, uint64_t now)
{
	uint32_t per_min = m->conf.triggers.per_guest_per_minute;

	if (!per_min)
		return true;
	bucket_fill(&g->trig_tokens, &g->trig_tokens_at_ns, per_min, now);
	return g->trig_tokens >= per_min;
}

/*
 * May an automatic dump start now? A detector's (g NULL) may take every
 * global token; a guest-caused one (g its guest) needs a token of its own
 * and leaves the shares above. Takes the tokens if so.
 */
static bool budget_take(struct vmt_manager *m, struct vmt_guest *g, uint64_t now)
{
	uint32_t per_min = m->conf.triggers.max_per_minute, own = m->conf.triggers.per_guest_per_minute;
	double floor = 0;

	if (g) {
		bool full = guest_budget_full(m, g, now);

		if (own && g->trig_tokens < 1)
			return false;
		floor = global_share(per_min) * (full ? 1 : 2);
	}
	if (per_min) {
		bucket_fill(&m->tokens, &m->tokens_at_ns, per_min, now);
		if (m->tokens - 1 < floor)
			return false;
		m->tokens -= 1;
	}
	if (g && own)
		g->trig_tokens -= 1;
	return true;
}

static bool guest_cooling(const struct vmt_manager *m, const struct vmt_guest *g, uint64_t now)
{
	uint64_t cd = (uint64_t)m->conf.triggers.cooldown_ms * 1000000;

	return g->last_freeze_ns && cd && now - g->last_freeze_ns < cd;
}

bool manager_guest_may_dump(struct vmt_manager *m, struct vmt_guest *g)
{
	uint64_t now = now_monotonic_ns();

	if (guest_cooling(m, g, now) || !budget_take(m, g, now)) {
		g->c.triggers_suppressed++;
		m->triggers_suppressed++;
		return false;
	}
	return true;
}

int manager_request_dump(struct vmt_manager *m, const struct vmt_dump_req *rq)
{
	uint64_t now = now_monotonic_ns();
	const char *only[1];
	char *const *names = rq->names;
	uint32_t n = rq->n;
	struct vmt_dump *d, *open = m->cur && m->cur->phase != VMT_DUMP_WRITE ? m->cur : m->next;
	bool fresh = false, automatic = trigger_is_automatic(rq->trigger);

	for (uint32_t i = 0; i < n; i++)
		if (!manager_find_guest(m, names[i]))
			return -ENOENT;

	if (automatic) {
		/* a guest cooling down after its last dump is left out, unless
		 * the dump still open takes it anyway */
		uint32_t eligible = 0;
		const char *first = NULL;

		for (uint32_t i = 0; i < m->guests.n; i++) {
			struct vmt_guest *g = m->guests.v[i];
			bool named = !n;
			for (uint32_t k = 0; k < n && !named; k++)
				named = !strcmp(names[k], g->conf.name);
			if (!named)
				continue;
			if (guest_cooling(m, g, now) && !(open && dump_wants(open, g))) {
				g->c.triggers_suppressed++;
				continue;
			}
			eligible++;
			first = first ? first : g->conf.name;
		}
		if (!eligible) {
			m->triggers_suppressed++;
			return -EBUSY;
		}
		if (eligible == 1 && n != 1) {
			only[0] = first;
			names = (char *const *)only;
			n = 1;
		}
		if (!open && !budget_take(m, rq->trigger->kind == VMT_TRIGGER_GUEST && n == 1
						     ? manager_find_guest(m, names[0]) : NULL, now)) {
			m->triggers_suppressed++;
			if (rq->trigger->kind == VMT_TRIGGER_GUEST && n == 1)
				manager_find_guest(m, names[0])->c.triggers_suppressed++;
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
		d->fire_at_ns = now + (uint64_t)m->conf.triggers.coalesce_ms * 1000000;
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
	m->triggers_total++;
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
		if (!m->cur) {
			m->cur = d;
			dump_begin(m);
		} else {
			m->next = d;
		}
	} else if (d == m->cur && d->phase == VMT_DUMP_DELAY) {
		dump_schedule(m);
	} else if (d == m->cur && d->phase == VMT_DUMP_FLUSH) {
		/* guests added while flushing are asked too */
		for (uint32_t i = 0; i < m->guests.n; i++) {
			struct vmt_guest *g = m->guests.v[i];
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

void manager_forget_client(struct vmt_manager *m, struct vmt_client *client)
{
	struct vmt_dump *ds[2] = { m->cur, m->next };

	for (int k = 0; k < 2; k++) {
		struct vmt_waiter **pp;
		if (!ds[k])
			continue;
		for (pp = &ds[k]->waiters; *pp;) {
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

/* ---- the writer's answers ------------------------------------------------- */

void manager_writer_done(struct vmt_job *job, void *userdata)
{
	struct vmt_manager *m = userdata;
	char path[PATH_MAX + 400];
	char field[PATH_MAX + 420];
	const char *fields[2] = { field, NULL };

	snprintf(path, sizeof(path), "%s/%s", job->dir, job->name);
	log_retention(m, job);
	/* before the dump's answer: who got it may ask for SAMPLES at once */
	index_update(m, job);
	if (job->kind == VMT_JOB_RETENTION) {
		job_free(job);
		return;
	}
	if (job->kind == VMT_JOB_AUX) {
		struct vmt_guest *g = manager_find_guest(m, job->aux.guest);
		bool mine = g && g->have_aux && g->aux.id == job->aux.id;

		if (job->error < 0) {
			log_full(VMT_LOG_ERR, job->error, NULL, "cannot write aux file %s: %m%s", path,
				 mine && g->aux.meta ? "; the next dump tries again" : "");
		} else if (job->existed) {
			log_debug("%s is on disk already (%llu bytes)", path,
				  (unsigned long long)job->bytes);
		} else {
			log_info("wrote %s (%llu bytes)", path, (unsigned long long)job->bytes);
		}
		if (g)
			guest_aux_done(g, job->aux.id, job->error >= 0);
		job_free(job);
		return;
	}
	snprintf(field, sizeof(field), "SAMPLE=%s", path);
	if (job->error < 0) {
		m->dump_errors++;
		char aux[64] = "";

		if (job->aux_missing)
			aux_file_name(aux, sizeof(aux), job->sample.aux_version);
		log_full(VMT_LOG_ERR, job->error, fields,
			 "cannot write sample %s%s%s%s: %m; the rings are untouched, the next dump tries again",
			 path, job->aux_missing ? ": its aux file " : "", aux,
			 job->aux_missing ? " could not be written" :
			 job->retried ? " (again after the retention rules made room)" : "");
	} else {
		uint64_t pages = 0;
		struct vmt_guest *g = manager_find_guest(m, job->sample.guest);

		for (uint32_t c = 0; c < job->sample.ncpus; c++)
			pages += job->sample.cpus[c].npages;
		m->samples_written++;
		if (g)
			snprintf(g->last_dump, sizeof(g->last_dump), "%s", path);
		log_full(VMT_LOG_NOTICE, 0, fields, "wrote %s: %llu pages, %llu bytes, %llu ms", path,
			 (unsigned long long)pages, (unsigned long long)job->bytes,
			 (unsigned long long)(job->duration_ns / 1000000));
	}
	if (m->cur && m->cur->phase == VMT_DUMP_WRITE && job->dump_id == m->cur->id) {
		struct vmt_dump *d = m->cur;
		if (job->error < 0) {
			d->error = job->error;
		} else {
			char **f = realloc(d->files, (d->nfiles + 1) * sizeof(*f));
			if (f) {
				d->files = f;
				d->files[d->nfiles] = strdup(path);
				if (d->files[d->nfiles])
					d->nfiles++;
			}
		}
		if (!--d->jobs_left)
			dump_finish(m);
	}
	job_free(job);
	/* its pages are free: rings take theirs back, paused reading goes on */
	for (uint32_t i = 0; i < m->guests.n; i++)
		guest_resume(m->guests.v[i]);
}
