/* SPDX-License-Identifier: MIT */
/*
 * tracedat: files written from real pages must decode, event for event, with
 * libtracecmd and with stock `trace-cmd report`; the section chain must be
 * exactly as documented; odd input must fail cleanly.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <trace-cmd.h>

#include "corpus.h"
#include "meta.h"
#include "testd.h"
#include "testutil.h"
#include "tracedat.h"
#include "util.h"

#define TRACE_CMD "/usr/bin/trace-cmd"
#define PAGE 4096u
#define CORPUS_EVENTS 139511u

static const char header_page[] =
	"\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
	"\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n"
	"\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n"
	"\tfield: char data;\toffset:16;\tsize:4080;\tsigned:1;\n";

/* ---- decoding with libtracecmd ---- */

struct tally {
	uint64_t cpu[CORPUS_MAX_CPUS];
	uint64_t total;
	struct tally_names names;
};

static int tally_cb(struct tracecmd_input *h, struct tep_record *rec, int cpu, void *data)
{
	struct tally *t = data;
	struct tep_event *e = tep_find_event_by_record(tracecmd_get_tep(h), rec);

	(void)cpu;
	if (rec->cpu >= 0 && rec->cpu < CORPUS_MAX_CPUS)
		t->cpu[rec->cpu]++;
	t->total++;
	tally_name(&t->names, e ? e->name : NULL);
	return 0;
}

/* Every record of the file, by CPU and by event name; trace id too. */
static int tally_file(const char *path, struct tally *t, uint64_t *trace_id)
{
	struct tracecmd_input *h = tracecmd_open(path, TRACECMD_FL_LOAD_NO_PLUGINS);
	int r;

	if (!h)
		return -1;
	if (trace_id)
		*trace_id = tracecmd_get_traceid(h);
	r = tracecmd_iterate_events(h, NULL, 0, tally_cb, t);
	tracecmd_close(h);
	return r;
}

