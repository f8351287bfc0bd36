/* SPDX-License-Identifier: MIT */
/*
 * priv: what vmtraced keeps of root's privilege once it is set up. Every
 * guest is an attacker, and this process parses what they all send: after
 * start-up (BPF programs loaded, tracefs instance made, control socket
 * bound) it keeps only the capabilities the configuration needs from then
 * on, in every set including the bounding set, and can never regain any
 * (no_new_privs). Which ones and why: vmtraced(8), PRIVILEGE.
 */
#ifndef VMT_PRIV_H
#define VMT_PRIV_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"

/* The capabilities (a mask of CAP_* bits) the configuration needs after
 * start-up. */
uint64_t priv_needed(const struct vmt_config *conf);

/*
 * Keep only the capabilities priv_needed() names, in this thread, before
 * any other thread starts; with conf->user, first give the state folder to
 * that user and become it (its groups from the group database). Without
 * privilege to begin with (not root), there is nothing to drop: 0, but a
 * user then cannot be switched to. -errno if a set could not be changed or
 * the user not become (the caller must not go on with more than it asked
 * for).
 */
int priv_drop(const struct vmt_config *conf);

/* Whether this process could still become another user (CAP_SETUID,
 * CAP_SETGID and CAP_CHOWN permitted): after priv_drop() it cannot, and
 * neither can a process it hands over to. */
bool priv_can_change_user(void);

/* In the host source's helper (hostpriv.h), forked before priv_drop():
 * keep only CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_SYSLOG of what
 * it has, in every set, undumpable, no_new_privs; it keeps its uid. */
int priv_helper(void);

#endif
