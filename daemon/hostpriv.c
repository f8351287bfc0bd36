/* SPDX-License-Identifier: MIT */
/*
 * The daemon's side of hostpriv, the wire both sides use, and the helper's
 * start: fork, give up all but what tracefs and kallsyms take (priv.c),
 * serve until the daemon's end closes. Requests are synchronous, on the
 * loop: a set-up already was (it reads kallsyms), and a dump's task tables
 * take a millisecond; a helper that does not answer in HP_TIMEOUT_MS is
 * given up on.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hostpriv-int.h"
#include "log.h"
#include "priv.h"

#define HP_TIMEOUT_MS 30000
#define META_MAX (256u << 20)

struct vmt_hostpriv {
	int fd;
	pid_t pid;		/* the helper, our child (forked here or by the predecessor) */
	bool broken;		/* it stopped answering or broke the protocol: given up on */
};

/* ---- the wire ------------------------------------------------------------- */

int hp_send(int fd, uint16_t type, int32_t result, const void *body, uint32_t len,
	    const int *fds, unsigned nfds)
{
	struct hp_hdr h = { .magic = HP_MAGIC, .version = HP_VERSION, .type = type,
			    .result = result, .len = len };
	struct iovec iov[2] = { { &h, sizeof(h) }, { (void *)body, len } };
	char cbuf[CMSG_SPACE(sizeof(int) * HP_FDS_MAX)];
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = len ? 2 : 1 };

	if (nfds > HP_FDS_MAX)
		return -E2BIG;
	if (nfds) {
		struct cmsghdr *c;

		memset(cbuf, 0, sizeof(cbuf));
		mh.msg_control = cbuf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	for (;;) {
		ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
		if (n == (ssize_t)(sizeof(h) + len))
			return 0;
		if (n >= 0)
			return -EIO;
		if (errno != EINTR)
			return -errno;
	}
}

