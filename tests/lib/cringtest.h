/* SPDX-License-Identifier: MIT */
/* For tests of compressed rings (they build with -Idaemon): what the
 * compressor's worker does to a ring, here and now. */
#ifndef VMT_CRINGTEST_H
#define VMT_CRINGTEST_H

#include <string.h>

#include "frame.h"
#include "ring.h"
#include "testutil.h"
#include "util.h"

/* Copy b's pages out as a worker does, and compress the copy with z
 * (codec in b->h.codec): the payload's length, -ECANCELED if the fill
 * overwrote a page first. */
static inline ssize_t cring_compress_copy(struct vmt_ring_batch *b, struct vmt_frame_ctx *z, uint8_t *out,
					  size_t cap)
{
	static uint8_t in[VMT_RING_BATCH_MAX_BYTES];
	struct vmt_iovec one = { in, 0 };

	for (uint32_t i = 0; i < b->nruns; i++) {
		memcpy(in + one.len, b->runs[i].base, b->runs[i].len);
		one.len += b->runs[i].len;
	}
	if (!ring_batch_intact(b))
		return -ECANCELED;
	return frame_compress(z, &one, 1, out, cap);
}

/* Compress r's next due batch with z (of codec: a NONE context stores the
 * pages as they are, as a worker does when they do not compress) and hand
 * the frame back. */
static inline void cring_compress_batch_as(struct vmt_ring *r, struct vmt_frame_ctx *z, uint32_t codec)
{
	static uint8_t out[VMT_RING_BATCH_MAX_BYTES + 65536];
	struct vmt_ring_batch b;
	ssize_t n;

	ck_assert_int_eq(ring_batch_begin(r, &b), 0);
	b.h.codec = codec;
	n = cring_compress_copy(&b, z, out, sizeof(out));
	ck_assert_int_gt(n, 0);
	ring_batch_end(r, &b, out, n, crc32c(0, out, (size_t)n));
	ring_batch_put(&b);
}

static inline void cring_compress_batch(struct vmt_ring *r, struct vmt_frame_ctx *z)
{
	cring_compress_batch_as(r, z, VMT_FRAME_ZSTD);
}

#endif
