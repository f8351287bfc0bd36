/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "guest-int.h"
#include "log.h"
#include "meta.h"
#include "page.h"

#define OUT_MAX 65536			/* control bytes queued for a guest that does not read */
#define READ_BUDGET_BYTES (256 * 1024)	/* per data callback, so one guest cannot starve others */
/* Read of the control channel when a data channel closed: more than a
 * socket buffers, less than a flood could make it loop for long. */
#define CTL_DRAIN_MAX (4 * 1024 * 1024)
#define LOG_BURST 10
#define LOG_WINDOW_NS (10 * 1000000000ull)

static const char *const state_names[] = {
#define X(n, t) [GUEST_##n] = t,
	VMT_GUEST_STATES(X)
#undef X
};

const char *guest_state_name(enum vmt_guest_state s)
{
	return state_names[s];
}

/*
 * What a guest makes the daemon log comes out of that guest's budget: a
 * hostile guest must not flood the journal. Complaints about its input and
 * the lines of its sessions coming and going have a budget each, so that a
 * storm of sessions does not hide what was wrong with its input; what a
 * budget holds back is said in one line when the next window opens.
 */
#define SESSION_BURST 20
#define SESSION_WINDOW_NS (60 * 1000000000ull)

static bool log_budget_take(struct vmt_guest *g, struct vmt_log_budget *b, unsigned burst,
			    uint64_t window_ns, const char *what)
{
	uint64_t now = now_monotonic_ns();

	if (now > b->until_ns) {
		if (b->used > burst)
			log_guest(VMT_LOG_WARNING, 0, g->conf.name, "%u more %s suppressed",
				  b->used - burst, what);
		b->until_ns = now + window_ns;
		b->used = 0;
	}
	return ++b->used <= burst;
}

static void guest_vlog(struct vmt_guest *g, int level, int err, const char *fmt, va_list ap)
{
	char msg[512];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (err)
		log_guest(level, err, g->conf.name, "%s: %s", msg, strerror(err < 0 ? -err : err));
	else
		log_guest(level, 0, g->conf.name, "%s", msg);
}

void guest_complain(struct vmt_guest *g, int err, const char *fmt, ...)
{
	va_list ap;

	if (!log_budget_take(g, &g->log_complaints, LOG_BURST, LOG_WINDOW_NS, "complaints"))
		return;
	va_start(ap, fmt);
	guest_vlog(g, VMT_LOG_WARNING, err, fmt, ap);
	va_end(ap);
}

void guest_log(struct vmt_guest *g, int level, int err, const char *fmt, ...)
{
	va_list ap;

	if (level > log_get_level())
		return;
	/* debug lines (log_level: debug) have their own, not to hide the rest */
	if (!log_budget_take(g, level == VMT_LOG_DEBUG ? &g->log_debug : &g->log_sessions,
			     SESSION_BURST, SESSION_WINDOW_NS,
			     level == VMT_LOG_DEBUG ? "debug lines" : "lines about its sessions"))
		return;
	va_start(ap, fmt);
	guest_vlog(g, level, err, fmt, ap);
	va_end(ap);
}

void guest_set_state(struct vmt_guest *g, enum vmt_guest_state s)
{
	if (g->state != s)
		guest_log(g, VMT_LOG_DEBUG, 0, "%s -> %s", guest_state_name(g->state),
			  guest_state_name(s));
	if ((g->state == GUEST_OFFLINE) != (s == GUEST_OFFLINE))
		g->env->ev->qemu_changed(g->env->owner, g);	/* its QEMU pid comes or goes */
	if (g->state == GUEST_STREAMING && s != GUEST_STREAMING)
		sync_session_end(g);
	g->state = s;
	g->state_since_ns = now_monotonic_ns();
}

static int guest_timer_cb(sd_event_source *s, uint64_t usec, void *userdata);

void guest_arm(struct vmt_guest *g, uint64_t usec)
{
	int r;

	if (g->timer) {
		sd_event_source_set_time_relative(g->timer, usec);
		sd_event_source_set_enabled(g->timer, SD_EVENT_ONESHOT);
		return;
	}
	r = sd_event_add_time_relative(g->env->event, &g->timer, CLOCK_MONOTONIC, usec, 100000,
				       guest_timer_cb, g);
	if (r < 0)
		log_guest(VMT_LOG_ERR, r, g->conf.name, "cannot arm timer: %m");
}

