/* SPDX-License-Identifier: MIT */
/*
 * config: /etc/vmtraced/vmtraced.yaml, parsed with libyaml into plain
 * structs. Pure: no globals, no I/O but reading the file. Every error names
 * the file, line and column and the field, e.g.
 *   vmtraced.yaml:12:5: guests[1].record.ring_size: "12Q" is not a size (...)
 * config_print() writes the normalized form `vmtraced -n -v` shows.
 * See docs/man/vmtraced.yaml.5.
 */
#ifndef VMT_CONFIG_H
#define VMT_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "detectors.h"	/* the BPF detectors: VMT_DET_* */

#define VMT_CONFIG_MAX_GUESTS 1024
#define VMT_CONFIG_MAX_DISCOVERY 64
#define VMT_CONFIG_MAX_EVENTS 4096	/* bytes of the joined event list */
#define VMT_LABELS_MAX 256	/* a guest's fleet labels, "k=v,k=v" and its NUL */

enum vmt_transport {
	VMT_TRANSPORT_AUTO = 0,	/* decided by what is found at the path */
	VMT_TRANSPORT_FIFO,	/* PATH.in / PATH.out pairs */
	VMT_TRANSPORT_SOCKET,	/* unix stream sockets, QEMU server=on */
};

/* What a guest records; defaults come from the top-level `record:` block. */
struct vmt_record_conf {
	uint64_t ring_size;	/* bytes per CPU on the host (rounded to pages) */
	uint32_t guest_buffer_kb;	/* per-CPU buffer the agent sets, 0 = leave */
	char clock[32];		/* trace clock the agent sets, "" = leave */
	char events[VMT_CONFIG_MAX_EVENTS];	/* "sched:*,irq:*", "" = leave as is */
	uint64_t meta_max;	/* bound on the guest's metadata bundle */
	uint32_t flush_timeout_ms;	/* wait for FLUSHED before a dump */
	uint32_t sessions_per_minute;	/* the agent's HELLOs past them wait, 0 = no limit */
	uint32_t compression;	/* VMT_FRAME_* (frame.h): how the ring keeps older pages */
	uint32_t compression_level;	/* zstd's level; lz4's acceleration */
	uint32_t compress_threads;	/* the compressor's workers, 0 = auto; the top-level record: only */
};
#define VMT_COMPRESS_THREADS_CONF_MAX 16
#define VMT_COMPRESSION_LEVEL_MAX 19

struct vmt_guest_conf {
	char name[65];
	char path[4096];	/* directory holding agent-ctl-path, trace-path-cpuN */
	enum vmt_transport transport;
	uint32_t cpus;		/* 0 = count the trace-path-cpuN channels found */
	char pidfile[4096];	/* QEMU's pidfile, for the detectors; "" = none */
	struct vmt_record_conf rec;
	char labels[VMT_LABELS_MAX];	/* fleet labels, "k=v,k=v" ("" = none) */
	int line;		/* where it was defined, for messages */
};

enum vmt_layout {
	VMT_LAYOUT_VMTRACED = 0,	/* DIR/<guest>/<port>: FIFO pairs or sockets */
	VMT_LAYOUT_LIBVIRT,	/* DIR/domain-<id>-<guest>/<port>: libvirt's unix channels */
};

/* A folder watched for guests that come and go (inotify). */
struct vmt_discovery_conf {
	char path[4096];
	enum vmt_layout layout;
	enum vmt_transport transport;	/* for the guests found there */
	int line;
};

struct vmt_trigger_conf {
	uint32_t coalesce_ms;	/* triggers this close after the first join its dump */
	uint32_t cooldown_ms;	/* per guest: no new dump of it sooner than this */
	uint32_t max_per_minute;	/* all dumps together, 0 = no limit */
	uint32_t per_guest_per_minute;	/* dumps one guest causes, 0 = no limit */
};

struct vmt_retention_conf {
	uint64_t max_bytes;	/* samples and aux files on disk, 0 = no limit, VMT_AUTO */
	uint32_t max_samples;	/* per guest, 0 = no limit */
	uint32_t max_aux;	/* aux files per guest, 0 = no limit */
	uint64_t max_age_s;	/* 0 = no limit */
	/* not a key: set with fleet:, samples not yet uploaded (no
	 * FILE.uploaded marker) go only when max_bytes forces them */
	int hold_unuploaded;
};

