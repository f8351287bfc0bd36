/* SPDX-License-Identifier: MIT */
#include <assert.h>
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
#include "upgrade.h"
#include "ctlproto.h"
#include "fdstore.h"
#include "log.h"
#include "util.h"
#include "vfile.h"

#define MAX_CLIENTS 256
#define ROOT_SLOTS 32		/* of MAX_CLIENTS, only root may take */
#define PER_UID_CLIENTS 16	/* connections one other uid may hold */
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
	sd_event *event;
	const struct vmt_config *conf;	/* the daemon's, as reloads change it */
	const struct vmt_control_ops *ops;
	void *owner;
	int fd;
	char path[108];
	sd_event_source *src;
	struct vmt_client *clients;
	unsigned nclients;
	bool activated;
	uint64_t refused;
	uint64_t bad_requests;
	uint64_t busy_log_until_ns;	/* "too many connections" is said once a minute */
	uint64_t denied_log_until_ns;	/* and "not root nor in the groups" */
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
	return (uint64_t)c->conf->control.idle_timeout_ms * 1000;
}

static void client_free(struct vmt_client *cl)
{
	struct vmt_control *c = cl->ctl;
	struct vmt_client **pp;

	c->ops->gone(c->owner, cl);
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

void control_send(struct vmt_client *cl, struct vmt_buf *b)
{
	unsigned type, tag = 0;
	int r;

	if (ctl_msg_end(b) < 0)
		return;
	type = get_le16(b->data + 6);
	/* the answers are built by code alone: a tag the schema does not allow
	 * in this message is a bug of ours. Said, and sent anyway: a client
	 * skips a tag it does not know, and a status answer is no reason to
	 * stop recording. The sanitizer build the suites run aborts instead. */
	r = ctl_msg_check(type, b->data + VMT_CTL_HDR_SIZE, b->len - VMT_CTL_HDR_SIZE, &tag);
	if (r < 0)
		log_error("control: %s answer breaks the schema (tag %s): %s", ctl_msg_name(type),
			  ctl_tag_name(tag) ? ctl_tag_name(tag) : "?", strerror(-r));
#ifdef VMT_SCHEMA_STRICT
	assert(r == 0);
#endif
	/* a client that does not read its answers loses them, not the daemon */
	if (send(cl->fd, b->data, b->len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
		log_debug("control: answer to pid %d lost: %s", cl->pid, strerror(errno));
}

void control_error(struct vmt_client *cl, uint32_t id, int err, const char *msg)
{
	struct vmt_buf b = { 0 };

	ctl_msg_begin(&b, VMT_CTL_ERROR, id);
	ctl_put_ERRNO(&b, err < 0 ? -err : err);
	ctl_put_MESSAGE(&b, msg);
	control_send(cl, &b);
	buf_free(&b);
}

void control_end(struct vmt_client *cl, uint32_t id)
{
	struct vmt_buf b = { 0 };

	ctl_msg_begin(&b, VMT_CTL_END, id);
	control_send(cl, &b);
	buf_free(&b);
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
		control_error(cl, 0, EMSGSIZE, "request too large");
		return 0;
	}
	if (ctl_msg_parse(buf, (size_t)n, &type, &id, &payload, &plen) < 0) {
		cl->ctl->bad_requests++;
		control_error(cl, 0, EBADMSG, "malformed request");
		return 0;
	}
	if (cl->access == ACCESS_NONE) {
		control_error(cl, id, cl->busy ? EBUSY : EACCES,
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
		control_error(cl, id, EACCES, "permission denied: this command needs root or the "
					     "control group");
		return 0;
	}
	cl->ctl->ops->request(cl->ctl->owner, cl, type, id, payload, plen);
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
	const struct vmt_config *conf = c->conf;
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

pid_t control_client_pid(const struct vmt_client *cl)
{
	return cl->pid;
}

void control_client_waits(struct vmt_client *cl, int delta)
{
	if (delta < 0 && cl->waiting)
		cl->waiting--;
	else if (delta > 0)
		cl->waiting++;
}

uint64_t control_refused(const struct vmt_control *c)
{
	return c->refused + c->bad_requests;
}

void control_bad_request(struct vmt_client *cl)
{
	cl->ctl->bad_requests++;
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
		control_error(cl, 0, EBUSY, "too many connections of this user: close some");
	} else {
		cl->access = peer_access(c, &cred);
	}
	if (cl->access == ACCESS_NONE && !cl->busy) {
		/* say why, and hang up only once the request is read: closing a
		 * socket with unread data resets it, and the answer is lost */
		uint64_t now = now_monotonic_ns();

		c->refused++;
		/* any local user can connect in a loop: said once a minute, with
		 * how many were refused meanwhile */
		if (now >= c->denied_log_until_ns) {
			log_warning("control: refused uid %u (pid %d): not root nor in the control "
				    "groups (%llu refused in all; more within a minute are not said)",
				    cred.uid, cred.pid, (unsigned long long)c->refused);
			c->denied_log_until_ns = now + 60 * 1000000000ull;
		}
		control_error(cl, 0, EACCES, "permission denied: vmtraced answers root and the "
				      "members of its control groups only");
	}
	r = sd_event_add_io(c->event, &cl->src, cfd, EPOLLIN, client_cb, cl);
	if (r >= 0)
		r = sd_event_add_time_relative(c->event, &cl->expire, CLOCK_MONOTONIC,
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

static bool named_ring(const char *name)
{
	return name && (!strncmp(name, VMT_FDSTORE_RING_PREFIX, strlen(VMT_FDSTORE_RING_PREFIX)) ||
			!strncmp(name, VMT_RESERVE_FDNAME_PREFIX, strlen(VMT_RESERVE_FDNAME_PREFIX)));
}

int control_fd(const struct vmt_control *c)
{
	return c->fd;
}

/*
 * A socket passed by systemd (vmtraced.socket, FileDescriptorName=control),
 * or -1. The rings' and reserves' fds ("ring/...", "reserve/...", fdstore.h) are left alone; other
 * passed fds are not ours: closed.
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
		/* the rings' memfds from the fd store are fdstore.c's, an upgrade's
		 * state and channels upgrade.c's, taken before */
		if (named_ring(names ? names[i] : NULL) || upgrade_fd_name(names ? names[i] : NULL))
			continue;
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

int control_new(struct vmt_control **out, sd_event *e, const struct vmt_config *conf,
		const struct vmt_control_ops *ops, void *owner)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	const char *path = conf->control_socket;
	struct vmt_control *c;
	int r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return log_error_errno(-ENAMETOOLONG, "control socket path too long: %s", path);
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->event = e;
	c->conf = conf;
	c->ops = ops;
	c->owner = owner;
	snprintf(c->path, sizeof(c->path), "%s", path);
	c->fd = control_activated_fd();
	if (c->fd >= 0) {
		c->activated = true;
		log_info("control socket passed by systemd");
		r = sd_event_add_io(e, &c->src, c->fd, EPOLLIN, accept_cb, c);
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
	r = sd_event_add_io(e, &c->src, c->fd, EPOLLIN, accept_cb, c);
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
