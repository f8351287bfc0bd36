/* SPDX-License-Identifier: MIT */
/*
 * sdstore: plays systemd's side of sd_notify(3) for the fd store: binds the
 * NOTIFY_SOCKET datagram socket and, on a thread of its own (a daemon
 * blocks once ten datagrams wait), receives the daemon's messages, keeping
 * the fds of FDSTORE=1 by FDNAME= and closing them on FDSTOREREMOVE=1, as
 * systemd does. What it keeps is passed to the next daemon (testd_opts).
 */
#ifndef VMT_SDSTORE_H
#define VMT_SDSTORE_H

#include <pthread.h>
#include <stdbool.h>

#define SDSTORE_MAX 64

struct sdstore {
	int sock;
	char env[400];		/* "NOTIFY_SOCKET=..." */
	pthread_t th;
	pthread_mutex_t lock;
	volatile bool stop;
	unsigned n;
	int fd[SDSTORE_MAX];
	char name[SDSTORE_MAX][256];
	unsigned stored, removed;	/* messages seen */
};

int sdstore_start(struct sdstore *s, const char *dir);
void sdstore_stop(struct sdstore *s);
/* Read what is queued now (the daemon is dead: all it sent). */
void sdstore_sync(struct sdstore *s);
/* What systemd would pass: dups of the kept fds and their names joined by
 * ':'; the caller closes fds. */
unsigned sdstore_listen(struct sdstore *s, int *fds, char *names, size_t n);
/* Fds kept under name. */
unsigned sdstore_count(struct sdstore *s, const char *name);
/* Keep fd under name, as if the daemon had stored it (fd is taken). */
void sdstore_put(struct sdstore *s, int fd, const char *name);

#endif
