/* SPDX-License-Identifier: MIT */
/*
 * vmtb-drain: the ingest baseline. The least a reader of the guests' data
 * FIFOs can do: open every DIR/gN/trace-path-cpuC.out as vmtraced does
 * (O_RDWR | O_NONBLOCK), wait in one epoll, read() into one buffer and
 * throw the bytes away. On SIGTERM it prints the bytes it read and exits.
 *
 *   vmtb-drain BUFSIZE DIR NGUESTS
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "bench.h"

int main(int argc, char **argv)
{
	struct epoll_event ev[256];
	size_t bufsize;
	unsigned ng;
	uint64_t total = 0;
	uint8_t *buf;
	sigset_t ss;
	int ep, sfd;

	if (argc != 4) {
		fprintf(stderr, "usage: vmtb-drain BUFSIZE DIR NGUESTS\n");
		return 2;
	}
	bufsize = strtoul(argv[1], NULL, 0);
	ng = (unsigned)strtoul(argv[3], NULL, 0);
	buf = malloc(bufsize);
	ep = epoll_create1(EPOLL_CLOEXEC);
	sigemptyset(&ss);
	sigaddset(&ss, SIGTERM);
	sigprocmask(SIG_BLOCK, &ss, NULL);
	sfd = signalfd(-1, &ss, SFD_CLOEXEC);
	if (!buf || ep < 0 || sfd < 0)
		return 1;
	ev[0] = (struct epoll_event){ .events = EPOLLIN, .data.fd = sfd };
	epoll_ctl(ep, EPOLL_CTL_ADD, sfd, &ev[0]);
	for (unsigned g = 0; g < ng; g++)
		for (unsigned c = 0; c < BENCH_CPUS; c++) {
			char p[1200];
			int fd;

			snprintf(p, sizeof(p), "%s/g%u/trace-path-cpu%u.out", argv[2], g, c);
			fd = open(p, O_RDWR | O_NONBLOCK | O_CLOEXEC);
			if (fd < 0) {
				perror(p);
				return 1;
			}
			ev[0] = (struct epoll_event){ .events = EPOLLIN, .data.fd = fd };
			epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev[0]);
		}
	for (;;) {
		int n = epoll_wait(ep, ev, ARRAY_SIZE(ev), -1);

		for (int i = 0; i < n; i++) {
			if (ev[i].data.fd == sfd) {
				printf("%llu\n", (unsigned long long)total);
				return 0;
			}
			/* like vmtraced: a bounded number of reads per wake-up */
			for (int k = 0; k < 64; k++) {
				ssize_t r = read(ev[i].data.fd, buf, bufsize);
				if (r <= 0)
					break;
				total += (uint64_t)r;
				if ((size_t)r < bufsize)
					break;
			}
		}
	}
}