int hp_recv(int fd, int timeout_ms, struct hp_hdr *h, void *body, uint32_t max, int *fds,
	    unsigned *nfds)
{
	static uint8_t buf[sizeof(struct hp_hdr) + HP_BODY_MAX + 1];
	char cbuf[CMSG_SPACE(sizeof(int) * HP_FDS_MAX)];
	struct iovec iov = { buf, sizeof(buf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	unsigned want = *nfds, got = 0;
	struct pollfd p = { .fd = fd, .events = POLLIN };
	ssize_t n;
	int r;

	*nfds = 0;
	do
		r = poll(&p, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	if (r == 0)
		return -ETIMEDOUT;
	do
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == ECONNRESET ? -EPIPE : -errno;
	if (n == 0)
		return -EPIPE;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int f;

			memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (fds && got < want)
				fds[got++] = f;
			else
				close(f);
		}
	}
	memcpy(h, buf, VMT_MIN((size_t)n, sizeof(*h)));
	if ((size_t)n < sizeof(*h) || h->magic != HP_MAGIC || h->version != HP_VERSION ||
	    (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || h->len != (size_t)n - sizeof(*h) ||
	    h->len > max) {
		while (got)
			close(fds[--got]);
		return -EBADMSG;
	}
	if (h->len)
		memcpy(body, buf + sizeof(*h), h->len);
	*nfds = got;
	return 0;
}

/* ---- the helper ------------------------------------------------------------ */

static void helper_main(int fd)
{
	/* nothing of the daemon's but the logging stream: its descriptors
	 * (rings, channels, sockets, the journal's) are not ours to hold */
	if (dup2(fd, 3) < 0)
		_exit(1);
	syscall(SYS_close_range, 4u, ~0u, 0u);
	log_close_journal();	/* stderr is the journal's stream under systemd */
	if (priv_helper() < 0)
		_exit(1);
	for (;;) {
		int r = hostpriv_serve_one(3);
		if (r == -EPIPE)
			break;	/* the daemon is gone or let go of us */
		if (r < 0) {
			log_error_errno(r, "host source helper: the daemon broke the protocol: %m");
			break;
		}
	}
	/* no exit handlers: they are the daemon's (sanitizers' leak checks of
	 * its memory among them) */
	_exit(0);
}

int hostpriv_start(struct vmt_hostpriv **out)
{
	struct vmt_hostpriv *h = calloc(1, sizeof(*h));
	int sv[2];

	if (!h)
		return -ENOMEM;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		free(h);
		return -errno;
	}
	h->pid = fork();
	if (h->pid < 0) {
		int r = -errno;
		close(sv[0]);
		close(sv[1]);
		free(h);
		return r;
	}
	if (h->pid == 0) {
		close(sv[0]);
		helper_main(sv[1]);
	}
	close(sv[1]);
	h->fd = sv[0];
	*out = h;
	return 0;
}

static int hp_call(struct vmt_hostpriv *h, uint16_t type, const void *body, uint32_t len,
		   void *rbody, uint32_t rlen, int *fds, unsigned *nfds)
{
	struct hp_hdr rh;
	unsigned none = 0;
	int r;

	if (!h || h->broken)
		return log_error_errno(-ENOTCONN, "host source: its helper is gone (see earlier "
				       "messages): a restart sets it up again");
	r = hp_send(h->fd, type, 0, body, len, NULL, 0);
	if (r >= 0)
		r = hp_recv(h->fd, HP_TIMEOUT_MS, &rh, rbody, rlen, fds, nfds ? nfds : &none);
	if (r >= 0 && rh.type != HP_REPLY)
		r = -EBADMSG;
	if (r < 0) {
		h->broken = true;
		return log_error_errno(r, "host source: its helper (pid %d) does not answer: %m",
				       (int)h->pid);
	}
	if (rh.result >= 0 && rh.len != rlen) {
		h->broken = true;
		return log_error_errno(-EBADMSG, "host source: its helper's answer does not check");
	}
	return rh.result > 0 ? -EBADMSG : rh.result;
}

int hostpriv_adopt(int fd, struct vmt_hostpriv **out)
{
	struct vmt_hostpriv *h = calloc(1, sizeof(*h));
	struct hp_hello hl;
	int r;

	if (!h) {
		close(fd);
		return -ENOMEM;
	}
	fcntl(fd, F_SETFD, FD_CLOEXEC);
	h->fd = fd;
	r = hp_call(h, HP_HELLO, NULL, 0, &hl, sizeof(hl), NULL, NULL);
	if (r < 0) {
		close(fd);
		free(h);
		return -EPROTO;
	}
	h->pid = (pid_t)hl.pid;
	*out = h;
	return 0;
}

int hostpriv_fd(const struct vmt_hostpriv *h)
{
	return h && !h->broken ? h->fd : -1;
}

void hostpriv_free(struct vmt_hostpriv *h)
{
	if (!h)
		return;
	close(h->fd);
	/* it exits on the end of its socket: a short wait, never a hang */
	for (int i = 0; h->pid > 0 && i < 100; i++) {
		pid_t p = waitpid(h->pid, NULL, WNOHANG);
		if (p == h->pid || (p < 0 && errno == ECHILD))
			break;
		usleep(10000);
	}
	free(h);
}

/* ---- requests -------------------------------------------------------------- */

/* A memfd the helper filled into b, bounded. */
static int read_memfd(int fd, struct vmt_buf *b)
{
	struct stat st;
	size_t off = 0;

	if (fstat(fd, &st) < 0 || st.st_size < 0 || (uint64_t)st.st_size > META_MAX)
		return -EBADMSG;
	b->data = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!b->data)
		return -ENOMEM;
	b->len = b->cap = (size_t)st.st_size;
	while (off < b->len) {
		ssize_t n = pread(fd, b->data + off, b->len - off, (off_t)off);
		if (n <= 0) {
			buf_free(b);
			return -EIO;
		}
		off += (size_t)n;
	}
	return 0;
}

void hostpriv_inst_close(struct vmt_hostpriv_inst *in)
{
	buf_free(&in->meta);
	if (in->marker_fd >= 0)
		close(in->marker_fd);
	in->marker_fd = -1;
	for (uint32_t i = 0; i < in->ncpus && i < VMT_MAX_CPUS; i++) {
		if (in->cpu_fd[i] >= 0)
			close(in->cpu_fd[i]);
		in->cpu_fd[i] = -1;
	}
}

