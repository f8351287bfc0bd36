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

/*
 * Whoever can create entries in a channel folder (QEMU's user owns
 * libvirt's) could put a symlink where a port should be and have the root
 * daemon open, or write HOST_HELLO into, a file of its choosing. So a port
 * is first opened as a path only, without following a symlink, its type is
 * checked on the inode itself, and only then is that same inode opened (or
 * connected to) through /proc/self/fd. The folder's last component is not
 * followed either (a discovered guest's folder is made by the guest side);
 * the path above it is the operator's, from the configuration.
 */
static int open_dir(const char *dir)
{
	int fd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0)
		return errno == ENOTDIR ? -ELOOP : -errno;
	return fd;
}

/* An O_PATH fd of dir/name if it is of type fmt (S_IFIFO, S_IFSOCK):
 * -ELOOP for a symlink, -EBADFD for another type, -errno else. */
static int open_port(const char *dir, const char *name, mode_t fmt)
{
	struct stat st;
	int dfd = open_dir(dir), fd;

	if (dfd < 0)
		return dfd;
	fd = openat(dfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	close(dfd);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || (st.st_mode & S_IFMT) != fmt) {
		int e = S_ISLNK(st.st_mode) ? -ELOOP : -EBADFD;
		close(fd);
		return e;
	}
	return fd;
}

static void split(const char *path, char *dir, size_t n, const char **base)
{
	const char *slash = strrchr(path, '/');

	if (!slash) {
		snprintf(dir, n, ".");
		*base = path;
		return;
	}
	snprintf(dir, n, "%.*s", (int)(slash - path) ? (int)(slash - path) : 1, path);
	*base = slash + 1;
}

int channel_probe(const char *dir, const char *name, enum vmt_transport *t)
{
	char p[NAME_MAX + 8];
	int fd;

	if ((fd = open_port(dir, name, S_IFSOCK)) >= 0) {
		close(fd);
		*t = VMT_TRANSPORT_SOCKET;
		return 0;
	}
	if (fd != -ENOENT)
		return fd;
	snprintf(p, sizeof(p), "%s.out", name);
	fd = open_port(dir, p, S_IFIFO);
	if (fd < 0)
		return fd;
	close(fd);
	snprintf(p, sizeof(p), "%s.in", name);
	fd = open_port(dir, p, S_IFIFO);
	if (fd < 0)
		return fd;
	close(fd);
	*t = VMT_TRANSPORT_FIFO;
	return 0;
}

/* Open the inode behind an O_PATH fd for real, and close the O_PATH fd. */
static int reopen(int pfd, int flags)
{
	char p[64];
	int fd;

	snprintf(p, sizeof(p), "/proc/self/fd/%d", pfd);
	fd = open(p, flags | O_CLOEXEC);
	if (fd < 0)
		fd = -errno;
	close(pfd);
	return fd;
}

static int open_fifo_end(const char *path, const char *suffix)
{
	char dir[PATH_MAX], name[NAME_MAX + 8];
	const char *base;
	int fd;

	split(path, dir, sizeof(dir), &base);
	snprintf(name, sizeof(name), "%s%s", base, suffix);
	fd = open_port(dir, name, S_IFIFO);
	if (fd < 0)
		return fd;
	/* O_RDWR: neither end blocks in open nor ever sees EOF */
	return reopen(fd, O_RDWR | O_NONBLOCK);
}

static int open_fifo(struct vmt_channel *c)
{
	int r, w;

	r = open_fifo_end(c->path, ".out");
	if (r < 0)
		return r;
	w = open_fifo_end(c->path, ".in");
	if (w < 0) {
		close(r);
		return w;
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
	return lstat(p, &now) == 0 && (now.st_ino != held.st_ino || now.st_dev != held.st_dev);
}

static int open_socket(struct vmt_channel *c)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dir[PATH_MAX];
	const char *base;
	struct ucred cred;
	socklen_t cl = sizeof(cred);
	int fd, pfd;

	split(c->path, dir, sizeof(dir), &base);
	pfd = open_port(dir, base, S_IFSOCK);
	if (pfd < 0)
		return pfd;
	/* the socket inode checked above, whatever the name points to now
	 * (and no limit of sun_path on how deep the folder is) */
	snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d", pfd);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		int e = -errno;
		close(pfd);
		return e;
	}
	/* a unix connect completes at once or fails: no EINPROGRESS dance */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
		int e = -errno;
		close(fd);
		close(pfd);
		return e;
	}
	close(pfd);
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
