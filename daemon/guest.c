/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "guest.h"
#include "hostsrc.h"
#include "log.h"
#include "manager.h"
#include "meta.h"
#include "page.h"

#define RETRY_USEC (2 * 1000000ull)	/* channels absent, or HELLO not answered */
#define FAILED_RETRY_USEC (30 * 1000000ull)
#define STARTING_TIMEOUT_USEC (60 * 1000000ull)
#define OUT_MAX 65536			/* control bytes queued for a guest that does not read */
#define READ_BUDGET_PAGES 64		/* per data callback, so one guest cannot starve others */
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

/* Complaints about guest input are rate-limited: a hostile guest must not
 * flood the journal. */
__attribute__((format(printf, 3, 4)))
static void guest_complain(struct vmt_guest *g, int err, const char *fmt, ...)
{
	uint64_t now = now_monotonic_ns();
	char msg[512];
	va_list ap;

	if (now > g->log_budget_ns) {
		if (g->log_burst > LOG_BURST)
			log_guest(VMT_LOG_WARNING, 0, g->conf.name, "%u more complaints suppressed",
				  g->log_burst - LOG_BURST);
		g->log_budget_ns = now + LOG_WINDOW_NS;
		g->log_burst = 0;
	}
	if (++g->log_burst > LOG_BURST)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (err)
		log_guest(VMT_LOG_WARNING, err, g->conf.name, "%s: %s", msg, strerror(err < 0 ? -err : err));
	else
		log_guest(VMT_LOG_WARNING, 0, g->conf.name, "%s", msg);
}

static void guest_set_state(struct vmt_guest *g, enum vmt_guest_state s)
{
	if (g->state != s)
		log_guest(VMT_LOG_DEBUG, 0, g->conf.name, "%s -> %s", guest_state_name(g->state),
			  guest_state_name(s));
	g->state = s;
	g->state_since_ns = now_monotonic_ns();
}

static int guest_timer_cb(sd_event_source *s, uint64_t usec, void *userdata);

