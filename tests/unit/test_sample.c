/* SPDX-License-Identifier: MIT */
/*
 * Sample files. Files that sample_write() would never produce are made here
 * with the vfile writer and the tags of docs/FORMAT.md, so these tests also
 * check that the document and the code agree.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "corpus.h"
#include "frame.h"
#include "meta.h"
#include "sample.h"
#include "testutil.h"
#include "util.h"
#include "tlv.h"
#include "afile.h"
#include "vfile.h"

/* ---- helpers --------------------------------------------------------- */

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		p[i] = (i & 32) ? (uint8_t)(x >> 24) : (uint8_t)(i / 5 + seed);
	}
}

/*
 * A sample of ncpus CPUs, npages[i] pages each. pieces: 0 = pages only
 * (niov 0), 1 = one iovec per page, 2 = odd pieces with empty ones.
 */
static struct vmt_sample *make_sample(uint32_t ncpus, uint32_t page_size, const uint32_t *npages,
				      int pieces, uint32_t ntriggers)
{
	struct vmt_sample *s = calloc(1, sizeof(*s));

	ck_assert_ptr_nonnull(s);
	snprintf(s->guest, sizeof(s->guest), "vm-1.test_A");
	snprintf(s->host, sizeof(s->host), "host.example");
	s->aux_version = 3;
	s->aux_id = 0x0123456789abcdefull;
	s->created_ns = 1795349594123456789ull;
	s->dump_id = 17;
	s->page_size = page_size;
	s->ncpus = ncpus;
	s->ctl_rejected_bytes = 1ull << 33;
	s->ctl_rejected_msgs = 5;
	s->flush_timeouts = 2;
	s->triggers_omitted = 9;
	s->ntriggers = ntriggers;
	for (uint32_t i = 0; i < ntriggers; i++) {
		struct vmt_trigger *t = &s->triggers[i];

		t->kind = i % 6;	/* 0: a kind this build does not know */
		t->pid = 1000 + i;
		t->time_ns = s->created_ns - i;
		t->value = i * 3;
		t->threshold = ~0ull - i;
		snprintf(t->reason, sizeof(t->reason), "trigger %u: latency over threshold", i);
	}
	s->cpus = calloc(ncpus, sizeof(*s->cpus));
	ck_assert_ptr_nonnull(s->cpus);
	for (uint32_t i = 0; i < ncpus; i++) {
		struct vmt_sample_cpu *c = &s->cpus[i];
		size_t bytes = (size_t)npages[i] * page_size, off = 0;
		struct vmt_iovec *iov;
		uint32_t n = 0;

		c->cpu = i;
		c->npages = npages[i];
		c->first_seq = 100 + i;
		c->first_ts = 1000000 * i;
		c->last_ts = 1000000 * i + 999;
		c->events = 77 * i;
		c->counters = (struct vmt_sample_counters){ 1, 2, 3, 4, 5, 6, 7, 8, 9 + i, 0, 0, 0, 0, 0 };
		c->have_guest_stats = i % 2 == 0;
		if (c->have_guest_stats)
			c->guest = (struct vmt_cpu_stats){ 11, 12, 13, 14, 15, 16, 17, 18, 19, 20 + i };
		c->pages = bytes ? malloc(bytes) : NULL;
		if (bytes)
			fill(c->pages, bytes, i + 1);
		if (pieces == 0)
			continue;
		size_t cap = 2 * (bytes / (page_size / 3) + 2);

		iov = calloc(cap, sizeof(*iov));
		ck_assert_ptr_nonnull(iov);
		while (off < bytes) {
			ck_assert_uint_lt(n, cap);
			size_t len = pieces == 1 ? page_size
						 : VMT_MIN(bytes - off, (n % 4 == 1) ? 0 : page_size / 3 + n % 7);
			iov[n].base = c->pages + off;
			iov[n].len = len;
			off += len;
			n++;
		}
		c->iov = iov;
		c->niov = n;
	}
	return s;
}

static void free_made(struct vmt_sample *s)
{
	for (uint32_t i = 0; i < s->ncpus; i++)
		free((void *)s->cpus[i].iov);
	sample_free(s);
}

static void assert_same(const struct vmt_sample *a, const struct vmt_sample *b)
{
	ck_assert_str_eq(a->guest, b->guest);
	ck_assert_str_eq(a->host, b->host);
	ck_assert_uint_eq(a->aux_version, b->aux_version);
	ck_assert_uint_eq(a->aux_id, b->aux_id);
	ck_assert_uint_eq(a->created_ns, b->created_ns);
	ck_assert_uint_eq(a->dump_id, b->dump_id);
	ck_assert_uint_eq(a->page_size, b->page_size);
	ck_assert_uint_eq(a->ncpus, b->ncpus);
	ck_assert_uint_eq(a->ctl_rejected_bytes, b->ctl_rejected_bytes);
	ck_assert_uint_eq(a->ctl_rejected_msgs, b->ctl_rejected_msgs);
	ck_assert_uint_eq(a->flush_timeouts, b->flush_timeouts);
	ck_assert_uint_eq(a->triggers_omitted, b->triggers_omitted);
	ck_assert_uint_eq(a->ntriggers, b->ntriggers);
	for (uint32_t i = 0; i < a->ntriggers; i++) {
		const struct vmt_trigger *x = &a->triggers[i], *y = &b->triggers[i];

		ck_assert_uint_eq(x->kind, y->kind);
		ck_assert_uint_eq(x->pid, y->pid);
		ck_assert_uint_eq(x->time_ns, y->time_ns);
		ck_assert_uint_eq(x->value, y->value);
		ck_assert_uint_eq(x->threshold, y->threshold);
		ck_assert_str_eq(x->reason, y->reason);
	}
	for (uint32_t i = 0; i < a->ncpus; i++) {
		const struct vmt_sample_cpu *x = &a->cpus[i], *y = &b->cpus[i];

		ck_assert_uint_eq(x->cpu, y->cpu);
		ck_assert_uint_eq(x->npages, y->npages);
		ck_assert_uint_eq(x->first_seq, y->first_seq);
		ck_assert_uint_eq(x->first_ts, y->first_ts);
		ck_assert_uint_eq(x->last_ts, y->last_ts);
		ck_assert_uint_eq(x->events, y->events);
		ck_assert(!memcmp(&x->counters, &y->counters, sizeof(x->counters)));
		ck_assert_int_eq(x->have_guest_stats, y->have_guest_stats);
		if (x->have_guest_stats)
			ck_assert(!memcmp(&x->guest, &y->guest, sizeof(x->guest)));
		if (x->npages)
			ck_assert(!memcmp(x->pages, y->pages, (size_t)x->npages * a->page_size));
		else
			ck_assert_ptr_null(y->pages);
	}
}

static uint8_t *write_mem(const struct vmt_sample *s, int level, int workers, size_t *len)
{
	int fd = test_memfd("sample-test");
	uint8_t *b;

	ck_assert_int_eq(sample_write(fd, s, level, workers), 0);
	b = test_slurp(fd, len);
	close(fd);
	return b;
}

/* Header of the i-th section of a file, or NULL. */
static uint8_t *sect_hdr(uint8_t *b, size_t len, uint32_t idx)
{
	size_t pos = 32;

	for (uint32_t i = 0; pos + 40 <= len; i++) {
		if (i == idx)
			return b + pos;
		pos += 40 + get_le64(b + pos + 16);
	}
	return NULL;
}

static void reseal(uint8_t *h)
{
	put_le32(h + 36, crc32c(0, h, 36));
}

/* Records in the tags of docs/FORMAT.md; skip leaves one out. */
static void info_tlv(struct vmt_buf *b, const char *guest, uint32_t ps, uint32_t ncpus, int skip)
{
	if (skip != 0x01) tlv_put_str(b, 0x01, guest);
	if (skip != 0x02) tlv_put_str(b, 0x02, "host");
	if (skip != 0x03) tlv_put_u32(b, 0x03, 1);
	if (skip != 0x04) tlv_put_u64(b, 0x04, 2);
	if (skip != 0x05) tlv_put_u64(b, 0x05, 3);
	if (skip != 0x06) tlv_put_u64(b, 0x06, 4);
	if (skip != 0x07) tlv_put_u32(b, 0x07, ps);
	if (skip != 0x08) tlv_put_u32(b, 0x08, ncpus);
	if (skip != 0x09) tlv_put_u64(b, 0x09, 5);
	if (skip != 0x0a) tlv_put_u64(b, 0x0a, 6);
	if (skip != 0x0b) tlv_put_u64(b, 0x0b, 7);
	if (skip != 0x0c) tlv_put_u64(b, 0x0c, 8);
}

static void cpu_tlv(struct vmt_buf *b, uint32_t cpu, uint32_t npages, int skip)
{
	if (skip != 0x01) tlv_put_u32(b, 0x01, cpu);
	if (skip != 0x02) tlv_put_u32(b, 0x02, npages);
	for (uint16_t t = 0x03; t <= 0x06; t++)
		if (skip != t)
			tlv_put_u64(b, t, t);
	for (uint16_t t = 0x10; t <= 0x18; t++)
		if (skip != t)
			tlv_put_u64(b, t, t);
}

