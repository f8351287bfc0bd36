/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include "fdstore.h"
#include "persist.h"

int fdstore_push(int fd, const char *name)
{
	char msg[64 + VMT_PERSIST_FDNAME_MAX];

	if (strlen(name) >= VMT_PERSIST_FDNAME_MAX)
		return -EINVAL;
	snprintf(msg, sizeof(msg), "FDSTORE=1\nFDNAME=%s", name);
	return sd_pid_notify_with_fds(0, 0, msg, &fd, 1);
}

int fdstore_remove(const char *name)
{
	char msg[64 + VMT_PERSIST_FDNAME_MAX];

	if (strlen(name) >= VMT_PERSIST_FDNAME_MAX)
		return -EINVAL;
	snprintf(msg, sizeof(msg), "FDSTOREREMOVE=1\nFDNAME=%s", name);
	return sd_pid_notify(0, 0, msg);
}

static void free_names(char **names)
{
	for (size_t i = 0; names && names[i]; i++)
		free(names[i]);
	free(names);
}

int fdstore_take_rings(struct vmt_fdstore_ring **out, unsigned *n)
{
	char **names = NULL;
	struct vmt_fdstore_ring *v;
	int k;

	*out = NULL;
	*n = 0;
	/* 0: the environment stays for control_new(), which takes its socket after */
	k = sd_listen_fds_with_names(0, &names);
	if (k <= 0) {
		free_names(names);
		return k;
	}
	v = calloc((size_t)k, sizeof(*v));
	if (!v) {
		free_names(names);
		return -ENOMEM;
	}
	for (int i = 0; i < k; i++) {
		struct vmt_fdstore_ring *r = &v[*n];

		if (!names || !names[i])
			continue;
		r->reserve = !strncmp(names[i], VMT_RESERVE_FDNAME_PREFIX, strlen(VMT_RESERVE_FDNAME_PREFIX));
		if (r->reserve)
			r->cpu = UINT32_MAX;
		else if (persist_ring_name_parse(names[i], r->guest, sizeof(r->guest), &r->cpu) < 0)
			continue;
		snprintf(r->name, sizeof(r->name), "%s", names[i]);
		r->fd = SD_LISTEN_FDS_START + i;
		/* passed fds are inherited by whatever we exec: not these */
		fcntl(r->fd, F_SETFD, FD_CLOEXEC);
		(*n)++;
	}
	free_names(names);
	if (!*n)
		free(v);
	else
		*out = v;
	return 0;
}
