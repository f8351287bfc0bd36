/* SPDX-License-Identifier: MIT */
/*
 * guest-upgrade: one guest's session across an upgrade's execve
 * (upgrade.h). The old process writes what the session is (the agent's
 * HELLO, the page layout, the aux in force and the bundle it still holds,
 * each stream's base, the task tables, counters, the sessions bucket, the
 * QEMU pid it knew) and passes its channels and rings; the successor puts
 * it back as it was, STREAMING, sending the agent nothing that starts a
 * session, and checks that QEMU pid once its detectors are loaded. The
 * clock points go too (the first sample after the upgrade still relates
 * the window's older pages to the host's clock), and a new round of SYNC
 * probes starts (a probe is not a session to the agent).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "guest-int.h"
#include "log.h"
#include "persist.h"
#include "recover.h"
#include "upgrade.h"

/* A record: this, then u64 stream_base[nrings], the bundle, the task
 * tables, the clock points (struct vmt_sync_point[npoints]). */
struct upg_guest {
	uint32_t sizes[7];	/* of the structs copied as they are: a mismatch is refused */
	uint32_t nchan, nrings, nonce;
	uint32_t socket;	/* channels are sockets: one fd each, else FIFO pairs */
	uint32_t tasks_total;
	struct vmt_hello hello;
	struct vmt_page_layout layout;
	struct vmt_guest_counters c;
	struct vmt_bucket sessions;
	struct vmt_aux aux;	/* meta and sync.points not carried (NULL) */
	uint64_t aux_decode_id, hellos_waiting;
	uint64_t meta_len, tasks_len;
	uint32_t qemu_pid;	/* as the old process knew it: a death in the gap is noticed */
	uint32_t npoints;	/* clock points, oldest first */
	struct vmt_sync_counters sync_c;
};

static void sizes_of(uint32_t s[7])
{
	s[0] = sizeof(struct vmt_hello);
	s[1] = sizeof(struct vmt_page_layout);
	s[2] = sizeof(struct vmt_guest_counters);
	s[3] = sizeof(struct vmt_aux);
	s[4] = sizeof(struct upg_guest);
	s[5] = sizeof(struct vmt_sync_point);
	s[6] = sizeof(struct vmt_sync_counters);
}

bool guest_can_hand_over(const struct vmt_guest *g, char *why, size_t n)
{
	if (!guest_has_session(g) || g->state != GUEST_STREAMING)
		return true;	/* starts afresh: nothing of its session to keep */
	if (proto_rx_partial(g->rx) || g->ctl_partial_since)
		snprintf(why, n, "guest %s: a control message is being received", g->conf.name);
	else if (g->out.len)
		snprintf(why, n, "guest %s: control bytes not yet sent", g->conf.name);
	else if (g->flush_wait || g->meta_open || g->tasks_rx.len || g->aux_pending)
		snprintf(why, n, "guest %s: a flush, metadata or an aux file is in progress",
			 g->conf.name);
	else
		return true;
	return false;
}

static int add_channel(struct vmt_upgrade_out *o, const struct vmt_guest *g,
		       const struct vmt_channel *c, const char *port)
{
	int r;

	if (c->rfd == c->wfd)
		return upgrade_add_fd(o, c->rfd, "chan/%s/%s", g->conf.name, port);
	r = upgrade_add_fd(o, c->rfd, "chan/%s/%s/r", g->conf.name, port);
	return r < 0 ? r : upgrade_add_fd(o, c->wfd, "chan/%s/%s/w", g->conf.name, port);
}

static int save_session(struct vmt_guest *g, struct vmt_upgrade_out *o)
{
	struct upg_guest u = { .nchan = g->nchan, .nrings = g->nrings, .nonce = g->nonce,
			       .socket = g->ctl.rfd == g->ctl.wfd, .tasks_total = g->tasks_total,
			       .hello = g->hello, .layout = g->layout, .c = g->c,
			       .sessions = g->sessions, .aux = g->aux,
			       .aux_decode_id = g->aux_decode_id, .hellos_waiting = g->hellos_waiting,
			       .meta_len = g->aux.meta ? g->aux.meta_len : 0, .tasks_len = g->tasks.len,
			       .qemu_pid = (uint32_t)VMT_MAX(guest_qemu_pid(g), 0),
			       .sync_c = g->sync.c };
	struct vmt_buf rec = { 0 };
	char port[16];
	int r;

	sizes_of(u.sizes);
	u.aux.meta = NULL;
	u.aux.sync = (struct vmt_clock_info){ 0 };
	r = buf_append(&rec, &u, sizeof(u));
	if (r >= 0)
		r = buf_append(&rec, g->stream_base, g->nrings * sizeof(uint64_t));
	if (r >= 0 && u.meta_len)
		r = buf_append(&rec, g->aux.meta, u.meta_len);
	if (r >= 0 && u.tasks_len)
		r = buf_append(&rec, g->tasks.data, u.tasks_len);
	if (r >= 0)
		r = sync_points_save(g, &rec);
	if (r >= 0) {
		((struct upg_guest *)rec.data)->npoints = (uint32_t)r;
		r = upgrade_add_guest(o, g->conf.name, &rec);
	}
	buf_free(&rec);
	if (r >= 0)
		r = add_channel(o, g, &g->ctl, "ctl");
	for (uint32_t i = 0; r >= 0 && i < g->nchan; i++) {
		snprintf(port, sizeof(port), "%u", i);
		r = add_channel(o, g, &g->data[i], port);
	}
	return r;
}