/* Stock `trace-cmd report`: its exit code, and the lines of one event. */
static int report_run(const char *path, const char *event, uint64_t *lines)
{
	char cmd[PATH_MAX + 64], pat[80];
	char *line = NULL;
	size_t cap = 0;
	FILE *f;
	int st;

	snprintf(cmd, sizeof(cmd), TRACE_CMD " report -i '%s'", path);
	snprintf(pat, sizeof(pat), " %s:", event);
	*lines = 0;
	f = popen(cmd, "r");
	if (!f)
		return -1;
	while (getline(&line, &cap, f) > 0)
		*lines += strstr(line, pat) != NULL;
	free(line);
	st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- the section chain, read back by hand ---- */

struct layout {
	uint16_t ids[32];
	uint16_t flags[32];
	uint32_t descs[32];
	unsigned n;
	char strings[256];	/* an uncompressed STRINGS section */
	size_t strings_len;
	char compression[16];
	uint64_t options;	/* offset of the OPTIONS section */
	int options_index;	/* which of ids it is */
	char clock_text[256];	/* TRACECLOCK */
	char buffer_clock[64];	/* from BUFFER */
	uint32_t buffer_cpus;
	uint32_t cpucount;
	struct {
		uint32_t cpu;
		uint64_t offset, size;
		uint64_t pages;		/* uncompressed, counted over the chunks */
	} cpu[8];
};

static void layout_options(const uint8_t *p, uint64_t len, struct layout *l)
{
	for (uint64_t o = 0; o + 6 <= len;) {
		uint16_t id = get_le16(p + o);
		uint32_t sz = get_le32(p + o + 2);
		const uint8_t *d = p + o + 6;

		ck_assert_uint_le(o + 6 + sz, len);
		if (id == 4)
			snprintf(l->clock_text, sizeof(l->clock_text), "%.*s", (int)sz, d);
		if (id == 8)
			l->cpucount = get_le32(d);
		if (id == 3) {
			const char *name = (const char *)d + 8;
			const char *clock = name + strlen(name) + 1;

			const uint8_t *c = (const uint8_t *)clock + strlen(clock) + 1 + 8;

			snprintf(l->buffer_clock, sizeof(l->buffer_clock), "%s", clock);
			l->buffer_cpus = get_le32(c - 4);
			for (uint32_t i = 0; i < l->buffer_cpus && i < ARRAY_SIZE(l->cpu); i++) {
				l->cpu[i].cpu = get_le32(c + i * 20);
				l->cpu[i].offset = get_le64(c + i * 20 + 4);
				l->cpu[i].size = get_le64(c + i * 20 + 12);
			}
		}
		o += 6 + sz;
		if (id == 0) {
			ck_assert_uint_eq(o, len);	/* DONE ends the section */
			ck_assert_uint_eq(get_le64(d), 0);
		}
	}
}

static void layout_read(const char *path, struct layout *l)
{
	_cleanup_free_ char *buf = NULL;
	const uint8_t *p;
	size_t len, o;

	memset(l, 0, sizeof(*l));
	l->options_index = -1;
	ck_assert_int_eq(read_file(path, 1u << 30, &buf, &len), 0);
	p = (const uint8_t *)buf;
	/* magic, version "7", little endian, 8-byte longs, page size */
	ck_assert_int_eq(memcmp(p, "\x17\x08\x44tracing7\0\0\x08", 14), 0);
	ck_assert_uint_eq(get_le32(p + 14), PAGE);
	o = 18;
	snprintf(l->compression, sizeof(l->compression), "%s", (const char *)p + o);
	o += strlen((const char *)p + o) + 1;
	o += strlen((const char *)p + o) + 1;	/* compressor version */
	l->options = get_le64(p + o);
	o += 8;
	while (o < len) {
		uint64_t size;

		ck_assert_uint_le(o + 16, len);
		ck_assert_uint_lt(l->n, ARRAY_SIZE(l->ids));
		l->ids[l->n] = get_le16(p + o);
		l->flags[l->n] = get_le16(p + o + 2);
		l->descs[l->n] = get_le32(p + o + 4);
		size = get_le64(p + o + 8);
		ck_assert_uint_le(o + 16 + size, len);
		if (l->ids[l->n] == 15 && !l->flags[l->n] && size <= sizeof(l->strings)) {
			memcpy(l->strings, p + o + 16, size);
			l->strings_len = size;
		}
		if (o == l->options) {
			l->options_index = (int)l->n;
			layout_options(p + o + 16, size, l);
		}
		o += 16 + size;
		l->n++;
	}
	ck_assert_uint_eq(o, len);	/* the chain of sizes ends exactly at EOF */

	for (uint32_t i = 0; i < l->buffer_cpus && i < ARRAY_SIZE(l->cpu); i++) {
		uint64_t at = l->cpu[i].offset, end = at + l->cpu[i].size;

		ck_assert_uint_eq(at % PAGE, 0);
		ck_assert_uint_le(end, len);
		if (!strcmp(l->compression, "none")) {
			l->cpu[i].pages = l->cpu[i].size / PAGE;
			continue;
		}
		if (at == end)
			continue;
		/* u32 chunks, each u32 zsize, u32 size of whole pages, frame */
		uint32_t chunks = get_le32(p + at);
		at += 4;
		for (uint32_t k = 0; k < chunks; k++) {
			uint32_t zsize = get_le32(p + at), size = get_le32(p + at + 4);

			ck_assert_uint_eq(size % PAGE, 0);
			ck_assert_uint_le(size, 10 * PAGE);
			l->cpu[i].pages += size / PAGE;
			at += 8 + zsize;
			ck_assert_uint_le(at, end);
		}
		ck_assert_uint_eq(at, end);
	}
}

/* ---- writing ---- */

static int write_file(const char *path, const struct vmt_tracedat_input *in, char *why,
		      size_t why_len)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	int r;

	if (fd < 0)
		return -errno;
	r = tracedat_write(fd, in, why, why_len);
	close(fd);
	return r;
}

struct cpu_pages {
	uint8_t *data;
	const uint8_t **ptrs;
	size_t n;
	char *stats;
};

static void cpu_pages_load(struct cpu_pages *c, const char *dir, unsigned cpu)
{
	char path[PATH_MAX];
	size_t len;

	snprintf(path, sizeof(path), "%s/pages/cpu%u.raw", dir, cpu);
	ck_assert_int_eq(corpus_load_pages(path, PAGE, &c->data, &c->n), 0);
	c->ptrs = corpus_page_ptrs(c->data, c->n, PAGE);
	ck_assert_ptr_nonnull(c->ptrs);
	snprintf(path, sizeof(path), "%s/meta/per_cpu/cpu%u/stats", dir, cpu);
	if (read_file(path, 1 << 16, &c->stats, &len) < 0)
		c->stats = NULL;
}

static void cpu_pages_free(struct cpu_pages *c)
{
	free(c->data);
	free(c->ptrs);
	free(c->stats);
}

