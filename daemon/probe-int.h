/* SPDX-License-Identifier: MIT */
/*
 * probe-int: inside the probe module. probe.c owns the skeleton (loading,
 * attaching, the ring buffer, status); probe-maps.c keeps the maps that
 * say whom the detectors watch in step with the guests, given their fds.
 */
#ifndef VMT_PROBE_INT_H
#define VMT_PROBE_INT_H

#include <stdint.h>

#include "guest.h"
#include "sample.h"	/* VMT_NAME_MAX */

struct vmt_probe_maps {
	int pids_fd, tids_fd, subjects_fd;	/* -1 until the skeleton loads */
	/* guest ids in the maps -> names; an id outlives its guest's entries,
	 * so a death record that comes after the disconnect still has a name */
	char (*names)[VMT_NAME_MAX];
	uint32_t nnames;
	uint32_t npids, ntids;
	uint64_t *bits;		/* what the subjects map holds */
};

int probe_maps_init(struct vmt_probe_maps *m);
void probe_maps_free(struct vmt_probe_maps *m);
/* Write the guests' QEMU processes and threads into the maps. */
void probe_maps_sync(struct vmt_probe_maps *m, const struct vmt_guest_list *l);
/* The guest an event's id names; NULL once the id is unknown. */
const char *probe_maps_guest(const struct vmt_probe_maps *m, uint32_t id);

#endif
