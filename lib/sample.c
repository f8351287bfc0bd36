/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#include "meta.h"
#include "sample-int.h"
#include "sample.h"
#include "tcode.h"
#include "util.h"
#include "tlv.h"
#include "vfile.h"

/* Record tags, docs/FORMAT.md. Unknown tags are skipped by readers. */
#define TAG_INFO_TRIGGER 0x10
#define TAG_CPU_GUEST_STATS 0x20
/* Bounds on the small sections: far above what a writer produces. */
#define SAMPLE_INFO_MAX (1u << 20)
#define SAMPLE_CPU_MAX (64u << 10)
#define SAMPLE_CLOCK_MAX (256u << 10)	/* 4096 points of 40 bytes, and the rest */

static const struct vmt_tlv_field info_fields[] = {
	VMT_TLV_FIELD(0x01, STR, struct vmt_sample, guest),
	VMT_TLV_FIELD(0x02, STR, struct vmt_sample, host),
	VMT_TLV_FIELD(0x03, U32, struct vmt_sample, aux_version),
	VMT_TLV_FIELD(0x04, U64, struct vmt_sample, aux_id),
	VMT_TLV_FIELD(0x05, U64, struct vmt_sample, created_ns),
	VMT_TLV_FIELD(0x06, U64, struct vmt_sample, dump_id),
	VMT_TLV_FIELD(0x07, U32, struct vmt_sample, page_size),
	VMT_TLV_FIELD(0x08, U32, struct vmt_sample, ncpus),
	VMT_TLV_FIELD(0x09, U64, struct vmt_sample, ctl_rejected_bytes),
	VMT_TLV_FIELD(0x0a, U64, struct vmt_sample, ctl_rejected_msgs),
	VMT_TLV_FIELD(0x0b, U64, struct vmt_sample, flush_timeouts),
	VMT_TLV_FIELD(0x0c, U64, struct vmt_sample, triggers_omitted),
};

/* Optional INFO records, written only when they say something. */
static const struct vmt_tlv_field info_opt_fields[] = {
	VMT_TLV_FIELD(0x0d, U32, struct vmt_sample, recovered_lifetimes),
	VMT_TLV_FIELD(0x0e, U64, struct vmt_sample, window_since_ns),
};

static const struct vmt_tlv_field trigger_fields[] = {
	VMT_TLV_FIELD(0x01, U32, struct vmt_trigger, kind),
	VMT_TLV_FIELD(0x02, U32, struct vmt_trigger, pid),
	VMT_TLV_FIELD(0x03, U64, struct vmt_trigger, time_ns),
	VMT_TLV_FIELD(0x04, U64, struct vmt_trigger, value),
	VMT_TLV_FIELD(0x05, U64, struct vmt_trigger, threshold),
	VMT_TLV_FIELD(0x06, STR, struct vmt_trigger, reason),
};

static const struct vmt_tlv_field cpu_fields[] = {
	VMT_TLV_FIELD(0x01, U32, struct vmt_sample_cpu, cpu),
	VMT_TLV_FIELD(0x02, U32, struct vmt_sample_cpu, npages),
	VMT_TLV_FIELD(0x03, U64, struct vmt_sample_cpu, first_seq),
	VMT_TLV_FIELD(0x04, U64, struct vmt_sample_cpu, first_ts),
	VMT_TLV_FIELD(0x05, U64, struct vmt_sample_cpu, last_ts),
	VMT_TLV_FIELD(0x06, U64, struct vmt_sample_cpu, events),
	VMT_TLV_FIELD(0x10, U64, struct vmt_sample_cpu, counters.bytes_in),
	VMT_TLV_FIELD(0x11, U64, struct vmt_sample_cpu, counters.pages_in),
	VMT_TLV_FIELD(0x12, U64, struct vmt_sample_cpu, counters.pages_overwritten),
	VMT_TLV_FIELD(0x13, U64, struct vmt_sample_cpu, counters.pages_guest_lost),
	VMT_TLV_FIELD(0x14, U64, struct vmt_sample_cpu, counters.events_guest_lost),
	VMT_TLV_FIELD(0x15, U64, struct vmt_sample_cpu, counters.pages_rejected),
	VMT_TLV_FIELD(0x16, U64, struct vmt_sample_cpu, counters.bytes_rejected),
	VMT_TLV_FIELD(0x17, U64, struct vmt_sample_cpu, counters.ts_backwards),
	VMT_TLV_FIELD(0x18, U64, struct vmt_sample_cpu, counters.events_in),
};

/* Version 2's CPU records, written in every version 2 sample and in no
 * version 1 sample; optional to readers (0 when absent). */
