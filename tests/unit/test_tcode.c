/* SPDX-License-Identifier: MIT */
/*
 * The transcoder (lib/tcode.h): every page of both corpora (guest-6.1, a
 * fork loop; guest-6.1-busy, stress-ng with syscall events), random pages
 * and mutated pages come back bit for bit; hostile encodings are refused or
 * decode to something, never read out of bounds (ASan); on the corpora the
 * streams compress better than the pages do.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "corpus.h"
#include "frame.h"
#include "meta.h"
#include "tcode.h"
#include "testutil.h"
#include "util.h"

#define PS 4096u
#define RUN 64u

static struct vmt_buf bundle;
static struct vmt_tcode *tc;
static struct vmt_tcode_ctx *enc, *dec;
static uint8_t *cpu[2];
static size_t ncpu_pages[2];
static bool have_corpus;

/* A bundle of the corpus' metadata, or a minimal one made here. */
static void setup(void)
{
	const char *dir = test_corpus_dir();
	char path[4200];

	memset(&bundle, 0, sizeof(bundle));
	have_corpus = false;
	if (dir) {
		snprintf(path, sizeof(path), "%s/meta", dir);
		have_corpus = corpus_load_meta(path, &bundle) == 0;
		for (int c = 0; have_corpus && c < 2; c++) {
			snprintf(path, sizeof(path), "%s/pages/cpu%d.raw", dir, c);
			have_corpus = corpus_load_pages(path, PS, &cpu[c], &ncpu_pages[c]) == 0;
		}
	}
	if (!have_corpus) {
		static const char hp[] =
			"\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
			"\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n"
			"\tfield: char data;\toffset:16;\tsize:4080;\tsigned:1;\n";
		buf_free(&bundle);
		memset(&bundle, 0, sizeof(bundle));
		ck_assert_int_eq(meta_add(&bundle, "events/header_page", hp, sizeof(hp) - 1), 0);
	}
	ck_assert_int_eq(tcode_new(&tc, bundle.data, bundle.len, PS), 0);
	ck_assert_int_eq(tcode_ctx_new(&enc, tc), 0);
	ck_assert_int_eq(tcode_ctx_new(&dec, tc), 0);
}

static void teardown(void)
{
	tcode_ctx_free(enc);
	tcode_ctx_free(dec);
	tcode_free(tc);
	buf_free(&bundle);
	free(cpu[0]);
	free(cpu[1]);
	cpu[0] = cpu[1] = NULL;
}

/* pages -> streams -> pages with e and d, compared; the encoded length. */
static size_t round_trip_with(struct vmt_tcode_ctx *e, struct vmt_tcode_ctx *d,
			      const uint8_t *pages, uint32_t n, struct vmt_tcode_stats *st)
{
	struct vmt_buf out = { 0 };
	uint8_t *back = malloc((size_t)n * PS);
	size_t len;
	struct vmt_tcode_stats mine = { 0 }, *sp = st ? st : &mine;
	uint64_t records = sp->records;

	ck_assert_ptr_nonnull(back);
	ck_assert_int_eq(tcode_encode(e, pages, n, &out, sp), 0);
	/* version 2: two bytes a record stored at the end */
	ck_assert_uint_eq(out.data[2], VMT_TCODE_VERSION);
	ck_assert_uint_eq(tcode_stored_tail(e), 2 * (sp->records - records));
	ck_assert_int_eq(tcode_decode(d, out.data, out.len, back, n), 0);
	for (uint32_t i = 0; i < n; i++)
		ck_assert_msg(!memcmp(back + (size_t)i * PS, pages + (size_t)i * PS, PS),
			      "page %u of %u differs after the round trip", i, n);
	len = out.len;
	buf_free(&out);
	free(back);
	return len;
}

static size_t round_trip(const uint8_t *pages, uint32_t n, struct vmt_tcode_stats *st)
{
	return round_trip_with(enc, dec, pages, n, st);
}

/*
 * Every page of both CPUs of a corpus through e and d, RUN pages at a time,
 * and zstd -1 of the pages and of the streams; prints the ratios. The
 * transcoder's stats into *st.
 */
