/* SPDX-License-Identifier: MIT */
/*
 * fuzz: what the libFuzzer targets in this folder share. FUZZ_CHECK aborts
 * on a broken invariant, so that libFuzzer saves the input as a crash.
 * vfile_fixup() rewrites every CRC of a vfile image: without it a mutated
 * sample or aux stops at the first CRC check and the parsers behind it are
 * never reached.
 */
#ifndef VMT_FUZZ_H
#define VMT_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "util.h"
#include "vfile.h"

#define FUZZ_CHECK(cond)                                                              \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__,    \
				__LINE__, #cond);                                     \
			abort();                                                      \
		}                                                                     \
	} while (0)

/* Recompute the file header CRC and, for every section that lies inside
 * the image, its data CRC and header CRC. */
static inline void vfile_fixup(uint8_t *m, size_t size)
{
	size_t pos = VMT_VFILE_HDR_SIZE;

	if (size < VMT_VFILE_HDR_SIZE)
		return;
	put_le32(m + 28, crc32c(0, m, 28));
	while (size - pos >= VMT_VSECT_HDR_SIZE) {
		uint8_t *h = m + pos;
		uint64_t stored = get_le64(h + 16);
		size_t data = pos + VMT_VSECT_HDR_SIZE;

		if (stored <= size - data)
			put_le32(h + 12, crc32c(0, h + VMT_VSECT_HDR_SIZE, (size_t)stored));
		put_le32(h + 36, crc32c(0, h, 36));
		if (get_le32(h) == VMT_VSECT_END || stored > size - data)
			break;
		pos = data + (size_t)stored;
	}
}

#endif
