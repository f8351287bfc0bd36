/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>
#include <signal.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <traceevent/kbuffer.h>

#include "decode.h"
#include "meta.h"
#include "util.h"

#define DEC_IDS 65536
/* Room after an event's copy: any __data_loc/__rel_loc offset and length are 16-bit. */
#define DEC_SCRATCH (2 * 65536 + 64)

struct vmt_decoder {
	struct tep_handle *tep;
	struct vmt_page_layout layout;
	char **texts;		/* NUL-terminated copies libtraceevent was given */
	size_t ntexts;
	uint8_t *scratch;	/* page_size + DEC_SCRATCH, zero past scratch_used */
	size_t scratch_used;
	struct tep_event **events;	/* DEC_IDS, by id */
	int32_t *extent;	/* DEC_IDS: end of the fixed fields, -1 not computed,
				 * DEC_BAD_EXTENT a field outside any record */
};

#define DEC_BAD_EXTENT INT32_MAX

/* libtraceevent's parsers cut their input with strtok_r: give them copies. */
static char *dec_text(struct vmt_decoder *d, const struct vmt_meta_entry *e)
{
	char **t = realloc(d->texts, (d->ntexts + 1) * sizeof(*t));
	char *s;

	if (!t)
		return NULL;
	d->texts = t;
	s = malloc((size_t)e->data_len + 1);
	if (!s)
		return NULL;
	memcpy(s, e->data, e->data_len);
	s[e->data_len] = '\0';
	d->texts[d->ntexts++] = s;
	return s;
}

static bool entry_is(const struct vmt_meta_entry *e, const char *name)
{
	return e->name_len == strlen(name) && !memcmp(e->name, name, e->name_len);
}

/* "events/<system>/<event>/format": the system into sys. */
static bool format_system(const struct vmt_meta_entry *e, char *sys, size_t n)
{
	const char *p = e->name, *end = e->name + e->name_len, *slash;
	size_t len;

	if (e->name_len < sizeof("events/s/e/format") - 1 || memcmp(p, "events/", 7) ||
	    memcmp(end - 7, "/format", 7))
		return false;
	p += 7;
	slash = memchr(p, '/', (size_t)(end - 7 - p));
	if (!slash || slash == p || slash + 1 >= end - 7 || memchr(slash + 1, '/', (size_t)(end - 7 - slash - 1)))
		return false;
	len = (size_t)(slash - p);
	if (len >= n)
		return false;
	memcpy(sys, p, len);
	sys[len] = '\0';
	return true;
}

/*
 * Hand the bundle's entries to libtraceevent. skip (one flag per entry, by
 * its place in the bundle; may be NULL) leaves some out; with progress_fd
 * >= 0 the place of each entry is written there before it is parsed.
 */
static int dec_load(struct vmt_decoder *d, const uint8_t *bundle, size_t len,
		    struct vmt_decode_info *info, const bool *skip, int progress_fd,
		    const char **why)
{
	struct vmt_meta_entry e;
	size_t pos = 0;
	uint32_t k = 0;
	int r;

	for (; (r = meta_next(bundle, len, &pos, &e)) > 0; k++) {
		char sys[VMT_META_NAME_MAX + 1], *text;
		bool is_format = format_system(&e, sys, sizeof(sys));

		if (!is_format && !entry_is(&e, "events/header_page") && !entry_is(&e, "kallsyms") &&
		    !entry_is(&e, "printk_formats") && !entry_is(&e, "saved_cmdlines"))
			continue;
		if (skip && skip[k]) {
			if (entry_is(&e, "events/header_page")) {
				*why = "events/header_page crashes libtraceevent";
				return -EBADMSG;
			}
			info->formats += is_format;
			info->formats_failed += is_format;
			continue;
		}
		text = dec_text(d, &e);
		if (!text)
			return -ENOMEM;
		if (progress_fd >= 0 && write(progress_fd, &k, sizeof(k)) != sizeof(k))
			return -EIO;
		if (is_format) {
			info->formats++;
			if (tep_parse_event(d->tep, text, e.data_len, sys) != 0)
				info->formats_failed++;
		} else if (entry_is(&e, "events/header_page")) {
			if (tep_parse_header_page(d->tep, text, e.data_len, (int)d->layout.commit_size) < 0) {
				*why = "events/header_page does not parse";
				return -EBADMSG;
			}
		} else if (entry_is(&e, "kallsyms")) {
			info->kallsyms = tep_parse_kallsyms(d->tep, text) == 0;
		} else if (entry_is(&e, "printk_formats")) {
			info->printk = tep_parse_printk_formats(d->tep, text) == 0;
		} else {
			info->cmdlines = tep_parse_saved_cmdlines(d->tep, text) == 0;
		}
	}
	if (r < 0) {
		*why = "metadata bundle is malformed";
		return -EBADMSG;
	}
	return 0;
}

