/* SPDX-License-Identifier: MIT */
/*
 * qemu: what the host can tell of a guest's QEMU process: its pid and the
 * threads that run its vCPUs. Used by the detectors (probe.c) and by the
 * clock data of samples (guest-sync.c: trace-cmd's vCPU -> host thread map).
 */
#ifndef VMT_QEMU_H
#define VMT_QEMU_H

#include <stdint.h>
#include <sys/types.h>

/*
 * A guest's QEMU: the pid in pidfile when there is one (what the operator
 * says wins), else libvirt's pidfile for libvirt_name (a discovered guest)
 * naming a live process, else peer (a socket's: the process that made it
 * listen, QEMU with server=on, or libvirtd where libvirt made the socket).
 * 0 if unknown.
 */
pid_t qemu_pid_find(const char *pidfile, pid_t peer, const char *libvirt_name);
/* "CPU 3/KVM", "CPU 0/TCG" -> 3, 0; -1 otherwise. */
int qemu_vcpu_of_comm(const char *comm);
/*
 * tids[i] = the thread running vCPU i, for i < max (0 where none is named);
 * *n = highest vCPU found + 1. A single-threaded TCG ("ALL CPUs/TCG") runs
 * every vCPU: its tid fills all max entries and *n = max. -errno if
 * /proc/pid/task cannot be read.
 */
int qemu_vcpu_threads(pid_t pid, uint32_t *tids, uint32_t max, uint32_t *n);
/* The state letter /proc shows for a thread of pid (tid 0: the process):
 * R running, S sleeping (a halted vCPU waits in KVM_RUN), D, T stopped...;
 * '?' if it cannot be read. */
char qemu_thread_state(pid_t pid, pid_t tid);

#endif
