/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <systemd/sd-daemon.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "control.h"
#include "ctlproto.h"
#include "guest.h"
#include "log.h"
#include "manager.h"
#include "probe.h"
#include "sindex.h"
#include "vfile.h"

#define MAX_CLIENTS 256
#define ROOT_SLOTS 32		/* of MAX_CLIENTS, only root may take */
#define PER_UID_CLIENTS 16	/* connections one other uid may hold */
#define MAX_DUMP_GUESTS 64
/* Group look-ups (NSS: files, or LDAP, slow) are cached per uid. */
#define ACCESS_CACHE 64
#define ACCESS_TTL_NS (10 * 1000000000ull)

enum vmt_access { ACCESS_NONE, ACCESS_READ, ACCESS_FULL };

struct vmt_client {
	struct vmt_control *ctl;
	int fd;
	uid_t uid;
	pid_t pid;
	enum vmt_access access;
	bool busy;		/* refused: its user holds too many connections */
	unsigned waiting;	/* dump requests not answered yet */
	sd_event_source *expire;	/* a refused peer soon, an idle one after control.idle_timeout */
	sd_event_source *src;
	struct vmt_client *next;
};

struct vmt_control {
	struct vmt_manager *m;
	int fd;
	char path[108];
	sd_event_source *src;
	struct vmt_client *clients;
	unsigned nclients;
	bool activated;
	uint64_t refused;
	uint64_t bad_requests;
	uint64_t busy_log_until_ns;	/* "too many connections" is said once a minute */
	struct {
		uid_t uid;
		gid_t gid;
		enum vmt_access access;
		uint64_t until_ns;
	} cache[ACCESS_CACHE];
	unsigned cache_next;
};

/* control.idle_timeout: a client that asks nothing and waits for no dump
 * is hung up on after it. */
static uint64_t idle_usec(const struct vmt_control *c)
{
	return (uint64_t)c->m->conf.control.idle_timeout_ms * 1000;
}

static void client_free(struct vmt_client *cl)
{
	struct vmt_control *c = cl->ctl;
	struct vmt_client **pp;

	manager_forget_client(c->m, cl);
	for (pp = &c->clients; *pp; pp = &(*pp)->next)
		if (*pp == cl) {
			*pp = cl->next;
			break;
		}
	/* a slot is free: take the connections waiting in the backlog again */
	if (c->nclients-- == MAX_CLIENTS && c->src)
		sd_event_source_set_enabled(c->src, SD_EVENT_ON);
	sd_event_source_disable_unref(cl->src);
	sd_event_source_disable_unref(cl->expire);
	close(cl->fd);
	free(cl);
}

/* A refused peer that sends nothing must not hold a client slot, nor may
 * a client that asks nothing: one waiting for a dump's answer is not idle. */
static int client_expire_cb(sd_event_source *s, uint64_t usec, void *userdata)
{
	struct vmt_client *cl = userdata;

	if (cl->access != ACCESS_NONE && cl->waiting) {
		sd_event_source_set_time_relative(s, idle_usec(cl->ctl));
		sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
		return 0;
	}
	client_free(cl);
	return 0;
}

