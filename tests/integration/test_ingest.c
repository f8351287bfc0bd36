/* SPDX-License-Identifier: MIT */
/*
 * Integration: real ftrace pages (captured from this machine's tracefs at
 * test time, or the shared corpus as a fallback) fed to a running vmtraced
 * through FIFO pairs and unix sockets by a stand-in guest; dumped with
 * vmtracectl or SIGUSR1; merged; decoded with libtracecmd. The events that
 * come out must be exactly those of the pages in the window.
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "corpus.h"
#include "frame.h"
#include "fakeguest.h"
#include "page.h"
#include "sample.h"
#include "testd.h"
#include "testutil.h"
#include "util.h"

#define PS 4096
#define MAXC 8

/* the input, prepared once in main() */
static struct vmt_buf bundle;
static uint8_t *pages[MAXC];
static size_t npages[MAXC];
static unsigned ncpus;
static const char *source = "none";

static uint64_t events_of(const uint8_t *p, size_t n)
{
	struct vmt_page_layout l;
	uint64_t e = 0;

	page_layout_default(&l, PS);
	for (size_t i = 0; i < n; i++) {
		struct vmt_page_info info;
		if (page_scan(&l, p + i * PS, &info) == 0)
			e += info.events;
	}
	return e;
}

static int load_dir(const char *dir)
{
	char path[4200];

	buf_free(&bundle);
	snprintf(path, sizeof(path), "%s/meta", dir);
	if (corpus_load_meta(path, &bundle) < 0)
		return -1;
	for (ncpus = 0; ncpus < MAXC; ncpus++) {
		snprintf(path, sizeof(path), "%s/pages/cpu%u.raw", dir, ncpus);
		if (access(path, R_OK))
			break;
		if (corpus_load_pages(path, PS, &pages[ncpus], &npages[ncpus]) < 0)
			return -1;
	}
	return ncpus ? 0 : -1;
}

static void prepare_input(void)
{
	const char *tfs = test_tracefs();
	char *tmp;

	if (test_have_root() && tfs && (tmp = test_mkdtemp("capture"))) {
		if (capture_host(tfs, 2, tmp) == 0 && load_dir(tmp) == 0) {
			/* a quiet machine may give one CPU nothing: the corpus is better then */
			int ok = 1;
			for (unsigned c = 0; c < ncpus; c++)
				ok &= npages[c] >= 4;
			if (ok) {
				source = "this machine's tracefs";
				test_rmtree(tmp);
				free(tmp);
				return;
			}
		}
		test_rmtree(tmp);
		free(tmp);
	}
	if (test_corpus_dir() && load_dir(test_corpus_dir()) == 0)
		source = "shared corpus";
	else
		ncpus = 0;
}

struct run {
	char *dir;
	struct fakeguest fg;
	struct fakeguest_conf fc;
	struct testd d;
	char chan[300];
};

static void run_start(struct run *r, int sockets, const char *record_yaml, uint32_t chunk)
{
	char body[2048];

	memset(r, 0, sizeof(*r));
	r->dir = test_mkdtemp("ingest");
	ck_assert_ptr_nonnull(r->dir);
	snprintf(r->chan, sizeof(r->chan), "%s/chan", r->dir);
	r->fc = (struct fakeguest_conf){ .dir = r->chan, .sockets = sockets, .ncpus = ncpus,
					 .page_size = PS, .bundle = bundle.data,
					 .bundle_len = bundle.len, .chunk = chunk };
	for (unsigned c = 0; c < ncpus; c++) {
		r->fc.pages[c] = pages[c];
		r->fc.npages[c] = npages[c];
	}
	snprintf(body, sizeof(body),
		 "record:\n  flush_timeout: 5000ms\n%s"
		 "guests:\n  - name: g1\n    path: %s\n    transport: %s\n",
		 record_yaml ? record_yaml : "", r->chan, sockets ? "socket" : "fifo");
	/* the channels exist first, as QEMU's do when a guest is configured */
	ck_assert_int_eq(fakeguest_start(&r->fg, &r->fc), 0);
	ck_assert_int_eq(testd_start(&r->d, r->dir, body), 0);
}

