/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guest-int.h"
#include "log.h"
#include "qemu.h"
#include "guest-sync.h"

static int sync_timer_cb(sd_event_source *s, uint64_t usec, void *userdata);

static void sync_arm(struct vmt_guest *g, uint64_t ms)
{
	struct vmt_guest_sync *s = &g->sync;
	int r;

	if (s->timer) {
		sd_event_source_set_time_relative(s->timer, ms * 1000);
		sd_event_source_set_enabled(s->timer, SD_EVENT_ONESHOT);
		return;
	}
	r = sd_event_add_time_relative(g->env->event, &s->timer, CLOCK_MONOTONIC, ms * 1000, 1000,
				       sync_timer_cb, g);
	if (r < 0)
		log_guest(VMT_LOG_WARNING, r, g->conf.name, "no clock sync timer: %m");
}

static void sync_none(struct vmt_guest *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sync_none(struct vmt_guest *g, const char *fmt, ...)
{
	struct vmt_guest_sync *s = &g->sync;
	char why[sizeof(s->why)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (s->method != VMT_SYNC_NONE || strcmp(why, s->why))
		log_guest(VMT_LOG_NOTICE, 0, g->conf.name, "no clock sync: %s", why);
	s->method = VMT_SYNC_NONE;
	snprintf(s->why, sizeof(s->why), "%s", why);
	s->waiting = false;
	if (s->timer)
		sd_event_source_set_enabled(s->timer, SD_EVENT_OFF);
}

/* host.clock names the host's side whether or not the host is recorded:
 * offsets lead to that clock, and a host source records in it. */
static const char *host_clock(const struct vmt_guest *g)
{
	return g->env->conf->host.clock;
}

static void push_point(struct vmt_guest *g, const struct vmt_sync_point *p)
{
	struct vmt_guest_sync *s = &g->sync;

	if (!s->points) {
		s->points = calloc(VMT_SYNC_MAX_POINTS, sizeof(*s->points));
		if (!s->points)
			return;
	}
	/* a point older than the newest would break the order a merge needs
	 * (equal times: the vCPUs of one kvm-tsc round) */
	if (s->count && p->guest_ts < s->points[(s->head + s->count - 1) % VMT_SYNC_MAX_POINTS].guest_ts)
		return;
	if (s->count == VMT_SYNC_MAX_POINTS) {
		s->head = (s->head + 1) % VMT_SYNC_MAX_POINTS;
		s->count--;
	}
	s->points[(s->head + s->count++) % VMT_SYNC_MAX_POINTS] = *p;
}

/* ---- kvm-tsc: offsets KVM applies, read from its debugfs ------------------ */

static int read_s64(const char *path, int64_t *v)
{
	_cleanup_free_ char *t = NULL;
	size_t len;
	char *end;
	int r = read_file(path, 64, &t, &len);

	if (r < 0)
		return r;
	errno = 0;
	*v = strtoll(t, &end, 10);
	return errno || end == t ? -EINVAL : 0;
}

/* "<kvm_debugfs>/<pid>-<fd>": the VM of that QEMU process. */
static int kvm_vm_dir(const struct vmt_guest *g, pid_t pid, char *out, size_t n)
{
	const char *root = g->env->conf->sync.kvm_debugfs;
	char prefix[16];
	struct dirent *de;
	DIR *d = opendir(root);
	int r = -ENOENT;

	if (!d)
		return -errno;
	snprintf(prefix, sizeof(prefix), "%d-", (int)pid);
	while ((de = readdir(d)))
		if (!strncmp(de->d_name, prefix, strlen(prefix))) {
			r = snprintf(out, n, "%s/%s", root, de->d_name) < (int)n ? 0 : -ENAMETOOLONG;
			break;
		}
	closedir(d);
	return r;
}

/* One point per vCPU: guest TSC = host TSC + tsc-offset (ratio 1 only). */
static int kvm_points(struct vmt_guest *g)
{
	char dir[PATH_MAX], path[PATH_MAX + 64];
	uint64_t now = trace_clock_now(g->sync.host_src), at = 0;
	pid_t pid = guest_qemu_pid(g);
	uint32_t n = 0;
	int r;

	if (pid <= 0)
		return -ESRCH;
	r = kvm_vm_dir(g, pid, dir, sizeof(dir));
	if (r < 0)
		return r;
	for (; n < g->nrings; n++) {
		int64_t off, ratio, frac;

		snprintf(path, sizeof(path), "%s/vcpu%u/tsc-offset", dir, n);
		if (read_s64(path, &off) < 0)
			break;
		snprintf(path, sizeof(path), "%s/vcpu%u/tsc-scaling-ratio", dir, n);
		if (read_s64(path, &ratio) == 0) {
			snprintf(path, sizeof(path), "%s/vcpu%u/tsc-scaling-ratio-frac-bits", dir, n);
			if (read_s64(path, &frac) < 0 || frac < 0 || frac > 62 || ratio != (int64_t)1 << frac)
				return -ENOTSUP;	/* scaled TSC: leave it to the probes */
		}
		/* one guest time for the round (vCPU 0's), so the points stay in order */
		if (!n)
			at = now + (uint64_t)off;
		push_point(g, &(struct vmt_sync_point){ .guest_ts = at, .offset = -off, .cpu = n });
	}
	return n ? 0 : -ENOENT;
}

/* ---- ptp: probes over the control channel --------------------------------- */

static void send_probe(struct vmt_guest *g)
{
	struct vmt_guest_sync *s = &g->sync;
	struct vmt_sync p = { .id = ++s->probe_id };
	struct vmt_buf b = { 0 };

	if (g->env->conf->sync.markers) {
		char text[128];
		snprintf(text, sizeof(text), "vmtraced-sync %s %" PRIu64 "\n", g->conf.name, p.id);
		if (g->env->ev->host_mark)
			g->env->ev->host_mark(g->env->owner, text);
		p.flags |= VMT_SYNC_F_MARKER;
	}
	s->sent++;
	s->c.probes++;
	s->waiting = true;
	sync_arm(g, g->env->conf->sync.timeout_ms);
	if (proto_put_sync(&b, &p) == 0) {
		/* t1 as late as can be: the write is all that follows */
		s->t1 = trace_clock_now(s->host_src);
		guest_send(g, VMT_MSG_SYNC, b.data + VMT_PROTO_HDR_SIZE, (uint32_t)(b.len - VMT_PROTO_HDR_SIZE));
	}
	buf_free(&b);
}

static void end_round(struct vmt_guest *g)
{
	struct vmt_guest_sync *s = &g->sync;
	struct vmt_sync_point p;

	s->waiting = false;
	if (s->answered && clocksync_estimate(s->probes, s->answered, &p) == 0) {
		push_point(g, &p);
		s->c.rounds++;
		log_guest(VMT_LOG_DEBUG, 0, g->conf.name,
			  "clock sync: offset %" PRId64 " ns, round trip %" PRIu64 " ns (%u of %u probes)",
			  p.offset, p.rtt, p.probes, s->sent);
	} else {
		guest_complain(g, 0, "clock sync round without a usable answer (%u probes sent)", s->sent);
	}
	s->sent = s->answered = 0;
	if (g->env->conf->sync.interval_ms)
		sync_arm(g, g->env->conf->sync.interval_ms);
	else if (s->timer)
		sd_event_source_set_enabled(s->timer, SD_EVENT_OFF);
}

static void next_probe(struct vmt_guest *g)
{
	if (g->sync.sent < g->env->conf->sync.probes)
		send_probe(g);
	else
		end_round(g);
}

static int sync_timer_cb(sd_event_source *src, uint64_t usec, void *userdata)
{
	struct vmt_guest *g = userdata;
	struct vmt_guest_sync *s = &g->sync;

	if (g->state != GUEST_STREAMING || s->method == VMT_SYNC_NONE)
		return 0;
	if (s->method == VMT_SYNC_KVM) {
		if (kvm_points(g) == 0)
			s->c.rounds++;
		if (g->env->conf->sync.interval_ms)
			sync_arm(g, g->env->conf->sync.interval_ms);
		return 0;
	}
	if (s->waiting) {
		s->c.timeouts++;
		s->waiting = false;
	}
	next_probe(g);
	return 0;
}

void sync_stamp_rx(struct vmt_guest *g)
{
	if (g->sync.waiting)
		g->sync.rx_time = trace_clock_now(g->sync.host_src);
}

void sync_on_synced(struct vmt_guest *g, const struct vmt_msg *m)
{
	struct vmt_guest_sync *s = &g->sync;
	struct vmt_synced a;

	if (proto_get_synced(m->payload, m->len, &a) == 0 && (a.id & VMT_SYNC_ID_PING)) {
		alive_on_pong(g, a.id);
		return;
	}
	if (proto_get_synced(m->payload, m->len, &a) < 0 || !s->waiting || a.id != s->probe_id) {
		/* late (after its timeout), unasked or malformed */
		s->c.bad++;
		return;
	}
	if (a.status < 0) {
		sync_none(g, "the guest cannot read its trace clock '%s' from user space", g->aux.clock);
		return;
	}
	s->probes[s->answered++] = (struct vmt_sync_probe){ s->t1, a.t2, a.t3, s->rx_time };
	s->waiting = false;
	if (g->env->conf->sync.markers) {
		char text[128];
		snprintf(text, sizeof(text), "vmtraced-synced %s %" PRIu64 "\n", g->conf.name, a.id);
		if (g->env->ev->host_mark)
			g->env->ev->host_mark(g->env->owner, text);
	}
	next_probe(g);
}

void sync_session_start(struct vmt_guest *g)
{
	struct vmt_guest_sync *s = &g->sync;
	const char *hc = host_clock(g);

	s->waiting = false;
	s->sent = s->answered = 0;
	s->why[0] = 0;
	if (!guest_has_session(g))
		return;	/* the host is the reference */
	if (trace_clock_source(hc, &s->host_src) < 0) {
		sync_none(g, "the host's trace clock '%s' cannot be read from user space", hc);
		return;
	}
	if (trace_clock_source(g->aux.clock, &s->guest_src) < 0) {
		sync_none(g, "the guest's trace clock '%s' cannot be read from user space", g->aux.clock);
		return;
	}
	if (!strcmp(g->aux.clock, "x86-tsc") != !strcmp(hc, "x86-tsc")) {
		sync_none(g, "the guest's (%s) and the host's (%s) trace clocks tick differently",
			  g->aux.clock, hc);
		return;
	}
	if (!strcmp(hc, "x86-tsc") && kvm_points(g) == 0) {
		s->method = VMT_SYNC_KVM;
		log_guest(VMT_LOG_INFO, 0, g->conf.name, "clock sync from KVM's TSC offsets");
		if (g->env->conf->sync.interval_ms)
			sync_arm(g, g->env->conf->sync.interval_ms);
		return;
	}
	if (!(g->hello.flags & VMT_HELLO_SYNC)) {
		sync_none(g, "the agent (%s) does not answer SYNC", g->hello.agent);
		return;
	}
	s->method = VMT_SYNC_PTP;
	next_probe(g);
}

void sync_session_end(struct vmt_guest *g)
{
	g->sync.waiting = false;
	if (g->sync.timer)
		sd_event_source_set_enabled(g->sync.timer, SD_EVENT_OFF);
}

void sync_forget(struct vmt_guest *g)
{
	g->sync.head = g->sync.count = 0;
}

int sync_clock_info(struct vmt_guest *g, uint64_t first, uint64_t last, struct vmt_clock_info *out)
{
	struct vmt_guest_sync *s = &g->sync;
	uint32_t lo = 0, hi = s->count;	/* [lo, hi) of the ring, in order */
	struct vmt_source_desc d;
	pid_t pid;

	memset(out, 0, sizeof(*out));
	out->method = s->method;
	snprintf(out->why, sizeof(out->why), "%s", s->why);
	snprintf(out->guest_clock, sizeof(out->guest_clock), "%s", g->have_aux ? g->aux.clock : "");
	snprintf(out->host_clock, sizeof(out->host_clock), "%s", host_clock(g));
	guest_describe(g, &d);
	if (d.host_clock)
		snprintf(out->guest_clock, sizeof(out->guest_clock), "%s", out->host_clock);
	pid = d.qemu_pid;
	if (pid > 0) {
		out->qemu_pid = (uint32_t)pid;
		qemu_vcpu_threads(pid, out->vcpu_tid, VMT_MIN(g->nrings, (uint32_t)VMT_MAX_CPUS), &out->nvcpus);
	}
	if (!s->count)
		return 0;
#define PT(i) (&s->points[(s->head + (i)) % VMT_SYNC_MAX_POINTS])
	/* the last point at or before first, the first at or after last */
	while (lo + 1 < hi && PT(lo + 1)->guest_ts <= first)
		lo++;
	for (uint32_t i = lo; i < hi; i++)
		if (PT(i)->guest_ts >= last) {
			hi = i + 1;
			break;
		}
	/* points of one time (a kvm-tsc round's vCPUs) go together */
	while (lo > 0 && PT(lo - 1)->guest_ts == PT(lo)->guest_ts)
		lo--;
	while (hi < s->count && PT(hi)->guest_ts == PT(hi - 1)->guest_ts)
		hi++;
	out->points = malloc((hi - lo) * sizeof(*out->points));
	if (!out->points)
		return -ENOMEM;
	for (uint32_t i = lo; i < hi; i++)
		out->points[out->npoints++] = *PT(i);
#undef PT
	return 0;
}

int sync_points_save(const struct vmt_guest *g, struct vmt_buf *b)
{
	const struct vmt_guest_sync *s = &g->sync;

	for (uint32_t i = 0; i < s->count; i++) {
		int r = buf_append(b, &s->points[(s->head + i) % VMT_SYNC_MAX_POINTS],
				   sizeof(*s->points));
		if (r < 0)
			return r;
	}
	return (int)s->count;
}

void sync_points_restore(struct vmt_guest *g, const void *p, uint32_t n)
{
	struct vmt_sync_point pt;

	for (uint32_t i = 0; i < n; i++) {
		memcpy(&pt, (const uint8_t *)p + (size_t)i * sizeof(pt), sizeof(pt));
		push_point(g, &pt);
	}
}

void sync_free(struct vmt_guest *g)
{
	g->sync.timer = sd_event_source_disable_unref(g->sync.timer);
	free(g->sync.points);
	g->sync.points = NULL;
}
