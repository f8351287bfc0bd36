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

		if (c >= s->ncpus)
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
	for (uint32_t c = 0; c < g->ncpus; c++) {
		struct vmt_sset_cpu *sc = &g->cpus[c];
		struct spage *pg;
		uint64_t total = 0, k = 0, u = 0;

		for (uint32_t i = 0; i < g->nsamples; i++)
			if (c < g->samples[i]->ncpus)
				total += g->samples[i]->cpus[c].npages;
		pg = calloc(total ? total : 1, sizeof(*pg));
		sc->pages = calloc(total ? total : 1, sizeof(*sc->pages));
		if (!pg || !sc->pages) {
			free(pg);
			return -ENOMEM;
		}
		for (uint32_t i = 0; i < g->nsamples; i++) {
			const struct vmt_sample *s = g->samples[i];
			if (c >= s->ncpus || s->page_size != g->page_size)
				continue;
			for (uint32_t p = 0; p < s->cpus[c].npages; p++) {
				const uint8_t *page = s->cpus[c].pages + (size_t)p * g->page_size;
				struct vmt_page_info info;
				/* the daemon checked them; a file is not trusted either */
				if (page_scan(&g->layout, page, &info) < 0) {
					say(set, "%s cpu%u: page %u does not parse; left out", g->paths[i], c, p);
					continue;
				}
				pg[k++] = (struct spage){ page, info.base_ts, crc32c(0, page, g->page_size),
							  info.commit };
			}
		}
		qsort(pg, k, sizeof(*pg), spage_cmp);
		for (uint64_t i = 0; i < k; i++) {
			struct vmt_page_info info;
			/* identical neighbours: one page dumped twice */
			if (u && !spage_cmp(&pg[i - 1], &pg[i]) && !memcmp(pg[i - 1].p, pg[i].p, g->page_size)) {
				sc->duplicates++;
				continue;
			}
			sc->pages[u++] = pg[i].p;
			page_scan(&g->layout, pg[i].p, &info);
			sc->events += info.events;
			if (info.events) {
				if (!sc->first_ts || info.first_ts < sc->first_ts)
					sc->first_ts = info.first_ts;
				sc->last_ts = VMT_MAX(sc->last_ts, info.last_ts);
			}
		}
		sc->npages = u;
		free(pg);
		group_gaps(set, g, c);
	}
	return 0;
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
		free(g->cpus[c].pages);
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

		r = sample_read(paths[i], &s, why, sizeof(why));
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

		qsort(g->samples, g->nsamples, sizeof(*g->samples), by_created);
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
