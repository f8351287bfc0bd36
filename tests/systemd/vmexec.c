// SPDX-License-Identifier: MIT
/*
 * vmexec: the command channel of tests/systemd/vm.sh, both ends.
 *
 *   vmexec serve PORT                 in the machine (vmexec.service): serve
 *                                     requests on a virtio-serial port
 *   vmexec run [-w S] [-t S] DIR -- CMD [ARG]...
 *                                     on the host: run CMD as root in the
 *                                     machine, its stdout/stderr on ours, its
 *                                     status ours (255: the channel failed)
 *   vmexec put [-w S] [-t S] DIR PATH < FILE
 *                                     on the host: write FILE to PATH in it
 *
 * The host end is DIR/chan.in (we write) and DIR/chan.out (we read), the
 * FIFOs of QEMU's pipe chardev. A FIFO outlives its readers, so bytes of an
 * earlier, killed client may still be in either direction: every request
 * starts with a hello carrying a fresh random id, which makes the server
 * drop whatever it was doing (killing that command's process group) and
 * answer with a sync frame carrying the id; the client skips every byte
 * before that exact frame. The hello is sent again (a new id each time)
 * until answered: bytes sent to a port no guest process holds open are
 * dropped (during boot). Client frames are at most PIPE_BUF bytes, written
 * whole, so a killed client never leaves half a frame behind.
 *
 * Frame: type (1 byte), length (4 bytes, big endian), payload (<= 4091).
 * Host to guest: H hello ("VMSH" + id), A argument bytes, Z end of
 * argument, X execute, P path to write, D data, F end of file.
 * Guest to host: Y sync ("VMSH" + id), O stdout, E stderr, S status (4
 * bytes, big endian; 128+N for signal N).
 * -w: seconds to wait for the hello's answer (default 60); -t: seconds for
 * the whole request (default 1800): both only catch hangs, and both are
 * stretched by VMT_TEST_TIMEOUT_SCALE.
 * A machine that stops answering is lost: the client that finds it so (the
 * hello unanswered, QEMU gone) writes why to DIR/lost, and every later
 * client fails at once with that reason instead of waiting out its own -w
 * (vm.sh up removes it). A command past -t does not lose the machine: the
 * next hello ends it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HDR 5
#define MAXPAY (4096 - HDR)
#define IDLEN 20	/* "VMSH" + 16 random bytes */

static void put_be32(unsigned char *p, uint32_t v)
{
	p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}

static uint32_t get_be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Write all of buf to a (possibly non-blocking) fd; 0 or -errno. */
static double write_deadline;	/* the client's: a machine that reads nothing */

static int write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EAGAIN) {
			struct pollfd pf = { .fd = fd, .events = POLLOUT };

			if (write_deadline && now() > write_deadline)
				return -ETIMEDOUT;

			if (poll(&pf, 1, 1000) < 0 && errno != EINTR)
				return -errno;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		p += w;
		n -= w;
	}
	return 0;
}

static int send_frame(int fd, char type, const void *pay, size_t len)
{
	unsigned char f[4096];

	f[0] = type;
	put_be32(f + 1, len);
	if (len)
		memcpy(f + HDR, pay, len);
	return write_all(fd, f, HDR + len);	/* <= PIPE_BUF: one atomic write */
}

/* ---- guest side ------------------------------------------------------ */

struct session {
	pid_t pid;		/* running command, or 0 */
	int out, err;		/* its pipes, or -1 */
	int file;		/* P ... F in progress, or -1 */
	int file_errno;
	int lost;		/* out of step: skipping to the next hello */
	char **argv;
	size_t argc, arglen;
	char *arg;		/* the argument being received */
};

/*
 * Commands killed by a hello, not yet reaped: one stuck in the kernel (D
 * state) dies only when it leaves it, and the server must answer the
 * hello meanwhile. Reaped as they end; a zombie past the table's room is
 * left to init when the server ends.
 */
static pid_t killed[64];

/* Reaps those that ended; returns how many are left */
static int reap_killed(void)
{
	int left = 0;

	for (size_t i = 0; i < sizeof(killed) / sizeof(killed[0]); i++) {
		if (killed[i] > 0 && waitpid(killed[i], NULL, WNOHANG) != 0)
			killed[i] = 0;
		left += killed[i] > 0;
	}
	return left;
}

static void session_reset(struct session *s)
{
	if (s->pid > 0) {
		kill(-s->pid, SIGKILL);
		if (waitpid(s->pid, NULL, WNOHANG) == 0)
			for (size_t i = 0; i < sizeof(killed) / sizeof(killed[0]); i++)
				if (killed[i] <= 0) {
					killed[i] = s->pid;
					break;
				}
	}
	if (s->out >= 0) close(s->out);
	if (s->err >= 0) close(s->err);
	if (s->file >= 0) close(s->file);
	for (size_t i = 0; i < s->argc; i++)
		free(s->argv[i]);
	free(s->argv);
	free(s->arg);
	*s = (struct session){ .out = -1, .err = -1, .file = -1 };
}

