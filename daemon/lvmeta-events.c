/* SPDX-License-Identifier: MIT */
/*
 * lvmeta-events: libvirt's word that a guest crashed (lvmeta.h). On the
 * thread, libvirt's callbacks queue what is an incident (bounded: more
 * than LV_EVENTS_MAX waiting are dropped and counted); on the loop, each
 * goes to the owner once. A pvpanic device (<panic model='isa'/>) makes a
 * guest's panic a CRASHED event (detail PANICKED); with on_crash destroy,
 * libvirt then stops the domain (STOPPED, detail CRASHED): the same crash,
 * folded into the first.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "lvmeta-int.h"
#include "util.h"

static const char *crash_detail(int detail)
{
	switch (detail) {
	case VIR_DOMAIN_EVENT_CRASHED_PANICKED:
		return "panicked";
	case VIR_DOMAIN_EVENT_CRASHED_CRASHLOADED:
		return "panicked, a crash kernel loaded";
	default:
		return "no detail";
	}
}

static const char *watchdog_action(int action)
{
	static const char *const names[] = {
		[VIR_DOMAIN_EVENT_WATCHDOG_NONE] = "none",
		[VIR_DOMAIN_EVENT_WATCHDOG_PAUSE] = "pause",
		[VIR_DOMAIN_EVENT_WATCHDOG_RESET] = "reset",
		[VIR_DOMAIN_EVENT_WATCHDOG_POWEROFF] = "poweroff",
		[VIR_DOMAIN_EVENT_WATCHDOG_SHUTDOWN] = "shutdown",
		[VIR_DOMAIN_EVENT_WATCHDOG_DEBUG] = "debug",
		[VIR_DOMAIN_EVENT_WATCHDOG_INJECTNMI] = "inject-nmi",
	};

	return action >= 0 && (size_t)action < ARRAY_SIZE(names) && names[action] ? names[action]
										   : "unknown";
}

/* Under the lock. */
static void push_event(struct vmt_lvmeta *l, const struct lv_guest *g, const char *what,
		       bool crashed)
{
	struct lv_event *e;

	l->ev_incidents++;
	if (l->nevents >= LV_EVENTS_MAX || !(e = calloc(1, sizeof(*e)))) {
		l->ev_dropped++;	/* said on the loop */
		return;
	}
	snprintf(e->name, sizeof(e->name), "%s", g->name);
	snprintf(e->what, sizeof(e->what), "%s", what);
	e->id = g->id;
	e->time_ns = now_realtime_ns();
	e->crashed = crashed;
	*l->e_tail = e;
	l->e_tail = &e->next;
	l->nevents++;
}

static void on_lifecycle(virConnectPtr conn, virDomainPtr dom, int event, int detail, void *opaque)
{
	struct vmt_lvmeta *l = opaque;
	struct lv_guest *g;
	char what[VMT_LVMETA_WHAT_MAX] = "";
	int id;

	pthread_mutex_lock(&l->lock);
	g = lv_guest_of(l, dom);
	if (!g) {
		pthread_mutex_unlock(&l->lock);
		return;
	}
	l->ev_seen++;
	id = g->id > 0 ? g->id : -1;
	if (event == VIR_DOMAIN_EVENT_CRASHED) {
		g->crashed_id = id;
		snprintf(what, sizeof(what), "domain crashed (%s)", crash_detail(detail));
	} else if (event == VIR_DOMAIN_EVENT_STOPPED && detail == VIR_DOMAIN_EVENT_STOPPED_CRASHED) {
		if (g->crashed_id && g->crashed_id == id)
			l->ev_folded++;	/* on_crash destroy after the CRASHED said */
		else
			snprintf(what, sizeof(what), "domain stopped: it crashed");
		g->crashed_id = 0;
	} else if (event == VIR_DOMAIN_EVENT_STARTED) {
		g->crashed_id = 0;
	}
	if (what[0])
		push_event(l, g, what, true);
	pthread_mutex_unlock(&l->lock);
	if (what[0])
		lv_wake_loop(l);
}

static void on_watchdog(virConnectPtr conn, virDomainPtr dom, int action, void *opaque)
{
	struct vmt_lvmeta *l = opaque;
	struct lv_guest *g;
	char what[VMT_LVMETA_WHAT_MAX];

	pthread_mutex_lock(&l->lock);
	g = lv_guest_of(l, dom);
	if (g) {
		l->ev_seen++;
		snprintf(what, sizeof(what), "domain watchdog fired (action %s)",
			 watchdog_action(action));
		push_event(l, g, what, false);
	}
	pthread_mutex_unlock(&l->lock);
	if (g)
		lv_wake_loop(l);
}

int lv_events_register(struct vmt_lvmeta *l)
{
	l->life_cb = virConnectDomainEventRegisterAny(l->conn, NULL, VIR_DOMAIN_EVENT_ID_LIFECYCLE,
						      VIR_DOMAIN_EVENT_CALLBACK(on_lifecycle), l,
						      NULL);
	if (l->life_cb < 0)
		return -1;
	l->dog_cb = virConnectDomainEventRegisterAny(l->conn, NULL, VIR_DOMAIN_EVENT_ID_WATCHDOG,
						     VIR_DOMAIN_EVENT_CALLBACK(on_watchdog), l, NULL);
	return l->dog_cb < 0 ? -1 : 0;
}

void lv_events_deregister(struct vmt_lvmeta *l)
{
	if (l->life_cb >= 0)
		virConnectDomainEventDeregisterAny(l->conn, l->life_cb);
	if (l->dog_cb >= 0)
		virConnectDomainEventDeregisterAny(l->conn, l->dog_cb);
	l->life_cb = l->dog_cb = -1;
}

void lv_events_deliver(struct vmt_lvmeta *l)
{
	struct lv_event *e, *next;
	uint64_t dropped, now = now_monotonic_ns();

	pthread_mutex_lock(&l->lock);
	e = l->e_head;
	l->e_head = NULL;
	l->e_tail = &l->e_head;
	l->nevents = 0;
	dropped = l->ev_dropped;
	pthread_mutex_unlock(&l->lock);
	if (dropped != l->ev_dropped_said &&
	    (!l->ev_drop_log_ns || now - l->ev_drop_log_ns > LV_LOG_EVERY_NS)) {
		log_warning("libvirt: %llu crash or watchdog event(s) dropped, more than %d waiting "
			    "(said once a minute)",
			    (unsigned long long)(dropped - l->ev_dropped_said), LV_EVENTS_MAX);
		l->ev_dropped_said = dropped;
		l->ev_drop_log_ns = now;
	}
	/* not only the guests of the set: a stopped domain's folder may have
	 * left it already, its guest (and rings) stays */
	for (; e; e = next) {
		int r;

		next = e->next;
		r = l->ops->event(l->owner, e->name, e->what, e->time_ns, e->crashed);
		pthread_mutex_lock(&l->lock);
		if (r == 0)
			l->ev_fired++;
		else if (r == -EBUSY)
			l->ev_suppressed++;
		pthread_mutex_unlock(&l->lock);
		free(e);
	}
}

void lv_events_free(struct vmt_lvmeta *l)
{
	while (l->e_head) {
		struct lv_event *n = l->e_head->next;

		free(l->e_head);
		l->e_head = n;
	}
	l->e_tail = &l->e_head;
}