/* expected-event-counts.txt: "  COUNT name:" lines. */
static void corpus_expect(const char *dir, const struct tally *t)
{
	_cleanup_free_ char *text = NULL;
	char path[PATH_MAX];
	uint64_t sum = 0;
	unsigned names = 0;
	size_t len;

	snprintf(path, sizeof(path), "%s/expected-event-counts.txt", dir);
	ck_assert_int_eq(read_file(path, 1 << 20, &text, &len), 0);
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
		unsigned long long n;
		char name[64];

		if (sscanf(line, " %llu %63[^:]:", &n, name) != 2)
			continue;
		ck_assert_msg(tally_of(&t->names, name) == n, "%s: decoded %llu, expected %llu", name,
			      (unsigned long long)tally_of(&t->names, name), n);
		sum += n;
		names++;
	}
	ck_assert_uint_eq(sum, CORPUS_EVENTS);
	ck_assert_uint_eq(names, t->names.nev);	/* and no event that is not listed */
}

static void corpus_check(int zstd_level)
{
	const char *dir = test_corpus_dir();
	struct cpu_pages cp[2] = { 0 };
	struct vmt_tracedat_cpu cpus[2];
	struct vmt_buf bundle = { 0 };
	struct tally *t;
	struct layout l;
	char path[PATH_MAX], metadir[PATH_MAX], why[128];
	char *tmp;
	uint64_t id = 0, lines;

	if (!dir)
		VMT_SKIP("no corpus");
	t = calloc(1, sizeof(*t));
	snprintf(metadir, sizeof(metadir), "%s/meta", dir);
	ck_assert_int_eq(corpus_load_meta(metadir, &bundle), 0);
	for (unsigned i = 0; i < 2; i++) {
		cpu_pages_load(&cp[i], dir, i);
		cpus[i] = (struct vmt_tracedat_cpu){ .cpu = i, .pages = cp[i].ptrs,
						     .npages = cp[i].n, .stats = cp[i].stats };
	}
	ck_assert_uint_eq(cp[0].n, 546);
	ck_assert_uint_eq(cp[1].n, 761);
	tmp = test_mkdtemp("tdat");
	ck_assert_ptr_nonnull(tmp);
	snprintf(path, sizeof(path), "%s/trace.dat", tmp);

	struct vmt_tracedat_input in = {
		.meta = bundle.data, .meta_len = bundle.len, .page_size = PAGE, .ncpus = 2,
		.clock = NULL, .uname = "Linux guest 6.1.0-56-cloud-amd64 x86_64",
		.cpus = cpus, .nr_cpus = 2, .trace_id = 0x1234abcd5678ull, .zstd_level = zstd_level,
	};
	ck_assert_msg(write_file(path, &in, why, sizeof(why)) == 0, "%s", why);

	layout_read(path, &l);
	ck_assert_str_eq(l.compression, zstd_level ? "zstd" : "none");
	ck_assert_str_eq(l.buffer_clock, "global");	/* the one trace_clock marks */
	ck_assert_uint_eq(l.buffer_cpus, 2);
	ck_assert_uint_eq(l.cpucount, 2);
	ck_assert_uint_eq(l.cpu[0].pages, 546);
	ck_assert_uint_eq(l.cpu[1].pages, 761);

	ck_assert_int_eq(tally_file(path, t, &id), 0);
	ck_assert_uint_eq(id, 0x1234abcd5678ull);
	ck_assert_uint_eq(t->total, CORPUS_EVENTS);
	ck_assert_uint_eq(t->cpu[0], 58959);
	ck_assert_uint_eq(t->cpu[1], 80552);
	corpus_expect(dir, t);

	if (!access(TRACE_CMD, X_OK)) {
		ck_assert_int_eq(report_run(path, "sched_switch", &lines), 0);
		ck_assert_uint_eq(lines, tally_of(&t->names, "sched_switch"));
		ck_assert_uint_eq(lines, 12739);
	} else {
		printf("SKIP: %s: no %s, report not checked\n", __func__, TRACE_CMD);
	}

	test_rmtree(tmp);
	free(tmp);
	free(t);
	for (unsigned i = 0; i < 2; i++)
		cpu_pages_free(&cp[i]);
	buf_free(&bundle);
}

START_TEST(test_corpus_zstd)
{
	corpus_check(3);
}
END_TEST

START_TEST(test_corpus_none)
{
	corpus_check(0);
}
END_TEST

