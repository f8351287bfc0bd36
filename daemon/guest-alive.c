/* SPDX-License-Identifier: MIT */
/*
 * guest-alive: see guest-alive.h. Pings ride on SYNC, which every agent
 * that says VMT_HELLO_BYE answers in any state; what the guest sends is
 * untrusted, so a pong is only matched against the ping out, and counts.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "guest-int.h"
#include "log.h"
#include "qemu.h"
#include "guest-alive.h"

#define PERIOD_MIN_MS 50

static const struct vmt_silence_conf *alive_conf(const struct vmt_guest *g)
{
	return &g->env->conf->silence;
}

static uint64_t alive_timeout_ns(const struct vmt_guest *g)
{
	return (uint64_t)alive_conf(g)->timeout_ms * 1000000;
}

static int alive_timer_cb(sd_event_source *s, uint64_t usec, void *userdata);

static void alive_arm(struct vmt_guest *g)
{
	struct vmt_guest_alive *a = &g->alive;
	uint64_t usec = (uint64_t)VMT_MAX(alive_conf(g)->timeout_ms / 5, PERIOD_MIN_MS) * 1000;
	int r;

	if (a->timer) {
		sd_event_source_set_time_relative(a->timer, usec);
		sd_event_source_set_enabled(a->timer, SD_EVENT_ONESHOT);
		return;
	}
	r = sd_event_add_time_relative(g->env->event, &a->timer, CLOCK_MONOTONIC, usec, 10000,
				       alive_timer_cb, g);
	if (r < 0)
		log_guest(VMT_LOG_WARNING, r, g->conf.name, "no guest_silence timer: %m");
}

static void alive_ping(struct vmt_guest *g)
{
	struct vmt_guest_alive *a = &g->alive;
	struct vmt_sync p = { .id = VMT_SYNC_ID_PING | ++a->ping_seq };
	struct vmt_buf b = { 0 };

	a->ping_id = p.id;
	a->ping_sent_ns = now_monotonic_ns();
	a->c.pings++;
	if (proto_put_sync(&b, &p) == 0)
		guest_send(g, VMT_MSG_SYNC, b.data + VMT_PROTO_HDR_SIZE, (uint32_t)(b.len - VMT_PROTO_HDR_SIZE));
	buf_free(&b);
}

/* "vCPU 0 R, 1 S" from /proc: a halted guest's vCPUs sleep in KVM_RUN (S),
 * a spinning one runs (R), a stopped QEMU shows T. */
static void vcpu_states(pid_t pid, uint32_t ncpus, char *out, size_t n)
{
	uint32_t tids[VMT_MAX_CPUS], nv = 0, max = VMT_MIN(ncpus, (uint32_t)VMT_MAX_CPUS);
	size_t len = 0;

	out[0] = 0;
	if (!max || qemu_vcpu_threads(pid, tids, max, &nv) < 0 || !nv) {
		snprintf(out, n, "no vCPU thread named, process %c", qemu_thread_state(pid, 0));
		return;
	}
	for (uint32_t i = 0; i < nv && len + 16 < n; i++) {
		char st = tids[i] ? qemu_thread_state(pid, (pid_t)tids[i]) : '?';
		int k = snprintf(out + len, n - len, "%s%u %c", i ? ", " : "vCPU ", i, st);
		if (k < 0)
			break;
		len += (size_t)k;
	}
	if (len + 16 >= n && nv > 1)
		snprintf(out + VMT_MIN(len, n - 6), 6, " ...");
}

static void alive_silent(struct vmt_guest *g, uint64_t now)
{
	struct vmt_guest_alive *a = &g->alive;
	struct vmt_trigger t = { .kind = VMT_TRIGGER_SILENCE, .time_ns = now_realtime_ns() };
	double silent_s = (double)(now - a->heard_ns) / 1e9;
	pid_t pid = guest_qemu_pid(g);
	char qemu[160];
	int r;

	a->silent = true;
	if (pid > 0 && ((kill(pid, 0) < 0 && errno == ESRCH) || qemu_thread_state(pid, 0) == 'Z')) {
		/* its QEMU died (a zombie until reaped): process_death's to
		 * report, not a guest's crash */
		a->c.qemu_gone++;
		guest_log(g, VMT_LOG_NOTICE, 0, "silent for %.1f s and its QEMU (pid %d) is gone",
			  silent_s, (int)pid);
		return;
	}
	a->c.silences++;
	if (pid > 0) {
		char st[120];
		vcpu_states(pid, g->nrings, st, sizeof(st));
		snprintf(qemu, sizeof(qemu), "QEMU %d alive, %s", (int)pid, st);
	} else {
		snprintf(qemu, sizeof(qemu), "its QEMU not known");
	}
	t.pid = pid > 0 ? (uint32_t)pid : 0;
	t.value = now - a->heard_ns;
	t.threshold = alive_timeout_ns(g);
	snprintf(t.reason, sizeof(t.reason),
		 "guest stopped answering: silent for %.1f s (last: %s); %s", silent_s,
		 a->heard_what ? a->heard_what : "nothing", qemu);
	r = g->env->ev->trigger(g->env->owner, g, &t);
	if (r == 0) {
		a->c.fired++;
		log_guest(VMT_LOG_WARNING, 0, g->conf.name, "%s: dumping it", t.reason);
	} else if (r == -EBUSY) {
		a->c.suppressed++;
		guest_log(g, VMT_LOG_NOTICE, 0, "%s: its dump held back by the cooldown or budget",
			  t.reason);
	} else {
		log_guest(VMT_LOG_ERR, r, g->conf.name, "%s: cannot start a dump: %m", t.reason);
	}
}

