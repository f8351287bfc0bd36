/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "recover.h"

int recover_init(struct vmt_recover *rc)
{
	int r;

	memset(rc, 0, sizeof(*rc));
	r = fdstore_take_rings(&rc->v, &rc->n);
	if (r < 0)
		return r;
	for (unsigned i = 0; i < rc->n; i++)
		log_guest(VMT_LOG_INFO, 0, rc->v[i].guest, "cpu%u: a ring handed back (%s), kept "
			  "until the guest's session settles", rc->v[i].cpu, rc->v[i].name);
	return 0;
}

void recover_free(struct vmt_recover *rc)
{
	for (unsigned i = 0; i < rc->n; i++)
		if (rc->v[i].fd >= 0)
			close(rc->v[i].fd);
	free(rc->v);
	rc->v = NULL;
	rc->n = 0;
}

bool recover_pending(const struct vmt_recover *rc, const char *guest)
{
	for (unsigned i = 0; rc && i < rc->n; i++)
		if (rc->v[i].fd >= 0 && !strcmp(rc->v[i].guest, guest))
			return true;
	return false;
}

bool recover_pending_cpu(const struct vmt_recover *rc, const char *guest, uint32_t cpu)
{
	for (unsigned i = 0; rc && i < rc->n; i++)
		if (rc->v[i].fd >= 0 && rc->v[i].cpu == cpu && !strcmp(rc->v[i].guest, guest))
			return true;
	return false;
}

int recover_take(struct vmt_recover *rc, const char *guest, uint32_t cpu, uint32_t *cpu_out)
{
	for (unsigned i = 0; rc && i < rc->n; i++) {
		struct vmt_fdstore_ring *e = &rc->v[i];
		int fd = e->fd;

		if (fd < 0 || strcmp(e->guest, guest) || (cpu != UINT32_MAX && e->cpu != cpu))
			continue;
		e->fd = -1;
		if (cpu_out)
			*cpu_out = e->cpu;
		return fd;
	}
	return -ENOENT;
}

void recover_drop(struct vmt_recover *rc, bool (*known)(void *arg, const char *guest), void *arg,
		  const char *why)
{
	for (unsigned i = 0; i < rc->n; i++) {
		struct vmt_fdstore_ring *e = &rc->v[i];

		if (e->fd < 0 || (known && known(arg, e->guest)))
			continue;
		close(e->fd);
		e->fd = -1;
		/* the store keeps its own copy until told: a later crash would
		 * hand it back again */
		fdstore_remove(e->name);
		rc->unclaimed++;
		log_guest(VMT_LOG_NOTICE, 0, e->guest, "cpu%u: the ring handed back is closed: %s",
			  e->cpu, why);
	}
}
