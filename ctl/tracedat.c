/* SPDX-License-Identifier: MIT */
/*
 * trace.dat v7 as trace-cmd 3.1 reads it (trace-input.c), numbers
 * little-endian:
 *
 *   "\x17\x08\x44" "tracing" "7\0", endian 0, long size, u32 page size,
 *   "zstd\0<version>\0" or "none\0\0", u64 offset of the OPTIONS section,
 *   then sections back to back, each: u16 id, u16 flags (1 = compressed),
 *   u32 description (offset into STRINGS), u64 size of what follows. A
 *   compressed section holds u32 zsize, u32 size, one zstd frame. In order:
 *   HEADER_INFO 16, FTRACE_EVENTS 17, EVENT_FORMATS 18, KALLSYMS 19,
 *   PRINTK 20, CMDLINES 21, BUFFER 3 (flyrecord), OPTIONS 0, STRINGS 15.
 *
 * The flyrecord section holds each CPU's pages at a page-aligned offset:
 * raw, or as u32 nchunks then per chunk u32 zsize, u32 size, a zstd frame
 * of up to VMT_TD_CHUNK_PAGES whole pages. The reader finds sections by
 * walking their sizes from the file header, so every size must be exact.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
#include <zstd.h>

#include "meta.h"
#include "page.h"
#include "tracedat.h"
#include "util.h"

/* Option and section ids share one space (trace-cmd-private.h). */
enum {
	VMT_TD_DONE = 0,	/* also the OPTIONS section id */
	VMT_TD_CPUSTAT = 2,
	VMT_TD_BUFFER = 3,
	VMT_TD_TRACECLOCK = 4,
	VMT_TD_UNAME = 5,
	VMT_TD_CPUCOUNT = 8,
	VMT_TD_TRACEID = 11,
	VMT_TD_TIME_SHIFT = 12,
	VMT_TD_GUEST = 13,
	VMT_TD_STRINGS = 15,
	VMT_TD_HEADER_INFO = 16,
	VMT_TD_FTRACE_EVENTS = 17,
	VMT_TD_EVENT_FORMATS = 18,
	VMT_TD_KALLSYMS = 19,
	VMT_TD_PRINTK = 20,
	VMT_TD_CMDLINES = 21,
};

#define VMT_TD_SEC_COMPRESSED 1
/* As trace-cmd: small chunks keep random access cheap for the reader. */
#define VMT_TD_CHUNK_PAGES 10
#define VMT_TD_CLOCK_MAX 64
#define VMT_TD_PAGE_MAX (1u << 24)
#define VMT_TD_CPU_MAX 8192	/* the kernel's NR_CPUS limit */

struct td_writer {
	int fd;
	off_t base;		/* where the file starts in fd */
	uint64_t off;		/* bytes written so far: the current file offset */
	uint32_t page_size;
	ZSTD_CCtx *zc;		/* NULL: "none" */
	struct vmt_buf strings;	/* the STRINGS section, written last */
	struct vmt_buf opts;	/* records of the OPTIONS section */
	char *why;
	size_t why_len;
};

/* One events/<system>/<event>/format entry. */
struct td_format {
	const char *sys;
	uint32_t sys_len;
	const char *event;
	uint32_t event_len;
	const uint8_t *data;
	uint32_t len;
};

/* What the bundle holds for the file; an entry with name NULL is absent. */
struct td_meta {
	struct vmt_meta_entry header_page, header_event, kallsyms, printk, cmdlines, clock;
	struct td_format *fmt;
	size_t nfmt;
};

/* Where each CPU's data landed, for the BUFFER option. */
struct td_cpu_out {
	uint32_t cpu;
	uint64_t offset;
	uint64_t size;
};

__attribute__((format(printf, 3, 4)))
static int td_fail(struct td_writer *w, int r, const char *fmt, ...)
{
	va_list ap;

	if (w->why && w->why_len && !w->why[0]) {	/* the first, innermost reason wins */
		va_start(ap, fmt);
		vsnprintf(w->why, w->why_len, fmt, ap);
		va_end(ap);
	}
	return r;
}

static int td_write(struct td_writer *w, const void *p, size_t n)
{
	int r = write_full(w->fd, p, n);

	if (r < 0)
		return td_fail(w, r, "write: %s", strerror(-r));
	w->off += n;
	return 0;
}

static int td_pad(struct td_writer *w, uint64_t align)
{
	static const uint8_t zero[4096];
	uint64_t n = (align - w->off % align) % align;

	while (n) {
		size_t k = (size_t)VMT_MIN(n, sizeof(zero));
		int r = td_write(w, zero, k);

		if (r < 0)
			return r;
		n -= k;
	}
	return 0;
}

