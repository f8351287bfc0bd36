/* SPDX-License-Identifier: MIT */
/*
 * fleet's connection: the uploader thread owns the libnats connection. It
 * connects (and reconnects, with backoff), keeps the subscriptions to what
 * the loop wants, and between waits has fleet-upload.c upload what the
 * state folder holds. libnats' callbacks here only set status.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "fleet-int.h"
#include "log.h"
#include "natsconn.h"
#include "util.h"

static void on_disconnected(natsConnection *nc, void *closure)
{
	struct vmt_fleet *f = closure;
	const char *last = NULL;
	natsStatus s = natsConnection_GetLastError(nc, &last);

	pthread_mutex_lock(&f->lock);
	f->st.connected = false;
	/* libnats 3.4.1 keeps no error for a server that broke the protocol
	 * (a garbage or oversized line): the disconnection, counted, is what
	 * status and the log can say while it reconnects */
	f->disconnects++;
	snprintf(f->st.state, sizeof(f->st.state), "%s", natsconn_state(s, last));
	snprintf(f->st.error, sizeof(f->st.error),
		 "disconnected from %.80s (%" PRIu64 " time(s))%s%s%s%.80s", f->st.server,
		 f->disconnects, s != NATS_OK ? ": " : "", s != NATS_OK ? natsStatus_GetText(s) : "",
		 last && *last ? ": " : "", last ? last : "");
	if (!f->disc_log_ns || now_monotonic_ns() - f->disc_log_ns > LOG_EVERY_NS) {
		f->disc_log_ns = now_monotonic_ns();
		log_warning("fleet: %s; reconnecting (logged once a minute)", f->st.error);
	}
	pthread_mutex_unlock(&f->lock);
}