static void guest_arm(struct vmt_guest *g, uint64_t usec)
{
	int r;

	if (g->timer) {
		sd_event_source_set_time_relative(g->timer, usec);
		sd_event_source_set_enabled(g->timer, SD_EVENT_ONESHOT);
		return;
	}
	r = sd_event_add_time_relative(g->m->event, &g->timer, CLOCK_MONOTONIC, usec, 100000,
				       guest_timer_cb, g);
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

static void guest_disconnect(struct vmt_guest *g, const char *why);

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

static void guest_send(struct vmt_guest *g, unsigned type, const void *p, uint32_t len)
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

static void guest_send_host_hello(struct vmt_guest *g)
{
	uint8_t p[8];

	put_le32(p, VMT_PROTO_VERSION);
	put_le32(p + 4, g->nonce);
	guest_send(g, VMT_MSG_HOST_HELLO, p, sizeof(p));
}

static void guest_send_start(struct vmt_guest *g)
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

static void guest_end_flush(struct vmt_guest *g)
{
	if (!g->flush_wait)
		return;
	g->flush_wait = false;
	g->flushed = false;
	manager_guest_flushed(g->m, g);
}

static void guest_disconnect(struct vmt_guest *g, const char *why)
{
	if (g->state != GUEST_OFFLINE)
		log_guest(VMT_LOG_NOTICE, 0, g->conf.name, "disconnected: %s", why);
	guest_close_channels(g);
	g->meta_open = false;
	buf_free(&g->meta);
	guest_set_state(g, GUEST_OFFLINE);
	guest_end_flush(g);
	guest_arm(g, RETRY_USEC);
}

/* How many trace-path-cpuN channels the folder holds. */
static uint32_t guest_count_cpus(const struct vmt_guest *g)
{
	uint32_t n = 0;
	enum vmt_transport t;

	while (n < VMT_MAX_CPUS) {
		char name[32];
		snprintf(name, sizeof(name), "trace-path-cpu%u", n);
		if (channel_probe(g->conf.path, name, &t) < 0)
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
	n = g->conf.cpus ? g->conf.cpus : guest_count_cpus(g);
	if (!n)
		return -ENOENT;
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
		r = sd_event_add_io(g->m->event, &g->ctl_src, g->ctl.rfd, EPOLLIN, guest_ctl_cb, g);
	for (uint32_t i = 0; r >= 0 && i < n; i++) {
		r = channel_open(&g->data[i]);
		if (r >= 0)
			r = sd_event_add_io(g->m->event, &g->data_src[i], g->data[i].rfd, EPOLLIN,
					    guest_data_cb, g);
	}
	if (r < 0)
		guest_close_channels(g);
	return r;
}

static void guest_drain_data(struct vmt_guest *g)
{
	for (uint32_t i = 0; i < g->nchan; i++)
		if (channel_is_open(&g->data[i]))
			g->c.stale_bytes += channel_drain(&g->data[i]);
}

void guest_connect(struct vmt_guest *g)
{
	int r;

	if (g->host || channel_is_open(&g->ctl))
		return;
	r = guest_open_channels(g);
	if (r < 0) {
		if (r != -ENOENT && r != -ECONNREFUSED)
			log_guest(VMT_LOG_DEBUG, r, g->conf.name, "channels not ready: %m");
		guest_arm(g, RETRY_USEC);
		return;
	}
	g->nonce = (uint32_t)(now_monotonic_ns() ^ (uintptr_t)g) | 1;
	log_guest(VMT_LOG_INFO, 0, g->conf.name, "channels open (%s, %u CPUs), waiting for the agent",
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

static void guest_fail(struct vmt_guest *g, const char *why)
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

static void guest_free_rings(struct vmt_guest *g)
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

static bool guest_rings_empty(const struct vmt_guest *g)
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
		g->nrings = i + 1;
	}
	if (r < 0) {
		guest_free_rings(g);
		return r;
	}
	log_guest(VMT_LOG_INFO, 0, g->conf.name, "rings: %u CPUs x %llu pages of %u bytes (%llu KiB)",
		  ncpus, (unsigned long long)pages, page_size,
		  (unsigned long long)(guest_mem(g) >> 10));
	return 0;
}

int guest_setup_rings(struct vmt_guest *g, uint32_t ncpus, uint32_t page_size)
{
	uint64_t pages = VMT_MAX(g->conf.rec.ring_size / page_size, 1);
	uint64_t need = ring_mem_size((uint32_t)VMT_MIN(pages, UINT32_MAX), page_size) * ncpus;
	uint64_t cap = g->m->conf.memory_max;
	int r;

	if (cap && g->m->mem_used + need > cap) {
		g->m->guests_refused++;
		log_guest(VMT_LOG_ERR, 0, g->conf.name,
			  "refused: rings of %llu KiB do not fit under memory_max (%llu of %llu KiB used)",
			  (unsigned long long)(need >> 10), (unsigned long long)(g->m->mem_used >> 10),
			  (unsigned long long)(cap >> 10));
		return -ENOSPC;
	}
	r = guest_alloc_rings(g, ncpus, page_size);
	if (r < 0)
		return r;
	g->m->mem_used += guest_mem(g);
	return 0;
}

/* ---- messages --------------------------------------------------------- */

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
		guest_fail(g, why);
		return;
	}
	if (g->nrings && (g->nrings != h.ncpus || g->layout.page_size != h.page_size)) {
		/* another machine shape: keep what the old rings hold, then start over */
		if (!guest_rings_empty(g) && g->have_aux) {
			struct vmt_trigger t = { .kind = VMT_TRIGGER_GUEST, .time_ns = now_realtime_ns() };
			snprintf(t.reason, sizeof(t.reason), "guest changed shape (%u -> %u CPUs)",
				 g->nrings, h.ncpus);
			manager_dump_guest_now(g->m, g, &t);
		}
		g->m->mem_used -= guest_mem(g);
		guest_free_rings(g);
		g->have_aux = false;
	}
	if (!g->nrings) {
		r = guest_setup_rings(g, h.ncpus, h.page_size);
		if (r == -ENOSPC) {
			guest_fail(g, "the rings do not fit under memory_max");
			return;
		}
		if (r < 0) {
			log_guest(VMT_LOG_ERR, r, g->conf.name, "cannot allocate rings: %m");
			guest_fail(g, "no memory for the rings");
			return;
		}
	}
	g->hello = h;
	g->have_hello = true;
	g->c.sessions++;
	log_guest(VMT_LOG_INFO, 0, g->conf.name, "agent %s, kernel %s, %u CPUs, clock %s",
		  h.agent, h.release, h.ncpus, h.clock);
	g->meta_open = false;
	buf_free(&g->meta);
	guest_set_state(g, GUEST_STARTING);
	guest_send_start(g);
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

static void guest_on_meta_begin(struct vmt_guest *g, const struct vmt_msg *msg)
{
	uint64_t total = get_le64(msg->payload);

	if (g->state != GUEST_STARTING) {
		g->c.msgs_unexpected++;
		return;
	}
	if (total > g->conf.rec.meta_max || total == 0) {
		char why[160];
		g->c.meta_rejected++;
		snprintf(why, sizeof(why), "metadata of %llu bytes refused (metadata_max %llu)",
			 (unsigned long long)total, (unsigned long long)g->conf.rec.meta_max);
		guest_fail(g, why);
		return;
	}
	buf_free(&g->meta);
	g->meta_total = total;
	g->meta_open = true;
}

static void guest_on_meta_data(struct vmt_guest *g, const struct vmt_msg *msg)
{
	if (!g->meta_open) {
		g->c.msgs_unexpected++;
		return;
	}
	if (msg->len > g->meta_total - g->meta.len) {
		g->c.meta_rejected++;
		guest_fail(g, "metadata larger than announced");
		return;
	}
	if (buf_append(&g->meta, msg->payload, msg->len) < 0)
		guest_fail(g, "no memory for metadata");
}

/* The bracketed entry of the bundle's trace_clock, else the HELLO's. */
static void bundle_clock(const struct vmt_guest *g, char *out, size_t n)
{
	struct vmt_meta_entry e;

	snprintf(out, n, "%s", g->hello.clock);
	if (meta_find(g->meta.data, g->meta.len, "trace_clock", &e) < 0)
		return;
	for (uint32_t i = 0; i < e.data_len; i++) {
		if (e.data[i] != '[')
			continue;
		uint32_t j = i + 1;
		while (j < e.data_len && e.data[j] != ']' && j - i < n)
			j++;
		if (j < e.data_len && e.data[j] == ']' && j - i - 1 < n) {
			bool ok = true;
			for (uint32_t k = i + 1; k < j; k++)
				ok &= (e.data[k] >= 'a' && e.data[k] <= 'z') || e.data[k] == '-' ||
				      (e.data[k] >= '0' && e.data[k] <= '9');
			if (ok && j > i + 1) {
				memcpy(out, e.data + i + 1, j - i - 1);
				out[j - i - 1] = 0;
			}
		}
		return;
	}
}

/* The version an aux of this id has on disk, or the next free one. */
uint32_t guest_aux_version(struct vmt_guest *g, uint64_t id, bool *exists)
{
	char dir[PATH_MAX + 80];
	uint32_t max = 0;
	struct dirent *de;
	DIR *d;

	*exists = false;
	if (g->have_aux)
		max = g->aux.version;
	snprintf(dir, sizeof(dir), "%s/%s", g->m->conf.state_dir, g->conf.name);
	d = opendir(dir);
	if (!d)
		return max + 1;
	while ((de = readdir(d))) {
		unsigned v;
		char path[PATH_MAX + 400], why[128];
		struct vmt_aux a;

		if (sscanf(de->d_name, "aux-%u.vmtaux", &v) != 1 || strlen(de->d_name) != 17)
			continue;
		if (v > max)
			max = v;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (aux_read(path, g->conf.rec.meta_max, &a, why, sizeof(why)) < 0)
			continue;
		if (a.id == id && !*exists) {
			*exists = true;
			max = a.version;
			aux_free(&a);
			break;
		}
		aux_free(&a);
	}
	closedir(d);
	return *exists ? max : max + 1;
}

static void guest_on_meta_end(struct vmt_guest *g, const struct vmt_msg *msg)
{
	uint32_t crc = get_le32(msg->payload);
	struct vmt_meta_entry hp;
	struct vmt_page_layout layout;
	struct vmt_aux a = { 0 };
	const char *why = NULL;
	bool exists;

	if (!g->meta_open) {
		g->c.msgs_unexpected++;
		return;
	}
	g->meta_open = false;
	if (g->meta.len != g->meta_total)
		why = "metadata shorter than announced";
	else if (crc32c(0, g->meta.data, g->meta.len) != crc)
		why = "metadata CRC mismatch";
	else if (meta_validate(g->meta.data, g->meta.len, &why) < 0)
		;
	else if (meta_find(g->meta.data, g->meta.len, "events/header_page", &hp) < 0 ||
		 page_layout_parse(&layout, (const char *)hp.data, hp.data_len, g->hello.page_size) < 0)
		why = "events/header_page does not describe a page we can read";
	if (why) {
		char m[200];
		g->c.meta_rejected++;
		snprintf(m, sizeof(m), "metadata refused: %s", why);
		guest_fail(g, m);
		return;
	}

	snprintf(a.guest, sizeof(a.guest), "%s", g->conf.name);
	a.ncpus = g->hello.ncpus;
	a.page_size = g->hello.page_size;
	snprintf(a.release, sizeof(a.release), "%s", g->hello.release);
	bundle_clock(g, a.clock, sizeof(a.clock));
	snprintf(a.boot_id, sizeof(a.boot_id), "%s", g->hello.boot_id);
	snprintf(a.agent, sizeof(a.agent), "%s", g->hello.agent);
	a.meta = g->meta.data;
	a.meta_len = g->meta.len;
	a.id = aux_compute_id(&a);
	a.created_ns = now_realtime_ns();

	if (!g->have_aux || a.id != g->aux.id) {
		/* the pages in the rings decode only with the old aux: keep them */
		if (g->have_aux && !guest_rings_empty(g)) {
			struct vmt_trigger t = { .kind = VMT_TRIGGER_GUEST, .time_ns = now_realtime_ns() };
			snprintf(t.reason, sizeof(t.reason),
				 "guest rebooted or changed its events (aux %u replaced)", g->aux.version);
			manager_dump_guest_now(g->m, g, &t);
		}
		for (uint32_t i = 0; i < g->nrings; i++)
			ring_clear(&g->rings[i]);
		a.version = guest_aux_version(g, a.id, &exists);
		aux_free(&g->aux);
		g->aux = a;
		g->have_aux = true;
		/* the writer takes the bundle; the guest keeps the description */
		g->meta = (struct vmt_buf){ 0 };
		if (!exists) {
			manager_submit_aux(g->m, g);
		} else {
			free(g->aux.meta);
		}
		g->aux.meta = NULL;
		g->aux.meta_len = 0;
		log_guest(VMT_LOG_INFO, 0, g->conf.name, "aux version %u (%s)", g->aux.version,
			  exists ? "already on disk" : "new");
	} else {
		buf_free(&g->meta);
	}
	g->layout = layout;
	for (uint32_t i = 0; i < g->nrings; i++) {
		g->rings[i].layout = layout;
		ring_reset_stream(&g->rings[i], 0);
		g->stream_base[i] = g->rings[i].next_seq;
	}
	/* whatever the data ports hold now predates this stream: the agent
	 * starts writing pages only when it gets STREAM */
	guest_drain_data(g);
	guest_set_state(g, GUEST_STREAMING);
	guest_send(g, VMT_MSG_STREAM, NULL, 0);
	if (g->timer)
		sd_event_source_set_enabled(g->timer, SD_EVENT_OFF);
	log_guest(VMT_LOG_INFO, 0, g->conf.name, "streaming");
}

/* Are the bytes the agent sent before its FLUSHED all here? */
static void guest_check_flushed(struct vmt_guest *g)
{
	if (!g->flush_wait || !g->have_target)
		return;
	for (uint32_t i = 0; i < g->nrings; i++)
		if (g->rings[i].next_seq < g->target_seq[i])
			return;
	g->flush_wait = false;
	g->flushed = true;
	manager_guest_flushed(g->m, g);
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
 * limit apply (manager_request_dump), and complaints are rate-limited. */
static void guest_on_trigger(struct vmt_guest *g, const struct vmt_msg *msg)
{
	struct vmt_trigger t = { .kind = VMT_TRIGGER_GUEST, .time_ns = now_realtime_ns() };
	char *names[1] = { g->conf.name };
	struct vmt_dump_req rq = { .names = names, .n = 1, .trigger = &t };
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
	r = manager_request_dump(g->m, &rq);
	if (r == -EBUSY)
		log_guest(VMT_LOG_DEBUG, 0, g->conf.name, "trigger suppressed: %s", t.reason);
	else if (r < 0)
		log_guest(VMT_LOG_ERR, r, g->conf.name, "cannot start a dump: %m");
	else
		log_guest(VMT_LOG_NOTICE, 0, g->conf.name, "asked for a dump: %s", text);
}

static void guest_dispatch(struct vmt_guest *g, const struct vmt_msg *msg)
{
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
	default:
		/* host->guest types coming from the guest */
		g->c.msgs_unexpected++;
		guest_complain(g, 0, "unexpected %s message ignored", proto_msg_name(msg->type));
		break;
	}
}

static int guest_ctl_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct vmt_guest *g = userdata;
	uint64_t rejected = g->rx->rejected_bytes;

	for (int rounds = 0; rounds < 16 && channel_is_open(&g->ctl); rounds++) {
		struct vmt_msg msg;
		size_t room;
		uint8_t *p = proto_rx_space(g->rx, &room);
		ssize_t n = read(fd, p, room);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				guest_disconnect(g, strerror(errno));
			break;
		}
		if (n == 0) {
			guest_disconnect(g, "control channel closed");
			break;
		}
		proto_rx_wrote(g->rx, (size_t)n);
		while (channel_is_open(&g->ctl) && proto_rx_next(g->rx, &msg) > 0)
			guest_dispatch(g, &msg);
	}
	if (g->rx->rejected_bytes != rejected)
		guest_complain(g, g->rx->last_error, "control channel: %llu bytes of garbage skipped",
			       (unsigned long long)(g->rx->rejected_bytes - rejected));
	return 0;
}

