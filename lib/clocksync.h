/* SPDX-License-Identifier: MIT */
/*
 * clocksync: how a guest's trace clock relates to the host's.
 *
 * The daemon measures it with a PTP-like exchange over the control channel
 * (SYNC/SYNCED, docs/PROTOCOL.md): host time t1 at send, guest times t2 at
 * receipt and t3 at reply, host time t4 at receipt. A round is several such
 * probes; the fastest round trips give one sync point: the guest time of the
 * exchange, the offset to add to guest time to get host time, and the round
 * trip that bounds its error. Where KVM's debugfs shows a vCPU's TSC offset
 * and both sides trace in x86-tsc, points come from there instead.
 *
 * The points, the two clocks and the vCPU -> host thread map are kept with
 * every sample and aux file (a CLOCK section), and a merge turns them into
 * trace-cmd's TIME_SHIFT and GUEST options. Pure: no I/O but clock reads.
 */
#ifndef VMT_CLOCKSYNC_H
#define VMT_CLOCKSYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto.h"

/* Points a sample or aux may carry, and a guest keeps in memory. */
#define VMT_SYNC_MAX_POINTS 4096
#define VMT_SYNC_MAX_PROBES 64
#define VMT_SYNC_ALL_CPUS 0xffffffffu

/* X(name, value, text) */
#define VMT_SYNC_METHODS(X)              \
	X(NONE, 0, "none")               \
	X(PTP,  1, "ptp")                \
	X(KVM,  2, "kvm-tsc")

enum vmt_sync_method {
#define X(n, v, t) VMT_SYNC_##n = v,
	VMT_SYNC_METHODS(X)
#undef X
};
const char *sync_method_name(uint32_t m);

struct vmt_sync_point {
	uint64_t guest_ts;	/* guest trace clock when measured */
	int64_t offset;		/* host = guest + offset */
	uint64_t rtt;		/* fastest round trip of the probes kept, ns; 0 for kvm-tsc */
	uint32_t cpu;		/* vCPU it applies to, or VMT_SYNC_ALL_CPUS */
	uint32_t probes;	/* probes the round kept */
};
#define VMT_SYNC_POINT_SIZE 32

struct vmt_clock_info {
	uint32_t method;	/* enum vmt_sync_method */
	char guest_clock[VMT_STR_CLOCK];
	char host_clock[VMT_STR_CLOCK];
	char why[128];		/* why method is NONE, "" otherwise */
	uint32_t qemu_pid;	/* 0 if unknown */
	uint32_t nvcpus;	/* entries in vcpu_tid */
	uint32_t vcpu_tid[VMT_MAX_CPUS];	/* host thread running vCPU i, 0 if unknown */
	uint32_t npoints;
	struct vmt_sync_point *points;	/* ascending guest_ts; owned, free with clock_info_free */
};

void clock_info_free(struct vmt_clock_info *ci);

/* One probe as measured: host t1, t4 and guest t2, t3. */
struct vmt_sync_probe {
	uint64_t t1, t2, t3, t4;
};

/*
 * A sync point from n probes: probes whose round trip is no more than
 * 1.5 x the fastest (and at most the fastest quarter, but at least one) are
 * kept and their offsets' median taken. -EINVAL if no probe is consistent
 * (t4 < t1 or t3 < t2, or the guest took longer than the round trip).
 */
int clocksync_estimate(const struct vmt_sync_probe *p, uint32_t n, struct vmt_sync_point *out);

/*
 * Host time of guest time ts on cpu, as trace-cmd computes it from TIME_SHIFT
 * (linear interpolation between the two nearest points, extrapolation
 * beyond the ends; a single point shifts by its offset). ts unchanged if
 * there is no point.
 */
uint64_t clocksync_to_host(const struct vmt_clock_info *ci, uint32_t cpu, uint64_t ts);

/* trace_clock_source() and trace_clock_now() are in util.h (the agent needs them). */

/*
 * CLOCK section codec, shared by samples and aux files. The put side writes
 * points in the order given; the parse side checks every bound (at most
 * VMT_SYNC_MAX_POINTS, vcpus <= VMT_MAX_CPUS, known method, strings
 * printable) and sorts nothing: points must already ascend by guest_ts.
 */
struct vmt_buf;
int clock_info_put(struct vmt_buf *b, const struct vmt_clock_info *ci);
int clock_info_parse(const uint8_t *p, size_t len, struct vmt_clock_info *ci, char *why, size_t n);

#endif
