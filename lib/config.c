/* SPDX-License-Identifier: MIT */
/*
 * config: the life of a struct vmt_config (defaults, load, free, compare)
 * and the top level of the file: the daemon-wide settings and the
 * triggers:, retention: and control: blocks. record:/host: are read in
 * config_record.c, guests:/discovery: in config_guests.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clocksync.h"
#include "config-int.h"
#include "frame.h"
#include "log.h"
#include "util.h"

#define CONFIG_FILE_MAX (16 * MiB)
/* Below 1MiB a cap on all rings, or on all samples, is a typo. */
#define MEMORY_MIN MiB
#define MEMORY_MAX (64 * TiB)
#define RESERVE_MAX (64 * GiB)
#define RETAIN_BYTES_MIN MiB
#define RETAIN_BYTES_MAX (1024 * TiB)
#define RETAIN_SAMPLES_MAX 1000000
#define FORGET_MAX_MS (365 * DAY_MS)
#define AGE_MAX_MS (3650 * DAY_MS)
#define COALESCE_MAX_MS (60 * SEC_MS)
#define SYNC_INTERVAL_MIN_MS 100
#define SYNC_INTERVAL_MAX_MS (3600 * SEC_MS)
#define COOLDOWN_MAX_MS DAY_MS
#define PER_MINUTE_MAX 600
#define GROUP_MAX 32	/* useradd's limit */

/* The obj of every top-level key: the config and the blocks that wait. */
struct cfg_parser {
	struct yamlconf y;
	struct vmt_config *c;
	yaml_node_t *guests;	/* parsed after `record:` wherever it stands */
	yaml_node_t *discovery;	/* parsed after the guests, whose paths it checks */
	yaml_node_t *reserve;	/* dump_reserve, checked against memory_max */
};

static const struct {
	const char *name;
	int level;
} log_levels[] = {
	{ "error", VMT_LOG_ERR },
	{ "warning", VMT_LOG_WARNING },
	{ "notice", VMT_LOG_NOTICE },
	{ "info", VMT_LOG_INFO },
	{ "debug", VMT_LOG_DEBUG },
};

const char *config_log_level_name(int level)
{
	for (size_t i = 0; i < ARRAY_SIZE(log_levels); i++)
		if (log_levels[i].level == level)
			return log_levels[i].name;
	return "info";
}

static void record_init(struct vmt_record_conf *r)
{
	memset(r, 0, sizeof(*r));
	r->ring_size = 4 * MiB;
	r->guest_buffer_kb = 4096;
	strcpy(r->clock, "mono");
	strcpy(r->events, "sched:*,irq:*,timer:*");
	r->meta_max = 64 * MiB;
	r->sessions_per_minute = 6;
	r->compression = VMT_FRAME_TCODE;	/* bench/README.md: tcode (issue 27) */
	r->compression_level = 1;
	r->flush_timeout_ms = 1000;
}

void config_init(struct vmt_config *c)
{
	memset(c, 0, sizeof(*c));
	strcpy(c->state_dir, "/var/lib/vmtraced");
	strcpy(c->control_socket, "/run/vmtraced/control.sock");
	c->log_level = VMT_LOG_INFO;
	c->zstd_level = 3;
	c->memory_max = VMT_AUTO;
	c->retention.max_bytes = VMT_AUTO;
	c->retention.max_aux = 8;
	c->dump_reserve = 32 * MiB;
	c->forget_after_s = 3600;
	record_init(&c->rec);
	c->control.idle_timeout_ms = 30000;
	c->triggers.coalesce_ms = 500;
	c->triggers.cooldown_ms = 10000;
	c->triggers.max_per_minute = 12;
	c->triggers.per_guest_per_minute = 4;
	/* the rest of retention and control: all zero, no limit and root only */
	c->host.enabled = 0;
	strcpy(c->host.events, "kvm:*,sched:sched_switch,sched:sched_wakeup,sched:sched_waking");
	strcpy(c->host.clock, "mono");
	c->host.ring_size = 4 * MiB;
	c->host.buffer_kb = 4096;
	c->host.qemu_only = 1;
	c->sync.interval_ms = 2000;
	c->sync.probes = 8;
	c->sync.timeout_ms = 1000;
	strcpy(c->sync.kvm_debugfs, "/sys/kernel/debug/kvm");
	config_detect_init(c);
	config_fleet_init(&c->fleet);
}