static int guest_data_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct vmt_guest *g = userdata;
	uint32_t cpu = 0;

	while (cpu < g->nchan && g->data_src[cpu] != s)
		cpu++;
	if (cpu == g->nchan)
		return 0;

	for (int i = 0; i < READ_BUDGET_PAGES; i++) {
		struct vmt_ring *r;
		uint8_t scratch[4096], *p;
		uint32_t room;
		ssize_t n;

		if (g->state != GUEST_STREAMING || cpu >= g->nrings) {
			/* no session: these bytes have no place in any stream */
			n = read(fd, scratch, sizeof(scratch));
			if (n > 0) {
				g->c.stale_bytes += (uint64_t)n;
				continue;
			}
		} else {
			r = &g->rings[cpu];
			p = ring_fill_space(r, &room);
			n = read(fd, p, room);
			if (n > 0) {
				int ok = ring_fill_commit(r, (uint32_t)n);
				if (ok == -EBADMSG)
					guest_complain(g, 0, "cpu%u: page %llu rejected (bad commit or event length)",
						       cpu, (unsigned long long)(r->next_seq - 1));
				continue;
			}
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0) {
			guest_disconnect(g, "data channel closed");
			return 0;
		}
		if (errno != EAGAIN) {
			guest_disconnect(g, strerror(errno));
			return 0;
		}
		break;
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
	if (g->host) {
		/* local: the pages are in the rings when this returns */
		hostsrc_flush(g->host);
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
		g->m->mem_used -= guest_mem(g);
		guest_free_rings(g);
		g->have_aux = false;
	}
	return true;
}

void guest_stop(struct vmt_guest *g)
{
	if (g->state == GUEST_STREAMING || g->state == GUEST_STARTING)
		guest_send(g, VMT_MSG_STOP, NULL, 0);
}

int guest_new(struct vmt_manager *m, const struct vmt_guest_conf *conf, struct vmt_guest **out)
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
	g->m = m;
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
	hostsrc_free(g->host);
	guest_close_channels(g);
	g->timer = sd_event_source_disable_unref(g->timer);
	g->m->mem_used -= guest_mem(g);
	guest_free_rings(g);
	free(g->data);
	free(g->data_src);
	buf_free(&g->out);
	buf_free(&g->meta);
	aux_free(&g->aux);
	free(g->rx);
	free(g);
}