static void corpus_round_trip(const char *name, struct vmt_tcode_ctx *e, struct vmt_tcode_ctx *d,
			      uint8_t *const pages[2], const size_t npages[2],
			      struct vmt_tcode_stats *st)
{
	size_t in = 0, enc_len = 0, zraw = 0, zenc = 0;

	memset(st, 0, sizeof(*st));
	for (int c = 0; c < 2; c++) {
		for (size_t i = 0; i < npages[c]; i += RUN) {
			uint32_t n = (uint32_t)(npages[c] - i < RUN ? npages[c] - i : RUN);
			const uint8_t *p = pages[c] + i * PS;
			struct vmt_buf out = { 0 };
			size_t cap = ZSTD_compressBound((size_t)n * PS);
			uint8_t *z = malloc(cap);

			ck_assert_ptr_nonnull(z);
			enc_len += round_trip_with(e, d, p, n, st);
			in += (size_t)n * PS;
			ck_assert_int_eq(tcode_encode(e, p, n, &out, NULL), 0);
			zraw += ZSTD_compress(z, cap, p, (size_t)n * PS, 1);
			zenc += ZSTD_compress(z, cap, out.data, out.len, 1);
			buf_free(&out);
			free(z);
		}
	}
	printf("corpus %s: %zu+%zu pages, %zu bytes, streams %zu (%.2fx), zstd-1 of pages %.2fx, "
	       "of streams %.2fx; %llu records, %llu events split, %llu raw, %llu predicted, "
	       "%llu tails raw\n",
	       name, npages[0], npages[1], in, enc_len, (double)in / (double)enc_len,
	       (double)in / (double)zraw, (double)in / (double)zenc,
	       (unsigned long long)st->records, (unsigned long long)st->events,
	       (unsigned long long)st->events_raw, (unsigned long long)st->predicted,
	       (unsigned long long)st->tail_raw);
	/* the point of it: streams compress better than the pages */
	ck_assert_msg(zenc * 5 < zraw * 4, "%s: zstd of streams %zu, of pages %zu", name, zenc, zraw);
}

START_TEST(corpus_pages_round_trip)
{
	struct vmt_tcode_stats st;

	if (!have_corpus)
		VMT_SKIP("no corpus");
	ck_assert_uint_gt(tcode_nevents(tc), 1000);
	corpus_round_trip("guest-6.1", enc, dec, cpu, ncpu_pages, &st);
	/* what expected-event-counts.txt says the corpus holds */
	ck_assert_uint_eq(st.events + st.events_raw, 139511);
	ck_assert_uint_eq(st.events_raw, 0);
	ck_assert_uint_gt(st.predicted, 0);
}
END_TEST

/* The sum of an expected-event-counts.txt ("  COUNT name:" lines). */
static uint64_t expected_total(const char *dir)
{
	_cleanup_free_ char *data = NULL;
	char path[4200];
	uint64_t total = 0;
	size_t len;

	snprintf(path, sizeof(path), "%s/expected-event-counts.txt", dir);
	ck_assert_int_eq(read_file(path, 1 << 20, &data, &len), 0);
	for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n"))
		total += strtoull(line, NULL, 10);
	return total;
}

/* The busy guest's corpus, with its own metadata: syscall events, stress-ng
 * workers, a disk stressor. */
/* A corpus's metadata and both CPUs' pages, or false when it is not
 * unpacked. */
static bool corpus_named_load(const char *name, struct vmt_buf *b, uint8_t *pages[2],
			      size_t npages[2])
{
	const char *dir = test_corpus_dir_named(name);
	char path[4200];

	if (!dir)
		return false;
	snprintf(path, sizeof(path), "%s/meta", dir);
	ck_assert_int_eq(corpus_load_meta(path, b), 0);
	for (int c = 0; c < 2; c++) {
		snprintf(path, sizeof(path), "%s/pages/cpu%d.raw", dir, c);
		ck_assert_int_eq(corpus_load_pages(path, PS, &pages[c], &npages[c]), 0);
		ck_assert_uint_gt(npages[c], 500);
	}
	return true;
}