int hostpriv_setup(struct vmt_hostpriv *h, const struct vmt_host_conf *hc,
		   struct vmt_hostpriv_inst *out)
{
	static struct hp_setup rq;
	struct hp_setup_reply rp;
	int fds[2] = { -1, -1 };
	unsigned nfds = 2;
	uint32_t got = 0, next = 0;
	int r;

	memset(out, 0, sizeof(*out));
	out->marker_fd = -1;
	for (unsigned i = 0; i < VMT_MAX_CPUS; i++)
		out->cpu_fd[i] = -1;
	memset(&rq, 0, sizeof(rq));
	snprintf(rq.events, sizeof(rq.events), "%s", hc->events);
	snprintf(rq.clock, sizeof(rq.clock), "%s", hc->clock);
	rq.buffer_kb = hc->buffer_kb;
	rq.qemu_only = hc->qemu_only ? 1 : 0;
	snprintf(rq.instance, sizeof(rq.instance), "%s", hc->instance);
	r = hp_call(h, HP_SETUP, &rq, sizeof(rq), &rp, sizeof(rp), fds, &nfds);
	if (r < 0)
		goto fail;
	out->marker_fd = rp.have_marker && nfds == 2 ? fds[1] : -1;
	if (nfds < 1 + (rp.have_marker ? 1u : 0u) || rp.ncpus == 0 || rp.ncpus > VMT_MAX_CPUS ||
	    rp.nfds == 0 || rp.nfds > rp.ncpus) {
		r = -EBADMSG;
		goto broken;
	}
	r = read_memfd(fds[0], &out->meta);
	close(fds[0]);
	fds[0] = -1;
	if (r < 0)
		goto broken;
	out->ncpus = rp.ncpus;
	out->poll_ok = rp.poll_ok;
	out->buffer_kb = rp.buffer_kb;
	memcpy(out->clock, rp.clock, sizeof(out->clock));
	out->clock[sizeof(out->clock) - 1] = 0;
	memcpy(out->dir, rp.dir, sizeof(out->dir));
	out->dir[sizeof(out->dir) - 1] = 0;
	/* each CPU's descriptor, in order, HP_FDS_MAX a message */
	while (got < rp.nfds) {
		int cpu[HP_FDS_MAX];
		struct hp_fds n;
		struct hp_hdr fh;
		unsigned k = HP_FDS_MAX;

		r = hp_recv(h->fd, HP_TIMEOUT_MS, &fh, &n, sizeof(n), cpu, &k);
		if (r >= 0 && (fh.type != HP_FDS || fh.len != sizeof(n) || n.n != k ||
			       k > rp.nfds - got))
			r = -EBADMSG;
		if (r < 0) {
			while (r != -EBADMSG && k)
				close(cpu[--k]);
			goto broken;
		}
		for (unsigned i = 0; i < k; i++) {
			while (next < rp.ncpus && !rp.present[next])
				next++;
			out->cpu_fd[next++] = cpu[i];
		}
		got += k;
	}
	return 0;
broken:
	h->broken = true;
	log_error_errno(r, "host source: its helper's answer to the set-up does not check: %m");
fail:
	if (fds[0] >= 0)
		close(fds[0]);
	if (out->marker_fd < 0 && fds[1] >= 0)
		close(fds[1]);
	hostpriv_inst_close(out);
	return r;
}

int hostpriv_trace_on(struct vmt_hostpriv *h)
{
	return hp_call(h, HP_TRACE_ON, NULL, 0, NULL, 0, NULL, NULL);
}

int hostpriv_tasks(struct vmt_hostpriv *h, struct vmt_buf *out)
{
	int fd = -1;
	unsigned n = 1;
	int r = hp_call(h, HP_TASKS, NULL, 0, NULL, 0, &fd, &n);

	if (r >= 0 && n != 1)
		r = -EBADMSG;
	if (r >= 0)
		r = read_memfd(fd, out);
	if (n == 1)
		close(fd);
	return r;
}

int hostpriv_destroy(struct vmt_hostpriv *h)
{
	return hp_call(h, HP_DESTROY, NULL, 0, NULL, 0, NULL, NULL);
}
