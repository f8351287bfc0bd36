/* SPDX-License-Identifier: MIT */
/*
 * guest-msg: what a guest's agent says on the control channel: read and
 * framed (the channel's turn among the inputs, a message left unfinished
 * given up), then checked and acted on: HELLO starts a session, STARTED
 * and the metadata bundle (guest-aux.c) settle the aux version, FLUSHED
 * marks where a dump's window ends, TRIGGER asks for a dump, TASKS names
 * the tasks. Everything here is untrusted input.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guest-int.h"
#include "log.h"
#include "guest-sync.h"
#include "meta.h"
#include "page.h"

/* ---- messages --------------------------------------------------------- */

/*
 * The rings hold pages that decode only with what the guest is replacing
 * (its boot, its events, its shape): write them out first. The guest caused
 * this dump, so its cooldown and budgets decide; a dump held back drops the
 * pages, counted and said.
 */
void guest_save_window(struct vmt_guest *g, const char *why)
{
	uint64_t pages = 0;

	if (g->env->ev->window_replaced(g->env->owner, g, why))
		return;
	for (uint32_t i = 0; i < g->nrings; i++)
		pages += g->rings[i].count;
	g->c.pages_discarded += pages;
	guest_complain(g, 0, "%s: its dump held back by the cooldown or the trigger budget, "
		       "%llu pages of the old window dropped", why, (unsigned long long)pages);
}

/*
 * Sessions are the guest's to spend: sessions_per_minute of them at most
 * (a burst of that many, refilled evenly). Past that its HELLOs wait: the
 * session it had is over (an agent that says HELLO afresh has restarted),
 * the host goes on asking with HOST_HELLO every RETRY_USEC, and the first
 * HELLO once a session is free again starts one. A storm of HELLOs costs a
 * parse each, never a ring allocation, and one log line.
 */
static bool guest_session_allowed(struct vmt_guest *g)
{
	uint32_t per_min = g->conf.rec.sessions_per_minute;
	uint64_t now = now_monotonic_ns();

	if (bucket_take(&g->sessions, per_min, now)) {
		if (g->hellos_waiting) {
			guest_log(g, VMT_LOG_NOTICE, 0, "a session again, after %llu HELLOs held back",
				  (unsigned long long)g->hellos_waiting);
			g->hellos_waiting = 0;
		}
		return true;
	}
	g->c.hellos_deferred++;
	if (!g->hellos_waiting++)
		guest_complain(g, 0, "%u sessions in a minute: its HELLOs wait (a session again "
			       "in %.0f s)", per_min, bucket_wait_s(&g->sessions, per_min));
	if (g->state != GUEST_WAIT_HELLO) {
		g->meta_open = false;
		buf_free(&g->meta);
		guest_set_state(g, GUEST_WAIT_HELLO);
		guest_end_flush(g);
		guest_arm(g, RETRY_USEC);
	}
	return false;
}