struct sect {
	uint32_t type, id, flags;
	const void *data;
	size_t len;
};

static uint8_t *craft(const struct sect *s, size_t n, uint32_t version, size_t *len)
{
	struct vmt_vfile_writer w = { .zstd_level = 1 };
	int fd = test_memfd("sample-test");
	uint8_t *b;

	ck_assert_int_eq(vfile_writer_start(&w, fd, VMT_SAMPLE_MAGIC, version, 0), 0);
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(vfile_write_section(&w, s[i].type, s[i].id, s[i].flags, s[i].data, s[i].len), 0);
	ck_assert_int_eq(vfile_writer_finish(&w), 0);
	b = test_slurp(fd, len);
	close(fd);
	return b;
}

static int read_mem(const uint8_t *b, size_t len, char *why, size_t n)
{
	struct vmt_sample *s = NULL;
	int r = sample_read_mem(b, len, &s, why, n);

	if (r < 0)
		ck_assert_ptr_null(s);
	sample_free(s);
	return r;
}

/* A whole valid file of one CPU of page size 256 built from the pieces above. */
struct good {
	struct vmt_buf info, cpu;
	uint8_t pages[512];
};

static void good_init(struct good *g)
{
	memset(g, 0, sizeof(*g));
	info_tlv(&g->info, "g1", 256, 1, -1);
	cpu_tlv(&g->cpu, 0, 2, -1);
	fill(g->pages, sizeof(g->pages), 9);
}

static void good_free(struct good *g)
{
	buf_free(&g->info);
	buf_free(&g->cpu);
}


/* ---- frames ---------------------------------------------------------- */

#define FR_MAX 8

/*
 * A sample of 2 CPUs of 4096-byte pages (make_sample's, one iovec a page)
 * whose first nfr * fpages pages of each CPU are frames of codecs[k % 3],
 * compressed from real corpus pages; the tail stays in iov. s->cpus[i].pages
 * holds every page, as the reader must give them back.
 */
struct framed {
	struct vmt_sample *s;
	struct vmt_sample_frame fr[2][FR_MAX];
	uint8_t *payload[2][FR_MAX];
	const struct vmt_iovec *iov[2];
	uint32_t niov[2];
};

/* The corpus's pages of cpu over p[n pages]; made-up pages are kept without it. */
static void corpus_fill(uint32_t cpu, uint8_t *p, uint32_t n)
{
	const char *dir = test_corpus_dir();
	char path[4200];
	uint8_t *all = NULL;
	size_t have = 0;

	if (!dir)
		return;
	snprintf(path, sizeof(path), "%s/pages/cpu%u.raw", dir, cpu);
	if (corpus_load_pages(path, 4096, &all, &have) == 0 && have >= n)
		memcpy(p, all, (size_t)n * 4096);
	free(all);
}

static void framed_make(struct framed *m, const uint32_t codecs[3], uint32_t nfr, uint32_t fpages,
			uint32_t tail)
{
	const uint32_t npages[2] = { nfr * fpages + tail, nfr * fpages + tail };

	memset(m, 0, sizeof(*m));
	ck_assert_uint_le(nfr, FR_MAX);
	m->s = make_sample(2, 4096, npages, 1, 1);
	for (uint32_t i = 0; i < 2; i++) {
		struct vmt_sample_cpu *c = &m->s->cpus[i];

		corpus_fill(i, c->pages, c->npages);
		for (uint32_t k = 0; k < nfr; k++) {
			uint32_t codec = codecs[k % 3];
			struct vmt_frame_ctx *ctx = frame_ctx_new(codec, 1, (size_t)fpages * 4096);
			struct vmt_iovec in = { c->pages + (size_t)k * fpages * 4096, (size_t)fpages * 4096 };
			size_t cap = frame_bound(codec, in.len);
			ssize_t len;

			ck_assert_ptr_nonnull(ctx);
			m->payload[i][k] = malloc(cap);
			len = frame_compress(ctx, &in, 1, m->payload[i][k], cap);
			ck_assert_int_gt(len, 0);
			frame_ctx_free(ctx);
			m->fr[i][k] = (struct vmt_sample_frame){
				.h = { .codec = codec, .npages = fpages, .first_seq = c->first_seq + k * fpages,
				       .first_ts = 1000 * k, .last_ts = 1000 * k + 999, .events = 10 + k },
				.payload = m->payload[i][k], .len = (uint32_t)len };
		}
		c->frames = m->fr[i];
		c->nframes = nfr;
		c->frame_pages = nfr * fpages;
		m->iov[i] = c->iov;
		m->niov[i] = c->niov;
		c->iov += c->frame_pages;
		c->niov -= c->frame_pages;
		c->counters.frames_made = 30 + i;
		c->counters.pages_stored_raw = 31;
		c->counters.frame_bytes_in = 1ull << 33;
		c->counters.frame_bytes_out = 1ull << 30;
		c->counters.frames_overwritten = 7;
	}
}

static void framed_free(struct framed *m)
{
	for (uint32_t i = 0; i < 2; i++) {
		m->s->cpus[i].iov = m->iov[i];
		m->s->cpus[i].niov = m->niov[i];
		for (uint32_t k = 0; k < FR_MAX; k++)
			free(m->payload[i][k]);
	}
	free_made(m->s);
}

/* The section index of the k-th FRAME section of cpu, or -1. */
static int frame_sect(uint8_t *b, size_t len, uint32_t cpu, uint32_t k)
{
	uint8_t *h;

	for (uint32_t i = 0; (h = sect_hdr(b, len, i)); i++)
		if (get_le32(h) == VMT_SAMPLE_SECT_FRAME && get_le32(h + 4) == cpu && k-- == 0)
			return (int)i;
	return -1;
}

/* Seal a section whose data changed: its data CRC, then its header's. */
static void reseal_data(uint8_t *h)
{
	put_le32(h + 12, crc32c(0, h + 40, get_le64(h + 16)));
	reseal(h);
}

static struct vmt_sample *read_ok(const uint8_t *b, size_t len)
{
	struct vmt_sample *r = NULL;
	char why[256] = "";

	ck_assert_msg(sample_read_mem(b, len, &r, why, sizeof(why)) == 0, "%s", why);
	return r;
}

/* ---- tests ----------------------------------------------------------- */

/* make_sample(2, 256, {2, 1}, 1, 2) written uncompressed by the writer of
 * format version 1 alone (before FRAME sections) */
#define GOLDEN_V1_LEN 2021
#define GOLDEN_V1_CRC 0x84e3787au

START_TEST(test_round_trip)
{
	static const uint32_t npages[] = { 3, 0, 1, 8 };
	static const struct {
		int level, workers, pieces;
	} cfg[] = {
		{ 0, 0, 1 }, { 0, 0, 2 }, { 0, 0, 0 }, { 3, 0, 1 }, { 3, 0, 2 }, { 1, 2, 2 }, { 19, 2, 0 },
	};

	for (size_t k = 0; k < ARRAY_SIZE(cfg); k++) {
		struct vmt_sample *s = make_sample(4, 4096, npages, cfg[k].pieces, 3), *r = NULL;
		char why[256] = "";
		size_t len;
		uint8_t *b = write_mem(s, cfg[k].level, cfg[k].workers, &len);

		ck_assert_msg(sample_read_mem(b, len, &r, why, sizeof(why)) == 0, "cfg %zu: %s", k, why);
		assert_same(s, r);
		/* what was read can be written again (from pages) and reads the same */
		free(b);
		b = write_mem(r, cfg[k].level, 0, &len);
		sample_free(r);
		ck_assert_int_eq(sample_read_mem(b, len, &r, why, sizeof(why)), 0);
		assert_same(s, r);
		sample_free(r);
		free(b);
		free_made(s);
	}
}
END_TEST

/*
 * A sample without frames is format version 1, byte for byte what the writer
 * wrote before frames existed: the same sections, and the same CRC32C over
 * the whole file as that writer gave (uncompressed, so zstd's version does
 * not matter).
 */
START_TEST(test_v1_unchanged)
{
	static const uint32_t npages[] = { 2, 1 };
	static const uint32_t types[] = { 0x01, 0x10, 0x10, 0x20, 0x20, 0xffff };
	struct vmt_sample *s = make_sample(2, 256, npages, 1, 2);
	size_t len;
	uint8_t *b = write_mem(s, 0, 0, &len), *h;

	ck_assert_uint_eq(get_le32(b + 8), VMT_SAMPLE_VERSION);
	for (uint32_t i = 0; i < ARRAY_SIZE(types); i++) {
		h = sect_hdr(b, len, i);
		ck_assert_ptr_nonnull(h);
		ck_assert_uint_eq(get_le32(h), types[i]);
	}
	ck_assert_ptr_null(sect_hdr(b, len, ARRAY_SIZE(types)));
	ck_assert_msg(len == GOLDEN_V1_LEN && crc32c(0, b, len) == GOLDEN_V1_CRC, "%zu bytes, crc 0x%08x",
		      len, crc32c(0, b, len));
	free(b);
	free_made(s);
}
END_TEST

