/* SPDX-License-Identifier: MIT */
/*
 * Frames (lib/frame.h): real pages of the corpus through each codec and
 * back, and every way a payload or a header can be wrong refused with why.
 */
#include <errno.h>
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
#define NPAGES 64u

static uint8_t *raw;	/* NPAGES corpus pages, else made-up ones */

static void setup(void)
{
	const char *dir = test_corpus_dir();
	char path[4200];
	uint8_t *all = NULL;
	size_t n = 0;

	raw = malloc(NPAGES * PS);
	ck_assert_ptr_nonnull(raw);
	snprintf(path, sizeof(path), "%s/pages/cpu0.raw", dir ? dir : "/nonexistent");
	if (dir && corpus_load_pages(path, PS, &all, &n) == 0 && n >= NPAGES) {
		memcpy(raw, all, NPAGES * PS);
	} else {
		for (size_t i = 0; i < NPAGES * PS; i++)
			raw[i] = (uint8_t)(i % 251 < 200 ? i / 64 : i * 7);
	}
	free(all);
}

static void teardown(void)
{
	free(raw);
}

/* raw compressed by codec from iov pieces of piece bytes (0: one piece). */
static uint8_t *compress(uint32_t codec, size_t piece, size_t *len)
{
	struct vmt_frame_ctx *c = frame_ctx_new(codec, 1, NPAGES * PS);
	size_t cap = frame_bound(codec, NPAGES * PS), n = 0;
	struct vmt_iovec iov[NPAGES];
	uint8_t *out = malloc(cap);
	ssize_t r;

	ck_assert_ptr_nonnull(c);
	ck_assert_ptr_nonnull(out);
	for (size_t off = 0; off < NPAGES * PS; off += piece ? piece : NPAGES * PS)
		iov[n++] = (struct vmt_iovec){ raw + off, piece ? piece : NPAGES * PS };
	r = frame_compress(c, iov, n, out, cap);
	ck_assert_int_gt(r, 0);
	*len = (size_t)r;
	frame_ctx_free(c);
	return out;
}

START_TEST(test_codecs_round_trip)
{
	static const uint32_t codecs[] = { VMT_FRAME_NONE, VMT_FRAME_ZSTD, VMT_FRAME_LZ4 };
	uint8_t *back = malloc(NPAGES * PS);
	char why[256];

	for (size_t i = 0; i < ARRAY_SIZE(codecs); i++)
		for (size_t piece = 0; piece <= PS; piece += PS) {
			size_t len;
			uint8_t *p = compress(codecs[i], piece, &len);

			if (codecs[i] == VMT_FRAME_NONE)
				ck_assert_uint_eq(len, NPAGES * PS);
			else
				ck_assert_uint_lt(len, NPAGES * PS / 2);	/* real pages compress */
			memset(back, 0xa5, NPAGES * PS);
			ck_assert_msg(frame_decode(codecs[i], p, len, back, NPAGES * PS, why, sizeof(why)) == 0,
				      "%s: %s", frame_codec_name(codecs[i]), why);
			ck_assert(!memcmp(back, raw, NPAGES * PS));
			free(p);
		}
	free(back);
}
END_TEST

/* A schema of the corpus' formats, else of a bare header_page. */
static struct vmt_tcode *schema(bool bare)
{
	static const char hp[] = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
				 "\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n"
				 "\tfield: char data;\toffset:16;\tsize:4080;\tsigned:1;\n";
	const char *dir = test_corpus_dir();
	struct vmt_buf b = { 0 };
	struct vmt_tcode *t;
	char path[4200];

	snprintf(path, sizeof(path), "%s/meta", dir ? dir : "/nonexistent");
	if (bare || !dir || corpus_load_meta(path, &b) < 0) {
		buf_free(&b);
		b = (struct vmt_buf){ 0 };
		ck_assert_int_eq(meta_add(&b, "events/header_page", hp, sizeof(hp) - 1), 0);
	}
	ck_assert_int_eq(tcode_new(&t, b.data, b.len, PS), 0);
	buf_free(&b);
	return t;
}

/* TCODE: pages back bit for bit with the schema named in the frame; without
 * it, or with another, -ENOKEY; pages of another CRC -EBADMSG. */