START_TEST(test_host_capture)
{
	const char *tracefs;
	struct cpu_pages cp[CORPUS_MAX_CPUS];
	struct vmt_tracedat_cpu cpus[CORPUS_MAX_CPUS];
	uint64_t expected[CORPUS_MAX_CPUS] = { 0 }, want = 0, lines;
	struct vmt_buf bundle = { 0 };
	struct tally *t;
	char path[PATH_MAX], why[128];
	unsigned ncpus = 0;
	char *tmp;
	int r;

	if (!test_have_root())
		VMT_SKIP("not root");
	tracefs = test_tracefs();
	if (!tracefs)
		VMT_SKIP("no tracefs");
	t = calloc(1, sizeof(*t));
	tmp = test_mkdtemp("tdat-host");
	ck_assert_ptr_nonnull(tmp);
	r = capture_host(tracefs, 1, tmp);
	ck_assert_msg(r == 0, "capture_host: %s", strerror(-r));

	snprintf(path, sizeof(path), "%s/expected", tmp);
	ck_assert_int_eq(corpus_read_expected(path, expected, &ncpus), 0);
	ck_assert_uint_gt(ncpus, 0);
	snprintf(path, sizeof(path), "%s/meta", tmp);
	ck_assert_int_eq(corpus_load_meta(path, &bundle), 0);
	for (unsigned i = 0; i < ncpus; i++) {
		cpu_pages_load(&cp[i], tmp, i);
		cpus[i] = (struct vmt_tracedat_cpu){ .cpu = i, .pages = cp[i].ptrs,
						     .npages = cp[i].n, .stats = cp[i].stats };
		want += expected[i];
	}
	ck_assert_uint_gt(want, 100);	/* a second of forks is never this quiet */

	struct vmt_tracedat_input in = {
		.meta = bundle.data, .meta_len = bundle.len, .page_size = PAGE, .ncpus = ncpus,
		.clock = "local", .cpus = cpus, .nr_cpus = ncpus, .zstd_level = 1,
	};
	snprintf(path, sizeof(path), "%s/trace.dat", tmp);
	ck_assert_msg(write_file(path, &in, why, sizeof(why)) == 0, "%s", why);
	ck_assert_int_eq(tally_file(path, t, NULL), 0);
	for (unsigned i = 0; i < ncpus; i++)
		ck_assert_msg(t->cpu[i] == expected[i], "cpu%u: decoded %llu, page walk %llu", i,
			      (unsigned long long)t->cpu[i], (unsigned long long)expected[i]);
	ck_assert_uint_eq(t->total, want);
	ck_assert_uint_gt(tally_of(&t->names, "sched_switch"), 0);
	if (!access(TRACE_CMD, X_OK)) {
		ck_assert_int_eq(report_run(path, "sched_switch", &lines), 0);
		ck_assert_uint_eq(lines, tally_of(&t->names, "sched_switch"));
	}

	for (unsigned i = 0; i < ncpus; i++)
		cpu_pages_free(&cp[i]);
	buf_free(&bundle);
	free(t);
	test_rmtree(tmp);
	free(tmp);
}
END_TEST

/* ---- malformed and edge input ---- */

static void bundle_minimal(struct vmt_buf *b, bool with_header_page)
{
	if (with_header_page)
		ck_assert_int_eq(meta_add(b, "events/header_page", header_page,
					  sizeof(header_page) - 1), 0);
	ck_assert_int_eq(meta_add(b, "trace_clock", "[local] global mono\n", 20), 0);
}

START_TEST(test_no_header_page)
{
	struct vmt_buf b = { 0 };
	struct vmt_tracedat_cpu cpu = { .cpu = 0 };
	struct vmt_tracedat_input in = { .page_size = PAGE, .ncpus = 1, .cpus = &cpu, .nr_cpus = 1 };
	char path[PATH_MAX], why[128];
	char *tmp = test_mkdtemp("tdat-bad");

	bundle_minimal(&b, false);
	in.meta = b.data;
	in.meta_len = b.len;
	snprintf(path, sizeof(path), "%s/trace.dat", tmp);
	ck_assert_int_eq(write_file(path, &in, why, sizeof(why)), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(why, "header_page"));
	in.meta = NULL;
	in.meta_len = 0;
	ck_assert_int_eq(write_file(path, &in, why, sizeof(why)), -EBADMSG);
	buf_free(&b);
	test_rmtree(tmp);
	free(tmp);
}
END_TEST

