/* SPDX-License-Identifier: MIT */
/*
 * tcode: ftrace pages split into streams by what they hold (tcode.h); this
 * file builds the schema from the guest's formats. Hand-written: no library
 * splits ftrace records by their formats, and the decoder must hold against
 * hostile input with every read bounded.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meta.h"
#include "tcode-int.h"

/* ---- the schema ------------------------------------------------------------- */

struct field {
	char name[64];
	uint32_t off, size;
	bool sign, array, chr, dataloc;
};

static const char *line_value(const char *line, const char *key)
{
	const char *p = strstr(line, key);

	return p ? p + strlen(key) : NULL;
}

/* "field:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;" */
static bool field_parse(const char *line, struct field *f)
{
	const char *d = strstr(line, "field:"), *semi, *e, *b;
	const char *os = line_value(line, "offset:"), *ss = line_value(line, "size:");
	const char *sg = line_value(line, "signed:");
	char decl[160];
	size_t dl, nl;
	unsigned long o, s;
	char *end;

	if (!d || !os || !ss)
		return false;
	d += 6;
	semi = strchr(d, ';');
	if (!semi || (size_t)(semi - d) >= sizeof(decl))
		return false;
	dl = (size_t)(semi - d);
	memcpy(decl, d, dl);
	decl[dl] = 0;
	o = strtoul(os, &end, 10);
	if (end == os || *end != ';')
		return false;
	s = strtoul(ss, &end, 10);
	if (end == ss || *end != ';' || o > 65535 || s == 0 || s > 65535)
		return false;
	memset(f, 0, sizeof(*f));
	f->off = (uint32_t)o;
	f->size = (uint32_t)s;
	f->sign = sg && *sg == '1';
	f->dataloc = !strncmp(decl, "__data_loc", 10);
	/* the name: the last identifier, after any [N] that follows it */
	e = decl + dl;
	while (e > decl && e[-1] == ' ')
		e--;
	if (e > decl && e[-1] == ']') {
		while (e > decl && *--e != '[')
			;
		if (!f->dataloc)
			f->array = true;
	}
	b = e;
	while (b > decl && (b[-1] == '_' || (b[-1] >= '0' && b[-1] <= '9') ||
			    ((b[-1] | 0x20) >= 'a' && (b[-1] | 0x20) <= 'z')))
		b--;
	nl = (size_t)(e - b);
	if (!nl || nl >= sizeof(f->name))
		return false;
	memcpy(f->name, b, nl);
	f->name[nl] = 0;
	f->chr = strstr(decl, "char") != NULL;
	return true;
}

