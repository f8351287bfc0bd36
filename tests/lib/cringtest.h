/* SPDX-License-Identifier: MIT */
/* For tests of compressed rings (they build with -Idaemon): what the
 * compressor thread does to a ring, here and now. */
#ifndef VMT_CRINGTEST_H
#define VMT_CRINGTEST_H

#include "frame.h"
#include "ring.h"
#include "testutil.h"
#include "util.h"

/* Compress r's next due batch with z (zstd) and hand the frame back. */
static inline void cring_compress_batch(struct vmt_ring *r, struct vmt_frame_ctx *z)
{
	static uint8_t out[1 << 20];
	struct vmt_ring_hold h;
	struct vmt_frame_hdr fh;
	uint64_t gen, place[2];
	ssize_t n;

	ck_assert_int_eq(ring_batch_begin(r, &h, &fh, place), 0);
	gen = r->batch_gen;
	fh.codec = VMT_FRAME_ZSTD;
	n = frame_compress(z, h.runs, h.nruns, out, sizeof(out));
	ck_assert_int_gt(n, 0);
	ring_batch_end(r, gen, &fh, out, n, crc32c(0, out, (size_t)n));
	ring_release(&h);
	ring_settle_slots(r);
}

#endif
