/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "channel.h"
#include "util.h"

void channel_init(struct vmt_channel *c, const char *dir, const char *name, enum vmt_transport t)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->path, sizeof(c->path), "%s/%s", dir, name);
	c->transport = t;
	c->rfd = c->wfd = -1;
}

int channel_probe(const char *dir, const char *name, enum vmt_transport *t)
{
	char p[PATH_MAX];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	if (!stat(p, &st) && S_ISSOCK(st.st_mode)) {
		*t = VMT_TRANSPORT_SOCKET;
		return 0;
	}
	snprintf(p, sizeof(p), "%s/%s.out", dir, name);
	if (!stat(p, &st) && S_ISFIFO(st.st_mode)) {
		snprintf(p, sizeof(p), "%s/%s.in", dir, name);
		if (!stat(p, &st) && S_ISFIFO(st.st_mode)) {
			*t = VMT_TRANSPORT_FIFO;
			return 0;
		}
	}
	return -ENOENT;
}

static int open_fifo(struct vmt_channel *c)
{
	char p[PATH_MAX + 8];
	struct stat st;
	int r, w;

	snprintf(p, sizeof(p), "%s.out", c->path);
	r = open(p, O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (r < 0)
		return -errno;
	if (fstat(r, &st) < 0 || !S_ISFIFO(st.st_mode)) {
		close(r);
		return -ENOTSUP;
	}
	snprintf(p, sizeof(p), "%s.in", c->path);
	w = open(p, O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (w < 0) {
		int e = -errno;
		close(r);
		return e;
	}
	c->rfd = r;
	c->wfd = w;
	return 0;
}

bool channel_replaced(const struct vmt_channel *c)
{
	char p[PATH_MAX + 8];
	struct stat now, held;

	if (c->transport != VMT_TRANSPORT_FIFO || c->rfd < 0 || fstat(c->rfd, &held) < 0)
		return false;
	snprintf(p, sizeof(p), "%s.out", c->path);
	/* gone for good is the discovery's business; here only a new inode */
	return stat(p, &now) == 0 && (now.st_ino != held.st_ino || now.st_dev != held.st_dev);
}

static int open_socket(struct vmt_channel *c)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	int fd;

	if (strlen(c->path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, c->path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* a unix connect completes at once or fails: no EINPROGRESS dance */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
		int e = -errno;
		close(fd);
		return e;
	}
	if (!getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl))
		c->peer_pid = cred.pid;
	c->rfd = c->wfd = fd;
	return 0;
}

int channel_open(struct vmt_channel *c)
{
	enum vmt_transport t = c->transport;

	if (channel_is_open(c))
		return 0;
	if (t == VMT_TRANSPORT_AUTO) {
		char dir[PATH_MAX], *slash;
		int r;

		snprintf(dir, sizeof(dir), "%s", c->path);
		slash = strrchr(dir, '/');
		if (!slash)
			return -EINVAL;
		*slash = 0;
		r = channel_probe(dir, slash + 1, &t);
		if (r < 0)
			return r;
	}
	return t == VMT_TRANSPORT_SOCKET ? open_socket(c) : open_fifo(c);
}

void channel_close(struct vmt_channel *c)
{
	if (c->wfd >= 0 && c->wfd != c->rfd)
		close(c->wfd);
	if (c->rfd >= 0)
		close(c->rfd);
	c->rfd = c->wfd = -1;
	c->peer_pid = 0;
}

bool channel_is_open(const struct vmt_channel *c)
{
	return c->rfd >= 0;
}

size_t channel_drain(struct vmt_channel *c)
{
	uint8_t buf[16384];
	size_t total = 0;

	for (int i = 0; i < 4096; i++) {	/* bounded: a flooding peer can't hold us here */
		ssize_t n = read(c->rfd, buf, sizeof(buf));
		if (n <= 0)
			break;
		total += (size_t)n;
	}
	return total;
}