static void run_end(struct run *r)
{
	int rc = testd_stop(&r->d);

	fakeguest_stop(&r->fg);
	/* a sanitizer finding (leak, UB) makes the daemon exit non-zero */
	ck_assert_msg(rc == 0, "vmtraced exited with %d (log: %s)", rc, r->d.log);
	test_rmtree(r->dir);
	free(r->dir);
}

/* Dump with vmtracectl; returns the sample path (one guest). */
static void dump_one(struct run *r, char *sample, size_t n)
{
	char out[8192];
	int rc = testd_ctl(&r->d, out, sizeof(out), "dump --reason test");

	ck_assert_msg(rc == 0, "vmtracectl dump failed (%d): %s", rc, out);
	ck_assert_msg(strstr(out, ".vmts\n") != NULL, "no sample in '%s'", out);
	*strchr(out, '\n') = 0;
	ck_assert_uint_lt(strlen(out), n);
	memcpy(sample, out, strlen(out) + 1);
}

static void merge_and_count(struct run *r, const char *sample, uint64_t *per_cpu, uint64_t *total)
{
	char args[1200], out[8192], dat[400];

	snprintf(dat, sizeof(dat), "%s/out.dat", r->dir);
	snprintf(args, sizeof(args), "merge -o %s %s", dat, sample);
	ck_assert_int_eq(testd_ctl(&r->d, out, sizeof(out), args), 0);
	ck_assert_int_eq(tdread_counts(dat, per_cpu, MAXC, total), 0);
}

static void check_whole_stream(int sockets, uint32_t chunk)
{
	struct run r;
	char sample[4400];
	uint64_t got[MAXC], total, want_total = 0;
	struct vmt_sample *s;
	char why[256];

	if (!ncpus)
		VMT_SKIP("no ftrace pages: not root and no corpus");
	run_start(&r, sockets, "  ring_size: 64MiB\n", chunk);
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg, 60000), 0);
	dump_one(&r, sample, sizeof(sample));
	merge_and_count(&r, sample, got, &total);
	for (unsigned c = 0; c < ncpus; c++) {
		uint64_t want = events_of(pages[c], npages[c]);
		ck_assert_msg(got[c] == want, "cpu%u: %llu events decoded, %llu fed (%s)", c,
			      (unsigned long long)got[c], (unsigned long long)want, source);
		want_total += want;
	}
	ck_assert_uint_eq(total, want_total);

	/* vmtracectl info tells the same without the daemon's help */
	{
		char args[4500], out[16384], want[128];
		snprintf(args, sizeof(args), "info %s", sample);
		ck_assert_int_eq(testd_ctl(&r.d, out, sizeof(out), args), 0);
		ck_assert_msg(strstr(out, "guest:    g1 ") && strstr(out, "trigger:  control") &&
			      strstr(out, "aux:      ") && !strstr(out, "another aux"), "info: %s", out);
		for (unsigned c = 0; c < ncpus; c++) {
			snprintf(want, sizeof(want), "cpu%-3u    %zu pages, %llu events", c, npages[c],
				 (unsigned long long)got[c]);
			ck_assert_msg(strstr(out, want) != NULL, "no '%s' in: %s", want, out);
		}
	}

	/* the sample's own account: everything in, nothing lost, the agent's count */
	ck_assert_int_eq(sample_read(sample, &s, why, sizeof(why)), 0);
	ck_assert_str_eq(s->guest, "g1");
	ck_assert_uint_eq(s->ncpus, ncpus);
	ck_assert_uint_ge(s->ntriggers, 1);
	ck_assert_uint_eq(s->triggers[0].kind, VMT_TRIGGER_CONTROL);
	for (unsigned c = 0; c < ncpus; c++) {
		ck_assert_uint_eq(s->cpus[c].npages, npages[c]);
		ck_assert_uint_eq(s->cpus[c].counters.pages_in, npages[c]);
		ck_assert_uint_eq(s->cpus[c].counters.pages_overwritten, 0);
		ck_assert_uint_eq(s->cpus[c].counters.bytes_rejected, 0);
		ck_assert(s->cpus[c].have_guest_stats);
		ck_assert_uint_eq(s->cpus[c].guest.read, got[c]);
		ck_assert_uint_eq(s->cpus[c].events, got[c]);
	}
	sample_free(s);
	run_end(&r);
}

