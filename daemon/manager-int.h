/* SPDX-License-Identifier: MIT */
/*
 * manager-int: what the manager's files (manager.c, manager-reload.c,
 * manager-ctl.c) share. Not for other modules.
 */
#ifndef VMT_MANAGER_INT_H
#define VMT_MANAGER_INT_H

#include "manager.h"

#include "discovery.h"

/* what discovery tells the manager: a guest to make, a rescan done */
extern const struct vmt_discovery_ops manager_discovery_ops;
/* The detectors, for the configuration in force. */
int manager_probe_new(struct vmt_manager *m);
/* The host's own source, with host.enabled, as the guest named "host". */
void manager_start_host(struct vmt_manager *m);
/* The compressor's worker threads: record.compress_threads, or from the CPUs. */
uint32_t manager_compress_threads(const struct vmt_manager *m);
/* The successor: sessions handed over, taken before the guests connect. */
void manager_upgrade_adopt(struct vmt_manager *m);
/* A successor: are the detectors and the host source set up once the
 * sessions are taken over (not before, as at a start)? */
bool manager_upgrade_later(const struct vmt_manager *m);
/* Set them up on the loop, once the first reads are done. */
void manager_upgrade_schedule_rest(struct vmt_manager *m);
/* The predecessor's keeper, if reaped since: said in the log, once. */
void manager_keeper_say(struct vmt_manager *m);
/* Hand over from the loop's next turn (a client's answer sent first),
 * tried again while refused with EBUSY (for 5 s); refusals are logged. */
void manager_upgrade_soon(struct vmt_manager *m);
/* STATUS= for systemd. */
void manager_notify_status(struct vmt_manager *m);

/* manager-fleet.c: the fleet, with fleet: in the configuration (fleet.h),
 * and its labels from libvirt (lvmeta.h) */
int manager_fleet_start(struct vmt_manager *m);
/* The guests whose labels libvirt gives, after discovery or a reload
 * changed the list: lvmeta reads the new ones, the others lose theirs. */
void manager_fleet_sync(struct vmt_manager *m);

#endif