static const struct vmt_tlv_field cpu_v2_fields[] = {
	VMT_TLV_FIELD(0x07, U32, struct vmt_sample_cpu, frame_pages),
	VMT_TLV_FIELD(0x19, U64, struct vmt_sample_cpu, counters.frames_made),
	VMT_TLV_FIELD(0x1a, U64, struct vmt_sample_cpu, counters.pages_stored_raw),
	VMT_TLV_FIELD(0x1b, U64, struct vmt_sample_cpu, counters.frame_bytes_in),
	VMT_TLV_FIELD(0x1c, U64, struct vmt_sample_cpu, counters.frame_bytes_out),
	VMT_TLV_FIELD(0x1d, U64, struct vmt_sample_cpu, counters.frames_overwritten),
};

/* The guest stats record: these u64s in this order, as in FLUSHED. */
static const size_t stats_off[] = {
	offsetof(struct vmt_cpu_stats, bytes_sent),
	offsetof(struct vmt_cpu_stats, entries),
	offsetof(struct vmt_cpu_stats, overrun),
	offsetof(struct vmt_cpu_stats, commit_overrun),
	offsetof(struct vmt_cpu_stats, bytes),
	offsetof(struct vmt_cpu_stats, oldest_ts),
	offsetof(struct vmt_cpu_stats, now_ts),
	offsetof(struct vmt_cpu_stats, dropped),
	offsetof(struct vmt_cpu_stats, read),
	offsetof(struct vmt_cpu_stats, reserved),
};
_Static_assert(ARRAY_SIZE(stats_off) * 8 == VMT_CPU_STATS_SIZE, "stats record size");

const char *trigger_kind_name(uint32_t kind)
{
	switch (kind) {
#define X(n, v, t) case v: return t;
	VMT_TRIGGER_KINDS(X)
#undef X
	}
	return "unknown";
}

static bool page_size_ok(uint32_t ps)
{
	return ps >= 256 && ps <= VMT_MAX_PAGE_SIZE && !(ps & (ps - 1));
}

/* ---- writer ---------------------------------------------------------- */

/* Free text (from guests, or hostnames) must not cost a dump: make it printable. */
static void sanitize(char *s, size_t size)
{
	s[size - 1] = 0;
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e)
			*s = '?';
}

static int put_stats(struct vmt_buf *b, const struct vmt_cpu_stats *st)
{
	uint8_t rec[VMT_CPU_STATS_SIZE];

	for (size_t i = 0; i < ARRAY_SIZE(stats_off); i++)
		put_le64(rec + 8 * i, *(const uint64_t *)((const uint8_t *)st + stats_off[i]));
	return tlv_put(b, TAG_CPU_GUEST_STATS, rec, sizeof(rec));
}

static int build_info(struct vmt_buf *b, const struct vmt_sample *s)
{
	int r = tlv_put_fields(b, info_fields, ARRAY_SIZE(info_fields), s);

	if (r == 0 && s->recovered_lifetimes)
		r = tlv_put_fields(b, info_opt_fields, ARRAY_SIZE(info_opt_fields), s);
	for (uint32_t i = 0; r == 0 && i < s->ntriggers; i++) {
		struct vmt_buf t = { 0 };

		r = tlv_put_fields(&t, trigger_fields, ARRAY_SIZE(trigger_fields), &s->triggers[i]);
		if (r == 0)
			r = tlv_put(b, TAG_INFO_TRIGGER, t.data, (uint32_t)t.len);
		buf_free(&t);
	}
	return r;
}

/* Frames the reader would read: sound headers, their pages adding up. */
static int check_frames(const struct vmt_sample_cpu *c, uint32_t page_size)
{
	uint64_t pages = 0;
	uint8_t hb[VMT_FRAME_HDR_SIZE];
	struct vmt_frame_hdr h;

	if (c->nframes && !c->frames)
		return -EINVAL;
	for (uint32_t k = 0; k < c->nframes; k++) {
		const struct vmt_sample_frame *fr = &c->frames[k];

		frame_hdr_put(hb, &fr->h);
		if (frame_hdr_get(hb, sizeof(hb), &h, NULL, 0) < 0 ||
		    !fr->len || !fr->payload || fr->len > UINT32_MAX - VMT_FRAME_HDR_SIZE ||
		    (h.codec == VMT_FRAME_NONE && fr->len != (uint64_t)h.npages * page_size))
			return -EINVAL;
		pages += h.npages;
	}
	return pages == c->frame_pages && c->frame_pages <= c->npages ? 0 : -EINVAL;
}

/* The pages after the frames: from iov, or from pages. */
static int check_tail(const struct vmt_sample_cpu *c, uint64_t want)
{
	uint64_t have = 0;

	if (!c->niov)
		return !want || c->pages ? 0 : -EINVAL;
	if (!c->iov)
		return -EINVAL;
	for (uint32_t k = 0; k < c->niov; k++) {
		if (c->iov[k].len > want - have || (c->iov[k].len && !c->iov[k].base))
			return -EINVAL;
		have += c->iov[k].len;
	}
	return have == want ? 0 : -EINVAL;
}

