/* SPDX-License-Identifier: MIT */
/*
 * dump-freeze: a guest's window frozen where it is. The pages of the window
 * (up to the agent's FLUSHED, or all) are held in the rings (ring_hold) and
 * described as iovecs in a writer job, the page straddling the window's
 * start cut in a copy; the sample's header, task tables and clock data go
 * with them. No page is copied.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dump-int.h"
#include "guest.h"
#include "log.h"
#include "guest-sync.h"

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
 * Hold one guest's window in its rings for the writer. span_ns > 0 keeps
 * only the events of the last span_ns before the newest event of any CPU,
 * the same start time on every CPU, cut inside the page that straddles it.
 */
struct vmt_job *freeze_guest(struct vmt_dumps *ds, struct vmt_guest *g, const struct vmt_trigger *t,
			     uint32_t nt, uint64_t omitted, uint64_t dump_id, uint64_t span_ns)
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

