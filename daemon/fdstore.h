/* SPDX-License-Identifier: MIT */
/*
 * fdstore: systemd's file-descriptor store, both ends of it, for the rings'
 * memfds (ringmem.h) to outlive a crash of the daemon (sd_notify(3),
 * FDSTORE=1 and FDNAME=; the unit sets FileDescriptorStoreMax=). A ring's
 * fd goes in under its name (persist_ring_name: "ring/<guest>/<cpu>") and
 * out when its guest goes; after Restart= systemd passes them back with the
 * unit's sockets in LISTEN_FDS, named in LISTEN_FDNAMES.
 *
 * Names tell the passed fds apart: "control" is the control socket's
 * (control.c takes it and leaves the rest alone), "ring/..." and the dump
 * reserves' "reserve/..." (pagepool.h) are taken
 * here. At start-up fdstore_take_rings() runs before control_new(), which
 * clears LISTEN_FDS from the environment.
 *
 * memfds are not pollable: systemd keeps them without watching for
 * EPOLLHUP, so FDPOLL=0 is not needed.
 */
#ifndef VMT_FDSTORE_H
#define VMT_FDSTORE_H

#include <stdbool.h>
#include <stdint.h>

#include "pagepool.h"	/* VMT_RESERVE_FDNAME_PREFIX */

#define VMT_FDSTORE_RING_PREFIX "ring/"

/* Store fd as name: >0 sent, 0 when there is no NOTIFY_SOCKET (not under
 * systemd), -errno. */
int fdstore_push(int fd, const char *name);
/* Drop name's fds from the store; the same returns. */
int fdstore_remove(const char *name);

struct vmt_fdstore_ring {
	char name[256];
	char guest[72];		/* "" for a dump reserve */
	uint32_t cpu;
	int fd;			/* close-on-exec now; the caller's */
	bool reserve;		/* "reserve/<id>": a dump reserve (pagepool.h), not a ring */
};
/*
 * The rings and dump reserves systemd passed (LISTEN_PID is ours, names
 * from LISTEN_FDNAMES): a malloc'd array of *n, NULL when none. Other fds
 * are left where they are and LISTEN_* stay set for control_new(). -errno.
 */
int fdstore_take_rings(struct vmt_fdstore_ring **out, unsigned *n);

#endif