static int check_for_write(const struct vmt_sample *s)
{
	uint64_t total = 0;
	const char *why;

	if (s && s->tasks_len && (!s->tasks || meta_tasks_validate(s->tasks, s->tasks_len, &why) < 0))
		return -EINVAL;
	if (!s || strnlen(s->guest, sizeof(s->guest)) == sizeof(s->guest) ||
	    !name_is_valid(s->guest) || !s->ncpus || s->ncpus > VMT_MAX_CPUS || !s->cpus ||
	    !page_size_ok(s->page_size) || s->ntriggers > VMT_SAMPLE_MAX_TRIGGERS)
		return -EINVAL;
	for (uint32_t i = 0; i < s->ncpus; i++) {
		const struct vmt_sample_cpu *c = &s->cpus[i];
		int r;

		if (c->cpu != i)
			return -EINVAL;
		r = check_frames(c, s->page_size);
		if (r == 0)
			r = check_tail(c, (uint64_t)(c->npages - c->frame_pages) * s->page_size);
		if (r < 0)
			return r;
		total += (uint64_t)c->npages * s->page_size;
	}
	return total > VMT_SAMPLE_MAX_PAGE_BYTES ? -EFBIG : 0;
}

/* Version 2 only for what version 1 cannot say, so that a sample without
 * frames stays what version 1 readers read. */
static uint32_t format_version(const struct vmt_sample *s)
{
	for (uint32_t i = 0; i < s->ncpus; i++) {
		const struct vmt_sample_counters *k = &s->cpus[i].counters;

		if (s->cpus[i].nframes || k->frames_made || k->pages_stored_raw || k->frame_bytes_in ||
		    k->frame_bytes_out || k->frames_overwritten)
			return VMT_SAMPLE_VERSION_FRAMES;
	}
	return VMT_SAMPLE_VERSION;
}

static int write_cpu_section(struct vmt_vfile_writer *w, struct vmt_buf *b, const struct vmt_sample_cpu *cpu,
			     uint32_t version)
{
	int r;

	b->len = 0;
	r = tlv_put_fields(b, cpu_fields, ARRAY_SIZE(cpu_fields), cpu);
	if (r == 0 && version >= VMT_SAMPLE_VERSION_FRAMES)
		r = tlv_put_fields(b, cpu_v2_fields, ARRAY_SIZE(cpu_v2_fields), cpu);
	if (r == 0 && cpu->have_guest_stats)
		r = put_stats(b, &cpu->guest);
	if (r == 0)
		r = vfile_write_section(w, VMT_SAMPLE_SECT_CPU, cpu->cpu, 0, b->data, b->len);
	return r;
}

/* A CPU's frames as they are (never compressed again), then its other pages. */
static int write_cpu_pages(struct vmt_vfile_writer *w, const struct vmt_sample_cpu *cpu,
			   uint32_t page_size, uint32_t pflags)
{
	struct vmt_iovec one = { cpu->pages, (size_t)(cpu->npages - cpu->frame_pages) * page_size };
	int r = 0;

	for (uint32_t k = 0; r == 0 && k < cpu->nframes; k++) {
		uint8_t hb[VMT_FRAME_HDR_SIZE];
		struct vmt_iovec v[2] = { { hb, sizeof(hb) },
					  { cpu->frames[k].payload, cpu->frames[k].len } };

		frame_hdr_put(hb, &cpu->frames[k].h);
		r = vfile_write_sectionv(w, VMT_SAMPLE_SECT_FRAME, cpu->cpu, 0, v, 2);
	}
	if (r < 0)
		return r;
	if (cpu->niov)
		return vfile_write_sectionv(w, VMT_SAMPLE_SECT_PAGES, cpu->cpu, pflags, cpu->iov, cpu->niov);
	return vfile_write_sectionv(w, VMT_SAMPLE_SECT_PAGES, cpu->cpu, pflags, &one, one.len ? 1 : 0);
}

