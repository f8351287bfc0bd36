/* SPDX-License-Identifier: MIT */
/*
 * probe: the BPF detectors (bpf/detect.bpf.c). Loads what the config
 * enables and the host allows, one detector at a time when the whole set
 * does not load, so a missing privilege, BTF or tracepoint (no kvm module)
 * costs only the detectors that need it (logged once, with the reason).
 * Keeps the pids/tids maps in step with the guests (QEMU pid from the
 * socket peer, a pidfile: or libvirt's pidfile; vCPU threads from
 * /proc/PID/task/N/comm "CPU n/KVM"), reads the ring buffer in the event
 * loop, and turns each record into a BPF trigger (manager_request_dump).
 * probe.c is the only file that includes the skeleton; probe-maps.c keeps
 * the maps in step, given their fds (probe-int.h).
 */
#ifndef VMT_PROBE_H
#define VMT_PROBE_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "guest.h"

struct vmt_probe;

/* What the detectors are given: where to run, what to watch, whom to tell. */
struct vmt_probe_env {
	sd_event *event;
	const struct vmt_config *conf;	/* the daemon's, as reloads change it */
	const struct vmt_guest_list *guests;	/* whose QEMU the detectors follow */
	/* A detector fired: a dump of that guest (NULL: of every guest);
	 * -EBUSY when its owner's trigger policy held it back. last_word: the
	 * guest's QEMU is gone (process_death), nothing of it can come later. */
	int (*fire)(void *owner, const char *guest, const struct vmt_trigger *t, bool last_word);
	/* guest's QEMU exited with status 0: was it no clean shutdown (its
	 * agent, which says BYE, had not said it)? Asked once per exit. */
	bool (*exit_unclean)(void *owner, const char *guest);
	void *owner;
};

struct vmt_probe_detector {
	const char *name;	/* "process_death", ... */
	bool enabled;		/* by the config */
	bool loaded;		/* loaded and attached */
	char reason[160];	/* why not, when enabled && !loaded */
	uint64_t events;	/* tracepoint hits on registered subjects */
	uint64_t seen;		/* anomalies over the threshold */
	uint64_t fired;		/* triggers the manager took */
	uint64_t suppressed;	/* by the BPF minimum interval + by the manager */
	uint64_t dropped;	/* ring buffer full */
	uint64_t filtered;	/* left out: process_death's clean exits (a status 0
				 * after the agent's BYE, or from an agent without BYE) */
};

struct vmt_probe_status {
	bool built;		/* false: this vmtraced was built without BPF */
	uint32_t pids, tids;	/* registered now */
	struct vmt_probe_detector det[VMT_DET_COUNT];
};

/*
 * Load and attach the detectors env->conf enables; 0 even when none could
 * load (the daemon works without them), -ENOMEM. *out may be NULL-freed.
 * env is copied.
 */
int probe_new(struct vmt_probe **out, const struct vmt_probe_env *env);
void probe_free(struct vmt_probe *p);
/*
 * Guests connected, went away, were added or removed: refresh the
 * pids/tids maps at the event loop's next turn, so it is safe to call
 * while the guest list is being changed (also done every 2 s for new threads
 * and pidfiles). _now does it at once. p may be NULL.
 */
void probe_sync_guests(struct vmt_probe *p);
void probe_sync_guests_now(struct vmt_probe *p);
/* p may be NULL: all detectors "not loaded". */
void probe_status(struct vmt_probe *p, struct vmt_probe_status *st);

#endif