/* Task tables taken at the dump: kept byte for byte; anything but
 * saved_cmdlines and saved_tgids in them is refused on both sides. */
START_TEST(test_task_tables)
{
	static const uint32_t npages[] = { 1, 2 };
	struct vmt_sample *s = make_sample(2, 4096, npages, 1, 1), *r = NULL;
	struct vmt_buf t = { 0 }, bad = { 0 };
	struct good g;
	char why[256] = "";
	size_t len;
	uint8_t *b;
	int fd;

	meta_add(&t, "saved_cmdlines", "1 systemd\n4242 forkloop\n", 25);
	meta_add(&t, "saved_tgids", "4242 4242\n", 10);
	s->tasks = t.data;
	s->tasks_len = (uint32_t)t.len;
	b = write_mem(s, 3, 0, &len);
	ck_assert_msg(sample_read_mem(b, len, &r, why, sizeof(why)) == 0, "%s", why);
	ck_assert_uint_eq(r->tasks_len, t.len);
	ck_assert_mem_eq(r->tasks, t.data, t.len);
	assert_same(s, r);
	/* sample_read_info does not carry them */
	sample_free(r);
	free(b);

	/* the writer refuses what the reader would */
	meta_add(&bad, "kallsyms", "0 T x\n", 6);
	s->tasks = bad.data;
	s->tasks_len = (uint32_t)bad.len;
	fd = test_memfd("tasks");
	ck_assert_int_eq(sample_write(fd, s, 0, 0), -EINVAL);
	close(fd);
	s->tasks = NULL;
	s->tasks_len = 0;
	free_made(s);

	/* and the reader, a TASKS section with another file, twice, or empty */
	good_init(&g);
	{
		struct sect ss[] = {
			{ 0x01, 0, 0, g.info.data, g.info.len },
			{ 0x10, 0, 0, g.cpu.data, g.cpu.len },
			{ 0x20, 0, 0, g.pages, 512 },
			{ VMT_SAMPLE_SECT_TASKS, 0, 0, bad.data, bad.len },
			{ VMT_SAMPLE_SECT_TASKS, 0, 0, t.data, t.len },
		};
		b = craft(ss, 4, 1, &len);
		ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
		ck_assert_msg(strstr(why, "other than saved_cmdlines") != NULL, "%s", why);
		free(b);
		ss[3] = ss[4];
		b = craft(ss, 5, 1, &len);
		ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
		ck_assert_msg(strstr(why, "a second TASKS section") != NULL, "%s", why);
		free(b);
		ss[3].len = 0;
		b = craft(ss, 4, 1, &len);
		ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
		free(b);
		b = craft(ss, 3, 1, &len);
		ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), 0);
		free(b);
	}
	good_free(&g);
	buf_free(&t);
	buf_free(&bad);
}
END_TEST

START_TEST(test_big_with_workers)
{
	/* 4 MiB per CPU in page-sized iovecs: several zstd jobs */
	static const uint32_t npages[] = { 1024, 1024 };
	struct vmt_sample *s = make_sample(2, 4096, npages, 1, 1), *r = NULL;
	char why[256] = "";
	size_t len;
	uint8_t *b = write_mem(s, 1, 2, &len);

	ck_assert_msg(sample_read_mem(b, len, &r, why, sizeof(why)) == 0, "%s", why);
	assert_same(s, r);
	sample_free(r);
	free(b);
	free_made(s);
}
END_TEST

START_TEST(test_edge_shapes)
{
	static const uint32_t zero[3] = { 0, 0, 0 }, one[1] = { 1 };
	static const uint32_t sizes[] = { 256, 65536 };
	struct vmt_sample *s, *r;
	char why[256];
	size_t len;
	uint8_t *b;

	/* no pages at all, no triggers */
	for (int level = 0; level <= 3; level += 3) {
		s = make_sample(3, 4096, zero, 1, 0);
		b = write_mem(s, level, 0, &len);
		ck_assert_int_eq(sample_read_mem(b, len, &r, why, sizeof(why)), 0);
		assert_same(s, r);
		sample_free(r);
		free(b);
		free_made(s);
	}
	/* the smallest and largest page sizes */
	for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
		s = make_sample(1, sizes[i], one, 2, 1);
		b = write_mem(s, 3, 0, &len);
		ck_assert_int_eq(sample_read_mem(b, len, &r, why, sizeof(why)), 0);
		assert_same(s, r);
		sample_free(r);
		free(b);
		free_made(s);
	}
}
END_TEST

START_TEST(test_max_triggers)
{
	static const uint32_t npages[] = { 1 };
	struct vmt_sample *s = make_sample(1, 4096, npages, 1, VMT_SAMPLE_MAX_TRIGGERS), *r;
	char why[256];
	size_t len;
	uint8_t *b;
	int fd;

	for (uint32_t i = 0; i < s->ntriggers; i++) {
		memset(s->triggers[i].reason, 'a' + i % 26, VMT_REASON_MAX - 1);
		s->triggers[i].reason[VMT_REASON_MAX - 1] = 0;
	}
	b = write_mem(s, 3, 0, &len);
	ck_assert_int_eq(sample_read_mem(b, len, &r, why, sizeof(why)), 0);
	assert_same(s, r);
	ck_assert_uint_eq(strlen(r->triggers[63].reason), VMT_REASON_MAX - 1);
	sample_free(r);
	free(b);

	fd = test_memfd("sample-test");
	s->ntriggers++;
	ck_assert_int_eq(sample_write(fd, s, 0, 0), -EINVAL);
	close(fd);
	free_made(s);
}
END_TEST

START_TEST(test_too_many_triggers_in_file)
{
	struct good g;
	struct vmt_buf t = { 0 };
	char why[256];
	size_t len;
	uint8_t *b;

	good_init(&g);
	tlv_put_u32(&t, 0x01, 1);
	tlv_put_u32(&t, 0x02, 1);
	tlv_put_u64(&t, 0x03, 1);
	tlv_put_u64(&t, 0x04, 1);
	tlv_put_u64(&t, 0x05, 1);
	tlv_put_str(&t, 0x06, "r");
	for (int i = 0; i < VMT_SAMPLE_MAX_TRIGGERS; i++)
		tlv_put(&g.info, 0x10, t.data, (uint32_t)t.len);
	{
		struct sect ss[] = {
			{ 0x01, 0, 0, g.info.data, g.info.len },
			{ 0x10, 0, 0, g.cpu.data, g.cpu.len },
			{ 0x20, 0, 0, g.pages, 512 },
		};
		b = craft(ss, 3, 1, &len);
		ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), 0);
		free(b);
		tlv_put(&g.info, 0x10, t.data, (uint32_t)t.len);
		ss[0].data = g.info.data;
		ss[0].len = g.info.len;
		b = craft(ss, 3, 1, &len);
		ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
		ck_assert_str_eq(why, "section 0 (type 0x1 id 0): more than 64 triggers");
		free(b);
		/* a trigger without its reason */
		t.len -= 9;
		g.info.len = 0;
		info_tlv(&g.info, "g1", 256, 1, -1);
		tlv_put(&g.info, 0x10, t.data, (uint32_t)t.len);
		ss[0].data = g.info.data;
		ss[0].len = g.info.len;
		b = craft(ss, 3, 1, &len);
		ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
		ck_assert_str_eq(why, "section 0 (type 0x1 id 0): trigger 0: no reason (tag 0x6)");
		free(b);
	}
	buf_free(&t);
	good_free(&g);
}
END_TEST

START_TEST(test_sanitize_and_write_checks)
{
	static const uint32_t npages[] = { 1, 2 };
	struct vmt_sample *s = make_sample(2, 4096, npages, 1, 2), *r;
	struct vmt_iovec saved;
	char why[256];
	size_t len;
	uint8_t *b;
	int fd = test_memfd("sample-test");

	snprintf(s->host, sizeof(s->host), "bad\nhost");
	snprintf(s->triggers[1].reason, sizeof(s->triggers[1].reason), "caf\xc3\xa9\t!");
	b = write_mem(s, 0, 0, &len);
	ck_assert_int_eq(sample_read_mem(b, len, &r, why, sizeof(why)), 0);
	ck_assert_str_eq(r->host, "bad?host");
	ck_assert_str_eq(r->triggers[1].reason, "caf??" "?!");
	ck_assert_str_eq(s->host, "bad\nhost");	/* the caller's is untouched */
	sample_free(r);
	free(b);

	snprintf(s->guest, sizeof(s->guest), "../etc");
	ck_assert_int_eq(sample_write(fd, s, 0, 0), -EINVAL);
	snprintf(s->guest, sizeof(s->guest), "ok");
	s->page_size = 1000;
	ck_assert_int_eq(sample_write(fd, s, 0, 0), -EINVAL);
	s->page_size = 4096;
	s->cpus[1].cpu = 0;
	ck_assert_int_eq(sample_write(fd, s, 0, 0), -EINVAL);
	s->cpus[1].cpu = 1;
	saved = ((struct vmt_iovec *)s->cpus[1].iov)[1];
	((struct vmt_iovec *)s->cpus[1].iov)[1].len--;
	ck_assert_int_eq(sample_write(fd, s, 0, 0), -EINVAL);
	((struct vmt_iovec *)s->cpus[1].iov)[1] = saved;
	s->cpus[1].npages = 1;	/* more bytes than pages */
	ck_assert_int_eq(sample_write(fd, s, 0, 0), -EINVAL);
	s->cpus[1].npages = 2;
	s->ncpus = 0;
	ck_assert_int_eq(sample_write(fd, s, 0, 0), -EINVAL);
	s->ncpus = 2;
	ck_assert_int_eq(sample_write(fd, s, 0, 0), 0);
	close(fd);
	free_made(s);
}
END_TEST

