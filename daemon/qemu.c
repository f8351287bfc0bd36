/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qemu.h"

static pid_t pid_from_file(const char *path)
{
	char buf[32];
	ssize_t n;
	long v;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	v = strtol(buf, NULL, 10);
	return v > 0 && v < (1L << 22) ? (pid_t)v : 0;
}

/* Left a pidfile behind? (No signal: the daemon may send none.) */
static bool pid_alive(pid_t pid)
{
	char path[32];

	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	return access(path, F_OK) == 0;
}

pid_t qemu_pid_find(const char *pidfile, pid_t peer, const char *libvirt_name)
{
	char path[PATH_MAX];
	pid_t pid;

	if (pidfile && pidfile[0] && (pid = pid_from_file(pidfile)) > 0)
		return pid;
	/* libvirt may make a channel's listening socket itself and hand it to
	 * QEMU: the socket's peer is then libvirtd, whose death no one wants
	 * to watch. Its pidfile names the domain's QEMU. */
	if (libvirt_name && strlen(libvirt_name) < sizeof(path) - 40) {
		snprintf(path, sizeof(path), "/run/libvirt/qemu/%s.pid", libvirt_name);
		if ((pid = pid_from_file(path)) > 0 && pid_alive(pid))
			return pid;
	}
	return peer > 0 ? peer : 0;
}

int qemu_vcpu_of_comm(const char *comm)
{
	char kind[8];
	int n, end = 0;

	if (sscanf(comm, "CPU %d/%7[A-Z]%n", &n, kind, &end) == 2 && end && n >= 0 &&
	    (!strcmp(kind, "KVM") || !strcmp(kind, "TCG")))
		return n;
	return -1;
}

static int thread_comm(pid_t pid, long tid, char *comm, size_t n)
{
	char path[96];
	ssize_t k;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/task/%ld/comm", (int)pid, tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	k = read(fd, comm, n - 1);
	close(fd);
	if (k <= 0)
		return -EIO;
	comm[k] = 0;
	comm[strcspn(comm, "\n")] = 0;
	return 0;
}

int qemu_vcpu_threads(pid_t pid, uint32_t *tids, uint32_t max, uint32_t *n)
{
	char path[64], comm[32];
	uint32_t all_tid = 0;
	struct dirent *de;
	DIR *d;

	*n = 0;
	memset(tids, 0, max * sizeof(*tids));
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		long tid = strtol(de->d_name, NULL, 10);
		int v;

		if (tid <= 0 || thread_comm(pid, tid, comm, sizeof(comm)) < 0)
			continue;
		if (!strcmp(comm, "ALL CPUs/TCG"))
			all_tid = (uint32_t)tid;
		v = qemu_vcpu_of_comm(comm);
		if (v < 0 || (uint32_t)v >= max)
			continue;
		tids[v] = (uint32_t)tid;
		if ((uint32_t)v + 1 > *n)
			*n = (uint32_t)v + 1;
	}
	closedir(d);
	if (!*n && all_tid) {
		for (uint32_t i = 0; i < max; i++)
			tids[i] = all_tid;
		*n = max;
	}
	return 0;
}

char qemu_thread_state(pid_t pid, pid_t tid)
{
	char path[96], buf[512], *p;
	ssize_t k;
	int fd;

	if (tid > 0)
		snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	else
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return '?';
	k = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (k <= 0)
		return '?';
	buf[k] = 0;
	/* "tid (comm) S ...": comm may hold anything, the last ')' ends it */
	p = strrchr(buf, ')');
	return p && p[1] == ' ' && p[2] ? p[2] : '?';
}
