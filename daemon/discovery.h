/* SPDX-License-Identifier: MIT */
/* discovery: guests found in watched folders (see discovery.c). */
#ifndef VMT_DISCOVERY_H
#define VMT_DISCOVERY_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"
#include "guest.h"

struct vmt_discovery;

struct vmt_discovery_ops {
	/* a guest folder guests does not hold yet: the owner makes the guest
	 * and puts it in the list, or says NULL */
	struct vmt_guest *(*add)(void *owner, const struct vmt_guest_conf *gc);
	/* a rescan ended: guests found, gone (present) or moved are as it saw */
	void (*rescanned)(void *owner);
};

/*
 * Watch conf's discovery folders. A guest found there that guests does not
 * hold yet is made with ops->add; discovery marks it discovered, connects
 * it, and says when it is gone.
 */
int discovery_new(struct vmt_discovery **out, sd_event *e, const struct vmt_config *conf,
		  struct vmt_guest_list *guests, const struct vmt_discovery_ops *ops, void *owner);
void discovery_free(struct vmt_discovery *d);
/* Look at every discovery folder now. */
void discovery_rescan(struct vmt_discovery *d);
/* The same, but a guest found is only made, not connected (at start-up:
 * an upgrade's successor takes its session over first, its channels came
 * with it; the others are connected with the configured guests). */
void discovery_find(struct vmt_discovery *d);
/*
 * "domain-7-web1" (libvirt) or "web1" (vmtraced) -> "web1": 1; 0 if the
 * entry is no guest folder (hidden; not domain-<id>-... in the libvirt
 * layout); -EINVAL if it is one but its name is too long for n or has
 * other characters than a guest name's.
 */
int discovery_guest_name(enum vmt_layout layout, const char *entry, char *name, size_t n);
/* The libvirt domain id of a discovered guest whose folder is a libvirt-
 * layout one (domain-<id>-<name>), as of the last rescan; 0 otherwise. */
int discovery_libvirt_id(const struct vmt_discovery *d, const struct vmt_guest *g);
/* Guest folders passed over for their names (each rescan counts again). */
uint64_t discovery_names_refused(const struct vmt_discovery *d);
/* Discovery folders, guest folders and control ports that could not be
 * entered or probed (each rescan counts again); the last one's path and
 * errno into path and *err when there was one. */
uint64_t discovery_unreadable(const struct vmt_discovery *d, char *path, size_t n, int *err);

#endif
