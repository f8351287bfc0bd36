/* SPDX-License-Identifier: MIT */
/*
 * Integration: `vmtracectl report` on samples and an aux written from the
 * shared corpus's real pages and metadata. --stats must give exactly the
 * counts stock trace-cmd gave for the same pages (expected-event-counts.txt);
 * filters, overlapping samples, corrupt pages, unknown formats, several
 * guests on one time line, and a reader that goes away are checked against
 * those counts and against what page_walk() sees in the pages.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include "aux.h"
#include "corpus.h"
#include "frame.h"
#include "itest.h"
#include "meta.h"
#include "page.h"
#include "sample.h"
#include "testd.h"
#include "testutil.h"
#include "util.h"

#define PS 4096
#define NCPU 2

static const char *corpus;
static struct vmt_buf bundle;
static uint8_t *pages[NCPU];
static size_t npages[NCPU];
static char *expected;		/* expected-event-counts.txt */
static uint64_t expected_total;

/* ---- helpers -------------------------------------------------------------- */

/* What write_aux_edit() changes: in the entry named entry, from becomes to
 * (from NULL: the whole text). */
struct aux_edit {
	const char *entry, *from, *to;
};

/* An aux of the corpus's metadata, without the entry named drop (may be
 * NULL), with the edits in ed (ned of them) made. */
static uint64_t write_aux_edit(const char *dir, const char *guest, uint32_t version,
			       const char *drop, const struct aux_edit *ed, unsigned ned)
{
	struct vmt_buf b = { 0 };
	struct vmt_meta_entry e;
	struct vmt_aux a = { 0 };
	char path[4200], name[64];
	size_t pos = 0;
	int fd;

	while (meta_next(bundle.data, bundle.len, &pos, &e) > 0) {
		char *n = strndupa(e.name, e.name_len), *text = NULL;
		const void *data = e.data;
		size_t len = e.data_len;

		if (drop && !strcmp(n, drop))
			continue;
		for (unsigned i = 0; i < ned; i++) {
			char *at;
			size_t fl, tl = strlen(ed[i].to);

			if (strcmp(n, ed[i].entry))
				continue;
			if (!ed[i].from) {	/* the whole text */
				data = ed[i].to;
				len = tl;
				continue;
			}
			fl = strlen(ed[i].from);
			text = calloc(1, len + tl + 1);
			ck_assert_ptr_nonnull(text);
			memcpy(text, e.data, len);
			at = strstr(text, ed[i].from);
			ck_assert_msg(at != NULL, "%s: no '%s' to change", n, ed[i].from);
			memmove(at + tl, at + fl, len - (size_t)(at - text) - fl + 1);
			memcpy(at, ed[i].to, tl);
			data = text;
			len = len - fl + tl;
		}
		ck_assert_int_eq(meta_add(&b, n, data, len), 0);
		free(text);
	}
	snprintf(a.guest, sizeof(a.guest), "%s", guest);
	a.version = version;
	a.created_ns = 1795349594000000000ull;
	a.ncpus = NCPU;
	a.page_size = PS;
	snprintf(a.release, sizeof(a.release), "6.1.0-56-cloud-amd64");
	snprintf(a.clock, sizeof(a.clock), "local");
	snprintf(a.boot_id, sizeof(a.boot_id), "3f1c2e4a-9b7d-4c1e-8f00-0123456789ab");
	snprintf(a.agent, sizeof(a.agent), "vmtrace-agent test");
	a.meta = b.data;
	a.meta_len = b.len;
	a.id = aux_compute_id(&a);
	aux_file_name(name, sizeof(name), version);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(aux_write(fd, &a), 0);
	close(fd);
	buf_free(&b);
	return a.id;
}

struct range {
	size_t from[NCPU], count[NCPU];
};

/* Task tables the next write_sample() puts in its sample (then forgotten). */
static struct vmt_buf next_tasks;
/* and the reason of its one trigger, if not NULL (then forgotten) */
static const char *next_reason;

