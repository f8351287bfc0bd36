/* SPDX-License-Identifier: MIT */
/*
 * guest: one guest's channels, agent session and rings.
 *
 * Session: open channels -> drop stale bytes -> HOST_HELLO -> HELLO ->
 * START -> STARTED -> META_BEGIN/DATA/END (bounded by metadata_max,
 * CRC-checked, validated) -> aux version settled -> STREAMING: pages flow
 * into the per-CPU rings. Everything the guest sends is checked; what is
 * refused is logged (rate-limited) and counted. A failure of any channel
 * closes the session; the rings stay and can be dumped.
 */
#ifndef VMT_GUEST_H
#define VMT_GUEST_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "aux.h"
#include "channel.h"
#include "config.h"
#include "mem.h"
#include "proto.h"
#include "qemu.h"
#include "ring.h"
#include "sample.h"
#include "guest-sync.h"
#include "guest-alive.h"
#include "trigger.h"
#include "util.h"

struct vmt_guest;
struct vmt_compressor;
struct vmt_recover;
struct vmt_upgrade_out;
struct vmt_upgrade_in;

/*
 * What a guest tells its owner (the manager), given to it at creation: facts,
 * not decisions. The guest owns its session, channels, rings and flush
 * state; what follows from them for the daemon (dumps, the detectors) is
 * the owner's to decide.
 */
struct vmt_guest_events {
	/* Its window is about to be replaced (a new boot, new events, a new
	 * shape: what the rings hold decodes only with what goes). True if it
	 * was held for a sample now (guest_hold_window); false: the guest
	 * drops it (counted in pages_discarded). */
	bool (*window_replaced)(void *owner, struct vmt_guest *g, const char *why);
	/* TRIGGER: it asked for a dump; -EBUSY held back. */
	int (*trigger)(void *owner, struct vmt_guest *g, const struct vmt_trigger *t);
	/* its QEMU came or went: the detectors follow QEMU's pid */
	void (*qemu_changed)(void *owner, struct vmt_guest *g);
	/* a line into the host's own trace (clock sync markers); may be NULL */
	void (*host_mark)(void *owner, const char *text);
};

/* A source other than an agent behind channels (the host's own ftrace):
 * what the guest asks of it instead of the agent. */
struct vmt_source_ops {
	void (*flush)(void *src);	/* the pages are in the rings when it returns */
	void (*resume)(void *src);	/* a dump was written: read on */
	void (*free)(void *src);
};

/* What every guest shares: the loop, the configuration in force, memory. */
struct vmt_guest_env {
	sd_event *event;
	const struct vmt_config *conf;	/* the daemon's; a reload changes it in place */
	struct vmt_mem *mem;
	uint8_t *bounce;	/* guest data reads land here first */
	size_t bounce_size;
	struct vmt_compressor *comp;	/* compressed rings' worker, or NULL */
	struct vmt_recover *recover;	/* rings a crashed predecessor left, or NULL */
	const struct vmt_guest_events *ev;
	void *owner;
};

/* Every guest (configured, discovered, the host's own), in one list. */
struct vmt_guest_list {
	struct vmt_guest **v;
	uint32_t n;
};
struct vmt_guest *guest_list_find(const struct vmt_guest_list *l, const char *name);

#define VMT_GUEST_STATES(X)   \
	X(OFFLINE, "offline")      /* channels not there or not open */ \
	X(WAIT_HELLO, "connecting") /* HOST_HELLO sent, waiting for HELLO */ \
	X(STARTING, "starting")    /* START sent, waiting for STARTED and metadata */ \
	X(STREAMING, "streaming")  \
	X(FAILED, "failed")        /* the agent refused or misbehaved; retried later */

enum vmt_guest_state {
#define X(n, t) GUEST_##n,
	VMT_GUEST_STATES(X)
#undef X
};
const char *guest_state_name(enum vmt_guest_state s);

/* A window of log lines a guest may cause (guest_complain, guest_log). */
struct vmt_log_budget {
	uint64_t until_ns;
	unsigned used;
};

