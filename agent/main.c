/* SPDX-License-Identifier: MIT */
/*
 * vmtrace-agent: runs in the guest. Holds the control port open for its
 * whole life, answers the host (lib/proto.h, docs/PROTOCOL.md), and streams
 * ftrace pages through one data port per CPU (pump.c). One straight-line
 * loop: poll() on the control port, the pumps' flush-done eventfd and a
 * signalfd; it never blocks on the host, whose reads may stall.
 *
 * Session: START sets ftrace up (tracing off) and answers STARTED and the
 * metadata; STREAM switches tracing on and starts the pumps; STOP (or a
 * new START) turns tracing off, makes the final cut and answers STOPPED.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/sysinfo.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "ftrace.h"
#include "log.h"
#include "meta.h"
#include "proto.h"
#include "prev.h"
#include "pump.h"
#include "trigger.h"
#include "util.h"

#ifndef VMT_VERSION
#define VMT_VERSION "unknown"
#endif

#define PORTS_DIR "/dev/virtio-ports"
#define CTL_PORT "agent-ctl-path"
/* Re-probe a control port whose host end is closed this often */
#define HUP_RETRY_MS 250
#define PARTIAL_TIMEOUT_MS 5000	/* a host message unfinished this long never will be */
#define MAX_QUEUED_FLUSHES 64
#define BYE_WAIT_MS 1000	/* for BYE to go out when exiting */
#define FLUSH_INTERVAL_MS 1000	/* default of --flush-interval */
#define FLUSH_INTERVAL_MAX_MS (3600 * 1000)

enum agent_state {
	AGENT_IDLE,
	AGENT_STARTING,		/* metadata sent, ports open, waiting for STREAM */
	AGENT_STREAMING,
	AGENT_STOPPING,		/* tracing off, the final cut under way */
};

struct agent {
	const char *ports_dir;
	int ctl_fd, notify_fd, sig_fd;
	unsigned ncpus, page_size;
	struct vmt_proto_rx *rx;
	struct vmt_buf out;	/* to the host, out_off of it written */
	size_t out_off;
	bool ctl_hup;		/* host end closed: retry later, do not spin */
	uint64_t partial_since;	/* CLOCK_MONOTONIC since which a message is unfinished */

	enum agent_state state;
	struct vmt_pumps *pumps;
	bool cut_final;		/* the cut under way is the last one */
	uint64_t queued[MAX_QUEUED_FLUSHES];	/* FLUSH ids for the next cut */
	size_t nqueued;
	uint64_t inflight[MAX_QUEUED_FLUSHES];	/* ... answered by the current one */
	size_t ninflight;
	bool restart;		/* a START came while streaming: run it once stopped */
	struct vmt_start next;
	char next_events[4096];
	/* at the last cut; after STOP the final one, which a FLUSH then reports */
	struct vmt_cpu_stats last[VMT_MAX_CPUS];
	struct vmt_agent_trigger trig;	/* trigger.c: local requests, kernel oopses */
	int sync_src;		/* user-space twin of the trace clock (util.h) */
	int sync_err;		/* 0, or -EOPNOTSUPP when the trace clock has none */
	uint64_t rx_time;	/* sync_src when the last control read returned */
	int marker_fd;		/* trace_marker, opened on the first marked SYNC */
	unsigned flush_interval_ms;	/* each CPU's partial page to the host, 0: only at FLUSH */
	struct vmt_prev prev;	/* prev.c: the previous boot's pages */
	bool prev_wanted;	/* the host's START asked for them */
};

/* Bytes queued to the host past which the previous boot's pages wait. */
#define PREV_QUEUE_MAX (256 * 1024)

