// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * detect: vmtraced's anomaly detectors, one program (or pair) each, so the
 * daemon can leave out what it does not want or what cannot attach (the
 * kvm tracepoints exist only with the kvm module loaded):
 *   process_death   sched_process_exit of a registered QEMU's last thread,
 *                   with its status: the daemon decides about a status 0
 *   vcpu_starvation sched_wakeup / preemption -> sched_switch in, per vCPU
 *   kvm_exit        kvm_exit -> kvm_entry on one vCPU, with the reason
 *   oom             oom:mark_victim of a registered process (or any)
 * Only subjects the daemon put in the pids/tids maps are measured. An
 * anomaly passes a per-detector minimum interval before it costs a ring
 * buffer record, so a storm stays cheap; everything is counted per CPU.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "detect.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Load-time settings (rodata), written by the daemon before load. */
const volatile __u64 starve_threshold_ns = 100000000ull;
const volatile __u64 kvm_threshold_ns = 50000000ull;
const volatile __u64 min_interval_ns[VMT_DET_COUNT] = {};
const volatile __u32 any_oom = 0;
/* Exits where the vCPU waits by design: VMX HLT (12), SVM HLT (0x78) and
 * IDLE_HLT (0xa6). The numbers do not collide between the two vendors. */
const volatile __u32 kvm_ignore[4] = { 12, 0x78, 0xa6, 0xffffffff };

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, VMT_DETECT_MAX_PIDS);
	__type(key, __u32);
	__type(value, struct vmt_detect_pid);
} pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, VMT_DETECT_MAX_TIDS);
	__type(key, __u32);
	__type(value, struct vmt_detect_tid);
} tids SEC(".maps");

/* A plain array lookup is inlined by the verifier: the cheap first test
 * every sched event of every thread on the host goes through. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, VMT_DETECT_BITMAP_WORDS);
	__type(key, __u32);
	__type(value, __u64);
} subjects SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, VMT_DET_COUNT);
	__type(key, __u32);
	__type(value, struct vmt_detect_counters);
} stats SEC(".maps");

/* Per detector: when the last event was let through. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, VMT_DET_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} last_emit SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

/* Fields that moved between kernels. */
struct task_struct___old {
	long state;
} __attribute__((preserve_access_index));

/* Where kvm_exit's record holds exit_reason, from the event's format file
 * in tracefs (the daemon reads it): not relocated against the kvm module's
 * BTF, which libbpf can only find by listing BTF objects, and that takes
 * CAP_SYS_ADMIN, which the service does not have. ~0: unknown, not read. */
const volatile __u32 kvm_exit_reason_off = ~0u;

static __always_inline bool is_subject(__u32 id)
{
	__u32 w = (id >> 6) & (VMT_DETECT_BITMAP_WORDS - 1);
	__u64 *b = bpf_map_lookup_elem(&subjects, &w);

	return b && (*b >> (id & 63)) & 1;
}

/* The registered thread tid, or NULL. */
static __always_inline struct vmt_detect_tid *tid_lookup(__u32 tid)
{
	if (!is_subject(tid))
		return NULL;
	return bpf_map_lookup_elem(&tids, &tid);
}

static __always_inline struct vmt_detect_counters *counters(__u32 det)
{
	return bpf_map_lookup_elem(&stats, &det);
}

/*
 * An anomaly: count it, apply the minimum interval, send it. Two CPUs can
 * both pass in the same instant (no atomics, to load on older kernels):
 * at most one event per CPU per interval, still bounded.
 */
static __always_inline void report(__u32 det, __u64 now, __u64 value, __u64 threshold,
				   __u32 guest, __u32 pid, __u32 tid, __u32 vcpu, __u32 extra)
{
	struct vmt_detect_counters *c = counters(det);
	struct vmt_detect_event *e;
	__u64 iv = min_interval_ns[det];
	__u64 *last;

	if (!c)
		return;
	c->anomalies++;
	if (iv) {
		last = bpf_map_lookup_elem(&last_emit, &det);
		if (!last)
			return;
		if (*last && now - *last < iv) {
			c->suppressed++;
			return;
		}
		*last = now;
	}
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		c->dropped++;
		return;
	}
	e->time_ns = now;
	e->value = value;
	e->threshold = threshold;
	e->detector = det;
	e->guest = guest;
	e->pid = pid;
	e->tid = tid;
	e->vcpu = vcpu;
	e->extra = extra;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
	c->emitted++;
}

static __always_inline void count_event(__u32 det)
{
	struct vmt_detect_counters *c = counters(det);

	if (c)
		c->events++;
}

/* ---- process death ------------------------------------------------------ */

SEC("tp_btf/sched_process_exit")
int BPF_PROG(vmt_process_exit, struct task_struct *p)
{
	__u32 tgid = p->tgid, tid = p->pid;
	struct vmt_detect_pid *reg;
	int code;

	if (!is_subject(tgid) && !is_subject(tid))
		return 0;
	/* a registered thread leaves: forget its timestamps */
	bpf_map_delete_elem(&tids, &tid);
	reg = bpf_map_lookup_elem(&pids, &tgid);
	if (!reg)
		return 0;
	count_event(VMT_DET_PROCESS_DEATH);
	/* only the last thread of the group: the process is gone */
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	code = BPF_CORE_READ(p, exit_code);
	/* a status 0 too (one record per QEMU's life): whether it was a clean
	 * shutdown only the daemon knows, from the guest's agent (BYE) */
	report(VMT_DET_PROCESS_DEATH, bpf_ktime_get_ns(), (__u32)code, 0, reg->guest, tgid, tid,
	       VMT_DETECT_NO_VCPU, code & 0x7f);
	return 0;
}

