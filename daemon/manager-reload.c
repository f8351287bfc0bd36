/* SPDX-License-Identifier: MIT */
/*
 * manager-reload: SIGHUP and `vmtracectl reload`. The file is read and
 * checked first; a configuration that does not parse or resolve is refused
 * and the running one kept. Then guests whose settings did not change keep
 * their sessions and rings, new ones start, removed ones stop; discovered
 * guests stay unless a configured one takes their name; the host source
 * stays if host: did not change; the detectors load again if theirs did.
 * What only a new process can take (sandbox, dump_reserve, the
 * fleet's connection and the configuration's label subjects it subscribes
 * to; libvirt's labels it follows in place, lvmeta.h) is
 * taken by handing over to one that reads the file, as an upgrade does;
 * what only a restart can change (control_socket, user; the detectors
 * when not running as root) is said and kept.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "control.h"
#include "discovery.h"
#include "hostsrc.h"
#include "log.h"
#include "manager-int.h"
#include "probe.h"

/* What the reload does to the guest list. */
struct reload_count {
	uint32_t kept, added, removed;
	uint32_t kept_discovered;	/* of kept: found by discovery */
	bool host_kept;
	char later[64];	/* what only a new process takes, changed: "sandbox, dump_reserve" */
};

static void add_later(struct reload_count *c, const char *what)
{
	size_t n = strlen(c->later);

	snprintf(c->later + n, sizeof(c->later) - n, "%s%s", n ? ", " : "", what);
}

static bool host_conf_equal(const struct vmt_host_conf *a, const struct vmt_host_conf *b)
{
	return a->enabled == b->enabled && !strcmp(a->events, b->events) &&
	       !strcmp(a->clock, b->clock) && a->ring_size == b->ring_size &&
	       a->buffer_kb == b->buffer_kb && a->qemu_only == b->qemu_only;
}

/* The labels c configures for guest name ("" for none, or no such guest). */
static const char *labels_of(const struct vmt_config *c, const char *name)
{
	for (uint32_t i = 0; i < c->nguests; i++)
		if (!strcmp(c->guests[i].name, name))
			return c->guests[i].labels;
	return "";
}

/* Whether every configured guest carries the same fleet labels in a and b
 * (the subjects a fleet host subscribes to). */
static bool labels_equal(const struct vmt_config *a, const struct vmt_config *b)
{
	for (uint32_t i = 0; i < a->nguests; i++)
		if (strcmp(a->guests[i].labels, labels_of(b, a->guests[i].name)))
			return false;
	for (uint32_t i = 0; i < b->nguests; i++)
		if (strcmp(b->guests[i].labels, labels_of(a, b->guests[i].name)))
			return false;
	return true;
}