struct vmt_control_conf {
	char group[64];		/* may use every command, "" = root only */
	char read_group[64];	/* may use status, guests, samples; "" = nobody more */
	uint32_t idle_timeout_ms;	/* a client that asks nothing is hung up on */
};

/* The host's own ftrace, recorded like a guest named "host". */
struct vmt_host_conf {
	int enabled;
	char events[VMT_CONFIG_MAX_EVENTS];	/* "kvm:*,sched:sched_switch" */
	char clock[32];		/* host trace clock, "" = mono */
	uint64_t ring_size;	/* bytes per host CPU */
	uint32_t buffer_kb;	/* per-CPU buffer of the host instance */
	int qemu_only;		/* sched events filtered to QEMU processes' threads */
};

/* Clock sync with the guests' agents (daemon/guest-sync.c). */
struct vmt_sync_conf {
	uint32_t interval_ms;	/* between rounds, 0 = one round per session */
	uint32_t probes;	/* per round */
	uint32_t timeout_ms;	/* for one probe's answer */
	int markers;		/* trace markers on both sides, to measure alignment */
	char kvm_debugfs[3841];	/* KVM's debugfs folder: vCPU TSC offsets */
};

struct vmt_detector_conf {
	int enabled;
	uint32_t threshold_ms;	/* vcpu_starvation, kvm_exit; 0 for the others */
	uint32_t min_interval_ms;	/* at most one event per interval, in BPF; 0 = none */
	int any_process;	/* oom: any process, not only guests' */
	int on_clean_exit;	/* process_death: also an exit with status 0 */
};

/* detectors.guest_silence (daemon/guest-alive.c): not a BPF detector, the
 * guests' agents watched over their control channel. */
struct vmt_silence_conf {
	int enabled;
	uint32_t timeout_ms;	/* nothing from a streaming guest this long: it stopped */
};

/* detectors.libvirt_events (daemon/lvmeta-events.c): not BPF either,
 * libvirt's own word (a domain crashed or panicked, its watchdog fired) on
 * the guests discovery found in libvirt's folders. */
struct vmt_lvevents_conf {
	int enabled;
	char uri[256];		/* the read-only connection's (the fleet's labels' too) */
};

/* fleet: NATS servers, samples shipped to a JetStream object store and
 * dumps asked for from other hosts (daemon/fleet.c, docs/FLEET.md). */
#define VMT_FLEET_MAX_SERVERS 16
#define VMT_FLEET_TOKEN_MAX 64	/* host_id, subject_prefix, bucket */
#define VMT_FLEET_ACCEPT_HOST 1u	/* <prefix>.dump.<host>.<guest|_all> */
#define VMT_FLEET_ACCEPT_LABEL 2u	/* <prefix>.dump.label.<key>.<value> */
#define VMT_FLEET_INBOX_MAX 128	/* inbox_prefix, bytes */
#define VMT_FLEET_REPLY_MAX 255	/* a reply subject, bytes */
#define VMT_FLEET_POST_MAX_S 3600	/* a request's window and post, and max_post */
struct vmt_fleet_conf {
	int enabled;		/* a fleet: block was given */
	uint32_t nservers;
	char servers[VMT_FLEET_MAX_SERVERS][256];
	char user[128];
	char password[128];
	char nkey_seed[4096];	/* files */
	char creds[4096];
	int tls;		/* a tls: block was given (natsconn.h: TLS or nothing) */
	char tls_ca[4096];
	char tls_cert[4096];
	char tls_key[4096];
	char host_id[VMT_FLEET_TOKEN_MAX + 1];	/* "" = the hostname */
	char subject_prefix[VMT_FLEET_TOKEN_MAX + 1];
	char bucket[VMT_FLEET_TOKEN_MAX + 1];
	uint32_t replicas;
	uint32_t accept;	/* VMT_FLEET_ACCEPT_* */
	uint32_t max_per_minute;	/* requests taken over NATS, 0 = no limit */
	uint32_t max_post_s;	/* a request's post, at most */
	char inbox_prefix[VMT_FLEET_INBOX_MAX + 1];	/* replies go under "<it>." only */
	uint32_t queue_max;	/* files waiting for upload, counted before the marker */
	int libvirt_labels;	/* labels from libvirt domain metadata (daemon/lvmeta.c) */
	char libvirt_uri[256];	/* the read-only connection's URI */
};