static void client_send(struct vmt_client *cl, struct vmt_buf *b)
{
	if (ctl_msg_end(b) < 0)
		return;
	/* a client that does not read its answers loses them, not the daemon */
	if (send(cl->fd, b->data, b->len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		log_debug("control: answer to pid %d lost: %s", cl->pid, strerror(errno));
}

static void client_error(struct vmt_client *cl, uint32_t id, int err, const char *msg)
{
	struct vmt_buf b = { 0 };

	ctl_msg_begin(&b, VMT_CTL_ERROR, id);
	tlv_put_u32(&b, VMT_CTAG_ERRNO, (uint32_t)(err < 0 ? -err : err));
	tlv_put_str(&b, VMT_CTAG_MESSAGE, msg);
	client_send(cl, &b);
	buf_free(&b);
}

static void client_end(struct vmt_client *cl, uint32_t id)
{
	struct vmt_buf b = { 0 };

	ctl_msg_begin(&b, VMT_CTL_END, id);
	client_send(cl, &b);
	buf_free(&b);
}

static void put_guest(struct vmt_buf *b, const struct vmt_guest *g)
{
	uint64_t now = now_monotonic_ns();
	uint64_t pages = 0, cap = 0, in = 0, ow = 0, lost = 0, rej = 0, bytes = 0, ev = 0, prej = 0;
	uint64_t elost = 0, back = 0;

	for (uint32_t i = 0; i < g->nrings; i++) {
		const struct vmt_ring *r = &g->rings[i];
		pages += r->count;
		cap += r->nr_pages;
		in += r->c.pages_in;
		ow += r->c.pages_overwritten;
		lost += r->c.pages_guest_lost;
		elost += r->c.events_guest_lost;
		rej += r->c.bytes_rejected;
		prej += r->c.pages_rejected;
		bytes += r->c.bytes_in;
		ev += r->c.events_in;
		back += r->c.ts_backwards;
	}
	tlv_put_str(b, VMT_CTAG_GUEST, g->conf.name);
	tlv_put_str(b, VMT_CTAG_STATE, guest_state_name(g->state));
	tlv_put_u64(b, VMT_CTAG_UPTIME_NS, now - g->state_since_ns);
	tlv_put_u32(b, VMT_CTAG_NCPUS, g->nrings);
	if (g->have_hello)
		tlv_put_str(b, VMT_CTAG_RELEASE, g->hello.release);
	if (g->have_aux)
		tlv_put_u32(b, VMT_CTAG_AUX_VERSION, g->aux.version);
	tlv_put_u64(b, VMT_CTAG_PAGES, pages);
	tlv_put_u64(b, VMT_CTAG_CAPACITY, cap);
	tlv_put_u64(b, VMT_CTAG_MEM_USED, guest_mem(g));
	tlv_put_u64(b, VMT_CTAG_BYTES_IN, bytes);
	tlv_put_u64(b, VMT_CTAG_PAGES_IN, in);
	tlv_put_u64(b, VMT_CTAG_EVENTS_IN, ev);
	tlv_put_u64(b, VMT_CTAG_PAGES_OVERWRITTEN, ow);
	tlv_put_u64(b, VMT_CTAG_PAGES_GUEST_LOST, lost);
	tlv_put_u64(b, VMT_CTAG_EVENTS_GUEST_LOST, elost);
	tlv_put_u64(b, VMT_CTAG_PAGES_REJECTED, prej);
	tlv_put_u64(b, VMT_CTAG_BYTES_REJECTED, rej + g->c.stale_bytes);
	tlv_put_u64(b, VMT_CTAG_CTL_REJECTED, guest_ctl_rejected_bytes(g));
	tlv_put_u64(b, VMT_CTAG_TS_BACKWARDS, back);
	/* the window: from the oldest page held to the newest, over all CPUs */
	if (pages) {
		uint64_t first = UINT64_MAX, last = 0;
		for (uint32_t i = 0; i < g->nrings; i++) {
			const struct vmt_ring *r = &g->rings[i];
			if (!r->count)
				continue;
			first = VMT_MIN(first, ring_slot(r, 0)->first_ts);
			last = VMT_MAX(last, ring_slot(r, r->count - 1)->last_ts);
		}
		tlv_put_u64(b, VMT_CTAG_FIRST_TS, first);
		tlv_put_u64(b, VMT_CTAG_LAST_TS, last);
	}
	if (g->last_dump[0])
		tlv_put_str(b, VMT_CTAG_LAST_DUMP, g->last_dump);
	tlv_put_u64(b, VMT_CTAG_STALE_BYTES, g->c.stale_bytes);
	tlv_put_u64(b, VMT_CTAG_FLUSH_TIMEOUTS, g->c.flush_timeouts);
	tlv_put_u64(b, VMT_CTAG_SESSIONS, g->c.sessions);
	tlv_put_u64(b, VMT_CTAG_META_REJECTED, g->c.meta_rejected);
	tlv_put_u64(b, VMT_CTAG_TRIGGERS_SUPPRESSED, g->c.triggers_suppressed);
	tlv_put_u64(b, VMT_CTAG_MSGS_UNEXPECTED, g->c.msgs_unexpected);
	tlv_put_u64(b, VMT_CTAG_FLUSH_BAD, g->c.flush_bad);
	tlv_put_u64(b, VMT_CTAG_AGENT_ERRORS, g->c.errors_from_agent);
	tlv_put_u64(b, VMT_CTAG_READ_PAUSES, g->c.read_pauses);
	tlv_put_u64(b, VMT_CTAG_PATHS_REFUSED, g->c.paths_refused);
	tlv_put_u64(b, VMT_CTAG_PAGES_DISCARDED, g->c.pages_discarded);
	tlv_put_u64(b, VMT_CTAG_HELLOS_DEFERRED, g->c.hellos_deferred);
	tlv_put_u32(b, VMT_CTAG_FLAGS, g->discovered ? 1 : 0);
}

static void handle_status(struct vmt_client *cl, uint32_t id, bool with_daemon)
{
	struct vmt_manager *m = cl->ctl->m;
	struct vmt_buf b = { 0 };

	if (with_daemon) {
		ctl_msg_begin(&b, VMT_CTL_DAEMON, id);
		tlv_put_str(&b, VMT_CTAG_VERSION, VMT_VERSION);
		tlv_put_u64(&b, VMT_CTAG_UPTIME_NS, now_monotonic_ns() - m->start_ns);
		tlv_put_u64(&b, VMT_CTAG_MEM_USED, mem_used(&m->mem));
		tlv_put_u64(&b, VMT_CTAG_DUMPS, m->dumps);
		tlv_put_u64(&b, VMT_CTAG_DUMP_ERRORS, m->dump_errors);
		tlv_put_str(&b, VMT_CTAG_PATH, m->conf.state_dir);
		tlv_put_u64(&b, VMT_CTAG_MEM_CAP, m->conf.memory_max);
		tlv_put_u64(&b, VMT_CTAG_RESERVE, m->mem.reserve.bytes);
		tlv_put_u64(&b, VMT_CTAG_RESERVE_USED, m->mem.reserve.in_use);
		tlv_put_u64(&b, VMT_CTAG_RESERVE_PEAK, m->mem.reserve.peak);
		tlv_put_u64(&b, VMT_CTAG_TRIGGERS, m->triggers_total);
		tlv_put_u64(&b, VMT_CTAG_TRIGGERS_SUPPRESSED, m->triggers_suppressed);
		tlv_put_u64(&b, VMT_CTAG_REFUSED, cl->ctl->refused + cl->ctl->bad_requests);
		tlv_put_u64(&b, VMT_CTAG_GUESTS_REFUSED, m->mem.rings_refused);
		client_send(cl, &b);
	}
	for (uint32_t i = 0; i < m->nguests; i++) {
		ctl_msg_begin(&b, VMT_CTL_GUEST, id);
		put_guest(&b, m->guests[i]);
		client_send(cl, &b);
	}
	if (with_daemon) {
		struct vmt_probe_status st;

		probe_status(m->probe, &st);
		for (int k = 0; k < VMT_CONFIG_DETECTORS; k++) {
			const struct vmt_probe_detector *d = &st.det[k];

			ctl_msg_begin(&b, VMT_CTL_DETECTOR, id);
			tlv_put_str(&b, VMT_CTAG_NAME, d->name);
			tlv_put_u32(&b, VMT_CTAG_ENABLED, d->enabled);
			tlv_put_u32(&b, VMT_CTAG_LOADED, d->loaded);
			if (!d->loaded)
				tlv_put_str(&b, VMT_CTAG_MESSAGE, !st.built ? "built without BPF" :
						  !d->enabled ? "disabled in the configuration" : d->reason);
			tlv_put_u64(&b, VMT_CTAG_EVENTS, d->events);
			tlv_put_u64(&b, VMT_CTAG_SEEN, d->seen);
			tlv_put_u64(&b, VMT_CTAG_FIRED, d->fired);
			tlv_put_u64(&b, VMT_CTAG_TRIGGERS_SUPPRESSED, d->suppressed);
			tlv_put_u64(&b, VMT_CTAG_DROPPED, d->dropped);
			client_send(cl, &b);
		}
	}
	buf_free(&b);
	client_end(cl, id);
}

static void handle_dump(struct vmt_client *cl, uint32_t id, const uint8_t *p, uint32_t len)
{
	struct vmt_trigger t = { .kind = VMT_TRIGGER_CONTROL, .pid = (uint32_t)cl->pid,
				 .time_ns = now_realtime_ns() };
	char names[MAX_DUMP_GUESTS][VMT_NAME_MAX];
	char *ptrs[MAX_DUMP_GUESTS];
	struct vmt_dump_req rq = { 0 };
	uint32_t n = 0;
	struct vmt_tlv tv;
	size_t pos = 0;
	int r;

	snprintf(t.reason, sizeof(t.reason), "vmtracectl dump (pid %d)", cl->pid);
	while (tlv_next(p, len, &pos, &tv) > 0) {
		if (tv.tag == VMT_CTAG_GUEST) {
			if (n == MAX_DUMP_GUESTS) {
				client_error(cl, id, E2BIG, "too many guests in one request");
				return;
			}
			if (tlv_str(&tv, names[n], sizeof(names[n])) < 0 || !name_is_valid(names[n])) {
				client_error(cl, id, EINVAL, "invalid guest name");
				return;
			}
			ptrs[n] = names[n];
			n++;
		} else if (tv.tag == VMT_CTAG_WINDOW_NS) {
			if (tlv_u64(&tv, &rq.window_ns) < 0) {
				client_error(cl, id, EINVAL, "invalid window");
				return;
			}
		} else if (tv.tag == VMT_CTAG_POST_NS) {
			if (tlv_u64(&tv, &rq.post_ns) < 0 || rq.post_ns > 3600 * 1000000000ull) {
				client_error(cl, id, EINVAL, "invalid --post (at most an hour)");
				return;
			}
		} else if (tv.tag == VMT_CTAG_REASON) {
			char reason[VMT_REASON_MAX - 40];
			if (tlv_str(&tv, reason, sizeof(reason)) < 0) {
				client_error(cl, id, EINVAL, "invalid reason");
				return;
			}
			snprintf(t.reason, sizeof(t.reason), "%s (vmtracectl, pid %d)", reason, cl->pid);
		}
	}
	rq.names = ptrs;
	rq.n = n;
	rq.trigger = &t;
	rq.client = cl;
	rq.request_id = id;
	r = manager_request_dump(cl->ctl->m, &rq);
	if (r == 0)
		cl->waiting++;
	if (r == -ENOENT)
		client_error(cl, id, ENOENT, "no such guest");
	else if (r == -EBUSY)
		client_error(cl, id, EBUSY, "suppressed by the cooldown or the rate limit");
	else if (r < 0)
		client_error(cl, id, -r, strerror(-r));
}

/* From the index the writer keeps (sindex.h): no file is opened here, in
 * the loop, whatever a read-only client asks and however many samples. */
static void handle_samples(struct vmt_client *cl, uint32_t id, const uint8_t *p, uint32_t len)
{
	const struct vmt_sindex *ix = &cl->ctl->m->samples;
	char guest[VMT_NAME_MAX] = "";
	struct vmt_buf b = { 0 };
	struct vmt_tlv tv;
	size_t pos = 0;

	while (tlv_next(p, len, &pos, &tv) > 0)
		if (tv.tag == VMT_CTAG_GUEST && (tlv_str(&tv, guest, sizeof(guest)) < 0 || !name_is_valid(guest))) {
			client_error(cl, id, EINVAL, "invalid guest name");
			return;
		}
	if (!ix->built && ix->error < 0) {
		client_error(cl, id, -ix->error, strerror(-ix->error));
		return;
	}
	/* newest first */
	for (size_t i = ix->n; i-- > 0;) {
		const struct vmt_sindex_entry *sm = &ix->v[i];

		if (guest[0] && strcmp(guest, sm->guest))
			continue;
		ctl_msg_begin(&b, VMT_CTL_FILE, id);
		tlv_put_str(&b, VMT_CTAG_PATH, sm->path);
		tlv_put_str(&b, VMT_CTAG_GUEST, sm->guest);
		tlv_put_u64(&b, VMT_CTAG_CREATED_NS, sm->created_ns);
		tlv_put_u64(&b, VMT_CTAG_BYTES, sm->bytes);
		if (!sm->info_error) {
			tlv_put_u32(&b, VMT_CTAG_AUX_VERSION, sm->aux_version);
			if (sm->text)
				tlv_put_str(&b, VMT_CTAG_REASON, sm->text);
		} else {
			tlv_put_str(&b, VMT_CTAG_MESSAGE, sm->text ? sm->text : "");
		}
		if (b.len > VMT_CTL_MAX_MSG - 64)
			continue;
		client_send(cl, &b);
	}
	buf_free(&b);
	client_end(cl, id);
}

void control_answer_dump(struct vmt_control *c, struct vmt_client *cl, uint32_t id,
			 char *const *files, uint32_t nfiles, int error)
{
	struct vmt_buf b = { 0 };

	if (cl->waiting)
		cl->waiting--;
	if (!nfiles && error < 0) {
		client_error(cl, id, error, strerror(-error));
		return;
	}
	for (uint32_t i = 0; i < nfiles; i++) {
		ctl_msg_begin(&b, VMT_CTL_FILE, id);
		tlv_put_str(&b, VMT_CTAG_PATH, files[i]);
		client_send(cl, &b);
	}
	buf_free(&b);
	if (error < 0)
		client_error(cl, id, error, "some samples could not be written");
	else
		client_end(cl, id);
}

static int client_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct vmt_client *cl = userdata;
	uint8_t buf[VMT_CTL_MAX_MSG];
	const uint8_t *payload;
	uint32_t id = 0, plen;
	unsigned type;
	ssize_t n;

	n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0) {
		client_free(cl);
		return 0;
	}
	if ((size_t)n > sizeof(buf)) {
		cl->ctl->bad_requests++;
		client_error(cl, 0, EMSGSIZE, "request too large");
		return 0;
	}
	if (ctl_msg_parse(buf, (size_t)n, &type, &id, &payload, &plen) < 0) {
		cl->ctl->bad_requests++;
		client_error(cl, 0, EBADMSG, "malformed request");
		return 0;
	}
	if (cl->access == ACCESS_NONE) {
		client_error(cl, id, cl->busy ? EBUSY : EACCES,
			     cl->busy ? "too many connections of this user: close some"
				      : "permission denied: vmtraced answers root and the "
					"members of its control groups only");
		client_free(cl);
		return 0;
	}
	sd_event_source_set_time_relative(cl->expire, idle_usec(cl->ctl));
	sd_event_source_set_enabled(cl->expire, SD_EVENT_ONESHOT);
	if (cl->access != ACCESS_FULL && type != VMT_CTL_STATUS && type != VMT_CTL_GUESTS &&
	    type != VMT_CTL_SAMPLES) {
		cl->ctl->refused++;
		client_error(cl, id, EACCES, "permission denied: this command needs root or the "
					     "control group");
		return 0;
	}
	switch (type) {
	case VMT_CTL_STATUS:
		handle_status(cl, id, true);
		break;
	case VMT_CTL_GUESTS:
		handle_status(cl, id, false);
		break;
	case VMT_CTL_DUMP:
		handle_dump(cl, id, payload, plen);
		break;
	case VMT_CTL_SAMPLES:
		handle_samples(cl, id, payload, plen);
		break;
	case VMT_CTL_RELOAD: {
		char err[1024];
		if (manager_reload(cl->ctl->m, err, sizeof(err)) < 0)
			client_error(cl, id, EINVAL, err);
		else
			client_end(cl, id);
		break;
	}
	default:
		cl->ctl->bad_requests++;
		client_error(cl, id, EOPNOTSUPP, "not a request");
		break;
	}
	return 0;
}