int sample_write(int fd, const struct vmt_sample *s, int zstd_level, int zstd_workers)
{
	struct vmt_vfile_writer w = { .zstd_level = zstd_level, .zstd_workers = zstd_workers };
	struct vmt_buf b = { 0 };
	struct vmt_sample *c;
	uint32_t pflags = zstd_level > 0 ? VMT_VSECT_ZSTD : 0, version;
	int r;

	r = check_for_write(s);
	if (r < 0)
		return r;
	/* a copy to sanitize: s is the caller's */
	c = malloc(sizeof(*c));
	if (!c)
		return -ENOMEM;
	*c = *s;
	sanitize(c->host, sizeof(c->host));
	for (uint32_t i = 0; i < c->ntriggers; i++)
		sanitize(c->triggers[i].reason, sizeof(c->triggers[i].reason));
	r = build_info(&b, c);
	free(c);
	if (r < 0) {
		buf_free(&b);
		return r;
	}

	version = format_version(s);
	r = vfile_writer_start(&w, fd, VMT_SAMPLE_MAGIC, version, s->created_ns);
	if (r == 0)
		r = vfile_write_section(&w, VMT_SAMPLE_SECT_INFO, 0, 0, b.data, b.len);
	if (r == 0 && s->have_clock) {
		b.len = 0;
		r = clock_info_put(&b, &s->clock);
		if (r == 0)
			r = vfile_write_section(&w, VMT_SAMPLE_SECT_CLOCK, 0, 0, b.data, b.len);
	}
	if (r == 0 && s->tasks_len)
		r = vfile_write_section(&w, VMT_SAMPLE_SECT_TASKS, 0, 0, s->tasks, s->tasks_len);
	for (uint32_t i = 0; r == 0 && i < s->ncpus; i++)
		r = write_cpu_section(&w, &b, &s->cpus[i], version);
	for (uint32_t i = 0; r == 0 && i < s->ncpus; i++)
		r = write_cpu_pages(&w, &s->cpus[i], s->page_size, pflags);
	buf_free(&b);
	if (r < 0) {
		vfile_writer_finish(&w);
		return r;
	}
	return vfile_writer_finish(&w);
}

/* ---- reader ---------------------------------------------------------- */


static int parse_trigger(const uint8_t *p, size_t len, struct vmt_trigger *t, char *msg, size_t n)
{
	return tlv_parse_fields(p, len, trigger_fields, ARRAY_SIZE(trigger_fields), t, NULL, msg, n);
}

/* Triggers are records of their own inside INFO. */
static int info_other(const struct vmt_tlv *rec, void *obj, char *msg, size_t n)
{
	struct vmt_sample *s = obj;
	char m[160];
	int r;

	if (rec->tag != TAG_INFO_TRIGGER) {
		/* an optional record, or one for the table */
		uint64_t seen = 0;
		return tlv_get_field(rec, info_opt_fields, ARRAY_SIZE(info_opt_fields), s, &seen, msg, n);
	}
	if (s->ntriggers == VMT_SAMPLE_MAX_TRIGGERS) {
		snprintf(msg, n, "more than %d triggers", VMT_SAMPLE_MAX_TRIGGERS);
		return -EBADMSG;
	}
	r = parse_trigger(rec->data, rec->len, &s->triggers[s->ntriggers], m, sizeof(m));
	if (r < 0) {
		snprintf(msg, n, "trigger %u: %s", s->ntriggers, m);
		return r;
	}
	s->ntriggers++;
	return 1;
}

static int parse_info(const uint8_t *p, size_t len, struct vmt_sample *s, char *msg, size_t n)
{
	int r = tlv_parse_fields(p, len, info_fields, ARRAY_SIZE(info_fields), s, info_other, msg, n);

	if (r < 0)
		return r;
	if (!name_is_valid(s->guest)) {
		snprintf(msg, n, "bad guest name");
		return -EBADMSG;
	}
	if (!s->ncpus || s->ncpus > VMT_MAX_CPUS) {
		snprintf(msg, n, "ncpus %u not in 1..%d", s->ncpus, VMT_MAX_CPUS);
		return -EBADMSG;
	}
	if (!page_size_ok(s->page_size)) {
		snprintf(msg, n, "page size %u is not a power of two in 256..%d", s->page_size,
			 VMT_MAX_PAGE_SIZE);
		return -EBADMSG;
	}
	return 0;
}

/* The agent's counters: one record of ten u64, in FLUSHED's order. */
static int cpu_other(const struct vmt_tlv *rec, void *obj, char *msg, size_t n)
{
	struct vmt_sample_cpu *c = obj;

	if (rec->tag != TAG_CPU_GUEST_STATS)
		return 0;
	if (c->have_guest_stats || rec->len != VMT_CPU_STATS_SIZE) {
		snprintf(msg, n, "bad or repeated guest stats (tag 0x%x, %u bytes)", rec->tag, rec->len);
		return -EBADMSG;
	}
	for (size_t i = 0; i < ARRAY_SIZE(stats_off); i++)
		*(uint64_t *)((uint8_t *)&c->guest + stats_off[i]) = get_le64(rec->data + 8 * i);
	c->have_guest_stats = true;
	return 1;
}

/* Version 1's records, all required, then version 2's, none required. */
static int parse_cpu(const uint8_t *p, size_t len, struct vmt_sample_cpu *c, char *msg, size_t n)
{
	struct vmt_tlv rec;
	uint64_t seen = 0;
	size_t pos = 0;
	int r = tlv_parse_fields(p, len, cpu_fields, ARRAY_SIZE(cpu_fields), c, cpu_other, msg, n);

	if (r < 0)
		return r;
	while ((r = tlv_next(p, len, &pos, &rec)) > 0) {
		r = tlv_get_field(&rec, cpu_v2_fields, ARRAY_SIZE(cpu_v2_fields), c, &seen, msg, n);
		if (r < 0)
			return r;
	}
	return r;
}

