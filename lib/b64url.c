/* SPDX-License-Identifier: MIT */
#include "b64url.h"

void b64url(char *out, size_t n, const uint8_t *in, size_t len)
{
	static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
	size_t o = 0;

	if (len > (SIZE_MAX - 1) / 4 * 3 - 3 || ((len + 2) / 3) * 4 + 1 > n) {
		if (n)
			out[0] = 0;
		return;
	}
	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)in[i] << 16;

		if (i + 1 < len)
			v |= (uint32_t)in[i + 1] << 8;
		if (i + 2 < len)
			v |= in[i + 2];
		out[o++] = abc[v >> 18 & 63];
		out[o++] = abc[v >> 12 & 63];
		out[o++] = i + 1 < len ? abc[v >> 6 & 63] : '=';
		out[o++] = i + 2 < len ? abc[v & 63] : '=';
	}
	out[o] = 0;
}