static bool in_group(const char *group, uid_t uid, gid_t gid)
{
	gid_t groups[256];
	int ng = 256;
	struct group *gr;
	struct passwd *pw;

	if (!group[0] || !(gr = getgrnam(group)))
		return false;
	if (gid == gr->gr_gid)
		return true;
	pw = getpwuid(uid);
	if (!pw || getgrouplist(pw->pw_name, pw->pw_gid, groups, &ng) < 0)
		return false;
	for (int i = 0; i < ng; i++)
		if (groups[i] == gr->gr_gid)
			return true;
	return false;
}

/* Root and the daemon's own user may do everything; then the groups of the
 * configuration, looked up at most every ACCESS_TTL_NS per uid (a look-up
 * may go to a slow directory service, in the loop), and anew after a reload. */
static enum vmt_access peer_access(struct vmt_control *c, const struct ucred *cr)
{
	const struct vmt_config *conf = &c->m->conf;
	uint64_t now = now_monotonic_ns();
	enum vmt_access a;

	if (cr->uid == 0 || cr->uid == geteuid())
		return ACCESS_FULL;
	for (unsigned i = 0; i < ACCESS_CACHE; i++)
		if (c->cache[i].until_ns > now && c->cache[i].uid == cr->uid &&
		    c->cache[i].gid == cr->gid)
			return c->cache[i].access;
	if (in_group(conf->control.group, cr->uid, cr->gid))
		a = ACCESS_FULL;
	else if (in_group(conf->control.read_group, cr->uid, cr->gid))
		a = ACCESS_READ;
	else
		a = ACCESS_NONE;
	c->cache[c->cache_next].uid = cr->uid;
	c->cache[c->cache_next].gid = cr->gid;
	c->cache[c->cache_next].access = a;
	c->cache[c->cache_next].until_ns = now + ACCESS_TTL_NS;
	c->cache_next = (c->cache_next + 1) % ACCESS_CACHE;
	return a;
}

