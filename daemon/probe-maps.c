/* SPDX-License-Identifier: MIT */
/*
 * probe-maps: whom the detectors watch (probe-int.h). Each sync writes
 * every guest's QEMU process and its threads into the pids and tids maps,
 * prunes what is gone, then the subjects bitmap: all from /proc and the
 * guests' pids, no skeleton needed.
 */
#ifdef VMT_HAVE_BPF

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "../bpf/detect.h"
#include "guest.h"
#include "log.h"
#include "probe-int.h"
#include "qemu.h"
#include "util.h"

#define MAX_NAMES 4096	/* guest ids; one is never reused */

int probe_maps_init(struct vmt_probe_maps *m)
{
	*m = (struct vmt_probe_maps){ .pids_fd = -1, .tids_fd = -1, .subjects_fd = -1 };
	m->names = calloc(MAX_NAMES, sizeof(*m->names));
	m->bits = calloc(VMT_DETECT_BITMAP_WORDS, sizeof(*m->bits));
	if (!m->names || !m->bits) {
		probe_maps_free(m);
		return -ENOMEM;
	}
	return 0;
}

void probe_maps_free(struct vmt_probe_maps *m)
{
	free(m->names);
	free(m->bits);
	m->names = NULL;
	m->bits = NULL;
}

const char *probe_maps_guest(const struct vmt_probe_maps *m, uint32_t id)
{
	return id < m->nnames ? m->names[id] : NULL;
}

static uint32_t name_id(struct vmt_probe_maps *m, const char *name)
{
	for (uint32_t i = 0; i < m->nnames; i++)
		if (!strcmp(m->names[i], name))
			return i;
	if (m->nnames == MAX_NAMES)
		return VMT_DETECT_NO_GUEST;
	snprintf(m->names[m->nnames], VMT_NAME_MAX, "%s", name);
	return m->nnames++;
}

struct tid_ent {
	uint32_t tid;
	uint32_t vcpu;
};

/* Threads of pid, vCPUs first: n named ones, or every thread if none is. */
static int scan_threads(pid_t pid, struct tid_ent **out, uint32_t *nout)
{
	char path[64], comm[32];
	struct tid_ent *all = NULL;
	uint32_t n = 0, cap = 0, named = 0;
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char cpath[96];
		long tid = strtol(de->d_name, NULL, 10);
		ssize_t k;
		int fd, v = -1;

		if (tid <= 0)
			continue;
		snprintf(cpath, sizeof(cpath), "/proc/%d/task/%ld/comm", (int)pid, tid);
		fd = open(cpath, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			k = read(fd, comm, sizeof(comm) - 1);
			close(fd);
			if (k > 0) {
				comm[k] = 0;
				comm[strcspn(comm, "\n")] = 0;
				v = qemu_vcpu_of_comm(comm);
			}
		}
		if (n == cap) {
			struct tid_ent *t = realloc(all, (cap = cap ? 2 * cap : 16) * sizeof(*t));

			if (!t) {
				closedir(d);
				free(all);
				return -ENOMEM;
			}
			all = t;
		}
		all[n++] = (struct tid_ent){ (uint32_t)tid, v < 0 ? VMT_DETECT_NO_VCPU : (uint32_t)v };
		named += v >= 0;
	}
	closedir(d);
	if (named) {
		uint32_t j = 0;

		for (uint32_t i = 0; i < n; i++)
			if (all[i].vcpu != VMT_DETECT_NO_VCPU)
				all[j++] = all[i];
		n = j;
	}
	*out = all;
	*nout = n;
	return 0;
}

static bool in_list(const uint32_t *keys, uint32_t n, uint32_t k)
{
	for (uint32_t i = 0; i < n; i++)
		if (keys[i] == k)
			return true;
	return false;
}