/* Fill in a value reserved earlier, without moving the write position. */
static int td_patch_le64(struct td_writer *w, uint64_t at, uint64_t v)
{
	uint8_t b[8];
	int r;

	put_le64(b, v);
	r = pwrite_all(w->fd, b, sizeof(b), (uint64_t)w->base + at);
	if (r < 0)
		return td_fail(w, r, "pwrite: %s", strerror(-r));
	return 0;
}

static int td_string(struct td_writer *w, const char *s, uint32_t *id)
{
	*id = (uint32_t)w->strings.len;
	return buf_put_str(&w->strings, s);
}

static int td_opt(struct td_writer *w, uint16_t id, const void *data, size_t len)
{
	int r;

	if (len > UINT32_MAX)
		return td_fail(w, -EFBIG, "option %u too large", id);
	r = buf_reserve(&w->opts, 6 + len);
	if (r < 0)
		return r;
	buf_put_le16(&w->opts, id);
	buf_put_le32(&w->opts, (uint32_t)len);
	return buf_append(&w->opts, data, len);
}

static int td_opt_u64(struct td_writer *w, uint16_t id, uint64_t v)
{
	uint8_t b[8];

	put_le64(b, v);
	return td_opt(w, id, b, sizeof(b));
}

static int td_opt_str(struct td_writer *w, uint16_t id, const char *s)
{
	return td_opt(w, id, s, strlen(s) + 1);
}

static int td_zstd(struct td_writer *w, const void *src, size_t len, uint8_t **out, size_t *zlen)
{
	size_t cap = ZSTD_compressBound(len), n;
	uint8_t *z = malloc(cap ? cap : 1);

	if (!z)
		return -ENOMEM;
	n = ZSTD_compress2(w->zc, z, cap, src, len);
	if (ZSTD_isError(n)) {
		free(z);
		return td_fail(w, -EIO, "zstd: %s", ZSTD_getErrorName(n));
	}
	*out = z;
	*zlen = n;
	return 0;
}

static int td_section_header(struct td_writer *w, uint16_t id, uint16_t flags, uint32_t desc,
			     uint64_t size)
{
	uint8_t h[16];

	put_le16(h, id);
	put_le16(h + 2, flags);
	put_le32(h + 4, desc);
	put_le64(h + 8, size);
	return td_write(w, h, sizeof(h));
}

/*
 * A section whose payload is in memory, compressed when the file is.
 * *at gets the section's offset, which its option points to.
 */
static int td_section(struct td_writer *w, uint16_t id, uint32_t desc,
		      const struct vmt_buf *payload, bool compress, uint64_t *at)
{
	_cleanup_free_ uint8_t *z = NULL;
	uint8_t zh[8];
	size_t zlen = 0;
	int r;

	*at = w->off;
	if (!w->zc || !compress) {
		r = td_section_header(w, id, 0, desc, payload->len);
		return r < 0 ? r : td_write(w, payload->data, payload->len);
	}
	/* the reader keeps both sizes of a compressed block in 32 bits */
	if (payload->len > UINT32_MAX)
		return td_fail(w, -EFBIG, "section %u too large", id);
	r = td_zstd(w, payload->data, payload->len, &z, &zlen);
	if (r < 0)
		return r;
	put_le32(zh, (uint32_t)zlen);
	put_le32(zh + 4, (uint32_t)payload->len);
	r = td_section_header(w, id, VMT_TD_SEC_COMPRESSED, desc, 8 + zlen);
	if (r >= 0)
		r = td_write(w, zh, sizeof(zh));
	return r < 0 ? r : td_write(w, z, zlen);
}

static int td_section_named(struct td_writer *w, uint16_t id, const char *desc,
			    const struct vmt_buf *payload, bool compress, uint64_t *at)
{
	uint32_t desc_id;
	int r = td_string(w, desc, &desc_id);

	return r < 0 ? r : td_section(w, id, desc_id, payload, compress, at);
}

static bool entry_is(const struct vmt_meta_entry *e, const char *name)
{
	size_t n = strlen(name);

	return e->name_len == n && !memcmp(e->name, name, n);
}

/* events/<system>/<event>/format, components non-empty and free of NULs. */
static bool format_parse(const struct vmt_meta_entry *e, struct td_format *f)
{
	const char *p = e->name, *end = e->name + e->name_len, *s, *ev;

	if (e->name_len < sizeof("events/s/e/format") - 1 || memcmp(p, "events/", 7) ||
	    memcmp(end - 7, "/format", 7) || memchr(p, '\0', e->name_len))
		return false;
	s = p + 7;
	ev = memchr(s, '/', (size_t)(end - 7 - s));
	if (!ev || ev == s || ev + 1 >= end - 7 || memchr(ev + 1, '/', (size_t)(end - 7 - ev - 1)))
		return false;
	*f = (struct td_format){
		.sys = s,
		.sys_len = (uint32_t)(ev - s),
		.event = ev + 1,
		.event_len = (uint32_t)(end - 7 - ev - 1),
		.data = e->data,
		.len = e->data_len,
	};
	return true;
}

