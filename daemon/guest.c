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

/*
 * Events lost in the guest (its ring buffer overran before the agent read
 * it) leave a hole in every sample: worth a warning, but a guest that
 * overruns all the time must not fill the journal. The first in a while,
 * then, and with the next one what was held back; status counts them all.
 */
#define LOST_WINDOW_NS (60 * 1000000000ull)

void guest_warn_lost(struct vmt_guest *g, uint32_t cpu, uint64_t pages, uint64_t events)
{
	struct vmt_log_budget *b = &g->log_lost;
	uint64_t now = now_monotonic_ns();
	char counted[48] = "", since[128] = "";

	if (b->until_ns && now <= b->until_ns) {
		g->lost_pages_quiet += pages;
		g->lost_events_quiet += events;
		b->used++;
		return;
	}
	if (events)
		snprintf(counted, sizeof(counted), " (%llu events)", (unsigned long long)events);
	if (b->used)
		snprintf(since, sizeof(since), "; since the last warning, %llu more page(s) (%llu events)",
			 (unsigned long long)g->lost_pages_quiet, (unsigned long long)g->lost_events_quiet);
	log_guest(VMT_LOG_WARNING, 0, g->conf.name,
		  "cpu%u: events lost in the guest before %llu page(s)%s: its trace buffer overran%s "
		  "(said at most once a minute)",
		  cpu, (unsigned long long)pages, counted, since);
	b->until_ns = now + LOST_WINDOW_NS;
	b->used = 0;
	g->lost_pages_quiet = g->lost_events_quiet = 0;
}

void guest_set_state(struct vmt_guest *g, enum vmt_guest_state s)
{
	if (g->state != s)
		guest_log(g, VMT_LOG_DEBUG, 0, "%s -> %s", guest_state_name(g->state),
			  guest_state_name(s));
	if ((g->state == GUEST_OFFLINE) != (s == GUEST_OFFLINE))
		g->env->ev->qemu_changed(g->env->owner, g);	/* its QEMU pid comes or goes */
	if (g->state == GUEST_STREAMING && s != GUEST_STREAMING) {
		sync_session_end(g);
		alive_session_end(g);
	}
	if (g->state != GUEST_STREAMING && s == GUEST_STREAMING) {
		g->state = s;
		alive_session_start(g);
	}
	g->state = s;
	g->state_since_ns = now_monotonic_ns();
	/* a session that ends or starts over drops what it was receiving:
	 * say so to the memory account at once, not at its next message */
	guest_settle_meta(g);
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
	s.flags |= VMT_START_PREV;
	r = proto_put_start(&g->out, &s);
	if (r >= 0)
		r = guest_flush_out(g);
	if (r < 0)
		guest_disconnect(g, "cannot send START");
}

/* ---- channels --------------------------------------------------------- */

void guest_close_channels(struct vmt_guest *g)
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
	g->flush_done(g->flush_arg, g);
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
	/* never open but for an agent's session */
	if (channel_replaced(&g->ctl))
		guest_disconnect(g, "its FIFOs were made anew (QEMU restarted)");
}

int guest_watch_channels(struct vmt_guest *g)
{
	int r = sd_event_add_io(g->env->event, &g->ctl_src, g->ctl.rfd, EPOLLIN, guest_ctl_cb, g);

	if (r >= 0)	/* FLUSHED must not wait behind bulk page reads */
		r = sd_event_source_set_priority(g->ctl_src, SD_EVENT_PRIORITY_IMPORTANT);
	g->ctl_demoted = false;
	for (uint32_t i = 0; r >= 0 && i < g->nchan; i++)
		r = sd_event_add_io(g->env->event, &g->data_src[i], g->data[i].rfd, EPOLLIN,
				    guest_data_cb, g);
	return r;
}

void guest_connect(struct vmt_guest *g)
{
	g->src_ops->start(g->src);
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

struct vmt_guest *guest_list_find(const struct vmt_guest_list *l, const char *name)
{
	for (uint32_t i = 0; i < l->n; i++)
		if (!strcmp(l->v[i]->conf.name, name))
			return l->v[i];
	return NULL;
}

/* ---- API ---------------------------------------------------------------- */

bool guest_flush(struct vmt_guest *g, uint64_t id, void (*done)(void *arg, struct vmt_guest *g),
		 void *arg)
{
	g->flushed = false;
	g->have_target = false;
	/* before asking: a session that breaks at once ends the flush */
	g->flush_done = done;
	g->flush_arg = arg;
	return g->src_ops->flush(g->src, id);
}

enum vmt_guest_flush guest_flush_state(const struct vmt_guest *g)
{
	if (g->flush_wait)
		return GUEST_FLUSH_WAITING;
	return g->flushed ? GUEST_FLUSH_DONE : GUEST_FLUSH_NONE;
}

void guest_flush_timed_out(struct vmt_guest *g)
{
	if (!g->flush_wait)
		return;
	g->flush_wait = false;
	g->c.flush_timeouts++;
	log_guest(VMT_LOG_WARNING, 0, g->conf.name, "no FLUSHED within %u ms: dumping what has arrived",
		  g->conf.rec.flush_timeout_ms);
}

void guest_flush_over(struct vmt_guest *g)
{
	g->flushed = false;
	g->have_target = false;
	g->flush_wait = false;
}

uint32_t guest_flush_timeout_ms(const struct vmt_guest *g)
{
	return g->conf.rec.flush_timeout_ms;
}

const char *guest_name(const struct vmt_guest *g)
{
	return g->conf.name;
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
	g->state_since_ns = now_monotonic_ns();	/* offline since it was made, not since boot */
	g->ctl.rfd = g->ctl.wfd = -1;
	g->src_ops = &guest_agent_ops;	/* until guest_set_source */
	g->src = g;
	*out = g;
	return 0;
}

void guest_free(struct vmt_guest *g)
{
	if (!g)
		return;
	g->src_ops->free(g->src);
	g->timer = sd_event_source_disable_unref(g->timer);
	g->partial_timer = sd_event_source_disable_unref(g->partial_timer);
	sync_free(g);
	guest_prev_free(g);
	alive_free(g);
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
