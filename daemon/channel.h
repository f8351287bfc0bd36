/* SPDX-License-Identifier: MIT */
/*
 * channel: the host end of one virtio-serial port as QEMU exposes it.
 * FIFO: QEMU's `-chardev pipe,path=P` reads P.in and writes P.out; we open
 * both O_RDWR so neither open blocks nor ever sees EOF. Socket: QEMU's
 * `-chardev socket,path=P,server=on`; we connect, non-blocking. Only a
 * FIFO or a socket is ever opened, never through a symlink (channel.c).
 */
#ifndef VMT_CHANNEL_H
#define VMT_CHANNEL_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#include "config.h"

struct vmt_channel {
	char path[PATH_MAX];	/* P, without .in/.out */
	enum vmt_transport transport;
	int rfd;		/* guest -> host */
	int wfd;		/* host -> guest (== rfd for sockets) */
	pid_t peer_pid;		/* SO_PEERCRED of a socket, 0 if unknown */
};

void channel_init(struct vmt_channel *c, const char *dir, const char *name,
		  enum vmt_transport t);
/* What is at the path: FIFO pair, socket, or -ENOENT; -ELOOP where a
 * symlink stands, -EBADFD where another kind of file does. */
int channel_probe(const char *dir, const char *name, enum vmt_transport *t);
/* Open or connect; -ENOENT/-ECONNREFUSED while QEMU is not there; -ELOOP
 * or -EBADFD (refused: a symlink, or not a FIFO or socket) as above. No
 * symlink is followed in the ports' names nor in their folder's. */
int channel_open(struct vmt_channel *c);
void channel_close(struct vmt_channel *c);
bool channel_is_open(const struct vmt_channel *c);
/*
 * An open FIFO pair whose path now names another FIFO (QEMU restarted and
 * made new ones): held O_RDWR, the old ones never report EOF, so this is
 * how the host notices. False for sockets and closed channels.
 */
bool channel_replaced(const struct vmt_channel *c);
/* Read and drop whatever is pending; returns the bytes dropped. */
size_t channel_drain(struct vmt_channel *c);

#endif
