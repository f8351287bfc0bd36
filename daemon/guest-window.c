/* SPDX-License-Identifier: MIT */
/*
 * guest-window: a guest's window held where it is for a sample
 * (guest_hold_window). The pages of the window (up to the agent's FLUSHED,
 * or all) are held in the rings (ring_hold) and the frames (frames_hold)
 * and described as iovecs and frames in the writer's job (whose release
 * lets go of the holds: the writer knows no ring), the page or
 * frame straddling the window's start cut in a copy; what the guest knows
 * of the sample (its aux, tasks, page size, counters, clock points) goes
 * into the sample's header. No page is copied. Which dump and when is the
 * dump module's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guest-int.h"
#include "frame.h"
#include "log.h"
#include "writer.h"

/* ---- the window's bounds ---------------------------------------------- */

/* How many of ring r's pages (oldest first) belong to the window. */
static uint32_t window_end(const struct vmt_guest *g, uint32_t c, bool to_target)
{
	const struct vmt_ring *r = &g->rings[c];
	uint32_t n = r->count;

	/* with a flush target the window ends exactly where FLUSHED said;
	 * pages after it belong to the next window and stay in the ring */
	if (to_target)
		while (n && ring_slot(r, n - 1)->seq >= g->target_seq[c])
			n--;
	return n;
}

/*
 * How many of a compressed ring's frames belong to the window. The flush
 * target lies among the raw pages unless every raw page is past it; a
 * frame straddling it goes whole: its later pages come again in the next
 * window, and merge drops a page dumped twice.
 */
static uint32_t frames_end(const struct vmt_guest *g, uint32_t c, uint32_t raw_end,
			   bool to_target)
{
	const struct vmt_frames *f = &g->rings[c].fr;
	uint32_t n = f->count;

	if (!raw_end && to_target)
		while (n && frames_at(f, n - 1)->h.first_seq >= g->target_seq[c])
			n--;
	return n;
}

/* Where a CPU's window lies: the frame cut at the window's start (cutf,
 * or NO_CUT), whole frames [ff, fe), raw pages [first, end). */
#define NO_CUT UINT32_MAX
struct cpu_window {
	uint32_t cutf, ff, fe;
	uint32_t first, end;
};

/* The window's first frame and raw page on CPU c, from t_start. */
static void window_start(const struct vmt_guest *g, uint32_t c, uint64_t t_start, struct cpu_window *w)
{
	const struct vmt_ring *r = &g->rings[c];

	while (w->ff < w->fe && frames_at(&r->fr, w->ff)->h.last_ts < t_start)
		w->ff++;
	if (w->ff < w->fe) {
		/* every raw page is newer than the frames */
		if (t_start && frames_at(&r->fr, w->ff)->h.first_ts < t_start)
			w->cutf = w->ff++;
		return;
	}
	while (w->first < w->end && ring_slot(r, w->first)->last_ts < t_start)
		w->first++;
}

/*
 * Where each CPU's window lies in its ring: span_ns > 0 keeps only the
 * pages with events of the last span_ns before the newest event of any
 * CPU. Returns that start time (0: no cut).
 */
static uint64_t window_bounds(const struct vmt_guest *g, uint64_t span_ns, bool to_target,
			      struct cpu_window *w)
{
	uint64_t t_end = 0, t_start = 0;

	for (uint32_t c = 0; c < g->nrings; c++) {
		const struct vmt_ring *r = &g->rings[c];

		w[c] = (struct cpu_window){ .cutf = NO_CUT, .end = window_end(g, c, to_target) };
		w[c].fe = frames_end(g, c, w[c].end, to_target);
		if (w[c].end)
			t_end = VMT_MAX(t_end, ring_slot(r, w[c].end - 1)->last_ts);
		else if (w[c].fe)
			t_end = VMT_MAX(t_end, frames_at(&r->fr, w[c].fe - 1)->h.last_ts);
	}
	if (span_ns && t_end > span_ns)
		t_start = t_end - span_ns;
	for (uint32_t c = 0; c < g->nrings; c++)
		window_start(g, c, t_start, &w[c]);
	return t_start;
}


/* ---- held for the writer ----------------------------------------------- */

/* The header of a stored frame of n pages, from the pages. */
static void pages_header(const struct vmt_page_layout *l, const uint8_t *pages, uint32_t n,
			 uint64_t first_seq, struct vmt_frame_hdr *h)
{
	*h = (struct vmt_frame_hdr){ .codec = VMT_FRAME_NONE, .npages = n, .first_seq = first_seq,
				     .first_ts = UINT64_MAX };
	for (uint32_t i = 0; i < n; i++) {
		struct vmt_page_info info;

		if (page_scan(l, pages + (size_t)i * l->page_size, &info) < 0)
			continue;	/* checked when it came in: cannot happen */
		h->first_ts = VMT_MIN(h->first_ts, info.first_ts);
		h->last_ts = VMT_MAX(h->last_ts, info.last_ts);
		h->events += info.events;
		if (info.missed_flag)
			h->flags |= VMT_FRAME_MISSED;
	}
	if (h->first_ts > h->last_ts)
		h->first_ts = h->last_ts;
}

