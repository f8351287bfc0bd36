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
struct vmt_guest_prev;
struct vmt_prev_set;

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
	/* the previous boot's pages came (a persistent ring buffer): write
	 * them as a sample of that boot; may be NULL */
	void (*prev_boot)(void *owner, struct vmt_guest *g, struct vmt_prev_set *set);
	/* a line into the host's own trace (clock sync markers); may be NULL */
	void (*host_mark)(void *owner, const char *text);
};

/* The previous boot's pages a guest kept (guest-prev.c), for a sample of
 * that boot; valid during the prev_boot call only, which takes the pages
 * (cpu[c].data moved out). They count against memory_max until
 * guest_prev_written() says the sample is done with. */
struct vmt_prev_set {
	uint32_t ncpus;
	const uint32_t *npages;	/* per CPU */
	struct vmt_buf *cpu;	/* per CPU: npages[c] whole pages */
	const uint64_t *rejected;	/* per CPU: pages left out, failing page_scan */
	uint32_t aux_version;	/* the aux they decode with */
	uint64_t aux_id;
	bool queue_aux;		/* that is the aux in force, its file not written nor queued */
	const char *guest;	/* its name */
	uint32_t nrings;	/* the sample's CPUs (>= ncpus) */
	const struct vmt_page_layout *layout;
	struct vmt_trigger trigger;	/* kind guest, reason "previous boot (...)" */
};

/*
 * A guest is a recorder (rings, aux, flush target) fed by a source: an
 * agent behind channels (guest-agent.c, the default) or the host's own
 * ftrace (hostsrc.h, guest_set_source). What the guest asks of it:
 */
struct vmt_source_desc {
	pid_t qemu_pid;	/* its QEMU's, as far as the host can tell; 0: none or unknown */
	bool host_clock;	/* its pages are stamped in the host's trace clock */
	/* a session of its own: its clock synced to the host's, its silence
	 * watched, its rings in the fd store, kept across an upgrade */
	bool session;
};
struct vmt_source_ops {
	/* Start feeding the guest, or try again (its timer retries). */
	void (*start)(void *src);
	/* Flush for dump id: true if the answer is to come (the guest's
	 * flush ends then), false if the pages are in the rings already or
	 * there is none to ask. */
	bool (*flush)(void *src, uint64_t id);
	/* A dump was written: read on where reading was paused. */
	void (*resume)(void *src);
	void (*describe)(const void *src, struct vmt_source_desc *d);
	/* The guest goes: its channels or files closed, the source freed. */
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


int guest_new(const struct vmt_guest_env *env, const struct vmt_guest_conf *conf,
	      struct vmt_guest **out);
void guest_free(struct vmt_guest *g);
/* Start its source now: an agent's channels opened (and retried on a
 * timer). */
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
 * The holds go with the job either way: its release, which job_free()
 * calls on the loop, lets go of them.
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
/* Its configuration in force (a reload changes it through guest_reconf). */
const struct vmt_guest_conf *guest_conf(const struct vmt_guest *g);
enum vmt_guest_state guest_state(const struct vmt_guest *g);
/* What a reload may change of a guest it keeps: the pidfile (what the
 * detectors watch), the codec and level (the next batch compressed). */
void guest_reconf(struct vmt_guest *g, const struct vmt_guest_conf *nc);

/* Discovery's: found in a discovery folder (not configured), and whether
 * its folder was there at the last rescan. */
bool guest_discovered(const struct vmt_guest *g);
bool guest_present(const struct vmt_guest *g);
void guest_set_discovered(struct vmt_guest *g);
void guest_set_present(struct vmt_guest *g, bool present);
/* Its folder moved (libvirt restarted it under a new id): logged. */
void guest_set_path(struct vmt_guest *g, const char *path);
/* Its QEMU's pid as an upgrade's predecessor knew it (0: none), once. */
pid_t guest_take_qemu_handed(struct vmt_guest *g);

/* What `vmtracectl status` shows of a guest, at one moment. */
struct vmt_guest_status {
	const char *name, *state, *release, *labels;	/* release NULL: no HELLO yet */
	const char *compression;
	bool have_aux, discovered;
	uint32_t aux_version, ncpus, page_size;
	uint64_t uptime_ns, mem_used;
	/* over its rings */
	uint64_t pages, capacity, bytes_in, pages_in, events_in, pages_overwritten;
	uint64_t pages_guest_lost, events_guest_lost, pages_rejected, bytes_rejected, ts_backwards;
	uint64_t first_ts, last_ts;	/* its window; first_ts UINT64_MAX: empty */
	uint64_t frame_pages, frame_bytes, frames_made, pages_stored_raw, frames_overwritten;
	uint64_t window_since_ns;	/* with lifetimes, when it has rings */
	uint32_t lifetimes;
	struct vmt_guest_counters c;
	uint64_t late_answers, silences;
};
void guest_status(const struct vmt_guest *g, struct vmt_guest_status *st);

/* A source other than an agent (the host's ftrace, hostsrc.h) starts the
 * guest streaming at once: its hello, its aux (the bundle taken, its
 * version given; *exists: its file on disk already), its pages' layout. */
uint32_t guest_start_local(struct vmt_guest *g, const struct vmt_hello *hl, struct vmt_aux *a,
			   const struct vmt_page_layout *l, bool *exists);
/* From now on the guest is fed by src (ops) instead of an agent (whose
 * channels it has not opened: call before guest_connect); guest_free()
 * frees it. */
void guest_set_source(struct vmt_guest *g, const struct vmt_source_ops *ops, void *src);
/* That source's state, if ops feeds it; else NULL */
void *guest_source(const struct vmt_guest *g, const struct vmt_source_ops *ops);
/* The ring a source fills for cpu (< its ncpus). */
struct vmt_ring *guest_ring(struct vmt_guest *g, uint32_t cpu);
/* Its task tables now (taken), as an agent's TASKS. */
void guest_set_tasks(struct vmt_guest *g, struct vmt_buf *t);
/* Its agent watched over (guest_silence's counters). */
const struct vmt_alive_counters *guest_alive_counters(const struct vmt_guest *g);
/* A source stopped reading: its next page held, the dump reserve used up. */
void guest_count_read_pause(struct vmt_guest *g);
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
/* guest-prev.c: a sample of its previous boot (bytes of pages) is written
 * or failed: that memory is free. */
void guest_prev_written(struct vmt_guest *g, uint64_t bytes);
/* Its QEMU's pid, as far as the host can tell (qemu_pid_find); 0 if
 * unknown or the host's own source. */
pid_t guest_qemu_pid(const struct vmt_guest *g);
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
/* guest-alive.c: the host knows its kernel crashed (libvirt said so) or
 * its QEMU died (process_death): it is not asked to flush (a FLUSH out is
 * waited for no longer), nor reported silent, until a session streams
 * again (the pages still read are from before). */
void guest_crashed(struct vmt_guest *g);
/* Ring bytes from the control rx. */
uint64_t guest_ctl_rejected_bytes(const struct vmt_guest *g);
uint64_t guest_ctl_rejected_msgs(const struct vmt_guest *g);

#endif