struct vmt_guest_counters {
	uint64_t sessions;	/* HELLOs that led to START */
	uint64_t stale_bytes;	/* data bytes dropped outside a session */
	uint64_t meta_rejected;	/* metadata bundles refused */
	uint64_t msgs_unexpected;	/* well-formed messages out of place */
	uint64_t flush_timeouts;
	uint64_t flush_bad;	/* FLUSHED that did not fit the stream */
	uint64_t errors_from_agent;
	uint64_t triggers_from_agent;
	uint64_t read_pauses;	/* a channel stopped: its next page held, the dump reserve used up */
	uint64_t paths_refused;	/* tries to open a port that was a symlink or of another type */
	uint64_t pages_discarded;	/* of an old boot or shape, dropped: its dump was held back */
	uint64_t hellos_deferred;	/* HELLOs held back: it started too many sessions */
};

struct vmt_guest {
	const struct vmt_guest_env *env;
	struct vmt_guest_conf conf;
	enum vmt_guest_state state;
	bool discovered;	/* found in a discovery folder, not configured */
	bool present;		/* discovered: its folder was there at the last rescan */
	const struct vmt_source_ops *src_ops;	/* not an agent: the host's ftrace */
	void *src;
	bool keep, fresh;	/* bookkeeping of a reload */

	struct vmt_channel ctl;
	sd_event_source *ctl_src;
	bool ctl_demoted;	/* its control channel waits its turn (guest_ctl_cb) */
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
};

int guest_new(const struct vmt_guest_env *env, const struct vmt_guest_conf *conf,
	      struct vmt_guest **out);
void guest_free(struct vmt_guest *g);
/* Try to open the channels now (and keep retrying on a timer). */
void guest_connect(struct vmt_guest *g);
/*
 * Ask its source to flush for dump id: true if the answer is to come (done
 * is called then: FLUSHED came and its bytes are in, or the session ended
 * first), false if there is none to wait for (a local source flushed at
 * once, or no session to ask).
 */
bool guest_flush(struct vmt_guest *g, uint64_t id, void (*done)(void *arg, struct vmt_guest *g),
		 void *arg);
enum vmt_guest_flush {
	GUEST_FLUSH_NONE,	/* none asked, or given up */
	GUEST_FLUSH_WAITING,	/* asked, the answer or its bytes not in yet */
	GUEST_FLUSH_DONE,	/* its window ends at the flush target */
};
enum vmt_guest_flush guest_flush_state(const struct vmt_guest *g);
/* Its flush is given up (no FLUSHED in flush_timeout_ms: logged, counted);
 * done is not called. */
void guest_flush_timed_out(struct vmt_guest *g);
/* The dump that asked for the flush holds its window: the target is
 * forgotten. */
void guest_flush_over(struct vmt_guest *g);
uint32_t guest_flush_timeout_ms(const struct vmt_guest *g);

/* What a sample of its window asks of guest_hold_window(). */
struct vmt_window_req {
	uint64_t span_ns;	/* the last span_ns before its newest event; 0: all */
	bool to_target;		/* end at the flush target, if its FLUSHED came */
};
struct vmt_job;
/*
 * Its window held where it is for the writer's sample job (the rings'
 * pages, ring_hold; a compressed ring's frames, frames_hold; the page or
 * frame straddling the start cut in a copy), with what the guest knows of
 * the sample (name, aux, tasks, page size, counters, clock points). *raw:
 * the bytes of raw pages held. -ENOENT: nothing recorded yet; -ENOMEM.
 * The job's holds are released by job_free() either way.
 */
int guest_hold_window(struct vmt_guest *g, const struct vmt_window_req *rq, struct vmt_job *job,
		      uint64_t *raw);
/* Does its aux bundle wait for its file (none queued)? */
bool guest_aux_due(const struct vmt_guest *g);
/* A copy of its aux and bundle for the writer (with the clocks now),
 * counted in its metadata held until guest_aux_done(); -errno. */
int guest_aux_copy(struct vmt_guest *g, struct vmt_aux *out);
/* Is aux_id's the aux in force, its bundle still held (a failed write is
 * tried again)? */
