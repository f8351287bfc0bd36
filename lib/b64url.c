/* SPDX-License-Identifier: MIT */
#include <limits.h>
#include <openssl/evp.h>

#include "b64url.h"

void b64url(char *out, size_t n, const uint8_t *in, size_t len)
{
	if (len > INT_MAX / 2 || ((len + 2) / 3) * 4 + 1 > n) {
		if (n)
			out[0] = 0;
		return;
	}
	EVP_EncodeBlock((unsigned char *)out, in, (int)len);	/* NUL-terminated */
	for (char *q = out; *q; q++)
		*q = *q == '+' ? '-' : *q == '/' ? '_' : *q;
}