static int span_cmp(const char *a, uint32_t al, const char *b, uint32_t bl)
{
	int c = memcmp(a, b, VMT_MIN(al, bl));

	return c ? c : (al > bl) - (al < bl);
}

static int format_cmp(const void *x, const void *y)
{
	const struct td_format *a = x, *b = y;
	int c = span_cmp(a->sys, a->sys_len, b->sys, b->sys_len);

	return c ? c : span_cmp(a->event, a->event_len, b->event, b->event_len);
}

static bool format_is_ftrace(const struct td_format *f)
{
	return f->sys_len == 6 && !memcmp(f->sys, "ftrace", 6);
}

static int meta_collect(struct td_writer *w, const uint8_t *bundle, size_t len, struct td_meta *m)
{
	struct { const char *name; struct vmt_meta_entry *slot; } files[] = {
		{ "events/header_page", &m->header_page },
		{ "events/header_event", &m->header_event },
		{ "kallsyms", &m->kallsyms },
		{ "printk_formats", &m->printk },
		{ "saved_cmdlines", &m->cmdlines },
		{ "trace_clock", &m->clock },
	};
	struct vmt_meta_entry e;
	size_t pos = 0, cap = 0;
	int r;

	while ((r = meta_next(bundle, len, &pos, &e)) > 0) {
		struct td_format f;

		for (size_t i = 0; i < ARRAY_SIZE(files); i++)
			if (!files[i].slot->name && entry_is(&e, files[i].name))
				*files[i].slot = e;
		if (!format_parse(&e, &f))
			continue;
		if (m->nfmt == cap) {
			struct td_format *t;

			cap = cap ? cap * 2 : 256;
			t = realloc(m->fmt, cap * sizeof(*t));
			if (!t)
				return -ENOMEM;
			m->fmt = t;
		}
		m->fmt[m->nfmt++] = f;
	}
	if (r < 0)
		return td_fail(w, -EBADMSG, "metadata entry runs past the end of the bundle");
	if (!m->header_page.name)
		return td_fail(w, -EBADMSG, "metadata lacks events/header_page");
	/* sorted, so each system's events are together and the file is reproducible */
	if (m->nfmt)
		qsort(m->fmt, m->nfmt, sizeof(*m->fmt), format_cmp);
	return 0;
}

static int put_sized(struct vmt_buf *b, unsigned width, const void *data, uint64_t len)
{
	int r = width == 4 ? buf_put_le32(b, (uint32_t)len) : buf_put_le64(b, len);

	return r < 0 ? r : buf_append(b, data, len);
}

static int payload_header_info(const struct td_meta *m, struct vmt_buf *b)
{
	int r = buf_reserve(b, 12 + 8 + m->header_page.data_len + 13 + 8 +
			       m->header_event.data_len);

	if (r < 0)
		return r;
	buf_append(b, "header_page", 12);
	put_sized(b, 8, m->header_page.data, m->header_page.data_len);
	buf_append(b, "header_event", 13);
	/* an absent header_event is written empty, as trace-cmd does */
	return put_sized(b, 8, m->header_event.data, m->header_event.data_len);
}

static int payload_ftrace_events(const struct td_meta *m, struct vmt_buf *b)
{
	uint32_t n = 0;
	int r;

	for (size_t i = 0; i < m->nfmt; i++)
		n += format_is_ftrace(&m->fmt[i]);
	r = buf_put_le32(b, n);
	for (size_t i = 0; r >= 0 && i < m->nfmt; i++)
		if (format_is_ftrace(&m->fmt[i]))
			r = put_sized(b, 8, m->fmt[i].data, m->fmt[i].len);
	return r;
}