START_TEST(busy_corpus_pages_round_trip)
{
	const char *dir = test_corpus_dir_named("guest-6.1-busy");
	struct vmt_buf b = { 0 };
	struct vmt_tcode *t;
	struct vmt_tcode_ctx *e, *d;
	struct vmt_tcode_stats st;
	uint8_t *pages[2] = { NULL, NULL };
	size_t npages[2] = { 0, 0 };
	uint64_t want;

	if (!corpus_named_load("guest-6.1-busy", &b, pages, npages))
		VMT_SKIP("no guest-6.1-busy corpus (make tests unpacks it)");
	ck_assert_int_eq(tcode_new(&t, b.data, b.len, PS), 0);
	/* the agent sends the formats of the enabled systems only */
	ck_assert_uint_gt(tcode_nevents(t), 500);
	ck_assert_int_eq(tcode_ctx_new(&e, t), 0);
	ck_assert_int_eq(tcode_ctx_new(&d, t), 0);
	corpus_round_trip("guest-6.1-busy", e, d, pages, npages, &st);
	/* what stock trace-cmd decodes from the same pages */
	want = expected_total(dir);
	ck_assert_uint_gt(want, 100000);
	ck_assert_uint_eq(st.events + st.events_raw, want);
	ck_assert_uint_eq(st.events_raw, 0);
	ck_assert_uint_gt(st.predicted, 0);
	tcode_ctx_free(e);
	tcode_ctx_free(d);
	tcode_free(t);
	buf_free(&b);
	free(pages[0]);
	free(pages[1]);
}
END_TEST

/*
 * Frames made by version 1's encoder (before the stored planes, plan
 * indexes and time predictions; tests/unit/data, 32 pages of a CPU of each
 * corpus, made with the corpus's whole metadata) still decode to their
 * pages; one byte more after one is refused. This encoder writes version 2,
 * its time planes stored behind the zstd frame, and the frames are smaller.
 */
START_TEST(version_1_frames_still_read)
{
	static const struct {
		const char *corpus, *file;
		int cpu;
	} v1[] = {
		{ "guest-6.1", "tcode-v1-guest-6.1-cpu1.frame", 1 },
		{ "guest-6.1-busy", "tcode-v1-guest-6.1-busy-cpu0.frame", 0 },
	};

	for (size_t k = 0; k < ARRAY_SIZE(v1); k++) {
		struct vmt_buf b = { 0 };
		uint8_t *pages[2] = { NULL, NULL }, *back = malloc(32 * PS), *payload, *out;
		size_t npages[2] = { 0, 0 }, len, cap = frame_bound(VMT_FRAME_TCODE, 32 * PS);
		_cleanup_free_ char *path = NULL, *data = NULL;
		struct vmt_frame_ctx *fc = frame_ctx_new(VMT_FRAME_TCODE, 1, 32 * PS);
		struct vmt_iovec iov;
		struct vmt_tcode *t;
		ssize_t n2;
		char why[200] = "";

		if (!corpus_named_load(v1[k].corpus, &b, pages, npages))
			VMT_SKIP("no corpus (make tests unpacks them)");
		ck_assert_int_eq(tcode_new(&t, b.data, b.len, PS), 0);
		ck_assert_int_ge(asprintf(&path, "%s/tests/unit/data/%s", test_srcdir(), v1[k].file), 0);
		ck_assert_int_eq(read_file(path, 1 << 20, &data, &len), 0);
		payload = malloc(len + 1);
		ck_assert_ptr_nonnull(payload);
		memcpy(payload, data, len);
		ck_assert_uint_eq(frame_tcode_id(payload, len), tcode_id(t));
		ck_assert_int_eq(frame_decode_with(t, VMT_FRAME_TCODE, payload, len, back, 32 * PS, why,
						   sizeof(why)), 0);
		ck_assert_msg(!memcmp(back, pages[v1[k].cpu], 32 * PS), "%s: pages differ", v1[k].file);
		payload[len] = 0;
		ck_assert_int_eq(frame_decode_with(t, VMT_FRAME_TCODE, payload, len + 1, back, 32 * PS,
						   why, sizeof(why)), -EBADMSG);
		/* the same pages now: version 2, smaller, with a stored tail */
		out = malloc(cap);
		ck_assert(fc && out && frame_ctx_schema(fc, t) == 0);
		iov = (struct vmt_iovec){ pages[v1[k].cpu], 32 * PS };
		n2 = frame_compress(fc, &iov, 1, out, cap);
		ck_assert_int_gt(n2, 0);
		ck_assert_msg((size_t)n2 < len, "%s: version 2 %zd bytes, version 1 %zu", v1[k].file, n2,
			      len);
		ck_assert_int_eq(frame_decode_with(t, VMT_FRAME_TCODE, out, (size_t)n2, back, 32 * PS, why,
						   sizeof(why)), 0);
		ck_assert(!memcmp(back, pages[v1[k].cpu], 32 * PS));
		printf("%s: version 1 %zu bytes, version 2 %zd\n", v1[k].file, len, n2);
		free(out);
		free(payload);
		free(back);
		frame_ctx_free(fc);
		tcode_free(t);
		buf_free(&b);
		free(pages[0]);
		free(pages[1]);
	}
}
END_TEST

