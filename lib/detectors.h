/* SPDX-License-Identifier: MIT */
/*
 * detectors: the one list of the BPF detectors. bpf/detect.h (so the BPF
 * programs, built with clang -target bpf) and user space (the config, the
 * probe, status) all take it from here, so it holds nothing but the
 * preprocessor and enums: no include.
 *
 * X(ID, name, settings, threshold_ms, min_interval_ms)
 *   name      its key under detectors: in vmtraced.yaml, and in status
 *   settings  VMT_DETS_*: what it takes beyond enabled and min_interval
 *   threshold_ms, min_interval_ms   the defaults (0: none)
 * Append only: the programs and the daemon number events by this order.
 */
#ifndef VMT_DETECTORS_H
#define VMT_DETECTORS_H

#define VMT_DETECTORS(X)                                                        \
	X(PROCESS_DEATH,   "process_death",   VMT_DETS_CLEAN_EXIT,  0,   0)    \
	X(VCPU_STARVATION, "vcpu_starvation", VMT_DETS_THRESHOLD,   100, 1000) \
	X(KVM_EXIT,        "kvm_exit",        VMT_DETS_THRESHOLD,   50,  1000) \
	X(OOM,             "oom",             VMT_DETS_ANY_PROCESS, 0,   0)

enum vmt_detector_settings {
	VMT_DETS_THRESHOLD = 1,		/* threshold: */
	VMT_DETS_ANY_PROCESS = 2,	/* any_process: */
	VMT_DETS_CLEAN_EXIT = 4,	/* on_clean_exit: */
};

enum vmt_detector {
#define X(id, name, settings, threshold_ms, interval_ms) VMT_DET_##id,
	VMT_DETECTORS(X)
#undef X
	VMT_DET_COUNT
};

#endif