/*
 * The frame straddling the window's start, decoded and cut at t_start:
 * its pages from the first with an event at or after t_start, that one
 * cut, as a stored frame in job->partial[c]. -ENOENT when nothing is left.
 */
static int frame_cut(const struct vmt_guest *g, struct vmt_job *job, uint32_t c,
		     const struct vmt_frame_desc *d, uint64_t t_start, struct vmt_sample_frame *out)
{
	const struct vmt_frames *fr = &g->rings[c].fr;
	uint32_t ps = g->layout.page_size, np = d->h.npages, k = 0;
	struct vmt_page_info info;
	struct vmt_frame_hdr h;
	char why[160];
	uint8_t *buf = malloc((size_t)np * ps);

	if (!buf)
		return -ENOMEM;
	if (frame_decode_with(ring_schema(&g->rings[c]), d->h.codec, frames_payload(fr, d), d->len, buf,
			      (size_t)np * ps, why, sizeof(why)) < 0) {
		/* one the daemon made: only a bug gets here */
		log_guest(VMT_LOG_ERR, 0, g->conf.name, "cpu%u: frame at seq %llu does not decode (%s); "
			  "left out of the sample", c, (unsigned long long)d->h.first_seq, why);
		free(buf);
		return -EBADMSG;
	}
	while (k < np && page_scan(&g->layout, buf + (size_t)k * ps, &info) >= 0 && info.last_ts < t_start)
		k++;
	if (k == np) {
		free(buf);
		return -ENOENT;
	}
	page_cut_before(&g->layout, buf + (size_t)k * ps, t_start);
	pages_header(&g->layout, buf + (size_t)k * ps, np - k, d->h.first_seq + k, &h);
	job->partial[c] = buf;
	*out = (struct vmt_sample_frame){ .h = h, .payload = buf + (size_t)k * ps,
					  .len = (np - k) * ps };
	return 0;
}

/* ---- the holds ---------------------------------------------------------- */

/* What a sample's job reads the window through, held in the rings until
 * the writer is done: released on the loop by job_free(), as the job's
 * release (the writer knows no ring). */
struct window_holds {
	uint32_t n;
	struct cpu_holds {
		struct vmt_ring_hold raw;	/* ring_hold */
		struct vmt_frames_hold frames;	/* frames_hold */
	} cpu[];
};

static void window_release(void *arg)
{
	struct window_holds *wh = arg;

	for (uint32_t c = 0; c < wh->n; c++) {
		ring_release(&wh->cpu[c].raw);
		frames_release(&wh->cpu[c].frames);
	}
	free(wh);
}

/* CPU c's frames in the sample: the cut one, then the held ones, into out. */
static int freeze_frames(const struct vmt_guest *g, struct vmt_job *job, uint32_t c,
			 const struct vmt_frames_hold *fh, const struct cpu_window *w,
			 uint64_t t_start, struct vmt_sample_frame *out)
{
	struct vmt_sample_cpu *sc = &job->sample.cpus[c];
	uint32_t n = 0;

	if (w->cutf != NO_CUT) {
		int r = frame_cut(g, job, c, frames_at(&g->rings[c].fr, w->cutf), t_start, &out[n]);

		if (r == -ENOMEM)
			return r;
		n += r == 0;
	}
	for (uint32_t i = 0; i < fh->n; i++)
		out[n++] = fh->frames[i];
	for (uint32_t i = 0; i < n; i++) {
		if (!i) {
			sc->first_seq = out[i].h.first_seq;
			sc->first_ts = out[i].h.first_ts;
		}
		sc->last_ts = out[i].h.last_ts;
		sc->events += out[i].h.events;
		sc->frame_pages += out[i].h.npages;
	}
	sc->frames = out;
	sc->nframes = n;
	return 0;
}

/*
 * CPU c's part of the sample: its counters, times and events, and the
 * iovecs the writer reads its pages through (into iov; returns how many).
 * The page straddling t_start is replaced by a cut copy in job->cut.
 */