/* u32 systems, then per system: name, u32 events, per event u64 size + format. */
static int payload_event_formats(const struct td_meta *m, struct vmt_buf *b)
{
	uint32_t systems = 0;
	int r;

	for (size_t i = 0; i < m->nfmt; i++)
		if (!format_is_ftrace(&m->fmt[i]) &&
		    (!i || span_cmp(m->fmt[i].sys, m->fmt[i].sys_len, m->fmt[i - 1].sys,
				    m->fmt[i - 1].sys_len)))
			systems++;
	r = buf_put_le32(b, systems);
	for (size_t i = 0, j; r >= 0 && i < m->nfmt; i = j) {
		const struct td_format *f = &m->fmt[i];

		for (j = i + 1; j < m->nfmt && !span_cmp(f->sys, f->sys_len, m->fmt[j].sys,
							   m->fmt[j].sys_len); j++)
			;
		if (format_is_ftrace(f))
			continue;
		r = buf_append(b, f->sys, f->sys_len);
		if (r >= 0)
			r = buf_append(b, "", 1);
		if (r >= 0)
			r = buf_put_le32(b, (uint32_t)(j - i));
		for (size_t k = i; r >= 0 && k < j; k++)
			r = put_sized(b, 8, m->fmt[k].data, m->fmt[k].len);
	}
	return r;
}

static int payload_file(const struct vmt_meta_entry *e, unsigned width, struct vmt_buf *b)
{
	return put_sized(b, width, e->data, e->name ? e->data_len : 0);
}

static int payload_kallsyms(const struct td_meta *m, struct vmt_buf *b)
{
	return payload_file(&m->kallsyms, 4, b);
}

static int payload_printk(const struct td_meta *m, struct vmt_buf *b)
{
	return payload_file(&m->printk, 4, b);
}

static int payload_cmdlines(const struct td_meta *m, struct vmt_buf *b)
{
	return payload_file(&m->cmdlines, 8, b);
}

/*
 * The six metadata sections, each with the option that points to it. A
 * file the bundle lacks still gets its section, empty, as trace-cmd writes.
 */
static int metadata_write(struct td_writer *w, const struct td_meta *m)
{
	static const struct {
		uint16_t id;
		const char *desc;
		int (*build)(const struct td_meta *m, struct vmt_buf *b);
	} secs[] = {
		{ VMT_TD_HEADER_INFO, "headers", payload_header_info },
		{ VMT_TD_FTRACE_EVENTS, "ftrace events", payload_ftrace_events },
		{ VMT_TD_EVENT_FORMATS, "events format", payload_event_formats },
		{ VMT_TD_KALLSYMS, "kallsyms", payload_kallsyms },
		{ VMT_TD_PRINTK, "printk", payload_printk },
		{ VMT_TD_CMDLINES, "command lines", payload_cmdlines },
	};
	int r = 0;

	for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(secs); i++) {
		struct vmt_buf b = { 0 };
		uint64_t at;

		r = secs[i].build(m, &b);
		if (r >= 0)
			r = td_section_named(w, secs[i].id, secs[i].desc, &b, true, &at);
		if (r >= 0)
			r = td_opt_u64(w, secs[i].id, at);
		buf_free(&b);
	}
	return r;
}

static bool clock_name_ok(const char *s, size_t n)
{
	if (!n || n >= VMT_TD_CLOCK_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] <= ' ' || s[i] == '[' || s[i] == ']' || s[i] > '~')
			return false;
	return true;
}

/* One name of the TRACECLOCK list, in brackets if it is the one in use. */
static int clock_put(struct vmt_buf *out, const char *s, size_t n, bool mark)
{
	char t[VMT_TD_CLOCK_MAX + 4];

	snprintf(t, sizeof(t), "%s%s%.*s%s", out->len ? " " : "", mark ? "[" : "", (int)n, s,
		 mark ? "]" : "");
	return buf_append(out, t, strlen(t));
}

/*
 * The TRACECLOCK text: the bundle's trace_clock list with the brackets
 * moved to the clock the pages were stamped with (the caller's, else the
 * one trace_clock selects, else "local"); chosen gets that clock's name.
 */
static int clock_text(const struct vmt_meta_entry *tc, const char *want, struct vmt_buf *out,
		      char chosen[VMT_TD_CLOCK_MAX])
{
	const char *p = tc->name ? (const char *)tc->data : "";
	const char *end = p + (tc->name ? tc->data_len : 0);
	const char *lb = want ? NULL : memchr(p, '[', (size_t)(end - p));
	const char *rb = lb ? memchr(lb, ']', (size_t)(end - lb)) : NULL;
	bool listed = false;
	int r = 0;

	if (rb && clock_name_ok(lb + 1, (size_t)(rb - lb - 1)))
		snprintf(chosen, VMT_TD_CLOCK_MAX, "%.*s", (int)(rb - lb - 1), lb + 1);
	else
		snprintf(chosen, VMT_TD_CLOCK_MAX, "%s", want ? want : "local");
	while (r >= 0 && p < end) {
		const char *s = p, *e;
		bool mark;

		while (s < end && *s <= ' ')
			s++;
		for (e = s; e < end && *e > ' '; e++)
			;
		p = e;
		s += s < e && *s == '[';
		e -= e > s && e[-1] == ']';
		if (!clock_name_ok(s, (size_t)(e - s)))
			continue;
		mark = (size_t)(e - s) == strlen(chosen) && !memcmp(s, chosen, (size_t)(e - s));
		listed |= mark;
		r = clock_put(out, s, (size_t)(e - s), mark);
	}
	if (r >= 0 && !listed)
		r = clock_put(out, chosen, strlen(chosen), true);
	return r < 0 ? r : buf_append(out, "\n", 2);	/* with its NUL */
}