/* Small sections are parsed in place or from a temporary buffer. */
static int section_get(const struct vmt_vfile *f, const struct vmt_vsection *s, uint64_t max,
		       const uint8_t **p, void **owned, char *why, size_t n)
{
	if (s->raw_size > max)
		return vfile_bad(why, n, f, s, "%" PRIu64 " bytes, more than %" PRIu64, s->raw_size, max);
	return vfile_section_data_why(f, s, p, owned, why, n);
}

/* The format version and the one INFO section into s, which is zeroed first. */
static int sample_parse_info(const struct vmt_vfile *f, struct vmt_sample *s, char *why, size_t n)
{
	const struct vmt_vsection *info = NULL;
	char msg[200];
	const uint8_t *p;
	void *owned;
	int r;

	memset(s, 0, sizeof(*s));
	if (f->format_version != VMT_SAMPLE_VERSION && f->format_version != VMT_SAMPLE_VERSION_FRAMES)
		return vfile_bad(why, n, f, NULL, "format version %u, this reader knows %d and %d",
				 f->format_version, VMT_SAMPLE_VERSION, VMT_SAMPLE_VERSION_FRAMES);
	for (uint32_t i = 0; i < f->nsect; i++) {
		if (f->sect[i].type != VMT_SAMPLE_SECT_INFO)
			continue;
		if (info || f->sect[i].id)
			return vfile_bad(why, n, f, &f->sect[i], "a second INFO section, or id not 0");
		info = &f->sect[i];
	}
	if (!info)
		return vfile_bad(why, n, f, NULL, "no INFO section");
	r = section_get(f, info, SAMPLE_INFO_MAX, &p, &owned, why, n);
	if (r < 0)
		return r;
	r = parse_info(p, (size_t)info->raw_size, s, msg, sizeof(msg));
	free(owned);
	if (r < 0)
		return vfile_bad(why, n, f, info, "%s", msg);
	return 0;
}

/* The one CLOCK section into s->clock. */
static int parse_clock_section(const struct vmt_vfile *f, const struct vmt_vsection *x,
			       struct vmt_sample *s, char *why, size_t n)
{
	char msg[200];
	const uint8_t *p;
	void *owned;
	int r;

	if (s->have_clock || x->id)
		return vfile_bad(why, n, f, x, "a second CLOCK section, or id not 0");
	r = section_get(f, x, SAMPLE_CLOCK_MAX, &p, &owned, why, n);
	if (r < 0)
		return r;
	r = clock_info_parse(p, (size_t)x->raw_size, &s->clock, msg, sizeof(msg));
	free(owned);
	if (r < 0) {
		vfile_bad(why, n, f, x, "%s", msg);
		return r;
	}
	s->have_clock = true;
	return 0;
}

/* The one TASKS section, checked, into a copy of its own in s->tasks. */
static int parse_tasks_section(const struct vmt_vfile *f, const struct vmt_vsection *x,
			       struct vmt_sample *s, char *why, size_t n)
{
	const char *bad = NULL;
	const uint8_t *p;
	void *owned;
	int r;

	if (s->tasks || x->id)
		return vfile_bad(why, n, f, x, "a second TASKS section, or id not 0");
	r = section_get(f, x, VMT_TASKS_MAX, &p, &owned, why, n);
	if (r < 0)
		return r;
	if (meta_tasks_validate(p, (size_t)x->raw_size, &bad) < 0 || !x->raw_size) {
		free(owned);
		return vfile_bad(why, n, f, x, "%s", bad ? bad : "empty task tables");
	}
	s->tasks = malloc((size_t)x->raw_size);
	if (!s->tasks) {
		free(owned);
		return -ENOMEM;
	}
	memcpy(s->tasks, p, (size_t)x->raw_size);
	s->tasks_len = (uint32_t)x->raw_size;
	free(owned);
	return 0;
}

/* Each CPU's CPU and PAGES section, by cpu, and its FRAME sections in file order. */
struct sample_sections {
	const struct vmt_vsection *cpu[VMT_MAX_CPUS], *pages[VMT_MAX_CPUS];
	uint32_t first_frame[VMT_MAX_CPUS + 1];	/* cpu c's are frames[first_frame[c] .. [c + 1]) */
	struct sample_frame_ref *frames;
	struct sample_tc tc;
};

/* The FRAME sections, grouped by cpu: counted, then placed in file order. */
static int place_frames(const struct vmt_vfile *f, const struct vmt_sample *s,
			struct sample_sections *ss, char *why, size_t n)
{
	uint32_t at[VMT_MAX_CPUS] = { 0 }, total = 0;