/* The small file the exhaustive tests go through, compressed or not. */
static uint8_t *small_sample(int level, size_t *len)
{
	static const uint32_t npages[] = { 1, 0 };
	struct vmt_sample *s = make_sample(2, 256, npages, 1, 1);
	uint8_t *b = write_mem(s, level, 0, len);

	free_made(s);
	return b;
}

START_TEST(test_every_truncation)
{
	for (int level = 0; level <= 3; level += 3) {
		size_t len;
		uint8_t *b = small_sample(level, &len);
		char why[256];

		ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), 0);
		for (size_t n = 0; n < len; n++) {
			uint8_t *c = malloc(n ? n : 1);	/* exactly n: ASan sees overreads */

			memcpy(c, b, n);
			why[0] = 0;
			ck_assert_msg(read_mem(c, n, why, sizeof(why)) == -EBADMSG, "length %zu", n);
			ck_assert(why[0]);
			free(c);
		}
		free(b);
	}
}
END_TEST

START_TEST(test_every_truncation_on_disk)
{
	size_t len;
	uint8_t *b = small_sample(3, &len);
	char *dir = test_mkdtemp("trunc"), path[512], why[256];
	struct vmt_sample *s;
	int fd;

	ck_assert_ptr_nonnull(dir);
	snprintf(path, sizeof(path), "%s/t.vmts", dir);
	fd = open(path, O_CREAT | O_RDWR | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write_full(fd, b, len), 0);
	ck_assert_int_eq(sample_read(path, &s, why, sizeof(why)), 0);
	sample_free(s);
	for (size_t n = len; n-- > 0;) {
		ck_assert_int_eq(ftruncate(fd, (off_t)n), 0);
		ck_assert_int_eq(sample_read(path, &s, why, sizeof(why)), -EBADMSG);
		ck_assert_ptr_null(s);
	}
	close(fd);
	ck_assert_int_eq(sample_read("/nonexistent/x.vmts", &s, why, sizeof(why)), -ENOENT);
	test_rmtree(dir);
	free(dir);
	free(b);
}
END_TEST

START_TEST(test_every_byte_flip)
{
	static const uint8_t masks[] = { 0x01, 0x80, 0xff };

	for (int level = 0; level <= 3; level += 3) {
		size_t len;
		uint8_t *b = small_sample(level, &len), *c = malloc(len);
		char why[256];

		for (size_t i = 0; i < len; i++)
			for (size_t m = 0; m < ARRAY_SIZE(masks); m++) {
				memcpy(c, b, len);
				c[i] ^= masks[m];
				ck_assert_msg(read_mem(c, len, why, sizeof(why)) == -EBADMSG,
					      "level %d: flip of byte %zu by 0x%x accepted", level, i, masks[m]);
			}
		free(c);
		free(b);
	}
}
END_TEST

START_TEST(test_wrong_magic_and_version)
{
	size_t len;
	uint8_t *b = small_sample(0, &len);
	struct good g;
	char why[256];

	memcpy(b, "VMTAUX01", 8);
	ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "bad magic: not a VMTSMPL1 file");
	free(b);

	good_init(&g);
	{
		struct sect ss[] = {
			{ 0x01, 0, 0, g.info.data, g.info.len },
			{ 0x10, 0, 0, g.cpu.data, g.cpu.len },
			{ 0x20, 0, 0, g.pages, 512 },
		};
		b = craft(ss, 3, 1, &len);
		ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), 0);
		free(b);
		/* version 2 without frames reads as well */
		b = craft(ss, 3, 2, &len);
		ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), 0);
		free(b);
		b = craft(ss, 3, 3, &len);
		ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
		ck_assert_str_eq(why, "format version 3, this reader knows 1 and 2");
		free(b);
	}
	good_free(&g);
}
END_TEST

START_TEST(test_huge_raw_size)
{
	struct good g;
	char why[256];
	size_t len;
	uint8_t *b, *h;

	good_init(&g);
	{
		struct sect ss[] = {
			{ 0x01, 0, 0, g.info.data, g.info.len },
			{ 0x10, 0, 0, g.cpu.data, g.cpu.len },
			{ 0x20, 0, VMT_VSECT_ZSTD, g.pages, 512 },
		};
		b = craft(ss, 3, 1, &len);
		h = sect_hdr(b, len, 2);
		put_le64(h + 24, 1ull << 40);
		reseal(h);
		ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
		ck_assert_str_eq(why, "section 2 (type 0x20 id 0): raw size 1099511627776 exceeds "
				      "the limit 68719476736");
		put_le64(h + 24, 1ull << 32);
		reseal(h);
		ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
		ck_assert_ptr_nonnull(strstr(why, "impossible"));
		free(b);
	}
	good_free(&g);
}
END_TEST

/* Two CPUs of 40 GiB each, declared by sections big enough to be believable. */
START_TEST(test_total_bound)
{
	const size_t stored = 3u << 19;	/* 1.5 MiB: 40 GiB is within zstd's ratio */
	const uint32_t npages = (uint32_t)((40ull << 30) / 4096);
	struct vmt_buf info = { 0 }, cpu0 = { 0 }, cpu1 = { 0 };
	uint8_t *junk = calloc(1, stored), *b;
	char why[256];
	size_t len;

	info_tlv(&info, "g1", 4096, 2, -1);
	cpu_tlv(&cpu0, 0, npages, -1);
	cpu_tlv(&cpu1, 1, npages, -1);
	{
		struct sect ss[] = {
			{ 0x01, 0, 0, info.data, info.len },
			{ 0x10, 0, 0, cpu0.data, cpu0.len },
			{ 0x10, 1, 0, cpu1.data, cpu1.len },
			{ 0x20, 0, 0, junk, stored },
			{ 0x20, 1, 0, junk, stored },
		};
		b = craft(ss, 5, 1, &len);
	}
	for (uint32_t i = 3; i <= 4; i++) {
		uint8_t *h = sect_hdr(b, len, i);

		put_le32(h + 8, VMT_VSECT_ZSTD);
		put_le64(h + 24, (uint64_t)npages * 4096);
		reseal(h);
	}
	ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "85899345920 bytes of pages, more than 68719476736");
	free(b);
	free(junk);
	buf_free(&info);
	buf_free(&cpu0);
	buf_free(&cpu1);
}
END_TEST

START_TEST(test_consistency)
{
	struct good g;
	struct vmt_buf x = { 0 }, y = { 0 };
	char why[256];
	size_t len;
	uint8_t *b;

	good_init(&g);
#define EXPECT(want, ...)                                                                 \
	do {                                                                              \
		struct sect ss_[] = { __VA_ARGS__ };                                      \
		b = craft(ss_, ARRAY_SIZE(ss_), 1, &len);                                 \
		why[0] = 0;                                                               \
		if (want)                                                                 \
			ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);   \
		else                                                                      \
			ck_assert_msg(read_mem(b, len, why, sizeof(why)) == 0, "%s", why); \
		if (want)                                                                 \
			ck_assert_str_eq(why, (const char *)(want));                      \
		free(b);                                                                  \
	} while (0)