START_TEST(test_bad_input)
{
	struct vmt_buf b = { 0 };
	const uint8_t *none[1] = { NULL };
	struct vmt_tracedat_cpu cpu = { .cpu = 0 };
	struct vmt_tracedat_input in = { .page_size = PAGE, .cpus = &cpu, .nr_cpus = 1 };
	char path[PATH_MAX], why[128];
	char *tmp = test_mkdtemp("tdat-bad");
	int pfd[2];

	bundle_minimal(&b, true);
	in.meta = b.data;
	snprintf(path, sizeof(path), "%s/trace.dat", tmp);
	/* an entry cut short */
	in.meta_len = b.len - 3;
	ck_assert_int_eq(write_file(path, &in, why, sizeof(why)), -EBADMSG);
	in.meta_len = b.len;
	in.page_size = 3000;
	ck_assert_int_eq(write_file(path, &in, why, sizeof(why)), -EINVAL);
	in.page_size = PAGE;
	in.zstd_level = 1000;
	ck_assert_int_eq(write_file(path, &in, why, sizeof(why)), -EINVAL);
	in.zstd_level = 0;
	in.clock = "a b";
	ck_assert_int_eq(write_file(path, &in, why, sizeof(why)), -EINVAL);
	in.clock = NULL;
	cpu.pages = none;
	cpu.npages = 1;
	ck_assert_int_eq(write_file(path, &in, why, sizeof(why)), -EINVAL);
	cpu.npages = 0;
	struct vmt_tracedat_cpu two[2] = { { .cpu = 1 }, { .cpu = 1 } };
	in.cpus = two;
	in.nr_cpus = 2;
	ck_assert_int_eq(write_file(path, &in, why, sizeof(why)), -EINVAL);
	in.cpus = &cpu;
	in.nr_cpus = 1;
	/* a header_page that says nothing about the page */
	buf_free(&b);
	ck_assert_int_eq(meta_add(&b, "events/header_page", "garbage", 7), 0);
	in.meta = b.data;
	in.meta_len = b.len;
	ck_assert_int_eq(write_file(path, &in, why, sizeof(why)), -EBADMSG);
	/* offsets are patched in place: a pipe will not do */
	ck_assert_int_eq(pipe(pfd), 0);
	ck_assert_int_eq(tracedat_write(pfd[1], &in, NULL, 0), -ESPIPE);
	close(pfd[0]);
	close(pfd[1]);
	buf_free(&b);
	test_rmtree(tmp);
	free(tmp);
}
END_TEST

/* The same input gives the same bytes. */
static void file_same_twice(const char *path, const struct vmt_tracedat_input *in)
{
	_cleanup_free_ char *a = NULL;
	_cleanup_free_ char *b = NULL;
	char again[PATH_MAX + 8], why[128];
	size_t alen, blen;

	snprintf(again, sizeof(again), "%s.again", path);
	ck_assert_msg(write_file(again, in, why, sizeof(why)) == 0, "%s", why);
	ck_assert_int_eq(read_file(path, 1u << 30, &a, &alen), 0);
	ck_assert_int_eq(read_file(again, 1u << 30, &b, &blen), 0);
	ck_assert_uint_eq(alen, blen);
	ck_assert_int_eq(memcmp(a, b, alen), 0);
	unlink(again);
}

/* header_page comes from the guest: text that only looks like it must fail
 * cleanly, never crash. */
START_TEST(test_header_page_garbage)
{
	static const char *const texts[] = {
		"\tfield: u64 timestamp;\tsize:8;\n",	/* no offset */
		"timestamp;\tfield: offset:0;\tsize:8;\n",	/* name at the line start */
		"\tfield: char data;\toffset:16;\tsize:4080;\tsigned:1;",	/* alone */
		"",
	};
	struct vmt_tracedat_cpu cpu = { .cpu = 0 };
	struct vmt_tracedat_input in = { .page_size = PAGE, .cpus = &cpu, .nr_cpus = 1 };
	char path[PATH_MAX], why[128];
	char *tmp = test_mkdtemp("tdat-bad");

	snprintf(path, sizeof(path), "%s/trace.dat", tmp);
	for (size_t i = 0; i < ARRAY_SIZE(texts); i++) {
		struct vmt_buf b = { 0 };

		ck_assert_int_eq(meta_add(&b, "events/header_page", texts[i],
					  (uint32_t)strlen(texts[i])), 0);
		in.meta = b.data;
		in.meta_len = b.len;
		ck_assert_int_eq(write_file(path, &in, why, sizeof(why)), -EBADMSG);
		buf_free(&b);
	}
	test_rmtree(tmp);
	free(tmp);
}
END_TEST