/* Raw pages straight from the caller's pointers, a batch per writev. */
static int cpu_write_raw(struct td_writer *w, const struct vmt_tracedat_cpu *c)
{
	struct iovec iov[64];
	uint64_t i = 0;

	while (i < c->npages) {
		int n = (int)VMT_MIN(c->npages - i, (uint64_t)ARRAY_SIZE(iov));
		int r;

		for (int k = 0; k < n; k++)
			iov[k] = (struct iovec){ (void *)c->pages[i + k], w->page_size };
		r = writev_all(w->fd, iov, n);
		if (r < 0)
			return td_fail(w, r, "write: %s", strerror(-r));
		w->off += (uint64_t)n * w->page_size;
		i += (uint64_t)n;
	}
	return 0;
}

/* u32 nchunks, then per chunk: u32 zsize, u32 size, zstd frame of whole pages. */
static int cpu_write_zstd(struct td_writer *w, const struct vmt_tracedat_cpu *c)
{
	uint64_t nchunks = (c->npages + VMT_TD_CHUNK_PAGES - 1) / VMT_TD_CHUNK_PAGES;
	size_t chunk = (size_t)VMT_TD_CHUNK_PAGES * w->page_size;
	size_t cap = ZSTD_compressBound(chunk);
	_cleanup_free_ uint8_t *stage = NULL;
	_cleanup_free_ uint8_t *z = NULL;
	uint8_t h[8];
	int r;

	if (nchunks > UINT32_MAX)
		return td_fail(w, -EFBIG, "cpu %u: too many pages", c->cpu);
	stage = malloc(chunk);
	z = malloc(8 + cap);
	if (!stage || !z)
		return -ENOMEM;
	put_le32(h, (uint32_t)nchunks);
	r = td_write(w, h, 4);
	for (uint64_t i = 0; r >= 0 && i < c->npages; i += VMT_TD_CHUNK_PAGES) {
		uint64_t n = VMT_MIN(c->npages - i, (uint64_t)VMT_TD_CHUNK_PAGES);
		size_t len = (size_t)n * w->page_size, zlen;

		/* a frame wants one input; a chunk is small, so copy it together */
		for (uint64_t k = 0; k < n; k++)
			memcpy(stage + k * w->page_size, c->pages[i + k], w->page_size);
		zlen = ZSTD_compress2(w->zc, z + 8, cap, stage, len);
		if (ZSTD_isError(zlen))
			return td_fail(w, -EIO, "zstd: %s", ZSTD_getErrorName(zlen));
		put_le32(z, (uint32_t)zlen);
		put_le32(z + 4, (uint32_t)len);
		r = td_write(w, z, 8 + zlen);
	}
	return r;
}

/* BUFFER: section offset, name ("" is the top instance), clock, page
 * size, CPUs, then per CPU its id, data offset and data size. */
static int buffer_option(struct td_writer *w, uint64_t section, const char *clock_name,
			 const struct td_cpu_out *out, uint32_t n)
{
	struct vmt_buf b = { 0 };
	int r = buf_reserve(&b, 8 + 1 + strlen(clock_name) + 1 + 8 + (size_t)n * 20);

	if (r < 0)	/* reserved: the appends below cannot fail */
		return r;
	buf_put_le64(&b, section);
	buf_put_str(&b, "");
	buf_put_str(&b, clock_name);
	buf_put_le32(&b, w->page_size);
	buf_put_le32(&b, n);
	for (uint32_t i = 0; i < n; i++) {
		buf_put_le32(&b, out[i].cpu);
		buf_put_le64(&b, out[i].offset);
		buf_put_le64(&b, out[i].size);
	}
	r = td_opt(w, VMT_TD_BUFFER, b.data, b.len);
	buf_free(&b);
	return r;
}

static int cpu_pages_check(struct td_writer *w, const struct vmt_tracedat_cpu *c, uint32_t ps)
{
	if (c->npages && !c->pages)
		return td_fail(w, -EINVAL, "cpu %u: no pages array", c->cpu);
	if (c->npages > UINT64_MAX / ps)
		return td_fail(w, -EFBIG, "cpu %u: too many pages", c->cpu);
	for (uint64_t k = 0; k < c->npages; k++)
		if (!c->pages[k])
			return td_fail(w, -EINVAL, "cpu %u: page %llu is NULL", c->cpu,
				       (unsigned long long)k);
	return 0;
}

