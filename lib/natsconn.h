/* SPDX-License-Identifier: MIT */
/*
 * natsconn: the one way vmtraced's fleet and `vmtracectl fleet` open a NATS
 * connection from fleet: (servers, credentials, TLS), so both refuse the
 * same things. TLS asked for (a tls: block, or any tls:// URL) is TLS or
 * nothing: the options are secure, and libnats then refuses a server whose
 * INFO does not require TLS (NATS_SECURE_CONNECTION_WANTED) before it sends
 * CONNECT and the credentials in it; the server's certificate is verified
 * against the CA and the URL's host. The first INFO is bounded by libnats
 * (32 KiB); a garbage greeting fails the connect. libnats is dlnats.h's:
 * loaded by dlnats_open() before any of this is called.
 */
#ifndef VMT_NATSCONN_H
#define VMT_NATSCONN_H

#include <stdbool.h>
#include <stddef.h>

#include "dlnats.h"	/* libnats, loaded when fleet: is configured */

#include "config.h"

/*
 * Before anything else of libnats or OpenSSL, on the main thread: OpenSSL
 * without its atexit cleanup. libnats 3.4.1's own exit handler frees
 * OpenSSL's compression-method stack (sk_SSL_COMP_free in _finalCleanup);
 * when OPENSSL_cleanup() ran after it, or beside a libnats thread, it
 * freed that stack again: the SIGSEGV in libcrypto at shutdown. 0 or -EIO.
 */
int natsconn_init(void);
/* A tls: block or a tls:// URL. */
bool natsconn_wants_tls(const struct vmt_fleet_conf *c);
/* NULL, or one line (no newline) on what travels in clear without TLS. */
const char *natsconn_insecure(const struct vmt_fleet_conf *c);
/* Options for c (name may be NULL); 0, or -errno with why filled. */
int natsconn_options(natsOptions **out, const struct vmt_fleet_conf *c, const char *name,
		     int timeout_ms, char *why, size_t n);
/*
 * A failed connect told apart, for status: "refused" (authentication),
 * "insecure" (TLS wanted, the server does not do it), "tls-failed"
 * (handshake, certificate), "bad-server" (not the NATS protocol), else
 * "connecting".
 */
const char *natsconn_state(natsStatus s, const char *last_error);
/*
 * libnats torn down before exit: every NATS object destroyed first, then
 * this waits (up to timeout_ms) until libnats' own threads are gone, so none
 * frees an SSL object while exit() runs OpenSSL's cleanup. -ETIMEDOUT if
 * they did not finish.
 */
int natsconn_close(int64_t timeout_ms);
/*
 * Subscriptions of nc ended and freed, n of them (NULLs skipped), safely
 * while messages still arrive. libnats 3.4.1's read loop looks a message's
 * subscription up, lets the connection's lock go and then locks the
 * subscription: one destroyed in that gap is used after it is freed (a
 * SIGSEGV in natsConn_processMsg; nats.c issue 637, fixed upstream after
 * 3.4.1). So every one is unsubscribed first, then a round trip (at most
 * flush_ms) lets the read loop finish whatever it had already taken, and
 * only then are they destroyed. nc may be closed: its read loop is gone.
 */
void natsconn_subs_end(natsConnection *nc, natsSubscription **subs, size_t n, int64_t flush_ms);

#endif