static int guest_partial_cb(sd_event_source *s, uint64_t usec, void *userdata);

/* Check for an unfinished control message when it has had its time. */
static void guest_arm_partial(struct vmt_guest *g)
{
	uint64_t usec = CTL_PARTIAL_TIMEOUT_NS / 1000 + 10000;
	int r;

	if (g->partial_timer) {
		sd_event_source_set_time_relative(g->partial_timer, usec);
		sd_event_source_set_enabled(g->partial_timer, SD_EVENT_ONESHOT);
		return;
	}
	r = sd_event_add_time_relative(g->env->event, &g->partial_timer, CLOCK_MONOTONIC, usec, 100000,
				       guest_partial_cb, g);
	if (r < 0)
		log_guest(VMT_LOG_ERR, r, g->conf.name, "cannot arm timer: %m");
}

uint64_t guest_mem(const struct vmt_guest *g)
{
	uint64_t t = 0;

	for (uint32_t i = 0; i < g->nrings; i++)
		t += ring_mem_size(g->rings[i].nr_pages, g->rings[i].layout.page_size);
	return t;
}

uint64_t guest_ctl_rejected_bytes(const struct vmt_guest *g)
{
	return g->ctl_rejected_bytes_base + g->rx->rejected_bytes;
}

uint64_t guest_ctl_rejected_msgs(const struct vmt_guest *g)
{
	return g->rx->rejected_msgs;
}

/* ---- sending ---------------------------------------------------------- */


static int guest_flush_out(struct vmt_guest *g)
{
	while (g->out.len) {
		ssize_t n = write(g->ctl.wfd, g->out.data, g->out.len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				break;
			return -errno;
		}
		memmove(g->out.data, g->out.data + n, g->out.len - (size_t)n);
		g->out.len -= (size_t)n;
	}
	if (g->out.len > OUT_MAX)
		return -ENOBUFS;
	return 0;
}

void guest_send(struct vmt_guest *g, unsigned type, const void *p, uint32_t len)
{
	int r;

	if (!channel_is_open(&g->ctl))
		return;
	r = proto_put(&g->out, type, p, len);
	if (r >= 0)
		r = guest_flush_out(g);
	if (r < 0) {
		log_guest(VMT_LOG_WARNING, r, g->conf.name, "control channel write failed: %m");
		guest_disconnect(g, "control channel write failed");
	}
}

void guest_send_host_hello(struct vmt_guest *g)
{
	uint8_t p[8];

	put_le32(p, VMT_PROTO_VERSION);
	put_le32(p + 4, g->nonce);
	guest_send(g, VMT_MSG_HOST_HELLO, p, sizeof(p));
}

void guest_send_start(struct vmt_guest *g)
{
	struct vmt_start s = { 0 };
	int r;

	s.buffer_kb = g->conf.rec.guest_buffer_kb;
	snprintf(s.clock, sizeof(s.clock), "%s", g->conf.rec.clock);
	s.events = g->conf.rec.events;
	s.events_len = (uint32_t)strlen(g->conf.rec.events);
	if (!s.events_len)
		s.flags |= VMT_START_KEEP_EVENTS;
	r = proto_put_start(&g->out, &s);
	if (r >= 0)
		r = guest_flush_out(g);
	if (r < 0)
		guest_disconnect(g, "cannot send START");
}

/* ---- channels --------------------------------------------------------- */

static int guest_ctl_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata);
/*
 * The next page to fill is held by a dump being written and the dump
 * reserve is used up: stop reading this channel until a dump is written
 * (guest_resume). The guest's own ring buffer holds the trace meanwhile;
 * what it has to drop, it counts, and the pages say so.
 */
static void guest_pause(struct vmt_guest *g, uint32_t cpu)
{
	if (!g->data_src[cpu] || sd_event_source_set_enabled(g->data_src[cpu], SD_EVENT_OFF) < 0)
		return;
	g->c.read_pauses++;
	g->npaused++;
	guest_complain(g, 0, "cpu%u: reading paused: its next page is held by a dump being written "
		       "and dump_reserve is used up", cpu);
}

void guest_resume(struct vmt_guest *g)
{
	for (uint32_t i = 0; i < g->nrings; i++)
		ring_settle(&g->rings[i]);
	if (g->src)
		g->src_ops->resume(g->src);
	/* only guest_pause switches a data source off */
	for (uint32_t i = 0; g->npaused && i < g->nchan; i++)
		if (g->data_src[i])
			sd_event_source_set_enabled(g->data_src[i], SD_EVENT_ON);
	g->npaused = 0;
}

