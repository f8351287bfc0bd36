/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "sdstore.h"

static void put_locked(struct sdstore *s, int fd, const char *name)
{
	if (s->n == SDSTORE_MAX) {
		close(fd);
		return;
	}
	s->fd[s->n] = fd;
	snprintf(s->name[s->n], sizeof(s->name[0]), "%s", name);
	s->n++;
}

static void remove_locked(struct sdstore *s, const char *name)
{
	for (unsigned i = 0; i < s->n;) {
		if (strcmp(s->name[i], name)) {
			i++;
			continue;
		}
		close(s->fd[i]);
		s->fd[i] = s->fd[s->n - 1];
		memcpy(s->name[i], s->name[s->n - 1], sizeof(s->name[0]));
		s->n--;
	}
}

/* One datagram: its fields, and the fds with SCM_RIGHTS. */
static int take_one(struct sdstore *s, int flags)
{
	char buf[4096], cbuf[CMSG_SPACE(sizeof(int) * 16)], name[256] = "";
	struct iovec iov = { buf, sizeof(buf) - 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	int fds[16], nfd = 0;
	bool store = false, drop = false;
	ssize_t n;

	/* one datagram at a time, in order, under the lock: the thread and
	 * sdstore_sync() both take them (flags: MSG_DONTWAIT, never blocks) */
	pthread_mutex_lock(&s->lock);
	n = recvmsg(s->sock, &mh, flags | MSG_CMSG_CLOEXEC);
	if (n < 0) {
		n = -errno;
		pthread_mutex_unlock(&s->lock);
		return (int)n;
	}
	buf[n] = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			nfd = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			memcpy(fds, CMSG_DATA(c), (size_t)nfd * sizeof(int));
		}
	/* a field on any line, as systemd reads them */
	for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		if (!strncmp(l, "FDNAME=", 7))
			snprintf(name, sizeof(name), "%s", l + 7);
		store |= !strcmp(l, "FDSTORE=1");
		drop |= !strcmp(l, "FDSTOREREMOVE=1");
	}
	if (store && nfd) {
		s->stored++;
		for (int i = 0; i < nfd; i++)
			put_locked(s, fds[i], name);
		nfd = 0;
	} else if (drop) {
		s->removed++;
		remove_locked(s, name);
	}
	pthread_mutex_unlock(&s->lock);
	for (int i = 0; i < nfd; i++)
		close(fds[i]);
	return 0;
}

static void *run(void *arg)
{
	struct sdstore *s = arg;

	while (!s->stop) {
		struct pollfd p = { .fd = s->sock, .events = POLLIN };

		if (poll(&p, 1, 50) > 0)
			take_one(s, MSG_DONTWAIT);
	}
	return NULL;
}

int sdstore_start(struct sdstore *s, const char *dir)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	memset(s, 0, sizeof(*s));
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/notify.sock", dir);
	snprintf(s->env, sizeof(s->env), "NOTIFY_SOCKET=%s", sa.sun_path);
	s->sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s->sock < 0 || bind(s->sock, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	pthread_mutex_init(&s->lock, NULL);
	return -pthread_create(&s->th, NULL, run, s);
}

void sdstore_stop(struct sdstore *s)
{
	s->stop = true;
	pthread_join(s->th, NULL);
	for (unsigned i = 0; i < s->n; i++)
		close(s->fd[i]);
	s->n = 0;
	close(s->sock);
}

void sdstore_sync(struct sdstore *s)
{
	while (take_one(s, MSG_DONTWAIT) == 0)
		;
}

unsigned sdstore_listen(struct sdstore *s, int *fds, char *names, size_t n)
{
	unsigned k;

	names[0] = 0;
	pthread_mutex_lock(&s->lock);
	for (k = 0; k < s->n; k++) {
		fds[k] = fcntl(s->fd[k], F_DUPFD_CLOEXEC, 3);
		snprintf(names + strlen(names), n - strlen(names), "%s%s", k ? ":" : "", s->name[k]);
	}
	pthread_mutex_unlock(&s->lock);
	return k;
}

unsigned sdstore_count(struct sdstore *s, const char *name)
{
	unsigned c = 0;

	pthread_mutex_lock(&s->lock);
	for (unsigned i = 0; i < s->n; i++)
		c += !strcmp(s->name[i], name);
	pthread_mutex_unlock(&s->lock);
	return c;
}

void sdstore_put(struct sdstore *s, int fd, const char *name)
{
	pthread_mutex_lock(&s->lock);
	put_locked(s, fd, name);
	pthread_mutex_unlock(&s->lock);
}