START_TEST(test_tcode_frames)
{
	struct vmt_tcode *t = schema(false), *other = schema(true);
	struct vmt_frame_ctx *c = frame_ctx_new(VMT_FRAME_TCODE, 1, NPAGES * PS);
	size_t cap = frame_bound(VMT_FRAME_TCODE, NPAGES * PS);
	struct vmt_iovec iov = { raw, NPAGES * PS };
	uint8_t *out = malloc(cap), *back = malloc(NPAGES * PS);
	char why[256];
	ssize_t len;

	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(frame_compress(c, &iov, 1, out, cap), -ENOKEY);
	ck_assert_int_eq(frame_ctx_schema(c, t), 0);
	len = frame_compress(c, &iov, 1, out, cap);
	ck_assert_int_gt(len, VMT_FRAME_TCODE_HDR);
	ck_assert_uint_eq(frame_tcode_id(out, (size_t)len), tcode_id(t));
	ck_assert_msg(frame_decode_with(t, VMT_FRAME_TCODE, out, (size_t)len, back, NPAGES * PS, why,
					sizeof(why)) == 0, "%s", why);
	ck_assert(!memcmp(back, raw, NPAGES * PS));
	ck_assert_int_eq(frame_decode(VMT_FRAME_TCODE, out, (size_t)len, back, NPAGES * PS, why,
				      sizeof(why)), -ENOKEY);
	if (tcode_id(other) != tcode_id(t))
		ck_assert_int_eq(frame_decode_with(other, VMT_FRAME_TCODE, out, (size_t)len, back,
						   NPAGES * PS, why, sizeof(why)), -ENOKEY);
	out[8] ^= 1;	/* the pages' CRC */
	ck_assert_int_eq(frame_decode_with(t, VMT_FRAME_TCODE, out, (size_t)len, back, NPAGES * PS,
					   why, sizeof(why)), -EBADMSG);
	ck_assert_msg(strstr(why, "CRC") != NULL, "%s", why);
	out[8] ^= 1;
	/* cut short, or more pages asked for than it holds */
	ck_assert_int_eq(frame_decode_with(t, VMT_FRAME_TCODE, out, (size_t)len - 1, back,
					   NPAGES * PS, why, sizeof(why)), -EBADMSG);
	ck_assert_int_eq(frame_decode_with(t, VMT_FRAME_TCODE, out, (size_t)len, back,
					   (NPAGES - 1) * PS, why, sizeof(why)), -EBADMSG);
	frame_ctx_free(c);
	tcode_free(t);
	tcode_free(other);
	free(out);
	free(back);
}
END_TEST

START_TEST(test_codec_names)
{
	ck_assert_str_eq(frame_codec_name(VMT_FRAME_NONE), "off");
	ck_assert_str_eq(frame_codec_name(VMT_FRAME_ZSTD), "zstd");
	ck_assert_str_eq(frame_codec_name(VMT_FRAME_LZ4), "lz4");
	ck_assert_str_eq(frame_codec_name(VMT_FRAME_TCODE), "tcode");
	ck_assert_ptr_null(frame_codec_name(4));
	ck_assert_int_eq(frame_codec_parse("lz4"), VMT_FRAME_LZ4);
	ck_assert_int_eq(frame_codec_parse("zstd"), VMT_FRAME_ZSTD);
	ck_assert_int_eq(frame_codec_parse("off"), VMT_FRAME_NONE);
	ck_assert_int_eq(frame_codec_parse("gzip"), -EINVAL);
}
END_TEST

static void expect_refused(uint32_t codec, const uint8_t *p, size_t len, size_t want, const char *says)
{
	uint8_t *back = malloc(2 * NPAGES * PS);
	char why[256] = "";

	ck_assert_int_eq(frame_decode(codec, p, len, back, want, why, sizeof(why)), -EBADMSG);
	ck_assert_msg(strstr(why, says) != NULL, "%s: %s", frame_codec_name(codec), why);
	free(back);
}

START_TEST(test_decode_refuses)
{
	static const uint32_t codecs[] = { VMT_FRAME_NONE, VMT_FRAME_ZSTD, VMT_FRAME_LZ4 };

	for (size_t i = 0; i < ARRAY_SIZE(codecs); i++) {
		uint32_t codec = codecs[i];
		size_t len;
		uint8_t *p = compress(codec, 0, &len), *longer = malloc(len + 1);

		/* truncated, one byte over, another raw size */
		expect_refused(codec, p, len - 1, NPAGES * PS, codec == VMT_FRAME_LZ4 ? "lz4" : "");
		memcpy(longer, p, len);
		longer[len] = 0;
		expect_refused(codec, longer, len + 1, NPAGES * PS, "");
		expect_refused(codec, p, len, NPAGES * PS - PS, "");
		expect_refused(codec, p, len, NPAGES * PS + PS, "");
		free(longer);
		free(p);
	}
	expect_refused(7, raw, 10, 10, "unknown codec 7");
}
END_TEST