int guest_hand_over(struct vmt_guest *g, struct vmt_upgrade_out *o)
{
	char name[VMT_PERSIST_FDNAME_MAX];
	int r = 0;

	if (!guest_has_session(g))
		return 0;	/* the host's own source starts afresh */
	/* every ring, streaming or not: one whose guest starts afresh may
	 * still be adopted when its session settles the same aux (recover.h) */
	for (uint32_t i = 0; r >= 0 && i < g->nrings; i++) {
		ring_publish(&g->rings[i]);
		r = persist_ring_name(name, sizeof(name), g->conf.name, i);
		if (r >= 0)
			r = upgrade_add_fd(o, persist_ring_fd(&g->rings[i]), "%s", name);
	}
	if (r >= 0 && g->state == GUEST_STREAMING && g->nrings && channel_is_open(&g->ctl))
		r = save_session(g, o);
	return r;
}

/* ---- the successor ------------------------------------------------------- */

/* A passed fd that is what a channel may be: a FIFO or a socket. */
static int chan_fd(struct vmt_upgrade_in *in, const char *guest, const char *port, const char *end,
		   bool sock)
{
	int fd = upgrade_take_fd(in, "chan/%s/%s%s", guest, port, end);
	struct stat st;

	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0 || !(sock ? S_ISSOCK(st.st_mode) : S_ISFIFO(st.st_mode))) {
		close(fd);
		return -EBADFD;
	}
	return fd;
}

static int take_channel(struct vmt_guest *g, struct vmt_upgrade_in *in, struct vmt_channel *c,
			const char *port, bool sock)
{
	char name[32];

	snprintf(name, sizeof(name), !strcmp(port, "ctl") ? "agent-ctl-path" : "trace-path-cpu%s", port);
	channel_init(c, g->conf.path, name, sock ? VMT_TRANSPORT_SOCKET : VMT_TRANSPORT_FIFO);
	c->rfd = chan_fd(in, g->conf.name, port, sock ? "" : "/r", sock);
	c->wfd = sock ? c->rfd : chan_fd(in, g->conf.name, port, "/w", sock);
	if (c->rfd < 0 || c->wfd < 0)
		return c->rfd < 0 ? c->rfd : c->wfd;
	if (sock) {	/* QEMU's pid, as channel_open() has it (guest_qemu_pid) */
		struct ucred cred;
		socklen_t cl = sizeof(cred);

		if (!getsockopt(c->rfd, SOL_SOCKET, SO_PEERCRED, &cred, &cl))
			c->peer_pid = cred.pid;
	}
	return 0;
}

static int take_channels(struct vmt_guest *g, struct vmt_upgrade_in *in, const struct upg_guest *u)
{
	char port[16];
	int r;

	g->data = calloc(u->nchan, sizeof(*g->data));
	g->data_src = calloc(u->nchan, sizeof(*g->data_src));
	if (!g->data || !g->data_src)
		return -ENOMEM;
	for (uint32_t i = 0; i < u->nchan; i++)
		g->data[i].rfd = g->data[i].wfd = -1;
	g->nchan = u->nchan;
	r = take_channel(g, in, &g->ctl, "ctl", u->socket);
	for (uint32_t i = 0; r >= 0 && i < u->nchan; i++) {
		snprintf(port, sizeof(port), "%u", i);
		r = take_channel(g, in, &g->data[i], port, u->socket);
	}
	return r;
}

/* The record's fixed part, checked against what this build would write. */
static int parse_record(const uint8_t *p, size_t n, struct upg_guest *u, char *why, size_t wn)
{
	uint32_t s[7];

	sizes_of(s);
	if (n < sizeof(*u)) {
		snprintf(why, wn, "its record is short");
		return -EBADMSG;
	}
	memcpy(u, p, sizeof(*u));
	if (memcmp(s, u->sizes, sizeof(s))) {
		snprintf(why, wn, "its record's structures have other sizes");
		return -EPROTO;
	}
	if (!u->nrings || u->nrings > u->nchan || u->nchan > VMT_MAX_CPUS ||
	    u->hello.ncpus != u->nrings || !u->hello.page_size || u->npoints > VMT_SYNC_MAX_POINTS ||
	    n != sizeof(*u) + u->nrings * 8ull + u->meta_len + u->tasks_len +
			 u->npoints * (uint64_t)sizeof(struct vmt_sync_point)) {
		snprintf(why, wn, "its record does not add up");
		return -EBADMSG;
	}
	return 0;
}

