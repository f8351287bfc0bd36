/* SPDX-License-Identifier: MIT */
/*
 * manager-fleet: the fleet's dumps go the way of `vmtracectl dump`
 * (dump_request), with the fleet's token where a control client would be;
 * the fleet module has already checked them against its own budget. The
 * guests discovery found in libvirt-layout folders are handed to lvmeta,
 * whose labels from their domains' metadata go on to the fleet, and whose
 * crash and watchdog events (detectors.libvirt_events) become dumps of
 * their own kind under the trigger budgets.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dlnats.h"
#include "fleet.h"
#include "log.h"
#include "lvmeta.h"
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

static void on_lvmeta_labels(void *owner, const char *guest, const char *labels)
{
	struct vmt_manager *m = owner;

	fleet_set_labels(m->fleet, guest, labels);
}

static int on_lvmeta_event(void *owner, const char *guest, const char *what, uint64_t time_ns,
			   bool crashed)
{
	struct vmt_manager *m = owner;
	struct vmt_guest *g = guest_list_find(&m->guests, guest);
	struct vmt_trigger t = { .kind = VMT_TRIGGER_LIBVIRT, .time_ns = time_ns };
	char *names[1] = { (char *)guest };
	/* a crashed kernel's window is a last word, as a dead QEMU's: the
	 * cooldown does not hold it back (a dump of the last boot, made when
	 * this one started, would) */
	struct vmt_dump_req rq = { .names = names, .n = 1, .trigger = &t, .no_cooldown = crashed };
	pid_t pid;
	int r;

	if (!g)
		return -ENOENT;
	if (!m->conf.libvirt_events.enabled) {
		log_guest(VMT_LOG_INFO, 0, guest, "libvirt: %s (libvirt_events disabled: no dump)", what);
		return -ECANCELED;
	}
	pid = guest_qemu_pid(g);
	t.pid = pid > 0 ? (uint32_t)pid : 0;
	snprintf(t.reason, sizeof(t.reason), "libvirt: %s", what);
	/* a crashed kernel answers no FLUSH, nor pings: not waited for, and
	 * guest_silence does not report it again */
	if (crashed)
		guest_crashed(g);
	r = dump_request(&m->dumps, &rq);
	if (r == 0)
		log_guest(VMT_LOG_WARNING, 0, guest, "%s: dumping it", t.reason);
	else if (r == -EBUSY)
		log_guest(VMT_LOG_NOTICE, 0, guest, "%s: its dump held back by the cooldown or budget",
			  t.reason);
	else
		log_guest(VMT_LOG_ERR, r, guest, "%s: cannot start a dump: %m", t.reason);
	return r;
}

static const struct vmt_lvmeta_ops lvmeta_ops = {
	.labels = on_lvmeta_labels,
	.event = on_lvmeta_event,
};

int manager_check_libraries(const struct vmt_config *c, char *err, size_t err_len)
{
	const struct vmt_fleet_conf *fc = &c->fleet;
	bool labels = fc->enabled && fc->libvirt_labels && (fc->accept & VMT_FLEET_ACCEPT_LABEL);
	char why[400];
	int r;

	if (fc->enabled && (r = dlnats_open(why, sizeof(why))) < 0) {
		snprintf(err, err_len, "fleet: needs libnats and libcrypto: %s (install libnats3.4)", why);
		return r;
	}
	if (!labels && !c->libvirt_events.enabled)
		return 0;
	r = lvmeta_dl_open(true, why, sizeof(why));
	if (r < 0)
		snprintf(err, err_len, "%s: needs libvirt and libxml2: %s (install libvirt0, or turn it off)",
			 c->libvirt_events.enabled ? "detectors.libvirt_events" : "fleet.libvirt_labels", why);
	return r;
}

int manager_fleet_start(struct vmt_manager *m)
{
	const struct vmt_fleet_conf *fc = &m->conf.fleet;
	const struct vmt_lvevents_conf *ec = &m->conf.libvirt_events;
	bool labels, events = ec->enabled;
	int r = fleet_new(&m->fleet, m->event, &m->conf, m->hostname, &fleet_ops, m);

	if (r < 0)
		return r;
	labels = m->fleet && fc->libvirt_labels && (fc->accept & VMT_FLEET_ACCEPT_LABEL);
	if (!labels && !events)
		return 0;
	/* after the privileges are dropped: the thread connects as the
	 * daemon's user, to libvirt's read-only socket; the configuration
	 * makes the two URIs one when both are used */
	r = lvmeta_new(&m->lvmeta, m->event, events ? ec->uri : fc->libvirt_uri, labels, events,
		       &lvmeta_ops, m);
	if (r < 0)
		return r;
	manager_fleet_sync(m);
	return 0;
}

void manager_fleet_sync(struct vmt_manager *m)
{
	struct vmt_lvmeta_guest *v;
	uint32_t n = 0;

	if (!m->lvmeta)
		return;
	v = calloc(m->guests.n ? m->guests.n : 1, sizeof(*v));
	if (!v) {
		log_error("fleet: out of memory for the guests' labels from libvirt");
		return;
	}
	for (uint32_t i = 0; i < m->guests.n; i++) {
		struct vmt_guest *g = m->guests.v[i];
		int id = guest_present(g) ? discovery_libvirt_id(m->discovery, g) : 0;

		if (id > 0)
			v[n++] = (struct vmt_lvmeta_guest){ .name = guest_name(g), .id = id };
		else
			fleet_set_labels(m->fleet, guest_name(g), NULL);	/* gone: no labels */
	}
	if (lvmeta_set(m->lvmeta, v, n) < 0)
		log_error("fleet: out of memory for the guests' labels from libvirt");
	free(v);
}