/* A sample of the corpus pages in rg (page copies, so a test may spoil them). */
static void write_sample(const char *path, const char *guest, uint32_t auxv, uint64_t aux_id,
			 uint64_t created, const struct range *rg, const struct vmt_clock_info *clock,
			 void (*spoil)(uint32_t cpu, uint8_t *pages, size_t n))
{
	struct vmt_sample s = { 0 };
	struct vmt_sample_cpu cpus[NCPU] = { 0 };
	int fd;

	snprintf(s.guest, sizeof(s.guest), "%s", guest);
	snprintf(s.host, sizeof(s.host), "testhost");
	s.aux_version = auxv;
	s.aux_id = aux_id;
	s.created_ns = created;
	s.page_size = PS;
	s.ncpus = NCPU;
	s.cpus = cpus;
	for (uint32_t c = 0; c < NCPU; c++) {
		cpus[c].cpu = c;
		cpus[c].npages = (uint32_t)rg->count[c];
		cpus[c].first_seq = rg->from[c];
		cpus[c].pages = malloc(rg->count[c] * PS + 1);
		ck_assert_ptr_nonnull(cpus[c].pages);
		memcpy(cpus[c].pages, pages[c] + rg->from[c] * PS, rg->count[c] * PS);
		if (spoil)
			spoil(c, cpus[c].pages, rg->count[c]);
	}
	if (clock) {
		s.have_clock = true;
		s.clock = *clock;
	}
	s.tasks = next_tasks.data;
	s.tasks_len = (uint32_t)next_tasks.len;
	if (next_reason) {
		s.ntriggers = 1;
		s.triggers[0].kind = VMT_TRIGGER_GUEST;
		snprintf(s.triggers[0].reason, sizeof(s.triggers[0].reason), "%s", next_reason);
		next_reason = NULL;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(sample_write(fd, &s, 3, 0), 0);
	close(fd);
	for (uint32_t c = 0; c < NCPU; c++)
		free(cpus[c].pages);
	buf_free(&next_tasks);
}

static uint64_t write_aux(const char *dir, const char *guest, uint32_t version, const char *drop)
{
	return write_aux_edit(dir, guest, version, drop, NULL, 0);
}

static struct range all_pages(void)
{
	struct range r = { .count = { npages[0], npages[1] } };
	return r;
}

static char *slurp_path(const char *path)
{
	char *s = NULL;
	size_t n;

	ck_assert_int_eq(read_file(path, 1u << 30, &s, &n), 0);
	return s;
}

#define FR_PAGES 16	/* pages in each frame of write_framed_sample() */

/* A sample of the corpus pages, the first 4 * FR_PAGES of each CPU in four
 * frames (zstd, lz4, zstd, lz4) as a compressed ring hands them to a dump;
 * all the others after them, or (frames_only) none. */
static void write_framed_sample(const char *path, uint64_t aux_id, bool frames_only)
{
	struct vmt_sample s = { .aux_version = 1, .aux_id = aux_id, .created_ns = 1000, .page_size = PS,
				.ncpus = NCPU };
	struct vmt_sample_cpu cpus[NCPU] = { 0 };
	struct vmt_sample_frame fr[NCPU][4];
	uint8_t *payload[NCPU][4];
	int fd;

	snprintf(s.guest, sizeof(s.guest), "g1");
	s.cpus = cpus;
	for (uint32_t c = 0; c < NCPU; c++) {
		for (uint32_t k = 0; k < 4; k++) {
			uint32_t codec = k % 2 ? VMT_FRAME_LZ4 : VMT_FRAME_ZSTD;
			struct vmt_frame_ctx *ctx = frame_ctx_new(codec, 1, FR_PAGES * PS);
			struct vmt_iovec in = { pages[c] + (size_t)k * FR_PAGES * PS, FR_PAGES * PS };
			ssize_t len;

			payload[c][k] = malloc(frame_bound(codec, in.len));
			len = frame_compress(ctx, &in, 1, payload[c][k], frame_bound(codec, in.len));
			ck_assert_int_gt(len, 0);
			frame_ctx_free(ctx);
			fr[c][k] = (struct vmt_sample_frame){
				.h = { .codec = codec, .npages = FR_PAGES, .first_seq = k * FR_PAGES },
				.payload = payload[c][k], .len = (uint32_t)len };
		}
		cpus[c] = (struct vmt_sample_cpu){ .cpu = c,
						   .npages = frames_only ? 4 * FR_PAGES : (uint32_t)npages[c],
						   .frame_pages = 4 * FR_PAGES, .frames = fr[c], .nframes = 4,
						   .pages = pages[c] + 4 * FR_PAGES * PS };
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(sample_write(fd, &s, 3, 0), 0);
	close(fd);
	for (uint32_t c = 0; c < NCPU; c++)
		for (uint32_t k = 0; k < 4; k++)
			free(payload[c][k]);
}

/* A byte of the payload of cpu 0's frame k spoiled on disk, its CRC left as it was. */
static void spoil_frame(const char *path, uint32_t k)
{
	char *b = slurp_path(path);
	struct stat st;
	size_t pos = 32;
	int fd;

	ck_assert_int_eq(stat(path, &st), 0);
	for (;;) {
		ck_assert_uint_le(pos + 40, (size_t)st.st_size);
		if (get_le32((uint8_t *)b + pos) == VMT_SAMPLE_SECT_FRAME && get_le32((uint8_t *)b + pos + 4) == 0 &&
		    k-- == 0)
			break;
		pos += 40 + get_le64((uint8_t *)b + pos + 16);
	}
	b[pos + 40 + 40 + 100] ^= 0x5a;
	fd = open(path, O_WRONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, b, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	free(b);
}

/* vmtracectl report ARGS in dir; its exit code, stdout and stderr (malloc'd). */
static int report(const char *dir, char **out, char **err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int report(const char *dir, char **out, char **err, const char *fmt, ...)
{
	char args[4096], cmd[20000], o[4200], e[4200];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(o, sizeof(o), "%s/out.txt", dir);
	snprintf(e, sizeof(e), "%s/err.txt", dir);
	snprintf(cmd, sizeof(cmd), "cd %s && %s/%s/vmtracectl report %s >%s 2>%s", dir, test_srcdir(),
		 test_builddir(), args, o, e);
	rc = system(cmd);
	*out = slurp_path(o);
	*err = slurp_path(e);
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

/* Sum of the "%7N NAME:" lines of a --stats output (lines starting with '#' skipped). */
static uint64_t stats_total(const char *out)
{
	uint64_t t = 0;

	for (const char *p = out; *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p))
		if (*p != '#')
			t += strtoull(p, NULL, 10);
	return t;
}

/* The count of one name in --stats output, 0 if absent. */
static uint64_t stats_of(const char *out, const char *name)
{
	char key[128];
	const char *p;

	snprintf(key, sizeof(key), " %s:\n", name);
	p = strstr(out, key);
	if (!p)
		return 0;
	while (p > out && p[-1] != '\n')
		p--;
	return strtoull(p, NULL, 10);
}

static size_t count_lines(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/*
 * Lines of s holding needle (at its start only, if at_start) and, if also
 * is not NULL, also before it. One pass over the lines: strstr() on the
 * rest of a report of megabytes, once per hit, is quadratic under ASan
 * (its strstr reads the whole rest each call): minutes for one case.
 */
static size_t count_line_hits(const char *s, const char *needle, bool at_start, const char *also)
{
	size_t n = 0, nl = strlen(needle);

	while (*s) {
		const char *end = strchr(s, '\n');
		size_t len = end ? (size_t)(end - s) : strlen(s);
		const char *hit = at_start ? (len >= nl && !memcmp(s, needle, nl) ? s : NULL)
					   : memmem(s, len, needle, nl);

		if (hit && (!also || memmem(s, (size_t)(hit - s) + 1, also, strlen(also))))
			n++;
		s += len + (end != NULL);
	}
	return n;
}

struct tcount {
	uint64_t t, before, after;
};

static int tcount_cb(uint64_t ts, uint32_t offset, uint32_t size, void *data)
{
	struct tcount *c = data;

	(void)offset;
	(void)size;
	if (ts < c->t)
		c->before++;
	else
		c->after++;
	return 0;
}

#define SETUP()                                                                 \
	char *dir, *out = NULL, *err = NULL, s1[4200];                          \
	uint64_t id;                                                            \
	if (!corpus)                                                            \
		VMT_SKIP("no corpus");                                          \
	dir = test_mkdtemp("report");                                          \
	id = write_aux(dir, "g1", 1, NULL);                                     \
	snprintf(s1, sizeof(s1), "%s/g1-1.vmts", dir)

#define TEARDOWN()                                                              \
	do {                                                                    \
		free(out);                                                      \
		free(err);                                                      \
		test_rmtree(dir);                                               \
		free(dir);                                                      \
	} while (0)

#define REPORT(...)                                                             \
	do {                                                                    \
		free(out);                                                      \
		free(err);                                                      \
		rc = report(dir, &out, &err, __VA_ARGS__);                      \
	} while (0)

/* ---- tests ---------------------------------------------------------------- */

START_TEST(stats_match_trace_cmd)
{
	struct range rg = all_pages();
	int rc;
	SETUP();

	write_sample(s1, "g1", 1, id, 1000, &rg, NULL, NULL);
	REPORT("--stats %s", s1);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	ck_assert_str_eq(out, expected);
	ck_assert_str_eq(err, "");
	TEARDOWN();
}
END_TEST

START_TEST(text_output)
{
	struct range rg = all_pages();
	const char *l;
	int rc;
	SETUP();

	write_sample(s1, "g1", 1, id, 1000, &rg, NULL, NULL);
	REPORT("%s", s1);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	ck_assert_uint_eq(count_lines(out), expected_total);
	ck_assert_ptr_null(strstr(out, "UNKNOWN"));
	/* kallsyms: the function pointer of hrtimer and timer events */
	ck_assert_ptr_nonnull(strstr(out, "function=tick_sched_timer"));
	ck_assert_ptr_nonnull(strstr(out, "hrtimer_expire_entry: hrtimer="));
	/* printk symbols and the trace-cmd layout */
	ck_assert_ptr_nonnull(strstr(out, "softirq_entry: vec=1 [action=TIMER]"));
	l = strstr(out, "sched_switch: prev_comm=");
	ck_assert_ptr_nonnull(l);
	while (l > out && l[-1] != '\n')
		l--;
	/* "            COMM-PID   [CPU]  SEC.USEC: sched_switch: ..." */
	{
		char comm[64], usec[16], name[64];
		unsigned cpu;
		uint64_t sec;

		ck_assert_int_eq(sscanf(l, " %63[^ ] [%u] %" SCNu64 ".%15[0-9]: %63[^:]:", comm, &cpu,
					&sec, usec, name), 5);
		ck_assert_ptr_nonnull(strchr(comm, '-'));
		ck_assert_uint_lt(cpu, NCPU);
		ck_assert_uint_eq(strlen(usec), 6);
		ck_assert_str_eq(name, "sched_switch");
		/* %16s-%-5d [%03d] */
		ck_assert_int_eq(l[16], '-');
		ck_assert_int_eq(l[23], '[');
		ck_assert_int_eq(l[27], ']');
	}
	ck_assert_msg(strstr(out, "[000]") && strstr(out, "[001]"), "both CPUs");
	/* one time line: seconds never go back */
	{
		/* by hand: the sanitizers' strstr() reads the whole rest each time */
		uint64_t last = 0;
		for (const char *p = out; *p;) {
			uint64_t t = 0;
			while (*p && *p != '\n' && !(p[0] == ']' && p[1] == ' '))
				p++;
			ck_assert_int_eq(*p, ']');
			for (p += 2; *p == ' '; p++)
				;
			for (; (*p >= '0' && *p <= '9') || *p == '.'; p++)
				if (*p != '.')
					t = t * 10 + (uint64_t)(*p - '0');
			ck_assert_msg(t >= last, "time goes back at %.100s", p);
			last = t;
			while (*p && *p != '\n')
				p++;
			if (*p)
				p++;
		}
	}
	TEARDOWN();
}
END_TEST

/* Lines whose task column is "<...>"; lines whose task name starts with prefix. */
static void count_names(const char *out, const char *prefix, size_t *unknown, size_t *prefixed)
{
	size_t pl = strlen(prefix);

	*unknown = *prefixed = 0;
	for (const char *p = out; *p;) {
		while (*p == ' ')
			p++;
		*unknown += !strncmp(p, "<...>-", 6);
		*prefixed += !strncmp(p, prefix, pl);
		p = strchr(p, '\n');
		p = p ? p + 1 : "";
	}
}

/*
 * Task names taken at the dump: with an aux file that has none, report
 * shows "<...>" for every task; a later sample of the same pages whose task
 * tables name them (all renamed "t-NAME" here) gives the names back, in
 * report and in the merged trace.dat, and as many lines stay unnamed as with
 * the names in the aux file.
 */
START_TEST(task_names_from_the_dump)
{
	struct range rg = all_pages();
	struct vmt_meta_entry e;
	struct vmt_buf renamed = { 0 };
	char *dir2, a1[4200], a2[4200], dat[4300], cmd[20000];
	size_t unknown_aux, unknown_none, unknown_dump, named, named_dat, unknown_dat, dummy;
	FILE *f;
	int rc;
	SETUP();

	/* with the names in the aux file */
	write_sample(s1, "g1", 1, id, 1000, &rg, NULL, NULL);
	REPORT("%s", s1);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	count_names(out, "t-", &unknown_aux, &dummy);

	/* an aux file without them, a sample without tables, one with */
	dir2 = test_mkdtemp("report-tasks");
	id = write_aux(dir2, "g1", 1, "saved_cmdlines");
	snprintf(a1, sizeof(a1), "%s/g1-1.vmts", dir2);
	snprintf(a2, sizeof(a2), "%s/g1-2.vmts", dir2);
	write_sample(a1, "g1", 1, id, 1000, &rg, NULL, NULL);
	ck_assert_int_eq(meta_find(bundle.data, bundle.len, "saved_cmdlines", &e), 0);
	for (const char *p = (const char *)e.data, *end = p + e.data_len; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *sp = memchr(p, ' ', (size_t)(end - p));

		nl = nl ? nl : end;
		if (sp && sp < nl) {
			buf_append(&renamed, p, (size_t)(sp - p) + 1);
			buf_append(&renamed, "t-", 2);
			buf_append(&renamed, sp + 1, (size_t)(nl - sp - 1));
			buf_append(&renamed, "\n", 1);
		}
		p = nl + 1;
	}
	ck_assert_int_eq(meta_add(&next_tasks, "saved_cmdlines", renamed.data, (uint32_t)renamed.len), 0);
	write_sample(a2, "g1", 1, id, 2000, &rg, NULL, NULL);
	free(out);
	free(err);
	rc = report(dir2, &out, &err, "%s", a1);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	count_names(out, "t-", &unknown_none, &dummy);
	free(out);
	free(err);
	rc = report(dir2, &out, &err, "%s %s", a1, a2);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	ck_assert_uint_eq(count_lines(out), expected_total);	/* the pages once */
	count_names(out, "t-", &unknown_dump, &named);
	ck_assert_msg(unknown_none > unknown_aux + 1000, "%zu unnamed lines without tables, %zu with the aux's",
		      unknown_none, unknown_aux);
	ck_assert_uint_eq(unknown_dump, unknown_aux);
	ck_assert_uint_gt(named, 1000);

	/* the merged file for trace-cmd */
	snprintf(dat, sizeof(dat), "%s/g1.dat", dir2);
	snprintf(cmd, sizeof(cmd), "%s/%s/vmtracectl merge -o %s %s %s >/dev/null 2>&1", test_srcdir(),
		 test_builddir(), dat, a1, a2);
	ck_assert_int_eq(system(cmd), 0);
	snprintf(cmd, sizeof(cmd), "trace-cmd report -i %s 2>/dev/null", dat);
	f = popen(cmd, "r");
	if (f) {
		struct vmt_buf text = { 0 };
		char buf[65536];
		size_t n;

		while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
			buf_append(&text, buf, n);
		buf_append(&text, "", 1);
		if (pclose(f) == 0 && text.len > 1) {
			count_names((const char *)text.data, "t-", &unknown_dat, &named_dat);
			ck_assert_msg(named_dat > 1000, "trace-cmd report: %zu lines named t-*", named_dat);
			printf("task_names_from_the_dump: trace-cmd report of the merge: %zu lines named from "
			       "the sample's tables, %zu <...>\n", named_dat, unknown_dat);
		}
		buf_free(&text);
	}
	printf("task_names_from_the_dump: %zu events; <...> lines: %zu with the aux's names, %zu with "
	       "none, %zu with the dump's tables (%zu lines named from them)\n",
	       (size_t)expected_total, unknown_aux, unknown_none, unknown_dump, named);
	buf_free(&renamed);
	test_rmtree(dir2);
	free(dir2);
	TEARDOWN();
}
END_TEST

START_TEST(filters)
{
	struct range rg = all_pages();
	struct vmt_page_layout l;
	struct tcount tc = { 0 };
	uint64_t first = UINT64_MAX, last = 0;
	char t[64];
	int rc;
	SETUP();

	write_sample(s1, "g1", 1, id, 1000, &rg, NULL, NULL);
	REPORT("--stats --cpu 1 %s", s1);
	ck_assert_int_eq(rc, 0);
	ck_assert_uint_eq(stats_total(out), 80552);
	REPORT("--stats --cpu 0 %s", s1);
	ck_assert_uint_eq(stats_total(out), 58959);
	REPORT("--stats --cpu 0-1 %s", s1);
	ck_assert_str_eq(out, expected);
	REPORT("--stats --cpu 0,5 %s", s1);
	ck_assert_uint_eq(stats_total(out), 58959);
	REPORT("--stats --cpu 1-0 %s", s1);
	ck_assert_int_eq(rc, 2);

	REPORT("--stats --event sched:sched_switch %s", s1);
	ck_assert_str_eq(out, "  12739 sched_switch:\n");
	REPORT("--stats --event sched_switch --event sched_waking %s", s1);
	ck_assert_str_eq(out, "  12739 sched_switch:\n   7355 sched_waking:\n");
	REPORT("--stats --event 'irq*' %s", s1);
	ck_assert_str_eq(out, "   1274 irq_handler_exit:\n   1274 irq_handler_entry:\n");
	REPORT("--stats --event 'irq:*' %s", s1);
	ck_assert_uint_eq(stats_total(out), 2 * 1274 + 9230 + 2 * 9148);
	REPORT("--stats --event 'timer:*' %s", s1);
	ck_assert_uint_eq(stats_total(out), 9570 + 6771 + 2 * 6769 + 1547 + 1544 + 1391 + 2 * 1038);
	REPORT("--stats --event 'sched:*' --cpu 1 --event nothing %s", s1);
	ck_assert_uint_eq(stats_of(out, "sched_switch") > 0, 1);
	ck_assert_uint_eq(stats_of(out, "hrtimer_init"), 0);

	/* --since/--until against the timestamps page_walk() sees */
	page_layout_default(&l, PS);
	for (unsigned c = 0; c < NCPU; c++)
		for (size_t i = 0; i < npages[c]; i++) {
			struct vmt_page_info info;
			if (page_scan(&l, pages[c] + i * PS, &info) == 0 && info.events) {
				first = VMT_MIN(first, info.first_ts);
				last = VMT_MAX(last, info.last_ts);
			}
		}
	tc.t = first + (last - first) / 3;
	for (unsigned c = 0; c < NCPU; c++)
		for (size_t i = 0; i < npages[c]; i++)
			page_walk(&l, pages[c] + i * PS, tcount_cb, &tc);
	ck_assert_uint_eq(tc.before + tc.after, expected_total);
	snprintf(t, sizeof(t), "%" PRIu64 ".%09" PRIu64, tc.t / 1000000000, tc.t % 1000000000);
	REPORT("--stats --since %s %s", t, s1);
	ck_assert_uint_eq(stats_total(out), tc.after);
	/* --until is inclusive: one ns before t */
	tc.t--;
	snprintf(t, sizeof(t), "%" PRIu64 ".%09" PRIu64, tc.t / 1000000000, tc.t % 1000000000);
	REPORT("--stats --until %s %s", t, s1);
	ck_assert_uint_eq(stats_total(out), tc.before);
	REPORT("--stats --since 1x %s", s1);
	ck_assert_int_eq(rc, 2);
	TEARDOWN();
}
END_TEST

START_TEST(overlapping_samples_count_once)
{
	struct range a = { .from = { 0, 0 }, .count = { 400, 500 } };
	struct range b = { .from = { 300, 400 }, .count = { npages[0] - 300, npages[1] - 400 } };
	char s2[4200];
	int rc;
	SETUP();

	write_sample(s1, "g1", 1, id, 1000, &a, NULL, NULL);
	snprintf(s2, sizeof(s2), "%s/g1-2.vmts", dir);
	write_sample(s2, "g1", 1, id, 2000, &b, NULL, NULL);
	REPORT("--stats %s %s", s2, s1);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	ck_assert_str_eq(out, expected);
	TEARDOWN();
}
END_TEST

/* A persistent ring buffer's copy of the same events: other pages (here
 * the same ones), each event's time read anew (here 1 us later). */
static void shift_1us(uint32_t cpu, uint8_t *p, size_t n)
{
	(void)cpu;
	for (size_t i = 0; i < n; i++)
		put_le64(p + i * PS, get_le64(p + i * PS) + 1000);
}

/*
 * A previous boot's buffer (its reason says so) overlapping the host's
 * window by 100 pages a CPU, its events 1 us off: identical-page dedupe
 * misses them; merge finds the host's last event in it by its bytes and
 * adds only what follows. Every event once: the stats of the whole corpus.
 */
START_TEST(prev_boot_buffer_adds_only_what_follows)
{
	struct range a = { .from = { 0, 0 }, .count = { 400, 500 } };
	struct range b = { .from = { 300, 400 }, .count = { npages[0] - 300, npages[1] - 400 } };
	char s2[4200];
	int rc;
	SETUP();

	write_sample(s1, "g1", 1, id, 1000, &a, NULL, NULL);
	snprintf(s2, sizeof(s2), "%s/g1-2.vmts", dir);
	next_reason = VMT_PREV_BOOT_REASON ": test";
	write_sample(s2, "g1", 1, id, 2000, &b, NULL, shift_1us);
	REPORT("--stats %s %s", s2, s1);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	ck_assert_str_eq(out, expected);
	TEARDOWN();
}
END_TEST

static uint64_t spoiled_events;

static void spoil_page_10(uint32_t cpu, uint8_t *p, size_t n)
{
	struct vmt_page_layout l;
	struct vmt_page_info info;

	if (cpu != 0 || n < 11)
		return;
	page_layout_default(&l, PS);
	ck_assert_int_eq(page_scan(&l, p + 10 * PS, &info), 0);
	spoiled_events = info.events;
	put_le64(p + 10 * PS + 8, PS * 2);	/* commit past the page */
}

START_TEST(corrupt_page_is_skipped)
{
	struct range rg = all_pages();
	int rc;
	SETUP();

	write_sample(s1, "g1", 1, id, 1000, &rg, NULL, spoil_page_10);
	ck_assert_uint_gt(spoiled_events, 0);
	REPORT("--stats %s", s1);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	ck_assert_uint_eq(stats_total(out), expected_total - spoiled_events);
	ck_assert_msg(strstr(err, "page 10") && count_lines(err) >= 1, "stderr: %s", err);
	REPORT("%s", s1);
	ck_assert_int_eq(rc, 0);
	ck_assert_uint_eq(count_lines(out), expected_total - spoiled_events);
	TEARDOWN();
}
END_TEST

static void flag_missed(uint32_t cpu, uint8_t *p, size_t n)
{
	if (cpu == 1 && n > 5)
		put_le64(p + 5 * PS + 8, get_le64(p + 5 * PS + 8) | VMT_PAGE_MISSED_EVENTS);
}

START_TEST(dropped_events_are_said)
{
	struct range rg = all_pages();
	const char *l;
	int rc;
	SETUP();

	write_sample(s1, "g1", 1, id, 1000, &rg, NULL, flag_missed);
	REPORT("%s", s1);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	ck_assert_uint_eq(count_lines(out), expected_total + 1);
	l = strstr(out, "\nCPU:1 [EVENTS DROPPED]\n");
	ck_assert_ptr_nonnull(l);
	ck_assert_ptr_nonnull(strstr(l + 1, "\n"));
	ck_assert_int_eq(strstr(l + 1, "\n")[1 + 26], '1');	/* the next line is CPU 1's: "[001]" */
	REPORT("--stats %s", s1);
	ck_assert_str_eq(out, expected);
	TEARDOWN();
}
END_TEST

struct garble {
	uint8_t *page;
	uint32_t x;
	bool keep_type;
	uint64_t events;
};

static int garble_cb(uint64_t ts, uint32_t offset, uint32_t size, void *data)
{
	struct garble *g = data;
	uint32_t h = get_le32(g->page + offset), start = offset + ((h & 0x1f) ? 4 : 8);

	(void)ts;
	g->events++;
	if (g->keep_type)
		start += 2;	/* common_type stays: the format reads garbage */
	for (uint32_t i = start; i < offset + size; i++) {
		g->x = g->x * 1103515245u + 12345u;
		g->page[i] = (uint8_t)(g->x >> 23);
	}
	return 0;
}

static uint64_t garbled_events;

/* Every event payload on cpu0's first 200 pages replaced by noise, headers kept. */
static void spoil_payloads(uint32_t cpu, uint8_t *p, size_t n)
{
	struct vmt_page_layout l;

	if (cpu != 0)
		return;
	page_layout_default(&l, PS);
	for (size_t i = 0; i < n && i < 200; i++) {
		struct garble g = { .page = p + i * PS, .x = (uint32_t)i, .keep_type = i % 4 != 0 };
		ck_assert_int_eq(page_walk(&l, g.page, garble_cb, &g), 0);
		garbled_events += g.events;
	}
}

START_TEST(garbage_payloads)
{
	struct range rg = all_pages();
	int rc;
	SETUP();

	write_sample(s1, "g1", 1, id, 1000, &rg, NULL, spoil_payloads);
	ck_assert_uint_gt(garbled_events, 1000);
	REPORT("--stats %s", s1);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	ck_assert_uint_eq(stats_total(out), expected_total);
	ck_assert_ptr_nonnull(strstr(out, "[UNKNOWN EVENT id "));
	REPORT("%s", s1);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	ck_assert_uint_eq(count_lines(out), expected_total);
	TEARDOWN();
}
END_TEST

/*
 * Formats a guest crafted: sched_switch with a field 2 GiB into its
 * record, irq_handler_entry's string made a __rel_loc (its offset then
 * points past the record). Neither may be read through its format: every
 * such event is shown as invalid and counted, the rest decode as before
 * (ASan would see a read out of bounds).
 */
/* In DIR/SUB, an aux with the edits in ed and a sample of every corpus
 * page that names it: their paths into auxp and sample. */
static void edited_pair(const char *dir, const char *sub, const struct aux_edit *ed,
			unsigned ned, char *auxp, size_t auxn, char *sample, size_t samplen)
{
	struct range rg = all_pages();
	char auxdir[2100];
	uint64_t id;

	snprintf(auxdir, sizeof(auxdir), "%s/%s", dir, sub);
	ck_assert_int_eq(mkdir(auxdir, 0755), 0);
	id = write_aux_edit(auxdir, "g1", 1, NULL, ed, ned);
	snprintf(auxp, auxn, "%s/aux-000001.vmtaux", auxdir);
	snprintf(sample, samplen, "%s/g1-1.vmts", auxdir);
	write_sample(sample, "g1", 1, id, 1000, &rg, NULL, NULL);
}

START_TEST(crafted_formats)
{
	static const struct aux_edit ed[] = {
		{ "events/sched/sched_switch/format", "offset:8;", "offset:2147483600;" },
		{ "events/irq/irq_handler_entry/format", "__data_loc char[] name", "__rel_loc char[] name" },
	};
	char auxp[2200], want[128];
	uint64_t sw, irq;
	int rc;
	SETUP();

	(void)id;
	sw = stats_of(expected, "sched_switch");
	irq = stats_of(expected, "irq_handler_entry");
	ck_assert(sw > 0 && irq > 0);
	edited_pair(dir, "crafted", ed, 2, auxp, sizeof(auxp), s1, sizeof(s1));
	REPORT("--aux %s %s", auxp, s1);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	ck_assert_uint_eq(count_lines(out), expected_total);
	{
		size_t bad_sw = count_line_hits(out, ": [invalid ", false, " sched_switch:");
		size_t bad_irq = count_line_hits(out, ": [invalid ", false, " irq_handler_entry:");

		ck_assert_msg(bad_sw == sw, "%zu of %llu sched_switch shown invalid", bad_sw,
			      (unsigned long long)sw);
		ck_assert_msg(bad_irq == irq, "%zu of %llu irq_handler_entry shown invalid", bad_irq,
			      (unsigned long long)irq);
	}
	snprintf(want, sizeof(want), "%llu event(s) not decoded", (unsigned long long)(sw + irq));
	ck_assert_msg(strstr(err, want) != NULL, "stderr: %s", err);
	/* the events the guest did not touch read as before */
	ck_assert_ptr_nonnull(strstr(out, " sched_wakeup: comm="));
	TEARDOWN();
}
END_TEST

/*
 * vmtracectl merge -o PATH where PATH is a symlink someone put there: the
 * symlink is replaced by the trace (mode 0600, as private as the samples),
 * and the file it pointed to is left as it was.
 */
START_TEST(merge_output_not_followed)
{
	struct range rg = all_pages();
	char victim[2100], link[2100], cmd[9000];
	struct stat st;
	char *after;
	int rc;
	SETUP();

	write_sample(s1, "g1", 1, id, 1000, &rg, NULL, NULL);
	snprintf(victim, sizeof(victim), "%s/victim", dir);
	snprintf(link, sizeof(link), "%s/out.dat", dir);
	ck_assert_int_eq(itest_write_file(victim, "keep me\n"), 0);
	ck_assert_int_eq(symlink(victim, link), 0);
	snprintf(cmd, sizeof(cmd), "%s/%s/vmtracectl merge -q -o %s %s >/dev/null 2>&1", test_srcdir(),
		 test_builddir(), link, s1);
	rc = system(cmd);
	ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "merge exit %d", rc);
	after = slurp_path(victim);
	ck_assert_str_eq(after, "keep me\n");
	free(after);
	ck_assert_int_eq(lstat(link, &st), 0);
	ck_assert_msg(S_ISREG(st.st_mode), "%s is not a regular file now", link);
	ck_assert_uint_eq(st.st_mode & 0777, 0600);
	ck_assert_uint_gt(st.st_size, 0);
	TEARDOWN();
}
END_TEST

/* The format of the fuzz regression input that crashed libtraceevent's
 * parser (a print fmt cut short): the text after its 2-byte length. */
static char *crashing_format(void)
{
	char path[4200];
	uint8_t *input;
	size_t n;
	char *text;
	int fd;

	snprintf(path, sizeof(path), "%s/tests/fuzz/regress/decode/print-fmt-cut-short", test_srcdir());
	fd = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	input = test_slurp(fd, &n);
	close(fd);
	ck_assert_uint_ge(n, 2);
	text = strndup((const char *)input + 2, get_le16(input));
	free(input);
	return text;
}

/*
 * A format text that crashes libtraceevent's own parser (found by
 * fuzz_decode: a print fmt cut short): report parses the formats in a child
 * first, leaves that one out and says so; its events show as unknown, the
 * rest decode.
 */
START_TEST(format_that_crashes_the_parser)
{
	static struct aux_edit ed[1] = { { "events/sched/sched_switch/format", NULL, NULL } };
	char auxp[2200], want[64], *text;
	uint64_t sw;
	int rc;
	SETUP();

	(void)id;
	text = crashing_format();
	ed[0].to = text;
	sw = stats_of(expected, "sched_switch");
	edited_pair(dir, "crash", ed, 1, auxp, sizeof(auxp), s1, sizeof(s1));
	REPORT("--stats --aux %s %s", auxp, s1);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	ck_assert_msg(strstr(err, "1 metadata entries crash libtraceevent's parser") != NULL,
		      "stderr: %s", err);
	ck_assert_uint_eq(stats_of(out, "[UNKNOWN EVENT id 314]"), sw);
	ck_assert_uint_eq(stats_total(out), expected_total);
	snprintf(want, sizeof(want), "sched_wakeup");
	ck_assert_uint_eq(stats_of(out, want), stats_of(expected, want));
	free(text);
	TEARDOWN();
}
END_TEST

/* In dir: vmtracectl merge -o DAT SAMPLE (its aux beside it); the exit
 * code, with stdout and stderr into *out and *err. */
static int merge_to(const char *dir, const char *dat, const char *sample, char **out, char **err)
{
	char cmd[20000], o[4200], e[4200];
	int rc;

	snprintf(o, sizeof(o), "%s/merge-out.txt", dir);
	snprintf(e, sizeof(e), "%s/merge-err.txt", dir);
	snprintf(cmd, sizeof(cmd), "cd %s && %s/%s/vmtracectl merge -o %s %s >%s 2>%s", dir,
		 test_srcdir(), test_builddir(), dat, sample, o, e);
	rc = system(cmd);
	*out = slurp_path(o);
	*err = slurp_path(e);
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

/*
 * A sample whose cpu 0 frame 1 was spoiled on disk: merge, report and info
 * say that frame was left out, and use the rest. merge exits 0; its
 * trace.dat has every page but those 16, and their events are all that is
 * missing; the pages are counted as missing, not as a gap.
 */
START_TEST(corrupt_frame_is_left_out)
{
	const char *said = "g1-1.vmts: cpu 0 frame 1: section 4 (type 0x21 id 0): data CRC mismatch; "
			   "its pages 16..31 (16) left out";
	struct vmt_page_layout l;
	uint64_t lost = 0, per_cpu[NCPU + 1] = { 0 }, total = 0;
	char dat[4300], want[128], cmd[20000];
	int rc;
	SETUP();

	page_layout_default(&l, PS);
	for (uint32_t p = FR_PAGES; p < 2 * FR_PAGES; p++) {
		struct vmt_page_info info;

		ck_assert_int_eq(page_scan(&l, pages[0] + (size_t)p * PS, &info), 0);
		lost += info.events;
	}
	ck_assert_uint_gt(lost, 0);
	write_framed_sample(s1, id, false);
	spoil_frame(s1, 1);

	rc = merge_to(dir, "t.dat", s1, &out, &err);
	ck_assert_msg(rc == 0, "merge exit %d: %s", rc, err);
	ck_assert_msg(strstr(err, said) != NULL, "stderr: %s", err);
	ck_assert_uint_eq(count_lines(err), 1);
	snprintf(want, sizeof(want), "  cpu0: %zu pages;", npages[0] - FR_PAGES);
	ck_assert_msg(strstr(out, want) != NULL, "stdout: %s", out);
	ck_assert_msg(strstr(out, "; 1 corrupt frame(s) refused, 16 pages missing") != NULL, "stdout: %s", out);
	ck_assert_msg(strstr(out, "gap") == NULL, "stdout: %s", out);
	snprintf(dat, sizeof(dat), "%s/t.dat", dir);
	ck_assert_int_eq(tdread_counts(dat, per_cpu, NCPU + 1, &total), 0);
	ck_assert_uint_eq(total, expected_total - lost);

	REPORT("--stats %s", s1);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	ck_assert_uint_eq(stats_total(out), expected_total - lost);
	ck_assert_msg(strstr(err, said + strlen("g1-1.vmts")) != NULL, "stderr: %s", err);

	free(out);
	snprintf(cmd, sizeof(cmd), "%s/%s/vmtracectl info %s > %s/info.txt", test_srcdir(), test_builddir(),
		 s1, dir);
	ck_assert_int_eq(system(cmd), 0);
	snprintf(cmd, sizeof(cmd), "%s/info.txt", dir);
	out = slurp_path(cmd);
	ck_assert_msg(strstr(out, "frames: 3 read, 48 pages in ") != NULL, "info: %s", out);
	ck_assert_msg(strstr(out, "zstd+lz4; 1 refused, 16 pages left out\n"
				  "          refused: cpu 0 frame 1: ") != NULL, "info: %s", out);
	ck_assert_msg(strstr(out, "frames: 4 read, 64 pages in ") != NULL, "info: %s", out);
	TEARDOWN();
}
END_TEST

/*
 * The last frame of a sample refused, the next sample starting right after
 * it: its pages are missing, but there is no gap between the samples.
 */
START_TEST(refused_frame_is_no_gap)
{
	struct range rg = { .from = { 4 * FR_PAGES, 4 * FR_PAGES },
			    .count = { npages[0] - 4 * FR_PAGES, npages[1] - 4 * FR_PAGES } };
	char s2[4200], want[128];
	int rc;
	SETUP();

	write_framed_sample(s1, id, true);
	spoil_frame(s1, 3);
	snprintf(s2, sizeof(s2), "%s/g1-2.vmts", dir);
	write_sample(s2, "g1", 1, id, 2000, &rg, NULL, NULL);
	rc = merge_to(dir, "t.dat", "g1-1.vmts g1-2.vmts", &out, &err);
	ck_assert_msg(rc == 0, "merge exit %d: %s", rc, err);
	ck_assert_msg(strstr(err, "cpu 0 frame 3: section 6 (type 0x21 id 0): data CRC mismatch; its "
				  "pages 48..63 (16) left out") != NULL, "stderr: %s", err);
	ck_assert_msg(strstr(err, "missing between") == NULL, "stderr: %s", err);
	ck_assert_msg(strstr(out, "gap") == NULL, "stdout: %s", out);
	snprintf(want, sizeof(want), "  cpu0: %zu pages;", npages[0] - FR_PAGES);
	ck_assert_msg(strstr(out, want) != NULL, "stdout: %s", out);
	ck_assert_msg(strstr(out, "; 1 corrupt frame(s) refused, 16 pages missing") != NULL, "stdout: %s", out);
	/* into a folder named with a trailing slash: files named with one
	 * slash, and a word on the host.dat these samples cannot give */
	free(out);
	free(err);
	rc = merge_to(dir, "outd//", "g1-1.vmts g1-2.vmts", &out, &err);
	ck_assert_msg(rc == 0, "merge exit %d: %s", rc, err);
	ck_assert_msg(strstr(out, "outd/g1.dat: guest") != NULL && !strstr(out, "outd//"), "stdout: %s", out);
	ck_assert_msg(strstr(out, "no host.dat: the samples hold no trace of the host's own") != NULL,
		      "stdout: %s", out);
	TEARDOWN();
}
END_TEST

/* trace-cmd report -i DAT in a child (libtraceevent parses what the guest
 * wrote: a crash must not take the test with it); its exit code, 128 +
 * signal, or -1 with no trace-cmd. stdout and stderr into *out and *err. */
static int trace_cmd_report(const char *dir, const char *dat, char **out, char **err)
{
	char cmd[20000], o[4200], e[4200];
	int rc;

	if (system("command -v trace-cmd >/dev/null 2>&1") != 0)
		return -1;
	snprintf(o, sizeof(o), "%s/tc-out.txt", dir);
	snprintf(e, sizeof(e), "%s/tc-err.txt", dir);
	snprintf(cmd, sizeof(cmd), "cd %s && trace-cmd report -i %s >%s 2>%s", dir, dat, o, e);
	rc = system(cmd);
	*out = slurp_path(o);
	*err = slurp_path(e);
	return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

/*
 * vmtracectl merge on the pairs of crafted_formats and
 * format_that_crashes_the_parser. merge copies the formats into the
 * trace.dat, where trace-cmd and KernelShark trust them (trace-cmd 3.1
 * dies of both): the format with a field 2 GiB in and the text that
 * crashes the parser are left out and said, every page is kept, and
 * trace-cmd report reads the file, showing those events as unknown and
 * the rest as before. Under the ASan build, merge reads nothing out of
 * bounds either.
 */
START_TEST(merge_crafted_formats)
{
	static const struct aux_edit crafted[] = {
		{ "events/sched/sched_switch/format", "offset:8;", "offset:2147483600;" },
		{ "events/irq/irq_handler_entry/format", "__data_loc char[] name", "__rel_loc char[] name" },
	};
	static struct aux_edit crash[1] = { { "events/sched/sched_switch/format", NULL, NULL } };
	char auxp[2200], dat[2200], s2[4200], want[256], *text;
	const char *said[2] = { "0 metadata entries crash libtraceevent's parser, 1 event format(s) "
				"have a field outside any record: left out of the trace",
				"1 metadata entry crash libtraceevent's parser, 0 event format(s) "
				"have a field outside any record: left out of the trace" };
	uint64_t sw, swake;
	int rc;
	SETUP();

	(void)id;
	text = crashing_format();
	crash[0].to = text;
	sw = stats_of(expected, "sched_switch");
	swake = stats_of(expected, "sched_wakeup");
	ck_assert(sw > 0 && swake > 0);
	edited_pair(dir, "crafted", crafted, 2, auxp, sizeof(auxp), s1, sizeof(s1));
	edited_pair(dir, "crash", crash, 1, auxp, sizeof(auxp), s2, sizeof(s2));
	for (int i = 0; i < 2; i++) {
		free(out);
		free(err);
		snprintf(dat, sizeof(dat), "%s/m%d.dat", dir, i);
		rc = merge_to(dir, dat, i ? s2 : s1, &out, &err);
		ck_assert_msg(rc == 0, "merge %d: exit %d: %s", i, rc, err);
		ck_assert_msg(strstr(err, said[i]) != NULL, "merge %d: stderr: %s", i, err);
		ck_assert_msg(strstr(out, "  formats: 1 left out (") != NULL, "merge %d: %s", i, out);
		snprintf(want, sizeof(want), "pages %zu (0 duplicates dropped), events %llu,",
			 npages[0] + npages[1], (unsigned long long)expected_total);
		ck_assert_msg(strstr(out, want) != NULL, "merge %d: %s", i, out);

		free(out);
		free(err);
		rc = trace_cmd_report(dir, dat, &out, &err);
		if (rc == -1) {
			out = err = NULL;
			printf("merge_crafted_formats: trace-cmd is not installed: the files merged are "
			       "not opened with it\n");
			continue;
		}
		ck_assert_msg(rc == 0, "trace-cmd report of merge %d: exit %d: %s", i, rc, err);
		/* "cpus=N", then one line an event */
		ck_assert_uint_eq(count_lines(out), expected_total + 1);
		ck_assert_ptr_null(strstr(out, " sched_switch:"));
		{
			size_t unknown = count_line_hits(out, "[UNKNOWN EVENT]", true, NULL);
			size_t wakeups = count_line_hits(out, " sched_wakeup: ", false, NULL);

			ck_assert_msg(unknown == sw, "merge %d: %zu unknown events, %llu sched_switch", i,
				      unknown, (unsigned long long)sw);
			ck_assert_uint_eq(wakeups, swake);
		}
	}
	free(text);
	TEARDOWN();
}
END_TEST

START_TEST(unknown_format)
{
	struct range rg = all_pages();
	char auxdir[2000], auxp[2100];
	uint64_t id2;
	int rc;
	SETUP();

	(void)id;
	snprintf(auxdir, sizeof(auxdir), "%s/other", dir);
	ck_assert_int_eq(mkdir(auxdir, 0755), 0);
	id2 = write_aux(auxdir, "g1", 1, "events/sched/sched_wakeup_new/format");
	snprintf(auxp, sizeof(auxp), "%s/aux-000001.vmtaux", auxdir);
	snprintf(s1, sizeof(s1), "%s/g1-1.vmts", auxdir);
	write_sample(s1, "g1", 1, id2, 1000, &rg, NULL, NULL);
	REPORT("--stats --aux %s %s", auxp, s1);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	ck_assert_msg(stats_of(out, "[UNKNOWN EVENT id 315]") == 2598, "%s", out);
	ck_assert_uint_eq(stats_of(out, "sched_wakeup_new"), 0);
	ck_assert_uint_eq(stats_total(out), expected_total);
	ck_assert_ptr_nonnull(strstr(err, "2598 event(s) of unknown format"));
	REPORT("%s", s1);
	ck_assert_int_eq(rc, 0);
	ck_assert_uint_eq(count_lines(out), expected_total);
	ck_assert_ptr_nonnull(strstr(out, ": [UNKNOWN EVENT id 315]\n"));
	TEARDOWN();
}
END_TEST

START_TEST(guests_on_one_time_line)
{
	struct range rg = all_pages();
	struct vmt_sync_point pt = { .guest_ts = 1, .offset = 1000000000000ll, .cpu = VMT_SYNC_ALL_CPUS, .probes = 1 };
	struct vmt_clock_info ci = { .method = VMT_SYNC_PTP, .npoints = 1, .points = &pt };
	char s2[4200], *nl;
	uint64_t id2;
	int rc;
	SETUP();

	snprintf(ci.guest_clock, sizeof(ci.guest_clock), "local");
	snprintf(ci.host_clock, sizeof(ci.host_clock), "mono");
	write_sample(s1, "g1", 1, id, 1000, &rg, NULL, NULL);
	id2 = write_aux(dir, "g2", 2, NULL);
	snprintf(s2, sizeof(s2), "%s/g2-1.vmts", dir);
	write_sample(s2, "g2", 2, id2, 1000, &rg, &ci, NULL);
	REPORT("--stats %s %s", s1, s2);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	ck_assert_uint_eq(stats_total(out), 4 * expected_total);	/* g1, g2, all */
	ck_assert_ptr_nonnull(strstr(out, "# g1\n"));
	ck_assert_ptr_nonnull(strstr(out, "# all\n  53630 sched_stat_runtime:\n"));
	REPORT("--stats --guest g2 %s %s", s1, s2);
	ck_assert_str_eq(out, expected);

	/* host time (the default with clock data): g2 is 1000 s later, after all of g1 */
	REPORT("%s %s", s1, s2);
	ck_assert_int_eq(rc, 0);
	ck_assert_uint_eq(count_lines(out), 2 * expected_total);
	ck_assert_ptr_nonnull(strstr(err, "g1: no clock data"));
	ck_assert_int_eq(strncmp(out, "g1 ", 3), 0);
	nl = out + strlen(out) - 1;
	while (nl > out && nl[-1] != '\n')
		nl--;
	ck_assert_int_eq(strncmp(nl, "g2 ", 3), 0);
	{
		char *mid = out;
		for (uint64_t i = 0; i < expected_total; mid++)
			i += *mid == '\n';
		ck_assert_int_eq(strncmp(mid, "g2 ", 3), 0);
		ck_assert_int_eq(strncmp(mid - 1 - 0, "\ng2", 3), 0);
	}
	/* raw time: the same clock, interleaved */
	REPORT("--raw-time %s %s | head -2", s1, s2);
	ck_assert_int_eq(strncmp(out, "g1 ", 3), 0);
	ck_assert_ptr_nonnull(strstr(out, "\ng2 "));
	TEARDOWN();
}
END_TEST

START_TEST(reader_goes_away)
{
	struct range rg = all_pages();
	char cmd[8192], *st;
	int rc;
	SETUP();

	write_sample(s1, "g1", 1, id, 1000, &rg, NULL, NULL);
	free(out);
	out = NULL;
	snprintf(cmd, sizeof(cmd),
		 "cd %s && bash -c '%s/%s/vmtracectl report %s 2>err.txt | head -n 3 >out.txt; "
		 "echo ${PIPESTATUS[0]} >status.txt'", dir, test_srcdir(), test_builddir(), s1);
	rc = system(cmd);
	ck_assert_int_eq(rc, 0);
	snprintf(cmd, sizeof(cmd), "%s/status.txt", dir);
	st = slurp_path(cmd);
	ck_assert_msg(atoi(st) == 0 || atoi(st) == 141, "status %s", st);
	free(st);
	snprintf(cmd, sizeof(cmd), "%s/err.txt", dir);
	err = slurp_path(cmd);
	ck_assert_str_eq(err, "");
	snprintf(cmd, sizeof(cmd), "%s/out.txt", dir);
	out = slurp_path(cmd);
	ck_assert_uint_eq(count_lines(out), 3);
	TEARDOWN();
}
END_TEST

START_TEST(bad_input)
{
	int rc;
	SETUP();

	(void)id;
	{
		FILE *f = fopen(s1, "w");
		ck_assert_ptr_nonnull(f);
		fputs("not a sample", f);
		fclose(f);
	}
	REPORT("--stats %s", s1);
	ck_assert_int_eq(rc, 1);
	ck_assert_ptr_nonnull(strstr(err, "g1-1.vmts"));
	REPORT("--stats");
	ck_assert_int_eq(rc, 2);
	TEARDOWN();
}
END_TEST

/* ---- bounded readers ------------------------------------------------------- */

/*
 * In dir, `vmtracectl ARGS` with stdout and stderr into *out and *err; its
 * exit code, and its peak RSS in KiB (getrusage of the child) into *rss_kb.
 */
static int run_rss(const char *dir, long *rss_kb, char **out, char **err, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static int run_rss(const char *dir, long *rss_kb, char **out, char **err, const char *fmt, ...)
{
	char args[8192], cmd[30000], o[4200], e[4200], bin[4200];
	const char *agent = getenv("VMT_AGENT"), *slash = agent ? strrchr(agent, '/') : NULL;
	struct rusage ru;
	va_list ap;
	pid_t pid;
	int st;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(o, sizeof(o), "%s/rss-out.txt", dir);
	snprintf(e, sizeof(e), "%s/rss-err.txt", dir);
	/* exec: the shell becomes vmtracectl, whose rusage wait4() gets; under
	 * ASan without its quarantine, which keeps what was freed resident */
	snprintf(bin, sizeof(bin), "%s/%s/vmtracectl", test_srcdir(), test_builddir());
	/*
	 * The build without sanitizers where there is one (beside VMT_AGENT):
	 * under ASan, the child that tries the formats on libtraceevent
	 * (decode_unsafe_entries()) peaks at ~280 MiB of the sanitizer's own,
	 * and wait4() counts the largest descendant: it would hide the pages.
	 */
	if (slash) {
		char plain[4200];

		char *abs;

		snprintf(plain, sizeof(plain), "%.*s/vmtracectl", (int)(slash - agent), agent);
		abs = realpath(plain, NULL);
		if (abs && access(abs, X_OK) == 0)
			snprintf(bin, sizeof(bin), "%s", abs);
		free(abs);
	}
	/*
	 * ru_maxrss counts a process's memory before its exec too: forked from
	 * this (large) test, vmtracectl would start at our size. setsid -f
	 * (small) forks the shell that becomes vmtracectl and exits at once,
	 * without reaping it; we, its subreaper, then wait for it as our only
	 * child. (A shell's own `cmd &` raced: dash may reap a quick child
	 * itself, and wait4() found none.)
	 */
	snprintf(cmd, sizeof(cmd), "cd %s && ASAN_OPTIONS=\"$ASAN_OPTIONS:quarantine_size_mb=0\" "
		 "exec %s %s >%s 2>%s </dev/null", dir, bin, args, o, e);
	ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		execlp("setsid", "setsid", "-f", "/bin/sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	pid = wait4(-1, &st, 0, &ru);
	ck_assert_msg(pid > 0, "vmtracectl was not ours to wait for: %s", strerror(errno));
	*rss_kb = ru.ru_maxrss;
	*out = slurp_path(o);
	*err = slurp_path(e);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#define BOMB_PS 65536u
#define BOMB_FRAME_PAGES 4096u	/* VMT_FRAME_MAX_PAGES: 256 MiB of zeros a frame */

/* A zstd frame (content size in its header) of n bytes of zeros, streamed:
 * the zeros are never in memory whole. ~8 KiB for 256 MiB. */
static uint8_t *zeros_frame(uint64_t n, size_t *len)
{
	static const uint8_t zero[1 << 20];
	ZSTD_CCtx *c = ZSTD_createCCtx();
	size_t cap = 1 << 20, pos = 0, left;
	uint8_t *out = malloc(cap);

	ck_assert_ptr_nonnull(c);
	ck_assert_ptr_nonnull(out);
	ck_assert(!ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(c, n)));
	for (uint64_t done = 0; done < n; done += sizeof(zero)) {
		ZSTD_inBuffer in = { zero, VMT_MIN(sizeof(zero), n - done), 0 };

		while (in.pos < in.size) {
			ZSTD_outBuffer ob = { out, cap, pos };

			ck_assert(!ZSTD_isError(ZSTD_compressStream2(c, &ob, &in, ZSTD_e_continue)));
			pos = ob.pos;
		}
	}
	do {
		ZSTD_inBuffer in = { NULL, 0, 0 };
		ZSTD_outBuffer ob = { out, cap, pos };

		left = ZSTD_compressStream2(c, &ob, &in, ZSTD_e_end);
		ck_assert(!ZSTD_isError(left));
		pos = ob.pos;
	} while (left);
	ZSTD_freeCCtx(c);
	*len = pos;
	return out;
}

/*
 * Bombs: a sample of one CPU whose nframes FRAME sections are each a zstd
 * frame of 256 MiB of zeros, or (nframes 0) whose PAGES section is 256 MiB
 * of zeros, zstd-compressed. Tiny files: what they decode to is not.
 */
static void write_bomb(const char *path, uint64_t aux_id, uint32_t nframes)
{
	static const uint8_t zero[1 << 20];
	struct vmt_sample s = { .aux_version = 1, .aux_id = aux_id, .created_ns = 500,
				.page_size = BOMB_PS, .ncpus = 1 };
	struct vmt_sample_cpu cpu = { 0 };
	struct vmt_sample_frame fr[4];
	struct vmt_iovec iov[256];
	size_t len;
	uint8_t *payload = nframes ? zeros_frame((uint64_t)BOMB_FRAME_PAGES * BOMB_PS, &len) : NULL;
	int fd;

	ck_assert_uint_le(nframes, 4);
	snprintf(s.guest, sizeof(s.guest), "g1");
	s.cpus = &cpu;
	for (uint32_t k = 0; k < nframes; k++)
		fr[k] = (struct vmt_sample_frame){
			.h = { .codec = VMT_FRAME_ZSTD, .npages = BOMB_FRAME_PAGES,
			       .first_seq = (uint64_t)k * BOMB_FRAME_PAGES },
			.payload = payload, .len = (uint32_t)len };
	for (size_t i = 0; i < ARRAY_SIZE(iov); i++)
		iov[i] = (struct vmt_iovec){ zero, sizeof(zero) };
	cpu.npages = nframes ? nframes * BOMB_FRAME_PAGES : (uint32_t)(sizeof(iov) / sizeof(iov[0]) *
								    sizeof(zero) / BOMB_PS);
	cpu.frame_pages = nframes * BOMB_FRAME_PAGES;
	cpu.frames = fr;
	cpu.nframes = nframes;
	if (!nframes) {
		cpu.iov = iov;
		cpu.niov = ARRAY_SIZE(iov);
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(sample_write(fd, &s, 3, 0), 0);
	close(fd);
	free(payload);
}

#define BOMB_RSS_MAX_KB (256 * 1024)

/*
 * A 17 KB sample whose two frames decode to 512 MiB, and one whose PAGES
 * section decodes to 256 MiB: info, report and merge refuse each, naming
 * the file and the section, before decoding (peak RSS under 256 MiB); a
 * good sample given with it is still reported and merged, and the exit
 * status says one was refused. --max-memory lets info read the frames.
 */
START_TEST(bombs_are_refused)
{
	static const char *const cmds[] = { "info", "report --stats", "merge -o out" };
	char fb[4200], pb[4200];
	struct stat st;
	long rss;
	int rc;
	SETUP();

	snprintf(fb, sizeof(fb), "%s/g1-frames.vmts", dir);
	snprintf(pb, sizeof(pb), "%s/g1-pages.vmts", dir);
	write_bomb(fb, id, 2);
	write_bomb(pb, id, 0);
	ck_assert_int_eq(stat(fb, &st), 0);
	ck_assert_int_lt(st.st_size, 64 * 1024);
	ck_assert_int_eq(stat(pb, &st), 0);
	ck_assert_int_lt(st.st_size, 64 * 1024);
	write_sample(s1, "g1", 1, id, 1000, &(struct range){ .count = { 50, 50 } }, NULL, NULL);
	for (size_t b = 0; b < 2; b++) {
		const char *bomb = b ? pb : fb, *sect = b ? "(type 0x20 id 0)" : "(type 0x21 id 0)";

		for (size_t i = 0; i < ARRAY_SIZE(cmds); i++) {
			/* the bomb alone: refused, nothing done */
			free(out);
			free(err);
			rc = run_rss(dir, &rss, &out, &err, "%s %s", cmds[i], bomb);
			ck_assert_msg(rc == 1, "%s %s: exit %d: %s", cmds[i], bomb, rc, err);
			ck_assert_msg(strstr(err, bomb) && strstr(err, sect) && strstr(err, "budget"),
				      "%s: %s", cmds[i], err);
			ck_assert_msg(rss <= BOMB_RSS_MAX_KB, "%s %s: peak RSS %ld KiB", cmds[i], bomb, rss);
			/* beside a good sample: that one is used, the status says one was refused */
			free(out);
			free(err);
			rc = run_rss(dir, &rss, &out, &err, "%s %s %s", cmds[i], bomb, s1);
			ck_assert_msg(rc == (i ? 3 : 1), "%s %s %s: exit %d: %s", cmds[i], bomb, s1, rc, err);
			ck_assert_msg(strstr(err, bomb) && strstr(err, sect), "%s: %s", cmds[i], err);
			ck_assert_msg(rss <= BOMB_RSS_MAX_KB, "%s %s %s: peak RSS %ld KiB", cmds[i], bomb, s1,
				      rss);
			ck_assert_msg(strstr(out, i == 1 ? "sched_switch" : "g1"), "%s: %s", cmds[i], out);
		}
	}
	/* the budget is the user's to raise: the frames read, one at a time */
	free(out);
	free(err);
	rc = run_rss(dir, &rss, &out, &err, "info --max-memory 600M %s", fb);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	ck_assert_ptr_nonnull(strstr(out, "frames: 2 read, 8192 pages"));
	free(out);
	free(err);
	out = err = NULL;
	rc = run_rss(dir, &rss, &out, &err, "info --max-memory x %s", fb);
	ck_assert_int_eq(rc, 2);
	TEARDOWN();
}
END_TEST

/*
 * merge works a guest boot's CPU at a time, each page held once: 20
 * samples of the same window cost no more than twice one, and give the
 * same trace.dat, byte for byte. Peak RSS is taken above that of merging a
 * sample without pages (the program, its libraries, the aux: large under
 * ASan), and one sample counts for at least its pages.
 */
START_TEST(merge_memory_does_not_grow_with_samples)
{
	struct range rg = all_pages(), none = { .count = { 0, 0 } };
	char *many = calloc(20, 4200), path[4200], *one_dat, *many_dat;
	long rss0, rss1, rss20, one;
	size_t l1, l20;
	int rc;
	SETUP();

	ck_assert_ptr_nonnull(many);
	snprintf(path, sizeof(path), "%s/g1-0.vmts", dir);
	write_sample(path, "g1", 1, id, 999, &none, NULL, NULL);
	rc = run_rss(dir, &rss0, &out, &err, "merge -q -o zero.dat %s", path);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	write_sample(s1, "g1", 1, id, 1000, &rg, NULL, NULL);
	strcat(many, s1);
	for (int i = 2; i <= 20; i++) {
		snprintf(path, sizeof(path), "%s/g1-%d.vmts", dir, i);
		write_sample(path, "g1", 1, id, 1000 + (uint64_t)i, &rg, NULL, NULL);
		strcat(many, " ");
		strcat(many, path);
	}
	free(out);
	free(err);
	rc = run_rss(dir, &rss1, &out, &err, "merge -q -o one.dat %s", s1);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	free(out);
	free(err);
	rc = run_rss(dir, &rss20, &out, &err, "merge -q -o many.dat %s", many);
	ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
	one = VMT_MAX(rss1 - rss0, (long)((npages[0] + npages[1]) * PS / 1024));
	printf("merge_memory_does_not_grow_with_samples: peak RSS %ld KiB without pages, +%ld KiB for "
	       "1 sample, +%ld KiB for 20 (%.2fx, at most 2x of %ld)\n", rss0, rss1 - rss0,
	       rss20 - rss0, (double)(rss20 - rss0) / (double)one, one);
	ck_assert_msg(rss20 - rss0 <= 2 * one, "peak RSS +%ld KiB for 20 samples, +%ld KiB for one",
		      rss20 - rss0, one);
	/* under ASan a fixed cost of its own hides the pages in the ratio: the
	 * 19 samples more must not cost as much as one sample's pages either */
	ck_assert_msg(rss20 - rss1 <= (long)((npages[0] + npages[1]) * PS / 1024),
		      "peak RSS %ld KiB for 20 samples, %ld KiB for one", rss20, rss1);
	snprintf(path, sizeof(path), "%s/one.dat", dir);
	ck_assert_int_eq(read_file(path, 1u << 30, &one_dat, &l1), 0);
	snprintf(path, sizeof(path), "%s/many.dat", dir);
	ck_assert_int_eq(read_file(path, 1u << 30, &many_dat, &l20), 0);
	ck_assert_uint_eq(l1, l20);
	ck_assert(!memcmp(one_dat, many_dat, l1));
	free(one_dat);
	free(many_dat);
	free(many);
	TEARDOWN();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("report");
	TCase *t = tcase_create("report");
	char path[4200], *p;
	int rc;

	corpus = test_corpus_dir();
	if (corpus) {
		snprintf(path, sizeof(path), "%s/meta", corpus);
		if (corpus_load_meta(path, &bundle) < 0)
			corpus = NULL;
		for (unsigned c = 0; corpus && c < NCPU; c++) {
			snprintf(path, sizeof(path), "%s/pages/cpu%u.raw", corpus, c);
			if (corpus_load_pages(path, PS, &pages[c], &npages[c]) < 0)
				corpus = NULL;
		}
		snprintf(path, sizeof(path), "%s/expected-event-counts.txt", corpus ? corpus : ".");
		size_t n;
		if (corpus && read_file(path, 1u << 20, &expected, &n) < 0)
			corpus = NULL;
		for (p = expected; p && *p; p = strchr(p, '\n') + 1)
			expected_total += strtoull(p, NULL, 10);
	}
	printf("input: %s\n", corpus ? corpus : "none (tests skip)");
	tcase_add_test(t, stats_match_trace_cmd);
	tcase_add_test(t, text_output);
	tcase_add_test(t, task_names_from_the_dump);
	tcase_add_test(t, filters);
	tcase_add_test(t, overlapping_samples_count_once);
	tcase_add_test(t, prev_boot_buffer_adds_only_what_follows);
	tcase_add_test(t, corrupt_page_is_skipped);
	tcase_add_test(t, unknown_format);
	tcase_add_test(t, garbage_payloads);
	tcase_add_test(t, corrupt_frame_is_left_out);
	tcase_add_test(t, refused_frame_is_no_gap);
	tcase_add_test(t, dropped_events_are_said);
	tcase_add_test(t, guests_on_one_time_line);
	tcase_add_test(t, reader_goes_away);
	tcase_add_test(t, bad_input);
	tcase_add_test(t, crafted_formats);
	tcase_add_test(t, merge_output_not_followed);
	tcase_add_test(t, format_that_crashes_the_parser);
	tcase_add_test(t, merge_crafted_formats);
	tcase_add_test(t, bombs_are_refused);
	tcase_add_test(t, merge_memory_does_not_grow_with_samples);
	tcase_set_timeout(t, 300);
	suite_add_tcase(s, t);
	rc = test_run_suite(s);
	buf_free(&bundle);
	for (unsigned c = 0; c < NCPU; c++)
		free(pages[c]);
	free(expected);
	return rc;
}
