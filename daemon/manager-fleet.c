/* SPDX-License-Identifier: MIT */
/*
 * manager-fleet: the fleet's dumps go the way of `vmtracectl dump`
 * (dump_request), with the fleet's token where a control client would be;
 * the fleet module has already checked them against its own budget.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fleet.h"
#include "log.h"
#include "manager-int.h"
#include "util.h"

static int on_fleet_dump(void *owner, const struct vmt_fleet_dump *d)
{
	struct vmt_manager *m = owner;
	struct vmt_trigger t = { .kind = VMT_TRIGGER_CONTROL, .time_ns = now_realtime_ns() };
	struct vmt_dump_req rq = { 0 };

	snprintf(t.reason, sizeof(t.reason), "%s", d->reason);
	for (uint32_t i = 0; i < d->n; i++)
		if (!guest_list_find(&m->guests, d->names[i]))
			return -ENOENT;
	rq.names = d->names;
	rq.n = d->n;
	rq.trigger = &t;
	rq.window_ns = d->window_ns;
	rq.post_ns = d->post_ns;
	/* dump.c keeps the client as an opaque handle and gives it back in
	 * on_dump_answer, where the fleet claims its own tokens */
	rq.client = (struct vmt_client *)d->token;
	return dump_request(&m->dumps, &rq);
}

static const struct vmt_fleet_ops fleet_ops = {
	.dump = on_fleet_dump,
};

int manager_fleet_start(struct vmt_manager *m)
{
	return fleet_new(&m->fleet, m->event, &m->conf, m->hostname, &fleet_ops, m);
}