static void session_exec(struct session *s)
{
	int po[2], pe[2];

	s->argv = realloc(s->argv, (s->argc + 1) * sizeof(*s->argv));
	s->argv[s->argc] = NULL;
	if (s->argc == 0 || pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0)
		abort();
	s->pid = fork();
	if (s->pid == 0) {
		int null = open("/dev/null", O_RDONLY);

		setsid();
		dup2(null, 0);
		dup2(po[1], 1);
		dup2(pe[1], 2);
		signal(SIGPIPE, SIG_DFL);
		execvp(s->argv[0], s->argv);
		dprintf(2, "vmexec: %s: %s\n", s->argv[0], strerror(errno));
		_exit(errno == ENOENT ? 127 : 126);
	}
	close(po[1]);
	close(pe[1]);
	s->out = po[0];
	s->err = pe[0];
}

/* One frame from the host. Returns -1 on a frame that makes no sense. */
static int serve_frame(int port, struct session *s, char type, unsigned char *p, uint32_t len)
{
	unsigned char st[4];

	switch (type) {
	case 'H':
		session_reset(s);
		return send_frame(port, 'Y', p, len) < 0 ? -2 : 0;
	case 'A':
		s->arg = realloc(s->arg, s->arglen + len + 1);
		memcpy(s->arg + s->arglen, p, len);
		s->arglen += len;
		s->arg[s->arglen] = 0;
		return 0;
	case 'Z':
		s->argv = realloc(s->argv, (s->argc + 2) * sizeof(*s->argv));
		s->argv[s->argc++] = s->arg ? s->arg : strdup("");
		s->arg = NULL;
		s->arglen = 0;
		return 0;
	case 'X':
		if (s->pid > 0 || s->argc == 0)
			return -1;
		session_exec(s);
		return 0;
	case 'P': {
		char path[MAXPAY + 1];

		if (s->file >= 0)
			return -1;
		memcpy(path, p, len);
		path[len] = 0;
		s->file = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		s->file_errno = s->file < 0 ? errno : 0;
		return 0;
	}
	case 'D':
		if (s->file >= 0 && !s->file_errno && write_all(s->file, p, len) < 0)
			s->file_errno = errno;
		return 0;
	case 'F':
		if (s->file >= 0 && close(s->file) < 0 && !s->file_errno)
			s->file_errno = errno;
		s->file = -1;
		if (s->file_errno) {
			char m[256];
			int n = snprintf(m, sizeof(m), "vmexec: %s\n", strerror(s->file_errno));

			send_frame(port, 'E', m, n);
		}
		put_be32(st, s->file_errno ? 1 : 0);
		return send_frame(port, 'S', st, 4) < 0 ? -2 : 0;
	}
	return -1;
}

static int serve(const char *path)
{
	static unsigned char buf[1 << 16];
	size_t have = 0;
	struct session s = { .out = -1, .err = -1, .file = -1 };
	int port = open(path, O_RDWR | O_CLOEXEC);

	if (port < 0) {
		fprintf(stderr, "vmexec: %s: %s\n", path, strerror(errno));
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	for (;;) {
		struct pollfd pf[3] = { { port, POLLIN, 0 }, { s.out, POLLIN, 0 }, { s.err, POLLIN, 0 } };
		int status, killed_left = reap_killed(), timeout = -1;

		/* after both pipes closed, the command may still run: look again
		 * soon; a killed one not yet reaped, once a second */
		if (s.pid > 0 && s.out < 0 && s.err < 0)
			timeout = 50;
		else if (killed_left)
			timeout = 1000;
		if (poll(pf, 3, timeout) < 0 && errno != EINTR)
			return 1;
		for (int i = 1; i <= 2; i++) {
			int *fd = i == 1 ? &s.out : &s.err;
			char data[MAXPAY];
			ssize_t n;

			if (*fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP)))
				continue;
			n = read(*fd, data, sizeof(data));
			if (n > 0)
				send_frame(port, i == 1 ? 'O' : 'E', data, n);
			else if (n == 0 || errno != EINTR) {
				close(*fd);
				*fd = -1;
			}
		}
		if (s.pid > 0 && s.out < 0 && s.err < 0 && waitpid(s.pid, &status, WNOHANG) == s.pid) {
			unsigned char st[4];

			put_be32(st, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
			s.pid = 0;
			send_frame(port, 'S', st, 4);
			session_reset(&s);
		}
		if (!(pf[0].revents & POLLIN))
			continue;
		ssize_t n = read(port, buf + have, sizeof(buf) - have - 1);

		if (n <= 0) {
			if (n < 0 && errno != EINTR && errno != EAGAIN)
				return 1;
			usleep(100000);	/* read 0: no host end; nothing to wait on */
			continue;
		}
		have += n;
		size_t off = 0;

		while (have - off >= HDR) {
			static const unsigned char h[] = { 'H', 0, 0, 0, IDLEN, 'V', 'M', 'S', 'H' };
			uint32_t len = get_be32(buf + off + 1);
			int r = -1;

			if (s.lost) {
				unsigned char *m = memmem(buf + off, have - off, h, sizeof(h));

				if (!m) {	/* keep what may be the start of one */
					if (have - off >= sizeof(h))
						off = have - sizeof(h) + 1;
					break;
				}
				off = m - buf;
				s.lost = 0;
				continue;
			}
			if (len <= MAXPAY && have - off < HDR + len)
				break;
			if (len <= MAXPAY)
				r = serve_frame(port, &s, buf[off], buf + off + HDR, len);
			if (r == -2)
				return 1;
			if (r < 0) {
				session_reset(&s);
				s.lost = 1;
				off++;
				continue;
			}
			off += HDR + len;
		}
		memmove(buf, buf + off, have - off);
		have -= off;
	}
}

