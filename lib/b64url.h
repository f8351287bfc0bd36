/* SPDX-License-Identifier: MIT */
/* base64url with padding, as the NATS object store names objects and
 * digests (RFC 4648 section 5: - and _ for + and /). */
#ifndef VMT_B64URL_H
#define VMT_B64URL_H

#include <stddef.h>
#include <stdint.h>

/* len bytes of in into out (n bytes, NUL-terminated); "" when it would not fit. */
void b64url(char *out, size_t n, const uint8_t *in, size_t len);

#endif
