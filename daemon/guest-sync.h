/* SPDX-License-Identifier: MIT */
/*
 * guest-sync: the clock relation of one guest to the host, measured while it
 * streams (lib/clocksync.h has the method). A round of probes at the start
 * of every session and then every clock_sync.interval; each round gives one
 * point, kept in a fixed ring of VMT_SYNC_MAX_POINTS per guest. A dump takes
 * the points around its window into the sample. Where KVM's debugfs shows
 * the vCPUs' TSC offsets and both sides trace in x86-tsc, points come from
 * there instead.
 */
#ifndef VMT_GUEST_SYNC_H
#define VMT_GUEST_SYNC_H

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "clocksync.h"

struct vmt_guest;
struct vmt_msg;

struct vmt_sync_counters {
	uint64_t rounds;	/* that gave a point */
	uint64_t probes;	/* sent */
	uint64_t timeouts;	/* probes unanswered in time */
	uint64_t bad;		/* answers refused: unknown id, inconsistent times */
};

struct vmt_guest_sync {
	sd_event_source *timer;	/* next probe, next round, or a probe's timeout */
	uint32_t method;	/* enum vmt_sync_method in force */
	char why[128];		/* why none */
	int host_src, guest_src;	/* trace_clock_source() of each side */
	bool waiting;		/* a probe is out */
	uint64_t probe_id, t1;
	uint32_t sent;		/* probes of this round */
	uint32_t answered;
	struct vmt_sync_probe probes[VMT_SYNC_MAX_PROBES];
	struct vmt_sync_point *points;	/* ring, allocated at the first point */
	uint32_t head, count;
	uint64_t rx_time;	/* host clock when the control read returned */
	struct vmt_sync_counters c;
};

/* The session streams: find the method and start the first round. */
void sync_session_start(struct vmt_guest *g);
/* The session ended (disconnect, failure, stop): stop probing, keep the points. */
void sync_session_end(struct vmt_guest *g);
/* Points of the old boot no longer apply (the guest's clock started over). */
void sync_forget(struct vmt_guest *g);
void sync_on_synced(struct vmt_guest *g, const struct vmt_msg *m);
/* Read the host clock now, for the control read that just returned. */
void sync_stamp_rx(struct vmt_guest *g);
/*
 * Clock data for a sample whose pages span guest times [first, last]: the
 * method, both clocks, QEMU's pid and vCPU threads, and the points from
 * the last one before first to the first one after last (all, if none
 * is inside). -ENOMEM.
 */
int sync_clock_info(struct vmt_guest *g, uint64_t first, uint64_t last, struct vmt_clock_info *out);
void sync_free(struct vmt_guest *g);
/* An upgrade's hand-over (guest-upgrade.c): the points held, oldest
 * first, appended to b; their count, or -ENOMEM. */
int sync_points_save(const struct vmt_guest *g, struct vmt_buf *b);
/* The predecessor's n points (p, unaligned), oldest first, kept as if
 * measured here: one out of order is dropped, as push_point() does. */
void sync_points_restore(struct vmt_guest *g, const void *p, uint32_t n);

#endif