static int guest_data_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata);

static void guest_close_channels(struct vmt_guest *g)
{
	g->ctl_src = sd_event_source_disable_unref(g->ctl_src);
	channel_close(&g->ctl);
	for (uint32_t i = 0; i < g->nchan; i++) {
		g->data_src[i] = sd_event_source_disable_unref(g->data_src[i]);
		channel_close(&g->data[i]);
	}
	g->out.len = 0;
}

void guest_end_flush(struct vmt_guest *g)
{
	if (!g->flush_wait)
		return;
	g->flush_wait = false;
	g->flushed = false;
	g->env->ev->flush_done(g->env->owner, g);
}

void guest_disconnect(struct vmt_guest *g, const char *why)
{
	if (g->state != GUEST_OFFLINE)
		guest_log(g, VMT_LOG_NOTICE, 0, "disconnected: %s", why);
	guest_close_channels(g);
	proto_rx_reset(g->rx);	/* a message cut short must not swallow the next connection's */
	g->ctl_partial_since = 0;
	buf_free(&g->tasks_rx);	/* pieces of task tables cut short */
	g->meta_open = false;
	buf_free(&g->meta);
	guest_set_state(g, GUEST_OFFLINE);
	guest_end_flush(g);
	guest_arm(g, RETRY_USEC);
}

void guest_check_channels(struct vmt_guest *g)
{
	if (!g->src && channel_replaced(&g->ctl))
		guest_disconnect(g, "its FIFOs were made anew (QEMU restarted)");
}

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
	if (r >= 0)
		r = sd_event_add_io(g->env->event, &g->ctl_src, g->ctl.rfd, EPOLLIN, guest_ctl_cb, g);
	if (r >= 0)	/* FLUSHED must not wait behind bulk page reads */
		r = sd_event_source_set_priority(g->ctl_src, SD_EVENT_PRIORITY_IMPORTANT);
	g->ctl_demoted = false;
	for (uint32_t i = 0; r >= 0 && i < n; i++) {
		r = channel_open(&g->data[i]);
		if (r >= 0)
			r = sd_event_add_io(g->env->event, &g->data_src[i], g->data[i].rfd, EPOLLIN,
					    guest_data_cb, g);
	}
	if (r < 0)
		guest_close_channels(g);
	return r;
}

void guest_drain_data(struct vmt_guest *g)
{
	for (uint32_t i = 0; i < g->nchan; i++)
		if (channel_is_open(&g->data[i]))
			g->c.stale_bytes += channel_drain(&g->data[i]);
}

void guest_connect(struct vmt_guest *g)
{
	int r;

	if (g->src || channel_is_open(&g->ctl))
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
	guest_set_state(g, GUEST_WAIT_HELLO);
	guest_send_host_hello(g);
	guest_arm(g, RETRY_USEC);
}

static int guest_timer_cb(sd_event_source *s, uint64_t usec, void *userdata)
{
	struct vmt_guest *g = userdata;

	switch (g->state) {
	case GUEST_OFFLINE:
		guest_connect(g);
		break;
	case GUEST_WAIT_HELLO:
		/* the agent may have started after us, or our bytes were dropped
		 * while no guest process held the port: ask again */
		guest_send_host_hello(g);
		guest_arm(g, RETRY_USEC);
		break;
	case GUEST_STARTING:
		guest_complain(g, 0, "no metadata %llu s after START; asking again",
			       (unsigned long long)(STARTING_TIMEOUT_USEC / 1000000));
		g->meta_open = false;
		buf_free(&g->meta);
		guest_set_state(g, GUEST_WAIT_HELLO);
		guest_send_host_hello(g);
		guest_arm(g, RETRY_USEC);
		break;
	case GUEST_FAILED:
		guest_set_state(g, GUEST_WAIT_HELLO);
		guest_send_host_hello(g);
		guest_arm(g, RETRY_USEC);
		break;
	case GUEST_STREAMING:
		break;
	}
	return 0;
}

void guest_fail(struct vmt_guest *g, const char *why)
{
	guest_complain(g, 0, "%s; retrying in %llu s", why,
		       (unsigned long long)(FAILED_RETRY_USEC / 1000000));
	g->meta_open = false;
	buf_free(&g->meta);
	if (g->state == GUEST_STREAMING || g->state == GUEST_STARTING)
		guest_send(g, VMT_MSG_STOP, NULL, 0);
	guest_set_state(g, GUEST_FAILED);
	guest_end_flush(g);
	guest_arm(g, FAILED_RETRY_USEC);
}

