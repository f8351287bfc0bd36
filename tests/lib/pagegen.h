/* SPDX-License-Identifier: MIT */
/* pagegen: build synthetic ftrace pages (64-bit layout) for tests. */
#ifndef VMT_PAGEGEN_H
#define VMT_PAGEGEN_H

#include <stdint.h>

struct pagegen {
	uint8_t *page;
	uint32_t size;		/* page size */
	uint32_t pos;		/* bytes of data written */
	uint64_t ts;		/* time of the last event */
};

/* Start a page of size bytes at base timestamp ts. */
void pagegen_init(struct pagegen *g, uint8_t *page, uint32_t size, uint64_t ts);
/* A data event of len payload bytes, delta ns after the previous one;
 * -1 if it does not fit. Deltas over 2^27 get a TIME_EXTEND first. */
int pagegen_event(struct pagegen *g, uint64_t delta, uint32_t len, uint8_t fill);
/* Padding of len bytes (a discarded event). */
int pagegen_padding(struct pagegen *g, uint32_t len);
/* Write the commit word; flags may hold the missed-events bits. */
void pagegen_finish(struct pagegen *g, uint64_t flags);
/* Fill a page with n events of 8..64 bytes, 1000 ns apart from ts. */
void pagegen_simple(uint8_t *page, uint32_t size, uint64_t ts, uint32_t n);

#endif