#define INFO { 0x01, 0, 0, g.info.data, g.info.len }
#define CPU0 { 0x10, 0, 0, g.cpu.data, g.cpu.len }
#define PAGES0 { 0x20, 0, 0, g.pages, 512 }

	EXPECT(NULL, INFO, CPU0, PAGES0);
	EXPECT(NULL, PAGES0, CPU0, INFO);	/* any order */
	EXPECT("no INFO section", CPU0, PAGES0);
	EXPECT("no PAGES section for cpu 0", INFO, CPU0);
	EXPECT("no CPU section for cpu 0", INFO, PAGES0);
	EXPECT("section 3 (type 0x10 id 0): a second section for cpu 0", INFO, CPU0, PAGES0, CPU0);
	EXPECT("section 3 (type 0x1 id 0): a second INFO section, or id not 0", INFO, CPU0, PAGES0, INFO);
	EXPECT("section 3 (type 0x20 id 1): cpu 1, but ncpus is 1", INFO, CPU0, PAGES0,
	       { 0x20, 1, 0, g.pages, 256 });
	EXPECT("section 2 (type 0x20 id 0): 256 bytes, but 2 pages of 256", INFO, CPU0,
	       { 0x20, 0, 0, g.pages, 256 });
	EXPECT("section 2 (type 0x20 id 0): 256 bytes, but 2 pages of 256", INFO, CPU0,
	       { 0x20, 0, VMT_VSECT_ZSTD, g.pages, 256 });
	/* compressed INFO and CPU sections are fine too */
	EXPECT(NULL, { 0x01, 0, VMT_VSECT_ZSTD, g.info.data, g.info.len },
	       { 0x10, 0, VMT_VSECT_ZSTD, g.cpu.data, g.cpu.len }, PAGES0);

	/* a later version's section and records are skipped */
	x.len = 0;
	buf_append(&x, g.info.data, g.info.len);
	tlv_put(&x, 0x7f00, "future", 6);
	y.len = 0;
	tlv_put_u64(&y, 0x7f01, 1);
	buf_append(&y, g.cpu.data, g.cpu.len);
	EXPECT(NULL, { 0x01, 0, 0, x.data, x.len }, { 0x10, 0, 0, y.data, y.len }, PAGES0,
	       { 0x99, 3, 0, "new", 3 });

	/* INFO fields */
	x.len = 0;
	info_tlv(&x, "g1", 256, 1, 0x07);
	EXPECT("section 0 (type 0x1 id 0): no page_size (tag 0x7)", { 0x01, 0, 0, x.data, x.len }, CPU0, PAGES0);
	x.len = 0;
	info_tlv(&x, "g1", 300, 1, -1);
	EXPECT("section 0 (type 0x1 id 0): page size 300 is not a power of two in 256..65536",
	       { 0x01, 0, 0, x.data, x.len }, CPU0, PAGES0);
	x.len = 0;
	info_tlv(&x, "g1", 128, 1, -1);
	EXPECT("section 0 (type 0x1 id 0): page size 128 is not a power of two in 256..65536",
	       { 0x01, 0, 0, x.data, x.len }, CPU0, PAGES0);
	x.len = 0;
	info_tlv(&x, "g1", 256, 0, -1);
	EXPECT("section 0 (type 0x1 id 0): ncpus 0 not in 1..256", { 0x01, 0, 0, x.data, x.len }, CPU0, PAGES0);
	x.len = 0;
	info_tlv(&x, "g1", 256, 257, -1);
	EXPECT("section 0 (type 0x1 id 0): ncpus 257 not in 1..256", { 0x01, 0, 0, x.data, x.len }, CPU0, PAGES0);
	x.len = 0;
	info_tlv(&x, "../g1", 256, 1, -1);
	EXPECT("section 0 (type 0x1 id 0): bad guest name", { 0x01, 0, 0, x.data, x.len }, CPU0, PAGES0);
	x.len = 0;
	info_tlv(&x, "g1", 256, 1, 0x02);
	tlv_put(&x, 0x02, "a\x01", 2);
	EXPECT("section 0 (type 0x1 id 0): host (tag 0x2): bad value of 2 bytes",
	       { 0x01, 0, 0, x.data, x.len }, CPU0, PAGES0);
	x.len = 0;
	info_tlv(&x, "g1", 256, 1, 0x03);
	tlv_put_u64(&x, 0x03, 1);
	EXPECT("section 0 (type 0x1 id 0): aux_version (tag 0x3): bad value of 8 bytes",
	       { 0x01, 0, 0, x.data, x.len }, CPU0, PAGES0);
	x.len = 0;
	info_tlv(&x, "g1", 256, 1, -1);
	tlv_put_u64(&x, 0x05, 1);
	EXPECT("section 0 (type 0x1 id 0): created_ns (tag 0x5) appears twice",
	       { 0x01, 0, 0, x.data, x.len }, CPU0, PAGES0);
	x.len = 0;
	info_tlv(&x, "g1", 256, 1, -1);
	x.len -= 1;	/* the last record runs past the section */
	EXPECT("section 0 (type 0x1 id 0): bad record at offset 154", { 0x01, 0, 0, x.data, x.len },
	       CPU0, PAGES0);
	x.len = 0;
	{
		char longname[80];

		memset(longname, 'a', 65);
		longname[65] = 0;
		info_tlv(&x, longname, 256, 1, -1);
	}
	EXPECT("section 0 (type 0x1 id 0): guest (tag 0x1): bad value of 65 bytes",
	       { 0x01, 0, 0, x.data, x.len }, CPU0, PAGES0);

	/* CPU fields */
	y.len = 0;
	cpu_tlv(&y, 0, 2, 0x14);
	EXPECT("section 1 (type 0x10 id 0): no counters.events_guest_lost (tag 0x14)", INFO,
	       { 0x10, 0, 0, y.data, y.len }, PAGES0);
	y.len = 0;
	cpu_tlv(&y, 1, 2, -1);
	EXPECT("section 1 (type 0x10 id 0): cpu 1 in a section for cpu 0", INFO,
	       { 0x10, 0, 0, y.data, y.len }, PAGES0);
	y.len = 0;
	cpu_tlv(&y, 0, 2, -1);
	tlv_put(&y, 0x20, g.pages, 79);
	EXPECT("section 1 (type 0x10 id 0): bad or repeated guest stats (tag 0x20, 79 bytes)", INFO,
	       { 0x10, 0, 0, y.data, y.len }, PAGES0);
	y.len = 0;
	cpu_tlv(&y, 0, 2, -1);
	tlv_put(&y, 0x20, g.pages, 80);
	EXPECT(NULL, INFO, { 0x10, 0, 0, y.data, y.len }, PAGES0);
	tlv_put(&y, 0x20, g.pages, 80);
	EXPECT("section 1 (type 0x10 id 0): bad or repeated guest stats (tag 0x20, 80 bytes)", INFO,
	       { 0x10, 0, 0, y.data, y.len }, PAGES0);

	/* a section too big for its kind */
	{
		uint8_t *big = calloc(1, 2u << 20);

		EXPECT("section 1 (type 0x10 id 0): 65537 bytes, more than 65536", INFO,
		       { 0x10, 0, 0, big, 65537 }, PAGES0);
		free(big);
	}
#undef EXPECT
#undef INFO
#undef CPU0
#undef PAGES0
	buf_free(&x);
	buf_free(&y);
	good_free(&g);
}
END_TEST

/* Corrupt compressed pages with every CRC fixed: no crash, a clean answer. */
START_TEST(test_zstd_payload_fuzz)
{
	size_t len;
	uint8_t *b = small_sample(3, &len), *c = malloc(len);
	uint8_t *h = NULL;
	unsigned seed = 7;
	char why[256];

	/* the PAGES section of cpu 0 */
	for (uint32_t i = 0; (h = sect_hdr(b, len, i)); i++)
		if (get_le32(h) == 0x20 && get_le32(h + 4) == 0)
			break;
	ck_assert_ptr_nonnull(h);
	for (size_t i = 0; i < get_le64(h + 16); i++)
		for (int k = 0; k < 4; k++) {
			uint8_t *ch = c + (h - b);
			int r;

			memcpy(c, b, len);
			ch[40 + i] ^= (uint8_t)(k == 0 ? 0xff : rand_r(&seed) | 1);
			put_le32(ch + 12, crc32c(0, ch + 40, get_le64(ch + 16)));
			reseal(ch);
			r = read_mem(c, len, why, sizeof(why));
			ck_assert(r == 0 || r == -EBADMSG);
		}
	free(c);
	free(b);
}
END_TEST

#define Z VMT_FRAME_ZSTD
#define L VMT_FRAME_LZ4
#define N VMT_FRAME_NONE

/* What the reader says of a CPU's frames, and its pages byte for byte. */
static void assert_frames(const struct framed *m, const struct vmt_sample *r, uint32_t cpu, uint32_t nfr)
{
	const struct vmt_sample_cpu *x = &m->s->cpus[cpu], *y = &r->cpus[cpu];
	uint64_t bytes = 0;
	uint32_t codecs = 0;

	for (uint32_t k = 0; k < nfr; k++) {
		bytes += VMT_FRAME_HDR_SIZE + m->fr[cpu][k].len;
		codecs |= 1u << m->fr[cpu][k].h.codec;
	}
	ck_assert_uint_eq(y->frame_pages, x->frame_pages);
	ck_assert_uint_eq(y->frames_read, nfr);
	ck_assert_uint_eq(y->frames_refused, 0);
	ck_assert_uint_eq(y->pages_refused, 0);
	ck_assert_uint_eq(y->frame_bytes, bytes);
	ck_assert_uint_eq(y->frame_codecs, codecs);
}

