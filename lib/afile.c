/* SPDX-License-Identifier: MIT */
/* Publishing a file atomically (afile.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "afile.h"

/* ---- atomic publish -------------------------------------------------- */

int afile_create(struct vmt_afile *a, const char *dir, const char *name)
{
	char path[PATH_MAX];
	size_t nl = strlen(name), dl = strlen(dir);
	int r;

	a->fd = a->dirfd = -1;
	a->tmpname[0] = a->name[0] = 0;
	if (!nl || nl >= sizeof(a->name) || strchr(name, '/') || !strcmp(name, ".") ||
	    !strcmp(name, ".."))
		return -EINVAL;
	snprintf(a->name, sizeof(a->name), "%s", name);
	snprintf(a->tmpname, sizeof(a->tmpname), ".%s.tmp-XXXXXX", name);
	if (dl + 1 + strlen(a->tmpname) >= sizeof(path))
		return -ENAMETOOLONG;
	snprintf(path, sizeof(path), "%s/%s", dir, a->tmpname);

	a->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (a->dirfd < 0)
		return -errno;
	a->fd = mkostemp(path, O_CLOEXEC);
	if (a->fd < 0) {
		r = -errno;
		close(a->dirfd);
		a->dirfd = -1;
		return r;
	}
	/* keep the name mkostemp chose: commit and abort work through dirfd */
	memcpy(a->tmpname, path + dl + 1, strlen(a->tmpname));
	return 0;
}

int afile_commit(struct vmt_afile *a)
{
	int r = 0;

	if (a->fd < 0 || a->dirfd < 0)
		return -EBADF;
	if (fsync(a->fd) < 0)
		r = -errno;
	if (close(a->fd) < 0 && r == 0)
		r = -errno;
	a->fd = -1;
	if (r == 0 && renameat(a->dirfd, a->tmpname, a->dirfd, a->name) < 0)
		r = -errno;
	if (r < 0) {
		afile_abort(a);
		return r;
	}
	if (fsync(a->dirfd) < 0)
		r = -errno;
	close(a->dirfd);
	a->dirfd = -1;
	return r;
}

void afile_abort(struct vmt_afile *a)
{
	if (a->fd >= 0)
		close(a->fd);
	a->fd = -1;
	if (a->dirfd >= 0) {
		unlinkat(a->dirfd, a->tmpname, 0);
		close(a->dirfd);
	}
	a->dirfd = -1;
}
