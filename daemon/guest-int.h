/* SPDX-License-Identifier: MIT */
/*
 * guest-int: what the guest module's files share inside one guest: guest.c
 * (life cycle, state, timers, connecting, sending), guest-msg.c (the
 * control channel and the agent's messages), guest-aux.c (its metadata
 * bundle and aux), guest-data.c (its pages into the rings) and
 * guest-window.c (its window held for a sample). Not for
 * other modules.
 */
#ifndef VMT_GUEST_INT_H
#define VMT_GUEST_INT_H

#include "guest.h"

#define RETRY_USEC (2 * 1000000ull)	/* channels absent, or HELLO not answered */
#define FAILED_RETRY_USEC (30 * 1000000ull)
#define STARTING_TIMEOUT_USEC (60 * 1000000ull)
/* A control message begun and not finished for this long never will be:
 * an honest agent writes a message (64 KiB at most) at once. */
#define CTL_PARTIAL_TIMEOUT_NS (5 * 1000000000ull)
#define READ_BUDGET_BYTES (256 * 1024)	/* per data callback, so one guest cannot starve others */

/* Complaints about guest input (a warning), and the lines of its sessions
 * coming and going: each within its own per-guest budget. */
void guest_complain(struct vmt_guest *g, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void guest_log(struct vmt_guest *g, int level, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* pages of cpu came flagged as following events lost in the guest (events
 * of them counted): a warning, the first in a while, with what followed. */
void guest_warn_lost(struct vmt_guest *g, uint32_t cpu, uint64_t pages, uint64_t events);
void guest_set_state(struct vmt_guest *g, enum vmt_guest_state s);
void guest_arm(struct vmt_guest *g, uint64_t usec);
void guest_send(struct vmt_guest *g, unsigned type, const void *p, uint32_t len);
void guest_send_host_hello(struct vmt_guest *g);
void guest_send_start(struct vmt_guest *g);
/* Give up on this session: STOP, state failed, retry later. */
void guest_fail(struct vmt_guest *g, const char *why);
/* Close the channels, state offline, connect again in RETRY_USEC. */
void guest_disconnect(struct vmt_guest *g, const char *why);
void guest_drain_data(struct vmt_guest *g);
/* Its open channels (g->ctl, g->data[0..nchan)) into the loop. */
int guest_watch_channels(struct vmt_guest *g);
void guest_close_channels(struct vmt_guest *g);
void guest_free_rings(struct vmt_guest *g);
bool guest_rings_empty(const struct vmt_guest *g);
/* No aux in force (the rings it decoded are gone); its bundle is freed. */
void guest_drop_aux(struct vmt_guest *g);
void guest_end_flush(struct vmt_guest *g);

/* guest-msg.c */
int guest_ctl_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata);
/* Read and handle the control channel, at most budget bytes; true if it
 * was read dry (or closed). */
bool guest_ctl_read(struct vmt_guest *g, size_t budget);
void guest_check_flushed(struct vmt_guest *g);
/* Its window decodes only with what the guest is replacing: its owner
 * holds it for a sample now (events.window_replaced), or it is dropped
 * (counted in pages_discarded). */
void guest_save_window(struct vmt_guest *g, const char *why);

/* guest-aux.c: the metadata bundle's messages */
void guest_on_meta_begin(struct vmt_guest *g, const struct vmt_msg *msg);
void guest_on_meta_data(struct vmt_guest *g, const struct vmt_msg *msg);
void guest_on_meta_end(struct vmt_guest *g, const struct vmt_msg *msg);

/* guest-persist.c: the rings in systemd's fd store, and those handed back */
void guest_describe_rings(struct vmt_guest *g);
void guest_store_rings(struct vmt_guest *g);
void guest_unstore_rings(struct vmt_guest *g);
void guest_recover_rings(struct vmt_guest *g);
/*
 * An upgrade's hand-over: cpu's ring (of ncpus) adopted into *r, in place
 * of a fresh one (guest_setup_rings_handed). -errno and why when there is
 * none or it does not check out (refused, counted): the caller makes a
 * fresh one. *fill_lost: adopted, but the page being filled was not kept.
 */
int guest_take_ring(struct vmt_guest *g, uint32_t cpu, uint32_t ncpus, struct vmt_ring *r,
		    bool *fill_lost, char *why, size_t n);
/* guest-data.c: guest_setup_rings, taking each CPU's ring handed over by
 * an upgrade's predecessor where it checks out; -EPROTO and why when one
 * did not (made fresh instead): the session cannot go on. */
int guest_setup_rings_handed(struct vmt_guest *g, uint32_t ncpus, uint32_t page_size, char *why,
			     size_t n);
/* guest-upgrade.c: logs the first data read after a take-over (once). */
void guest_first_read_taken_over(struct vmt_guest *g);

/* guest-data.c */
int guest_data_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata);

#endif
