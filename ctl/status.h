/* SPDX-License-Identifier: MIT */
/*
 * status: the daemon's STATUS answer as other commands read it (metrics.c):
 * each record (DAEMON, GUEST, DETECTOR) with its values looked up by tag.
 * Tags this vmtracectl does not know are skipped, as status skips them.
 */
#ifndef VMT_CTL_STATUS_H
#define VMT_CTL_STATUS_H

#include <stdbool.h>
#include <stdint.h>

#include "commands.h"

struct ctl_values;

/* A number (u32, i32, u64 tag) the record holds: true and *out set. */
bool ctl_value_num(const struct ctl_values *v, unsigned tag, uint64_t *out);
/* A string the record holds, or NULL. */
const char *ctl_value_str(const struct ctl_values *v, unsigned tag);
/*
 * Ask for STATUS and hand fn every record; fn returns 0, or -ENOMEM to
 * stop. The exit code: 0, or 1 with the reason said on stderr.
 */
int ctl_status_walk(const struct vmt_ctl_opts *o,
		    int (*fn)(void *arg, unsigned type, const struct ctl_values *v), void *arg);

#endif