/* Frames of each codec and of all three, with and without raw pages after
 * them: version 2, each CPU's frames then its PAGES, the pages back byte
 * for byte; what was read writes again raw and reads the same. */
START_TEST(test_frames_round_trip)
{
	static const uint32_t sets[][3] = { { Z, Z, Z }, { L, L, L }, { N, N, N }, { Z, L, N } };
	/* frames, pages in each, pages after them */
	static const uint32_t shapes[][3] = { { 3, 8, 5 }, { 4, 4, 0 }, { 1, 1, 1 } };

	for (size_t i = 0; i < ARRAY_SIZE(sets); i++)
		for (size_t k = 0; k < ARRAY_SIZE(shapes); k++)
			for (int level = 0; level <= 3; level += 3) {
				struct framed m;
				struct vmt_sample *r, *r2;
				size_t len;
				uint8_t *b;

				framed_make(&m, sets[i], shapes[k][0], shapes[k][1], shapes[k][2]);
				b = write_mem(m.s, level, 0, &len);
				ck_assert_uint_eq(get_le32(b + 8), VMT_SAMPLE_VERSION_FRAMES);
				r = read_ok(b, len);
				assert_same(m.s, r);
				for (uint32_t c = 0; c < 2; c++)
					assert_frames(&m, r, c, shapes[k][0]);
				ck_assert_uint_eq(r->nrefusals, 0);
				free(b);
				for (uint32_t c = 0; c < 2; c++)
					r->cpus[c].frame_pages = 0;
				b = write_mem(r, level, 0, &len);
				/* no frames, but the counters */
				ck_assert_uint_eq(get_le32(b + 8), VMT_SAMPLE_VERSION_FRAMES);
				r2 = read_ok(b, len);
				assert_same(m.s, r2);
				ck_assert_uint_eq(r2->cpus[0].frames_read, 0);
				sample_free(r2);
				sample_free(r);
				free(b);
				framed_free(&m);
			}
}
END_TEST

/* The sections of a version 2 sample, in the writer's order; its INFO reads alone. */
START_TEST(test_frames_section_order)
{
	static const uint32_t codecs[3] = { Z, L, N };
	static const uint32_t types[] = { 0x01, 0x10, 0x10, 0x21, 0x21, 0x20, 0x21, 0x21, 0x20, 0xffff };
	static const uint32_t ids[] = { 0, 0, 1, 0, 0, 0, 1, 1, 1, 9 };
	struct framed m;
	size_t len;
	uint8_t *b, *h;

	framed_make(&m, codecs, 2, 3, 1);
	b = write_mem(m.s, 3, 0, &len);
	{
		struct vmt_sample info;
		char why[256] = "";
		int fd = test_memfd("sample-test");

		ck_assert_int_eq(write_full(fd, b, len), 0);
		ck_assert_msg(sample_read_info_fd(fd, &info, why, sizeof(why)) == 0, "%s", why);
		ck_assert_str_eq(info.guest, m.s->guest);
		close(fd);
	}
	for (uint32_t i = 0; i < ARRAY_SIZE(types); i++) {
		h = sect_hdr(b, len, i);
		ck_assert_ptr_nonnull(h);
		ck_assert_uint_eq(get_le32(h), types[i]);
		ck_assert_uint_eq(get_le32(h + 4), ids[i]);
		if (types[i] == 0x21) {	/* as written, never compressed again */
			const struct vmt_sample_frame *fr = &m.fr[ids[i]][(i - 3) % 3];

			ck_assert_uint_eq(get_le32(h + 8), 0);
			ck_assert_uint_eq(get_le64(h + 16), VMT_FRAME_HDR_SIZE + fr->len);
			ck_assert_mem_eq(h + 40 + VMT_FRAME_HDR_SIZE, fr->payload, fr->len);
			ck_assert_uint_eq(get_le32(h + 40), fr->h.codec);
			ck_assert_uint_eq(get_le64(h + 48), fr->h.first_seq);
		}
	}
	free(b);
	framed_free(&m);
}
END_TEST

/* pages of cpu of m without those from seq first, n of them */
static void assert_pages_without(const struct framed *m, const struct vmt_sample *r, uint32_t cpu,
				 uint64_t first, uint32_t n)
{
	const struct vmt_sample_cpu *x = &m->s->cpus[cpu], *y = &r->cpus[cpu];
	size_t before = (size_t)(first - x->first_seq) * 4096;

	ck_assert_uint_eq(y->npages, x->npages - n);
	ck_assert_uint_eq(y->pages_refused, n);
	ck_assert(!memcmp(y->pages, x->pages, before));
	ck_assert(!memcmp(y->pages + before, x->pages + before + (size_t)n * 4096,
			  (size_t)y->npages * 4096 - before));
}

/* The refusal line of r's i-th refusal. */
static const char *refusal(const struct vmt_sample *r, uint32_t i)
{
	static char line[512];

	ck_assert_uint_lt(i, r->nrefusals);
	sample_refusal_text(&r->refusals[i], line, sizeof(line));
	return line;
}

/* A byte of a frame's payload spoiled on disk (its CRC no longer holds):
 * that frame is refused and said, the other frames and the PAGES read. */
START_TEST(test_corrupt_frame_refused)
{
	static const uint32_t codecs[3] = { Z, L, N };
	static const struct {
		uint32_t spoil[2];	/* frames of cpu 0 spoiled */
		uint32_t nspoil;
		uint64_t first;		/* pages left out */
		uint32_t n;
		const char *says;
	} cases[] = {
		{ { 1 }, 1, 108, 8, "cpu 0 frame 1: section 4 (type 0x21 id 0): data CRC mismatch; "
				    "its pages 108..115 (8) left out" },
		{ { 0 }, 1, 100, 8, "cpu 0 frame 0: section 3 (type 0x21 id 0): data CRC mismatch; "
				    "its pages 100..107 (8) left out" },
		{ { 3 }, 1, 124, 8, "cpu 0 frame 3: section 6 (type 0x21 id 0): data CRC mismatch; "
				    "its pages 124..131 (8) left out" },
		{ { 1, 2 }, 2, 108, 16, "cpu 0 frame 1: section 4 (type 0x21 id 0): data CRC mismatch; "
					"pages 108..123 (16) left out, held by it and the 1 refused frame(s) "
					"next to it" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct framed m;
		struct vmt_sample *r;
		size_t len;
		uint8_t *b;

		framed_make(&m, codecs, 4, 8, 3);
		b = write_mem(m.s, 3, 0, &len);
		for (uint32_t k = 0; k < cases[i].nspoil; k++) {
			uint8_t *h = sect_hdr(b, len, (uint32_t)frame_sect(b, len, 0, cases[i].spoil[k]));

			h[40 + VMT_FRAME_HDR_SIZE + 7] ^= 0x10;
		}
		r = read_ok(b, len);
		assert_pages_without(&m, r, 0, cases[i].first, cases[i].n);
		ck_assert_uint_eq(r->cpus[0].frames_read, 4 - cases[i].nspoil);
		ck_assert_uint_eq(r->cpus[0].frames_refused, cases[i].nspoil);
		ck_assert_uint_eq(r->cpus[1].npages, m.s->cpus[1].npages);
		ck_assert(!memcmp(r->cpus[1].pages, m.s->cpus[1].pages, (size_t)r->cpus[1].npages * 4096));
		ck_assert_uint_eq(r->nrefusals, cases[i].nspoil);
		ck_assert_str_eq(refusal(r, 0), cases[i].says);
		sample_free(r);
		free(b);
		framed_free(&m);
	}
}
END_TEST

/* A frame whose header lies, sealed with a right CRC (a writer's bug): the
 * frame is refused for what is wrong, the rest read. */
START_TEST(test_lying_frame_refused)
{
	static const uint32_t codecs[3] = { Z, L, N };
	static const struct {
		uint32_t frame, off, value;	/* a u32 of the frame's header set */
		bool sect_flags;		/* or the section stored "compressed" */
		uint64_t first;
		const char *says;
	} cases[] = {
		{ 1, 4, 7, false, 108, "cpu 0 frame 1: lz4: the block does not decode; its pages 108..115" },
		{ 0, 4, 9, false, 100, "cpu 0 frame 0: zstd payload of " },
		{ 0, 0, L, false, 100, "cpu 0 frame 0: lz4: " },
		{ 2, 0, Z, false, 116, "cpu 0 frame 2: not a zstd frame with its content size; "
				       "its pages 116..123" },
		{ 2, 4, 7, false, 116, "cpu 0 frame 2: off payload of 32768 bytes does not decode to "
				       "exactly 28672" },
		{ 1, 0, 9, false, 108, "cpu 0 frame 1: frame header with an unknown codec (codec 9, 8 pages" },
		{ 3, 4, 9, false, 124, "cpu 0 frame 3: its 9 pages run past the CPU's frame pages (8 left); "
				       "its pages 124..131 (8) left out" },
		{ 1, 0, 0, true, 108, "cpu 0 frame 1: section flags 0x1: a frame is never compressed again" },
	};

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct framed m;
		struct vmt_sample *r;
		size_t len;
		uint8_t *b, *h;

		framed_make(&m, codecs, 4, 8, 3);
		b = write_mem(m.s, 3, 0, &len);
		h = sect_hdr(b, len, (uint32_t)frame_sect(b, len, 0, cases[i].frame));
		if (cases[i].sect_flags)
			put_le32(h + 8, VMT_VSECT_ZSTD);
		else
			put_le32(h + 40 + cases[i].off, cases[i].value);
		reseal_data(h);
		r = read_ok(b, len);
		assert_pages_without(&m, r, 0, cases[i].first, 8);
		ck_assert_uint_eq(r->cpus[0].frames_refused, 1);
		ck_assert_uint_eq(r->cpus[1].npages, m.s->cpus[1].npages);
		ck_assert_msg(strstr(refusal(r, 0), cases[i].says) == refusal(r, 0), "case %zu: %s", i,
			      refusal(r, 0));
		sample_free(r);
		free(b);
		framed_free(&m);
	}
}
END_TEST

