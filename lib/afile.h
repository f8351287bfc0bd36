/* SPDX-License-Identifier: MIT */
#ifndef VMT_AFILE_H
#define VMT_AFILE_H

/*
 * Publishing a file atomically: create DIR/.NAME.tmp-XXXXXX, write, then
 * afile_commit() fsyncs the file, renames it to DIR/NAME and fsyncs DIR.
 * afile_abort() unlinks the temporary. No partial file is ever visible
 * under NAME.
 */
struct vmt_afile {
	int fd;
	int dirfd;
	char tmpname[300];
	char name[256];
};
/* The temporary is created mode 0600 (fchmod a->fd to share it). */
int afile_create(struct vmt_afile *a, const char *dir, const char *name);
/*
 * 0 when NAME is the whole file. On -errno from fsync or rename the
 * temporary is already unlinked and nothing is under NAME (afile_abort()
 * is then a no-op); on -errno from the directory fsync the file is in place
 * but may not survive a crash.
 */
int afile_commit(struct vmt_afile *a);
void afile_abort(struct vmt_afile *a);

#endif
