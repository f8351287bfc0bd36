/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <lz4.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "frame.h"
#include "tcode.h"
#include "util.h"

const char *frame_codec_name(uint32_t codec)
{
	switch (codec) {
#define X(n, v, t) case v: return t;
	VMT_FRAME_CODECS(X)
#undef X
	}
	return NULL;
}

int frame_codec_parse(const char *s)
{
#define X(n, v, t) if (!strcmp(s, t)) return v;
	VMT_FRAME_CODECS(X)
#undef X
	return -EINVAL;
}

void frame_hdr_put(uint8_t out[VMT_FRAME_HDR_SIZE], const struct vmt_frame_hdr *h)
{
	put_le32(out + 0, h->codec);
	put_le32(out + 4, h->npages);
	put_le64(out + 8, h->first_seq);
	put_le64(out + 16, h->first_ts);
	put_le64(out + 24, h->last_ts);
	put_le32(out + 32, h->events);
	put_le32(out + 36, h->flags);
}

int frame_hdr_get(const uint8_t *p, size_t len, struct vmt_frame_hdr *h, char *why, size_t why_len)
{
	const char *bad = NULL;

	memset(h, 0, sizeof(*h));
	if (len < VMT_FRAME_HDR_SIZE) {
		snprintf(why, why_len, "frame of %zu bytes, shorter than its header", len);
		return -EBADMSG;
	}
	h->codec = get_le32(p + 0);
	h->npages = get_le32(p + 4);
	h->first_seq = get_le64(p + 8);
	h->first_ts = get_le64(p + 16);
	h->last_ts = get_le64(p + 24);
	h->events = get_le32(p + 32);
	h->flags = get_le32(p + 36);
	if (!frame_codec_name(h->codec))
		bad = "an unknown codec";
	else if (!h->npages || h->npages > VMT_FRAME_MAX_PAGES)
		bad = "a page count out of range";
	else if (h->flags & ~VMT_FRAME_MISSED)
		bad = "unknown flags";
	else if (h->first_ts > h->last_ts)
		bad = "its first event after its last";
	if (bad) {
		snprintf(why, why_len, "frame header with %s (codec %u, %u pages, flags %#x)", bad,
			 h->codec, h->npages, h->flags);
		return -EBADMSG;
	}
	return 0;
}

struct vmt_frame_ctx {
	uint32_t codec;
	int level;
	size_t max_raw;
	ZSTD_CCtx *z;
	void *lz4_state;
	uint8_t *gather;	/* max_raw bytes: pieces made contiguous */
	/* TCODE: the schema's serial, its context and the transcoding */
	const struct vmt_tcode *t;
	uint64_t t_serial;
	struct vmt_tcode_ctx *tc;
	struct vmt_buf enc;
};

struct vmt_frame_ctx *frame_ctx_new(uint32_t codec, int level, size_t max_raw)
{
	struct vmt_frame_ctx *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	*c = (struct vmt_frame_ctx){ .codec = codec, .level = level, .max_raw = max_raw };
	c->gather = malloc(max_raw ? max_raw : 1);
	if (codec == VMT_FRAME_ZSTD || codec == VMT_FRAME_TCODE) {
		c->z = ZSTD_createCCtx();
		if (c->z && ZSTD_isError(ZSTD_CCtx_setParameter(c->z, ZSTD_c_compressionLevel, level)))
			goto fail;
		if (c->z)
			ZSTD_CCtx_setParameter(c->z, ZSTD_c_contentSizeFlag, 1);
	} else if (codec == VMT_FRAME_LZ4) {
		c->lz4_state = malloc((size_t)LZ4_sizeofState());
	}
	if (!c->gather || ((codec == VMT_FRAME_ZSTD || codec == VMT_FRAME_TCODE) && !c->z) || (codec == VMT_FRAME_LZ4 && !c->lz4_state))
		goto fail;
	return c;
fail:
	frame_ctx_free(c);
	return NULL;
}

void frame_ctx_free(struct vmt_frame_ctx *c)
{
	if (!c)
		return;
	ZSTD_freeCCtx(c->z);
	free(c->lz4_state);
	free(c->gather);
	tcode_ctx_free(c->tc);
	buf_free(&c->enc);
	free(c);
}

int frame_ctx_schema(struct vmt_frame_ctx *c, const struct vmt_tcode *t)
{
	if (t && c->tc && c->t_serial == tcode_serial(t)) {
		c->t = t;
		return 0;
	}
	tcode_ctx_free(c->tc);
	c->tc = NULL;
	c->t = NULL;
	if (!t)
		return 0;
	if (tcode_ctx_new(&c->tc, t) < 0)
		return -ENOMEM;
	c->t = t;
	c->t_serial = tcode_serial(t);
	return 0;
}

/* Pages transcoded, the streams zstd-coded behind the schema id and the pages' CRC,
 * the stored ones after the zstd frame as they are. */
