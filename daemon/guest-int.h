/* SPDX-License-Identifier: MIT */
/*
 * guest-int: what the guest module's files share inside one guest: guest.c
 * (life cycle, state, timers, sending, the flush), guest-agent.c (the
 * agent source: its channels), guest-msg.c (the control channel and the
 * agent's messages), guest-aux.c (its metadata bundle and aux),
 * guest-data.c (its pages into the rings), guest-window.c (its window held
 * for a sample), guest-status.c (what others may know and change of it),
 * guest-prev.c (the previous boot's pages), guest-sync.c, guest-alive.c,
 * guest-persist.c and guest-upgrade.c. Not for
 * other modules: struct vmt_guest is theirs alone.
 */
#ifndef VMT_GUEST_INT_H
#define VMT_GUEST_INT_H

#include "guest.h"

struct vmt_guest {
	const struct vmt_guest_env *env;
	struct vmt_guest_conf conf;
	enum vmt_guest_state state;
	bool discovered;	/* found in a discovery folder, not configured */
	bool present;		/* discovered: its folder was there at the last rescan */
	const struct vmt_source_ops *src_ops;	/* what feeds it: guest_agent_ops, or hostsrc's */
	void *src;	/* the source's state: for an agent, the guest itself */

	struct vmt_channel ctl;
	sd_event_source *ctl_src;
	bool ctl_demoted;	/* its control channel waits its turn (guest_ctl_cb) */
	uint64_t ctl_prio_since;	/* the second ctl_prio_bytes are counted in */
	uint64_t ctl_prio_bytes;	/* control bytes read in it */
	uint64_t ctl_bytes_in;	/* control bytes read in all */
	struct vmt_proto_rx *rx;
	struct vmt_buf out;	/* control bytes not yet written */
	uint32_t nchan;
	struct vmt_channel *data;
	sd_event_source **data_src;
	uint32_t npaused;	/* data sources switched off by guest_pause since the last resume */
	sd_event_source *timer;	/* reconnect / resend / session timeout */
	uint32_t nonce;		/* of our HOST_HELLOs in this connection */
	uint64_t state_since_ns;
	uint64_t taken_over_ns;	/* session taken over at an upgrade, no page read since; 0 */
	pid_t qemu_handed;	/* its QEMU's pid as the predecessor knew it, until checked; 0 */

	struct vmt_hello hello;
	bool have_hello;

	/* rings: allocated at the first HELLO, kept across sessions */
	struct vmt_page_layout layout;
	struct vmt_ring *rings;
	uint32_t nrings;
	uint64_t *stream_base;	/* ring seq where this session's stream began */
	/* its window was adopted from a predecessor, held by this many daemons:
	 * the next sample says so (0: not since that sample) */
	uint32_t recovered_lifetimes;

	/* metadata being received */
	struct vmt_buf meta;
	uint64_t meta_total;
	bool meta_open;
	/* task tables: the last whole ones the agent sent (this boot's), and
	 * the pieces of the next */
	struct vmt_buf tasks, tasks_rx;
	uint32_t tasks_total;

	/* aux in force: the pages in the rings decode with it */
	struct vmt_aux aux;	/* aux.meta: kept until the aux file is written */
	bool have_aux;
	struct vmt_aux_entry {
		uint32_t version;
		uint64_t id;
	} *aux_index;		/* its aux files by content id (guest-aux.c) */
	size_t aux_nindex;
	uint32_t aux_max_version;
	bool aux_index_built;
	bool aux_pending;	/* an aux job is queued */
	uint64_t meta_charged;	/* metadata held, as told to env->mem */
	uint64_t aux_decode_id;	/* aux id without the task-name tables */

	/* flush for the dump in progress */
	uint64_t flush_id;
	bool flush_wait;	/* FLUSH sent, waiting */
	void (*flush_done)(void *arg, struct vmt_guest *g);	/* who asked, told when it is over */
	void *flush_arg;
	bool flushed;		/* FLUSHED came and the bytes are in */
	bool have_target;
	uint64_t *target_seq;	/* per ring: pages before this seq belong to the window */
	struct vmt_cpu_stats *stats;	/* last FLUSHED */
	bool have_stats;

	struct vmt_guest_sync sync;	/* clock relation to the host (guest-sync.c) */
	struct vmt_guest_alive alive;	/* is its agent still there (guest-alive.c) */

	struct vmt_bucket sessions;	/* record.sessions_per_minute */
	uint64_t hellos_waiting;	/* held back since its last session */
	struct vmt_guest_counters c;
	uint64_t ctl_rejected_bytes_base;
	uint64_t ctl_partial_since;	/* CLOCK_MONOTONIC since which a message is unfinished */
	sd_event_source *partial_timer;	/* fires CTL_PARTIAL_TIMEOUT_NS after that */
	struct vmt_log_budget log_complaints;	/* rate limits of what it makes us log */
	struct vmt_log_budget log_sessions;
	struct vmt_log_budget log_debug;
	struct vmt_log_budget log_lost;	/* the warning of events lost in the guest */
	uint64_t lost_pages_quiet, lost_events_quiet;	/* since that warning */
	struct vmt_guest_prev *prev;	/* guest-prev.c, NULL until needed */
};

#define RETRY_USEC (2 * 1000000ull)	/* channels absent, or HELLO not answered */
#define FAILED_RETRY_USEC (30 * 1000000ull)
#define STARTING_TIMEOUT_USEC (60 * 1000000ull)
/* A control message begun and not finished for this long never will be:
 * an honest agent writes a message (64 KiB at most) at once. */
#define CTL_PARTIAL_TIMEOUT_NS (5 * 1000000000ull)
#define READ_BUDGET_BYTES (256 * 1024)	/* per data callback, so one guest cannot starve others */
/* control bytes a second that keep a control channel ahead of bulk reads */
#define CTL_PRIORITY_BYTES (64 * 1024)

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

/* guest-agent.c: an agent behind channels, its source by default. */
extern const struct vmt_source_ops guest_agent_ops;
/* What its source is (struct vmt_source_desc). */
void guest_describe(const struct vmt_guest *g, struct vmt_source_desc *d);
/* Has its source a session of its own (an agent's)? */
bool guest_has_session(const struct vmt_guest *g);

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

/* guest-prev.c: the previous boot's pages (PREV_*) */
void guest_on_prev_begin(struct vmt_guest *g, const struct vmt_msg *msg);
void guest_on_prev_pages(struct vmt_guest *g, const struct vmt_msg *msg);
void guest_on_prev_end(struct vmt_guest *g, const struct vmt_msg *msg);
/* a new session: a set may come again */
void guest_prev_session(struct vmt_guest *g);
/* the aux in force is about to give way to one of new_boot_id: remember it
 * as the previous boot's */
void guest_prev_note_boot(struct vmt_guest *g, const char *new_boot_id);
void guest_prev_free(struct vmt_guest *g);

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