/* ---- rings ------------------------------------------------------------ */

void guest_free_rings(struct vmt_guest *g)
{
	for (uint32_t i = 0; i < g->nrings; i++)
		ring_free(&g->rings[i]);
	free(g->rings);
	free(g->stream_base);
	free(g->target_seq);
	free(g->stats);
	g->rings = NULL;
	g->stream_base = g->target_seq = NULL;
	g->stats = NULL;
	g->nrings = 0;
}

struct vmt_guest *guest_list_find(const struct vmt_guest_list *l, const char *name)
{
	for (uint32_t i = 0; i < l->n; i++)
		if (!strcmp(l->v[i]->conf.name, name))
			return l->v[i];
	return NULL;
}

bool guest_rings_empty(const struct vmt_guest *g)
{
	for (uint32_t i = 0; i < g->nrings; i++)
		if (g->rings[i].count)
			return false;
	return true;
}

static int guest_alloc_rings(struct vmt_guest *g, uint32_t ncpus, uint32_t page_size)
{
	uint64_t pages = g->conf.rec.ring_size / page_size;
	int r = 0;

	if (pages < 1)
		pages = 1;
	if (pages > UINT32_MAX)
		pages = UINT32_MAX;
	page_layout_default(&g->layout, page_size);
	g->rings = calloc(ncpus, sizeof(*g->rings));
	g->stream_base = calloc(ncpus, sizeof(*g->stream_base));
	g->target_seq = calloc(ncpus, sizeof(*g->target_seq));
	g->stats = calloc(ncpus, sizeof(*g->stats));
	if (!g->rings || !g->stream_base || !g->target_seq || !g->stats) {
		free(g->rings);
		free(g->stream_base);
		free(g->target_seq);
		free(g->stats);
		g->rings = NULL;
		g->stream_base = g->target_seq = NULL;
		g->stats = NULL;
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < ncpus; i++) {
		r = ring_init(&g->rings[i], (uint32_t)pages, &g->layout);
		if (r < 0)
			break;
		g->rings[i].pool = &g->env->mem->reserve;
		g->nrings = i + 1;
	}
	if (r < 0) {
		guest_free_rings(g);
		return r;
	}
	guest_log(g, VMT_LOG_INFO, 0, "rings: %u CPUs x %llu pages of %u bytes (%llu KiB)",
		  ncpus, (unsigned long long)pages, page_size,
		  (unsigned long long)(guest_mem(g) >> 10));
	return 0;
}

int guest_setup_rings(struct vmt_guest *g, uint32_t ncpus, uint32_t page_size)
{
	uint64_t pages = VMT_MAX(g->conf.rec.ring_size / page_size, 1);
	uint64_t need = ring_mem_size((uint32_t)VMT_MIN(pages, UINT32_MAX), page_size) * ncpus;
	struct vmt_mem *mem = g->env->mem;
	int r;

	if (mem_take_rings(mem, need) < 0) {
		log_guest(VMT_LOG_ERR, 0, g->conf.name,
			  "refused: rings of %llu KiB do not fit under memory_max (%llu KiB used by rings, "
			  "dump_reserve %llu KiB, memory_max %llu KiB)",
			  (unsigned long long)(need >> 10), (unsigned long long)(mem->rings >> 10),
			  (unsigned long long)(mem->reserve.bytes >> 10),
			  (unsigned long long)(mem->max >> 10));
		return -ENOSPC;
	}
	r = guest_alloc_rings(g, ncpus, page_size);
	mem_give_rings(mem, need);	/* what was allocated counts, not the estimate */
	if (r < 0)
		return r;
	mem->rings += guest_mem(g);
	return 0;
}

/*
 * Read and handle the control channel, at most budget bytes; true if it
 * was read dry (or closed).
 */