void config_free(struct vmt_config *c)
{
	free(c->guests);
	c->guests = NULL;
	c->nguests = 0;
	free(c->discovery);
	c->discovery = NULL;
	c->ndiscovery = 0;
}

/* compression and its level are not compared: a reload changes them in
 * place (manager-reload.c), the window stays */
static bool record_equal(const struct vmt_record_conf *a, const struct vmt_record_conf *b)
{
	return a->ring_size == b->ring_size && a->guest_buffer_kb == b->guest_buffer_kb &&
	       !strcmp(a->clock, b->clock) && !strcmp(a->events, b->events) &&
	       a->meta_max == b->meta_max && a->flush_timeout_ms == b->flush_timeout_ms;
}

/* Field by field: bytes after a string's NUL may differ. */
bool config_guest_equal(const struct vmt_guest_conf *a, const struct vmt_guest_conf *b)
{
	return !strcmp(a->name, b->name) && !strcmp(a->path, b->path) &&
	       a->transport == b->transport && a->cpus == b->cpus && record_equal(&a->rec, &b->rec);
}

/* ---- triggers, retention, control -------------------------------------- */

static int trig_coalesce(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_trigger_conf *t = obj;
	uint64_t ms;
	int r;

	r = yamlconf_read_duration(y, v, field, 1, 0, COALESCE_MAX_MS, &ms);
	if (r < 0)
		return r;
	t->coalesce_ms = (uint32_t)ms;
	return 0;
}

static int trig_cooldown(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_trigger_conf *t = obj;
	uint64_t ms;
	int r;

	r = yamlconf_read_duration(y, v, field, 1, 0, COOLDOWN_MAX_MS, &ms);
	if (r < 0)
		return r;
	t->cooldown_ms = (uint32_t)ms;
	return 0;
}

static int trig_per_minute(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_trigger_conf *t = obj;

	return yamlconf_read_u32(y, v, field, 0, PER_MINUTE_MAX, &t->max_per_minute);
}

static int trig_per_guest(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_trigger_conf *t = obj;

	return yamlconf_read_u32(y, v, field, 0, PER_MINUTE_MAX, &t->per_guest_per_minute);
}

static const struct yamlconf_key trigger_keys[] = {
	{ "coalesce", trig_coalesce },
	{ "cooldown", trig_cooldown },
	{ "max_per_minute", trig_per_minute },
	{ "per_guest_per_minute", trig_per_guest },
};

/* A size, or "auto" (VMT_AUTO: the machine decides, config_resolve()). */
static int read_size_auto(struct yamlconf *y, yaml_node_t *v, const char *field, uint64_t min,
			  uint64_t max, uint64_t *out)
{
	if (v->type == YAML_SCALAR_NODE && v->data.scalar.length == 4 &&
	    !memcmp(v->data.scalar.value, "auto", 4)) {
		*out = VMT_AUTO;
		return 0;
	}
	return yamlconf_read_size(y, v, field, min, max, true, out);
}

static int ret_max_bytes(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_retention_conf *rt = obj;

	return read_size_auto(y, v, field, RETAIN_BYTES_MIN, RETAIN_BYTES_MAX, &rt->max_bytes);
}

/* A count from 0 to RETAIN_SAMPLES_MAX. */
static int ret_count(struct yamlconf *y, yaml_node_t *v, const char *field, uint32_t *out)
{
	long long n;
	int r = yamlconf_read_int(y, v, field, 0, RETAIN_SAMPLES_MAX, &n);

	if (r == 0)
		*out = (uint32_t)n;
	return r;
}

static int ret_max_samples(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	return ret_count(y, v, field, &((struct vmt_retention_conf *)obj)->max_samples);
}

static int ret_max_aux(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	return ret_count(y, v, field, &((struct vmt_retention_conf *)obj)->max_aux);
}

static int ret_max_age(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_retention_conf *rt = obj;

	return yamlconf_read_duration(y, v, field, SEC_MS, 0, AGE_MAX_MS, &rt->max_age_s);
}

static const struct yamlconf_key retention_keys[] = {
	{ "max_bytes", ret_max_bytes },
	{ "max_samples", ret_max_samples },
	{ "max_aux", ret_max_aux },
	{ "max_age", ret_max_age },
};