/* One CPU without pages, a bundle without a single format: trace-cmd opens it. */
static void empty_check(int zstd_level)
{
	struct vmt_buf b = { 0 };
	struct vmt_tracedat_cpu cpu = { .cpu = 0 };
	struct vmt_tracedat_input in = { .page_size = PAGE, .ncpus = 1, .cpus = &cpu, .nr_cpus = 1,
					 .clock = "mono", .zstd_level = zstd_level };
	struct tally *t = calloc(1, sizeof(*t));
	struct layout l;
	static const uint16_t order[] = { 16, 17, 18, 19, 20, 21, 3, 0, 15 };
	char path[PATH_MAX], why[128];
	char *tmp = test_mkdtemp("tdat-empty");
	uint64_t lines;

	bundle_minimal(&b, true);
	in.meta = b.data;
	in.meta_len = b.len;
	snprintf(path, sizeof(path), "%s/trace.dat", tmp);
	ck_assert_msg(write_file(path, &in, why, sizeof(why)) == 0, "%s", why);

	layout_read(path, &l);
	ck_assert_uint_eq(l.n, ARRAY_SIZE(order));
	for (unsigned i = 0; i < l.n; i++) {
		ck_assert_uint_eq(l.ids[i], order[i]);
		/* everything but the options is compressed in a zstd file */
		ck_assert_uint_eq(l.flags[i], zstd_level && l.ids[i] != 0 ? 1 : 0);
	}
	ck_assert_int_eq(l.options_index, 7);
	if (!zstd_level) {
		static const char *const descs[] = {
			"headers", "ftrace events", "events format", "kallsyms", "printk",
			"command lines", "buffer flyrecord", "options", "strings",
		};

		for (unsigned i = 0; i < l.n; i++) {
			ck_assert_uint_lt(l.descs[i], l.strings_len);
			ck_assert_str_eq(l.strings + l.descs[i], descs[i]);
		}
	}
	ck_assert_str_eq(l.clock_text, "local global [mono]\n");
	ck_assert_str_eq(l.buffer_clock, "mono");
	ck_assert_uint_eq(l.buffer_cpus, 1);

	ck_assert_int_eq(tally_file(path, t, NULL), 0);
	ck_assert_uint_eq(t->total, 0);
	file_same_twice(path, &in);
	if (!access(TRACE_CMD, X_OK))
		ck_assert_int_eq(report_run(path, "sched_switch", &lines), 0);

	/* no CPUs at all, and no trace_clock: "[local]" */
	buf_free(&b);
	ck_assert_int_eq(meta_add(&b, "events/header_page", header_page, sizeof(header_page) - 1), 0);
	in.meta = b.data;
	in.meta_len = b.len;
	in.nr_cpus = 0;
	in.clock = NULL;
	ck_assert_msg(write_file(path, &in, why, sizeof(why)) == 0, "%s", why);
	layout_read(path, &l);
	ck_assert_str_eq(l.clock_text, "[local]\n");
	ck_assert_uint_eq(l.buffer_cpus, 0);
	if (!access(TRACE_CMD, X_OK))
		ck_assert_int_eq(report_run(path, "sched_switch", &lines), 0);

	buf_free(&b);
	free(t);
	test_rmtree(tmp);
	free(tmp);
}

START_TEST(test_empty_zstd)
{
	empty_check(1);
}
END_TEST

START_TEST(test_empty_none)
{
	empty_check(0);
}
END_TEST

static Suite *tracedat_suite(void)
{
	Suite *s = suite_create("tracedat");
	TCase *real = tcase_create("real pages");
	TCase *bad = tcase_create("odd input");

	/* trace-cmd report over 139,511 events takes a few seconds */
	tcase_set_timeout(real, 300);
	tcase_add_test(real, test_corpus_zstd);
	tcase_add_test(real, test_corpus_none);
	tcase_add_test(real, test_host_capture);
	tcase_set_timeout(bad, 60);
	tcase_add_test(bad, test_no_header_page);
	tcase_add_test(bad, test_bad_input);
	tcase_add_test(bad, test_header_page_garbage);
	tcase_add_test(bad, test_empty_zstd);
	tcase_add_test(bad, test_empty_none);
	suite_add_tcase(s, real);
	suite_add_tcase(s, bad);
	return s;
}

int main(void)
{
	return test_run_suite(tracedat_suite());
}