/* What the record says, into g: the session as the old process had it. */
static int restore(struct vmt_guest *g, const struct upg_guest *u, const uint8_t *p)
{
	const uint8_t *meta = p + sizeof(*u) + u->nrings * 8ull, *tasks = meta + u->meta_len;

	g->hello = u->hello;
	g->have_hello = true;
	g->nonce = u->nonce;
	g->c = u->c;
	g->sessions = u->sessions;
	g->hellos_waiting = u->hellos_waiting;
	g->aux = u->aux;
	g->aux.meta = NULL;
	g->aux.meta_len = 0;
	g->aux.sync = (struct vmt_clock_info){ 0 };
	if (u->meta_len && !(g->aux.meta = malloc(u->meta_len)))
		return -ENOMEM;
	if (u->meta_len) {
		memcpy(g->aux.meta, meta, u->meta_len);
		g->aux.meta_len = u->meta_len;
	}
	g->have_aux = true;
	g->aux_decode_id = u->aux_decode_id;
	g->tasks_total = u->tasks_total;
	g->qemu_handed = (pid_t)u->qemu_pid;
	if (u->tasks_len && buf_append(&g->tasks, tasks, u->tasks_len) < 0)
		return -ENOMEM;
	sync_points_restore(g, tasks + u->tasks_len, u->npoints);
	g->sync.c = u->sync_c;
	return 0;
}

static int adopt(struct vmt_guest *g, struct vmt_upgrade_in *in, const uint8_t *p, size_t n,
		 char *why, size_t wn)
{
	struct upg_guest u;
	int r = parse_record(p, n, &u, why, wn);

	if (r < 0)
		return r;
	r = take_channels(g, in, &u);
	if (r < 0) {
		snprintf(why, wn, "its channels were not handed over as they were (%s)", strerror(-r));
		return r;
	}
	/* the aux and layout first: the rings handed over are checked against
	 * them, and taken in place of fresh ones (no second set of rings made
	 * and pre-faulted, most of a hand-over's time otherwise) */
	r = restore(g, &u, p);
	if (r < 0) {
		snprintf(why, wn, "%s", strerror(-r));
		return r;
	}
	g->layout = u.layout;
	r = guest_setup_rings_handed(g, u.nrings, u.hello.page_size, why, wn);
	if (r < 0) {
		if (!why[0])
			snprintf(why, wn, "%s", strerror(-r));
		return r;
	}
	memcpy(g->stream_base, p + sizeof(u), u.nrings * 8ull);
	guest_describe_rings(g);
	r = guest_watch_channels(g);
	if (r < 0)
		snprintf(why, wn, "cannot watch its channels: %s", strerror(-r));
	return r;
}

/* The first page read after a take-over: with the "handing over" line's
 * stamp, what the hand-over cost this guest's reading (bench/upgrade.c). */
void guest_first_read_taken_over(struct vmt_guest *g)
{
	uint64_t now = now_monotonic_ns();

	log_guest(VMT_LOG_NOTICE, 0, g->conf.name, "first read after the hand-over at %llu ns "
		  "monotonic, %.3f ms after the take-over", (unsigned long long)now,
		  (double)(now - g->taken_over_ns) / 1e6);
	g->taken_over_ns = 0;
}

/* Back to what guest_new() made: it connects afresh; the window it adopted stays. */
static void undo(struct vmt_guest *g)
{
	guest_close_channels(g);
	g->have_hello = false;
	if (!guest_rings_empty(g))
		return;
	mem_give_rings(g->env->mem, guest_mem(g));
	guest_free_rings(g);
	guest_drop_aux(g);
}

int guest_adopt_session(struct vmt_guest *g, struct vmt_upgrade_in *in)
{
	const uint8_t *p;
	char why[320];
	size_t n;
	int r;

	if (!guest_has_session(g) || !in->state)
		return -ENOENT;
	r = upgrade_record(in, g->conf.name, &p, &n, why, sizeof(why));
	if (r == -ENOENT)
		return r;
	if (r >= 0)
		r = adopt(g, in, p, n, why, sizeof(why));
	if (r < 0) {
		in->refused++;
		log_guest(VMT_LOG_WARNING, 0, g->conf.name, "session not taken over from the previous "
			  "vmtraced, starting afresh: %s", why);
		undo(g);
		return r;
	}
	in->adopted++;
	g->taken_over_ns = now_monotonic_ns();
	guest_set_state(g, GUEST_STREAMING);
	guest_settle_meta(g);
	log_guest(VMT_LOG_NOTICE, 0, g->conf.name, "session taken over from the previous vmtraced "
		  "(%u CPUs, aux %u): streaming on", g->nrings, g->aux.version);
	sync_session_start(g);
	return 0;
}
