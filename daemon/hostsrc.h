/* SPDX-License-Identifier: MIT */
/*
 * hostsrc: the host's own ftrace as a source, recorded like a guest named
 * "host" (config `host:`): a libtracefs instance of its own with the
 * configured events, its per-CPU trace_pipe_raw read into the rings of a
 * struct vmt_guest, the host's metadata as its aux, dumped with the guests.
 */
#ifndef VMT_HOSTSRC_H
#define VMT_HOSTSRC_H

struct vmt_manager;
struct vmt_guest;
struct vmt_hostsrc;

/* Set the instance up and add the "host" source to the manager. */
int hostsrc_new(struct vmt_manager *m, struct vmt_guest **out);
/* Move every complete and partial page into the rings now (for a dump). */
void hostsrc_flush(struct vmt_hostsrc *h);
/* Stop reading and remove the instance. NULL is fine. */
void hostsrc_free(struct vmt_hostsrc *h);
/* Reading stopped for a held page (see ring_room) starts again. */
void hostsrc_resume(struct vmt_hostsrc *h);
/* Write text into the host instance's trace_marker, if the host is traced. */
void hostsrc_mark(struct vmt_manager *m, const char *text);

#endif