	for (uint32_t i = 0; i < f->nsect; i++) {
		const struct vmt_vsection *x = &f->sect[i];

		if (x->type != VMT_SAMPLE_SECT_FRAME)
			continue;
		if (f->format_version < VMT_SAMPLE_VERSION_FRAMES)
			return vfile_bad(why, n, f, x, "a FRAME section in a version %u sample",
					 f->format_version);
		if (x->id >= s->ncpus)
			return vfile_bad(why, n, f, x, "cpu %u, but ncpus is %u", x->id, s->ncpus);
		ss->first_frame[x->id + 1]++;
		total++;
	}
	for (uint32_t c = 0; c < s->ncpus; c++) {
		ss->first_frame[c + 1] += ss->first_frame[c];
		at[c] = ss->first_frame[c];
	}
	if (!total)
		return 0;
	ss->frames = calloc(total, sizeof(*ss->frames));
	if (!ss->frames)
		return -ENOMEM;
	for (uint32_t i = 0; i < f->nsect; i++)
		if (f->sect[i].type == VMT_SAMPLE_SECT_FRAME)
			ss->frames[at[f->sect[i].id]++].x = &f->sect[i];
	return 0;
}

/*
 * Every section placed before any page memory is taken: CLOCK and TASKS
 * read, one CPU and one PAGES section found for each CPU, its FRAME
 * sections listed.
 */
static int place_sections(const struct vmt_vfile *f, struct vmt_sample *s,
			  struct sample_sections *ss, char *why, size_t n)
{
	int r;

	for (uint32_t i = 0; i < f->nsect; i++) {
		const struct vmt_vsection *x = &f->sect[i];
		const struct vmt_vsection **slot;

		if (x->type == VMT_SAMPLE_SECT_CPU) {
			slot = ss->cpu;
		} else if (x->type == VMT_SAMPLE_SECT_PAGES) {
			slot = ss->pages;
		} else if (x->type == VMT_SAMPLE_SECT_CLOCK) {
			r = parse_clock_section(f, x, s, why, n);
			if (r < 0)
				return r;
			continue;
		} else if (x->type == VMT_SAMPLE_SECT_TASKS) {
			r = parse_tasks_section(f, x, s, why, n);
			if (r < 0)
				return r;
			continue;
		} else {
			continue;	/* a later version's section */
		}
		if (x->id >= s->ncpus)
			return vfile_bad(why, n, f, x, "cpu %u, but ncpus is %u", x->id, s->ncpus);
		if (slot[x->id])
			return vfile_bad(why, n, f, x, "a second section for cpu %u", x->id);
		slot[x->id] = x;
	}
	for (uint32_t i = 0; i < s->ncpus; i++)
		if (!ss->cpu[i] || !ss->pages[i])
			return vfile_bad(why, n, f, NULL, "no %s section for cpu %u",
					 ss->cpu[i] ? "PAGES" : "CPU", i);
	return place_frames(f, s, ss, why, n);
}

/*
 * s->cpus from the CPU sections, each checked against its PAGES section's
 * size, and the pages of all of them bounded.
 */
static int parse_cpu_sections(const struct vmt_vfile *f, struct vmt_sample *s,
			      const struct sample_sections *ss, char *why, size_t n)
{
	uint64_t total = 0;
	char msg[200];
	const uint8_t *p;
	void *owned;
	int r;

	s->cpus = calloc(s->ncpus, sizeof(*s->cpus));
	if (!s->cpus)
		return -ENOMEM;
	for (uint32_t i = 0; i < s->ncpus; i++) {
		struct vmt_sample_cpu *c = &s->cpus[i];
		const struct vmt_vsection *cs = ss->cpu[i], *ps = ss->pages[i];

		r = section_get(f, cs, SAMPLE_CPU_MAX, &p, &owned, why, n);
		if (r < 0)
			return r;
		r = parse_cpu(p, (size_t)cs->raw_size, c, msg, sizeof(msg));
		free(owned);
		if (r == 0 && c->cpu != i) {
			snprintf(msg, sizeof(msg), "cpu %u in a section for cpu %u", c->cpu, i);
			r = -EBADMSG;
		}
		if (r < 0) {
			vfile_bad(why, n, f, cs, "%s", msg);
			return r;
		}
		if (c->frame_pages > c->npages)
			return vfile_bad(why, n, f, cs, "%u of its %u pages in frames", c->frame_pages,
					 c->npages);
		if (ps->raw_size != (uint64_t)(c->npages - c->frame_pages) * s->page_size)
			return vfile_bad(why, n, f, ps, "%" PRIu64 " bytes, but %u pages of %u", ps->raw_size,
					 c->npages - c->frame_pages, s->page_size);
		total += (uint64_t)c->npages * s->page_size;	/* < 2^56 in all: no overflow */
	}
	if (total > VMT_SAMPLE_MAX_PAGE_BYTES)
		return vfile_bad(why, n, f, NULL, "%" PRIu64 " bytes of pages, more than %llu", total,
				 VMT_SAMPLE_MAX_PAGE_BYTES);
	return 0;
}