/* Made-up pages: random bytes, and corpus pages with bytes flipped. */
START_TEST(random_and_mutated_pages_round_trip)
{
	uint8_t *p = malloc(RUN * PS);
	uint64_t seed = 0x1234567;

	ck_assert_ptr_nonnull(p);
	for (int round = 0; round < 40; round++) {
		for (size_t i = 0; i < RUN * PS; i++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			p[i] = (uint8_t)(seed >> 56);
		}
		if (round % 2 && have_corpus) {
			/* mostly real, a few bytes off: records that no longer walk */
			size_t start = ((size_t)round * 7 % (ncpu_pages[1] - RUN)) * PS;

			memcpy(p, cpu[1] + start, RUN * PS);
			for (int k = 0; k < 64; k++) {
				seed = seed * 6364136223846793005ull + 1442695040888963407ull;
				p[(seed >> 20) % (RUN * PS)] ^= (uint8_t)(1u << (seed >> 61));
			}
		}
		if (round % 4 == 2) {
			/* small commits, so that records of random headers walk */
			for (uint32_t i = 0; i < RUN; i++)
				put_le64(p + (size_t)i * PS + 8, (uint64_t)(i * 61) % 4080);
		}
		round_trip(p, RUN, NULL);
	}
	free(p);
}
END_TEST

/* An encoding cut short, grown or with bytes changed: refused, or pages. */
START_TEST(hostile_encodings)
{
	struct vmt_buf out = { 0 };
	uint8_t *back = malloc(RUN * PS), *m;
	const uint8_t *src;
	uint64_t seed = 99;
	uint8_t fake[RUN * 8];

	ck_assert_ptr_nonnull(back);
	if (have_corpus) {
		src = cpu[0];
	} else {
		memset(back, 0, RUN * PS);
		src = back;
	}
	ck_assert_int_eq(tcode_encode(enc, src, RUN, &out, NULL), 0);
	m = malloc(out.len + 16);
	ck_assert_ptr_nonnull(m);
	/* every length short of whole */
	for (size_t cut = 0; cut < out.len; cut += 1 + cut / 8)
		ck_assert_int_eq(tcode_decode(dec, out.data, cut, back, RUN), -EBADMSG);
	/* trailing bytes, a wrong page count, a wrong version */
	memcpy(m, out.data, out.len);
	m[out.len] = 0;
	ck_assert_int_eq(tcode_decode(dec, m, out.len + 1, back, RUN), -EBADMSG);
	ck_assert_int_eq(tcode_decode(dec, out.data, out.len, back, RUN - 1), -EBADMSG);
	m[2] = VMT_TCODE_VERSION + 1;
	ck_assert_int_eq(tcode_decode(dec, m, out.len, back, RUN), -EBADMSG);
	/* flipped bytes: whatever comes out, nothing is read or written
	 * outside (ASan), and a refusal is -EBADMSG */
	for (int round = 0; round < 2000; round++) {
		int r;

		memcpy(m, out.data, out.len);
		for (int k = 0; k < 1 + round % 5; k++) {
			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			m[(seed >> 16) % out.len] ^= (uint8_t)(seed >> 56);
		}
		r = tcode_decode(dec, m, out.len, back, RUN);
		ck_assert(r == 0 || r == -EBADMSG);
	}
	/* a stream table that claims more than there is */
	memset(fake, 0xff, sizeof(fake));
	memcpy(fake, "TC\1\100\2", 5);
	ck_assert_int_eq(tcode_decode(dec, fake, sizeof(fake), back, RUN), -EBADMSG);
	buf_free(&out);
	free(m);
	free(back);
}
END_TEST