/* ---- host side ------------------------------------------------------- */

struct client {
	int in, out;		/* FIFOs: we write in, read out */
	pid_t qemu;		/* to notice a machine that is gone */
	double deadline;
	unsigned char buf[1 << 16];
	size_t have;
};

static int fail(const char *what)
{
	fprintf(stderr, "vmexec: %s\n", what);
	return 255;
}

static char lost_path[4096];	/* DIR/lost */

/* fail(), and the machine is lost: later clients need not wait to know */
static int lost(const char *what)
{
	int fd = open(lost_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd >= 0) {
		write_all(fd, what, strlen(what));
		close(fd);
	}
	return fail(what);
}

/* Read more from the machine; 0, -ETIMEDOUT, -ESRCH (QEMU gone) or -errno. */
static int client_fill(struct client *c, double until)
{
	for (;;) {
		struct pollfd pf = { .fd = c->out, .events = POLLIN };
		double left = until - now();
		int r;

		if (left <= 0)
			return -ETIMEDOUT;
		r = poll(&pf, 1, left > 1 ? 1000 : (int)(left * 1000) + 1);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r > 0) {
			ssize_t n = read(c->out, c->buf + c->have, sizeof(c->buf) - c->have);

			if (n > 0) {
				c->have += n;
				return 0;
			}
			if (n < 0 && errno != EAGAIN && errno != EINTR)
				return -errno;
		}
		if (c->qemu > 0 && kill(c->qemu, 0) < 0 && errno == ESRCH)
			return -ESRCH;
	}
}

static int client_hello(struct client *c, double wait)
{
	unsigned char id[IDLEN] = "VMSH", sync[HDR + IDLEN] = { 'Y', 0, 0, 0, IDLEN };
	double until = now() + wait, again = 0, step = 0.5;

	for (;;) {
		if (now() >= again) {
			if (getrandom(id + 4, IDLEN - 4, 0) != IDLEN - 4 || send_frame(c->in, 'H', id, IDLEN) < 0)
				return fail("cannot write to the machine's channel");
			memcpy(sync + HDR, id, IDLEN);
			again = now() + step;
			step = step < 4 ? step * 2 : 5;
		}
		unsigned char *m = memmem(c->buf, c->have, sync, sizeof(sync));

		if (m) {
			size_t used = m - c->buf + sizeof(sync);

			memmove(c->buf, c->buf + used, c->have - used);
			c->have -= used;
			return 0;
		}
		/* keep a tail that may be the start of the sync frame */
		if (c->have > sizeof(sync)) {
			memmove(c->buf, c->buf + c->have - sizeof(sync), sizeof(sync));
			c->have = sizeof(sync);
		}
		int r = client_fill(c, again < until ? again : until);

		if (r == -ESRCH)
			return lost("the machine is not running");
		if (r == -ETIMEDOUT && now() >= until)
			return lost("no answer from the machine's command server");
		if (r < 0 && r != -ETIMEDOUT)
			return fail(strerror(-r));
	}
}

