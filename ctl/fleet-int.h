/* SPDX-License-Identifier: MIT */
/* vmtracectl fleet's own: what fleet dump (fleet.c) and fleet fetch
 * (fleet-fetch.c) share. */
#ifndef VMT_CTL_FLEET_INT_H
#define VMT_CTL_FLEET_INT_H

#include "dlnats.h"

#include "config.h"

#define FLEET_CONF_DEFAULT "/etc/vmtraced/vmtraced.yaml"

/* The fleet: block of path into c; -errno with a message printed. */
int fleet_load_conf(const char *path, struct vmt_config *c);
/* Connected to c's servers as the daemon would be (natsconn.h); -errno with
 * a message printed. */
int fleet_connect(const struct vmt_fleet_conf *c, natsConnection **nc);
int fleet_fetch(int argc, char **argv);

#endif