/* Every byte of every frame spoiled: as stored (the CRC catches it) the
 * frame is refused, and with the CRC made right the sample still reads. */
START_TEST(test_every_frame_byte)
{
	static const uint32_t codecs[3] = { Z, L, N };
	struct framed m;
	size_t len;
	uint8_t *b, *c;

	framed_make(&m, codecs, 3, 1, 1);
	b = write_mem(m.s, 0, 0, &len);
	c = malloc(len);
	for (uint32_t k = 0; k < 3; k++) {
		uint8_t *h = sect_hdr(b, len, (uint32_t)frame_sect(b, len, 1, k));
		size_t at = (size_t)(h - b);

		for (size_t i = 0; i < get_le64(h + 16); i++)
			for (int fix = 0; fix <= 1; fix++) {
				struct vmt_sample *r;

				memcpy(c, b, len);
				c[at + 40 + i] ^= 0xff;
				if (fix)
					reseal_data(c + at);
				r = read_ok(c, len);
				ck_assert_uint_eq(r->cpus[0].frames_read, 3);
				if (!fix) {
					ck_assert_uint_eq(r->cpus[1].frames_refused, 1);
					assert_pages_without(&m, r, 1, m.s->cpus[1].first_seq + k, 1);
				}
				sample_free(r);
			}
	}
	free(c);
	free(b);
	framed_free(&m);
}
END_TEST

/* A frame claiming 4096 pages of 64 KiB in a file of a few hundred bytes:
 * refused before any page memory is taken. */
START_TEST(test_frame_bounds)
{
	struct vmt_buf info = { 0 }, cpu = { 0 }, cpu1 = { 0 };
	uint8_t fb[VMT_FRAME_HDR_SIZE + 10] = { 0 }, *b;
	struct vmt_frame_hdr h = { .codec = Z, .npages = 4096, .first_seq = 3, .first_ts = 4, .last_ts = 5 };
	struct vmt_sample *r;
	char why[256];
	size_t len;

	info_tlv(&info, "g1", 65536, 1, -1);
	cpu_tlv(&cpu, 0, 4096, -1);
	tlv_put_u32(&cpu, 0x07, 4096);
	frame_hdr_put(fb, &h);
	{
		struct sect ss[] = {
			{ 0x01, 0, 0, info.data, info.len },
			{ 0x10, 0, 0, cpu.data, cpu.len },
			{ 0x21, 0, 0, fb, sizeof(fb) },
			{ 0x20, 0, 0, "", 0 },
		};
		b = craft(ss, 4, 2, &len);
	}
	r = read_ok(b, len);
	ck_assert_uint_eq(r->cpus[0].npages, 0);
	ck_assert_ptr_null(r->cpus[0].pages);
	ck_assert_uint_eq(r->cpus[0].pages_refused, 4096);
	ck_assert_str_eq(refusal(r, 0), "cpu 0 frame 0: 4096 pages of 65536 bytes cannot come from a zstd "
					"payload of 10 bytes; its pages 3..4098 (4096) left out");
	sample_free(r);
	free(b);

	/* CPU records claiming 2 x 64 GiB in frames: the file is refused */
	info.len = 0;
	info_tlv(&info, "g1", 65536, 2, -1);
	cpu.len = 0;
	cpu_tlv(&cpu, 0, 1u << 20, -1);
	tlv_put_u32(&cpu, 0x07, 1u << 20);
	cpu_tlv(&cpu1, 1, 1u << 20, -1);
	tlv_put_u32(&cpu1, 0x07, 1u << 20);
	{
		struct sect ss[] = {
			{ 0x01, 0, 0, info.data, info.len },
			{ 0x10, 0, 0, cpu.data, cpu.len },
			{ 0x10, 1, 0, cpu1.data, cpu1.len },
			{ 0x21, 0, 0, fb, sizeof(fb) },
			{ 0x20, 0, 0, "", 0 },
			{ 0x20, 1, 0, "", 0 },
		};
		b = craft(ss, 6, 2, &len);
	}
	ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "137438953472 bytes of pages, more than 68719476736");
	free(b);
	buf_free(&info);
	buf_free(&cpu);
	buf_free(&cpu1);
}
END_TEST

/* What makes a sample with frames invalid as a whole, and what does not. */
START_TEST(test_frames_consistency)
{
	struct good g;
	struct vmt_buf c2 = { 0 }, c1 = { 0 }, twice = { 0 };
	uint8_t one[VMT_FRAME_HDR_SIZE + 256], two[VMT_FRAME_HDR_SIZE + 512], *b;
	struct vmt_frame_hdr h = { .codec = N, .npages = 1, .first_seq = 3, .first_ts = 4, .last_ts = 5 };
	struct vmt_sample *r;
	char why[256];
	size_t len;

	good_init(&g);
	frame_hdr_put(one, &h);
	memcpy(one + VMT_FRAME_HDR_SIZE, g.pages, 256);
	h.npages = 2;
	frame_hdr_put(two, &h);
	memcpy(two + VMT_FRAME_HDR_SIZE, g.pages, 512);
	cpu_tlv(&c2, 0, 2, -1);
	tlv_put_u32(&c2, 0x07, 2);	/* both pages in frames */
	cpu_tlv(&c1, 0, 2, -1);
	tlv_put_u32(&c1, 0x07, 1);	/* one in a frame, one in PAGES */
	cpu_tlv(&twice, 0, 2, -1);
	tlv_put_u32(&twice, 0x07, 1);
	tlv_put_u32(&twice, 0x07, 1);
#define EXPECT(version, want, ...)                                                        \
	do {                                                                              \
		struct sect ss_[] = { __VA_ARGS__ };                                      \
		b = craft(ss_, ARRAY_SIZE(ss_), version, &len);                           \
		why[0] = 0;                                                               \
		if (want) {                                                               \
			ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);   \
			ck_assert_str_eq(why, (const char *)(want));                      \
		} else {                                                                  \
			ck_assert_msg(read_mem(b, len, why, sizeof(why)) == 0, "%s", why); \
		}                                                                         \
		free(b);                                                                  \
	} while (0)
#define INFO { 0x01, 0, 0, g.info.data, g.info.len }
#define CPU2 { 0x10, 0, 0, c2.data, c2.len }
#define CPU1 { 0x10, 0, 0, c1.data, c1.len }
#define NOPAGES { 0x20, 0, 0, "", 0 }
#define PAGE1 { 0x20, 0, 0, g.pages + 256, 256 }

	EXPECT(2, NULL, INFO, CPU2, { 0x21, 0, 0, two, sizeof(two) }, NOPAGES);
	EXPECT(2, NULL, INFO, CPU1, { 0x21, 0, 0, one, sizeof(one) }, PAGE1);
	EXPECT(2, NULL, INFO, CPU1, PAGE1, { 0x21, 0, 0, one, sizeof(one) });	/* any order */
	EXPECT(1, "section 2 (type 0x21 id 0): a FRAME section in a version 1 sample", INFO, CPU2,
	       { 0x21, 0, 0, two, sizeof(two) }, NOPAGES);
	EXPECT(2, "section 3 (type 0x21 id 1): cpu 1, but ncpus is 1", INFO, CPU2,
	       { 0x21, 0, 0, two, sizeof(two) }, { 0x21, 1, 0, two, sizeof(two) }, NOPAGES);
	EXPECT(2, "section 2 (type 0x20 id 0): 512 bytes, but 1 pages of 256", INFO, CPU1,
	       { 0x20, 0, 0, g.pages, 512 }, { 0x21, 0, 0, one, sizeof(one) });
	EXPECT(2, "cpu 0: its frames hold 1 pages, but its CPU record says 2", INFO,
	       CPU2, { 0x21, 0, 0, one, sizeof(one) }, NOPAGES);
	EXPECT(2, "cpu 0: its frames hold 0 pages, but its CPU record says 1", INFO,
	       CPU1, PAGE1);
	EXPECT(2, "section 1 (type 0x10 id 0): frame_pages (tag 0x7) appears twice", INFO,
	       { 0x10, 0, 0, twice.data, twice.len }, PAGE1, { 0x21, 0, 0, one, sizeof(one) });
	c2.len = 0;
	cpu_tlv(&c2, 0, 2, -1);
	tlv_put_u32(&c2, 0x07, 3);
	EXPECT(2, "section 1 (type 0x10 id 0): 3 of its 2 pages in frames", INFO, CPU2, NOPAGES);
