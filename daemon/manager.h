/* SPDX-License-Identifier: MIT */
/*
 * manager: the daemon's state. Owns the event loop, the configuration, the
 * guests, the file writer and the control socket, and runs dumps:
 * trigger -> ask every connected agent to FLUSH (bounded wait) -> freeze
 * each guest's window where it is (its pages held in the rings) -> hand
 * it to the writer ->
 * answer whoever asked. Triggers that arrive while a dump is still
 * flushing join it; later ones wait for the next.
 */
#ifndef VMT_MANAGER_H
#define VMT_MANAGER_H

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "config.h"
#include "guest.h"
#include "mem.h"
#include "sample.h"
#include "sindex.h"
#include "writer.h"

struct vmt_guest;
struct vmt_client;
struct vmt_probe;

enum vmt_dump_phase {
	VMT_DUMP_DELAY,		/* coalescing window and --post: recording goes on */
	VMT_DUMP_FLUSH,		/* waiting for the agents' FLUSHED */
	VMT_DUMP_WRITE,		/* windows held, the writer writes them */
};

/* One dump as it moves from its first trigger to its files. */
struct vmt_dump {
	uint64_t id;
	enum vmt_dump_phase phase;
	bool all_guests;
	char **guests;		/* names when !all_guests */
	uint32_t nguests;
	uint32_t ntriggers;
	struct vmt_trigger triggers[VMT_SAMPLE_MAX_TRIGGERS];
	uint64_t triggers_dropped;	/* served, but beyond the sample's list */
	uint64_t window_ns;	/* keep this much before the trigger, 0 = the whole ring */
	uint64_t post_ns;	/* and record this much after it */
	uint64_t fire_at_ns;	/* CLOCK_MONOTONIC: end of DELAY */
	sd_event_source *timer;	/* DELAY's end, or FLUSH's timeout */
	unsigned jobs_left;
	struct vmt_waiter *waiters;	/* control clients waiting for the answer */
	char **files;		/* written, for the answer */
	uint32_t nfiles;
	int error;
};

/* What one trigger asks for. */
struct vmt_dump_req {
	char *const *names;	/* guests, n = 0: all */
	uint32_t n;
	const struct vmt_trigger *trigger;
	uint64_t window_ns;
	uint64_t post_ns;
	struct vmt_client *client;	/* to answer, or NULL */
	uint32_t request_id;
};

struct vmt_waiter {
	struct vmt_client *client;
	uint32_t request_id;
	struct vmt_waiter *next;
};

#define VMT_BOUNCE_SIZE 65536

struct vmt_manager {
	sd_event *event;
	uint8_t bounce[VMT_BOUNCE_SIZE];	/* guest data reads land here first */
	struct vmt_config conf;
	const char *config_path;
	struct vmt_guest_list guests;
	struct vmt_writer writer;
	struct vmt_control *control;
	struct vmt_discovery *discovery;
	struct vmt_probe *probe;	/* BPF detectors, NULL until started */
	uint64_t start_ns;
	uint64_t next_dump_id;
	uint64_t last_sample_ns;
	struct vmt_dump *cur;	/* flushing or writing */
	struct vmt_dump *next;	/* waiting for cur to finish */
	double tokens;		/* rate limit bucket */
	uint64_t tokens_at_ns;
	/* daemon-wide counters */
	uint64_t triggers_total;
	uint64_t triggers_suppressed;
	uint64_t retention_deleted;	/* files deleted by the retention rules */
	uint64_t housekeeping_runs;
	uint64_t dumps;
	uint64_t dump_errors;
	uint64_t samples_written;
	struct vmt_mem mem;	/* rings, metadata, dump reserve against memory_max */
	struct vmt_guest_env genv;	/* what every guest is given */
	struct vmt_sindex samples;	/* on disk, as the writer last saw: SAMPLES */
	char hostname[65];
};

/* The "auto" sizes of c from this machine (RAM, the state folder's file
 * system), said in the log; -EINVAL and err if they do not fit together. */
int manager_resolve_config(struct vmt_config *c, char *err, size_t err_len);
int manager_new(struct vmt_manager **out, struct vmt_config *conf, const char *config_path);
/* Runs until SIGTERM/SIGINT; returns the exit code for main(). */
int manager_run(struct vmt_manager *m);
void manager_free(struct vmt_manager *m);

/*
 * Ask for a dump. 0: it will happen (the client, if any, gets the files);
 * -ENOENT: a named guest does not exist; -EBUSY: an automatic trigger was
 * suppressed by the cooldown or the rate limit (and counted).
 */
int manager_request_dump(struct vmt_manager *m, const struct vmt_dump_req *rq);
/* A control client went away: forget it in pending answers. */
void manager_forget_client(struct vmt_manager *m, struct vmt_client *client);

/* Called by guests. */
void manager_guest_flushed(struct vmt_manager *m, struct vmt_guest *g);
/* Freeze one guest at once, without a flush, into its own sample (the
 * guest's aux is about to change). Ask manager_guest_may_dump() first:
 * the guest caused it, so its cooldown and budgets apply. */
void manager_dump_guest_now(struct vmt_manager *m, struct vmt_guest *g, const struct vmt_trigger *t);
/* A dump the guest caused: may it happen now? If not, it is counted as
 * suppressed (the guest's and the daemon's triggers_suppressed). */
bool manager_guest_may_dump(struct vmt_manager *m, struct vmt_guest *g);
/* Queue a copy of the guest's bundle; the guest keeps its own until the
 * aux file is written, so a failed write is tried again before a sample. */
void manager_submit_aux(struct vmt_manager *m, struct vmt_guest *g);
struct vmt_guest *manager_find_guest(struct vmt_manager *m, const char *name);
/* A guest that was not in the configuration (discovery). */
int manager_add_guest(struct vmt_manager *m, const struct vmt_guest_conf *gc, struct vmt_guest **out);
void manager_writer_done(struct vmt_job *job, void *userdata);
/* Apply the retention rules (and clear stale temporaries) in the writer. */
void manager_submit_retention(struct vmt_manager *m);
/* The retention rules applied now, in the caller's thread (at start);
 * the sample index is built from what they leave. */
void manager_apply_retention_now(struct vmt_manager *m);
void manager_free_dumps(struct vmt_manager *m);
/* manager-ctl.c: control requests (struct vmt_control_ops), and a dump's
 * answer to a client that asked for it. */
void manager_ctl_request(void *owner, struct vmt_client *cl, unsigned type, uint32_t id,
			 const uint8_t *p, uint32_t len);
void manager_ctl_gone(void *owner, struct vmt_client *cl);
void manager_answer_dump(struct vmt_client *cl, uint32_t id, char *const *files, uint32_t nfiles,
			 int error);
/* Re-read the configuration file; err says why it was refused. */
int manager_reload(struct vmt_manager *m, char *err, size_t err_len);


#endif
