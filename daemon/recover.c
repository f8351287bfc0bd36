/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "recover.h"

/* A reserve handed back: mapped if it checks out, else refused (and out
 * of the store); its fd is closed with the others (recover_release_reserves). */
static void take_reserve(struct vmt_recover *rc, struct vmt_fdstore_ring *e)
{
	struct vmt_persist_reserve *v = &rc->reserves[rc->nreserves];
	char why[160];
	int r = persist_reserve_open(e->fd, v, why, sizeof(why));

	rc->reserve_fds[rc->nreserves] = e->fd;
	snprintf(rc->reserve_names[rc->nreserves++], VMT_PERSIST_FDNAME_MAX, "%s", e->name);
	if (r < 0) {
		rc->reserves_refused++;
		fdstore_remove(e->name);
		log_warning("the dump reserve handed back (%s) is refused, the pages a dump had sent "
			    "there are lost: %s", e->name, why);
		return;
	}
	log_info("a dump reserve handed back (%s, %llu KiB), kept until the rings are adopted", e->name,
		 (unsigned long long)(v->bytes >> 10));
}

int recover_init(struct vmt_recover *rc)
{
	unsigned k = 0;
	int r;

	memset(rc, 0, sizeof(*rc));
	r = fdstore_take_rings(&rc->v, &rc->n);
	if (r < 0 || !rc->n)
		return r;
	rc->reserves = calloc(rc->n, sizeof(*rc->reserves));
	rc->reserve_names = calloc(rc->n, sizeof(*rc->reserve_names));
	rc->reserve_fds = calloc(rc->n, sizeof(*rc->reserve_fds));
	if (!rc->reserves || !rc->reserve_names || !rc->reserve_fds) {
		recover_free(rc);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < rc->n; i++) {
		if (rc->v[i].reserve) {
			take_reserve(rc, &rc->v[i]);
			continue;
		}
		rc->v[k++] = rc->v[i];
		log_guest(VMT_LOG_INFO, 0, rc->v[i].guest, "cpu%u: a ring handed back (%s), kept "
			  "until the guest's session settles", rc->v[i].cpu, rc->v[i].name);
	}
	rc->n = k;
	return 0;
}

void recover_release_reserves(struct vmt_recover *rc)
{
	for (unsigned i = 0; i < rc->n; i++)
		if (rc->v[i].fd >= 0)
			return;
	for (unsigned i = 0; i < rc->nreserves; i++) {
		close(rc->reserve_fds[i]);
		if (!rc->reserves[i].base)
			continue;	/* refused: out of the store already */
		persist_reserve_close(&rc->reserves[i]);
		/* the store keeps its own copy until told */
		fdstore_remove(rc->reserve_names[i]);
		log_info("the dump reserve handed back (%s) is let go: no ring waits for it",
			 rc->reserve_names[i]);
	}
	rc->nreserves = 0;
}

void recover_free(struct vmt_recover *rc)
{
	for (unsigned i = 0; i < rc->n; i++)
		if (rc->v[i].fd >= 0)
			close(rc->v[i].fd);
	for (unsigned i = 0; i < rc->nreserves; i++) {
		persist_reserve_close(&rc->reserves[i]);
		close(rc->reserve_fds[i]);
	}
	free(rc->v);
	free(rc->reserves);
	free(rc->reserve_names);
	free(rc->reserve_fds);
	rc->v = NULL;
	rc->reserves = NULL;
	rc->reserve_names = NULL;
	rc->reserve_fds = NULL;
	rc->n = rc->nreserves = 0;
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
	recover_release_reserves(rc);
}
