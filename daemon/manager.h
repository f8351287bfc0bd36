/* SPDX-License-Identifier: MIT */
/*
 * manager: the daemon's state. Owns the event loop, the configuration, the
 * guests, the file writer and the control socket, and runs dumps:
 * trigger -> ask every connected agent to FLUSH (bounded wait) -> freeze
 * each guest's window into a private copy -> hand it to the writer ->
 * answer whoever asked. Triggers that arrive while a dump is still
 * flushing join it; later ones wait for the next.
 */
#ifndef VMT_MANAGER_H
#define VMT_MANAGER_H

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "config.h"
#include "sample.h"
#include "writer.h"

struct vmt_guest;
struct vmt_client;

/* One dump request as it moves from flushing to written. */
struct vmt_dump {
	uint64_t id;
	bool writing;		/* frozen and handed to the writer */
	bool all_guests;
	char **guests;		/* names when !all_guests */
	uint32_t nguests;
	uint32_t ntriggers;
	struct vmt_trigger triggers[VMT_SAMPLE_MAX_TRIGGERS];
	uint32_t triggers_dropped;
	sd_event_source *timeout;
	unsigned jobs_left;
	/* who waits for the answer: control clients */
	struct vmt_waiter *waiters;
	/* files written, for the answer */
	char **files;
	uint32_t nfiles;
	int error;
};

struct vmt_waiter {
	struct vmt_client *client;
	uint32_t request_id;
	struct vmt_waiter *next;
};

struct vmt_manager {
	sd_event *event;
	struct vmt_config conf;
	const char *config_path;
	struct vmt_guest **guests;
	uint32_t nguests;
	struct vmt_writer writer;
	struct vmt_control *control;
	uint64_t start_ns;
	uint64_t next_dump_id;
	uint64_t last_sample_ns;
	struct vmt_dump *cur;	/* flushing or writing */
	struct vmt_dump *next;	/* waiting for cur to finish */
	/* daemon-wide counters */
	uint64_t dumps;
	uint64_t dump_errors;
	uint64_t samples_written;
	uint64_t mem_used;
	char hostname[65];
};

int manager_new(struct vmt_manager **out, struct vmt_config *conf, const char *config_path);
/* Runs until SIGTERM/SIGINT; returns the exit code for main(). */
int manager_run(struct vmt_manager *m);
void manager_free(struct vmt_manager *m);

/*
 * Ask for a dump of the named guests (NULL/0 = all). waiter may be NULL.
 * -ENOENT if a named guest does not exist.
 */
int manager_request_dump(struct vmt_manager *m, char *const *names, uint32_t n,
			 const struct vmt_trigger *t, struct vmt_client *client, uint32_t request_id);
/* A control client went away: forget it in pending answers. */
void manager_forget_client(struct vmt_manager *m, struct vmt_client *client);

/* Called by guests. */
void manager_guest_flushed(struct vmt_manager *m, struct vmt_guest *g);
/* Freeze one guest at once, without a flush, into its own sample (the
 * guest's aux is about to change). */
void manager_dump_guest_now(struct vmt_manager *m, struct vmt_guest *g, const struct vmt_trigger *t);
void manager_submit_aux(struct vmt_manager *m, struct vmt_guest *g);
struct vmt_guest *manager_find_guest(struct vmt_manager *m, const char *name);

#endif