/*
 * A CPU's pages without frames: the buffer a compressed section was decoded
 * into, else a copy.
 */
static int read_pages_only(const struct vmt_vfile *f, struct vmt_sample_cpu *c,
			   const struct vmt_vsection *ps, char *why, size_t n)
{
	const uint8_t *p;
	void *owned;
	int r = vfile_section_data_why(f, ps, &p, &owned, why, n);

	if (r < 0)
		return r;
	if (!c->npages) {
		free(owned);
	} else if (owned) {
		c->pages = owned;
	} else {
		c->pages = malloc((size_t)ps->raw_size);
		if (!c->pages)
			return -ENOMEM;
		memcpy(c->pages, p, (size_t)ps->raw_size);
	}
	return 0;
}

/* A CPU's frames that pass decoded, then its PAGES after them, in one buffer. */
static int read_cpu_pages(const struct vmt_vfile *f, struct vmt_sample *s,
			  struct sample_sections *ss, uint32_t cpu, char *why, size_t n)
{
	struct vmt_sample_cpu *c = &s->cpus[cpu];
	uint32_t nfr = ss->first_frame[cpu + 1] - ss->first_frame[cpu];
	uint64_t good, got, tail = c->npages - c->frame_pages;
	struct sample_frame_ref *fr;
	const uint8_t *p;
	void *owned;
	int r;

	if (!nfr && !c->frame_pages)
		return read_pages_only(f, c, ss->pages[cpu], why, n);
	fr = ss->frames ? ss->frames + ss->first_frame[cpu] : NULL;	/* NULL: no frame in the file */
	good = sample_frames_bound(f, s, cpu, fr, nfr);
	if (good + tail)
		c->pages = malloc((size_t)(good + tail) * s->page_size);
	if (good + tail && !c->pages)
		return -ENOMEM;
	r = sample_frames_decode(f, s, cpu, fr, nfr, &ss->tc, c->pages, good, &got,
				 why, n);
	if (r == 0)
		r = vfile_section_data_why(f, ss->pages[cpu], &p, &owned, why, n);
	if (r < 0)
		return r;
	if (tail)
		memcpy(c->pages + got * s->page_size, p, (size_t)tail * s->page_size);
	free(owned);
	c->npages = (uint32_t)(got + tail);
	if (!c->npages) {
		free(c->pages);
		c->pages = NULL;
	}
	return 0;
}

/* FRAMES mode: the frames counted through a scratch buffer, PAGES only CRC-checked. */
static int check_cpu_pages(const struct vmt_vfile *f, struct vmt_sample *s,
			   struct sample_sections *ss, uint32_t cpu, char *why, size_t n)
{
	struct vmt_sample_cpu *c = &s->cpus[cpu];
	uint32_t nfr = ss->first_frame[cpu + 1] - ss->first_frame[cpu];
	const struct vmt_vsection *ps = ss->pages[cpu];
	uint64_t got = 0;
	int r = 0;

	if (nfr || c->frame_pages)
		r = sample_frames_decode(f, s, cpu, ss->frames ? ss->frames + ss->first_frame[cpu] : NULL,
					 nfr, &ss->tc, NULL, UINT64_MAX, &got, why, n);
	if (r < 0)
		return r;
	if (crc32c(0, f->map + ps->offset, (size_t)ps->stored_size) != ps->data_crc)
		return vfile_bad(why, n, f, ps, "data CRC mismatch");
	c->npages = (uint32_t)(got + c->npages - c->frame_pages);
	return 0;
}

static int read_page_sections(const struct vmt_vfile *f, struct vmt_sample *s,
			      struct sample_sections *ss, const struct vmt_sample_read_opts *o,
			      char *why, size_t n)
{
	for (uint32_t i = 0; i < s->ncpus; i++) {
		int r = 0;

		switch (o->pages) {
		case VMT_SAMPLE_PAGES_FRAMES:
			r = check_cpu_pages(f, s, ss, i, why, n);
			break;
		case VMT_SAMPLE_PAGES_ONE_CPU:
			if (i == o->cpu)
				r = read_cpu_pages(f, s, ss, i, why, n);
			break;
		case VMT_SAMPLE_PAGES_CHECK:
			/* one CPU's pages at a time: what a summary needs is counted */
			r = read_cpu_pages(f, s, ss, i, why, n);
			free(s->cpus[i].pages);
			s->cpus[i].pages = NULL;
			break;
		default:
			r = read_cpu_pages(f, s, ss, i, why, n);
			break;
		}
		if (r < 0)
			return r;
	}
	return 0;
}