static ssize_t tcode_compress(struct vmt_frame_ctx *c, const uint8_t *src, size_t raw, uint8_t *out,
			      size_t cap)
{
	uint32_t ps;
	size_t r, stored;

	if (!c->tc)
		return -ENOKEY;
	ps = tcode_page_size(c->t);
	if (!ps || raw % ps || cap < VMT_FRAME_TCODE_HDR)
		return -EINVAL;
	c->enc.len = 0;
	if (tcode_encode(c->tc, src, (uint32_t)(raw / ps), &c->enc, NULL) < 0)
		return -ENOMEM;
	stored = tcode_stored_tail(c->tc);
	put_le64(out, tcode_id(c->t));
	put_le32(out + 8, crc32c(0, src, raw));
	r = ZSTD_compress2(c->z, out + VMT_FRAME_TCODE_HDR, cap - VMT_FRAME_TCODE_HDR, c->enc.data,
			   c->enc.len - stored);
	if (ZSTD_isError(r))
		return ZSTD_getErrorCode(r) == ZSTD_error_dstSize_tooSmall ? -ENOSPC : -EIO;
	r += VMT_FRAME_TCODE_HDR;
	if (stored > cap - r)
		return -ENOSPC;
	memcpy(out + r, c->enc.data + c->enc.len - stored, stored);
	r += stored;
	if (raw > r * (size_t)VMT_FRAME_TCODE_RATIO_MAX)
		return -ENOSPC;	/* more than a reader budgets for */
	return (ssize_t)r;
}

size_t frame_bound(uint32_t codec, size_t raw)
{
	switch (codec) {
	case VMT_FRAME_ZSTD:
		return ZSTD_compressBound(raw);
	case VMT_FRAME_TCODE:	/* what does not fit is made a zstd frame (-ENOSPC) */
		return ZSTD_compressBound(raw);
	case VMT_FRAME_LZ4:
		return raw > LZ4_MAX_INPUT_SIZE ? 0 : (size_t)LZ4_compressBound((int)raw);
	default:
		return raw;
	}
}

ssize_t frame_compress(struct vmt_frame_ctx *c, const struct vmt_iovec *iov, size_t n, uint8_t *out,
		       size_t cap)
{
	const void *src;
	size_t raw = 0;

	for (size_t i = 0; i < n; i++)
		raw += iov[i].len;
	if (raw > c->max_raw || cap < frame_bound(c->codec, raw))
		return -EINVAL;
	if (n == 1) {
		src = iov[0].base;
	} else {
		size_t off = 0;

		for (size_t i = 0; i < n; i++) {
			memcpy(c->gather + off, iov[i].base, iov[i].len);
			off += iov[i].len;
		}
		src = c->gather;
	}
	switch (c->codec) {
	case VMT_FRAME_ZSTD: {
		size_t r = ZSTD_compress2(c->z, out, cap, src, raw);

		return ZSTD_isError(r) ? -EIO : (ssize_t)r;
	}
	case VMT_FRAME_TCODE:
		return tcode_compress(c, src, raw, out, cap);
	case VMT_FRAME_LZ4: {
		int r = LZ4_compress_fast_extState(c->lz4_state, src, (char *)out, (int)raw, (int)cap,
						   VMT_MAX(c->level, 1));

		return r <= 0 ? -EIO : r;
	}
	default:
		memcpy(out, src, raw);
		return (ssize_t)raw;
	}
}

/* One decompression context per thread, kept: readers decode many frames. */
static ZSTD_DCtx *dctx(void)
{
	static __thread ZSTD_DCtx *d;

	if (!d)
		d = ZSTD_createDCtx();
	return d;
}

uint64_t frame_tcode_id(const uint8_t *payload, size_t len)
{
	return len < VMT_FRAME_TCODE_HDR ? 0 : get_le64(payload);
}

/* A thread's decoding context for one schema (by serial: a schema freed
 * and another made at its address is another), and the streams' buffer. */
struct tdec {
	uint64_t serial;
	struct vmt_tcode_ctx *tc;
	uint8_t *buf;
	size_t cap;
};

static __thread struct tdec tdec;

static void tdec_free(void)
{
	tcode_ctx_free(tdec.tc);
	free(tdec.buf);
	tdec = (struct tdec){ 0 };
}

/* What a transcoding of raw page bytes may take: more than the pages only
 * by a few varints a record (4 bytes at least each) and a page. */
static size_t tcode_max_enc(size_t raw)
{
	return raw * 2 + 4096;
}

