/* SPDX-License-Identifier: MIT */
/*
 * detect: what bpf/detect.bpf.c and daemon/probe.c share. The daemon
 * registers each guest's QEMU process (tgid -> guest) and its vCPU threads
 * (tid -> guest, vCPU); the programs measure those subjects only (the OOM
 * detector may watch every process) and send one vmt_detect_event per
 * anomaly that gets past the per-detector minimum interval. Plain __u32 /
 * __u64 so both sides compile it.
 */
#ifndef VMT_DETECT_H
#define VMT_DETECT_H

/* enum vmt_detector, VMT_DET_*: the one list, shared with the config */
#include "../lib/detectors.h"

#define VMT_DETECT_MAX_PIDS 4096
#define VMT_DETECT_MAX_TIDS 65536
/* subjects map: one bit per pid/tid up to pid_max's ceiling (2^22), set
 * for every key of pids and tids, so a hash lookup is paid only by them */
#define VMT_DETECT_BITMAP_WORDS (1u << 16)
#define VMT_DETECT_NO_GUEST 0xffffffffu
#define VMT_DETECT_NO_VCPU 0xffffffffu

/* pids map: tgid -> this */
struct vmt_detect_pid {
	__u32 guest;		/* the daemon's guest id */
	__u32 pad;
};

/* tids map: tid -> this; the programs keep their timestamps in it */
struct vmt_detect_tid {
	__u32 guest;
	__u32 vcpu;		/* VMT_DETECT_NO_VCPU: a thread of an unnamed QEMU */
	__u64 wake_ns;		/* became runnable, 0 = running or asleep */
	__u64 exit_ns;		/* kvm_exit seen, 0 = in the guest or not a vCPU */
	__u32 exit_reason;
	__u32 pad;
};

/* Per CPU, per detector (stats map): summed by the daemon. */
struct vmt_detect_counters {
	__u64 events;		/* tracepoint hits on a registered subject */
	__u64 anomalies;	/* over the threshold */
	__u64 emitted;		/* sent to the ring buffer */
	__u64 suppressed;	/* held back by the minimum interval */
	__u64 dropped;		/* ring buffer full */
	__u64 filtered;		/* left out by a setting (none in BPF now) */
};

/* One anomaly. time_ns is CLOCK_MONOTONIC (bpf_ktime_get_ns). */
struct vmt_detect_event {
	__u64 time_ns;
	__u64 value;		/* ns measured; PROCESS_DEATH: the exit code; OOM: total_vm pages */
	__u64 threshold;	/* ns, 0 if none */
	__u32 detector;		/* enum vmt_detector */
	__u32 guest;		/* VMT_DETECT_NO_GUEST: OOM of an unregistered process */
	__u32 pid;		/* tgid */
	__u32 tid;
	__u32 vcpu;
	__u32 extra;		/* PROCESS_DEATH: signal (0 = exit); KVM_EXIT: exit reason */
	char comm[16];
};

#endif