void control_forget_access(struct vmt_control *c)
{
	if (c)
		memset(c->cache, 0, sizeof(c->cache));
}

/* Connections this uid holds now. */
static unsigned clients_of(const struct vmt_control *c, uid_t uid)
{
	unsigned n = 0;

	for (const struct vmt_client *cl = c->clients; cl; cl = cl->next)
		n += cl->uid == uid;
	return n;
}

static int accept_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct vmt_control *c = userdata;
	struct ucred cred;
	socklen_t cl_len = sizeof(cred);
	struct vmt_client *cl;
	int cfd, r;

	/* every slot taken: leave newcomers in the listen backlog until one
	 * frees (client_free), rather than hang up on them unanswered */
	if (c->nclients >= MAX_CLIENTS) {
		sd_event_source_set_enabled(s, SD_EVENT_OFF);
		return 0;
	}
	cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (cfd < 0)
		return 0;
	if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cred, &cl_len) < 0) {
		close(cfd);
		return 0;
	}
	cl = calloc(1, sizeof(*cl));
	if (!cl) {
		close(cfd);
		return 0;
	}
	cl->ctl = c;
	cl->fd = cfd;
	cl->uid = cred.uid;
	cl->pid = cred.pid;
	/* the last slots are root's, and no other user holds more than its share:
	 * no one can keep root's status waiting by holding connections */
	if (cred.uid != 0 &&
	    (c->nclients >= MAX_CLIENTS - ROOT_SLOTS || clients_of(c, cred.uid) >= PER_UID_CLIENTS)) {
		uint64_t now = now_monotonic_ns();

		cl->access = ACCESS_NONE;
		cl->busy = true;
		c->refused++;
		if (now >= c->busy_log_until_ns) {
			log_warning("control: refused uid %u (pid %d): too many connections (%u of "
				    "this user, %u in all; more refused within a minute are not said)",
				    cred.uid, cred.pid, clients_of(c, cred.uid), c->nclients);
			c->busy_log_until_ns = now + 60 * 1000000000ull;
		}
		client_error(cl, 0, EBUSY, "too many connections of this user: close some");
	} else {
		cl->access = peer_access(c, &cred);
	}
	if (cl->access == ACCESS_NONE && !cl->busy) {
		/* say why, and hang up only once the request is read: closing a
		 * socket with unread data resets it, and the answer is lost */
		c->refused++;
		log_warning("control: refused uid %u (pid %d): not root nor in the control groups",
			    cred.uid, cred.pid);
		client_error(cl, 0, EACCES, "permission denied: vmtraced answers root and the "
				      "members of its control groups only");
	}
	r = sd_event_add_io(c->m->event, &cl->src, cfd, EPOLLIN, client_cb, cl);
	if (r >= 0)
		r = sd_event_add_time_relative(c->m->event, &cl->expire, CLOCK_MONOTONIC,
					       cl->access == ACCESS_NONE ? 2 * 1000000ull
									 : idle_usec(c),
					       100000, client_expire_cb, cl);
	if (r < 0) {
		sd_event_source_disable_unref(cl->src);
		close(cfd);
		free(cl);
		return 0;
	}
	cl->next = c->clients;
	c->clients = cl;
	c->nclients++;
	return 0;
}