bool guest_aux_holds(const struct vmt_guest *g, uint64_t aux_id);
/* The aux version in force (its samples' files must stay); false: none. */
bool guest_aux_in_force(const struct vmt_guest *g, uint32_t *version);
const char *guest_name(const struct vmt_guest *g);
/* Reconnect if its FIFOs were made anew (QEMU restarted). */
void guest_check_channels(struct vmt_guest *g);
/* A control message left unfinished for CTL_PARTIAL_TIMEOUT_NS is given up
 * (a timer armed when it began does it; the housekeeping checks as well). */
void guest_check_partial(struct vmt_guest *g);
/* Its folder is gone: close the channels, keep the rings. */
void guest_vanished(struct vmt_guest *g);
/* Free the rings of a guest offline since forget_after; true if it did. */
bool guest_forget(struct vmt_guest *g, uint64_t forget_after_ns);
/* Tell the agent to stop tracing (daemon shutdown). */
void guest_stop(struct vmt_guest *g);
/* Allocate the rings, within memory_max (-ENOSPC, logged and counted). */
int guest_setup_rings(struct vmt_guest *g, uint32_t ncpus, uint32_t page_size);
/* A dump was written: rings take their own pages back, paused reading goes on. */
void guest_resume(struct vmt_guest *g);
/* Pages came into cpu's ring: its oldest batch to the compressor, if due. */
void guest_compress(struct vmt_guest *g, uint32_t cpu);
/* The version given to this content id (written or not), or the next free
 * one; *exists: its file is on disk now. */
uint32_t guest_aux_version(struct vmt_guest *g, uint64_t id, bool *exists);
/* Since when its window has been held (CLOCK_REALTIME, its oldest ring's
 * making) and by how many daemons, this one included; 0 without rings. */
void guest_window_held(const struct vmt_guest *g, uint64_t *since_ns, uint32_t *lifetimes);
/* Memory the rings take. */
uint64_t guest_mem(const struct vmt_guest *g);
/* Metadata it holds in memory: a bundle being received, one whose aux file
 * is not written yet (twice while a writer job holds a copy), task tables. */
uint64_t guest_meta_held(const struct vmt_guest *g);
/* Tell env->mem what guest_meta_held() is now. */
void guest_settle_meta(struct vmt_guest *g);
/* The aux job queued for its bundle came back: written (ok) or not. */
void guest_aux_done(struct vmt_guest *g, uint64_t aux_id, bool ok);
/* Its QEMU's pid, as far as the host can tell (qemu_pid_find); 0 if
 * unknown or the host's own source. */
static inline pid_t guest_qemu_pid(const struct vmt_guest *g)
{
	if (g->src)
		return 0;
	return qemu_pid_find(g->conf.pidfile, g->ctl.peer_pid, g->discovered ? g->conf.name : NULL);
}
/* guest-upgrade.c: may the daemon hand over now (else why)? */
bool guest_can_hand_over(const struct vmt_guest *g, char *why, size_t n);
/* Its rings (published) and a streaming session (record and channels) to
 * the upgrade being prepared; -errno. */
int guest_hand_over(struct vmt_guest *g, struct vmt_upgrade_out *o);
/* Before it connects: take the session handed over, STREAMING, without a
 * word to the agent; -ENOENT none, else -errno: refused (logged, counted
 * in in->refused), it connects afresh. */
int guest_adopt_session(struct vmt_guest *g, struct vmt_upgrade_in *in);
/* guest-alive.c: its QEMU exited with status 0; was that no clean
 * shutdown? True if its agent says BYE (VMT_HELLO_BYE), streamed, and did
 * not say it (what waits in the control channel read first). Once. */
bool guest_exit_unclean(struct vmt_guest *g);
/* guest-alive.c: the host knows its kernel crashed (libvirt said so): it
 * is not asked to flush, nor reported silent, until it speaks again. */
void guest_crashed(struct vmt_guest *g);
/* Ring bytes from the control rx. */
uint64_t guest_ctl_rejected_bytes(const struct vmt_guest *g);
uint64_t guest_ctl_rejected_msgs(const struct vmt_guest *g);

#endif
