/* SPDX-License-Identifier: MIT */
/*
 * lvmeta: what libvirt says of the guests discovery found in its folders.
 * One thread of ours, started once there is such a guest, owns a read-only
 * libvirt connection (made then, remade with backoff when libvirtd goes
 * away) and libvirt's event loop, through which come
 *   - with fleet: on (libvirt_labels, accept label), the fleet's labels
 *     from the domains' metadata (docs/FLEET.md), read and followed as
 *     they change (`virsh metadata --live`);
 *   - with detectors.libvirt_events, the domains' lifecycle events that say
 *     a guest crashed (CRASHED, its detail: PANICKED with a pvpanic device;
 *     STOPPED/CRASHED, libvirt's on_crash destroy, folded into the CRASHED
 *     before it) and their watchdog events (lvmeta-events.c).
 * Every call into libvirt blocks, so none is made on the sd-event loop: the
 * loop hands the thread the guests it wants followed (lvmeta_set) and gets
 * each guest's labels back, checked, and the events, through an eventfd,
 * as calls of the owner's callbacks on the loop. The labels element is
 *   <vmtrace:labels xmlns:vmtrace="https://vmtrace.dev/xmlns/labels/1">
 *     <label key="tenant" value="blue"/>
 *   </vmtrace:labels>
 * and is untrusted input: bounded, parsed without network, DTD or entities,
 * every key and value checked as the configuration's labels are.
 */
#ifndef VMT_LVMETA_H
#define VMT_LVMETA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#define VMT_LVMETA_NS "https://vmtrace.dev/xmlns/labels/1"
#define VMT_LVMETA_XML_MAX 4096	/* bytes of the metadata element */
#define VMT_LVMETA_LABELS_MAX 16	/* labels of one guest */
#define VMT_LVMETA_WHAT_MAX 160	/* what an event says, "domain crashed (panicked)" */

struct vmt_lvmeta;

struct vmt_lvmeta_ops {
	/* guest's labels from its metadata, "k=v,..." ("" for none, or refused);
	 * on the loop, only for a guest the last lvmeta_set() named */
	void (*labels)(void *owner, const char *guest, const char *labels);
	/* libvirt said something of guest that is an incident (what: "domain
	 * crashed (panicked)", ...; time_ns: CLOCK_REALTIME when it came;
	 * crashed: its kernel is gone, not a watchdog), once per event, on the
	 * loop; 0 a dump started, -EBUSY held back by the trigger budgets, else
	 * -errno */
	int (*event)(void *owner, const char *guest, const char *what, uint64_t time_ns,
		     bool crashed);
};

/* A guest to read: its name (libvirt's channel folder may shorten the
 * domain's to 20 characters) and the running domain's id. */
struct vmt_lvmeta_guest {
	const char *name;
	int id;
};

struct vmt_lvmeta_status {
	/* idle (no libvirt guest), connecting, connected, no-library (libvirt
	 * or libxml2 could not be loaded: error says why) */
	const char *state;
	char error[512];	/* the last connection error, "" if none */
	uint64_t reads;		/* metadata read and its labels handed to the loop */
	uint64_t refused;	/* metadata refused (size, XML, a key or value) */
	uint64_t connect_failures;
	uint64_t events;	/* lifecycle and watchdog events of our guests */
	uint64_t incidents;	/* of them, crashes and watchdogs handed to the loop */
	uint64_t dropped;	/* of those, dropped: too many waiting for the loop */
	uint64_t folded;	/* STOPPED/CRASHED after the CRASHED said: the same crash */
	uint64_t fired;		/* dumps started */
	uint64_t suppressed;	/* held back by the trigger budgets */
};

/* labels: read the fleet's labels; events: follow crashes and watchdogs.
 * No thread, no libvirt until lvmeta_set() names a guest. */
int lvmeta_new(struct vmt_lvmeta **out, sd_event *e, const char *uri, bool labels, bool events,
	       const struct vmt_lvmeta_ops *ops, void *owner);
void lvmeta_free(struct vmt_lvmeta *l);
/* The guests to read from now on, all of them (on the loop): new ones and
 * those with a new id are read, the others left. */
int lvmeta_set(struct vmt_lvmeta *l, const struct vmt_lvmeta_guest *g, uint32_t n);
void lvmeta_status(struct vmt_lvmeta *l, struct vmt_lvmeta_status *st);
/*
 * lvmeta-dl.c: libxml2, and libvirt too with virt, loaded (once) for the
 * functions lvmeta calls; on the loop before lvmeta's thread, by lvmeta
 * itself, and by `vmtraced -n` to check a configuration. 0, or -ELIBACC
 * with why ("libvirt.so.0 cannot be loaded: ...").
 */
int lvmeta_dl_open(bool virt, char *why, size_t why_len);

/*
 * lvmeta-xml.c, pure: the metadata element (len bytes, no NUL needed) into
 * "k=v,k=v" in document order (out, n bytes; "" when it holds no label).
 * 0; -E2BIG (over VMT_LVMETA_XML_MAX, too many labels, out too small) or
 * -EINVAL (not the element, or a bad key or value) with why, printable.
 */
int lvmeta_parse(const char *xml, size_t len, char *out, size_t n, char *why, size_t why_len);

#endif