START_TEST(fifo_whole_stream)
{
	check_whole_stream(0, 0);
}
END_TEST

START_TEST(socket_whole_stream)
{
	check_whole_stream(1, 0);
}
END_TEST

/* A metric of `vmtracectl metrics` (0 when absent). */
static uint64_t metric(struct run *r, const char *name)
{
	static char out[65536];
	char *p;

	ck_assert_int_eq(testd_ctl(&r->d, out, sizeof(out), "metrics"), 0);
	for (p = strstr(out, name); p; p = strstr(p + 1, name))
		if ((p == out || p[-1] == '\n') && p[strlen(name)] == ' ')
			return strtoull(p + strlen(name) + 1, NULL, 10);
	return 0;
}

/*
 * A compressed ring: the older pages become frames of codec (tcode: made
 * with the guest's own formats); the sample holds them as they are, and
 * merge and the sample reader (with the aux beside it) give back every
 * page bit for bit and every event. The merged trace.dat's records go to
 * crc[]/n[] (tdread_digest), for a comparison with other codecs'.
 */
/* Whether a CPU of the input has the pages that make a 4 MiB ring's first
 * frame due: 2 batches of 16 (daemon/ring.c, ring_plan_compressed()). */
#define FRAME_DUE_PAGES 32u
static bool frames_due(void)
{
	for (unsigned c = 0; c < ncpus; c++)
		if (npages[c] >= FRAME_DUE_PAGES)
			return true;
	return false;
}

static void codec_stream(uint32_t codec, uint32_t *crc, uint64_t *n)
{
	char sample[4400], why[256], args[4500], out[16384], yaml[128], dat[4500];
	uint64_t got[MAXC], total, want_total = 0, deadline;
	struct vmt_sample *s;
	struct run r;

	/* 4 MiB: batches of 16 pages, due from 32, and room for every page of
	 * the corpus (761 a CPU) even uncompressed; a capture of a quiet
	 * machine may bring 100 pages a CPU, under 2 batches of a 64 MiB ring */
	snprintf(yaml, sizeof(yaml), "  ring_size: 4MiB\n  compression: %s\n",
		 frame_codec_name(codec));
	run_start(&r, 1, yaml, 0);
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg, 60000), 0);
	deadline = test_now_ms() + (uint64_t)test_deadline_ms(60000);
	/* a frame made (batches are due as soon as pages are in): not a race
	 * with the dump, which would find every page still raw */
	while (codec != VMT_FRAME_NONE && !metric(&r, "vmtraced_compress_input_bytes_total")) {
		ck_assert_msg(test_now_ms() < deadline, "no frame made");
		usleep(20000);
	}
	dump_one(&r, sample, sizeof(sample));
	merge_and_count(&r, sample, got, &total);
	for (unsigned c = 0; c < ncpus; c++) {
		uint64_t want = events_of(pages[c], npages[c]);
		ck_assert_msg(got[c] == want, "%s: cpu%u: %llu events decoded, %llu fed (%s)",
			      frame_codec_name(codec), c, (unsigned long long)got[c],
			      (unsigned long long)want, source);
		want_total += want;
	}
	ck_assert_uint_eq(total, want_total);
	snprintf(dat, sizeof(dat), "%s/out.dat", r.dir);
	ck_assert_int_eq(tdread_digest(dat, crc, n, MAXC), 0);
	ck_assert_uint_eq(metric(&r, "vmtraced_compress_tcode_fallback_total"), 0);
	snprintf(args, sizeof(args), "info %s", sample);
	ck_assert_int_eq(testd_ctl(&r.d, out, sizeof(out), args), 0);
	ck_assert_msg(codec == VMT_FRAME_NONE || strstr(out, frame_codec_name(codec)) != NULL,
		      "info: %s", out);

	ck_assert_int_eq(sample_read(sample, &s, why, sizeof(why)), 0);
	for (unsigned c = 0; c < ncpus; c++) {
		ck_assert_uint_eq(s->cpus[c].frames_refused, 0);
		ck_assert_uint_eq(s->cpus[c].npages, npages[c]);
		ck_assert_msg(!memcmp(s->cpus[c].pages, pages[c], npages[c] * PS),
			      "cpu%u: the pages read back differ from those fed", c);
	}
	if (codec != VMT_FRAME_NONE) {
		uint32_t codecs = 0;

		for (unsigned c = 0; c < ncpus; c++)
			codecs |= s->cpus[c].frame_codecs;
		ck_assert_msg(codecs & (1u << codec), "no %s frame in the sample (%#x)",
			      frame_codec_name(codec), codecs);
	}
	sample_free(s);
	run_end(&r);
}