static struct tep_handle *dec_tep(const struct vmt_page_layout *layout)
{
	struct tep_handle *tep = tep_alloc();

	if (!tep)
		return NULL;
	/* a kernel's formats always have a few functions libtraceevent lacks */
	tep_set_loglevel(TEP_LOG_NONE);
	tep_set_long_size(tep, (int)layout->commit_size);
	tep_set_page_size(tep, (int)layout->page_size);
	tep_set_file_bigendian(tep, TEP_LITTLE_ENDIAN);
	tep_set_local_bigendian(tep, TEP_LITTLE_ENDIAN);
	return tep;
}

#define DEC_PROBE_MAX 32	/* entries that crash the parser: past that, give up */
#define DEC_PROBE_END UINT32_MAX

/*
 * libtraceevent parses texts a guest wrote, and some crash it (1.7: a
 * print fmt cut short dereferences NULL). So the bundle is parsed first in
 * a child, which says which entry it starts on a pipe: a child that dies
 * names the entry that killed it, that entry is left out (skip[], counted
 * as a format that failed) and a new child goes over the rest. 0, or
 * -errno when no child could run (the caller parses in-process then).
 */
static int dec_probe(const uint8_t *bundle, size_t len, const struct vmt_page_layout *layout,
		     bool *skip, uint32_t *crashed)
{
	for (int tries = 0; tries <= DEC_PROBE_MAX; tries++) {
		uint32_t k, last = DEC_PROBE_END;
		bool done = false;
		int p[2], st;
		pid_t pid;

		if (pipe2(p, O_CLOEXEC) < 0)
			return -errno;
		pid = fork();
		if (pid < 0) {
			close(p[0]);
			close(p[1]);
			return -errno;
		}
		if (pid == 0) {
			struct vmt_decoder c = { .layout = *layout };
			struct vmt_decode_info ci = { 0 };
			const char *why;
			int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
			static const int sigs[] = { SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL };

			/* die of the fault itself: no sanitizer or fuzzer report */
			for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
				signal(sigs[i], SIG_DFL);
			if (null >= 0)
				dup2(null, 2);
			close(p[0]);
			c.tep = dec_tep(layout);
			if (!c.tep)
				_exit(2);
			dec_load(&c, bundle, len, &ci, skip, p[1], &why);
			k = DEC_PROBE_END;
			_exit(write(p[1], &k, sizeof(k)) == sizeof(k) ? 0 : 3);
		}
		close(p[1]);
		while (read(p[0], &k, sizeof(k)) == sizeof(k)) {
			if (k == DEC_PROBE_END)
				done = true;
			else
				last = k;
		}
		close(p[0]);
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		if (done || last == DEC_PROBE_END)
			return 0;
		skip[last] = true;
		(*crashed)++;
	}
	return 0;
}

int decode_open(struct vmt_decoder **out, const uint8_t *bundle, size_t len,
		const struct vmt_page_layout *layout, struct vmt_decode_info *info,
		const char **why)
{
	struct vmt_decoder *d;
	int r;

	*out = NULL;
	memset(info, 0, sizeof(*info));
	if (meta_validate(bundle, len, why) < 0)
		return -EBADMSG;
	/* kbuffer knows only the kernel's own layout; page_scan() must walk the same */
	if ((layout->commit_size != 4 && layout->commit_size != 8) || layout->ts_offset != 0 ||
	    layout->commit_offset != 8 || layout->data_offset != 8 + layout->commit_size) {
		*why = "header_page describes a page layout other than the kernel's";
		return -EBADMSG;
	}
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->layout = *layout;
	d->tep = dec_tep(layout);
	d->scratch = calloc(1, (size_t)layout->page_size + DEC_SCRATCH);
	d->events = calloc(DEC_IDS, sizeof(*d->events));
	d->extent = malloc(DEC_IDS * sizeof(*d->extent));
	if (!d->tep || !d->scratch || !d->events || !d->extent) {
		decode_close(d);
		return -ENOMEM;
	}
	memset(d->extent, 0xff, DEC_IDS * sizeof(*d->extent));
	{
		struct vmt_meta_entry e;
		size_t pos = 0, n = 0;
		bool *skip;

		while (meta_next(bundle, len, &pos, &e) > 0)
			n++;
		skip = calloc(n + 1, sizeof(*skip));
		if (!skip) {
			decode_close(d);
			return -ENOMEM;
		}
		dec_probe(bundle, len, layout, skip, &info->formats_crashed);
		r = dec_load(d, bundle, len, info, skip, -1, why);
		free(skip);
	}
	if (r < 0) {
		decode_close(d);
		return r;
	}
	*out = d;
	return 0;
}