static void guest_on_hello(struct vmt_guest *g, const struct vmt_msg *msg)
{
	struct vmt_hello h;
	int r;

	if (proto_get_hello(msg->payload, msg->len, &h) < 0) {
		g->c.msgs_unexpected++;
		guest_complain(g, 0, "malformed HELLO ignored");
		return;
	}
	/*
	 * In a session, a HELLO that answers a HOST_HELLO (ours, late, or an
	 * older one left in a FIFO) changes nothing; only an agent that
	 * started afresh (echo 0) begins a new session. A failed session
	 * waits for its retry.
	 */
	if (g->state == GUEST_FAILED || g->state == GUEST_OFFLINE ||
	    ((g->state == GUEST_STARTING || g->state == GUEST_STREAMING) && h.echo))
		return;
	if (h.version != VMT_PROTO_VERSION) {
		guest_fail(g, "agent speaks another protocol version");
		return;
	}
	if (h.ncpus > g->nchan) {
		char why[160];
		snprintf(why, sizeof(why), "agent has %u CPUs but only %u trace-path-cpuN channels exist",
			 h.ncpus, g->nchan);
		/* the ports may still be appearing (QEMU starting, channels
		 * hot-plugged): reconnecting counts them again */
		guest_complain(g, 0, "%s; counting them again in %llu s", why,
			       (unsigned long long)(RETRY_USEC / 1000000));
		guest_disconnect(g, why);
		return;
	}
	if (!guest_session_allowed(g))
		return;
	if (g->nrings && (g->nrings != h.ncpus || g->layout.page_size != h.page_size)) {
		/* another machine shape: keep what the old rings hold, then start over */
		if (!guest_rings_empty(g) && g->have_aux) {
			char why[VMT_REASON_MAX];
			snprintf(why, sizeof(why), "guest changed shape (%u -> %u CPUs)", g->nrings,
				 h.ncpus);
			guest_save_window(g, why);
		}
		mem_give_rings(g->env->mem, guest_mem(g));
		guest_free_rings(g);
		guest_drop_aux(g);
	}
	if (!g->nrings) {
		r = guest_setup_rings(g, h.ncpus, h.page_size);
		if (r == -ENOSPC) {
			guest_fail(g, "the rings do not fit under memory_max");
			return;
		}
		if (r < 0) {
			guest_log(g, VMT_LOG_ERR, r, "cannot allocate rings");
			guest_fail(g, "no memory for the rings");
			return;
		}
	}
	g->hello = h;
	g->have_hello = true;
	g->c.sessions++;
	guest_prev_session(g);
	guest_log(g, VMT_LOG_INFO, 0, "agent %s, kernel %s, %u CPUs, clock %s",
		  h.agent, h.release, h.ncpus, h.clock);
	g->meta_open = false;
	buf_free(&g->meta);
	guest_set_state(g, GUEST_STARTING);
	guest_send_start(g);
	if (g->state == GUEST_STARTING)	/* else START failed: the reconnect stays armed */
		guest_arm(g, STARTING_TIMEOUT_USEC);
}

static void guest_on_started(struct vmt_guest *g, const struct vmt_msg *msg)
{
	int32_t err = (int32_t)get_le32(msg->payload);
	char text[513] = "";
	uint32_t tl = msg->len - 8;

	if (g->state != GUEST_STARTING) {
		g->c.msgs_unexpected++;
		return;
	}
	for (uint32_t i = 0; i < tl; i++)
		text[i] = (msg->payload[8 + i] >= 0x20 && msg->payload[8 + i] < 0x7f) ? (char)msg->payload[8 + i] : '?';
	text[tl] = 0;
	if (err) {
		char why[600];
		g->c.errors_from_agent++;
		snprintf(why, sizeof(why), "agent could not start tracing: %s (%s)",
			 strerror(err < 0 ? -err : err), text);
		guest_fail(g, why);
	}
}

/* Are the bytes the agent sent before its FLUSHED all here? */
void guest_check_flushed(struct vmt_guest *g)
{
	if (!g->flush_wait || !g->have_target)
		return;
	for (uint32_t i = 0; i < g->nrings; i++)
		if (g->rings[i].next_seq < g->target_seq[i])
			return;
	g->flush_wait = false;
	g->flushed = true;
	g->flush_done(g->flush_arg, g);
}