START_TEST(tcode_whole_stream)
{
	uint32_t crc[MAXC];
	uint64_t n[MAXC];

	if (!ncpus)
		VMT_SKIP("no ftrace pages: not root and no corpus");
	if (!frames_due())
		VMT_SKIP("%s: under 2 batches of pages on every CPU", source);
	codec_stream(VMT_FRAME_TCODE, crc, n);
}
END_TEST

/*
 * The same window recorded raw, as zstd frames and as tcode frames merges
 * into the same trace.dat records, bit for bit, in the same order.
 */
START_TEST(compressed_merges_as_raw)
{
	static const uint32_t codecs[] = { VMT_FRAME_NONE, VMT_FRAME_ZSTD, VMT_FRAME_TCODE };
	uint32_t crc[3][MAXC];
	uint64_t n[3][MAXC];

	if (!ncpus)
		VMT_SKIP("no ftrace pages: not root and no corpus");
	if (!frames_due())
		VMT_SKIP("%s: under 2 batches of pages on every CPU", source);
	for (unsigned k = 0; k < 3; k++)
		codec_stream(codecs[k], crc[k], n[k]);
	for (unsigned k = 1; k < 3; k++)
		for (unsigned c = 0; c < ncpus; c++) {
			ck_assert_msg(n[k][c] == n[0][c] && crc[k][c] == crc[0][c],
				      "%s: cpu%u: %llu records, crc %08x; raw: %llu, %08x",
				      frame_codec_name(codecs[k]), c, (unsigned long long)n[k][c],
				      crc[k][c], (unsigned long long)n[0][c], crc[0][c]);
			ck_assert_uint_gt(n[0][c], 0);
		}
}
END_TEST

/* A ring of 16 pages per CPU keeps the newest 16 and counts the rest. */
START_TEST(small_ring_keeps_newest)
{
	struct run r;
	char sample[4400];
	uint64_t got[MAXC], total;
	struct vmt_sample *s;
	char why[256];

	if (!ncpus)
		VMT_SKIP("no ftrace pages: not root and no corpus");
	run_start(&r, 0, "  ring_size: 64KiB\n", 0);
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg, 60000), 0);
	dump_one(&r, sample, sizeof(sample));
	merge_and_count(&r, sample, got, &total);
	ck_assert_int_eq(sample_read(sample, &s, why, sizeof(why)), 0);
	for (unsigned c = 0; c < ncpus; c++) {
		size_t keep = npages[c] < 16 ? npages[c] : 16;
		uint64_t want = events_of(pages[c] + (npages[c] - keep) * PS, keep);
		ck_assert_msg(got[c] == want, "cpu%u: %llu decoded, %llu in the newest %zu pages", c,
			      (unsigned long long)got[c], (unsigned long long)want, keep);
		ck_assert_uint_eq(s->cpus[c].npages, keep);
		ck_assert_uint_eq(s->cpus[c].counters.pages_overwritten, npages[c] - keep);
	}
	sample_free(s);
	run_end(&r);
}
END_TEST

/* Pages written in odd pieces keep their boundaries; a garbage page in the
 * stream is refused and counted, and the rest decodes. */