static int field_cmp(const void *a, const void *b)
{
	const struct field *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

struct shared_col {
	char name[64];
	uint32_t col;
};

struct build {
	struct vmt_tcode *t;
	struct shared_col shared[16];
	uint32_t nshared;
};

static uint32_t col_for(struct build *b, const char *name)
{
	if (!strncmp(name, "common_", 7)) {
		for (uint32_t i = 0; i < b->nshared; i++)
			if (!strcmp(b->shared[i].name, name))
				return b->shared[i].col;
		if (b->nshared < ARRAY_SIZE(b->shared)) {
			snprintf(b->shared[b->nshared].name, sizeof(b->shared[0].name), "%.63s", name);
			b->shared[b->nshared].col = b->t->ncols;
			b->nshared++;
		}
	}
	return b->t->ncols++;
}

static const struct field *field_named(const struct field *fs, uint32_t n, const char *name)
{
	for (uint32_t i = 0; i < n; i++)
		if (!strcmp(fs[i].name, name))
			return &fs[i];
	return NULL;
}

/* sched_switch as the kernel lays it out: prev_* and next_* of one shape. */
static void plan_switch(struct plan *p, const struct field *fs, uint32_t n)
{
	const struct field *pc = field_named(fs, n, "prev_comm"), *pp = field_named(fs, n, "prev_pid");
	const struct field *pr = field_named(fs, n, "prev_prio"), *nc = field_named(fs, n, "next_comm");
	const struct field *np = field_named(fs, n, "next_pid"), *nr = field_named(fs, n, "next_prio");

	if (!pc || !pp || !pr || !nc || !np || !nr || pc->size != COMM_LEN || nc->size != COMM_LEN ||
	    pp->size != 4 || np->size != 4 || pr->size != 4 || nr->size != 4)
		return;
	for (uint16_t i = 0; i < p->nseg; i++) {
		struct seg *s = &p->segs[i];

		if (s->off == pc->off || s->off == pp->off || s->off == pr->off) {
			if ((s->off == pc->off) != (s->kind == SEG_COMM) || s->kind == SEG_RAW)
				return;
			s->pred = 1;
		}
	}
	if (!p->segs)
		return;
	p->sw = true;
	p->prev_comm = (uint16_t)pc->off;
	p->prev_pid = (uint16_t)pp->off;
	p->prev_prio = (uint16_t)pr->off;
	p->next_comm = (uint16_t)nc->off;
	p->next_pid = (uint16_t)np->off;
	p->next_prio = (uint16_t)nr->off;
}

static struct seg *seg_at(struct plan *p, uint32_t off, enum seg_kind kind)
{
	for (uint16_t i = 0; i < p->nseg; i++)
		if (p->segs[i].off == off && p->segs[i].kind == kind)
			return &p->segs[i];
	return NULL;
}

static void plan_runtime(struct plan *p, const struct field *fs, uint32_t n)
{
	const struct field *pid = field_named(fs, n, "pid"), *rt = field_named(fs, n, "runtime");
	const struct field *vr = field_named(fs, n, "vruntime");
	struct seg *s;

	if (!pid || !rt || !vr || pid->size != 4 || rt->size != 8 || vr->size != 8 ||
	    pid->off > vr->off || rt->off > vr->off || !seg_at(p, pid->off, SEG_INT) ||
	    !seg_at(p, rt->off, SEG_INT) || !(s = seg_at(p, vr->off, SEG_INT)))
		return;
	s->acc = 1;
	p->rt = true;
	p->acc_key = (uint16_t)pid->off;
	p->acc_add = (uint16_t)rt->off;
}

/* softX after X, both integers of one size: softX is told as softX - X */
static void plan_soft(struct plan *p, const struct field *fs, uint32_t n)
{
	for (uint16_t i = 0; i < p->nseg; i++) {
		struct seg *s = &p->segs[i];
		const struct field *f = NULL, *base;

		for (uint32_t k = 0; k < n && !f; k++)
			if (fs[k].off == s->off)
				f = &fs[k];
		if (s->kind != SEG_INT || s->rel || s->acc || s->pred || !f ||
		    strncmp(f->name, "soft", 4))
			continue;
		base = field_named(fs, n, f->name + 4);
		if (base && base->off < s->off && base->size == s->size &&
		    seg_at(p, base->off, SEG_INT)) {
			s->rel = REL_SOFT;
			s->rel_off = (uint16_t)base->off;
		}
	}
}

/* Version 2's predictions from the record's time: sched_stat_runtime's
 * runtime (the time since the task's last accounting, a switch or a
 * runtime) and a signed 64-bit "now" (hrtimer_expire_entry's, CLOCK_MONOTONIC
 * at a near-constant offset from the trace clock). */
static void plan_time(struct plan *p, const struct field *fs, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct seg *s = seg_at(p, fs[i].off, SEG_INT);

		if (!s || s->rel || s->acc || s->pred || s->size != 8)
			continue;
		if (p->rt && !strcmp(fs[i].name, "runtime"))
			s->rel = REL_TS;
		else if (s->sign && !strcmp(fs[i].name, "now"))
			s->rel = REL_CLOCK;
	}
}

/* Each segment's op and stream in each version, once rel, acc and pred
 * are known (tcode-int.h): version 1 knows no REL_TS nor REL_CLOCK. */
static void plan_ops(struct plan *p, const struct field *fs, uint32_t n)
{
	static const uint8_t delta_op[9][2] = {
		[1] = { OP_D8U, OP_D8S }, [2] = { OP_D16U, OP_D16S },
		[4] = { OP_D32U, OP_D32S }, [8] = { OP_D64, OP_D64 },
	};
	const struct field *fl = field_named(fs, n, "common_flags");
	const struct field *pc = field_named(fs, n, "common_preempt_count");
	const struct seg *sfl = fl && fl->size == 1 ? seg_at(p, fl->off, SEG_INT) : NULL;

	for (uint16_t i = 0; i < p->nseg; i++) {
		struct seg *s = &p->segs[i];

		for (unsigned v = 0; v < TCODE_NVERS; v++) {
			bool rel = s->rel == REL_SOFT || (v && s->rel != REL_NONE);

			if (s->kind == SEG_COMM)
				s->ops[v] = OP_COMM;
			else if (s->kind != SEG_INT)
				s->ops[v] = OP_RAW;
			else if (rel || s->acc)
				s->ops[v] = OP_INT;
			else
				s->ops[v] = delta_op[s->size][s->sign ? 1 : 0];
			s->strms[v] = NFIXED + s->col;
		}
		/* flags and preempt count together: their pairs repeat */
		if (sfl && pc && s->kind == SEG_INT && s->off == pc->off && s->size == 1)
			s->strms[1] = NFIXED + sfl->col;
	}
}

