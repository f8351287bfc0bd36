/* SPDX-License-Identifier: MIT */
/*
 * Whole frames through the frame reader (lib/frame.h: frame_hdr_get,
 * frame_decode_with) as a sample's reader takes them (lib/sample-frames.c:
 * the header checked, at most VMT_FRAME_TCODE_RATIO_MAX page bytes per
 * payload byte), with the schema of tcode-schema.h; and frames made with
 * frame_compress() read back. A frame of a sample comes from elsewhere.
 *
 * Input: u8 mode, then by mode % 3:
 *   0: a frame, the 40-byte header and its payload, as a file holds it. It
 *      is refused (-EBADMSG, or -ENOKEY for a tcode frame of another
 *      schema) or gives pages; tcode pages must make a frame again that
 *      reads back to them.
 *   1: u8 n, then a transcoding (lib/tcode.h) of 1 + n % 4 pages, which
 *      the target wraps as the compressor does (schema id, CRC, one zstd
 *      frame, then its last (n >> 2) * 64 bytes stored as they are, as
 *      version 2's time planes): mutations reach the transcoder's decoder
 *      through the frame path. When tcode_decode() takes the streams, the CRC is made that
 *      of its pages and the frame must read to the same pages (and make
 *      a frame again that does); otherwise the frame must be refused.
 *   2: pages (zero-filled to whole ones, 1 to 4): a tcode frame made of
 *      them reads back bit for bit (or is -ENOSPC: the compressor then
 *      makes a zstd frame).
 */
#include <errno.h>
#include <string.h>
#include <zstd.h>

#include "frame.h"
#include "tcode-schema.h"

static struct vmt_tcode *tc;
static struct vmt_tcode_ctx *dec;
static struct vmt_frame_ctx *mk;
#define MAX_RAW ((size_t)4 * PS)

static void setup(void)
{
	if (tc)
		return;
	tc = fuzz_tcode_schema();
	mk = frame_ctx_new(VMT_FRAME_TCODE, 1, MAX_RAW);
	FUZZ_CHECK(mk && frame_ctx_schema(mk, tc) == 0);
	FUZZ_CHECK(tcode_ctx_new(&dec, tc) == 0);
}

/* pages -> a tcode frame -> the same pages, through the header */
static void make_read(const uint8_t *pages, uint32_t n)
{
	size_t raw = (size_t)n * PS, cap = frame_bound(VMT_FRAME_TCODE, raw);
	uint8_t *f = malloc(VMT_FRAME_HDR_SIZE + cap), *back = malloc(raw);
	struct vmt_iovec iov = { (void *)pages, raw };
	struct vmt_frame_hdr h = { .codec = VMT_FRAME_TCODE, .npages = n }, h2;
	char why[256];
	ssize_t len;

	if (!f || !back)
		abort();
	len = frame_compress(mk, &iov, 1, f + VMT_FRAME_HDR_SIZE, cap);
	FUZZ_CHECK(len > 0 || len == -ENOSPC);
	if (len > 0) {
		frame_hdr_put(f, &h);
		FUZZ_CHECK(frame_hdr_get(f, VMT_FRAME_HDR_SIZE + (size_t)len, &h2, why, sizeof(why)) == 0);
		FUZZ_CHECK(frame_tcode_id(f + VMT_FRAME_HDR_SIZE, (size_t)len) == tcode_id(tc));
		FUZZ_CHECK(frame_decode_with(tc, h2.codec, f + VMT_FRAME_HDR_SIZE, (size_t)len, back, raw,
					     why, sizeof(why)) == 0);
		FUZZ_CHECK(!memcmp(back, pages, raw));
		/* without the schema it is refused, never misread */
		FUZZ_CHECK(frame_decode(h2.codec, f + VMT_FRAME_HDR_SIZE, (size_t)len, back, raw, why,
					sizeof(why)) == -ENOKEY);
	}
	free(f);
	free(back);
}

