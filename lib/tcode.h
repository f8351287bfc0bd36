/* SPDX-License-Identifier: MIT */
/*
 * tcode: a lossless, format-aware transcoder for runs of ftrace pages of
 * one CPU. Each page is parsed with the guest's own event formats (from its
 * metadata bundle: events/header_page, events/<system>/<event>/format) and
 * split into streams: page headers, record headers and time deltas, event
 * ids, each event's fields column by column (integers as zigzag varints of
 * their difference from the previous value of the same column; task names
 * interned per run; sched_switch's prev_* predicted from the previous
 * switch's next_*), and raw bytes for whatever the formats do not explain
 * (unknown ids, short records, dynamic data, padding, a page's unused
 * tail). The streams, concatenated, compress far better than the pages;
 * the caller entropy-codes them (lib/frame.c).
 *
 * Decoding gives every page back bit for bit with the same schema: any
 * page, well formed or not, survives the round trip; the encoder never
 * fails on a page's content. The decoder treats its input as hostile:
 * every read is bounded, and a stream that does not decode to exactly the
 * pages asked for is -EBADMSG.
 *
 * Encoded layout (docs/FORMAT.md, 2.6):
 *   "TC" u8 version, varint npages, varint nstreams,
 *   nstreams x (varint stream id, varint length), then the streams' bytes
 *   in that order; in version 2 the stored streams' bytes come last.
 */
#ifndef VMT_TCODE_H
#define VMT_TCODE_H

#include <stddef.h>
#include <stdint.h>

#include "page.h"

struct vmt_buf;
struct vmt_tcode;	/* a schema: read-only once built, shared by threads */
struct vmt_tcode_ctx;	/* one thread's scratch: streams and column state */

#define VMT_TCODE_VERSION 2	/* what the encoder writes; the decoder reads 1 and 2 */
/* Bounds a decoder holds any input to, whatever it says. */
#define VMT_TCODE_MAX_EVENTS 16384u	/* formats taken into a schema */
#define VMT_TCODE_MAX_FIELDS 64u	/* per event; more: the rest raw */

struct vmt_tcode_stats {
	uint64_t pages;
	uint64_t records;	/* ring-buffer records of every kind */
	uint64_t events;	/* data records split into fields */
	uint64_t events_raw;	/* data records kept raw: unknown id, too short */
	uint64_t tail_raw;	/* pages whose bytes past the records are not all zero */
	uint64_t predicted;	/* sched_switch prev_* taken from the previous switch */
};

/*
 * A schema from a metadata bundle (lib/meta.h, validated). Formats that do
 * not parse are left out (their events then travel raw); a bundle without a
 * usable header_page is -EINVAL. *out is freed with tcode_free().
 */
int tcode_new(struct vmt_tcode **out, const uint8_t *bundle, size_t len, uint32_t page_size);
void tcode_free(struct vmt_tcode *t);
/* Events and columns the schema knows (for tests and status). */
uint32_t tcode_nevents(const struct vmt_tcode *t);
uint32_t tcode_ncolumns(const struct vmt_tcode *t);
/* A hash of what the schema was built from (the page size, header_page and
 * the event formats in bundle order): two bundles of one id make the same
 * schema, whatever else they hold (task names). A frame names it. */
uint64_t tcode_id(const struct vmt_tcode *t);
uint32_t tcode_page_size(const struct vmt_tcode *t);
/* Never the same for two schemas of one process (a context's cache key). */
uint64_t tcode_serial(const struct vmt_tcode *t);

/* A context encodes or decodes, never both: each direction resets between
 * runs only the column state it used itself (frame.c keeps the compressor's
 * and each reading thread's apart). */
int tcode_ctx_new(struct vmt_tcode_ctx **out, const struct vmt_tcode *t);
void tcode_ctx_free(struct vmt_tcode_ctx *c);

/*
 * Encode npages pages (page_size each) into out (appended). Fails only for
 * memory (-ENOMEM) or npages of 0 / over VMT_FRAME_MAX_PAGES (-EINVAL); st,
 * if given, is added to.
 */
int tcode_encode(struct vmt_tcode_ctx *c, const uint8_t *pages, uint32_t npages,
		 struct vmt_buf *out, struct vmt_tcode_stats *st);

/*
 * How many bytes at the end of the last tcode_encode()'s output are for no
 * entropy coder (noise: the time deltas' low planes); the caller compresses
 * the rest and stores these as they are, and gives the decoder the two
 * joined again.
 */
size_t tcode_stored_tail(const struct vmt_tcode_ctx *c);

/*
 * Decode exactly npages pages into pages (npages * page_size bytes). 0, or
 * -EBADMSG for input that is not such an encoding (pages then undefined).
 */
int tcode_decode(struct vmt_tcode_ctx *c, const uint8_t *in, size_t len, uint8_t *pages,
		 uint32_t npages);

#endif
