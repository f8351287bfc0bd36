/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "meta.h"
#include "sampleset.h"
#include "util.h"

#define SSET_META_MAX (1ull << 30)

struct spage {
	const uint8_t *p;
	uint64_t ts;
	uint32_t crc, commit;
};

static int spage_cmp(const void *a, const void *b)
{
	const struct spage *x = a, *y = b;

	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	if (x->commit != y->commit)
		return x->commit < y->commit ? -1 : 1;
	return (x->crc > y->crc) - (x->crc < y->crc);
}

static void say(const struct vmt_sset *set, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const struct vmt_sset *set, const char *fmt, ...)
{
	va_list ap;

	if (set->quiet)
		return;
	va_start(ap, fmt);
	fputs("vmtracectl: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static struct vmt_sset_group *group_for(struct vmt_sset *set, const struct vmt_sample *s)
{
	struct vmt_sset_group *g;

	for (uint32_t i = 0; i < set->ngroups; i++)
		if (!strcmp(set->groups[i].guest, s->guest) && set->groups[i].aux_id == s->aux_id)
			return &set->groups[i];
	g = realloc(set->groups, (set->ngroups + 1) * sizeof(*g));
	if (!g)
		return NULL;
	set->groups = g;
	g = &set->groups[set->ngroups++];
	memset(g, 0, sizeof(*g));
	snprintf(g->guest, sizeof(g->guest), "%s", s->guest);
	g->aux_id = s->aux_id;
	g->aux_version = s->aux_version;
	return g;
}

static int group_add(struct vmt_sset_group *g, struct vmt_sample *s, const char *path)
{
	struct vmt_sample **ns = realloc(g->samples, (g->nsamples + 1) * sizeof(*ns));
	const char **np;

	if (!ns)
		return -ENOMEM;
	g->samples = ns;
	np = realloc(g->paths, (g->nsamples + 1) * sizeof(*np));
	if (!np)
		return -ENOMEM;
	g->paths = np;
	g->samples[g->nsamples] = s;
	g->paths[g->nsamples++] = path;
	return 0;
}

static int try_aux(struct vmt_sset *set, struct vmt_sset_group *g, const char *path)
{
	char why[256];
	int r = aux_read(path, SSET_META_MAX, &g->aux, why, sizeof(why));

	if (r == -EBADMSG)
		say(set, "%s: %s", path, why);
	if (r == 0 && g->aux.id != g->aux_id) {
		aux_free(&g->aux);
		r = -ESTALE;
	}
	return r;
}

/* The aux a group needs: the one given, else beside any of its samples. */
static int group_find_aux(struct vmt_sset *set, struct vmt_sset_group *g, const char *aux_path)
{
	char path[4200], name[64];
	int r;

	if (aux_path && try_aux(set, g, aux_path) == 0)
		return 0;
	aux_file_name(name, sizeof(name), g->aux_version);
	for (uint32_t i = 0; i < g->nsamples; i++) {
		char *dup = strdup(g->paths[i]);
		if (!dup)
			return -ENOMEM;
		snprintf(path, sizeof(path), "%s/%s", dirname(dup), name);
		free(dup);
		r = try_aux(set, g, path);
		if (r == 0 || r == -ENOMEM)
			return r;
	}
	say(set, "guest %s: no aux file with id %016" PRIx64 " (aux version %u) beside its samples%s; "
	    "%u sample(s) left out", g->guest, g->aux_id, g->aux_version,
	    aux_path ? " or given with --aux" : "", g->nsamples);
	return -ENOENT;
}

/* The frames the reader refused in a sample: one line each, then how many more. */
static void say_refusals(const struct vmt_sset *set, const char *path, const struct vmt_sample *s)
{
	uint64_t refused = 0;
	char line[512];

	for (uint32_t i = 0; i < s->nrefusals; i++) {
		sample_refusal_text(&s->refusals[i], line, sizeof(line));
		say(set, "%s: %s", path, line);
	}
	for (uint32_t c = 0; c < s->ncpus; c++)
		refused += s->cpus[c].frames_refused;
	if (refused > s->nrefusals)
		say(set, "%s: and %" PRIu64 " more refused frame(s), their pages left out", path,
		    refused - s->nrefusals);
}

static int by_created(const void *a, const void *b)
{
	const struct vmt_sample *x = *(struct vmt_sample *const *)a, *y = *(struct vmt_sample *const *)b;

	return (x->created_ns > y->created_ns) - (x->created_ns < y->created_ns);
}

/* The samples by creation, each path staying with its sample. */
static int group_sort(struct vmt_sset_group *g)
{
	struct { struct vmt_sample *s; const char *path; } *t = calloc(g->nsamples, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (uint32_t i = 0; i < g->nsamples; i++) {
		t[i].s = g->samples[i];
		t[i].path = g->paths[i];
	}
	/* by_created() compares the first member, a sample pointer */
	qsort(t, g->nsamples, sizeof(*t), by_created);
	for (uint32_t i = 0; i < g->nsamples; i++) {
		g->samples[i] = t[i].s;
		g->paths[i] = t[i].path;
	}
	free(t);
	return 0;
}

static bool is_prev(const struct vmt_sample *s)
{
	return s->ntriggers && !strncmp(s->triggers[0].reason, VMT_PREV_BOOT_REASON,
					strlen(VMT_PREV_BOOT_REASON));
}

/*
 * Gaps: pages the ring's stream numbered but no sample holds. A sample
 * spans the pages of its refused frames too: those are counted apart
 * (refused_pages), not as a gap between samples.
 */
static void group_gaps(struct vmt_sset *set, struct vmt_sset_group *g, uint32_t c)
{
	uint64_t end = 0;
	const char *end_path = NULL;

	for (uint32_t i = 0; i < g->nsamples; i++) {
		const struct vmt_sample *s = g->samples[i];
		const struct vmt_sample_cpu *sc;
		uint64_t span;

		if (c >= s->ncpus || is_prev(s))	/* numbered by no ring */
			continue;
		sc = &s->cpus[c];
		span = (uint64_t)sc->npages + sc->pages_refused;
		g->cpus[c].refused_frames += sc->frames_refused;
		g->cpus[c].refused_pages += sc->pages_refused;
		if (!span)
			continue;
		if (end_path && sc->first_seq > end) {
			g->cpus[c].gaps++;
			g->cpus[c].gap_pages += sc->first_seq - end;
			say(set, "guest %s cpu%u: %" PRIu64 " page(s) missing between %s and %s "
			    "(overwritten before the later dump)", g->guest, c, sc->first_seq - end,
			    end_path, g->paths[i]);
		}
		if (!end_path || sc->first_seq + span > end) {
			end = sc->first_seq + span;
			end_path = g->paths[i];
		}
	}
}

/* The group's shape: page size, CPUs, layout, and each CPU's gaps. */
static int group_pages(struct vmt_sset *set, struct vmt_sset_group *g)
{
	struct vmt_meta_entry hp;

	g->page_size = g->samples[0]->page_size;
	for (uint32_t i = 0; i < g->nsamples; i++)
		g->ncpus = VMT_MAX(g->ncpus, g->samples[i]->ncpus);
	page_layout_default(&g->layout, g->page_size);
	if (meta_find(g->aux.meta, g->aux.meta_len, "events/header_page", &hp) == 0)
		page_layout_parse(&g->layout, (const char *)hp.data, hp.data_len, g->page_size);
	g->cpus = calloc(g->ncpus, sizeof(*g->cpus));
	if (!g->cpus)
		return -ENOMEM;
	for (uint32_t c = 0; c < g->ncpus; c++)
		group_gaps(set, g, c);
	return 0;
}

/*
 * The pages of a group's CPU as they come in, each kept once: copies in
 * blocks, and a hash of (time, commit, CRC) to find a page seen before.
 */
#define SSET_BLOCK_PAGES 256u

struct cpu_pages {
	struct vmt_sset_cpu *sc;
	uint32_t page_size;
	struct spage *pg;
	uint64_t n, cap;
	uint64_t *hash;		/* index + 1 into pg, 0 free */
	uint64_t hcap;		/* a power of two, at least twice n */
	uint32_t used;		/* pages in the last block */
};

static uint64_t spage_hash(const struct spage *p)
{
	uint64_t h = p->ts * 0x9e3779b97f4a7c15ull ^ ((uint64_t)p->crc << 32 | p->commit);

	return h ^ (h >> 29);
}

static int cp_grow(struct cpu_pages *cp)
{
	uint64_t hcap = cp->hcap ? cp->hcap * 2 : 1024, *h;
	struct spage *pg;

	pg = realloc(cp->pg, hcap / 2 * sizeof(*pg));
	if (!pg)
		return -ENOMEM;
	cp->pg = pg;
	cp->cap = hcap / 2;
	h = calloc(hcap, sizeof(*h));
	if (!h)
		return -ENOMEM;
	for (uint64_t i = 0; i < cp->n; i++) {
		uint64_t k = spage_hash(&cp->pg[i]) & (hcap - 1);

		while (h[k])
			k = (k + 1) & (hcap - 1);
		h[k] = i + 1;
	}
	free(cp->hash);
	cp->hash = h;
	cp->hcap = hcap;
	return 0;
}

/* 1 if an identical page is held already, 0 once page is copied in, -ENOMEM. */
static int cp_add(struct cpu_pages *cp, const uint8_t *page, const struct spage *key)
{
	struct vmt_sset_cpu *sc = cp->sc;
	uint64_t k;
	uint8_t *copy;

	if (cp->n == cp->cap && cp_grow(cp) < 0)
		return -ENOMEM;
	for (k = spage_hash(key) & (cp->hcap - 1); cp->hash[k]; k = (k + 1) & (cp->hcap - 1)) {
		const struct spage *o = &cp->pg[cp->hash[k] - 1];

		if (!spage_cmp(o, key) && !memcmp(o->p, page, cp->page_size))
			return 1;
	}
	if (!sc->nblocks || cp->used == SSET_BLOCK_PAGES) {
		uint8_t **b = realloc(sc->blocks, (sc->nblocks + 1) * sizeof(*b));

		if (!b)
			return -ENOMEM;
		sc->blocks = b;
		b[sc->nblocks] = malloc((size_t)SSET_BLOCK_PAGES * cp->page_size);
		if (!b[sc->nblocks])
			return -ENOMEM;
		sc->nblocks++;
		cp->used = 0;
	}
	copy = sc->blocks[sc->nblocks - 1] + (size_t)cp->used++ * cp->page_size;
	memcpy(copy, page, cp->page_size);
	cp->pg[cp->n] = *key;
	cp->pg[cp->n].p = copy;
	cp->hash[k] = ++cp->n;
	return 0;
}

/*
 * A persistent ring buffer's pages: the kernel wrote the same events into
 * them as into the pages the host held (another instance: other pages, and
 * each event's time read anew, a microsecond or so apart). So the host's
 * last event on the CPU (the anchor) is looked for in them by its bytes,
 * near its time, and only what follows it is kept: a page before goes, the
 * page across it is cut. Without a match, what follows the anchor's time.
 */
#define ANCHOR_BYTES 256
#define ANCHOR_NEAR_NS 1000000ull

struct anchor {
	uint64_t ts;		/* 0: none (no host page on this CPU) */
	uint32_t len;
	uint8_t b[ANCHOR_BYTES];	/* the event after its header word */
	/* looking for it: the page it is in and where, the closest in time */
	const uint8_t *page;
	uint32_t cur, at_page, at_off;
	uint64_t best_dist;
};

static int last_event_cb(uint64_t ts, uint32_t offset, uint32_t size, void *data)
{
	struct anchor *a = data;

	a->ts = ts;
	a->len = VMT_MIN(size - 4, (uint32_t)ANCHOR_BYTES);
	memcpy(a->b, a->page + offset + 4, a->len);
	return 0;
}

static int match_cb(uint64_t ts, uint32_t offset, uint32_t size, void *data)
{
	struct anchor *a = data;
	uint64_t dist = ts > a->ts ? ts - a->ts : a->ts - ts;

	if (dist <= ANCHOR_NEAR_NS && dist < a->best_dist && size - 4 >= a->len &&
	    !memcmp(a->page + offset + 4, a->b, a->len)) {
		a->best_dist = dist;
		a->at_page = a->cur;
		a->at_off = offset;
	}
	return 0;
}

/* Where the buffer's pages take over from the host's: a->at_page/at_off,
 * or (false) no match: then by the anchor's time. */
static bool prev_find(struct vmt_sset_group *g, const struct vmt_sample_cpu *sc, struct anchor *a)
{
	a->best_dist = UINT64_MAX;
	if (!a->ts)
		return false;
	for (a->cur = 0; a->cur < sc->npages; a->cur++) {
		a->page = sc->pages + (size_t)a->cur * g->page_size;
		page_walk(&g->layout, a->page, match_cb, a);
	}
	return a->best_dist != UINT64_MAX;
}

/* Page p of the buffer's: 1 to leave it out, its events are the host's
 * already; cut to what follows the anchor where it is across it. */
static int prev_trim(struct vmt_sset_group *g, uint8_t *page, uint32_t p,
		     const struct vmt_page_info *info, const struct anchor *a, bool found,
		     struct vmt_sset_cpu *sc)
{
	int r;

	if (!a->ts)
		return 0;
	if (found ? p > a->at_page : info->first_ts > a->ts)
		return 0;
	if (found ? p < a->at_page : !info->events || info->last_ts <= a->ts) {
		sc->prev_dropped++;
		return 1;
	}
	r = found ? page_cut_through(&g->layout, page, a->at_off) : page_cut_before(&g->layout, page, a->ts + 1);
	if (r < 0 || (r > 0 && (int64_t)r >= (int64_t)info->events)) {
		sc->prev_dropped++;
		return 1;
	}
	sc->prev_cut += r > 0;
	return 0;
}

/* One sample's pages of the CPU into cp. The host's samples come first
 * and leave their last event in a; a previous boot's sample adds what
 * follows it (prev_after). */
static int cpu_take(struct vmt_sset *set, struct vmt_sset_group *g, uint32_t i, uint32_t c,
		    struct cpu_pages *cp, struct anchor *a)
{
	bool found = false;
	const struct vmt_sample *meta = g->samples[i];
	struct vmt_sample_read_opts o = { .max_memory = set->max_memory,
					  .pages = VMT_SAMPLE_PAGES_ONE_CPU, .cpu = c };
	struct vmt_sample *s;
	char why[512];
	int r;

	if (c >= meta->ncpus || meta->page_size != g->page_size || !meta->cpus[c].npages)
		return 0;
	r = sample_read_with(g->paths[i], &o, &s, why, sizeof(why));
	if (r == 0 && s->cpus[c].npages != meta->cpus[c].npages) {
		snprintf(why, sizeof(why), "cpu %u holds %u pages now, %u when it was read first", c,
			 s->cpus[c].npages, meta->cpus[c].npages);
		r = -ESTALE;
	}
	if (r < 0) {
		if (r == -ENOMEM)
			return r;
		say(set, "%s: %s; its cpu%u left out", g->paths[i],
		    r == -EBADMSG || r == -ESTALE ? why : strerror(-r), c);
		set->bad_cpus++;
		sample_free(s);
		return 0;
	}
	if (is_prev(meta))
		found = prev_find(g, &s->cpus[c], a);
	for (uint32_t p = 0; r >= 0 && p < s->cpus[c].npages; p++) {
		uint8_t *page = s->cpus[c].pages + (size_t)p * g->page_size;
		struct vmt_page_info info;
		struct spage key;

		/* the daemon checked them; a file is not trusted either */
		if (page_scan(&g->layout, page, &info) < 0) {
			say(set, "%s cpu%u: page %u does not parse; left out", g->paths[i], c, p);
			continue;
		}
		if (is_prev(meta)) {
			if (prev_trim(g, page, p, &info, a, found, cp->sc))
				continue;
			cp->sc->prev_pages++;
			page_scan(&g->layout, page, &info);
		} else if (info.events && info.last_ts >= a->ts) {
			a->page = page;
			page_walk(&g->layout, page, last_event_cb, a);
		}
		key = (struct spage){ page, info.base_ts, crc32c(0, page, g->page_size), info.commit };
		r = cp_add(cp, page, &key);
		if (r > 0)
			cp->sc->duplicates++;
	}
	sample_free(s);
	return r < 0 ? r : 0;
}

int sset_cpu_load(struct vmt_sset *set, struct vmt_sset_group *g, uint32_t c)
{
	struct vmt_sset_cpu *sc = &g->cpus[c];
	struct cpu_pages cp = { .sc = sc, .page_size = g->page_size };
	int r = 0;

	sset_cpu_unload(g, c);
	struct anchor a = { 0 };

	sc->npages = sc->events = sc->duplicates = sc->first_ts = sc->last_ts = 0;
	sc->prev_pages = sc->prev_dropped = sc->prev_cut = 0;
	/* the host's windows first: a persistent buffer adds what they lack */
	for (uint32_t i = 0; r == 0 && i < g->nsamples; i++)
		if (!is_prev(g->samples[i]))
			r = cpu_take(set, g, i, c, &cp, &a);
	for (uint32_t i = 0; r == 0 && i < g->nsamples; i++)
		if (is_prev(g->samples[i]))
			r = cpu_take(set, g, i, c, &cp, &a);
	free(cp.hash);
	if (r == 0)
		sc->pages = calloc(cp.n ? cp.n : 1, sizeof(*sc->pages));
	if (r < 0 || !sc->pages) {
		free(cp.pg);
		sset_cpu_unload(g, c);
		return -ENOMEM;
	}
	/* a total order but for equal pages, which are held once */
	if (cp.n)
		qsort(cp.pg, cp.n, sizeof(*cp.pg), spage_cmp);
	for (uint64_t i = 0; i < cp.n; i++) {
		struct vmt_page_info info;

		sc->pages[i] = cp.pg[i].p;
		page_scan(&g->layout, cp.pg[i].p, &info);
		sc->events += info.events;
		if (info.events) {
			if (!sc->first_ts || info.first_ts < sc->first_ts)
				sc->first_ts = info.first_ts;
			sc->last_ts = VMT_MAX(sc->last_ts, info.last_ts);
		}
	}
	sc->npages = cp.n;
	sc->loaded = true;
	free(cp.pg);
	return 0;
}

void sset_cpu_unload(struct vmt_sset_group *g, uint32_t c)
{
	struct vmt_sset_cpu *sc = &g->cpus[c];

	for (uint32_t b = 0; b < sc->nblocks; b++)
		free(sc->blocks[b]);
	free(sc->blocks);
	free(sc->pages);
	sc->blocks = NULL;
	sc->nblocks = 0;
	sc->pages = NULL;
}

static int point_cmp(const void *a, const void *b)
{
	const struct vmt_sync_point *x = a, *y = b;

	if (x->guest_ts != y->guest_ts)
		return x->guest_ts < y->guest_ts ? -1 : 1;
	return (x->cpu > y->cpu) - (x->cpu < y->cpu);
}

/* The samples' clock data as one: every point once, the newest map. */
static int group_clock(struct vmt_sset_group *g)
{
	struct vmt_clock_info *ci = &g->clock;
	uint32_t total = 0, n = 0;

	for (uint32_t i = 0; i < g->nsamples; i++) {
		const struct vmt_sample *s = g->samples[i];
		if (!s->have_clock)
			continue;
		total += s->clock.npoints;
		ci->method = s->clock.method;
		memcpy(ci->guest_clock, s->clock.guest_clock, sizeof(ci->guest_clock));
		memcpy(ci->host_clock, s->clock.host_clock, sizeof(ci->host_clock));
		memcpy(ci->why, s->clock.why, sizeof(ci->why));
		if (s->clock.nvcpus) {
			ci->qemu_pid = s->clock.qemu_pid;
			ci->nvcpus = s->clock.nvcpus;
			memcpy(ci->vcpu_tid, s->clock.vcpu_tid, sizeof(ci->vcpu_tid));
		}
	}
	if (!total)
		return 0;
	ci->points = malloc(total * sizeof(*ci->points));
	if (!ci->points)
		return -ENOMEM;
	for (uint32_t i = 0; i < g->nsamples; i++)
		if (g->samples[i]->have_clock)
			for (uint32_t k = 0; k < g->samples[i]->clock.npoints; k++)
				ci->points[n++] = g->samples[i]->clock.points[k];
	qsort(ci->points, n, sizeof(*ci->points), point_cmp);
	ci->npoints = 0;
	for (uint32_t i = 0; i < n; i++)
		if (!ci->npoints || point_cmp(&ci->points[ci->npoints - 1], &ci->points[i]))
			ci->points[ci->npoints++] = ci->points[i];
	return 0;
}

static int group_order(const void *a, const void *b)
{
	const struct vmt_sset_group *x = a, *y = b;
	int c = strcmp(x->guest, y->guest);

	if (c)
		return c;
	return by_created(&x->samples[0], &y->samples[0]);
}

static void group_free(struct vmt_sset_group *g)
{
	for (uint32_t i = 0; i < g->nsamples; i++)
		sample_free(g->samples[i]);
	free(g->samples);
	free(g->paths);
	for (uint32_t c = 0; g->cpus && c < g->ncpus; c++)
		sset_cpu_unload(g, c);
	free(g->cpus);
	aux_free(&g->aux);
	clock_info_free(&g->clock);
	free(g->own_meta);
}

/*
 * The aux bundle with saved_cmdlines and saved_tgids replaced by the union
 * of its own and every sample's task tables, in time order.
 */
static int group_meta(struct vmt_sset_group *g)
{
	static const char *const tables[] = { "saved_cmdlines", "saved_tgids" };
	struct vmt_buf out = { 0 }, merged = { 0 };
	struct vmt_meta_entry e;
	const char **texts = NULL;
	size_t *lens = NULL, pos = 0;
	int r = 0;

	g->meta = g->aux.meta;
	g->meta_len = g->aux.meta_len;
	for (uint32_t i = 0; i < g->nsamples; i++)
		g->tasks_samples += g->samples[i]->tasks_len > 0;
	if (!g->tasks_samples)
		return 0;
	texts = calloc(g->nsamples + 1, sizeof(*texts));
	lens = calloc(g->nsamples + 1, sizeof(*lens));
	if (!texts || !lens) {
		r = -ENOMEM;
		goto out;
	}
	/* every file of the aux but the tables, then the tables merged */
	while ((r = meta_next(g->aux.meta, g->aux.meta_len, &pos, &e)) > 0) {
		bool table = false;

		for (size_t t = 0; t < ARRAY_SIZE(tables); t++)
			table |= e.name_len == strlen(tables[t]) && !memcmp(e.name, tables[t], e.name_len);
		if (table)
			continue;
		r = buf_reserve(&out, 8 + e.name_len + e.data_len);
		if (r < 0)
			goto out;
		buf_put_le32(&out, e.name_len);
		buf_put_le32(&out, e.data_len);
		buf_append(&out, e.name, e.name_len);
		buf_append(&out, e.data, e.data_len);
	}
	if (r < 0)
		goto out;
	for (size_t t = 0; t < ARRAY_SIZE(tables); t++) {
		size_t n = 0;

		if (meta_find(g->aux.meta, g->aux.meta_len, tables[t], &e) == 0) {
			texts[n] = (const char *)e.data;
			lens[n++] = e.data_len;
		}
		for (uint32_t i = 0; i < g->nsamples; i++)
			if (meta_find(g->samples[i]->tasks, g->samples[i]->tasks_len, tables[t], &e) == 0) {
				texts[n] = (const char *)e.data;
				lens[n++] = e.data_len;
			}
		if (!n)
			continue;
		r = meta_cmdlines_merge(&merged, texts, lens, n);
		if (r == 0)
			r = meta_add(&out, tables[t], merged.data, (uint32_t)merged.len);
		if (r < 0)
			goto out;
	}
	g->own_meta = out.data;
	g->meta = out.data;
	g->meta_len = out.len;
	out = (struct vmt_buf){ 0 };
out:
	buf_free(&out);
	buf_free(&merged);
	free(texts);
	free(lens);
	return r;
}

int sset_load(struct vmt_sset *set, const char *const *paths, uint32_t npaths, const char *aux_path)
{
	uint64_t total = 0, done = 0;
	uint32_t k = 0;
	int r;

	for (uint32_t i = 0; i < npaths; i++) {
		struct stat st;
		if (stat(paths[i], &st) == 0)
			total += (uint64_t)st.st_size;
	}
	for (uint32_t i = 0; i < npaths; i++) {
		struct vmt_sset_group *g;
		struct vmt_sample *s;
		struct stat st;
		char why[512];

		struct vmt_sample_read_opts o = { .max_memory = set->max_memory,
						  .pages = VMT_SAMPLE_PAGES_CHECK, .aux_path = aux_path };

		/* checked whole now, so that a bad sample is out before any is used */
		r = sample_read_with(paths[i], &o, &s, why, sizeof(why));
		if (stat(paths[i], &st) == 0)
			done += (uint64_t)st.st_size;
		if (set->progress)
			set->progress(set->progress_arg, done, total);
		if (r < 0) {
			say(set, "%s: %s; skipped", paths[i], r == -EBADMSG ? why : strerror(-r));
			set->bad_samples++;
			continue;
		}
		say_refusals(set, paths[i], s);
		g = group_for(set, s);
		if (!g || group_add(g, s, paths[i]) < 0) {
			sample_free(s);
			return -ENOMEM;
		}
	}
	for (uint32_t i = 0; i < set->ngroups; i++) {
		struct vmt_sset_group *g = &set->groups[i];

		r = group_sort(g);
		if (r < 0)
			return r;
		r = group_find_aux(set, g, aux_path);
		if (r == -ENOMEM)
			return r;
		if (r < 0) {
			set->no_aux += g->nsamples;
			group_free(g);
			continue;
		}
		set->groups[k++] = *g;
	}
	set->ngroups = k;
	qsort(set->groups, set->ngroups, sizeof(*set->groups), group_order);
	for (uint32_t i = 0; i < set->ngroups; i++) {
		struct vmt_sset_group *g = &set->groups[i];
		uint64_t h = 0xcbf29ce484222325ull;

		r = group_pages(set, g);
		if (r == 0)
			r = group_clock(g);
		if (r == 0)
			r = group_meta(g);
		if (r < 0)
			return r;
		for (const char *p = g->guest; *p; p++)
			h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
		g->trace_id = (h ^ g->aux_id) | 1;	/* never 0: 0 means none */
		g->boot_split = (i && !strcmp(set->groups[i - 1].guest, g->guest)) ||
				(i + 1 < set->ngroups && !strcmp(set->groups[i + 1].guest, g->guest));
		if (g->boot_split && (!i || strcmp(set->groups[i - 1].guest, g->guest)))
			say(set, "guest %s: samples from more than one boot (aux versions differ): "
			    "split at each boot", g->guest);
	}
	return 0;
}

void sset_free(struct vmt_sset *set)
{
	for (uint32_t i = 0; i < set->ngroups; i++)
		group_free(&set->groups[i]);
	free(set->groups);
	set->groups = NULL;
	set->ngroups = 0;
}
