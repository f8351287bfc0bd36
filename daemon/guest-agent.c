/* SPDX-License-Identifier: MIT */
/*
 * guest-agent: the source of a guest that runs our agent, behind its
 * channels (the default, struct vmt_source_ops): opening them, asking a
 * FLUSH, reading on after a pause, what it is, closing. Its session (the
 * messages, guest-msg.c; the bundle, guest-aux.c; the clock, guest-sync.c;
 * its silence, guest-alive.c) lives in the guest's own record: the
 * source's state is the guest itself.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "guest-int.h"
#include "log.h"

/* How many trace-path-cpuN channels the folder holds: up to the first
 * missing one; -ELOOP or -EBADFD if one is refused (channel_probe). */
static int guest_count_cpus(const struct vmt_guest *g)
{
	int n = 0;
	enum vmt_transport t;

	while (n < VMT_MAX_CPUS) {
		char name[32];
		int r;

		snprintf(name, sizeof(name), "trace-path-cpu%d", n);
		r = channel_probe(g->conf.path, name, &t);
		if (r == -ELOOP || r == -EBADFD)
			return r;
		if (r < 0)
			break;
		n++;
	}
	return n;
}

static int guest_open_channels(struct vmt_guest *g)
{
	enum vmt_transport t = g->conf.transport;
	uint32_t n;
	int r;

	if (t == VMT_TRANSPORT_AUTO) {
		r = channel_probe(g->conf.path, "agent-ctl-path", &t);
		if (r < 0)
			return r;
	}
	if (g->conf.cpus) {
		n = g->conf.cpus;
	} else {
		r = guest_count_cpus(g);
		if (r <= 0)
			return r ? r : -ENOENT;
		n = (uint32_t)r;
	}
	if (n != g->nchan) {
		struct vmt_channel *d = realloc(g->data, n * sizeof(*d));
		sd_event_source **s;

		if (!d)
			return -ENOMEM;
		g->data = d;
		s = realloc(g->data_src, n * sizeof(*s));
		if (!s)
			return -ENOMEM;
		g->data_src = s;
		g->nchan = n;
	}
	channel_init(&g->ctl, g->conf.path, "agent-ctl-path", t);
	for (uint32_t i = 0; i < n; i++) {
		char name[32];
		snprintf(name, sizeof(name), "trace-path-cpu%u", i);
		channel_init(&g->data[i], g->conf.path, name, t);
		g->data_src[i] = NULL;
	}
	r = channel_open(&g->ctl);
	for (uint32_t i = 0; r >= 0 && i < n; i++)
		r = channel_open(&g->data[i]);
	if (r >= 0)
		r = guest_watch_channels(g);
	if (r < 0)
		guest_close_channels(g);
	return r;
}

/* Open its channels, or try again in RETRY_USEC. */
static void agent_start(void *src)
{
	struct vmt_guest *g = src;
	int r;

	if (channel_is_open(&g->ctl))
		return;
	r = guest_open_channels(g);
	if (r == -ELOOP || r == -EBADFD) {
		/* tried again at every retry: counted each time, logged within
		 * the guest's complaint budget */
		g->c.paths_refused++;
		guest_complain(g, 0, "channel folder %s: a port is a symlink or not a %s: refused",
			       g->conf.path,
			       g->conf.transport == VMT_TRANSPORT_SOCKET ? "socket"
			       : g->conf.transport == VMT_TRANSPORT_FIFO ? "FIFO"
									: "FIFO or socket");
	}
	if (r < 0) {
		if (r != -ENOENT && r != -ECONNREFUSED && r != -ELOOP && r != -EBADFD)
			guest_log(g, VMT_LOG_DEBUG, r, "channels not ready");
		guest_arm(g, RETRY_USEC);
		return;
	}
	g->nonce = (uint32_t)(now_monotonic_ns() ^ (uintptr_t)g) | 1;
	guest_log(g, VMT_LOG_INFO, 0, "channels open (%s, %u CPUs), waiting for the agent",
		  transport_name(g->ctl.transport == VMT_TRANSPORT_AUTO ? g->conf.transport
									: g->ctl.transport),
		  g->nchan);
	/* bytes already in the data channels belong to no session we know */
	guest_drain_data(g);
	alive_channels_open(g);
	guest_set_state(g, GUEST_WAIT_HELLO);
	guest_send_host_hello(g);
	guest_arm(g, RETRY_USEC);
}


/* A silent or dead guest would only make the dump wait for flush_timeout. */
static bool agent_flush(void *src, uint64_t id)
{
	struct vmt_guest *g = src;
	uint8_t p[8];

	if (g->state != GUEST_STREAMING || g->alive.silent || g->alive.crashed)
		return false;
	g->flush_id = id;
	g->flush_wait = true;
	put_le64(p, id);
	guest_send(g, VMT_MSG_FLUSH, p, sizeof(p));
	return g->flush_wait;	/* the send failed: the session, and so the flush, ended */
}

static void agent_resume(void *src)
{
	struct vmt_guest *g = src;

	/* only guest_pause switches a data source off */
	for (uint32_t i = 0; g->npaused && i < g->nchan; i++)
		if (g->data_src[i])
			sd_event_source_set_enabled(g->data_src[i], SD_EVENT_ON);
	g->npaused = 0;
}

static void agent_describe(const void *src, struct vmt_source_desc *d)
{
	const struct vmt_guest *g = src;

	*d = (struct vmt_source_desc){
		.qemu_pid = qemu_pid_find(g->conf.pidfile, g->ctl.peer_pid,
					  g->discovered ? g->conf.name : NULL),
		.session = true,
	};
}

static void agent_free(void *src)
{
	guest_close_channels(src);
}

const struct vmt_source_ops guest_agent_ops = {
	.start = agent_start,
	.flush = agent_flush,
	.resume = agent_resume,
	.describe = agent_describe,
	.free = agent_free,
};
