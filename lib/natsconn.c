/* SPDX-License-Identifier: MIT */
/*
 * natsconn: fleet: into libnats options (natsconn.h says what they refuse).
 * libnats 3.4.1 takes tls:// URLs as host:port and looks at no scheme: it
 * is natsOptions_SetSecure() alone that makes it insist on TLS (with
 * secure off, a server whose INFO omits tls_required gets CONNECT, password
 * and all, in clear). Debian's build verifies the server's certificate
 * against each URL's host (NATS_FORCE_HOST_VERIFICATION).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>


#include "natsconn.h"

int natsconn_init(void)
{
	/* the process exits right after: nothing is lost by not cleaning up */
	return OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL) == 1 ? 0 : -EIO;
}

bool natsconn_wants_tls(const struct vmt_fleet_conf *c)
{
	if (c->tls || c->tls_ca[0] || c->tls_cert[0])
		return true;
	for (uint32_t i = 0; i < c->nservers; i++)
		if (!strncmp(c->servers[i], "tls://", 6))
			return true;
	return false;
}

const char *natsconn_insecure(const struct vmt_fleet_conf *c)
{
	if (natsconn_wants_tls(c))
		return NULL;
	if (c->user[0])
		return "no TLS (no tls: block, no tls:// URL): the fleet's password, dump requests "
		       "and samples travel in clear; see docs/FLEET.md";
	return "no TLS (no tls: block, no tls:// URL): dump requests and samples travel in "
	       "clear and the server is not authenticated; see docs/FLEET.md";
}

int natsconn_options(natsOptions **out, const struct vmt_fleet_conf *c, const char *name,
		     int timeout_ms, char *why, size_t n)
{
	const char *urls[VMT_FLEET_MAX_SERVERS];
	natsOptions *o = NULL;
	const char *step = "options";
	natsStatus s;

	*out = NULL;
	for (uint32_t i = 0; i < c->nservers && i < VMT_FLEET_MAX_SERVERS; i++)
		urls[i] = c->servers[i];
	s = natsOptions_Create(&o);
	if (s == NATS_OK)
		s = natsOptions_SetServers(o, urls, (int)c->nservers);
	if (s == NATS_OK && name)
		s = natsOptions_SetName(o, name);
	if (s == NATS_OK)
		s = natsOptions_SetTimeout(o, timeout_ms);
	if (s == NATS_OK && c->user[0])
		s = natsOptions_SetUserInfo(o, c->user, c->password);
	if (s == NATS_OK && c->creds[0] && (step = "creds"))
		s = natsOptions_SetUserCredentialsFromFiles(o, c->creds, NULL);
	if (s == NATS_OK && c->nkey_seed[0] && (step = "nkey_seed"))
		s = natsOptions_SetNKeyFromSeed(o, NULL, c->nkey_seed);	/* the public key: derived */
	if (s == NATS_OK && natsconn_wants_tls(c) && (step = "tls"))
		s = natsOptions_SetSecure(o, true);
	if (s == NATS_OK && c->tls_ca[0] && (step = "tls.ca"))
		s = natsOptions_LoadCATrustedCertificates(o, c->tls_ca);
	if (s == NATS_OK && c->tls_cert[0] && (step = "tls.cert"))
		s = natsOptions_LoadCertificatesChain(o, c->tls_cert, c->tls_key);
	if (s != NATS_OK) {
		const char *last = nats_GetLastError(NULL);

		snprintf(why, n, "fleet.%s: %s%s%s", step, natsStatus_GetText(s),
			 last && *last ? ": " : "", last ? last : "");
		natsOptions_Destroy(o);
		return s == NATS_NO_MEMORY ? -ENOMEM : -EINVAL;
	}
	*out = o;
	return 0;
}

const char *natsconn_state(natsStatus s, const char *last)
{
	if (!last)
		last = "";
	if (s == NATS_CONNECTION_AUTH_FAILED || strcasestr(last, "authoriz") ||
	    strcasestr(last, "authentication"))
		return "refused";
	if (s == NATS_SECURE_CONNECTION_WANTED || strcasestr(last, "secure connection wanted"))
		return "insecure";
	if (s == NATS_SSL_ERROR || strcasestr(last, "SSL"))
		return "tls-failed";
	if (s == NATS_PROTOCOL_ERROR || s == NATS_LINE_TOO_LONG || strcasestr(last, "protocol") ||
	    strcasestr(last, "too long"))
		return "bad-server";
	return "connecting";
}

int natsconn_close(int64_t timeout_ms)
{
	return nats_CloseAndWait(timeout_ms) == NATS_OK ? 0 : -ETIMEDOUT;
}

void natsconn_subs_end(natsConnection *nc, natsSubscription **subs, size_t n, int64_t flush_ms)
{
	bool any = false;

	for (size_t i = 0; i < n; i++)
		if (subs[i] && natsSubscription_Unsubscribe(subs[i]) == NATS_OK)
			any = true;
	/* the PONG comes after every message the server sent before it */
	if (any && nc && natsConnection_Status(nc) == NATS_CONN_STATUS_CONNECTED)
		natsConnection_FlushTimeout(nc, flush_ms);
	for (size_t i = 0; i < n; i++) {
		natsSubscription_Destroy(subs[i]);
		subs[i] = NULL;
	}
}