#undef EXPECT
#undef INFO
#undef CPU2
#undef CPU1
#undef NOPAGES
#undef PAGE1

	/* the frame's page, then the PAGES one */
	{
		struct sect ss[] = { { 0x01, 0, 0, g.info.data, g.info.len }, { 0x10, 0, 0, c1.data, c1.len },
				     { 0x20, 0, 0, g.pages + 256, 256 }, { 0x21, 0, 0, one, sizeof(one) } };

		b = craft(ss, 4, 2, &len);
		r = read_ok(b, len);
		ck_assert_uint_eq(r->cpus[0].npages, 2);
		ck_assert_mem_eq(r->cpus[0].pages, g.pages, 512);
		sample_free(r);
		free(b);
	}
	buf_free(&c2);
	buf_free(&c1);
	buf_free(&twice);
	good_free(&g);
}
END_TEST

/* The writer refuses frames the reader would not read whole. */
START_TEST(test_frames_write_checks)
{
	static const uint32_t codecs[3] = { Z, L, N };
	struct framed m;
	int fd = test_memfd("sample-test");

	framed_make(&m, codecs, 3, 2, 1);
	ck_assert_int_eq(sample_write(fd, m.s, 0, 0), 0);
	m.s->cpus[0].frame_pages--;
	ck_assert_int_eq(sample_write(fd, m.s, 0, 0), -EINVAL);
	m.s->cpus[0].frame_pages++;
	m.fr[0][1].h.npages = 0;
	ck_assert_int_eq(sample_write(fd, m.s, 0, 0), -EINVAL);
	m.fr[0][1].h.npages = 2;
	m.fr[0][1].h.first_seq += 5;	/* seqs may jump (rejected pages, a new agent) */
	ck_assert_int_eq(sample_write(fd, m.s, 0, 0), 0);
	m.fr[0][1].h.first_seq -= 5;
	m.fr[1][2].len--;	/* a stored frame is exactly its pages */
	ck_assert_int_eq(sample_write(fd, m.s, 0, 0), -EINVAL);
	m.fr[1][2].len++;
	m.fr[1][0].len = 0;
	ck_assert_int_eq(sample_write(fd, m.s, 0, 0), -EINVAL);
	m.fr[1][0].len = 1;
	m.s->cpus[1].frames = NULL;
	ck_assert_int_eq(sample_write(fd, m.s, 0, 0), -EINVAL);
	close(fd);
	framed_free(&m);
}
END_TEST

START_TEST(test_publish_and_read_file)
{
	static const uint32_t npages[] = { 2, 1 };
	struct vmt_sample *s = make_sample(2, 4096, npages, 2, 2), *r;
	char *dir = test_mkdtemp("pub"), name[128], path[512], why[256];
	struct vmt_afile a;

	ck_assert_ptr_nonnull(dir);
	ck_assert_int_eq(sample_file_name(name, sizeof(name), s->guest, s->created_ns), 0);
	ck_assert_int_eq(afile_create(&a, dir, name), 0);
	ck_assert_int_eq(sample_write(a.fd, s, 3, 1), 0);
	ck_assert_int_eq(afile_commit(&a), 0);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	ck_assert_msg(sample_read(path, &r, why, sizeof(why)) == 0, "%s", why);
	assert_same(s, r);
	sample_free(r);
	test_rmtree(dir);
	free(dir);
	free_made(s);
}
END_TEST

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

START_TEST(test_enospc)
{
	static const uint32_t npages[] = { 64, 64 };
	struct vmt_sample *s = make_sample(2, 4096, npages, 1, 1);
	char *dir;
	struct vmt_afile a;

	if (!test_have_root()) {
		free_made(s);
		VMT_SKIP("needs root to mount a small tmpfs");
	}
	dir = test_mkdtemp("enospc");
	ck_assert_ptr_nonnull(dir);
	if (mount("tmpfs", dir, "tmpfs", 0, "size=64k") < 0) {
		test_rmtree(dir);
		free(dir);
		free_made(s);
		VMT_SKIP("cannot mount tmpfs: %s", strerror(errno));
	}
	for (uint32_t i = 0; i < 2; i++)
		for (size_t k = 0; k < 64 * 4096; k++)
			s->cpus[i].pages[k] = (uint8_t)(rand() >> 5);	/* incompressible */
	for (int level = 0; level <= 3; level += 3) {
		ck_assert_int_eq(afile_create(&a, dir, "g.vmts"), 0);
		ck_assert_int_eq(sample_write(a.fd, s, level, level ? 2 : 0), -ENOSPC);
		afile_abort(&a);
		ck_assert_int_eq(count_entries(dir), 0);	/* no file, no temporary */
	}
	umount2(dir, MNT_DETACH);
	test_rmtree(dir);
	free(dir);
	free_made(s);
}
END_TEST

START_TEST(test_names)
{
	struct tm tm = { .tm_year = 2026 - 1900, .tm_mon = 10, .tm_mday = 22, .tm_hour = 12,
			 .tm_min = 13, .tm_sec = 14 };
	uint64_t t = (uint64_t)timegm(&tm) * 1000000000ull + 123456789ull;
	char out[128];

	ck_assert_int_eq(sample_file_name(out, sizeof(out), "GUEST", t), 0);
	ck_assert_str_eq(out, "GUEST-20261122T121314.123456Z.vmts");
	ck_assert_int_eq(sample_file_name(out, sizeof(out), "vm1", 0), 0);
	ck_assert_str_eq(out, "vm1-19700101T000000.000000Z.vmts");
	ck_assert_int_eq(sample_file_name(out, 35, "GUEST", t), 0);
	ck_assert_int_eq(sample_file_name(out, 34, "GUEST", t), -ENAMETOOLONG);
	ck_assert_int_eq(sample_file_name(out, sizeof(out), "a/b", t), -EINVAL);
	ck_assert_int_eq(sample_file_name(out, sizeof(out), ".hidden", t), -EINVAL);
	ck_assert_int_eq(sample_file_name(out, sizeof(out), "", t), -EINVAL);

	ck_assert_str_eq(trigger_kind_name(VMT_TRIGGER_SIGNAL), "signal");
	ck_assert_str_eq(trigger_kind_name(VMT_TRIGGER_CONTROL), "control");
	ck_assert_str_eq(trigger_kind_name(VMT_TRIGGER_BPF), "bpf");
	ck_assert_str_eq(trigger_kind_name(VMT_TRIGGER_GUEST), "guest");
	ck_assert_str_eq(trigger_kind_name(VMT_TRIGGER_SHUTDOWN), "shutdown");
	ck_assert_str_eq(trigger_kind_name(VMT_TRIGGER_SILENCE), "silence");
	ck_assert_str_eq(trigger_kind_name(VMT_TRIGGER_LIBVIRT), "libvirt");
	ck_assert_str_eq(trigger_kind_name(0), "unknown");
	ck_assert_str_eq(trigger_kind_name(999), "unknown");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("sample");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_v1_unchanged);
	tcase_add_test(tc, test_task_tables);
	tcase_add_test(tc, test_big_with_workers);
	tcase_add_test(tc, test_edge_shapes);
	tcase_add_test(tc, test_max_triggers);
	tcase_add_test(tc, test_too_many_triggers_in_file);
	tcase_add_test(tc, test_sanitize_and_write_checks);
	tcase_add_test(tc, test_every_truncation);
	tcase_add_test(tc, test_every_truncation_on_disk);
	tcase_add_test(tc, test_every_byte_flip);
	tcase_add_test(tc, test_wrong_magic_and_version);
	tcase_add_test(tc, test_huge_raw_size);
	tcase_add_test(tc, test_total_bound);
	tcase_add_test(tc, test_consistency);
	tcase_add_test(tc, test_zstd_payload_fuzz);
	tcase_add_test(tc, test_frames_round_trip);
	tcase_add_test(tc, test_frames_section_order);
	tcase_add_test(tc, test_corrupt_frame_refused);
	tcase_add_test(tc, test_lying_frame_refused);
	tcase_add_test(tc, test_every_frame_byte);
	tcase_add_test(tc, test_frame_bounds);
	tcase_add_test(tc, test_frames_consistency);
	tcase_add_test(tc, test_frames_write_checks);
	tcase_add_test(tc, test_publish_and_read_file);
	tcase_add_test(tc, test_enospc);
	tcase_add_test(tc, test_names);
	suite_add_tcase(s, tc);
	return test_run_suite(s);
}