static bool guest_ctl_read(struct vmt_guest *g, size_t budget)
{
	uint64_t rejected = g->rx->rejected_bytes, messages = g->rx->messages;
	bool drained = false;

	for (size_t done = 0; done < budget && channel_is_open(&g->ctl);) {
		struct vmt_msg msg;
		size_t room;
		uint8_t *p = proto_rx_space(g->rx, &room);
		ssize_t n = read(g->ctl.rfd, p, room);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				guest_disconnect(g, strerror(errno));
			drained = true;
			break;
		}
		if (n == 0) {
			guest_disconnect(g, "control channel closed");
			drained = true;
			break;
		}
		done += (size_t)n;
		sync_stamp_rx(g);
		proto_rx_wrote(g->rx, (size_t)n);
		while (channel_is_open(&g->ctl) && proto_rx_next(g->rx, &msg) > 0)
			guest_dispatch(g, &msg);
	}
	if (g->rx->rejected_bytes != rejected)
		guest_complain(g, g->rx->last_error, "control channel: %llu bytes of garbage skipped",
			       (unsigned long long)(g->rx->rejected_bytes - rejected));
	/* the clock of an unfinished message starts when the last whole one ended */
	if (!proto_rx_partial(g->rx) || g->rx->messages != messages)
		g->ctl_partial_since = 0;
	if (channel_is_open(&g->ctl) && proto_rx_partial(g->rx) && !g->ctl_partial_since) {
		g->ctl_partial_since = now_monotonic_ns();
		guest_arm_partial(g);
	}
	return drained;
}

static int guest_ctl_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct vmt_guest *g = userdata;
	bool drained = guest_ctl_read(g, READ_BUDGET_BYTES);

	/*
	 * An agent's control messages are small and few: its channel goes ahead
	 * of bulk page reads (FLUSHED should not wait behind them). One that
	 * keeps the channel full past a callback's budget takes its turn with
	 * everyone else's input until it has been read dry, so that it cannot
	 * starve the other guests, their data and the control socket.
	 */
	if (g->ctl_src && drained == g->ctl_demoted) {
		g->ctl_demoted = !drained;
		sd_event_source_set_priority(g->ctl_src, drained ? SD_EVENT_PRIORITY_IMPORTANT
								 : SD_EVENT_PRIORITY_NORMAL);
	}
	return 0;
}
static int guest_partial_cb(sd_event_source *s, uint64_t usec, void *userdata)
{
	guest_check_partial(userdata);
	return 0;
}

void guest_check_partial(struct vmt_guest *g)
{
	uint64_t now = now_monotonic_ns(), rejected = g->rx->rejected_bytes;
	size_t held = proto_rx_partial(g->rx);
	struct vmt_msg msg;

	if (!g->ctl_partial_since || !channel_is_open(&g->ctl) ||
	    now - g->ctl_partial_since < CTL_PARTIAL_TIMEOUT_NS)
		return;
	proto_rx_abandon(g->rx);
	guest_complain(g, -ETIMEDOUT,
		       "control channel: a message unfinished for %.1f s (%zu bytes held) given up, "
		       "%llu bytes skipped; the agent may have restarted in the middle of it",
		       (double)(now - g->ctl_partial_since) / 1e9, held,
		       (unsigned long long)(g->rx->rejected_bytes - rejected));
	g->ctl_partial_since = 0;
	while (channel_is_open(&g->ctl) && proto_rx_next(g->rx, &msg) > 0)
		guest_dispatch(g, &msg);
	if (channel_is_open(&g->ctl) && proto_rx_partial(g->rx)) {
		g->ctl_partial_since = now;
		guest_arm_partial(g);
	}
}