START_TEST(chunks_and_a_bad_page)
{
	struct run r;
	char sample[4400];
	uint64_t got[MAXC], total;
	struct vmt_sample *s;
	char why[256];
	uint8_t *copy;
	size_t bad;

	if (!ncpus)
		VMT_SKIP("no ftrace pages: not root and no corpus");
	bad = npages[0] / 2;
	copy = malloc(npages[0] * PS);
	memcpy(copy, pages[0], npages[0] * PS);
	memset(copy + bad * PS, 0xee, PS);
	memset(&r, 0, sizeof(r));
	{
		uint8_t *saved = pages[0];
		pages[0] = copy;
		run_start(&r, 0, "  ring_size: 64MiB\n", 1000);
		pages[0] = saved;
	}
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg, 60000), 0);
	dump_one(&r, sample, sizeof(sample));
	merge_and_count(&r, sample, got, &total);
	ck_assert_uint_eq(got[0], events_of(pages[0], npages[0]) - events_of(pages[0] + bad * PS, 1));
	ck_assert_int_eq(sample_read(sample, &s, why, sizeof(why)), 0);
	ck_assert_uint_eq(s->cpus[0].counters.pages_rejected, 1);
	ck_assert_uint_eq(s->cpus[0].counters.bytes_rejected, PS);
	ck_assert_uint_eq(s->cpus[0].npages, npages[0] - 1);
	sample_free(s);
	free(copy);
	run_end(&r);
}
END_TEST

/* kill -USR1 writes a sample of every guest with the signal as trigger. */
START_TEST(sigusr1_dumps)
{
	struct run r;
	char dir[400], path[800] = "";
	struct vmt_sample *s;
	char why[256];

	if (!ncpus)
		VMT_SKIP("no ftrace pages: not root and no corpus");
	run_start(&r, 1, NULL, 0);
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg, 60000), 0);
	kill(r.d.pid, SIGUSR1);
	snprintf(dir, sizeof(dir), "%s/g1", r.d.state);
	for (int i = 0; i < 200 && !path[0]; i++) {
		DIR *d = opendir(dir);
		struct dirent *de;
		while (d && (de = readdir(d)))
			if (strstr(de->d_name, ".vmts") && de->d_name[0] != '.')
				snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (d)
			closedir(d);
		usleep(50000);
	}
	ck_assert_msg(path[0], "no sample after SIGUSR1");
	ck_assert_int_eq(sample_read(path, &s, why, sizeof(why)), 0);
	ck_assert_uint_eq(s->triggers[0].kind, VMT_TRIGGER_SIGNAL);
	ck_assert(strstr(s->triggers[0].reason, "SIGUSR1") != NULL);
	/* the aux file it names is beside it */
	snprintf(path, sizeof(path), "%s/aux-%06u.vmtaux", dir, s->aux_version);
	ck_assert_int_eq(access(path, R_OK), 0);
	sample_free(s);
	run_end(&r);
}
END_TEST

START_TEST(dump_of_unknown_guest_is_refused)
{
	struct run r;
	char out[1024];

	if (!ncpus)
		VMT_SKIP("no ftrace pages: not root and no corpus");
	run_start(&r, 0, NULL, 0);
	ck_assert_int_ne(testd_ctl(&r.d, out, sizeof(out), "dump nosuchguest 2>&1"), 0);
	ck_assert_msg(strstr(out, "no such guest") != NULL, "got '%s'", out);
	run_end(&r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ingest");
	TCase *t = tcase_create("daemon");
	int rc;

	prepare_input();
	printf("input: %s, %u CPUs", source, ncpus);
	for (unsigned c = 0; c < ncpus; c++)
		printf(", cpu%u %zu pages", c, npages[c]);
	printf("\n");
	fflush(stdout);
	TEST_ADD(t, fifo_whole_stream);
	TEST_ADD(t, socket_whole_stream);
	TEST_ADD(t, tcode_whole_stream);
	TEST_ADD(t, compressed_merges_as_raw);
	TEST_ADD(t, small_ring_keeps_newest);
	TEST_ADD(t, chunks_and_a_bad_page);
	TEST_ADD(t, sigusr1_dumps);
	TEST_ADD(t, dump_of_unknown_guest_is_refused);
	tcase_set_timeout(t, 120);
	suite_add_tcase(s, t);
	rc = test_run_suite(s);
	buf_free(&bundle);
	for (unsigned c = 0; c < ncpus; c++)
		free(pages[c]);
	return rc;
}
