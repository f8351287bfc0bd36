/* SPDX-License-Identifier: MIT */
/* fakenats: see fakenats.h. One client at a time, served to its end. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fakenats.h"

#define INFO_GOOD "INFO {\"server_id\":\"FAKE\",\"server_name\":\"fake\",\"version\":\"2.9.10\"," \
	"\"proto\":1,\"host\":\"127.0.0.1\",\"port\":4222,\"headers\":true,\"max_payload\":1048576," \
	"\"auth_required\":true}\r\n"

static void send_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t k = send(fd, c, n, MSG_NOSIGNAL);

		if (k <= 0)
			return;	/* the client went: its business */
		c += k;
		n -= (size_t)k;
	}
}

/* What the client sent, into the record; false once it closed (or stop). */
static bool take(struct fakenats *f, int fd, int timeout_ms, bool *pinged)
{
	struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = f->wake[0], .events = POLLIN } };
	char buf[4096];
	ssize_t k;

	if (poll(p, 2, timeout_ms) <= 0)
		return true;
	if (p[1].revents)
		return false;
	k = recv(fd, buf, sizeof(buf), 0);
	if (k <= 0)
		return false;
	pthread_mutex_lock(&f->lock);
	f->received += (uint64_t)k;
	for (ssize_t i = 0; i < k && f->nrecord < FAKENATS_RECORD_MAX; i++)
		f->record[f->nrecord++] = buf[i] ? buf[i] : ' ';
	f->record[f->nrecord] = 0;
	pthread_mutex_unlock(&f->lock);
	if (pinged && memmem(buf, (size_t)k, "PING", 4))
		*pinged = true;
	return true;
}

static void serve(struct fakenats *f, int fd)
{
	char *big;
	size_t n;
	bool pinged = false;

	switch (f->mode) {
	case FAKENATS_NO_TLS:
		send_all(fd, INFO_GOOD, strlen(INFO_GOOD));
		break;
	case FAKENATS_BIG_INFO:
		n = 256 * 1024;
		big = malloc(n + 16);
		if (!big)
			return;
		memcpy(big, "INFO {\"x\":\"", 11);
		memset(big + 11, 'x', n - 11);
		memcpy(big + n, "\"}\r\n", 4);
		send_all(fd, big, n + 4);
		free(big);
		break;
	case FAKENATS_GARBAGE:
		n = 64 * 1024;
		big = malloc(n);
		if (!big)
			return;
		if (getrandom(big, n, 0) != (ssize_t)n)
			memset(big, 0xa5, n);
		for (size_t i = 0; i < n; i += 97)
			big[i] = '\n';
		send_all(fd, big, n);
		free(big);
		break;
	case FAKENATS_BIG_MSG:
		send_all(fd, INFO_GOOD, strlen(INFO_GOOD));
		/* the client's CONNECT and PING, answered so it is connected */
		while (!pinged && take(f, fd, 5000, &pinged))
			;
		if (!pinged)
			return;
		send_all(fd, "PONG\r\n", 6);
		n = 4u << 20;
		big = malloc(n + 8);
		if (!big)
			return;
		memcpy(big, "MSG ", 4);
		memset(big + 4, 'a', n - 4);
		memcpy(big + n, "\r\n", 2);
		send_all(fd, big, n + 2);
		free(big);
		break;
	}
	/* whatever the client says next, until it hangs up */
	while (take(f, fd, 30000, NULL))
		;
}

static void *run(void *arg)
{
	struct fakenats *f = arg;

	for (;;) {
		struct pollfd p[2] = { { .fd = f->lfd, .events = POLLIN },
				       { .fd = f->wake[0], .events = POLLIN } };
		int fd;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (!p[0].revents)
			continue;
		fd = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		pthread_mutex_lock(&f->lock);
		f->accepted++;
		pthread_mutex_unlock(&f->lock);
		serve(f, fd);
		close(fd);
	}
	return NULL;
}

int fakenats_start(struct fakenats *f, enum fakenats_mode mode)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int r;

	memset(f, 0, sizeof(*f));
	f->mode = mode;
	f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (f->lfd < 0)
		return -errno;
	if (bind(f->lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(f->lfd, 16) < 0 ||
	    getsockname(f->lfd, (struct sockaddr *)&a, &l) < 0 || pipe2(f->wake, O_CLOEXEC) < 0) {
		r = -errno;
		close(f->lfd);
		return r;
	}
	f->port = ntohs(a.sin_port);
	pthread_mutex_init(&f->lock, NULL);
	r = -pthread_create(&f->thread, NULL, run, f);
	if (r < 0) {
		close(f->lfd);
		close(f->wake[0]);
		close(f->wake[1]);
	}
	return r;
}

void fakenats_stop(struct fakenats *f)
{
	if (write(f->wake[1], "x", 1) < 0) {
		/* the thread then waits for its client's end */
	}
	pthread_join(f->thread, NULL);
	close(f->lfd);
	close(f->wake[0]);
	close(f->wake[1]);
	pthread_mutex_destroy(&f->lock);
}

uint64_t fakenats_accepted(struct fakenats *f)
{
	uint64_t n;

	pthread_mutex_lock(&f->lock);
	n = f->accepted;
	pthread_mutex_unlock(&f->lock);
	return n;
}

bool fakenats_received(struct fakenats *f, const char *s)
{
	bool r;

	pthread_mutex_lock(&f->lock);
	r = strstr(f->record, s) != NULL;
	pthread_mutex_unlock(&f->lock);
	return r;
}