static void guest_on_flushed(struct vmt_guest *g, const struct vmt_msg *msg)
{
	_cleanup_free_ struct vmt_cpu_stats *st = calloc(VMT_MAX_CPUS, sizeof(*st));
	uint64_t id;
	uint32_t n;

	if (!st)
		return;
	if (proto_get_flushed(msg->payload, msg->len, &id, &n, st) < 0) {
		g->c.flush_bad++;
		guest_complain(g, 0, "malformed FLUSHED ignored");
		return;
	}
	if (!g->flush_wait && id == g->flush_id)
		return;	/* came after the dump stopped waiting: already counted as a timeout */
	if (!g->flush_wait || id != g->flush_id || n != g->nrings) {
		g->c.flush_bad++;
		guest_complain(g, 0, "FLUSHED that answers no FLUSH ignored");
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (st[i].bytes_sent % g->layout.page_size) {
			g->c.flush_bad++;
			guest_complain(g, 0, "FLUSHED: cpu%u sent %llu bytes, not whole pages", i,
				       (unsigned long long)st[i].bytes_sent);
			guest_end_flush(g);
			return;
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		g->target_seq[i] = g->stream_base[i] + st[i].bytes_sent / g->layout.page_size;
		g->stats[i] = st[i];
	}
	g->have_target = true;
	g->have_stats = true;
	guest_check_flushed(g);
}

static void guest_on_text(struct vmt_guest *g, const struct vmt_msg *msg, uint32_t skip, const char *what)
{
	char text[600];
	uint32_t n = VMT_MIN(msg->len - skip, sizeof(text) - 1);

	for (uint32_t i = 0; i < n; i++) {
		uint8_t c = msg->payload[skip + i];
		text[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	text[n] = 0;
	guest_complain(g, 0, "%s: %s", what, text);
}

/* The guest asks for its own dump: untrusted, so the cooldown and the rate
 * limit apply (the owner's trigger policy), and complaints are rate-limited. */
static void guest_on_trigger(struct vmt_guest *g, const struct vmt_msg *msg)
{
	struct vmt_trigger t = { .kind = VMT_TRIGGER_GUEST, .time_ns = now_realtime_ns() };
	char text[VMT_REASON_MAX - 16];
	uint32_t n = VMT_MIN(msg->len, sizeof(text) - 1);
	int r;

	g->c.triggers_from_agent++;
	if (g->state != GUEST_STREAMING) {
		g->c.msgs_unexpected++;
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint8_t c = msg->payload[i];
		text[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	text[n] = 0;
	snprintf(t.reason, sizeof(t.reason), "guest: %s", n ? text : "(no reason given)");
	r = g->env->ev->trigger(g->env->owner, g, &t);
	if (r == -EBUSY)
		guest_log(g, VMT_LOG_DEBUG, 0, "trigger suppressed: %s", t.reason);
	else if (r < 0)
		log_guest(VMT_LOG_ERR, r, g->conf.name, "cannot start a dump: %m");
	else
		guest_log(g, VMT_LOG_NOTICE, 0, "asked for a dump: %s", text);
}

/*
 * TASKS: the agent's task tables, in pieces ahead of a FLUSHED, so that the
 * dump's sample names the tasks that ran since START. Pieces come in order;
 * anything else drops what was gathered (the last whole tables stay).
 */
static void guest_on_tasks(struct vmt_guest *g, const struct vmt_msg *msg)
{
	uint32_t off = get_le32(msg->payload), total = get_le32(msg->payload + 4);
	uint32_t n = msg->len - 8;
	const char *why = NULL;

	if (g->state != GUEST_STREAMING) {
		g->c.msgs_unexpected++;
		return;
	}
	if (off == 0)
		g->tasks_rx.len = 0;	/* a new set: one cut short is forgotten */
	if (!total || total > VMT_TASKS_MAX || off != g->tasks_rx.len || n > total - off ||
	    (off && total != g->tasks_total)) {
		g->c.msgs_unexpected++;
		guest_complain(g, 0, "task tables: a piece at %u of %u out of place (%zu bytes held); "
				     "dropped", off, total, g->tasks_rx.len);
		buf_free(&g->tasks_rx);
		return;
	}
	g->tasks_total = total;
	if (buf_append(&g->tasks_rx, msg->payload + 8, n) < 0) {
		log_guest(VMT_LOG_ERR, -ENOMEM, g->conf.name, "task tables dropped: %m");
		buf_free(&g->tasks_rx);
		return;
	}
	if (g->tasks_rx.len < total)
		return;
	if (meta_tasks_validate(g->tasks_rx.data, g->tasks_rx.len, &why) < 0) {
		g->c.msgs_unexpected++;
		guest_complain(g, 0, "%s; dropped", why);
		buf_free(&g->tasks_rx);
		return;
	}
	buf_free(&g->tasks);
	g->tasks = g->tasks_rx;
	g->tasks_rx = (struct vmt_buf){ 0 };
}

static void guest_dispatch(struct vmt_guest *g, const struct vmt_msg *msg)
{
	alive_heard(g, proto_msg_name(msg->type));
	switch (msg->type) {
	case VMT_MSG_HELLO:
		guest_on_hello(g, msg);
		break;
	case VMT_MSG_STARTED:
		guest_on_started(g, msg);
		break;
	case VMT_MSG_META_BEGIN:
		guest_on_meta_begin(g, msg);
		break;
	case VMT_MSG_META_DATA:
		guest_on_meta_data(g, msg);
		break;
	case VMT_MSG_META_END:
		guest_on_meta_end(g, msg);
		break;
	case VMT_MSG_FLUSHED:
		guest_on_flushed(g, msg);
		break;
	case VMT_MSG_STOPPED:
		break;
	case VMT_MSG_ERROR:
		g->c.errors_from_agent++;
		guest_on_text(g, msg, 4, "agent error");
		break;
	case VMT_MSG_TRIGGER:
		guest_on_trigger(g, msg);
		break;
	case VMT_MSG_SYNCED:
		sync_on_synced(g, msg);
		break;
	case VMT_MSG_TASKS:
		guest_on_tasks(g, msg);
		break;
	case VMT_MSG_BYE:
		alive_on_bye(g, msg);
		break;
	case VMT_MSG_PREV_BEGIN:
		guest_on_prev_begin(g, msg);
		break;
	case VMT_MSG_PREV_PAGES:
		guest_on_prev_pages(g, msg);
		break;
	case VMT_MSG_PREV_END:
		guest_on_prev_end(g, msg);
		break;
	default:
		/* host->guest types coming from the guest */
		g->c.msgs_unexpected++;
		guest_complain(g, 0, "unexpected %s message ignored", proto_msg_name(msg->type));
		break;
	}
	/* what it holds in metadata may have changed with any of them */
	guest_settle_meta(g);
}

/* ---- the control channel ---------------------------------------------- */

uint64_t guest_ctl_rejected_bytes(const struct vmt_guest *g)
{
	return g->ctl_rejected_bytes_base + g->rx->rejected_bytes;
}

uint64_t guest_ctl_rejected_msgs(const struct vmt_guest *g)
{
	return g->rx->rejected_msgs;
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

/*
 * Read and handle the control channel, at most budget bytes; true if it
 * was read dry (or closed).
 */
bool guest_ctl_read(struct vmt_guest *g, size_t budget)
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
		g->ctl_bytes_in += (uint64_t)n;
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

/*
 * An agent's control messages are small and few: its channel goes ahead of
 * bulk page reads (FLUSHED should not wait behind them). A channel read dry
 * keeps that place only while it carries no garbage and no more than
 * CTL_PRIORITY_BYTES a second: one refilled as fast as it is read (a flood,
 * or metadata being sent) would otherwise be ready at the higher priority at
 * every turn of the loop and starve every other source, other guests' data
 * and timers too. It takes its turn with everyone else's input until then.
 */
static bool guest_ctl_earns_priority(struct vmt_guest *g, bool drained, uint64_t read,
				     uint64_t rejected)
{
	uint64_t now = now_monotonic_ns();

	if (now - g->ctl_prio_since >= 1000000000ull) {
		g->ctl_prio_since = now;
		g->ctl_prio_bytes = 0;
	}
	g->ctl_prio_bytes += read;
	if (rejected)	/* garbage: nothing urgent, for the rest of the second */
		g->ctl_prio_bytes = CTL_PRIORITY_BYTES + 1;
	return drained && g->ctl_prio_bytes <= CTL_PRIORITY_BYTES;
}

int guest_ctl_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct vmt_guest *g = userdata;
	uint64_t rejected = g->rx->rejected_bytes, read = g->ctl_bytes_in;
	bool drained = guest_ctl_read(g, READ_BUDGET_BYTES), urgent;

	if (!g->ctl_src)
		return 0;
	urgent = guest_ctl_earns_priority(g, drained, g->ctl_bytes_in - read,
					  g->rx->rejected_bytes - rejected);
	if (urgent == g->ctl_demoted) {
		g->ctl_demoted = !urgent;
		sd_event_source_set_priority(g->ctl_src, urgent ? SD_EVENT_PRIORITY_IMPORTANT
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