static void on_reconnected(natsConnection *nc, void *closure)
{
	struct vmt_fleet *f = closure;

	pthread_mutex_lock(&f->lock);
	f->st.connected = true;
	snprintf(f->st.state, sizeof(f->st.state), "connected");
	natsConnection_GetConnectedUrl(nc, f->st.server, sizeof(f->st.server));
	f->st.error[0] = 0;
	f->kick = true;
	pthread_cond_signal(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

/* ---- the uploader thread ---------------------------------------------- */

/* Every subscription gone (the connection closed, or we stop). */
static void subs_drop(struct vmt_fleet *f, natsConnection *nc)
{
	natsSubscription *end[MAX_SUBS];
	uint32_t n = 0;

	for (uint32_t i = 0; i < f->nhave && n < MAX_SUBS; i++)
		end[n++] = f->have[i].sub;
	natsconn_subs_end(nc, end, n, 2000);	/* natsconn.h: not while one is read */
	f->nhave = 0;
	f->have_gen = 0;	/* all to make again */
	pthread_mutex_lock(&f->lock);
	f->st.subjects = 0;
	pthread_mutex_unlock(&f->lock);
}

static bool in_want(char (*want)[256], uint32_t n, const char *s)
{
	for (uint32_t i = 0; i < n; i++)
		if (!strcmp(want[i], s))
			return true;
	return false;
}

/*
 * What the loop wants subscribed, made so: subjects it no longer wants
 * are unsubscribed, new ones subscribed. Between upload passes and files,
 * so a label that changes is followed within one file's upload.
 */
void fleet_subs_apply(struct vmt_fleet *f, natsConnection *nc)
{
	char (*want)[256] = f->want_copy;
	natsSubscription *end[MAX_SUBS];
	uint32_t nwant, k = 0, nend = 0;
	uint64_t gen;

	if (natsConnection_Status(nc) == NATS_CONN_STATUS_CLOSED)
		return;
	pthread_mutex_lock(&f->lock);
	gen = f->want_gen;
	if (gen == f->have_gen) {
		pthread_mutex_unlock(&f->lock);
		return;
	}
	nwant = f->nwant;
	memcpy(want, f->want, nwant * sizeof(want[0]));
	pthread_mutex_unlock(&f->lock);
	for (uint32_t i = 0; i < f->nhave; i++) {
		if (in_want(want, nwant, f->have[i].subject))
			f->have[k++] = f->have[i];
		else
			end[nend++] = f->have[i].sub;
	}
	f->nhave = k;
	natsconn_subs_end(nc, end, nend, 2000);	/* natsconn.h: not while one is read */
	for (uint32_t i = 0; i < nwant; i++) {
		bool have = false;
		natsSubscription *sub = NULL;

		for (uint32_t j = 0; j < f->nhave && !have; j++)
			have = !strcmp(f->have[j].subject, want[i]);
		if (have || f->nhave >= MAX_SUBS)
			continue;
		if (natsConnection_Subscribe(&sub, nc, want[i], fleet_on_msg, f) != NATS_OK) {
			gen = 0;	/* tried again at the next pass */
			continue;
		}
		natsSubscription_SetPendingLimits(sub, REQ_QUEUE_MAX, REQ_QUEUE_MAX * REQ_MAX);
		snprintf(f->have[f->nhave].subject, sizeof(f->have[0].subject), "%s", want[i]);
		f->have[f->nhave++].sub = sub;
	}
	/* the server has them before status says so */
	if (natsConnection_Status(nc) == NATS_CONN_STATUS_CONNECTED)
		natsConnection_FlushTimeout(nc, 2000);
	f->have_gen = gen;
	pthread_mutex_lock(&f->lock);
	f->st.subjects = f->nhave;
	pthread_mutex_unlock(&f->lock);
}

/* What a failed connect is called in status and the log, by its state. */
static const char *connect_what(const char *state)
{
	if (!strcmp(state, "refused"))
		return "authentication refused";
	if (!strcmp(state, "insecure"))
		return "TLS is configured but the server does not require it: refused, "
		       "nothing sent";
	if (!strcmp(state, "tls-failed"))
		return "TLS handshake failed";
	if (!strcmp(state, "bad-server"))
		return "the server does not speak NATS";
	return "connecting";
}

void fleet_set_error(struct vmt_fleet *f, const char *what, natsStatus s)
{
	const char *last = nats_GetLastError(NULL);

	pthread_mutex_lock(&f->lock);
	snprintf(f->st.error, sizeof(f->st.error), "%s: %s%s%s", what, natsStatus_GetText(s),
		 last && *last ? ": " : "", last ? last : "");
	pthread_mutex_unlock(&f->lock);
}

/* The uploader's own: its connection and what it keeps between passes. */
struct uploader {
	natsConnection *nc;
	jsCtx *js;
	bool ensured;
	uint32_t backoff;
	uint64_t last_log;
};

/* A connection libnats closed for good: gone, and made again. */
static void uploader_drop(struct vmt_fleet *f, struct uploader *u)
{
	pthread_mutex_lock(&f->lock);
	f->nc = NULL;
	f->st.connected = false;
	snprintf(f->st.state, sizeof(f->st.state), "connecting");
	pthread_mutex_unlock(&f->lock);
	subs_drop(f, u->nc);
	jsCtx_Destroy(u->js);
	u->js = NULL;
	natsConnection_Destroy(u->nc);
	u->nc = NULL;
	u->ensured = false;
}

static natsStatus uploader_dial(struct vmt_fleet *f, struct uploader *u, natsOptions **o,
				char *why, size_t n)
{
	natsStatus s = NATS_ERR;

	if (natsconn_options(o, &f->conf, f->host, 2000, why, n) == 0) {
		s = natsOptions_SetMaxReconnect(*o, -1);	/* forever */
		if (s == NATS_OK)
			s = natsOptions_SetReconnectWait(*o, 250);
		if (s == NATS_OK)
			s = natsOptions_SetDisconnectedCB(*o, on_disconnected, f);
		if (s == NATS_OK)
			s = natsOptions_SetReconnectedCB(*o, on_reconnected, f);
		if (s == NATS_OK)
			s = natsConnection_Connect(&u->nc, *o);
		natsOptions_Destroy(*o);
	}
	return s;
}

/* Connect: 0, or -1 with status and the log told why (u->backoff grown). */
static int uploader_connect(struct vmt_fleet *f, struct uploader *u)
{
	natsOptions *o = NULL;
	char why[300];
	natsStatus s = uploader_dial(f, u, &o, why, sizeof(why));

	if (s != NATS_OK) {
		const char *last = nats_GetLastError(NULL);
		const char *state = o ? natsconn_state(s, last) : "bad-config";

		u->nc = NULL;
		if (o)
			fleet_set_error(f, connect_what(state), s);
		pthread_mutex_lock(&f->lock);
		if (!o)
			snprintf(f->st.error, sizeof(f->st.error), "%.199s", why);
		snprintf(f->st.state, sizeof(f->st.state), "%s", state);
		if (!strcmp(state, "refused"))
			f->st.auth_failures++;
		if (!u->last_log || now_monotonic_ns() - u->last_log > LOG_EVERY_NS) {
			u->last_log = now_monotonic_ns();
			log_error("fleet: %s (retrying; logged once a minute; local "
				  "recording goes on)", f->st.error);
		}
		pthread_mutex_unlock(&f->lock);
		u->backoff = u->backoff ? VMT_MIN(u->backoff * 2, BACKOFF_MAX_MS) : BACKOFF_MIN_MS;
		return -1;
	}
	u->backoff = 0;
	fleet_subs_apply(f, u->nc);
	natsConnection_JetStream(&u->js, u->nc, NULL);
	pthread_mutex_lock(&f->lock);
	f->nc = u->nc;
	/* libnats' callbacks may have told of a disconnection already */
	if (natsConnection_Status(u->nc) == NATS_CONN_STATUS_CONNECTED) {
		f->st.connected = true;
		snprintf(f->st.state, sizeof(f->st.state), "connected");
		f->st.error[0] = 0;
	}
	natsConnection_GetConnectedUrl(u->nc, f->st.server, sizeof(f->st.server));
	pthread_mutex_unlock(&f->lock);
	log_info("fleet: connected to %s as %s", f->st.server, f->host);
	return 0;
}

/* One pass over the state folder, connected: how long to wait after it. */
static uint32_t uploader_pass(struct vmt_fleet *f, struct uploader *u)
{
	uint32_t wait_ms = SCAN_MS;

	if (natsConnection_Status(u->nc) != NATS_CONN_STATUS_CONNECTED || !u->js) {
		fleet_scan(f, NULL, NULL);	/* the queue's length, while down */
		return wait_ms;
	}
	if (!u->ensured)
		u->ensured = fleet_ensure_stream(f, u->js) == 0;
	if (u->ensured && fleet_scan(f, u->nc, u->js) < 0) {
		pthread_mutex_lock(&f->lock);
		f->st.upload_failures++;
		pthread_mutex_unlock(&f->lock);
		u->backoff = u->backoff ? VMT_MIN(u->backoff * 2, BACKOFF_MAX_MS) : BACKOFF_MIN_MS;
		wait_ms = u->backoff;
	} else if (u->ensured) {
		u->backoff = 0;
		pthread_mutex_lock(&f->lock);
		if (f->st.queue)
			wait_ms = 0;	/* a pass took queue_max: the next at once */
		pthread_mutex_unlock(&f->lock);
	}
	return wait_ms;
}

/* Until wait_ms passed, fleet_kick() or a stop. */
static void uploader_wait(struct vmt_fleet *f, uint32_t wait_ms)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += wait_ms / 1000;
	until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L)
		until.tv_sec++, until.tv_nsec -= 1000000000L;
	pthread_mutex_lock(&f->lock);
	while (!f->stop && !f->kick)
		if (pthread_cond_timedwait(&f->cond, &f->lock, &until) == ETIMEDOUT)
			break;
	f->kick = false;
	pthread_mutex_unlock(&f->lock);
}

void fleet_uploader(void *arg)
{
	struct vmt_fleet *f = arg;
	struct uploader u = { 0 };

	for (;;) {
		uint32_t wait_ms;
		bool stop;

		pthread_mutex_lock(&f->lock);
		stop = f->stop;
		pthread_mutex_unlock(&f->lock);
		if (stop)
			break;
		if (u.nc && natsConnection_Status(u.nc) == NATS_CONN_STATUS_CLOSED)
			uploader_drop(f, &u);
		if (!u.nc && uploader_connect(f, &u) < 0) {
			fleet_scan(f, NULL, NULL);	/* the queue's length, while down */
			uploader_wait(f, u.backoff);
			continue;
		}
		fleet_subs_apply(f, u.nc);
		wait_ms = uploader_pass(f, &u);
		uploader_wait(f, wait_ms);
	}
	pthread_mutex_lock(&f->lock);
	f->nc = NULL;
	pthread_mutex_unlock(&f->lock);
	subs_drop(f, u.nc);
	jsCtx_Destroy(u.js);
	natsConnection_Destroy(u.nc);
}