/* Delete the keys of map not in keep[]. */
static void map_prune(int fd, const uint32_t *keep, uint32_t nkeep)
{
	uint32_t key, next, *dead = NULL;
	uint32_t ndead = 0, cap = 0;
	void *prev = NULL;

	while (bpf_map_get_next_key(fd, prev, &next) == 0) {
		if (!in_list(keep, nkeep, next)) {
			if (ndead == cap) {
				uint32_t *t = realloc(dead, (cap = cap ? 2 * cap : 64) * sizeof(*t));

				if (!t)
					break;
				dead = t;
			}
			dead[ndead++] = next;
		}
		key = next;
		prev = &key;
	}
	for (uint32_t i = 0; i < ndead; i++)
		bpf_map_delete_elem(fd, &dead[i]);
	free(dead);
}

static void bits_set(uint64_t *b, const uint32_t *keys, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		b[(keys[i] >> 6) & (VMT_DETECT_BITMAP_WORDS - 1)] |= 1ull << (keys[i] & 63);
}

/* Write the words of the subjects map that change: after the hash maps,
 * so a bit never stands for an entry not yet there. */
static void bits_sync(struct vmt_probe_maps *m, const uint32_t *pk, uint32_t np, const uint32_t *tk,
		      uint32_t nt)
{
	uint64_t *nb = calloc(VMT_DETECT_BITMAP_WORDS, sizeof(*nb));
	int fd = m->subjects_fd;

	if (!nb)
		return;
	bits_set(nb, pk, np);
	bits_set(nb, tk, nt);
	for (uint32_t w = 0; w < VMT_DETECT_BITMAP_WORDS; w++)
		if (nb[w] != m->bits[w] && bpf_map_update_elem(fd, &w, &nb[w], BPF_ANY) == 0)
			m->bits[w] = nb[w];
	free(nb);
}

void probe_maps_sync(struct vmt_probe_maps *m, const struct vmt_guest_list *l)
{
	uint32_t *pkeys = NULL, *tkeys = NULL, np = 0, nt = 0;
	int pfd = m->pids_fd, tfd = m->tids_fd;

	pkeys = calloc(l->n + 1, sizeof(*pkeys));
	if (!pkeys)
		return;
	for (uint32_t i = 0; i < l->n; i++) {
		const struct vmt_guest *g = l->v[i];
		struct vmt_detect_pid vp = { 0 };
		struct tid_ent *th = NULL;
		uint32_t nth = 0, *tk;
		pid_t pid = guest_qemu_pid(g);

		if (pid <= 0 || scan_threads(pid, &th, &nth) < 0)
			continue;
		vp.guest = name_id(m, guest_name(g));
		if (vp.guest == VMT_DETECT_NO_GUEST) {
			free(th);
			continue;
		}
		if (bpf_map_update_elem(pfd, &(uint32_t){ (uint32_t)pid }, &vp, BPF_ANY) == 0)
			pkeys[np++] = (uint32_t)pid;
		tk = realloc(tkeys, (nt + nth) * sizeof(*tk) + 1);
		if (!tk) {
			free(th);
			continue;
		}
		tkeys = tk;
		for (uint32_t j = 0; j < nth; j++) {
			struct vmt_detect_tid vt = { .guest = vp.guest, .vcpu = th[j].vcpu }, cur;

			/* keep the timestamps of a thread already there */
			if (bpf_map_lookup_elem(tfd, &th[j].tid, &cur) == 0 && cur.guest == vt.guest &&
			    cur.vcpu == vt.vcpu) {
				tkeys[nt++] = th[j].tid;
				continue;
			}
			if (bpf_map_update_elem(tfd, &th[j].tid, &vt, BPF_ANY) == 0)
				tkeys[nt++] = th[j].tid;
		}
		free(th);
	}
	map_prune(pfd, pkeys, np);
	map_prune(tfd, tkeys, nt);
	bits_sync(m, pkeys, np, tkeys, nt);
	if (np != m->npids || nt != m->ntids)
		log_debug("detectors: watching %" PRIu32 " QEMU processes, %" PRIu32 " threads", np,
			  nt);
	m->npids = np;
	m->ntids = nt;
	free(pkeys);
	free(tkeys);
}

#endif /* VMT_HAVE_BPF */
