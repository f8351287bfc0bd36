/* SPDX-License-Identifier: MIT */
/*
 * upgrade: the hand-over of a running vmtraced to the binary installed at
 * its path (vmtracectl upgrade, SIGUSR2), both sides of it.
 *
 * The old process writes its session state into a sealed memfd: a header
 * (magic, VMT_UPGRADE_LAYOUT, size, CRC32C) and one record per guest that
 * carries a session, each with its own CRC32C, so a damaged record costs
 * its guest only. What a record holds is the guest module's
 * (guest-upgrade.c); this module only frames it. The fds go with it:
 * "state" (the memfd), "chan/<guest>/<port>[/r|/w]" (channels),
 * "ring/<guest>/<cpu>" (the rings' memfds, recover.c takes them) and
 * "control" (the control socket, control.c takes it), moved to 3..
 * without close-on-exec and listed as systemd lists them (LISTEN_PID,
 * LISTEN_FDS, LISTEN_FDNAMES). Then execve(2), same pid; a keeper
 * process sharing the old address space (VMT_UPGRADE_KEEPER) lets it go
 * after the execve, so that its teardown does not hold the successor back.
 *
 * The successor takes "state" and "chan/..." before control_new(), which
 * closes passed fds it does not know; a guest claims its record and its
 * channels before it would connect (guest_adopt_session), or starts
 * afresh. What no guest claims is closed.
 *
 * The state is host-only, in host byte order, and the records copy some
 * structs as they are: bump VMT_UPGRADE_LAYOUT when any of them changes.
 */
#ifndef VMT_UPGRADE_H
#define VMT_UPGRADE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util.h"

#ifndef VMT_UPGRADE_LAYOUT	/* the tests build a successor with another */
#define VMT_UPGRADE_LAYOUT 1u
#endif
#define VMT_UPGRADE_MAGIC 0x0052475055544d56ull	/* "VMTUPGR\0" read little-endian */
#define VMT_UPGRADE_STATE "state"
#define VMT_UPGRADE_CHAN_PREFIX "chan/"
#define VMT_UPGRADE_HOSTPRIV "hostpriv"	/* the host source's helper's socket */
#define VMT_UPGRADE_MAX_FDS 4096
/* the pid of the process that holds the old address space across execve */
#define VMT_UPGRADE_KEEPER_ENV "VMT_UPGRADE_KEEPER"

/* ---- the old process ---- */

struct vmt_upgrade_out {
	struct vmt_buf state;	/* header, then the records */
	uint32_t nguests;
	uint32_t upgrades;	/* hand-overs this process came through (the successor adds its own) */
	int fds[VMT_UPGRADE_MAX_FDS];	/* not ours: the caller's, left open */
	char *names[VMT_UPGRADE_MAX_FDS];
	unsigned nfds;
};

void upgrade_out_init(struct vmt_upgrade_out *o);
void upgrade_out_free(struct vmt_upgrade_out *o);
/* Pass fd under name (printf-like); -E2BIG when there are too many. */
int upgrade_add_fd(struct vmt_upgrade_out *o, int fd, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* One guest's record. */
int upgrade_add_guest(struct vmt_upgrade_out *o, const char *guest, const struct vmt_buf *rec);
/*
 * Seal the state into a memfd (passed as "state"), move every fd to 3..,
 * set LISTEN_* and execve exe with argv. Returns only on failure: -errno,
 * why says what; the fds the process had are as they were.
 */
int upgrade_exec(struct vmt_upgrade_out *o, const char *exe, char *const argv[], char *why,
		 size_t n);

/* ---- the successor ---- */

struct vmt_upgrade_in {
	uint8_t *state;		/* a copy of the memfd's bytes; NULL: none, or refused */
	size_t len;
	struct {
		char name[256];
		int fd;		/* -1: taken */
	} *fds;
	unsigned nfds;
	bool handed_over;	/* a predecessor handed over (a state fd came) */
	char why[256];		/* why the state was refused, "" if it was not */
	uint64_t adopted, refused;	/* guests' sessions */
	uint32_t upgrades;	/* hand-overs this pid went through, this one included; 0: none */
	pid_t keeper;		/* the predecessor's keeper (upgrade.c), a child to reap; 0: none */
	/* the keeper upgrade_reap() reaped, and when (CLOCK_MONOTONIC), until
	 * the owner says so (upgrade_keeper_reaped()); 0: none */
	pid_t keeper_reaped;
	uint64_t keeper_reaped_ns;
};

/* The state and channels passed, if any (LISTEN_* stay for control_new()).
 * -errno only for what cannot go on (memory). */
int upgrade_take(struct vmt_upgrade_in *in);
void upgrade_in_free(struct vmt_upgrade_in *in);
/* guest's record: 0 and *p, *n; -ENOENT none; -EBADMSG (why) damaged. */
int upgrade_record(const struct vmt_upgrade_in *in, const char *guest, const uint8_t **p,
		   size_t *n, char *why, size_t wn);
/* The fd passed under name (printf-like), the caller's; -ENOENT. */
int upgrade_take_fd(struct vmt_upgrade_in *in, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* Close what no guest claimed (logged with its name). */
void upgrade_close_rest(struct vmt_upgrade_in *in);
/* Reap the predecessor's keeper once it is done tearing its address
 * space down (never waits). */
void upgrade_reap(struct vmt_upgrade_in *in);
/* The keeper reaped since the last call, and when: its pid (and *ns), or
 * 0. It may be reaped as early as upgrade_take(), before a log is up. */
pid_t upgrade_keeper_reaped(struct vmt_upgrade_in *in, uint64_t *ns);
/* Is name one of the fds this module takes (control.c leaves them)? */
bool upgrade_fd_name(const char *name);

#endif