static int mkdir_parent(const char *path)
{
	char d[108];
	char *s;

	snprintf(d, sizeof(d), "%s", path);
	s = strrchr(d, '/');
	if (!s || s == d)
		return 0;
	*s = 0;
	if (mkdir(d, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/*
 * A socket passed by systemd (vmtraced.socket, FileDescriptorName=control),
 * or -1. Other passed fds are not ours: closed.
 */
static int control_activated_fd(void)
{
	char **names = NULL;
	int n = sd_listen_fds_with_names(1, &names), fd = -1;

	for (int i = 0; i < n; i++) {
		int cand = SD_LISTEN_FDS_START + i;
		bool named = names && names[i] && !strcmp(names[i], "control");
		bool only = n == 1 && (!names || !names[i] || !strcmp(names[i], "unknown"));

		if (fd < 0 && (named || only) && sd_is_socket_unix(cand, SOCK_SEQPACKET, 1, NULL, 0) > 0) {
			fd = cand;
			continue;
		}
		log_warning("ignoring passed fd %d (%s)", cand, names && names[i] ? names[i] : "unnamed");
		close(cand);
	}
	if (names) {
		for (int i = 0; i < n; i++)
			free(names[i]);
		free(names);
	}
	if (fd >= 0) {
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
		fcntl(fd, F_SETFD, FD_CLOEXEC);
	}
	return fd;
}

int control_new(struct vmt_control **out, struct vmt_manager *m, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct vmt_control *c;
	int r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return log_error_errno(-ENAMETOOLONG, "control socket path too long: %s", path);
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->m = m;
	snprintf(c->path, sizeof(c->path), "%s", path);
	c->fd = control_activated_fd();
	if (c->fd >= 0) {
		c->activated = true;
		log_info("control socket passed by systemd");
		r = sd_event_add_io(m->event, &c->src, c->fd, EPOLLIN, accept_cb, c);
		if (r < 0)
			goto fail;
		*out = c;
		return 0;
	}
	strcpy(sa.sun_path, path);
	c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		r = -errno;
		goto fail;
	}
	mkdir_parent(path);
	unlink(path);
	if (bind(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(c->fd, SOMAXCONN) < 0) {
		r = -errno;
		goto fail;
	}
	chmod(path, 0660);
	r = sd_event_add_io(m->event, &c->src, c->fd, EPOLLIN, accept_cb, c);
	if (r < 0)
		goto fail;
	*out = c;
	return 0;
fail:
	log_error_errno(r, "cannot listen on %s: %m", path);
	if (c->fd >= 0)
		close(c->fd);
	free(c);
	return r;
}

void control_free(struct vmt_control *c)
{
	if (!c)
		return;
	while (c->clients)
		client_free(c->clients);
	sd_event_source_disable_unref(c->src);
	close(c->fd);
	if (!c->activated)	/* systemd owns an activated socket's file */
		unlink(c->path);
	free(c);
}