static void ctl_flush(struct agent *a)
{
	while (a->out_off < a->out.len) {
		ssize_t n = write(a->ctl_fd, a->out.data + a->out_off, a->out.len - a->out_off);
		if (n > 0) {
			a->out_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			log_warning("control port write: %m");
		return;
	}
	a->out.len = a->out_off = 0;
}

static void agent_send(struct agent *a, unsigned type, const void *p, uint32_t len)
{
	int r = proto_put(&a->out, type, p, len);

	if (r < 0)
		log_error_errno(r, "cannot queue %s: %m", proto_msg_name(type));
	else
		log_debug("-> %s (%u bytes)", proto_msg_name(type), len);
	ctl_flush(a);
}

/* STARTED and ERROR: i32 error, then u32 ncpus (STARTED only), then text */
static void agent_send_status(struct agent *a, unsigned type, int err, const char *text)
{
	uint8_t p[8 + 512];
	size_t off = 0, tl = VMT_MIN(strlen(text), (size_t)512);

	put_le32(p, (uint32_t)err);
	off = 4;
	if (type == VMT_MSG_STARTED) {
		put_le32(p + 4, a->ncpus);
		off = 8;
	}
	memcpy(p + off, text, tl);
	agent_send(a, type, p, (uint32_t)(off + tl));
}

/* echo: the nonce of the HOST_HELLO answered, 0 when unasked */
static void agent_hello(struct agent *a, uint32_t echo)
{
	struct vmt_hello h = { 0 };
	struct utsname u;
	_cleanup_free_ char *bid = NULL;
	size_t len;

	h.version = VMT_PROTO_VERSION;
	h.ncpus = a->ncpus;
	h.page_size = a->page_size;
	h.flags = a->state == AGENT_STREAMING || a->state == AGENT_STOPPING ? VMT_HELLO_TRACING : 0;
	h.flags |= VMT_HELLO_SYNC | VMT_HELLO_BYE;
	h.echo = echo;
	h.mono_ns = now_monotonic_ns();
	if (uname(&u) == 0)
		snprintf(h.release, sizeof(h.release), "%s", u.release);
	if (ftrace_clock(h.clock, sizeof(h.clock)) < 0)
		snprintf(h.clock, sizeof(h.clock), "local");
	if (read_file("/proc/sys/kernel/random/boot_id", 256, &bid, &len) == 0) {
		bid[strcspn(bid, "\n")] = 0;
		snprintf(h.boot_id, sizeof(h.boot_id), "%s", bid);
	}
	snprintf(h.agent, sizeof(h.agent), "vmtrace-agent %s", VMT_VERSION);
	if (proto_put_hello(&a->out, &h) < 0)
		log_error("cannot queue HELLO");
	ctl_flush(a);
}

/*
 * The task tables as they are now, in pieces, ahead of each FLUSHED: the
 * names of the tasks that ran since START are in the dump's sample. Not
 * sent if they cannot be read (the aux file's, from START, stay in use).
 */
static void agent_send_tasks(struct agent *a)
{
	struct vmt_buf t = { 0 };
	uint8_t p[VMT_PROTO_MAX_PAYLOAD];
	const uint32_t piece = VMT_PROTO_MAX_PAYLOAD - 8;
	int r;

	if (a->out.len - a->out_off > 2 * VMT_TASKS_MAX) {
		log_warning("task names not sent with this flush: the host is not reading");
		return;
	}
	r = ftrace_tasks(&t);

	if (r < 0 || !t.len) {
		if (r < 0)
			log_warning("task names not sent with this flush: %s", strerror(-r));
		buf_free(&t);
		return;
	}
	for (uint32_t off = 0; off < t.len; off += piece) {
		uint32_t n = (uint32_t)VMT_MIN((size_t)piece, t.len - off);

		put_le32(p, off);
		put_le32(p + 4, (uint32_t)t.len);
		memcpy(p + 8, t.data + off, n);
		if (proto_put(&a->out, VMT_MSG_TASKS, p, 8 + n) < 0) {
			log_error("cannot queue TASKS");
			break;
		}
	}
	buf_free(&t);
}

static void agent_send_flushed(struct agent *a, uint64_t id)
{
	int r;

	agent_send_tasks(a);
	r = proto_put_flushed(&a->out, id, a->ncpus, a->last);

	if (r < 0)
		log_error_errno(r, "cannot queue FLUSHED: %m");
	ctl_flush(a);
}

static int agent_send_meta(struct agent *a, const struct vmt_buf *b, uint32_t files)
{
	uint8_t p[16] = { 0 };

	put_le64(p, b->len);
	put_le32(p + 8, files);
	agent_send(a, VMT_MSG_META_BEGIN, p, 16);
	for (size_t off = 0; off < b->len; off += VMT_PROTO_MAX_PAYLOAD) {
		uint32_t n = (uint32_t)VMT_MIN(b->len - off, (size_t)VMT_PROTO_MAX_PAYLOAD);
		int r = proto_put(&a->out, VMT_MSG_META_DATA, b->data + off, n);
		if (r < 0)
			return r;
	}
	memset(p, 0, sizeof(p));
	put_le32(p, crc32c(0, b->data, b->len));
	agent_send(a, VMT_MSG_META_END, p, 8);
	return 0;
}

/* trigger.c's way out: a TRIGGER only while pages flow */
static int agent_send_trigger(void *ctx, const char *reason, size_t len)
{
	struct agent *a = ctx;

	if (a->state != AGENT_STREAMING)
		return -ENOTCONN;
	agent_send(a, VMT_MSG_TRIGGER, reason, (uint32_t)len);
	return 0;
}

/* The clock SYNC answers in follows the trace clock in force. */
static void agent_sync_clock(struct agent *a)
{
	char clock[VMT_STR_CLOCK];

	a->sync_err = ftrace_clock(clock, sizeof(clock));
	if (a->sync_err == 0)
		a->sync_err = trace_clock_source(clock, &a->sync_src);
	if (a->sync_err < 0)
		log_info("trace clock '%s' cannot be read from user space: no clock sync",
			 a->sync_err == -EOPNOTSUPP ? clock : "?");
}

/* t2 is the time the read returned, before any parsing: the host's t1..t4
 * then brackets the least of our own latency. */
static void agent_on_sync(struct agent *a, const struct vmt_msg *m)
{
	struct vmt_synced r = { .status = a->sync_err };
	struct vmt_sync s;
	int e;

	if (proto_get_sync(m->payload, m->len, &s) < 0)
		return;
	r.id = s.id;
	if (!r.status) {
		r.t2 = a->rx_time;
		if (s.flags & VMT_SYNC_F_MARKER) {
			char text[64];
			int n = snprintf(text, sizeof(text), "vmtrace-sync %llu\n", (unsigned long long)s.id);
			if (a->marker_fd < 0)
				a->marker_fd = ftrace_marker_open();
			if (a->marker_fd >= 0 && write(a->marker_fd, text, (size_t)n) < 0)
				log_debug("trace_marker: %m");
		}
		r.t3 = trace_clock_now(a->sync_src);
	}
	e = proto_put_synced(&a->out, &r);
	if (e < 0)
		log_error_errno(e, "cannot queue SYNCED: %m");
	ctl_flush(a);
}

/* START: ftrace set up with tracing off, ports open, STARTED and the
 * metadata sent; pages wait for STREAM. */
static void agent_start(struct agent *a, const struct vmt_start *s)
{
	struct vmt_buf meta = { 0 };
	char err[400], msg[512];
	unsigned changed = 0;
	uint32_t files = 0;
	int r;

	log_info("START buffer_kb=%u clock='%s' events='%.*s'%s", s->buffer_kb, s->clock,
		 (int)s->events_len, s->events, s->flags & VMT_START_KEEP_EVENTS ? " (kept)" : "");
	r = ftrace_setup(s, &changed, err, sizeof(err));
	if (r < 0) {
		log_error_errno(r, "START failed: %s", err);
		agent_send_status(a, VMT_MSG_STARTED, r, err);
		return;
	}
	r = pump_open(&a->pumps, ftrace_dir(), a->ports_dir, a->ncpus, a->page_size, a->notify_fd,
		      a->flush_interval_ms);
	if (r < 0) {
		snprintf(msg, sizeof(msg), "cannot open the data ports or trace_pipe_raw: %s", strerror(-r));
		agent_send_status(a, VMT_MSG_STARTED, r, msg);
		return;
	}
	r = ftrace_meta(&meta, &files);
	if (r < 0) {
		snprintf(msg, sizeof(msg), "cannot build the metadata bundle: %s", strerror(-r));
		agent_send_status(a, VMT_MSG_STARTED, r, msg);
		pump_close(a->pumps);
		a->pumps = NULL;
		buf_free(&meta);
		return;
	}
	memset(a->last, 0, sizeof(a->last));
	agent_sync_clock(a);
	a->prev_wanted = s->flags & VMT_START_PREV;
	/* its old pages are read (at start): it may record this boot now */
	prev_setup(&a->prev, s);
	snprintf(msg, sizeof(msg), "%u event enable files written", changed);
	agent_send_status(a, VMT_MSG_STARTED, 0, msg);
	r = agent_send_meta(a, &meta, files);
	if (r < 0)
		log_error_errno(r, "cannot queue the metadata: %m");
	log_info("metadata %zu bytes in %u files, waiting for STREAM", meta.len, files);
	buf_free(&meta);
	a->state = AGENT_STARTING;
}

/* STREAM: the host took the metadata and drained the data ports. */
static void agent_stream(struct agent *a)
{
	int r = ftrace_tracing_on(1);

	if (r >= 0)
		r = pump_run(a->pumps);
	if (r < 0) {
		ftrace_tracing_on(0);
		pump_close(a->pumps);
		a->pumps = NULL;
		a->state = AGENT_IDLE;
		agent_send_status(a, VMT_MSG_ERROR, r, "streaming could not start");
		return;
	}
	a->state = AGENT_STREAMING;
	log_info("streaming %u CPUs", a->ncpus);
}

/* Starts the next cut: it answers every FLUSH queued so far. */
static void agent_cut(struct agent *a, bool final)
{
	int r = pump_flush(a->pumps, final);

	if (r < 0)
		return;	/* -EBUSY: agent_flush_done() starts it */
	memcpy(a->inflight, a->queued, a->nqueued * sizeof(a->queued[0]));
	a->ninflight = a->nqueued;
	a->nqueued = 0;
	a->cut_final = final;
}

/* The session is over: STOPPED, then a START that waited for it. */
static void agent_stopped(struct agent *a)
{
	pump_close(a->pumps);
	a->pumps = NULL;
	a->state = AGENT_IDLE;
	log_info("stopped");
	agent_send(a, VMT_MSG_STOPPED, NULL, 0);
	if (a->restart) {
		a->restart = false;
		a->next.events = a->next_events;
		agent_start(a, &a->next);
	}
}

static void agent_stop(struct agent *a)
{
	/* off first, so that the final cut is the end of the data */
	ftrace_tracing_on(0);
	if (a->state == AGENT_STARTING) {
		agent_stopped(a);	/* no pump ever ran */
		return;
	}
	a->state = AGENT_STOPPING;
	if (!pump_flush_pending(a->pumps))
		agent_cut(a, true);
}

static void agent_flush_done(struct agent *a)
{
	uint64_t v;

	if (read(a->notify_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		log_warning("notify: %m");
	if (!a->pumps || !pump_flush_done(a->pumps, a->last))
		return;
	for (size_t i = 0; i < a->ninflight; i++)
		agent_send_flushed(a, a->inflight[i]);
	a->ninflight = 0;
	if (a->state == AGENT_STREAMING) {
		if (a->nqueued)
			agent_cut(a, false);
		return;
	}
	if (!a->cut_final) {
		agent_cut(a, true);
		return;
	}
	for (size_t i = 0; i < a->nqueued; i++)	/* nothing follows the final cut */
		agent_send_flushed(a, a->queued[i]);
	a->nqueued = 0;
	agent_stopped(a);
}

static void agent_on_flush(struct agent *a, uint64_t id)
{
	if (a->state == AGENT_IDLE || a->state == AGENT_STARTING) {
		/* nothing is being consumed: the last cut (or the empty start of
		 * this session) still holds; the kernel's counters are current */
		for (unsigned i = 0; i < a->ncpus; i++)
			ftrace_cpu_stats(i, &a->last[i]);
		agent_send_flushed(a, id);
		return;
	}
	if (a->nqueued == MAX_QUEUED_FLUSHES) {
		agent_send_status(a, VMT_MSG_ERROR, -EBUSY, "too many FLUSH requests pending");
		return;
	}
	a->queued[a->nqueued++] = id;
	if (a->state == AGENT_STREAMING && !pump_flush_pending(a->pumps))
		agent_cut(a, false);
}

static void agent_on_start(struct agent *a, const struct vmt_msg *m)
{
	struct vmt_start s;

	if (proto_get_start(m->payload, m->len, &s) < 0) {
		log_warning("bad START ignored");
		return;
	}
	if (a->state == AGENT_IDLE) {
		agent_start(a, &s);
		return;
	}
	/* stop cleanly first; the START runs when STOPPED has gone out */
	a->next = s;
	memcpy(a->next_events, s.events, s.events_len);
	a->next.events = a->next_events;
	a->restart = true;
	if (a->state != AGENT_STOPPING)
		agent_stop(a);
}

static void agent_handle(struct agent *a, const struct vmt_msg *m)
{
	log_debug("<- %s (%u bytes)", proto_msg_name(m->type), m->len);
	switch (m->type) {
	case VMT_MSG_HOST_HELLO:
		if (get_le32(m->payload) != VMT_PROTO_VERSION)
			log_warning("host speaks protocol %u, we speak %u", get_le32(m->payload),
				    VMT_PROTO_VERSION);
		agent_hello(a, get_le32(m->payload + 4));
		break;
	case VMT_MSG_START:
		agent_on_start(a, m);
		break;
	case VMT_MSG_STREAM:
		if (a->state == AGENT_STARTING)
			agent_stream(a);
		else
			log_warning("STREAM outside a starting session ignored");
		break;
	case VMT_MSG_STOP:
		a->restart = false;	/* a STOP after a START cancels it */
		if (a->state == AGENT_STREAMING || a->state == AGENT_STARTING)
			agent_stop(a);
		else if (a->state == AGENT_IDLE)
			agent_send(a, VMT_MSG_STOPPED, NULL, 0);
		break;
	case VMT_MSG_FLUSH:
		agent_on_flush(a, get_le64(m->payload));
		break;
	case VMT_MSG_SYNC:
		agent_on_sync(a, m);
		break;
	default:
		log_warning("unexpected %s from the host ignored", proto_msg_name(m->type));
	}
}

static void agent_read(struct agent *a)
{
	struct vmt_msg m;
	uint64_t rejected = a->rx->rejected_msgs;
	size_t room;
	uint8_t *p = proto_rx_space(a->rx, &room);
	ssize_t n = read(a->ctl_fd, p, room);

	if (!a->sync_err)
		a->rx_time = trace_clock_now(a->sync_src);
	if (n == 0) {
		/* the host end is closed (socket chardev): drop a half message */
		a->ctl_hup = true;
		proto_rx_init(a->rx);
		return;
	}
	if (n < 0) {
		if (errno != EAGAIN && errno != EINTR)
			log_warning("control port read: %m");
		return;
	}
	proto_rx_wrote(a->rx, (size_t)n);
	while (proto_rx_next(a->rx, &m) > 0) {
		a->partial_since = 0;
		agent_handle(a, &m);
	}
	if (a->rx->rejected_msgs != rejected)
		log_warning("control port: %llu bad bytes skipped so far (%s)",
			    (unsigned long long)a->rx->rejected_bytes, strerror(-a->rx->last_error));
	if (!proto_rx_partial(a->rx))
		a->partial_since = 0;
	else if (!a->partial_since)
		a->partial_since = now_monotonic_ns();
}

/*
 * A host message begun and unfinished for PARTIAL_TIMEOUT_MS: on a FIFO,
 * the daemon died in the middle of it and a new one writes on. Give it up
 * and look for a header in what came after it.
 */
static void agent_check_partial(struct agent *a)
{
	uint64_t now = now_monotonic_ns();
	struct vmt_msg m;

	if (!a->partial_since || now - a->partial_since < PARTIAL_TIMEOUT_MS * 1000000ull)
		return;
	log_warning("control port: a message unfinished for %.1f s given up (%zu bytes held)",
		    (double)(now - a->partial_since) / 1e9, proto_rx_partial(a->rx));
	proto_rx_abandon(a->rx);
	a->partial_since = 0;
	while (proto_rx_next(a->rx, &m) > 0)
		agent_handle(a, &m);
	if (proto_rx_partial(a->rx))
		a->partial_since = now;
}

/*
 * Leaving on purpose (the unit stopped, a signal): BYE tells the host that
 * the silence that follows is no incident. Given a moment to go out: the
 * host may be reading slowly, and nothing else is left to do.
 */
static void agent_bye(struct agent *a, unsigned signo)
{
	uint64_t end = now_monotonic_ns() + BYE_WAIT_MS * 1000000ull;
	char why[64];
	int n = snprintf(why, sizeof(why), "signal %u", signo);

	if (proto_put(&a->out, VMT_MSG_BYE, why, (uint32_t)n) < 0)
		return;
	ctl_flush(a);
	while (a->out_off < a->out.len && now_monotonic_ns() < end) {
		struct pollfd p = { a->ctl_fd, POLLOUT, 0 };

		if (poll(&p, 1, 100) < 0 && errno != EINTR)
			break;
		ctl_flush(a);
	}
}

/* While streaming, the previous boot's pages go out a few messages at a
 * time, whenever what is queued to the host has gone out. */
static void agent_send_prev(struct agent *a)
{
	if (a->state != AGENT_STREAMING || !a->prev_wanted)
		return;
	/* on while the port takes them: poll() wakes us when it has room */
	while (prev_pending(&a->prev) && a->out.len - a->out_off <= PREV_QUEUE_MAX) {
		bool done = prev_queue(&a->prev, &a->out);

		ctl_flush(a);
		if (done)
			break;
	}
}

static int agent_loop(struct agent *a)
{
	for (;;) {
		struct pollfd p[5] = {
			{ a->ctl_hup ? -1 : a->ctl_fd, POLLIN, 0 },
			{ a->notify_fd, POLLIN, 0 },
			{ a->sig_fd, POLLIN, 0 },
			{ a->trig.sock_fd, POLLIN, 0 },
			{ a->trig.kmsg_fd, POLLIN, 0 },
		};
		int n;

		agent_send_prev(a);
		if (a->out_off < a->out.len)
			p[0].events |= POLLOUT;
		n = poll(p, 5, a->ctl_hup ? HUP_RETRY_MS : a->partial_since ? 1000 : -1);
		if (n < 0 && errno != EINTR)
			return log_error_errno(-errno, "poll: %m");
		a->ctl_hup = false;
		if (p[2].revents & POLLIN) {
			struct signalfd_siginfo si;
			if (read(a->sig_fd, &si, sizeof(si)) == sizeof(si)) {
				log_info("signal %u, exiting", si.ssi_signo);
				agent_bye(a, si.ssi_signo);
				return 0;
			}
		}
		if (p[1].revents & POLLIN)
			agent_flush_done(a);
		if (p[0].revents & POLLIN)
			agent_read(a);
		else if (p[0].revents & (POLLHUP | POLLERR))
			a->ctl_hup = true;
		if (p[0].revents & POLLOUT)
			ctl_flush(a);
		agent_check_partial(a);
		if (p[3].revents & POLLIN)
			trigger_on_request(&a->trig);
		if (p[4].revents & (POLLIN | POLLERR))
			trigger_on_kmsg(&a->trig);
	}
}

/* CPUs with a data port: trace-path-cpu0 .. N-1, as many as are possible */
static unsigned agent_count_cpus(const char *dir)
{
	unsigned n = 0, max = (unsigned)get_nprocs_conf();

	while (n < max && n < VMT_MAX_CPUS) {
		char path[512];

		snprintf(path, sizeof(path), "%s/trace-path-cpu%u", dir, n);
		if (access(path, W_OK) < 0)
			break;
		n++;
	}
	if (n && n < max)
		log_warning("%u CPUs but data ports for %u only: the others are not traced", max, n);
	return n;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: vmtrace-agent [-d DIR] [-s SOCKET] [-f MS] [-k] [-v]\n"
		   "       vmtrace-agent [-s SOCKET] trigger REASON\n"
		   "  -d, --ports DIR     virtio ports directory (default " PORTS_DIR ")\n"
		   "  -s, --socket SOCKET trigger requests (default " VMT_TRIGGER_SOCK ")\n"
		   "  -f, --flush-interval MS\n"
		   "                      each CPU's partial page to the host this often when it\n"
		   "                      has new events (default 1000, 0: only when asked)\n"
		   "  -k, --no-kmsg       no TRIGGER on kernel oops/BUG/WARNING/panic lines\n"
		   "  -v, --verbose       debug messages\n"
		   "  -V, --version       print the version\n"
		   "  -h, --help          this help\n");
}

int main(int argc, char **argv)
{
	struct agent a = { .ports_dir = PORTS_DIR, .ctl_fd = -1, .notify_fd = -1, .sig_fd = -1,
			   .marker_fd = -1, .flush_interval_ms = FLUSH_INTERVAL_MS };
	char *end;
	unsigned long ul;
	const char *sock = VMT_TRIGGER_SOCK;
	bool kmsg = true;
	char path[512];
	sigset_t mask;
	int c, r;

	static const struct option longopts[] = {
		{ "ports", required_argument, NULL, 'd' },
		{ "socket", required_argument, NULL, 's' },
		{ "no-kmsg", no_argument, NULL, 'k' },
		{ "flush-interval", required_argument, NULL, 'f' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};

	log_set_ident("vmtrace-agent");
	while ((c = getopt_long(argc, argv, "d:s:f:kvVh", longopts, NULL)) != -1) {
		switch (c) {
		case 'd': a.ports_dir = optarg; break;
		case 's': sock = optarg; break;
		case 'k': kmsg = false; break;
		case 'f':
			errno = 0;
			ul = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || ul > FLUSH_INTERVAL_MAX_MS) {
				fprintf(stderr, "vmtrace-agent: --flush-interval: %s is not 0 to %u ms\n",
					optarg, FLUSH_INTERVAL_MAX_MS);
				return 2;
			}
			a.flush_interval_ms = (unsigned)ul;
			break;
		case 'v': log_set_level(VMT_LOG_DEBUG); break;
		case 'V': printf("vmtrace-agent %s\n", VMT_VERSION); return 0;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind + 2 == argc && !strcmp(argv[optind], "trigger"))
		return trigger_request(sock, argv[optind + 1]) < 0 ? 1 : 0;
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	/* blocked before any pump thread exists, so they inherit the mask */
	pthread_sigmask(SIG_BLOCK, &mask, NULL);
	a.sig_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	a.notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	a.rx = malloc(sizeof(*a.rx));
	if (a.sig_fd < 0 || a.notify_fd < 0 || !a.rx) {
		log_error("signalfd/eventfd/malloc: %m");
		return 1;
	}
	proto_rx_init(a.rx);
	if (ftrace_open() < 0)
		return 1;
	a.page_size = (unsigned)getpagesize();
	agent_sync_clock(&a);
	a.ncpus = agent_count_cpus(a.ports_dir);
	if (!a.ncpus) {
		log_error("no %s/trace-path-cpu0: nothing to stream to", a.ports_dir);
		return 1;
	}
	/* first of all: nothing may be enabled in it before it is read */
	r = prev_read(&a.prev, ftrace_dir(), a.ncpus, a.page_size);
	if (r < 0)
		log_warning_errno(r, "the previous boot's trace not read: %m");
	/* held for the agent's whole life: host->guest bytes are dropped while
	 * no guest process has the port open */
	snprintf(path, sizeof(path), "%s/" CTL_PORT, a.ports_dir);
	a.ctl_fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (a.ctl_fd < 0) {
		log_error("%s: %m", path);
		return 1;
	}
	trigger_open(&a.trig, sock, kmsg, agent_send_trigger, &a);
	log_info("vmtrace-agent %s: %u CPUs, page %u, ports in %s", VMT_VERSION, a.ncpus,
		 a.page_size, a.ports_dir);
	agent_hello(&a, 0);
	r = agent_loop(&a);
	pump_close(a.pumps);
	prev_free(&a.prev);
	trigger_close(&a.trig, sock);
	close(a.ctl_fd);
	if (a.marker_fd >= 0)
		close(a.marker_fd);
	buf_free(&a.out);
	free(a.rx);
	return r < 0 ? 1 : 0;
}