static int sample_parse(const struct vmt_vfile *f, const struct vmt_sample_read_opts *o,
			const char *path, struct vmt_sample **out, char *why, size_t n)
{
	struct sample_sections ss = { .tc = { .t = o->tcode, .aux_path = o->aux_path, .path = path } };
	struct vmt_sample *s;
	int r;

	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	r = sample_parse_info(f, s, why, n);
	if (r >= 0)
		r = place_sections(f, s, &ss, why, n);
	if (r >= 0)
		r = parse_cpu_sections(f, s, &ss, why, n);
	if (r >= 0)
		r = vfile_budget_check(f, vfile_budget(f->size, o->max_memory), sample_section_cost, s, NULL,
				       why, n);
	if (r >= 0 && o->pages == VMT_SAMPLE_PAGES_ONE_CPU && o->cpu >= s->ncpus)
		r = vfile_bad(why, n, f, NULL, "no cpu %u: ncpus is %u", o->cpu, s->ncpus);
	if (r >= 0)
		r = read_page_sections(f, s, &ss, o, why, n);
	free(ss.frames);
	tcode_free(ss.tc.own);
	if (r < 0) {
		sample_free(s);
		return r;
	}
	*out = s;
	return 0;
}

static const struct vmt_sample_read_opts default_opts;

int sample_read_mem_with(const void *data, size_t len, const struct vmt_sample_read_opts *o,
			 struct vmt_sample **out, char *why, size_t why_len)
{
	struct vmt_vfile f;
	int r;

	*out = NULL;
	r = vfile_open_mem(&f, data, len, VMT_SAMPLE_MAGIC, VMT_SAMPLE_MAX_PAGE_BYTES, why, why_len);
	if (r < 0)
		return r;
	r = sample_parse(&f, o ? o : &default_opts, NULL, out, why, why_len);
	vfile_close(&f);
	return r;
}

int sample_read_mem(const void *data, size_t len, struct vmt_sample **out, char *why, size_t why_len)
{
	return sample_read_mem_with(data, len, NULL, out, why, why_len);
}

int sample_read_with(const char *path, const struct vmt_sample_read_opts *o, struct vmt_sample **out,
		     char *why, size_t why_len)
{
	struct vmt_vfile f;
	int r;

	*out = NULL;
	r = vfile_open(&f, path, VMT_SAMPLE_MAGIC, VMT_SAMPLE_MAX_PAGE_BYTES, why, why_len);
	if (r < 0)
		return r;
	r = sample_parse(&f, o ? o : &default_opts, path, out, why, why_len);
	vfile_close(&f);
	return r;
}

int sample_read(const char *path, struct vmt_sample **out, char *why, size_t why_len)
{
	return sample_read_with(path, NULL, out, why, why_len);
}

int sample_read_info_fd(int fd, struct vmt_sample *s, char *why, size_t why_len)
{
	struct vmt_vfile f;
	struct stat st;
	void *m = NULL;
	int r;

	memset(s, 0, sizeof(*s));
	if (why && why_len)
		why[0] = 0;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if ((uint64_t)st.st_size > SIZE_MAX)
		return -EFBIG;
	/* mapped, not read: indexing touches only the section headers and INFO */
	if (st.st_size > 0) {
		m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m == MAP_FAILED)
			return -errno;
	}
	r = vfile_open_mem(&f, m, (size_t)st.st_size, VMT_SAMPLE_MAGIC, VMT_SAMPLE_MAX_PAGE_BYTES,
			   why, why_len);
	if (r == 0) {
		r = sample_parse_info(&f, s, why, why_len);
		vfile_close(&f);
	}
	if (m)
		munmap(m, (size_t)st.st_size);
	if (r < 0)
		memset(s, 0, sizeof(*s));
	return r;
}

int sample_read_info(const char *path, struct vmt_sample *s, char *why, size_t why_len)
{
	int fd, r;

	memset(s, 0, sizeof(*s));
	/* O_NONBLOCK: a FIFO under a sample's name must not hang the caller */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -errno;
	r = sample_read_info_fd(fd, s, why, why_len);
	close(fd);
	return r;
}

void sample_free(struct vmt_sample *s)
{
	if (!s)
		return;
	if (s->cpus)
		for (uint32_t i = 0; i < s->ncpus; i++)
			free(s->cpus[i].pages);
	free(s->cpus);
	clock_info_free(&s->clock);
	free(s->tasks);
	free(s);
}

int sample_file_name(char *out, size_t n, const char *guest, uint64_t realtime_ns)
{
	time_t sec = (time_t)(realtime_ns / 1000000000u);
	unsigned usec = (unsigned)(realtime_ns % 1000000000u / 1000u);
	struct tm tm;
	int len;

	if (!name_is_valid(guest))
		return -EINVAL;
	if (!gmtime_r(&sec, &tm))
		return -EOVERFLOW;
	len = snprintf(out, n, "%s-%04d%02d%02dT%02d%02d%02d.%06uZ.vmts", guest, tm.tm_year + 1900,
		       tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, usec);
	if (len < 0 || (size_t)len >= n)
		return -ENAMETOOLONG;
	return 0;
}