struct vmt_config {
	char state_dir[4096];	/* samples and aux files, one folder per guest */
	char control_socket[4096];
	int log_level;		/* VMT_LOG_* */
	int zstd_level;
	int sandbox;		/* a system call filter once set up (daemon/sandbox.c) */
	char user[64];		/* run as this user once set up (daemon/priv.c), "" = stay */
	uint64_t memory_max;	/* all rings together, 0 = no cap, VMT_AUTO */
	uint64_t dump_reserve;	/* pages dumps may borrow, counted in memory_max */
	bool dump_reserve_set;	/* written in the file, not the default */
	uint64_t forget_after_s;	/* free a disconnected guest's rings after, 0 = never */
	struct vmt_record_conf rec;	/* defaults */
	struct vmt_trigger_conf triggers;
	struct vmt_retention_conf retention;
	struct vmt_control_conf control;
	struct vmt_host_conf host;
	struct vmt_sync_conf sync;
	struct vmt_detector_conf detectors[VMT_DET_COUNT];
	struct vmt_silence_conf silence;
	struct vmt_lvevents_conf libvirt_events;
	struct vmt_fleet_conf fleet;
	uint32_t ndiscovery;
	struct vmt_discovery_conf *discovery;
	uint32_t nguests;
	struct vmt_guest_conf *guests;
};

/* A size the machine decides (config_resolve): the default of memory_max
 * and retention.max_bytes, or "auto" written out. */
#define VMT_AUTO UINT64_MAX
/* What "auto" comes to: a sixteenth of RAM for memory_max (256 MiB to
 * 4 GiB), a tenth of the state folder's file system for max_bytes (at most
 * 20 GiB, at least 64 MiB). */
#define VMT_AUTO_MEM_MIN (256ull << 20)
#define VMT_AUTO_MEM_MAX (4ull << 30)
#define VMT_AUTO_DISK_MIN (64ull << 20)
#define VMT_AUTO_DISK_MAX (20ull << 30)

/* Defaults with no guests. */
void config_init(struct vmt_config *c);
/*
 * Resolve the "auto" sizes from the machine: ram_bytes (RAM) and fs_bytes
 * (the size of the state folder's file system, 0 if unknown). Pure: the
 * caller measures. -EINVAL and why when the result does not hold together
 * (dump_reserve must stay under memory_max).
 */
int config_resolve(struct vmt_config *c, uint64_t ram_bytes, uint64_t fs_bytes, char *why,
		   size_t why_len);
/*
 * Parse path into c, which is overwritten: free a config loaded before
 * (a reload loads into a fresh struct and swaps on success). On error
 * returns -EINVAL (or -errno for I/O, -ENOMEM), writes a one-line message
 * to err (no newline; err may be NULL) and leaves c as config_init() does.
 * config_load_string() reads len bytes of text, which need no NUL; name
 * stands for the file in messages.
 */
int config_load(struct vmt_config *c, const char *path, char *err, size_t err_len);
int config_load_string(struct vmt_config *c, const char *name, const char *text, size_t len,
		       char *err, size_t err_len);
void config_free(struct vmt_config *c);
/* Whether s is one NATS subject token of ours (a subject_prefix, bucket):
 * [A-Za-z0-9_-], 1 to 64 bytes. */
bool config_token_valid(const char *s);
/* Whether s is a token the fleet's subjects give a meaning to ("label",
 * "_all"): no host_id, label key or value may be one. */
bool config_token_reserved(const char *s);
/* A label key or value, or a host_id: a token and not a reserved one. */
bool config_label_token_valid(const char *s);
/* Whether s is a NATS subject without wildcards: tokens of printable
 * ASCII but '.', '*', '>', none empty, 1 to max bytes. */
bool config_subject_valid(const char *s, size_t max);
/* Normalized YAML: every field, defaults filled in, sizes in bytes. */
void config_print(const struct vmt_config *c, FILE *f);
/*
 * Whether a and b would record the same way (every field but line): a
 * reload keeps the rings of a guest whose entry did not change. A field
 * added to vmt_guest_conf or vmt_record_conf must be added here too.
 */
bool config_guest_equal(const struct vmt_guest_conf *a, const struct vmt_guest_conf *b);
const char *transport_name(enum vmt_transport t);
const char *layout_name(enum vmt_layout l);
/* "process_death", ...; "unknown" out of range. */
const char *detector_name(unsigned id);
/* Its VMT_DETS_* (lib/detectors.h); 0 out of range. */
unsigned detector_settings(unsigned id);

#endif