/*
 * The flyrecord section of the top instance and its BUFFER option. Each
 * CPU starts page-aligned, as trace-cmd mmaps raw pages; a CPU without
 * pages is listed with size 0, which the reader takes as empty.
 */
static int flyrecord_write(struct td_writer *w, const struct vmt_tracedat_input *in,
			   const char *clock_name)
{
	_cleanup_free_ struct td_cpu_out *out = calloc(in->nr_cpus ? in->nr_cpus : 1, sizeof(*out));
	uint64_t start = w->off;
	uint32_t desc;
	int r;

	if (!out)
		return -ENOMEM;
	/* size unknown until the data is down: patched below */
	r = td_string(w, "buffer flyrecord", &desc);
	if (r >= 0)
		r = td_section_header(w, VMT_TD_BUFFER, w->zc ? VMT_TD_SEC_COMPRESSED : 0, desc, 0);
	for (uint32_t i = 0; r >= 0 && i < in->nr_cpus; i++) {
		struct vmt_tracedat_cpu c = in->cpus[i];

		if (in->load) {
			r = in->load(in->load_arg, i, &c.pages, &c.npages);
			if (r >= 0)
				r = cpu_pages_check(w, &c, w->page_size);
		}
		if (r >= 0)
			r = td_pad(w, w->page_size);
		out[i] = (struct td_cpu_out){ .cpu = c.cpu, .offset = w->off };
		if (r >= 0 && c.npages)
			r = w->zc ? cpu_write_zstd(w, &c) : cpu_write_raw(w, &c);
		out[i].size = w->off - out[i].offset;
		if (in->load)
			in->unload(in->load_arg, i);
	}
	if (r >= 0)
		r = td_patch_le64(w, start + 8, w->off - start - 16);
	return r < 0 ? r : buffer_option(w, start, clock_name, out, in->nr_cpus);
}

/*
 * TIME_SHIFT as trace-cmd 3.1 reads it (tsync_cpu_offsets_load): u64 peer
 * trace id, u32 flags (1: interpolate), u32 CPU count, then per CPU: u32
 * count, count x s64 times, count x s64 offsets, count x s64 scalings;
 * then per CPU count x s64 fraction bits. trace-cmd ignores a CPU's
 * scaling when it has one sample, so a lone point is written twice.
 */
static int time_shift_option(struct td_writer *w, const struct vmt_tracedat_shift *sh)
{
	struct vmt_buf b = { 0 };
	uint32_t *count = calloc(sh->ncpus ? sh->ncpus : 1, sizeof(*count));
	int r = count ? 0 : -ENOMEM;

	for (uint32_t c = 0; r >= 0 && c < sh->ncpus; c++) {
		for (uint32_t i = 0; i < sh->npoints; i++)
			count[c] += sh->points[i].cpu == VMT_SYNC_ALL_CPUS || sh->points[i].cpu == c;
		/* the reader indexes a CPU's first sample without checking */
		if (!count[c])
			r = td_fail(w, -EINVAL, "time shift: no clock point for cpu %u", c);
	}
	if (r >= 0)
		r = buf_put_le64(&b, sh->peer_trace_id);
	if (r >= 0)
		r = buf_put_le32(&b, 1);
	if (r >= 0)
		r = buf_put_le32(&b, sh->ncpus);
	for (uint32_t c = 0; r >= 0 && c < sh->ncpus; c++) {
		uint32_t n = count[c] == 1 ? 2 : count[c];
		r = buf_put_le32(&b, n);
		for (int field = 0; r >= 0 && field < 3; field++) {
			for (uint32_t i = 0; r >= 0 && i < sh->npoints; i++) {
				const struct vmt_sync_point *p = &sh->points[i];
				uint64_t v;
				if (p->cpu != VMT_SYNC_ALL_CPUS && p->cpu != c)
					continue;
				v = field == 0 ? p->guest_ts : field == 1 ? (uint64_t)p->offset : 1;
				r = buf_put_le64(&b, v);
				/* the copy of a lone point, a second later */
				if (r >= 0 && count[c] == 1)
					r = buf_put_le64(&b, field == 0 ? v + 1000000000ull : v);
			}
		}
	}
	for (uint32_t c = 0; r >= 0 && c < sh->ncpus; c++) {
		uint32_t n = count[c] == 1 ? 2 : count[c];
		for (uint32_t i = 0; r >= 0 && i < n; i++)
			r = buf_put_le64(&b, 0);
	}
	if (r >= 0)
		r = td_opt(w, VMT_TD_TIME_SHIFT, b.data, b.len);
	buf_free(&b);
	free(count);
	return r;
}