static int plan_add_seg(struct plan *p, uint32_t *room, struct seg s)
{
	if (p->nseg == *room) {
		uint32_t nr = *room ? *room * 2 : 8;
		struct seg *v = realloc(p->segs, nr * sizeof(*v));

		if (!v)
			return -ENOMEM;
		p->segs = v;
		*room = nr;
	}
	p->segs[p->nseg++] = s;
	return 0;
}

/* One format file into a plan; 0 with nothing added when it does not fit. */
static int plan_from_format(struct build *b, const char *text, size_t len, uint32_t max_fixed)
{
	struct field fs[VMT_TCODE_MAX_FIELDS];
	uint32_t n = 0, room = 0, pos = 2;
	char line[512], name[64] = "";
	long id = -1;
	struct plan p = { 0 };
	const char *q = text, *end = text + len;
	bool have_type = false;
	int r;

	while (q < end) {
		const char *nl = memchr(q, '\n', (size_t)(end - q));
		size_t ll = nl ? (size_t)(nl - q) : (size_t)(end - q);

		if (ll < sizeof(line)) {
			memcpy(line, q, ll);
			line[ll] = 0;
			if (!strncmp(line, "name: ", 6))
				snprintf(name, sizeof(name), "%.63s", line + 6);
			else if (!strncmp(line, "ID: ", 4))
				id = strtol(line + 4, NULL, 10);
			else if (strstr(line, "field:") && n < VMT_TCODE_MAX_FIELDS &&
				 field_parse(line, &fs[n]))
				n++;
		}
		q += ll + 1;
	}
	if (id < 0 || id > 65535 || !n)
		return 0;
	qsort(fs, n, sizeof(fs[0]), field_cmp);
	p.id = (uint16_t)id;
	for (uint32_t i = 0; i < n; i++) {
		struct field *f = &fs[i];
		struct seg s = { 0 };

		if (!strcmp(f->name, "common_type")) {
			have_type = f->off == 0 && f->size == 2;
			continue;
		}
		if (f->off < pos || f->off + f->size > max_fixed)
			continue;	/* overlaps what is covered, or cannot be */
		if (f->off > pos) {
			s = (struct seg){ .kind = SEG_RAW, .off = (uint16_t)pos,
					  .len = (uint16_t)(f->off - pos) };
			if ((r = plan_add_seg(&p, &room, s)) < 0)
				goto fail;
		}
		s = (struct seg){ .off = (uint16_t)f->off, .len = (uint16_t)f->size };
		if ((f->dataloc || !f->array) &&
		    (f->size == 1 || f->size == 2 || f->size == 4 || f->size == 8)) {
			s.kind = SEG_INT;
			s.size = (uint8_t)f->size;
			s.sign = f->sign;
			s.col = col_for(b, f->name);
		} else if (f->array && f->chr && f->size == COMM_LEN) {
			s.kind = SEG_COMM;
		} else {
			s.kind = SEG_RAW;
		}
		if ((r = plan_add_seg(&p, &room, s)) < 0)
			goto fail;
		pos = f->off + f->size;
	}
	if (!have_type) {
		free(p.segs);
		return 0;
	}
	p.fixed = (uint16_t)pos;
	if (!strcmp(name, "sched_switch"))
		plan_switch(&p, fs, n);
	if (!strcmp(name, "sched_stat_runtime"))
		plan_runtime(&p, fs, n);
	plan_soft(&p, fs, n);
	plan_time(&p, fs, n);
	plan_ops(&p, fs, n);
	b->t->plans[b->t->nplans++] = p;
	return 0;
fail:
	free(p.segs);
	return r;
}

static int index_plans(struct vmt_tcode *t)
{
	uint32_t size = 64;

	while (size < t->nplans * 2)
		size *= 2;
	t->slots = calloc(size, sizeof(*t->slots));
	if (!t->slots)
		return -ENOMEM;
	t->hmask = size - 1;
	for (uint32_t i = 0; i < t->nplans; i++) {
		uint16_t id = t->plans[i].id;
		uint32_t h = id_hash(id) & t->hmask;

		if (tcode_plan_find(t, id))
			continue;	/* an id twice: the first format wins */
		t->plans[i].first = true;
		while (t->slots[h])
			h = (h + 1) & t->hmask;
		t->slots[h] = (uint32_t)id << 16 | (i + 1);
	}
	return 0;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	for (size_t k = 0; k < n; k++)
		h = (h ^ ((const uint8_t *)p)[k]) * 0x100000001b3ull;
	return h;
}

