/* SPDX-License-Identifier: MIT */
/*
 * The transcoder (lib/tcode.h), against a schema of real formats (the
 * corpus guest's sched_switch, sched_stat_runtime, hrtimer_start,
 * softirq_entry, sched_process_exec, sched_wakeup; print fmt lines left
 * out, the schema does not read them).
 *
 * Input: u8 flags, then bytes. flags bit 0 set: the bytes are an encoding,
 * decoded into 1 + (flags >> 1) % 4 pages: refused (-EBADMSG) or pages,
 * and pages that decode must encode and decode to themselves. Bit 0 clear:
 * the bytes, zero-filled to whole pages (1 to 4), are pages: they must
 * encode, and decode bit for bit. Pages are malloc'd of exactly their size.
 */
#include <errno.h>
#include <string.h>

#include "tcode-schema.h"

static struct vmt_tcode *tc;
static struct vmt_tcode_ctx *enc, *dec;

static void schema(void)
{
	if (tc)
		return;
	tc = fuzz_tcode_schema();
	FUZZ_CHECK(tcode_ctx_new(&enc, tc) == 0 && tcode_ctx_new(&dec, tc) == 0);
}

/* pages -> encoding -> pages, the same */
static void round_trip(const uint8_t *pages, uint32_t n)
{
	struct vmt_buf out = { 0 };
	uint8_t *back = malloc((size_t)n * PS);

	if (!back)
		abort();
	FUZZ_CHECK(tcode_encode(enc, pages, n, &out, NULL) == 0);
	FUZZ_CHECK(tcode_decode(dec, out.data, out.len, back, n) == 0);
	FUZZ_CHECK(!memcmp(back, pages, (size_t)n * PS));
	buf_free(&out);
	free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t n;
	uint8_t *pages;
	int r;

	if (size < 1)
		return 0;
	schema();
	n = 1 + (data[0] >> 1) % 4;
	pages = calloc(n, PS);
	if (!pages)
		abort();
	if (data[0] & 1) {
		uint8_t *in = malloc(size - 1 ? size - 1 : 1);

		if (!in)
			abort();
		memcpy(in, data + 1, size - 1);
		r = tcode_decode(dec, in, size - 1, pages, n);
		FUZZ_CHECK(r == 0 || r == -EBADMSG);
		if (r == 0)
			round_trip(pages, n);
		free(in);
	} else {
		memcpy(pages, data + 1, VMT_MIN(size - 1, (size_t)n * PS));
		round_trip(pages, n);
	}
	free(pages);
	return 0;
}