/* The exact words for the cases a reader meets. */
START_TEST(test_decode_says_why)
{
	size_t len, zlen;
	uint8_t *z = compress(VMT_FRAME_ZSTD, 0, &zlen), *nocs;
	ZSTD_CCtx *c = ZSTD_createCCtx();
	ZSTD_outBuffer out;
	ZSTD_inBuffer in = { raw, NPAGES * PS, 0 };

	expect_refused(VMT_FRAME_NONE, raw, PS, 2 * PS,
		       "off payload of 4096 bytes does not decode to exactly 8192 bytes");
	expect_refused(VMT_FRAME_ZSTD, z, zlen - 1, NPAGES * PS, "not a zstd frame with its content size");
	expect_refused(VMT_FRAME_ZSTD, z, zlen, NPAGES * PS - 1, "does not decode to exactly 262143 bytes");
	free(z);

	/* a streamed zstd frame does not carry its content size */
	nocs = malloc(ZSTD_compressBound(NPAGES * PS));
	out = (ZSTD_outBuffer){ nocs, ZSTD_compressBound(NPAGES * PS), 0 };
	ck_assert_ptr_nonnull(c);
	ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 0);
	ck_assert_uint_eq(ZSTD_compressStream2(c, &out, &in, ZSTD_e_end), 0);
	len = out.pos;
	ck_assert(ZSTD_getFrameContentSize(nocs, len) == ZSTD_CONTENTSIZE_UNKNOWN);
	expect_refused(VMT_FRAME_ZSTD, nocs, len, NPAGES * PS, "not a zstd frame with its content size");
	ZSTD_freeCCtx(c);
	free(nocs);

	/* an LZ4 block of garbage */
	memset(raw, 0xff, 64);
	expect_refused(VMT_FRAME_LZ4, raw, 64, NPAGES * PS, "lz4: the block does not decode");
}
END_TEST

START_TEST(test_header)
{
	struct vmt_frame_hdr h = { .codec = VMT_FRAME_LZ4, .npages = 64, .first_seq = 1ull << 40,
				   .first_ts = 5, .last_ts = 9, .events = 1234, .flags = VMT_FRAME_MISSED },
			     back, bad;
	uint8_t b[VMT_FRAME_HDR_SIZE];
	char why[256];

	frame_hdr_put(b, &h);
	/* the offsets of docs/FORMAT.md 2.5 */
	ck_assert_uint_eq(get_le32(b), 2);
	ck_assert_uint_eq(get_le32(b + 4), 64);
	ck_assert_uint_eq(get_le64(b + 8), 1ull << 40);
	ck_assert_uint_eq(get_le64(b + 16), 5);
	ck_assert_uint_eq(get_le64(b + 24), 9);
	ck_assert_uint_eq(get_le32(b + 32), 1234);
	ck_assert_uint_eq(get_le32(b + 36), 1);
	ck_assert_int_eq(frame_hdr_get(b, sizeof(b), &back, why, sizeof(why)), 0);
	ck_assert(!memcmp(&h, &back, sizeof(h)));
	ck_assert_int_eq(frame_hdr_get(b, sizeof(b) - 1, &back, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "frame of 39 bytes, shorter than its header");

#define BAD(field, value, says)                                                        \
	do {                                                                           \
		bad = h;                                                               \
		bad.field = value;                                                     \
		frame_hdr_put(b, &bad);                                                \
		ck_assert_int_eq(frame_hdr_get(b, sizeof(b), &back, why, sizeof(why)), -EBADMSG); \
		ck_assert_msg(strstr(why, says) != NULL, "%s", why);                   \
	} while (0)
	BAD(codec, 4, "an unknown codec (codec 4,");
	BAD(npages, 0, "a page count out of range");
	BAD(npages, VMT_FRAME_MAX_PAGES + 1, "a page count out of range");
	BAD(flags, 2, "unknown flags");
	BAD(first_ts, 10, "its first event after its last");
#undef BAD
	h.npages = VMT_FRAME_MAX_PAGES;
	h.first_ts = h.last_ts;
	frame_hdr_put(b, &h);
	ck_assert_int_eq(frame_hdr_get(b, sizeof(b), &back, why, sizeof(why)), 0);
}
END_TEST

/* A context refuses more than it was made for, and a too small output. */
START_TEST(test_compress_bounds)
{
	struct vmt_frame_ctx *c = frame_ctx_new(VMT_FRAME_ZSTD, 1, PS);
	struct vmt_iovec two[2] = { { raw, PS }, { raw + PS, 1 } }, one = { raw, PS };
	uint8_t *out = malloc(frame_bound(VMT_FRAME_ZSTD, 2 * PS));

	ck_assert_int_eq(frame_compress(c, two, 2, out, frame_bound(VMT_FRAME_ZSTD, 2 * PS)), -EINVAL);
	ck_assert_int_eq(frame_compress(c, &one, 1, out, 16), -EINVAL);
	ck_assert_int_gt(frame_compress(c, &one, 1, out, frame_bound(VMT_FRAME_ZSTD, PS)), 0);
	frame_ctx_free(c);
	free(out);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("frame");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_codecs_round_trip);
	tcase_add_test(tc, test_codec_names);
	tcase_add_test(tc, test_tcode_frames);
	tcase_add_test(tc, test_decode_refuses);
	tcase_add_test(tc, test_decode_says_why);
	tcase_add_test(tc, test_header);
	tcase_add_test(tc, test_compress_bounds);
	suite_add_tcase(s, tc);
	return test_run_suite(s);
}