/* GUEST (trace_guest_load): name NUL, u64 trace id, u32 vCPUs, then per
 * vCPU u32 id and u32 host pid. */
static int guest_option(struct td_writer *w, const struct vmt_tracedat_guest *g)
{
	struct vmt_buf b = { 0 };
	int r = buf_put_str(&b, g->name);

	if (r >= 0)
		r = buf_put_le64(&b, g->trace_id);
	if (r >= 0)
		r = buf_put_le32(&b, g->nvcpus);
	for (uint32_t i = 0; r >= 0 && i < g->nvcpus; i++) {
		r = buf_put_le32(&b, i);
		if (r >= 0)
			r = buf_put_le32(&b, g->vcpu_tid[i]);
	}
	if (r >= 0)
		r = td_opt(w, VMT_TD_GUEST, b.data, b.len);
	buf_free(&b);
	return r;
}

/*
 * Options about the machine and the session, and for a host/guest merge
 * TIME_SHIFT in a guest's file and GUEST options in the host's.
 */
static int options_add(struct td_writer *w, const struct vmt_tracedat_input *in,
		       const struct vmt_buf *clocks)
{
	uint8_t b[4];
	int r;

	/* unknown: as many as the highest CPU given implies */
	put_le32(b, in->ncpus ? in->ncpus : in->nr_cpus ? in->cpus[in->nr_cpus - 1].cpu + 1 : 1);
	r = td_opt(w, VMT_TD_CPUCOUNT, b, sizeof(b));
	if (r >= 0)
		r = td_opt(w, VMT_TD_TRACECLOCK, clocks->data, clocks->len);
	if (r >= 0 && in->uname)
		r = td_opt_str(w, VMT_TD_UNAME, in->uname);
	if (r >= 0 && in->trace_id)
		r = td_opt_u64(w, VMT_TD_TRACEID, in->trace_id);
	if (r >= 0 && in->shift && in->shift->npoints)
		r = time_shift_option(w, in->shift);
	for (uint32_t i = 0; r >= 0 && i < in->nguests; i++)
		r = guest_option(w, &in->guests[i]);
	for (uint32_t i = 0; r >= 0 && i < in->nr_cpus; i++) {
		struct vmt_buf s = { 0 };
		char head[32];

		if (!in->cpus[i].stats)
			continue;
		/* as trace-cmd record saves it: a "CPU: N" line, then the stats file */
		snprintf(head, sizeof(head), "CPU: %u\n", in->cpus[i].cpu);
		r = buf_append(&s, head, strlen(head));
		if (r >= 0)
			r = buf_put_str(&s, in->cpus[i].stats);
		if (r >= 0)
			r = td_opt(w, VMT_TD_CPUSTAT, s.data, s.len);
		buf_free(&s);
	}
	return r;
}

static int input_check(struct td_writer *w, const struct vmt_tracedat_input *in)
{
	uint32_t ps = in->page_size;

	if (ps < 64 || ps > VMT_TD_PAGE_MAX || (ps & (ps - 1)))
		return td_fail(w, -EINVAL, "page size %u is not a power of two in [64, %u]", ps,
			       VMT_TD_PAGE_MAX);
	if (in->zstd_level < 0 || in->zstd_level > ZSTD_maxCLevel())
		return td_fail(w, -EINVAL, "zstd level %d out of range", in->zstd_level);
	if (in->clock && !clock_name_ok(in->clock, strlen(in->clock)))
		return td_fail(w, -EINVAL, "bad clock name");
	if (in->nr_cpus && !in->cpus)
		return td_fail(w, -EINVAL, "no cpus array");
	if (!in->meta)
		return td_fail(w, -EBADMSG, "metadata lacks events/header_page");
	if (in->shift && (in->shift->ncpus > VMT_TD_CPU_MAX || (in->shift->npoints && !in->shift->points)))
		return td_fail(w, -EINVAL, "bad time shift");
	for (uint32_t i = 0; i < in->nguests; i++)
		if (!in->guests[i].name || (in->guests[i].nvcpus && !in->guests[i].vcpu_tid) ||
		    in->guests[i].nvcpus > VMT_TD_CPU_MAX)
			return td_fail(w, -EINVAL, "bad guest %u", i);
	for (uint32_t i = 0; i < in->nr_cpus; i++) {
		const struct vmt_tracedat_cpu *c = &in->cpus[i];

		if (i && c->cpu <= in->cpus[i - 1].cpu)
			return td_fail(w, -EINVAL, "cpus not in ascending order");
		/* the reader sizes its tables by the highest CPU id */
		if (c->cpu >= (in->ncpus ? in->ncpus : VMT_TD_CPU_MAX))
			return td_fail(w, -EINVAL, "cpu %u out of range", c->cpu);
		if (!in->load) {
			int r = cpu_pages_check(w, c, ps);

			if (r < 0)
				return r;
		}
	}
	if (in->load && !in->unload)
		return td_fail(w, -EINVAL, "load without unload");
	return 0;
}

