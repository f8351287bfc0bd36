/* SPDX-License-Identifier: MIT */
/*
 * vmlinux-min: the few kernel types bpf/detect.bpf.c touches, written by
 * hand for build machines without /sys/kernel/btf/vmlinux (the Makefile
 * copies it to $(O)/bpf/vmlinux.h there). Every struct is
 * preserve_access_index, so only the fields named here need exist, in any
 * order: libbpf relocates each access against the running kernel's BTF at
 * load time (CO-RE). A program that touches a new field needs it here too.
 */
#ifndef VMT_VMLINUX_MIN_H
#define VMT_VMLINUX_MIN_H

typedef unsigned char __u8;
typedef short __s16;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef long long __s64;
typedef unsigned long long __u64;
typedef __u32 __wsum;
typedef __u16 __be16;
typedef __u32 __be32;
typedef _Bool bool;
enum { false = 0, true = 1 };
typedef __u32 u32;
typedef __u64 u64;
typedef int pid_t;

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_RINGBUF = 27,
};

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

typedef struct {
	int counter;
} atomic_t;

struct signal_struct {
	atomic_t live;
};

struct mm_struct {
	unsigned long total_vm;
};

struct task_struct {
	unsigned int __state;
	pid_t pid;
	pid_t tgid;
	int exit_code;
	struct signal_struct *signal;
	struct mm_struct *mm;
	char comm[16];
};

struct trace_entry {
	unsigned short type;
	unsigned char flags;
	unsigned char preempt_count;
	int pid;
};

struct trace_event_raw_mark_victim {
	struct trace_entry ent;
	int pid;
	unsigned long total_vm;
};

#pragma clang attribute pop

#endif