/* Frames until the status: stdout and stderr copied out; returns the status. */
static int client_results(struct client *c)
{
	for (;;) {
		while (c->have >= HDR) {
			uint32_t len = get_be32(c->buf + 1);
			char t = c->buf[0];

			if (len > MAXPAY || (t != 'O' && t != 'E' && t != 'S') || (t == 'S' && len != 4))
				return fail("garbled answer from the machine");
			if (c->have < HDR + len)
				break;
			if (t == 'S')
				return (int)get_be32(c->buf + HDR) & 255;
			write_all(t == 'O' ? 1 : 2, c->buf + HDR, len);
			memmove(c->buf, c->buf + HDR + len, c->have - HDR - len);
			c->have -= HDR + len;
		}
		int r = client_fill(c, c->deadline);

		if (r == -ESRCH)
			return lost("the machine stopped");
		if (r == -ETIMEDOUT)
			return fail("timed out waiting for the command to end (-t)");
		if (r < 0)
			return fail(strerror(-r));
	}
}

static int client_main(int argc, char **argv, int put)
{
	double scale = getenv("VMT_TEST_TIMEOUT_SCALE") ? atof(getenv("VMT_TEST_TIMEOUT_SCALE")) : 1;
	double wait = 60, total = 1800;
	struct client *c = calloc(1, sizeof(*c));
	char path[4096];
	FILE *f;
	int o, lock, r;

	while ((o = getopt(argc, argv, "+w:t:")) != -1) {
		if (o == 'w')
			wait = atof(optarg);
		else if (o == 't')
			total = atof(optarg);
		else
			return 2;
	}
	if (scale < 1)
		scale = 1;
	if (optind < argc && !strcmp(argv[optind], "--"))
		optind++;
	if (argc - optind < 2)
		return fail(put ? "usage: vmexec put DIR PATH < FILE" : "usage: vmexec run DIR -- CMD [ARG]...");
	const char *dir = argv[optind++];

	if (!put && !strcmp(argv[optind], "--"))
		optind++;
	if (optind >= argc)
		return fail("no command");
	snprintf(lost_path, sizeof(lost_path), "%s/lost", dir);
	if ((f = fopen(lost_path, "r"))) {
		char why[256] = "", m[320];

		if (!fgets(why, sizeof(why), f))
			why[0] = 0;
		fclose(f);
		snprintf(m, sizeof(m), "the machine was lost earlier: %s", why);
		return fail(m);
	}
	snprintf(path, sizeof(path), "%s/qemu.pid", dir);
	if ((f = fopen(path, "r"))) {
		if (fscanf(f, "%d", &c->qemu) != 1)
			c->qemu = 0;
		fclose(f);
	}
	/* one request at a time per machine: a second hello would end the first */
	snprintf(path, sizeof(path), "%s/chan.lock", dir);
	lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lock < 0 || flock(lock, LOCK_EX) < 0)
		return fail("cannot lock the channel");
	snprintf(path, sizeof(path), "%s/chan.in", dir);
	/* ENXIO: QEMU has not opened it yet (just started), or is gone */
	for (double until = now() + wait * scale; (c->in = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)) < 0 &&
	     errno == ENXIO && now() < until && c->qemu > 0 && kill(c->qemu, 0) == 0;)
		usleep(50000);
	snprintf(path, sizeof(path), "%s/chan.out", dir);
	c->out = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (c->in < 0 || c->out < 0)
		return fail("the machine is not running (no channel)");
	c->deadline = now() + total * scale;
	write_deadline = c->deadline;
	if ((r = client_hello(c, wait * scale)) != 0)
		return r;
	for (int i = optind; i < argc && !put; i++) {
		size_t len = strlen(argv[i]);

		for (size_t off = 0; off < len; off += MAXPAY)
			send_frame(c->in, 'A', argv[i] + off, len - off < MAXPAY ? len - off : MAXPAY);
		send_frame(c->in, 'Z', NULL, 0);
	}
	if (put) {
		char data[MAXPAY];
		ssize_t n;

		if (strlen(argv[optind]) > MAXPAY - 1)
			return fail("path too long");
		send_frame(c->in, 'P', argv[optind], strlen(argv[optind]));
		while ((n = read(0, data, sizeof(data))) > 0)
			if (send_frame(c->in, 'D', data, n) < 0)
				return fail("cannot write to the machine's channel");
		if (n < 0)
			return fail("cannot read the file");
		send_frame(c->in, 'F', NULL, 0);
	} else if (send_frame(c->in, 'X', NULL, 0) < 0) {
		return fail("cannot write to the machine's channel");
	}
	return client_results(c);
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "serve"))
		return serve(argv[2]);
	if (argc > 1 && (!strcmp(argv[1], "run") || !strcmp(argv[1], "put")))
		return client_main(argc - 1, argv + 1, argv[1][0] == 'p');
	fprintf(stderr, "usage: vmexec serve PORT | run [-w S] [-t S] DIR -- CMD [ARG]... | "
		"put [-w S] [-t S] DIR PATH < FILE\n");
	return 2;
}
