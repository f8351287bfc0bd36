/* SPDX-License-Identifier: MIT */
/*
 * manager: the daemon's top. Owns the event loop, the configuration and its
 * reloads, signals, the guest list, and the modules it gives them to: the
 * writer, the dumps (dump.h), memory (mem.h), the control socket (whose
 * requests it answers, manager-ctl.c), discovery, the host source and the
 * detectors, each of which reports back through the callbacks it is given.
 */
#ifndef VMT_MANAGER_H
#define VMT_MANAGER_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "config.h"
#include "guest.h"
#include "mem.h"
#include "sample.h"
#include "dump.h"
#include "sindex.h"
#include "compress.h"
#include "recover.h"
#include "upgrade.h"
#include "writer.h"

struct vmt_guest;
struct vmt_client;
struct vmt_probe;

#define VMT_BOUNCE_SIZE 65536
/* Batches being compressed at once, over all rings. */
#define VMT_COMPRESS_JOBS 16

struct vmt_manager {
	sd_event *event;
	uint8_t bounce[VMT_BOUNCE_SIZE];	/* guest data reads land here first */
	struct vmt_config conf;
	uint32_t compress_threads;	/* the compressor's workers, resolved at start */
	const char *config_path;
	struct vmt_guest_list guests;
	struct vmt_writer writer;
	struct vmt_compressor comp;	/* compressed rings' worker */
	struct vmt_control *control;
	struct vmt_discovery *discovery;
	struct vmt_probe *probe;	/* BPF detectors, NULL until started */
	uint64_t start_ns;
	uint64_t housekeeping_runs;
	struct vmt_dumps dumps;	/* triggers, dumps in progress, the writer's answers */
	struct vmt_mem mem;	/* rings, metadata, dump reserve against memory_max */
	struct vmt_guest_env genv;	/* what every guest is given */
	struct vmt_sindex samples;	/* on disk, as the writer last saw: SAMPLES */
	struct vmt_recover recover;	/* rings a crashed predecessor left, until claimed */
	struct vmt_upgrade_in upgrade;	/* what a predecessor handed over (upgrade.h) */
	sd_event_source *keeper_src;	/* a predecessor's keeper, until it exits */
	bool host_after_keeper;		/* the host source waits for the keeper: its copy of
					 * the old fds keeps the old instance busy */
	sd_event_source *setup_rest[2];
	sd_event_source *soon;		/* a hand-over asked by a reload, until it is made */
	unsigned soon_tries;	/* a successor's detectors and host source, after the take-over */
	char exe[PATH_MAX];		/* the binary an upgrade execs */
	char **argv;
	char hostname[65];
	struct vmt_fleet *fleet;	/* NULL without fleet: (fleet.h) */
	struct vmt_lvmeta *lvmeta;	/* the fleet's labels from libvirt, NULL when off (lvmeta.h) */
	struct vmt_hostpriv *hostpriv;	/* the host source's privileged helper (hostpriv.h) */
};

/* The "auto" sizes of c from this machine (RAM, the state folder's file
 * system), said in the log; -EINVAL and err if they do not fit together. */
int manager_resolve_config(struct vmt_config *c, char *err, size_t err_len);
/*
 * `vmtraced -n`: the optional libraries c needs (libnats and libcrypto for
 * fleet:, libvirt and libxml2 for libvirt_events or the fleet's
 * libvirt_labels) loaded as the daemon would load them: 0, or -ELIBACC with
 * err naming the key and the library. A running daemon without one keeps
 * recording and says so in status (manager-fleet.c).
 */
int manager_check_libraries(const struct vmt_config *c, char *err, size_t err_len);
int manager_new(struct vmt_manager **out, struct vmt_config *conf, const char *config_path);
/* Runs until SIGTERM/SIGINT; returns the exit code for main(). */
int manager_run(struct vmt_manager *m);
void manager_free(struct vmt_manager *m);

struct vmt_guest *manager_find_guest(struct vmt_manager *m, const char *name);
/* A guest that was not in the configuration (discovery). */
int manager_add_guest(struct vmt_manager *m, const struct vmt_guest_conf *gc, struct vmt_guest **out);
/* manager-ctl.c: control requests (struct vmt_control_ops), and a dump's
 * answer to a client that asked for it. */
void manager_ctl_request(void *owner, struct vmt_client *cl, unsigned type, uint32_t id,
			 const uint8_t *p, uint32_t len);
void manager_ctl_gone(void *owner, struct vmt_client *cl);
void manager_answer_dump(struct vmt_client *cl, uint32_t id, char *const *files, uint32_t nfiles,
			 int error);
/* manager-upgrade.c: the binary's path and argv, for an upgrade's execve. */
void manager_upgrade_init(struct vmt_manager *m, char **argv);
/* May it hand over now? -EBUSY (and others) with why. */
int manager_upgrade_check(struct vmt_manager *m, char *why, size_t n);
/* Hand over to the installed binary: returns only if that failed (logged). */
int manager_upgrade(struct vmt_manager *m);
/* Re-read the configuration file; err says why it was refused. */
int manager_reload(struct vmt_manager *m, char *err, size_t err_len);


#endif