/* A format whose fields overlap, leave gaps or run past the record: the
 * record still comes back whole. */
START_TEST(odd_formats)
{
	static const char fmt[] =
		"name: odd\nID: 7\nformat:\n"
		"\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
		"\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
		"\tfield:int a;\toffset:6;\tsize:4;\tsigned:1;\n"
		"\tfield:int b;\toffset:8;\tsize:4;\tsigned:1;\n"
		"\tfield:char c[16];\toffset:12;\tsize:16;\tsigned:1;\n"
		"\tfield:u8 d[3];\toffset:28;\tsize:3;\tsigned:0;\n"
		"\tfield:__data_loc char[] s;\toffset:32;\tsize:4;\tsigned:0;\n"
		"\tfield:long big;\toffset:40;\tsize:8;\tsigned:1;\n";
	static const char hp[] =
		"\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
		"\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n"
		"\tfield: char data;\toffset:16;\tsize:4080;\tsigned:1;\n";
	struct vmt_buf b = { 0 };
	struct vmt_tcode *t;
	struct vmt_tcode_ctx *e, *d;
	struct vmt_buf out = { 0 };
	uint8_t page[PS] = { 0 }, back[PS];
	uint32_t pos = 0;

	ck_assert_int_eq(meta_add(&b, "events/header_page", hp, sizeof(hp) - 1), 0);
	ck_assert_int_eq(meta_add(&b, "events/x/odd/format", fmt, sizeof(fmt) - 1), 0);
	ck_assert_int_eq(tcode_new(&t, b.data, b.len, PS), 0);
	ck_assert_uint_eq(tcode_nevents(t), 1);
	ck_assert_int_eq(tcode_ctx_new(&e, t), 0);
	ck_assert_int_eq(tcode_ctx_new(&d, t), 0);
	put_le64(page, 1000);
	/* records of every length from 1 to 60 words, id 7 and others */
	for (uint32_t w = 1; w <= 28 && pos + 4 + w * 4 <= 3000; w++) {
		uint8_t *r = page + 16 + pos;

		put_le32(r, w | (w * 3) << 5);
		for (uint32_t k = 0; k < w * 4; k++)
			r[4 + k] = (uint8_t)(k * 17 + w);
		put_le16(r + 4, w % 3 ? 7 : 9);
		pos += 4 + w * 4;
	}
	/* a long record (type 0), a time extend, a padding with content */
	put_le32(page + 16 + pos, 0 | 5u << 5);
	put_le32(page + 16 + pos + 4, 4 + 200);
	put_le16(page + 16 + pos + 8, 7);
	pos += 8 + 200;
	put_le32(page + 16 + pos, 30 | 1u << 5);
	put_le32(page + 16 + pos + 4, 12345);
	pos += 8;
	put_le32(page + 16 + pos, 29 | 1u << 5);
	put_le32(page + 16 + pos + 4, 20);
	memset(page + 16 + pos + 8, 0xab, 16);
	pos += 24;
	put_le64(page + 8, pos);
	ck_assert_int_eq(tcode_encode(e, page, 1, &out, NULL), 0);
	ck_assert_int_eq(tcode_decode(d, out.data, out.len, back, 1), 0);
	ck_assert(!memcmp(page, back, PS));
	buf_free(&out);
	tcode_ctx_free(e);
	tcode_ctx_free(d);
	tcode_free(t);
	buf_free(&b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tcode");
	TCase *t = tcase_create("tcode");

	tcase_add_checked_fixture(t, setup, teardown);
	TEST_ADD(t, corpus_pages_round_trip);
	TEST_ADD(t, busy_corpus_pages_round_trip);
	TEST_ADD(t, random_and_mutated_pages_round_trip);
	TEST_ADD(t, hostile_encodings);
	TEST_ADD(t, odd_formats);
	TEST_ADD(t, version_1_frames_still_read);
	tcase_set_timeout(t, 120);
	suite_add_tcase(s, t);
	return test_run_suite(s);
}