static int tcode_decode_payload(const struct vmt_tcode *t, const uint8_t *payload, size_t len,
				void *out, size_t raw, char *why, size_t why_len)
{
	uint32_t ps = tcode_page_size(t);
	const uint8_t *z = payload + VMT_FRAME_TCODE_HDR;
	size_t zlen = len - VMT_FRAME_TCODE_HDR, fs, r, stored;
	unsigned long long cs;
	ZSTD_DCtx *d;

	if (!ps || raw % ps) {
		snprintf(why, why_len, "%zu bytes are not whole pages of %u", raw, ps);
		return -EBADMSG;
	}
	cs = ZSTD_getFrameContentSize(z, zlen);
	fs = ZSTD_findFrameCompressedSize(z, zlen);
	/* the stored bytes after the zstd frame join its content */
	if (cs == ZSTD_CONTENTSIZE_ERROR || cs == ZSTD_CONTENTSIZE_UNKNOWN || ZSTD_isError(fs) ||
	    fs > zlen || cs > tcode_max_enc(raw) || zlen - fs > tcode_max_enc(raw) - cs) {
		snprintf(why, why_len, "tcode: not one zstd frame and stored bytes of at most %zu bytes "
			 "with its content size", tcode_max_enc(raw));
		return -EBADMSG;
	}
	stored = zlen - fs;
	if (tdec.serial != tcode_serial(t) || !tdec.tc) {
		tdec_free();
		if (tcode_ctx_new(&tdec.tc, t) < 0)
			return -ENOMEM;
		tdec.serial = tcode_serial(t);
	}
	if (tdec.cap < cs + stored) {
		uint8_t *nb = realloc(tdec.buf, cs + stored ? cs + stored : 1);

		if (!nb)
			return -ENOMEM;
		tdec.buf = nb;
		tdec.cap = cs + stored;
	}
	d = dctx();
	if (!d)
		return -ENOMEM;
	r = ZSTD_decompressDCtx(d, tdec.buf, cs, z, fs);
	if (ZSTD_isError(r) || r != cs) {
		snprintf(why, why_len, "tcode: zstd: %s", ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short");
		return -EBADMSG;
	}
	if (stored)
		memcpy(tdec.buf + cs, z + fs, stored);
	if (tcode_decode(tdec.tc, tdec.buf, cs + stored, out, (uint32_t)(raw / ps)) < 0) {
		snprintf(why, why_len, "tcode: the streams do not decode to %zu pages", raw / ps);
		return -EBADMSG;
	}
	if (crc32c(0, out, raw) != get_le32(payload + 8)) {
		snprintf(why, why_len, "tcode: the pages decoded do not have the CRC they were made with");
		return -EBADMSG;
	}
	return 0;
}

int frame_decode(uint32_t codec, const uint8_t *payload, size_t len, void *out, size_t raw, char *why,
		 size_t why_len)
{
	return frame_decode_with(NULL, codec, payload, len, out, raw, why, why_len);
}

int frame_decode_with(const struct vmt_tcode *t, uint32_t codec, const uint8_t *payload, size_t len,
		      void *out, size_t raw, char *why, size_t why_len)
{
	switch (codec) {
	case VMT_FRAME_TCODE:
		if (len < VMT_FRAME_TCODE_HDR)
			goto size;
		if (!t || tcode_id(t) != get_le64(payload)) {
			snprintf(why, why_len, "a tcode frame needs the guest's formats (schema %016llx), "
				 "%s", (unsigned long long)get_le64(payload),
				 t ? "and its aux has others" : "and its aux was not found");
			return -ENOKEY;
		}
		return tcode_decode_payload(t, payload, len, out, raw, why, why_len);
	case VMT_FRAME_NONE:
		if (len != raw)
			goto size;
		memcpy(out, payload, raw);
		return 0;
	case VMT_FRAME_ZSTD: {
		unsigned long long cs = ZSTD_getFrameContentSize(payload, len);
		size_t fs = ZSTD_findFrameCompressedSize(payload, len), r;
		ZSTD_DCtx *d;

		if (cs == ZSTD_CONTENTSIZE_ERROR || cs == ZSTD_CONTENTSIZE_UNKNOWN || ZSTD_isError(fs)) {
			snprintf(why, why_len, "not a zstd frame with its content size");
			return -EBADMSG;
		}
		if (cs != raw || fs != len)
			goto size;
		d = dctx();
		if (!d)
			return -ENOMEM;
		r = ZSTD_decompressDCtx(d, out, raw, payload, len);
		if (ZSTD_isError(r)) {
			snprintf(why, why_len, "zstd: %s", ZSTD_getErrorName(r));
			return -EBADMSG;
		}
		if (r != raw)
			goto size;
		return 0;
	}
	case VMT_FRAME_LZ4: {
		int r;

		if (len > LZ4_MAX_INPUT_SIZE || raw > INT32_MAX)
			goto size;
		r = LZ4_decompress_safe((const char *)payload, out, (int)len, (int)raw);
		if (r < 0) {
			snprintf(why, why_len, "lz4: the block does not decode");
			return -EBADMSG;
		}
		if ((size_t)r != raw)
			goto size;
		return 0;
	}
	}
	snprintf(why, why_len, "unknown codec %u", codec);
	return -EBADMSG;
size:
	snprintf(why, why_len, "%s payload of %zu bytes does not decode to exactly %zu bytes",
		 frame_codec_name(codec) ? frame_codec_name(codec) : "?", len, raw);
	return -EBADMSG;
}