/* Magic, version, endianness, long size, page size, compression; then the
 * options offset, reserved at *opt_at. */
static int header_write(struct td_writer *w, uint8_t long_size, uint64_t *opt_at)
{
	static const char magic[] = "\x17\x08\x44" "tracing" "7";	/* and the version's NUL */
	const char *zname = w->zc ? "zstd" : "none", *zver = w->zc ? ZSTD_versionString() : "";
	size_t zn = strlen(zname) + 1, zv = strlen(zver) + 1, n = sizeof(magic);
	uint8_t h[128];

	if (n + 6 + zn + zv + 8 > sizeof(h))
		return td_fail(w, -EINVAL, "compressor version too long");
	memcpy(h, magic, n);
	h[n++] = 0;	/* little endian */
	h[n++] = long_size;
	put_le32(h + n, w->page_size);
	n += 4;
	memcpy(h + n, zname, zn);
	n += zn;
	memcpy(h + n, zver, zv);
	n += zv;
	*opt_at = w->off + n;
	put_le64(h + n, 0);
	return td_write(w, h, n + 8);
}

static int tracedat_emit(struct td_writer *w, const struct vmt_tracedat_input *in,
			 const struct td_meta *m)
{
	struct vmt_page_layout layout;
	struct vmt_buf clocks = { 0 };
	char chosen[VMT_TD_CLOCK_MAX];
	uint64_t opt_at = 0, opts, strings;
	uint32_t id;
	int r;

	/* the reader takes the kernel's long size from header_page too */
	if (page_layout_parse(&layout, (const char *)m->header_page.data, m->header_page.data_len,
			      in->page_size) < 0)
		return td_fail(w, -EBADMSG, "events/header_page does not describe a %u-byte page",
			       in->page_size);
	r = clock_text(&m->clock, in->clock, &clocks, chosen);
	if (r >= 0)
		r = header_write(w, (uint8_t)layout.commit_size, &opt_at);
	if (r >= 0)
		r = metadata_write(w, m);
	if (r >= 0)
		r = options_add(w, in, &clocks);
	if (r >= 0)
		r = flyrecord_write(w, in, chosen);
	buf_free(&clocks);
	if (r < 0)
		return r;

	r = buf_put_le16(&w->opts, VMT_TD_DONE);
	if (r >= 0)
		r = buf_put_le32(&w->opts, 8);
	if (r >= 0)
		r = buf_put_le64(&w->opts, 0);	/* no further options section */
	if (r >= 0)
		r = td_section_named(w, VMT_TD_DONE, "options", &w->opts, false, &opts);
	/* the section's own description must be inside it */
	if (r >= 0)
		r = td_string(w, "strings", &id);
	if (r >= 0)
		r = td_section(w, VMT_TD_STRINGS, id, &w->strings, true, &strings);
	return r < 0 ? r : td_patch_le64(w, opt_at, opts);
}

int tracedat_write(int fd, const struct vmt_tracedat_input *in, char *why, size_t why_len)
{
	struct td_writer w = { .fd = fd, .why = why, .why_len = why_len };
	struct td_meta m = { 0 };
	int r;

	if (why && why_len)
		why[0] = 0;
	r = input_check(&w, in);
	if (r < 0)
		return r;
	w.page_size = in->page_size;
	r = meta_collect(&w, in->meta, in->meta_len, &m);
	if (r < 0)
		goto out;
	/* offsets are patched in place: the file must be seekable */
	w.base = lseek(fd, 0, SEEK_CUR);
	if (w.base < 0) {
		r = td_fail(&w, -errno, "output is not seekable");
		goto out;
	}
	if (in->zstd_level > 0) {
		w.zc = ZSTD_createCCtx();
		if (!w.zc) {
			r = -ENOMEM;
			goto out;
		}
		ZSTD_CCtx_setParameter(w.zc, ZSTD_c_compressionLevel, in->zstd_level);
	}
	r = tracedat_emit(&w, in, &m);
out:
	ZSTD_freeCCtx(w.zc);
	buf_free(&w.strings);
	buf_free(&w.opts);
	free(m.fmt);
	return r;
}
