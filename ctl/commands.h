/* SPDX-License-Identifier: MIT */
/* The vmtracectl commands; each returns the process exit code. */
#ifndef VMT_COMMANDS_H
#define VMT_COMMANDS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct vmt_ctl_opts {
	const char *socket;
	bool json;
};

int cmd_status(const struct vmt_ctl_opts *o, int argc, char **argv);
int cmd_guests(const struct vmt_ctl_opts *o, int argc, char **argv);
int cmd_metrics(const struct vmt_ctl_opts *o, int argc, char **argv);
int cmd_dump(const struct vmt_ctl_opts *o, int argc, char **argv);
int cmd_samples(const struct vmt_ctl_opts *o, int argc, char **argv);
int cmd_reload(const struct vmt_ctl_opts *o, int argc, char **argv);
int cmd_upgrade(const struct vmt_ctl_opts *o, int argc, char **argv);
int cmd_info(const struct vmt_ctl_opts *o, int argc, char **argv);
int cmd_merge(const struct vmt_ctl_opts *o, int argc, char **argv);
int cmd_report(const struct vmt_ctl_opts *o, int argc, char **argv);
int cmd_fleet(const struct vmt_ctl_opts *o, int argc, char **argv);
int cmd_libvirt_xml(const struct vmt_ctl_opts *o, int argc, char **argv);

/*
 * --max-memory SIZE of info, report and merge: what a sample may decode to
 * (vfile_budget()), in place of 64 times its size. -EINVAL, said, if SIZE
 * is not a size above 0.
 */
int ctl_max_memory(const char *arg, uint64_t *out);

/* "usage: vmtracectl … NAME SYNOPSIS" and its summary, from the command table. */
void ctl_command_usage(FILE *f, const char *name);

#endif