void decode_close(struct vmt_decoder *d)
{
	if (!d)
		return;
	if (d->tep)
		tep_free(d->tep);
	for (size_t i = 0; i < d->ntexts; i++)
		free(d->texts[i]);
	free(d->texts);
	free(d->scratch);
	free(d->events);
	free(d->extent);
	free(d);
}

struct tep_handle *decode_tep(struct vmt_decoder *d)
{
	return d->tep;
}

int decode_cursor_init(struct vmt_decode_cursor *c, struct vmt_decoder *d)
{
	memset(c, 0, sizeof(*c));
	c->d = d;
	c->kb = kbuffer_alloc(d->layout.commit_size == 4 ? KBUFFER_LSIZE_4 : KBUFFER_LSIZE_8,
			      KBUFFER_ENDIAN_LITTLE);
	return c->kb ? 0 : -ENOMEM;
}

void decode_cursor_free(struct vmt_decode_cursor *c)
{
	if (c->kb)
		kbuffer_free(c->kb);
	c->kb = NULL;
}

int decode_page_load(struct vmt_decode_cursor *c, const uint8_t *page, const char **why)
{
	const struct vmt_page_layout *l = &c->d->layout;
	struct vmt_page_info info;

	c->page = NULL;
	if (page_scan(l, page, &info) < 0) {
		*why = "an event lies outside the page's commit area";
		return -EBADMSG;
	}
	/* kbuffer only reads; its prototype is not const */
	if (kbuffer_load_subbuffer(c->kb, (void *)page) < 0) {
		*why = "kbuffer refuses the page header";
		return -EBADMSG;
	}
	c->page = page;
	c->end = page + l->data_offset + info.commit;
	c->started = false;
	c->missed = kbuffer_missed_events(c->kb);
	return 0;
}

int decode_page_next(struct vmt_decode_cursor *c, struct vmt_raw_event *ev)
{
	unsigned long long ts;
	const uint8_t *p;
	int size;

	if (!c->page)
		return 0;
	p = c->started ? kbuffer_next_event(c->kb, &ts) : kbuffer_read_event(c->kb, &ts);
	c->started = true;
	if (!p) {
		c->page = NULL;
		return 0;
	}
	size = kbuffer_event_size(c->kb);
	if (size < 0 || p < c->page + c->d->layout.data_offset || p > c->end ||
	    (size_t)size > (size_t)(c->end - p)) {
		c->page = NULL;
		return -EBADMSG;
	}
	ev->ts = ts;
	ev->data = p;
	ev->size = (uint32_t)size;
	return 1;
}

static void stream_bad_page(struct vmt_decode_stream *s, const char *why)
{
	s->bad_pages++;
	fprintf(stderr, "vmtracectl: %s cpu%u: page %" PRIu64 " of %" PRIu64 " is corrupt (%s); skipped\n",
		s->label, s->cpu, s->next_page, s->npages, why);
}

bool decode_stream_next(struct vmt_decode_stream *s)
{
	for (;;) {
		int r = decode_page_next(&s->cur, &s->ev);
		const char *why;

		if (r > 0) {
			s->ts = s->to_line ? s->to_line(s->arg, s->cpu, s->ev.ts) : s->ev.ts;
			return true;
		}
		if (r < 0)
			stream_bad_page(s, "an event runs past the commit");
		if (s->next_page >= s->npages)
			return false;
		if (decode_page_load(&s->cur, s->pages[s->next_page], &why) < 0)
			stream_bad_page(s, why);
		else if (s->cur.missed)
			s->missed = s->cur.missed;
		s->next_page++;
	}
}

static bool before(const struct vmt_decode_stream *a, const struct vmt_decode_stream *b)
{
	return a->ts != b->ts ? a->ts < b->ts : a->order < b->order;
}

static void merge_down(struct vmt_decode_merge *m, uint32_t i)
{
	for (;;) {
		uint32_t l = 2 * i + 1, k = i;
		struct vmt_decode_stream *t;

		if (l < m->n && before(m->heap[l], m->heap[k]))
			k = l;
		if (l + 1 < m->n && before(m->heap[l + 1], m->heap[k]))
			k = l + 1;
		if (k == i)
			return;
		t = m->heap[i];
		m->heap[i] = m->heap[k];
		m->heap[k] = t;
		i = k;
	}
}