/* Read and resolve the file into nc; what takes a restart stays as it is. */
static int reload_read(struct vmt_manager *m, struct vmt_config *nc, struct reload_count *c,
		       char *err, size_t err_len)
{
	int r = config_load(nc, m->config_path, err, err_len);

	if (r == 0) {
		r = manager_resolve_config(nc, err, err_len);
		if (r < 0)
			config_free(nc);
	}
	if (r < 0)
		return r;
	if (strcmp(nc->control_socket, m->conf.control_socket)) {
		log_warning("control_socket changed: the new path takes effect at the next start");
		memcpy(nc->control_socket, m->conf.control_socket, sizeof(nc->control_socket));
	}
	if (strcmp(nc->user, m->conf.user)) {
		/* what becoming a user takes was given up after start-up (priv.h),
		 * and a successor keeps the identity it is given (manager_run) */
		log_warning("user changed to '%s': it takes effect at the next start (this "
			    "process gave up the capabilities to change user, as would a new one "
			    "it hands over to)", nc->user);
		memcpy(nc->user, m->conf.user, sizeof(nc->user));
	}
	/* these a new process takes: a hand-over once the rest is in force */
	if (nc->sandbox != m->conf.sandbox) {
		add_later(c, "sandbox");
		nc->sandbox = m->conf.sandbox;
	}
	/*
	 * As a user other than root (the unit's User=, or user:), the
	 * detectors cannot be set up again: their tracepoint ids are root's
	 * files, and the capabilities that reached them were given up after
	 * start-up. The host source can: its helper (hostpriv.h) sets it up.
	 */
	if (geteuid() != 0 && memcmp(&nc->detectors, &m->conf.detectors, sizeof(nc->detectors))) {
		log_warning("detectors changed: they take effect at the next start (running as uid "
			    "%u, without root's files)", (unsigned)geteuid());
		memcpy(nc->detectors, m->conf.detectors, sizeof(nc->detectors));
	}
	/* the fleet keeps its connection and subscriptions (fleet.h): a new
	 * fleet: or new labels are a new process's, handed over to */
	if (memcmp(&nc->fleet, &m->conf.fleet, sizeof(nc->fleet)) ||
	    (nc->fleet.enabled && !labels_equal(nc, &m->conf))) {
		add_later(c, "fleet");
		nc->fleet = m->conf.fleet;
		nc->retention.hold_unuploaded = m->conf.retention.hold_unuploaded;
	}
	/* libvirt's events: turned off in place (no dump), on or to another
	 * URI only by a new process, whose connection registers them */
	if (strcmp(nc->libvirt_events.uri, m->conf.libvirt_events.uri) ||
	    (nc->libvirt_events.enabled && !m->conf.libvirt_events.enabled)) {
		add_later(c, "libvirt_events");
		nc->libvirt_events = m->conf.libvirt_events;
	}
	if (nc->rec.compress_threads != m->conf.rec.compress_threads) {
		add_later(c, "record.compress_threads");
		nc->rec.compress_threads = m->conf.rec.compress_threads;
	}
	if (nc->dump_reserve != m->conf.dump_reserve) {
		add_later(c, "dump_reserve");
		nc->dump_reserve = m->conf.dump_reserve;
	}
	return 0;
}

static bool name_taken(struct vmt_guest *const *ng, uint32_t n, const struct vmt_guest *g,
		       bool by_another)
{
	for (uint32_t k = 0; k < n; k++)
		if (!strcmp(guest_name(ng[k]), guest_name(g)) && (!by_another || ng[k] != g))
			return true;
	return false;
}

static bool listed(struct vmt_guest *const *ng, uint32_t n, const struct vmt_guest *g)
{
	for (uint32_t k = 0; k < n; k++)
		if (ng[k] == g)
			return true;
	return false;
}

/* The new guest list: configured guests kept or made (fresh[k] for ng[k]),
 * discovered ones and the host source carried over; the others stopped
 * and freed. */
static uint32_t reload_guests(struct vmt_manager *m, const struct vmt_config *nc,
			      struct vmt_guest **ng, bool *fresh, struct reload_count *c)
{
	uint32_t n = 0;
	int r;

	for (uint32_t i = 0; i < nc->nguests; i++) {
		struct vmt_guest *old = manager_find_guest(m, nc->guests[i].name);

		if (old && !guest_discovered(old) && config_guest_equal(guest_conf(old), &nc->guests[i])) {
			/* a new pidfile changes what the detectors watch, not the
			 * rings; the codec and level, the next batch compressed */
			guest_reconf(old, &nc->guests[i]);
			ng[n++] = old;
			c->kept++;
			continue;
		}
		r = guest_new(&m->genv, &nc->guests[i], &ng[n]);
		if (r < 0) {
			log_error_errno(r, "reload: guest %s: %m", nc->guests[i].name);
			continue;
		}
		fresh[n++] = true;
		c->added++;
	}
	/* discovered guests stay unless a configured one took the name */
	for (uint32_t i = 0; i < m->guests.n; i++) {
		struct vmt_guest *g = m->guests.v[i];

		if (guest_discovered(g) && !name_taken(ng, n, g, true)) {
			ng[n++] = g;
			c->kept++;
			c->kept_discovered++;
		}
	}
	/* the host source keeps its instance and rings if host: did not change */
	for (uint32_t i = 0; i < m->guests.n; i++) {
		struct vmt_guest *g = m->guests.v[i];

		if (hostsrc_is(g) && !name_taken(ng, n, g, false) &&
		    host_conf_equal(&m->conf.host, &nc->host)) {
			ng[n++] = g;
			c->host_kept = true;
		}
	}
	for (uint32_t i = 0; i < m->guests.n; i++) {
		struct vmt_guest *g = m->guests.v[i];

		if (listed(ng, n, g))
			continue;
		guest_stop(g);
		dump_guest_gone(&m->dumps, g);
		guest_free(g);
		c->removed++;
	}
	return n;
}