/* ---- vCPU starvation ---------------------------------------------------- */

SEC("tp_btf/sched_wakeup")
int BPF_PROG(vmt_wakeup, struct task_struct *p)
{
	__u32 tid = p->pid;
	struct vmt_detect_tid *t = tid_lookup(tid);

	if (t && !t->wake_ns)
		t->wake_ns = bpf_ktime_get_ns();
	return 0;
}

static __always_inline long task_state(struct task_struct *p)
{
	if (bpf_core_field_exists(p->__state))
		return BPF_CORE_READ(p, __state);
	return BPF_CORE_READ((struct task_struct___old *)p, state);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(vmt_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u32 ptid = prev->pid, ntid = next->pid;
	struct vmt_detect_tid *t;
	__u64 now = 0, wake;

	t = tid_lookup(ptid);
	if (t) {
		/* preempted: still runnable from now on; else asleep */
		if (preempt || task_state(prev) == 0)
			t->wake_ns = now = bpf_ktime_get_ns();
		else
			t->wake_ns = 0;
	}
	t = tid_lookup(ntid);
	if (!t)
		return 0;
	count_event(VMT_DET_VCPU_STARVATION);
	wake = t->wake_ns;
	t->wake_ns = 0;
	if (!wake)
		return 0;
	if (!now)
		now = bpf_ktime_get_ns();
	if (now - wake > starve_threshold_ns)
		report(VMT_DET_VCPU_STARVATION, now, now - wake, starve_threshold_ns, t->guest,
		       next->tgid, ntid, t->vcpu, 0);
	return 0;
}

/* ---- long KVM exit ------------------------------------------------------ */

SEC("tp/kvm/kvm_exit")
int vmt_kvm_exit(void *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), reason = ~0u;
	struct vmt_detect_tid *t = tid_lookup(tid);

	if (!t)
		return 0;
	if (kvm_exit_reason_off != ~0u)
		bpf_probe_read_kernel(&reason, sizeof(reason), (char *)ctx + kvm_exit_reason_off);
	t->exit_reason = reason;
	t->exit_ns = bpf_ktime_get_ns();
	return 0;
}

SEC("tp/kvm/kvm_entry")
int vmt_kvm_entry(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id, reason;
	struct vmt_detect_tid *t = tid_lookup(tid);
	__u64 now, start;

	if (!t || !t->exit_ns)
		return 0;
	count_event(VMT_DET_KVM_EXIT);
	start = t->exit_ns;
	t->exit_ns = 0;
	reason = t->exit_reason;
	for (int i = 0; i < 4; i++)
		if (reason == kvm_ignore[i])
			return 0;
	now = bpf_ktime_get_ns();
	if (now - start > kvm_threshold_ns)
		report(VMT_DET_KVM_EXIT, now, now - start, kvm_threshold_ns, t->guest, id >> 32,
		       tid, t->vcpu, reason);
	return 0;
}

/* ---- OOM ---------------------------------------------------------------- */

/* A BTF tracepoint, attached without perf_event_open(2): Debian's
 * kernel.perf_event_paranoid=3 refuses that to all but CAP_SYS_ADMIN, and
 * the service has CAP_BPF and CAP_PERFMON only. Its arguments: (int pid)
 * until the record grew the victim's sizes (6.8, and Debian 12's 6.1 by a
 * backport), then (struct task_struct *, uid_t): the sizes need the task. */
SEC("tp_btf/mark_victim")
int vmt_oom(__u64 *ctx)
{
	struct task_struct *task = NULL;
	struct vmt_detect_pid *reg;
	struct vmt_detect_tid *t;
	__u32 guest = VMT_DETECT_NO_GUEST, pid;
	__u64 total_vm_kb = 0;

	if (bpf_core_field_exists(struct trace_event_raw_mark_victim, total_vm)) {
		task = (struct task_struct *)ctx[0];
		pid = BPF_CORE_READ(task, pid);
		/* pages to KiB, as the tracepoint's record has it (4 KiB pages) */
		total_vm_kb = BPF_CORE_READ(task, mm, total_vm) << 2;
	} else {
		pid = (__u32)ctx[0];
	}
	reg = is_subject(pid) ? bpf_map_lookup_elem(&pids, &pid) : NULL;
	if (reg) {
		guest = reg->guest;
	} else {
		/* the victim may be a thread of a registered process */
		t = tid_lookup(pid);
		if (t)
			guest = t->guest;
	}
	if (guest == VMT_DETECT_NO_GUEST && !any_oom)
		return 0;
	count_event(VMT_DET_OOM);
	report(VMT_DET_OOM, bpf_ktime_get_ns(), total_vm_kb, 0, guest, pid, pid,
	       VMT_DETECT_NO_VCPU, 0);
	return 0;
}