/* useradd's rule for names, so a user or group that cannot exist is a typo. */
static bool account_is_valid(const char *s)
{
	size_t len = strlen(s);

	if (!len)
		return true;	/* none */
	if (len > GROUP_MAX || !((s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
		return false;
	for (size_t i = 1; i < len; i++) {
		char ch = s[i];

		if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' ||
		      (ch == '$' && i == len - 1)))
			return false;
	}
	return true;
}

/* A user or group name (what: "user", "group") into dst of GROUP_MAX + 1. */
static int account_parse(struct yamlconf *y, yaml_node_t *n, const char *field, const char *what,
			 char *dst)
{
	const char *s = NULL;
	char expect[32];
	int r;

	snprintf(expect, sizeof(expect), "a %s name", what);
	r = yamlconf_read_scalar(y, n, field, expect, true, &s);
	if (r < 0)
		return r;
	if (!account_is_valid(s))
		return yamlconf_error(y, n, field,
				      "%s is not a %s name ([a-z_][a-z0-9_-]*, optionally ending in $, at most %d characters)",
				      SHOW(s), what, GROUP_MAX);
	strcpy(dst, s);
	return 0;
}

static int ctl_group(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_control_conf *ctl = obj;

	return account_parse(y, v, field, "group", ctl->group);
}

static int ctl_read_group(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_control_conf *ctl = obj;

	return account_parse(y, v, field, "group", ctl->read_group);
}

static int ctl_idle(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_control_conf *ctl = obj;
	uint64_t ms;
	int r;

	r = yamlconf_read_duration(y, v, field, 1, 100, 3600 * 1000, &ms);
	if (r < 0)
		return r;
	ctl->idle_timeout_ms = (uint32_t)ms;
	return 0;
}

static const struct yamlconf_key control_keys[] = {
	{ "group", ctl_group },
	{ "read_only_group", ctl_read_group },
	{ "idle_timeout", ctl_idle },
};

/* ---- clock_sync ---------------------------------------------------------- */

static int sync_interval(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_sync_conf *s = obj;
	uint64_t ms;
	int r;

	r = yamlconf_read_duration(y, v, field, 1, 0, SYNC_INTERVAL_MAX_MS, &ms);
	if (r < 0)
		return r;
	if (ms && ms < SYNC_INTERVAL_MIN_MS)
		return yamlconf_error(y, v, field, "at least %dms, or 0 for one round per session",
				      SYNC_INTERVAL_MIN_MS);
	s->interval_ms = (uint32_t)ms;
	return 0;
}

static int sync_probes(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_sync_conf *s = obj;
	long long n;
	int r;

	r = yamlconf_read_int(y, v, field, 1, VMT_SYNC_MAX_PROBES, &n);
	if (r < 0)
		return r;
	s->probes = (uint32_t)n;
	return 0;
}

static int sync_timeout(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_sync_conf *s = obj;
	uint64_t ms;
	int r;

	r = yamlconf_read_duration(y, v, field, 1, 10, 60 * SEC_MS, &ms);
	if (r < 0)
		return r;
	s->timeout_ms = (uint32_t)ms;
	return 0;
}

static int sync_markers(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_sync_conf *s = obj;

	return yamlconf_read_bool(y, v, field, &s->markers);
}

static int sync_kvm_debugfs(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_sync_conf *s = obj;

	return yamlconf_read_path(y, v, field, true, DIR_MAX, s->kvm_debugfs);
}

static const struct yamlconf_key sync_keys[] = {
	{ "interval", sync_interval },
	{ "probes", sync_probes },
	{ "timeout", sync_timeout },
	{ "markers", sync_markers },
	{ "kvm_debugfs", sync_kvm_debugfs },
};

/* ---- top level --------------------------------------------------------- */

static int top_sync(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct cfg_parser *p = obj;

	return yamlconf_read_block(y, v, field, "clock sync settings", sync_keys,
				   ARRAY_SIZE(sync_keys), &p->c->sync);
}


static int top_state_dir(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct cfg_parser *p = obj;

	return yamlconf_read_path(y, v, field, true, DIR_MAX, p->c->state_dir);
}

static int top_control_socket(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct cfg_parser *p = obj;

	return yamlconf_read_path(y, v, field, false, SUN_PATH_MAX, p->c->control_socket);
}

static int top_log_level(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct cfg_parser *p = obj;
	const char *s = NULL;
	int r;

	r = yamlconf_read_scalar(y, v, field, "a log level", false, &s);
	if (r < 0)
		return r;
	for (size_t i = 0; i < ARRAY_SIZE(log_levels); i++)
		if (!strcmp(s, log_levels[i].name)) {
			p->c->log_level = log_levels[i].level;
			return 0;
		}
	return yamlconf_error(y, v, field,
			      "%s is not a log level (error, warning, notice, info, debug)",
			      SHOW(s));
}

static int top_compression(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct cfg_parser *p = obj;
	long long n;
	int r;

	r = yamlconf_read_int(y, v, field, 1, 19, &n);
	if (r < 0)
		return r;
	p->c->zstd_level = (int)n;
	return 0;
}

static int top_memory_max(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct cfg_parser *p = obj;

	return read_size_auto(y, v, field, MEMORY_MIN, MEMORY_MAX, &p->c->memory_max);
}

static int top_dump_reserve(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct cfg_parser *p = obj;

	p->reserve = v;
	return yamlconf_read_size(y, v, field, 4096, RESERVE_MAX, true, &p->c->dump_reserve);
}

static int top_forget_after(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct cfg_parser *p = obj;

	return yamlconf_read_duration(y, v, field, SEC_MS, 0, FORGET_MAX_MS, &p->c->forget_after_s);
}

static int top_control(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct cfg_parser *p = obj;

	return yamlconf_read_block(y, v, field, "control settings", control_keys,
				   ARRAY_SIZE(control_keys), &p->c->control);
}

static int top_triggers(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct cfg_parser *p = obj;

	return yamlconf_read_block(y, v, field, "trigger settings", trigger_keys,
				   ARRAY_SIZE(trigger_keys), &p->c->triggers);
}

static int top_retention(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct cfg_parser *p = obj;

	return yamlconf_read_block(y, v, field, "retention settings", retention_keys,
				   ARRAY_SIZE(retention_keys), &p->c->retention);
}

static int top_record(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct cfg_parser *p = obj;

	return config_record_parse(y, v, field, &p->c->rec, true);
}

static int top_host(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct cfg_parser *p = obj;

	return config_host_parse(y, v, field, &p->c->host);
}

static int top_detectors(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct cfg_parser *p = obj;

	return config_detect_parse(y, v, field, p->c);
}

/* Checked against the guests' paths, so it waits for them. */
static int top_discovery(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct cfg_parser *p = obj;

	p->discovery = v;
	return 0;
}

/* Guests copy the defaults, so they wait until `record:` is read. */
static int top_guests(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct cfg_parser *p = obj;

	p->guests = v;
	return 0;
}

static int top_sandbox(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct cfg_parser *p = obj;

	return yamlconf_read_bool(y, v, field, &p->c->sandbox);
}

static int top_user(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct cfg_parser *p = obj;

	return account_parse(y, v, field, "user", p->c->user);
}

static int top_fleet(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct cfg_parser *p = obj;

	return config_fleet_parse(y, v, field, &p->c->fleet);
}

static const struct yamlconf_key top_keys[] = {
	{ "state_dir", top_state_dir },
	{ "sandbox", top_sandbox },
	{ "user", top_user },
	{ "control_socket", top_control_socket },
	{ "log_level", top_log_level },
	{ "compression_level", top_compression },
	{ "memory_max", top_memory_max },
	{ "dump_reserve", top_dump_reserve },
	{ "forget_after", top_forget_after },
	{ "control", top_control },
	{ "triggers", top_triggers },
	{ "retention", top_retention },
	{ "record", top_record },
	{ "host", top_host },
	{ "clock_sync", top_sync },
	{ "detectors", top_detectors },
	{ "discovery", top_discovery },
	{ "guests", top_guests },
	{ "fleet", top_fleet },
};

static int config_parse(struct cfg_parser *p)
{
	yaml_node_t *root;
	uint32_t seen;
	int r;

	r = yamlconf_load(&p->y, &root);
	if (r < 0)
		return r;
	/* empty, comments only, or null: all defaults */
	if (!root || yamlconf_is_null(root))
		return 0;
	if (root->type != YAML_MAPPING_NODE)
		return yamlconf_error(&p->y, root, NULL, "expected a mapping of settings, found %s",
				      yamlconf_kind(root));
	r = yamlconf_walk_map(&p->y, root, "", top_keys, ARRAY_SIZE(top_keys), p, &seen);
	if (r < 0)
		return r;
	if (p->c->fleet.enabled && p->c->sandbox)
		/* libnats' threads, sockets and TLS are not in sandbox.c's list */
		return yamlconf_error(&p->y, root, "fleet",
				      "cannot be used with sandbox: true (its system call list has "
				      "no network); docs/FLEET.md");
	if (p->c->fleet.enabled && p->c->fleet.libvirt_labels &&
	    (p->c->fleet.accept & VMT_FLEET_ACCEPT_LABEL) && p->c->libvirt_events.enabled &&
	    strcmp(p->c->fleet.libvirt_uri, p->c->libvirt_events.uri))
		/* one read-only connection serves both (daemon/lvmeta.c) */
		return yamlconf_error(&p->y, root, "fleet",
				      "libvirt_uri (%s) differs from detectors.libvirt_events.uri (%s): "
				      "the labels and the events share one libvirt connection",
				      p->c->fleet.libvirt_uri, p->c->libvirt_events.uri);
	p->c->retention.hold_unuploaded = p->c->fleet.enabled;
	p->c->dump_reserve_set = p->reserve != NULL;
	if (!p->reserve && p->c->memory_max && p->c->memory_max != VMT_AUTO)
		/* the default, under a small cap: an eighth of it */
		p->c->dump_reserve = VMT_MIN(p->c->dump_reserve, p->c->memory_max / 8 / 4096 * 4096);
	if (p->c->memory_max && p->c->memory_max != VMT_AUTO && p->c->dump_reserve >= p->c->memory_max)
		return yamlconf_error(&p->y, p->reserve, "dump_reserve",
				      "must be less than memory_max (%" PRIu64 " bytes): it counts in it",
				      p->c->memory_max);
	if (p->guests) {
		r = config_guests_parse(&p->y, p->c, p->guests);
		if (r < 0)
			return r;
	}
	if (p->discovery)
		return config_discovery_parse(&p->y, p->c, p->discovery);
	return 0;
}

int config_load_string(struct vmt_config *c, const char *name, const char *text, size_t len,
		       char *err, size_t err_len)
{
	struct cfg_parser p = { .c = c };
	int r;

	config_init(c);
	r = yamlconf_open(&p.y, name, text, len, err, err_len);
	if (r < 0)
		return r;
	r = config_parse(&p);
	yamlconf_close(&p.y);
	if (r < 0) {
		/* a failed load leaves the defaults: a reload keeps its old config */
		config_free(c);
		config_init(c);
		if (r == -ENOMEM && err && err_len && !err[0])
			snprintf(err, err_len, "%s: out of memory", name);
	}
	return r;
}

int config_load(struct vmt_config *c, const char *path, char *err, size_t err_len)
{
	_cleanup_free_ char *text = NULL;
	size_t len = 0;
	int r;

	r = read_file(path, CONFIG_FILE_MAX, &text, &len);
	if (r < 0) {
		config_init(c);
		if (err && err_len) {
			if (r == -EFBIG)
				snprintf(err, err_len, "%s: larger than %" PRIu64 "MiB", path,
					 CONFIG_FILE_MAX / MiB);
			else
				snprintf(err, err_len, "%s: %s", path, strerror(-r));
		}
		return r;
	}
	return config_load_string(c, path, text, len, err, err_len);
}

int config_resolve(struct vmt_config *c, uint64_t ram_bytes, uint64_t fs_bytes, char *why,
		   size_t why_len)
{
	if (c->memory_max == VMT_AUTO) {
		c->memory_max = VMT_MAX(VMT_MIN(ram_bytes / 16, VMT_AUTO_MEM_MAX), VMT_AUTO_MEM_MIN);
		c->memory_max &= ~4095ull;
		if (!c->dump_reserve_set)
			c->dump_reserve = VMT_MIN(c->dump_reserve, c->memory_max / 8 / 4096 * 4096);
		if (c->dump_reserve >= c->memory_max) {
			snprintf(why, why_len,
				 "dump_reserve (%" PRIu64 " bytes) must be less than memory_max, which "
				 "\"auto\" makes %" PRIu64 " bytes here: set memory_max",
				 c->dump_reserve, c->memory_max);
			return -EINVAL;
		}
	}
	if (c->retention.max_bytes == VMT_AUTO)
		c->retention.max_bytes = fs_bytes ? VMT_MAX(VMT_MIN(fs_bytes / 10, VMT_AUTO_DISK_MAX),
							    VMT_AUTO_DISK_MIN)
						  : VMT_AUTO_DISK_MAX;
	return 0;
}