/* The new configuration in force, and what follows from it. */
static void reload_apply(struct vmt_manager *m, struct vmt_config *nc, const bool *fresh,
			 const struct reload_count *c)
{
	bool detectors_changed = memcmp(&m->conf.detectors, &nc->detectors, sizeof(nc->detectors)) != 0;
	bool state_moved = strcmp(m->conf.state_dir, nc->state_dir) != 0;

	config_free(&m->conf);
	m->conf = *nc;
	m->mem.max = m->conf.memory_max;
	if (state_moved) {
		/* SAMPLES lists the new folder once a retention pass has seen it */
		sindex_free(&m->samples);
		dump_submit_retention(&m->dumps);
	}
	if (detectors_changed) {
		probe_free(m->probe);
		m->probe = NULL;
		if (manager_probe_new(m) < 0)
			log_error("reload: the detectors could not be set up again");
	}
	probe_sync_guests(m->probe);
	for (uint32_t i = 0; i < m->guests.n; i++)
		if (fresh[i])
			guest_connect(m->guests.v[i]);
	if (!c->host_kept)
		manager_start_host(m);	/* logs why it cannot */
	if (m->conf.ndiscovery && !m->discovery &&
	    discovery_new(&m->discovery, m->event, &m->conf, &m->guests, &manager_discovery_ops,
			  m) < 0)
		log_error("cannot watch the discovery folders");
	discovery_rescan(m->discovery);
	manager_fleet_sync(m);	/* a discovered guest a configured one replaced */
	control_forget_access(m->control);	/* the control groups may have changed */
}

/*
 * What only a new process takes (its system call filter, the reserve
 * allocated at start, the fleet's connection) is taken by handing over to one that reads
 * the file, as an upgrade does, from the loop: the client's answer goes
 * first. Where no hand-over can be made, they wait for the next start.
 */
static void reload_hand_over(struct vmt_manager *m, const struct reload_count *c)
{
	const char *what = c->later;
	char why[512];
	int r = manager_upgrade_check(m, why, sizeof(why));

	if (r < 0 && r != -EBUSY) {
		log_warning("%s changed: no hand-over (%s), they take effect at the next start", what,
			    why);
		return;
	}
	log_notice("%s changed: handing over to a new vmtraced that reads them", what);
	manager_upgrade_soon(m);
}

int manager_reload(struct vmt_manager *m, char *err, size_t err_len)
{
	struct reload_count c = { 0 };
	struct vmt_config nc;
	struct vmt_guest **ng;
	bool *fresh;
	uint32_t n;
	int r;

	sd_notify(0, "RELOADING=1");
	r = reload_read(m, &nc, &c, err, err_len);
	if (r < 0) {
		log_error("reload refused, keeping the running configuration: %s", err);
		sd_notify(0, "READY=1");
		return r;
	}
	ng = calloc(nc.nguests + m->guests.n + 1, sizeof(*ng));
	fresh = calloc(nc.nguests + m->guests.n + 1, sizeof(*fresh));
	if (!ng || !fresh) {
		free(ng);
		free(fresh);
		config_free(&nc);
		snprintf(err, err_len, "out of memory");
		sd_notify(0, "READY=1");
		return -ENOMEM;
	}
	n = reload_guests(m, &nc, ng, fresh, &c);
	free(m->guests.v);
	m->guests.v = ng;
	m->guests.n = n;
	reload_apply(m, &nc, fresh, &c);
	free(fresh);
	if (c.kept_discovered)
		log_notice("configuration reloaded: %u guest(s) kept (%u discovered), %u started, "
			   "%u removed", c.kept, c.kept_discovered, c.added, c.removed);
	else
		log_notice("configuration reloaded: %u guest(s) kept, %u started, %u removed", c.kept,
			   c.added, c.removed);
	sd_notify(0, "READY=1");
	manager_notify_status(m);
	if (c.later[0])
		reload_hand_over(m, &c);
	return 0;
}
