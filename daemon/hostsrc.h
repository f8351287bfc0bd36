/* SPDX-License-Identifier: MIT */
/*
 * hostsrc: the host's own ftrace as a source, recorded like a guest named
 * "host" (config `host:`): an ftrace instance of its own (hostpriv.h) with the
 * configured events, its per-CPU trace_pipe_raw read into the rings of a
 * struct vmt_guest, the host's metadata as its aux, dumped with the guests.
 */
#ifndef VMT_HOSTSRC_H
#define VMT_HOSTSRC_H

#include <stdbool.h>

#include "guest.h"

struct vmt_hostsrc;
struct vmt_hostpriv;

/* With host.enabled: have hp set the instance up and make the guest named
 * "host" that stands for it (*out; its owner puts it in its list). 0 with
 * *out NULL when host recording is off; -errno, logged, when it cannot be. */
int hostsrc_new(const struct vmt_guest_env *env, struct vmt_hostpriv *hp, struct vmt_guest **out);
/* Move every complete and partial page into the rings now (for a dump). */
void hostsrc_flush(struct vmt_hostsrc *h);
/* Stop reading and remove the instance. NULL is fine. */
void hostsrc_free(struct vmt_hostsrc *h);
/* Reading stopped for a held page (see ring_room) starts again. */
void hostsrc_resume(struct vmt_hostsrc *h);
/* Is g the host's own source? */
bool hostsrc_is(const struct vmt_guest *g);
/* Write text into the host instance's trace_marker (g the host's guest;
 * anything else is ignored). */
void hostsrc_mark(struct vmt_guest *g, const char *text);

#endif
