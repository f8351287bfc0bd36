/* SPDX-License-Identifier: MIT */
/* discovery: guests found in watched folders (see discovery.c). */
#ifndef VMT_DISCOVERY_H
#define VMT_DISCOVERY_H

#include <stdbool.h>
#include <stddef.h>

#include "config.h"

struct vmt_manager;
struct vmt_discovery;

int discovery_new(struct vmt_discovery **out, struct vmt_manager *m);
void discovery_free(struct vmt_discovery *d);
/* Look at every discovery folder now. */
void discovery_rescan(struct vmt_discovery *d);
/* "domain-7-web1" (libvirt) or "web1" (vmtraced) -> "web1"; false if not a guest. */
bool discovery_guest_name(enum vmt_layout layout, const char *entry, char *name, size_t n);

#endif