int decode_merge_init(struct vmt_decode_merge *m, struct vmt_decode_stream *streams, uint32_t n)
{
	m->n = 0;
	m->heap = calloc(n ? n : 1, sizeof(*m->heap));
	if (!m->heap)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		if (decode_stream_next(&streams[i]))
			m->heap[m->n++] = &streams[i];
	for (uint32_t i = m->n; i-- > 0;)
		merge_down(m, i);
	return 0;
}

struct vmt_decode_stream *decode_merge_top(const struct vmt_decode_merge *m)
{
	return m->n ? m->heap[0] : NULL;
}

void decode_merge_pop(struct vmt_decode_merge *m)
{
	if (!m->n)
		return;
	if (!decode_stream_next(m->heap[0]))
		m->heap[0] = m->heap[--m->n];
	merge_down(m, 0);
}

void decode_merge_free(struct vmt_decode_merge *m)
{
	free(m->heap);
	m->heap = NULL;
	m->n = 0;
}

int decode_event_id(const struct vmt_raw_event *ev)
{
	/* common_type: u16 at 0 in every kernel's common fields */
	return ev->size >= 2 ? get_le16(ev->data) : -1;
}

/*
 * Where the fixed fields of a format end; DEC_BAD_EXTENT if one lies
 * outside any record a page can hold (a negative offset or size, or an end
 * past the page: a guest wrote that format, and libtraceevent would read
 * there without asking).
 */
static int32_t fields_end(const struct tep_format_field *f, int32_t end, uint32_t page_size)
{
	for (; f; f = f->next) {
		int64_t e = (int64_t)f->offset + (int64_t)f->size;

		if (f->offset < 0 || f->size < 0 || e > (int64_t)page_size)
			return DEC_BAD_EXTENT;
		if (e > end)
			end = (int32_t)e;
	}
	return end;
}

struct tep_event *decode_find(struct vmt_decoder *d, int id)
{
	if (id < 0 || id >= DEC_IDS)
		return NULL;
	if (d->extent[id] < 0) {
		struct tep_event *e = tep_find_event(d->tep, id);
		int32_t end = 0;

		d->events[id] = e;
		if (e)
			end = fields_end(e->format.common_fields, 0, d->layout.page_size);
		if (e && end != DEC_BAD_EXTENT)
			end = fields_end(e->format.fields, end, d->layout.page_size);
		d->extent[id] = end;
	}
	return d->events[id];
}

/*
 * A dynamic field libtraceevent reads other than as the u32 it is (report
 * refuses every record of such a format, dynamic_fields_inside()).
 */
static bool dynamic_field_odd(const struct tep_format_field *f)
{
	for (; f; f = f->next)
		if ((f->flags & TEP_FIELD_IS_DYNAMIC) && f->size != 4)
			return true;
	return false;
}

int decode_unsafe_entries(const uint8_t *bundle, size_t len, const struct vmt_page_layout *layout,
			  bool *unsafe, struct vmt_decode_unsafe *u, const char **why)
{
	struct vmt_decoder d = { .layout = *layout };
	struct vmt_meta_entry e;
	size_t pos = 0, n = 0;
	uint32_t k = 0;
	int r = 0;

	memset(u, 0, sizeof(*u));
	if (meta_validate(bundle, len, why) < 0)
		return -EBADMSG;
	while (meta_next(bundle, len, &pos, &e) > 0)
		n++;
	memset(unsafe, 0, n * sizeof(*unsafe));
	dec_probe(bundle, len, layout, unsafe, &u->crashed);
	d.tep = dec_tep(layout);
	if (!d.tep)
		return -ENOMEM;
	for (pos = 0; r == 0 && meta_next(bundle, len, &pos, &e) > 0; k++) {
		char sys[VMT_META_NAME_MAX + 1], *text;
		struct tep_event *ev = NULL;
		enum tep_errno te;

		if (unsafe[k]) {
			if (entry_is(&e, "events/header_page")) {
				*why = "events/header_page crashes libtraceevent";
				r = -EBADMSG;
			}
			continue;
		}
		if (!format_system(&e, sys, sizeof(sys)))
			continue;
		text = dec_text(&d, &e);
		if (!text) {
			r = -ENOMEM;
			break;
		}
		/* one that fails to parse is still kept, flagged, with the fields it had */
		te = tep_parse_format(d.tep, &ev, text, e.data_len, sys);
		if (te == TEP_ERRNO__MEM_ALLOC_FAILED) {
			r = -ENOMEM;
			break;
		}
		if (ev && (fields_end(ev->format.common_fields, 0, layout->page_size) == DEC_BAD_EXTENT ||
			   fields_end(ev->format.fields, 0, layout->page_size) == DEC_BAD_EXTENT ||
			   dynamic_field_odd(ev->format.common_fields) ||
			   dynamic_field_odd(ev->format.fields))) {
			unsafe[k] = true;
			u->outside++;
		}
	}
	tep_free(d.tep);
	for (size_t i = 0; i < d.ntexts; i++)
		free(d.texts[i]);
	free(d.texts);
	return r;
}