static uint32_t freeze_cpu(const struct vmt_guest *g, struct vmt_job *job, uint32_t c,
			   const struct vmt_ring_hold *h, uint32_t first, uint32_t end,
			   uint64_t t_start, struct vmt_iovec *iov)
{
	const struct vmt_ring *r = &g->rings[c];
	struct vmt_sample_cpu *sc = &job->sample.cpus[c];
	uint32_t ps = g->layout.page_size;
	struct vmt_page_info cut_info;
	bool cut = false;
	uint32_t k = 0;

	sc->cpu = c;
	sc->npages = sc->frame_pages + (end - first);
	ring_counters_to_sample(&r->c, &sc->counters);
	sc->have_guest_stats = g->have_stats;
	if (g->have_stats)
		sc->guest = g->stats[c];
	if (first < end && t_start && !sc->nframes && ring_slot(r, first)->first_ts < t_start) {
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
		if (i == first && !sc->nframes) {
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
 * The window held where it is, no copy: each CPU's raw pages (ring_hold)
 * and frames (frames_hold), and the arrays the writer reads them through.
 */
static int freeze_hold(struct vmt_guest *g, struct vmt_job *job, const struct cpu_window *w,
		       uint64_t t_start)
{
	size_t niov = 0, nfr = 0;
	uint32_t n = g->nrings;
	struct window_holds *wh = calloc(1, sizeof(*wh) + n * sizeof(wh->cpu[0]));

	if (!wh)
		return -ENOMEM;
	/* from here, job_free releases the holds taken */
	wh->n = n;
	job->release = window_release;
	job->release_arg = wh;
	job->partial = calloc(n, sizeof(*job->partial));
	if (!job->partial)
		return -ENOMEM;
	job->sample.ncpus = n;
	for (uint32_t c = 0; c < n; c++) {
		struct cpu_holds *h = &wh->cpu[c];

		if (ring_hold(&g->rings[c], w[c].first, w[c].end, &h->raw) < 0 ||
		    frames_hold(&g->rings[c].fr, w[c].ff, w[c].fe, &h->frames) < 0)
			return -ENOMEM;
		niov += h->raw.nruns + 1;
		nfr += h->frames.n + 1;
	}
	job->iovs = calloc(niov, sizeof(*job->iovs));
	job->frames = calloc(nfr, sizeof(*job->frames));
	job->cut = t_start ? malloc((size_t)n * g->layout.page_size) : NULL;
	if (!job->iovs || !job->frames || (t_start && !job->cut))
		return -ENOMEM;
	niov = nfr = 0;
	for (uint32_t c = 0; c < n; c++) {
		const struct cpu_holds *h = &wh->cpu[c];

		if (freeze_frames(g, job, c, &h->frames, &w[c], t_start, &job->frames[nfr]) < 0)
			return -ENOMEM;
		nfr += h->frames.n + 1;
		niov += freeze_cpu(g, job, c, &h->raw, w[c].first, w[c].end, t_start,
				   &job->iovs[niov]);
	}
	return 0;
}

/* Raw pages of the window: the PAGES sections the writer compresses (frames
 * go as they are). */
static uint64_t raw_bytes(const struct vmt_guest *g, const struct cpu_window *w)
{
	uint64_t pages = 0;

	for (uint32_t c = 0; c < g->nrings; c++)
		pages += w[c].end - w[c].first;
	return pages * g->layout.page_size;
}


/* What the guest knows of its sample: which aux, the tasks, the page size,
 * what it refused, whether its window outlived a daemon. */
static int sample_guest_fields(struct vmt_guest *g, struct vmt_sample *s)
{
	snprintf(s->guest, sizeof(s->guest), "%s", g->conf.name);
	s->aux_version = g->aux.version;
	s->aux_id = g->aux.id;
	if (g->tasks.len) {
		s->tasks = malloc(g->tasks.len);
		if (!s->tasks)
			return -ENOMEM;
		memcpy(s->tasks, g->tasks.data, g->tasks.len);
		s->tasks_len = (uint32_t)g->tasks.len;
	}
	s->page_size = g->layout.page_size;
	s->ctl_rejected_bytes = guest_ctl_rejected_bytes(g);
	s->ctl_rejected_msgs = guest_ctl_rejected_msgs(g);
	s->flush_timeouts = g->c.flush_timeouts;
	if (g->recovered_lifetimes) {
		uint32_t lifetimes;
		guest_window_held(g, &s->window_since_ns, &lifetimes);
		s->recovered_lifetimes = VMT_MAX(lifetimes, g->recovered_lifetimes);
	}
	return 0;
}

int guest_hold_window(struct vmt_guest *g, const struct vmt_window_req *rq, struct vmt_job *job,
		      uint64_t *raw)
{
	bool to_target = rq->to_target && g->flushed && g->have_target;
	struct cpu_window *w;
	uint64_t t_start;
	int r = -ENOMEM;

	if (!g->nrings || !g->have_aux)
		return -ENOENT;
	w = calloc(g->nrings, sizeof(*w));
	if (!w)
		return -ENOMEM;
	t_start = window_bounds(g, rq->span_ns, to_target, w);
	*raw = raw_bytes(g, w);
	job->sample.cpus = calloc(g->nrings, sizeof(*job->sample.cpus));
	if (job->sample.cpus && sample_guest_fields(g, &job->sample) == 0 &&
	    freeze_hold(g, job, w, t_start) == 0 && sample_clock(g, &job->sample) == 0) {
		g->recovered_lifetimes = 0;	/* the first sample after the recovery said so */
		r = 0;
	}
	free(w);
	return r;
}