static int guest_data_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct vmt_guest *g = userdata;
	uint8_t *buf = g->env->bounce;
	uint32_t cpu = 0;

	while (cpu < g->nchan && g->data_src[cpu] != s)
		cpu++;
	if (cpu == g->nchan)
		return 0;

	/*
	 * Big reads, then page-sized pieces into the ring: one read() per page
	 * would wake the writer on the other side of the pipe for every page.
	 * The budget keeps one busy guest from starving the others.
	 */
	for (uint32_t done = 0; done < READ_BUDGET_BYTES;) {
		bool stream = g->state == GUEST_STREAMING && cpu < g->nrings;
		size_t want = stream ? ring_room(&g->rings[cpu], g->env->bounce_size) : g->env->bounce_size;
		ssize_t n;

		if (!want) {
			guest_pause(g, cpu);
			break;
		}
		n = read(fd, buf, want);

		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0) {
			/* what the agent said before it hung up still counts (its
			 * metadata, say): at most what the socket still holds, for
			 * its writer is gone */
			guest_ctl_read(g, CTL_DRAIN_MAX);
			if (channel_is_open(&g->data[cpu]))
				guest_disconnect(g, "data channel closed");
			return 0;
		}
		if (n < 0) {
			if (errno != EAGAIN) {
				guest_disconnect(g, strerror(errno));
				return 0;
			}
			break;
		}
		done += (uint32_t)n;
		if (!stream) {
			/* no session: these bytes have no place in any stream */
			g->c.stale_bytes += (uint64_t)n;
			continue;
		}
		for (size_t off = 0; off < (size_t)n;) {
			struct vmt_ring *r = &g->rings[cpu];
			uint32_t room, k;
			uint8_t *p = ring_fill_space(r, &room);

			if (!p) {
				/* cannot happen after ring_room(); never loop on it */
				r->c.bytes_rejected += (uint64_t)n - off;
				guest_complain(g, 0, "cpu%u: %zu bytes without room dropped", cpu,
					       (size_t)n - off);
				break;
			}
			k = (uint32_t)VMT_MIN((size_t)room, (size_t)n - off);
			memcpy(p, buf + off, k);
			off += k;
			if (ring_fill_commit(r, k) == -EBADMSG)
				guest_complain(g, 0, "cpu%u: page %llu rejected (bad commit or event length)",
					       cpu, (unsigned long long)(r->next_seq - 1));
		}
		if ((size_t)n < want)
			break;	/* drained for now */
	}
	guest_check_flushed(g);
	return 0;
}

/* ---- API ---------------------------------------------------------------- */

bool guest_flush(struct vmt_guest *g, uint64_t id)
{
	uint8_t p[8];

	g->flushed = false;
	g->have_target = false;
	if (g->src) {
		/* local: the pages are in the rings when this returns */
		g->src_ops->flush(g->src);
		return false;
	}
	if (g->state != GUEST_STREAMING)
		return false;
	g->flush_id = id;
	g->flush_wait = true;
	put_le64(p, id);
	guest_send(g, VMT_MSG_FLUSH, p, sizeof(p));
	return g->flush_wait;
}

void guest_vanished(struct vmt_guest *g)
{
	guest_disconnect(g, "its folder is gone");
}

bool guest_forget(struct vmt_guest *g, uint64_t forget_after_ns)
{
	if (g->state != GUEST_OFFLINE || !forget_after_ns ||
	    now_monotonic_ns() - g->state_since_ns < forget_after_ns)
		return false;
	if (g->nrings) {
		log_guest(VMT_LOG_NOTICE, 0, g->conf.name, "offline for %llu s: rings freed (%llu KiB)",
			  (unsigned long long)(forget_after_ns / 1000000000),
			  (unsigned long long)(guest_mem(g) >> 10));
		mem_give_rings(g->env->mem, guest_mem(g));
		guest_free_rings(g);
		guest_drop_aux(g);
	}
	return true;
}

void guest_stop(struct vmt_guest *g)
{
	if (g->state == GUEST_STREAMING || g->state == GUEST_STARTING)
		guest_send(g, VMT_MSG_STOP, NULL, 0);
}

int guest_new(const struct vmt_guest_env *env, const struct vmt_guest_conf *conf,
	      struct vmt_guest **out)
{
	struct vmt_guest *g = calloc(1, sizeof(*g));

	if (!g)
		return -ENOMEM;
	g->rx = malloc(sizeof(*g->rx));
	if (!g->rx) {
		free(g);
		return -ENOMEM;
	}
	proto_rx_init(g->rx);
	g->env = env;
	g->conf = *conf;
	g->state = GUEST_OFFLINE;
	g->ctl.rfd = g->ctl.wfd = -1;
	*out = g;
	return 0;
}

void guest_free(struct vmt_guest *g)
{
	if (!g)
		return;
	if (g->src)
		g->src_ops->free(g->src);
	guest_close_channels(g);
	g->timer = sd_event_source_disable_unref(g->timer);
	g->partial_timer = sd_event_source_disable_unref(g->partial_timer);
	sync_free(g);
	mem_give_rings(g->env->mem, guest_mem(g));
	guest_free_rings(g);
	free(g->data);
	free(g->data_src);
	buf_free(&g->out);
	buf_free(&g->meta);
	buf_free(&g->tasks);
	buf_free(&g->tasks_rx);
	aux_free(&g->aux);
	free(g->aux_index);
	free(g->rx);
	mem_charge_meta(g->env->mem, &g->meta_charged, 0);
	free(g);
}