static void read_frame(const uint8_t *p, size_t size)
{
	struct vmt_frame_hdr h;
	char why[256];
	uint8_t *f, *out;
	size_t len, raw;
	int r;

	/* a copy of exactly its size: a read past it is ASan's */
	f = malloc(size ? size : 1);
	if (!f)
		abort();
	memcpy(f, p, size);
	if (frame_hdr_get(f, size, &h, why, sizeof(why)) < 0)
		goto out;
	len = size - VMT_FRAME_HDR_SIZE;
	raw = (size_t)h.npages * PS;
	/* what a reader budgets: no payload claims more than this */
	if (raw > len * VMT_FRAME_TCODE_RATIO_MAX)
		goto out;
	out = malloc(raw);
	if (!out)
		abort();
	r = frame_decode_with(tc, h.codec, f + VMT_FRAME_HDR_SIZE, len, out, raw, why, sizeof(why));
	FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -ENOKEY);
	if (r < 0)
		FUZZ_CHECK(why[0]);
	if (r == 0 && h.codec == VMT_FRAME_TCODE && h.npages <= 4)
		make_read(out, h.npages);
	free(out);
out:
	free(f);
}

static void read_streams(const uint8_t *p, size_t size)
{
	uint32_t n;
	size_t raw, zcap, stored;
	uint8_t *pages, *back, *payload;
	char why[256];
	size_t z;
	int r, r2;

	if (size < 1)
		return;
	n = 1 + p[0] % 4;
	raw = (size_t)n * PS;
	stored = (size_t)(p[0] >> 2) * 64;
	p++;
	size--;
	stored = VMT_MIN(stored, size);
	pages = calloc(1, raw);
	back = malloc(raw);
	zcap = VMT_FRAME_TCODE_HDR + ZSTD_compressBound(size);
	payload = malloc(zcap);
	if (!pages || !back || !payload)
		abort();
	r = tcode_decode(dec, p, size, pages, n);
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	put_le64(payload, tcode_id(tc));
	put_le32(payload + 8, r == 0 ? crc32c(0, pages, raw) : 0);
	z = ZSTD_compress(payload + VMT_FRAME_TCODE_HDR, zcap - VMT_FRAME_TCODE_HDR, p, size - stored, 1);
	FUZZ_CHECK(!ZSTD_isError(z) && z + stored <= zcap - VMT_FRAME_TCODE_HDR);
	memcpy(payload + VMT_FRAME_TCODE_HDR + z, p + size - stored, stored);
	z += stored;
	r2 = frame_decode_with(tc, VMT_FRAME_TCODE, payload, VMT_FRAME_TCODE_HDR + z, back, raw, why,
			       sizeof(why));
	if (r == 0) {
		/* streams a frame budget would refuse (more than twice the
		 * pages) are the only difference the frame path may add */
		FUZZ_CHECK(r2 == 0 || (r2 == -EBADMSG && size > raw * 2 + 4096));
		if (r2 == 0) {
			FUZZ_CHECK(!memcmp(back, pages, raw));
			make_read(pages, n);
		}
	} else {
		/* the same decoder refuses the same streams */
		FUZZ_CHECK(r2 == -EBADMSG);
	}
	free(pages);
	free(back);
	free(payload);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	setup();
	switch (data[0] % 3) {
	case 0:
		read_frame(data + 1, size - 1);
		break;
	case 1:
		read_streams(data + 1, size - 1);
		break;
	default: {
		uint32_t n = (uint32_t)VMT_MIN(4, VMT_MAX(1, (size - 1 + PS - 1) / PS));
		uint8_t *pages = calloc(n, PS);

		if (!pages)
			abort();
		memcpy(pages, data + 1, VMT_MIN(size - 1, (size_t)n * PS));
		make_read(pages, n);
		free(pages);
		break;
	}
	}
	return 0;
}