static int alive_timer_cb(sd_event_source *s, uint64_t usec, void *userdata)
{
	struct vmt_guest *g = userdata;
	struct vmt_guest_alive *a = &g->alive;
	uint64_t now = now_monotonic_ns(), to = alive_timeout_ns(g);

	if (!a->watched || g->state != GUEST_STREAMING)
		return 0;
	alive_arm(g);	/* on while disabled: a reload may enable it */
	if (a->silent || a->crashed || !alive_conf(g)->enabled)
		return 0;	/* once, until it speaks again */
	if (a->ping_id && now - a->heard_ns >= to && now - a->ping_sent_ns >= to / 2) {
		alive_silent(g, now);
		return 0;
	}
	/* a ping unanswered for the timeout while other things came: ask again */
	if (a->ping_id && now - a->ping_sent_ns >= to)
		a->ping_id = 0;
	if (!a->ping_id)
		alive_ping(g);
	return 0;
}

void alive_session_start(struct vmt_guest *g)
{
	struct vmt_guest_alive *a = &g->alive;

	a->silent = false;
	a->crashed = false;
	a->ping_id = 0;
	a->heard_ns = now_monotonic_ns();
	a->heard_what = "its session";
	a->watched = guest_has_session(g) && (g->hello.flags & VMT_HELLO_BYE);
	a->unclean = a->watched;
	if (!a->watched) {
		if (guest_has_session(g) && alive_conf(g)->enabled)
			guest_log(g, VMT_LOG_INFO, 0, "guest_silence: the agent (%s) does not say BYE: "
				  "its silence is not watched", g->hello.agent);
		return;
	}
	alive_arm(g);
}

void alive_session_end(struct vmt_guest *g)
{
	struct vmt_guest_alive *a = &g->alive;

	a->watched = false;
	a->silent = false;
	a->crashed = false;
	a->ping_id = 0;
	if (a->timer)
		sd_event_source_set_enabled(a->timer, SD_EVENT_OFF);
}

void alive_heard(struct vmt_guest *g, const char *what)
{
	struct vmt_guest_alive *a = &g->alive;
	uint64_t now = now_monotonic_ns();

	if (a->silent && a->watched)
		guest_log(g, VMT_LOG_NOTICE, 0, "speaks again (%s) after %.1f s of silence", what,
			  (double)(now - a->heard_ns) / 1e9);
	a->silent = false;
	a->heard_ns = now;
	a->heard_what = what;
}

void alive_on_pong(struct vmt_guest *g, uint64_t id)
{
	struct vmt_guest_alive *a = &g->alive;
	uint64_t now = now_monotonic_ns(), to = alive_timeout_ns(g);

	if (!a->ping_id || id != a->ping_id) {
		/* after we stopped waiting for it (or never asked): late */
		a->c.late++;
		return;
	}
	if (now - a->ping_sent_ns >= to / 2) {
		a->c.late++;
		guest_log(g, VMT_LOG_INFO, 0, "guest_silence: a ping answered after %.1f s (slow, "
			  "not silent)", (double)(now - a->ping_sent_ns) / 1e9);
	}
	a->ping_id = 0;
}

void alive_on_bye(struct vmt_guest *g, const struct vmt_msg *m)
{
	char text[257];
	uint32_t n = VMT_MIN(m->len, (uint32_t)sizeof(text) - 1);

	for (uint32_t i = 0; i < n; i++)
		text[i] = m->payload[i] >= 0x20 && m->payload[i] < 0x7f ? (char)m->payload[i] : '?';
	text[n] = 0;
	g->alive.c.byes++;
	g->alive.unclean = false;
	if (g->state != GUEST_STREAMING && g->state != GUEST_STARTING) {
		g->c.msgs_unexpected++;
		return;
	}
	guest_log(g, VMT_LOG_NOTICE, 0, "the agent stops (%s): its silence is no incident; "
		  "waiting for its next HELLO", n ? text : "no reason given");
	guest_end_flush(g);
	guest_set_state(g, GUEST_WAIT_HELLO);
	guest_arm(g, RETRY_USEC);
}

void alive_free(struct vmt_guest *g)
{
	g->alive.timer = sd_event_source_disable_unref(g->alive.timer);
}

void alive_channels_open(struct vmt_guest *g)
{
	g->alive.unclean = false;
}

/* 64 KiB: far more than a BYE, and what one callback reads anyway */
#define EXIT_READ_BUDGET (64u << 10)

bool guest_exit_unclean(struct vmt_guest *g)
{
	bool r;

	/* the agent's BYE goes out before the guest powers off, but the
	 * detector's record is read ahead of the channels: read what waits */
	if (channel_is_open(&g->ctl))
		guest_ctl_read(g, EXIT_READ_BUDGET);
	r = g->alive.unclean;
	g->alive.unclean = false;
	return r;
}

void guest_crashed(struct vmt_guest *g)
{
	/* until its next session: pages still read from the channels are
	 * what it sent before, no sign of life */
	if (guest_has_session(g) && g->state == GUEST_STREAMING)
		g->alive.silent = g->alive.crashed = true;
	/* a FLUSH already out gets no answer: the dump waits no longer */
	guest_end_flush(g);
}