/* Every __data_loc / __rel_loc field of the record points inside it. */
static bool dynamic_fields_inside(const struct tep_format_field *f, const uint8_t *data, size_t n)
{
	for (; f; f = f->next) {
		uint32_t v, off, len;

		if (!(f->flags & TEP_FIELD_IS_DYNAMIC))
			continue;
		if (f->size != 4)
			return false;	/* libtraceevent would read 4 bytes anyway */
		v = get_le32(data + f->offset);	/* inside: the extent was checked */
		off = v & 0xffff;
		len = v >> 16;
		if (f->flags & TEP_FIELD_IS_RELATIVE)
			off += (uint32_t)(f->offset + f->size);
		if ((uint64_t)off + len > n)
			return false;
	}
	return true;
}

struct tep_event *decode_record(struct vmt_decoder *d, const struct vmt_raw_event *ev, int cpu,
				struct tep_record *rec, enum vmt_decode_check *check)
{
	int id = decode_event_id(ev);
	struct tep_event *e = decode_find(d, id);
	size_t n = VMT_MIN((size_t)ev->size, (size_t)d->layout.page_size);

	memcpy(d->scratch, ev->data, n);
	if (d->scratch_used > n)
		memset(d->scratch + n, 0, d->scratch_used - n);
	d->scratch_used = n;
	memset(rec, 0, sizeof(*rec));
	rec->ts = ev->ts;
	rec->size = (int)n;
	rec->record_size = (int)n;
	rec->data = d->scratch;
	rec->cpu = cpu;
	rec->locked = 1;
	*check = DECODE_OK;
	if (!e)
		return NULL;
	if (d->extent[id] == DEC_BAD_EXTENT)
		*check = DECODE_BAD_FORMAT;
	else if (d->extent[id] > (int32_t)n)
		*check = DECODE_SHORT;
	else if (!dynamic_fields_inside(e->format.common_fields, d->scratch, n) ||
		 !dynamic_fields_inside(e->format.fields, d->scratch, n))
		*check = DECODE_BAD_DYNAMIC;
	return e;
}

int decode_parse_cpus(const char *s, bool *cpus, unsigned ncpus)
{
	if (!*s)
		return -EINVAL;
	while (*s) {
		char *end;
		unsigned long a, b;

		if (*s < '0' || *s > '9')
			return -EINVAL;
		a = b = strtoul(s, &end, 10);
		if (a >= ncpus)
			return -EINVAL;
		s = end;
		if (*s == '-') {
			if (s[1] < '0' || s[1] > '9')
				return -EINVAL;
			b = strtoul(++s, &end, 10);
			if (b >= ncpus || b < a)
				return -EINVAL;
			s = end;
		}
		for (unsigned long c = a; c <= b; c++)
			cpus[c] = true;
		if (*s == ',' && s[1])
			s++;
		else if (*s)
			return -EINVAL;
	}
	return 0;
}

int decode_parse_seconds(const char *s, uint64_t *ns)
{
	uint64_t sec = 0, frac = 0, scale = 100000000ull;
	const char *p = s;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (sec > (UINT64_MAX / 1000000000ull - 9) / 10)
			return -ERANGE;
		sec = sec * 10 + (uint64_t)(*p - '0');
	}
	if (*p == '.')
		for (p++; *p >= '0' && *p <= '9'; p++, scale /= 10)
			frac += scale * (uint64_t)(*p - '0');
	if (*p)
		return -EINVAL;
	*ns = sec * 1000000000ull + frac;
	return 0;
}

bool decode_event_matches(const struct tep_event *e, const char *const *patterns, unsigned n)
{
	const char *name = e->name ? e->name : "";
	char full[512];

	snprintf(full, sizeof(full), "%s:%s", e->system ? e->system : "", name);
	for (unsigned i = 0; i < n; i++)
		if (!fnmatch(patterns[i], strchr(patterns[i], ':') ? full : name, 0))
			return true;
	return false;
}
