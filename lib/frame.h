/* SPDX-License-Identifier: MIT */
/*
 * frame: a run of consecutive ftrace pages of one CPU, compressed as one
 * piece. A compressed ring (daemon/frames.h) keeps its older pages as
 * frames; a dump writes them into the sample as they are, one FRAME
 * section each, and readers decode them (docs/FORMAT.md, 2.5).
 *
 * A frame is a 40-byte header and a payload:
 *   codec NONE: the pages themselves, npages * page_size bytes;
 *   codec ZSTD: exactly one zstd frame (RFC 8878) whose header carries the
 *               content size, npages * page_size;
 *   codec LZ4:  one LZ4 block (no LZ4 frame header) that decodes to exactly
 *               npages * page_size bytes;
 *   codec TCODE: u64 the schema's tcode_id, u32 the CRC32C of the pages,
 *               then one zstd frame (with its content size) of the pages'
 *               transcoding (lib/tcode.h). It decodes only with a schema
 *               of that id, made from the guest's aux.
 * The header says which pages they are (first_seq, npages) and what is in
 * them (first and last event time, events, whether a page lost events), so
 * a window can be chosen without decoding.
 */
#ifndef VMT_FRAME_H
#define VMT_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "vfile.h"	/* struct vmt_iovec */

#define VMT_FRAME_HDR_SIZE 40
#define VMT_FRAME_TCODE_HDR 12	/* a TCODE payload's schema id and pages CRC */
#define VMT_FRAME_NCODECS 4
/* A TCODE payload holds at most this many page bytes per byte of it: what
 * readers budget; the compressor makes a zstd frame of pages beyond it. */
#define VMT_FRAME_TCODE_RATIO_MAX 4096u
#define VMT_FRAME_MAX_PAGES 4096u	/* per frame; readers refuse more */

/* X(name, value, text): codec values are the file format's. */
#define VMT_FRAME_CODECS(X)   \
	X(NONE, 0, "off")     \
	X(ZSTD, 1, "zstd")    \
	X(LZ4,  2, "lz4")     \
	X(TCODE, 3, "tcode")

enum vmt_frame_codec {
#define X(n, v, t) VMT_FRAME_##n = v,
	VMT_FRAME_CODECS(X)
#undef X
};
/* "zstd", ...; NULL for a value this build does not know. */
const char *frame_codec_name(uint32_t codec);
/* VMT_FRAME_* for "zstd", "lz4", "off"; -EINVAL otherwise. */
int frame_codec_parse(const char *s);

#define VMT_FRAME_MISSED 0x1u	/* a page of the frame says the guest lost events */

struct vmt_frame_hdr {
	uint32_t codec;
	uint32_t npages;
	uint64_t first_seq;	/* stream seq of the first page */
	uint64_t first_ts, last_ts;	/* first and last event in the pages */
	uint32_t events;
	uint32_t flags;		/* VMT_FRAME_MISSED; other bits 0 */
};

/* Encode h into 40 bytes (little-endian, docs/FORMAT.md 2.5). */
void frame_hdr_put(uint8_t out[VMT_FRAME_HDR_SIZE], const struct vmt_frame_hdr *h);
/*
 * Decode and check a header from the first len bytes of a frame: known
 * codec, 1..VMT_FRAME_MAX_PAGES pages, no unknown flag, first_ts <=
 * last_ts. -EBADMSG with why.
 */
int frame_hdr_get(const uint8_t *p, size_t len, struct vmt_frame_hdr *h, char *why, size_t why_len);

/* A compressor: one per thread that compresses, made once. */
struct vmt_frame_ctx;
struct vmt_tcode;
/* level: zstd's level (ignored by lz4 but for its acceleration, 1). NULL on ENOMEM. */
struct vmt_frame_ctx *frame_ctx_new(uint32_t codec, int level, size_t max_raw);
void frame_ctx_free(struct vmt_frame_ctx *c);
/* TCODE: the schema the next frame_compress() transcodes with (the
 * caller keeps it alive until then); 0, or -ENOMEM. */
int frame_ctx_schema(struct vmt_frame_ctx *c, const struct vmt_tcode *t);
/* The largest payload a frame of raw bytes may need. */
size_t frame_bound(uint32_t codec, size_t raw);
/*
 * Compress the pieces (raw bytes in all) into out (cap bytes, at least
 * frame_bound). Returns the payload size, or -errno. Pieces of more than
 * one run are gathered into the context's buffer first (lz4 takes one
 * contiguous input). TCODE: raw is whole pages of the schema's page size;
 * -ENOKEY without a schema, -ENOSPC when the transcoding would not fit in
 * cap (pages it cannot explain): the caller makes a zstd frame instead.
 */
ssize_t frame_compress(struct vmt_frame_ctx *c, const struct vmt_iovec *iov, size_t n, uint8_t *out,
		       size_t cap);
/*
 * Decode a payload of codec into exactly raw bytes at out. -EBADMSG with
 * why when it is not exactly that (a zstd frame without the content size,
 * of another size, trailing bytes; an LZ4 block that decodes to fewer
 * bytes or runs over); -ENOMEM.
 */
int frame_decode(uint32_t codec, const uint8_t *payload, size_t len, void *out, size_t raw, char *why,
		 size_t why_len);
/*
 * The same with t, the schema a TCODE payload needs (NULL: such a payload
 * is -ENOKEY). A TCODE payload of another schema id is -ENOKEY too; one
 * that decodes to pages of another CRC is -EBADMSG. Thread-safe: each
 * thread keeps its own decoding context.
 */
int frame_decode_with(const struct vmt_tcode *t, uint32_t codec, const uint8_t *payload, size_t len,
		      void *out, size_t raw, char *why, size_t why_len);
/* A TCODE payload's schema id (0 when too short to hold one). */
uint64_t frame_tcode_id(const uint8_t *payload, size_t len);

#endif