int tcode_new(struct vmt_tcode **out, const uint8_t *bundle, size_t len, uint32_t page_size)
{
	static uint64_t serials;
	struct vmt_meta_entry e;
	struct vmt_tcode *t;
	struct build b = { 0 };
	size_t pos = 0;
	int r;

	*out = NULL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	b.t = t;
	if (meta_find(bundle, len, "events/header_page", &e) < 0 ||
	    page_layout_parse(&t->l, (const char *)e.data, e.data_len, page_size) < 0) {
		free(t);
		return -EINVAL;
	}
	t->serial = __atomic_add_fetch(&serials, 1, __ATOMIC_RELAXED);
	t->id = fnv(0xcbf29ce484222325ull, &page_size, sizeof(page_size));
	t->id = fnv(t->id, e.data, e.data_len);
	for (uint32_t i = 0; i < t->l.data_offset; i++) {
		bool in_ts = i >= t->l.ts_offset && i < t->l.ts_offset + 8;
		bool in_commit = i >= t->l.commit_offset && i < t->l.commit_offset + t->l.commit_size;

		if (!in_ts && !in_commit)
			t->hdr_other[t->nhdr_other++] = (uint8_t)i;
	}
	t->plans = calloc(VMT_TCODE_MAX_EVENTS, sizeof(*t->plans));
	if (!t->plans) {
		free(t);
		return -ENOMEM;
	}
	while ((r = meta_next(bundle, len, &pos, &e)) > 0) {
		size_t nl = e.name_len;

		if (t->nplans >= VMT_TCODE_MAX_EVENTS)
			break;
		if (nl < 14 || strncmp(e.name, "events/", 7) || memcmp(e.name + nl - 7, "/format", 7))
			continue;
		t->id = fnv(t->id, &e.name_len, sizeof(e.name_len));
		t->id = fnv(t->id, e.name, e.name_len);
		t->id = fnv(t->id, &e.data_len, sizeof(e.data_len));
		t->id = fnv(t->id, e.data, e.data_len);
		r = plan_from_format(&b, (const char *)e.data, e.data_len,
				     page_size - t->l.data_offset);
		if (r < 0)
			break;
	}
	if (r < 0 || (r = index_plans(t)) < 0) {
		tcode_free(t);
		return r;
	}
	*out = t;
	return 0;
}

void tcode_free(struct vmt_tcode *t)
{
	if (!t)
		return;
	for (uint32_t i = 0; i < t->nplans; i++)
		free(t->plans[i].segs);
	free(t->plans);
	free(t->slots);
	free(t);
}

uint32_t tcode_nevents(const struct vmt_tcode *t)
{
	return t->nplans;
}

uint32_t tcode_ncolumns(const struct vmt_tcode *t)
{
	return t->ncols;
}

uint64_t tcode_id(const struct vmt_tcode *t)
{
	return t->id;
}

uint32_t tcode_page_size(const struct vmt_tcode *t)
{
	return t->l.page_size;
}

uint64_t tcode_serial(const struct vmt_tcode *t)
{
	return t->serial;
}

int tcode_ctx_new(struct vmt_tcode_ctx **out, const struct vmt_tcode *t)
{
	struct vmt_tcode_ctx *c = calloc(1, sizeof(*c));

	*out = NULL;
	if (!c)
		return -ENOMEM;
	c->t = t;
	c->nstreams = NFIXED + t->ncols;
	c->s = calloc(c->nstreams, sizeof(*c->s));
	c->used = calloc(c->nstreams, sizeof(*c->used));
	c->r = calloc(c->nstreams, sizeof(*c->r));
	c->prev = calloc(t->ncols ? t->ncols : 1, sizeof(*c->prev));
	c->last_type = calloc(t->nplans ? t->nplans : 1, 1);
	if (!c->s || !c->used || !c->r || !c->prev || !c->last_type) {
		tcode_ctx_free(c);
		return -ENOMEM;
	}
	*out = c;
	return 0;
}

void tcode_ctx_free(struct vmt_tcode_ctx *c)
{
	if (!c)
		return;
	if (c->s)
		for (uint32_t i = 0; i < c->nstreams; i++)
			buf_free(&c->s[i]);
	free(c->s);
	free(c->used);
	free(c->r);
	free(c->prev);
	free(c->last_type);
	free(c);
}

