/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "config.h"
#include "log.h"
#include "proto.h"
#include "util.h"

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)
#define TiB ((uint64_t)1 << 40)
#define SEC_MS ((uint64_t)1000)
#define DAY_MS (86400 * SEC_MS)

#define CONFIG_FILE_MAX (16 * MiB)
#define RING_PAGE ((uint64_t)4096)
#define RING_MAX (64 * GiB)
#define GUEST_BUFFER_MIN (4 * KiB)
#define GUEST_BUFFER_MAX (64 * GiB)
/* A bare number is bytes: the minimum catches "64" written for 64MiB. */
#define META_MIN (64 * KiB)
#define META_MAX (4 * GiB)
#define FLUSH_MAX_MS (60 * SEC_MS)
/* Below 1MiB a cap on all rings, or on all samples, is a typo. */
#define MEMORY_MIN MiB
#define MEMORY_MAX (64 * TiB)
#define RETAIN_BYTES_MIN MiB
#define RETAIN_BYTES_MAX (1024 * TiB)
#define RETAIN_SAMPLES_MAX 1000000
#define FORGET_MAX_MS (365 * DAY_MS)
#define AGE_MAX_MS (3650 * DAY_MS)
#define COALESCE_MAX_MS (60 * SEC_MS)
#define COOLDOWN_MAX_MS DAY_MS
#define PER_MINUTE_MAX 600
#define GROUP_MAX 32	/* useradd's limit */
/* Room under PATH_MAX for the guest folders and sample names below it. */
#define DIR_MAX 3840
#define SUN_PATH_MAX 107	/* sizeof(sockaddr_un.sun_path) - 1 */
#define CHANNEL_SUFFIX_MAX "/trace-path-cpu255"
#define FIELD_MAX 192
#define CONFIG_DEPTH_MAX 64

struct cfg_parser {
	yaml_document_t doc;
	const char *name;	/* file name in messages */
	const char *text;	/* reader errors give a byte offset only */
	size_t len;
	char *err;
	size_t err_len;
	struct vmt_config *c;
	yaml_node_t *guests;	/* parsed after `record:` wherever it stands */
	yaml_node_t *discovery;	/* parsed after the guests, whose paths it checks */
};

/* What one guest's mapping needs beyond the struct: nodes for messages. */
struct guest_parse {
	struct vmt_guest_conf *g;
	yaml_node_t *name;
	yaml_node_t *path;
};

struct discovery_parse {
	struct vmt_discovery_conf *d;
	yaml_node_t *path;
	yaml_node_t *transport;
};

typedef int field_fn(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj);

struct field_def {
	const char *key;
	field_fn *fn;
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

static const char *const transports[] = {
	[VMT_TRANSPORT_AUTO] = "auto",
	[VMT_TRANSPORT_FIFO] = "fifo",
	[VMT_TRANSPORT_SOCKET] = "socket",
};

static const char *const layouts[] = {
	[VMT_LAYOUT_VMTRACED] = "vmtraced",
	[VMT_LAYOUT_LIBVIRT] = "libvirt",
};

const char *transport_name(enum vmt_transport t)
{
	if ((unsigned)t < ARRAY_SIZE(transports))
		return transports[t];
	return "unknown";
}

const char *layout_name(enum vmt_layout l)
{
	if ((unsigned)l < ARRAY_SIZE(layouts))
		return layouts[l];
	return "unknown";
}

static const char *log_level_name(int level)
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
	r->flush_timeout_ms = 1000;
}

void config_init(struct vmt_config *c)
{
	memset(c, 0, sizeof(*c));
	strcpy(c->state_dir, "/var/lib/vmtraced");
	strcpy(c->control_socket, "/run/vmtraced/control.sock");
	c->log_level = VMT_LOG_INFO;
	c->zstd_level = 3;
	c->memory_max = 0;
	c->forget_after_s = 3600;
	record_init(&c->rec);
	c->triggers.coalesce_ms = 500;
	c->triggers.cooldown_ms = 10000;
	c->triggers.max_per_minute = 12;
	/* retention and control: all zero, no limit and root only */
	c->host.enabled = 0;
	strcpy(c->host.events, "kvm:*,sched:sched_switch,sched:sched_wakeup,sched:sched_waking");
	strcpy(c->host.clock, "mono");
	c->host.ring_size = 4 * MiB;
	c->host.buffer_kb = 4096;
	c->host.qemu_only = 1;
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

/* ---- messages ---------------------------------------------------------- */

/* A value from the file, quoted and cut short, safe on one line. */
static const char *show(const char *s, char *buf, size_t n)
{
	size_t o = 0;

	buf[o++] = '"';
	for (; *s && o + 8 < n; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\') {
			buf[o++] = '\\';
			buf[o++] = (char)ch;
		} else if (ch < 0x20 || ch == 0x7f) {
			o += (size_t)snprintf(buf + o, n - o, "\\x%02x", ch);
		} else {
			buf[o++] = (char)ch;
		}
	}
	if (*s) {
		memcpy(buf + o, "...", 3);
		o += 3;
	}
	buf[o++] = '"';
	buf[o] = 0;
	return buf;
}
#define SHOW(s) show((s), (char[96]){ 0 }, 96)

static const char *size_text(uint64_t v, char *buf, size_t n)
{
	if (v && v % TiB == 0)
		snprintf(buf, n, "%" PRIu64 "TiB", v / TiB);
	else if (v && v % GiB == 0)
		snprintf(buf, n, "%" PRIu64 "GiB", v / GiB);
	else if (v && v % MiB == 0)
		snprintf(buf, n, "%" PRIu64 "MiB", v / MiB);
	else if (v && v % KiB == 0)
		snprintf(buf, n, "%" PRIu64 "KiB", v / KiB);
	else
		snprintf(buf, n, "%" PRIu64, v);
	return buf;
}
#define SIZE_TEXT(v) size_text((v), (char[32]){ 0 }, 32)

/* In the largest unit that says it exactly, "60s" rather than "1m". */
static const char *duration_text(uint64_t ms, char *buf, size_t n)
{
	static const struct {
		const char *unit;
		uint64_t ms;
	} units[] = {
		{ "d", DAY_MS }, { "h", 3600 * SEC_MS }, { "s", SEC_MS },
	};

	for (size_t i = 0; ms && i < ARRAY_SIZE(units); i++)
		if (ms % units[i].ms == 0) {
			snprintf(buf, n, "%" PRIu64 "%s", ms / units[i].ms, units[i].unit);
			return buf;
		}
	snprintf(buf, n, "%" PRIu64 "%s", ms, ms ? "ms" : "");
	return buf;
}
#define DURATION_TEXT(v) duration_text((v), (char[32]){ 0 }, 32)

__attribute__((format(printf, 5, 0)))
static void err_vwrite(struct cfg_parser *p, size_t line, size_t col, const char *field,
		       const char *fmt, va_list ap)
{
	int n;

	if (!p->err || !p->err_len)
		return;
	if (field)
		n = snprintf(p->err, p->err_len, "%s:%zu:%zu: %s: ", p->name, line, col, field);
	else
		n = snprintf(p->err, p->err_len, "%s:%zu:%zu: ", p->name, line, col);
	if (n < 0 || (size_t)n >= p->err_len)
		return;
	vsnprintf(p->err + n, p->err_len - (size_t)n, fmt, ap);
}

__attribute__((format(printf, 4, 5)))
static int cfg_error(struct cfg_parser *p, const yaml_node_t *at, const char *field,
		     const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vwrite(p, at->start_mark.line + 1, at->start_mark.column + 1, field, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

__attribute__((format(printf, 5, 6)))
static int cfg_error_at(struct cfg_parser *p, size_t line, size_t col, const char *field,
			const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vwrite(p, line, col, field, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* "guests[1].record" + "ring_size"; keys from the file are escaped. */
static void field_join(char *out, size_t n, const char *prefix, const char *key)
{
	size_t o;

	o = (size_t)snprintf(out, n, "%s%s", prefix, *prefix ? "." : "");
	if (o >= n)
		return;
	for (; *key && o + 5 < n; key++) {
		unsigned char ch = (unsigned char)*key;

		if (ch <= 0x20 || ch == 0x7f)
			o += (size_t)snprintf(out + o, n - o, "\\x%02x", ch);
		else
			out[o++] = (char)ch;
	}
	out[o] = 0;
}

/* ---- nodes ------------------------------------------------------------- */

static yaml_node_t *node_at(struct cfg_parser *p, int i)
{
	return yaml_document_get_node(&p->doc, i);
}

static const char *node_kind(const yaml_node_t *n)
{
	switch (n->type) {
	case YAML_MAPPING_NODE: return "a mapping";
	case YAML_SEQUENCE_NODE: return "a list";
	default: return "a single value";
	}
}

static bool node_is_null(const yaml_node_t *n)
{
	const char *s = NULL;

	if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	s = (const char *)n->data.scalar.value;
	return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
	       !strcmp(s, "NULL");
}

/* The scalar's text; null gives "" where allowed, else an error. */
static int node_scalar(struct cfg_parser *p, yaml_node_t *n, const char *field, const char *what,
		       bool null_ok, const char **out)
{
	const char *s = NULL;

	if (n->type != YAML_SCALAR_NODE)
		return cfg_error(p, n, field, "expected %s, found %s", what, node_kind(n));
	s = (const char *)n->data.scalar.value;
	if (strlen(s) != n->data.scalar.length)
		return cfg_error(p, n, field, "contains a NUL byte");
	if (node_is_null(n)) {
		if (!null_ok)
			return cfg_error(p, n, field, "has no value, expected %s", what);
		s = "";
	}
	*out = s;
	return 0;
}

static int node_int(struct cfg_parser *p, yaml_node_t *n, const char *field, long long min,
		    long long max, long long *out)
{
	const char *s = NULL;
	char *end;
	long long v;
	int r;

	r = node_scalar(p, n, field, "an integer", false, &s);
	if (r < 0)
		return r;
	if (!isdigit((unsigned char)s[s[0] == '-']))
		return cfg_error(p, n, field, "%s is not an integer", SHOW(s));
	errno = 0;
	v = strtoll(s, &end, 10);
	if (*end)
		return cfg_error(p, n, field, "%s is not an integer", SHOW(s));
	if (errno || v < min || v > max)
		return cfg_error(p, n, field, "%s is out of range (%lld to %lld)", SHOW(s), min, max);
	*out = v;
	return 0;
}

static int node_size(struct cfg_parser *p, yaml_node_t *n, const char *field, uint64_t min,
		     uint64_t max, bool zero_ok, uint64_t *out)
{
	const char *s = NULL;
	uint64_t v = 0;
	int r;

	r = node_scalar(p, n, field, "a size", false, &s);
	if (r < 0)
		return r;
	if (s[0] == '-')
		return cfg_error(p, n, field, "%s: a size cannot be negative", SHOW(s));
	r = parse_size(s, &v);
	if (r == -EINVAL)
		return cfg_error(p, n, field, "%s is not a size (bytes, or with a unit: 64K, 16MiB, 1G)",
				 SHOW(s));
	if ((r < 0 || v < min || v > max) && !(r == 0 && v == 0 && zero_ok))
		return cfg_error(p, n, field, "%s is out of range (%s%s to %s)", SHOW(s),
				 zero_ok ? "0, or " : "", SIZE_TEXT(min), SIZE_TEXT(max));
	*out = v;
	return 0;
}

/*
 * A duration between min_ms and max_ms, stored in units of unit_ms (1 or
 * 1000): a field kept in seconds refuses "1500ms" rather than round it.
 */
static int node_duration(struct cfg_parser *p, yaml_node_t *n, const char *field,
			 uint64_t unit_ms, uint64_t min_ms, uint64_t max_ms, uint64_t *out)
{
	const char *s = NULL;
	uint64_t v = 0;
	int r;

	r = node_scalar(p, n, field, "a duration", false, &s);
	if (r < 0)
		return r;
	if (s[0] == '-')
		return cfg_error(p, n, field, "%s: a duration cannot be negative", SHOW(s));
	r = parse_duration_ms(s, &v);
	if (r == -EINVAL)
		return cfg_error(p, n, field,
				 "%s is not a duration (500ms, 10s, 5m, 1h, 30d; a bare number is seconds)",
				 SHOW(s));
	if (r < 0 || v < min_ms || v > max_ms)
		return cfg_error(p, n, field, "%s is out of range (%s to %s)", SHOW(s),
				 DURATION_TEXT(min_ms), DURATION_TEXT(max_ms));
	if (v % unit_ms)
		return cfg_error(p, n, field, "%s is not a whole number of seconds", SHOW(s));
	*out = v / unit_ms;
	return 0;
}

static int node_bool(struct cfg_parser *p, yaml_node_t *n, const char *field, int *out)
{
	static const char *const words[] = { "false", "False", "FALSE", "true", "True", "TRUE" };
	const char *s = NULL;
	int r;

	r = node_scalar(p, n, field, "true or false", false, &s);
	if (r < 0)
		return r;
	for (size_t i = 0; i < ARRAY_SIZE(words); i++)
		if (!strcmp(s, words[i])) {
			*out = i >= 3;
			return 0;
		}
	return cfg_error(p, n, field, "%s is not true or false", SHOW(s));
}

/* useradd's rule for names, so a group that cannot exist is a typo. */
static bool group_is_valid(const char *s)
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

static int node_group(struct cfg_parser *p, yaml_node_t *n, const char *field, char *dst)
{
	const char *s = NULL;
	int r;

	r = node_scalar(p, n, field, "a group name", true, &s);
	if (r < 0)
		return r;
	if (!group_is_valid(s))
		return cfg_error(p, n, field,
				 "%s is not a group name ([a-z_][a-z0-9_-]*, optionally ending in $, at most %d characters)",
				 SHOW(s), GROUP_MAX);
	strcpy(dst, s);
	return 0;
}

/*
 * An absolute path, with "//" collapsed and, for a directory, the
 * trailing '/' dropped, so that two spellings of one folder compare equal.
 */
static int node_path(struct cfg_parser *p, yaml_node_t *n, const char *field, bool dir,
		     size_t max, char *dst)
{
	char tmp[4096];
	const char *s = NULL;
	size_t o = 0;
	int r;

	r = node_scalar(p, n, field, "an absolute path", false, &s);
	if (r < 0)
		return r;
	if (s[0] != '/')
		return cfg_error(p, n, field, "%s is not an absolute path", SHOW(s));
	for (const char *q = s; *q; q++) {
		if ((unsigned char)*q < 0x20 || *q == 0x7f)
			return cfg_error(p, n, field, "%s contains a control character", SHOW(s));
		if (*q == '/' && o && tmp[o - 1] == '/')
			continue;
		if (o + 1 >= sizeof(tmp))
			break;
		tmp[o++] = *q;
	}
	if (o > 1 && tmp[o - 1] == '/') {
		if (!dir)
			return cfg_error(p, n, field, "%s ends in '/': it must name a file", SHOW(s));
		o--;
	}
	tmp[o] = 0;
	if (o > max)
		return cfg_error(p, n, field, "%s is too long (%zu bytes, at most %zu)", SHOW(s),
				 strlen(s), max);
	memcpy(dst, tmp, o + 1);
	return 0;
}

/*
 * Walk a mapping: every key must be known and given once. The bit for
 * each key found is set in *seen, so callers can tell what is missing.
 */
static int map_walk(struct cfg_parser *p, yaml_node_t *map, const char *prefix,
		    const struct field_def *defs, size_t ndefs, void *obj, uint32_t *seen)
{
	size_t first_line[32] = { 0 };

	*seen = 0;
	for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top; pr++) {
		yaml_node_t *k = node_at(p, pr->key), *v = node_at(p, pr->value);
		char field[FIELD_MAX];
		const char *key;
		size_t i;
		int r;

		if (k->type != YAML_SCALAR_NODE)
			return cfg_error(p, k, *prefix ? prefix : NULL,
					 "a key must be a single word, found %s", node_kind(k));
		key = (const char *)k->data.scalar.value;
		field_join(field, sizeof(field), prefix, key);
		for (i = 0; i < ndefs; i++)
			if (!strcmp(defs[i].key, key) && strlen(key) == k->data.scalar.length)
				break;
		if (i == ndefs)
			return cfg_error(p, k, field, "unknown key");
		if (*seen & 1u << i)
			return cfg_error(p, k, field, "given twice (first on line %zu)", first_line[i]);
		*seen |= 1u << i;
		first_line[i] = k->start_mark.line + 1;
		r = defs[i].fn(p, v, field, obj);
		if (r < 0)
			return r;
	}
	return 0;
}

/* A block of settings: null keeps them all, else a mapping of known keys. */
static int map_parse(struct cfg_parser *p, yaml_node_t *v, const char *field, const char *what,
		     const struct field_def *defs, size_t ndefs, void *obj)
{
	uint32_t seen;

	if (node_is_null(v))
		return 0;
	if (v->type != YAML_MAPPING_NODE)
		return cfg_error(p, v, field, "expected a mapping of %s, found %s", what, node_kind(v));
	return map_walk(p, v, field, defs, ndefs, obj, &seen);
}

/* The value of key in a mapping, NULL if absent. */
static yaml_node_t *map_find(struct cfg_parser *p, yaml_node_t *map, const char *key)
{
	if (map->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top; pr++) {
		yaml_node_t *k = node_at(p, pr->key);

		if (k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, key))
			return node_at(p, pr->value);
	}
	return NULL;
}

/* ---- record ------------------------------------------------------------ */

static int ring_size_parse(struct cfg_parser *p, yaml_node_t *v, const char *field, uint64_t *dst)
{
	uint64_t s;
	int r;

	r = node_size(p, v, field, RING_PAGE, RING_MAX, false, &s);
	if (r < 0)
		return r;
	*dst = (s + RING_PAGE - 1) / RING_PAGE * RING_PAGE;
	return 0;
}

static int buffer_kb_parse(struct cfg_parser *p, yaml_node_t *v, const char *field, uint32_t *dst)
{
	uint64_t s;
	int r;

	r = node_size(p, v, field, GUEST_BUFFER_MIN, GUEST_BUFFER_MAX, true, &s);
	if (r < 0)
		return r;
	*dst = (uint32_t)((s + KiB - 1) / KiB);
	return 0;
}

static int clock_parse(struct cfg_parser *p, yaml_node_t *v, const char *field, char *dst,
		       size_t size)
{
	const char *s = NULL;
	int r;

	r = node_scalar(p, v, field, "a trace clock name", true, &s);
	if (r < 0)
		return r;
	if (strlen(s) >= size)
		return cfg_error(p, v, field, "%s is too long for a trace clock (at most %zu bytes)",
				 SHOW(s), size - 1);
	for (const char *q = s; *q; q++)
		if (!isalnum((unsigned char)*q) && *q != '_' && *q != '-')
			return cfg_error(p, v, field, "%s is not a trace clock name ([A-Za-z0-9_-])",
					 SHOW(s));
	strcpy(dst, s);
	return 0;
}

static int rec_ring_size(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;

	return ring_size_parse(p, v, field, &rec->ring_size);
}

static int rec_guest_buffer(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;

	return buffer_kb_parse(p, v, field, &rec->guest_buffer_kb);
}

static int rec_clock(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;

	return clock_parse(p, v, field, rec->clock, sizeof(rec->clock));
}

/* tracefs set_event syntax, narrowed: system:event, or one of them alone. */
static bool event_is_valid(const char *s, size_t len)
{
	size_t colons = 0;

	if (!len || s[0] == ':' || s[len - 1] == ':')
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch == ':')
			colons++;
		else if (!isalnum(ch) && ch != '_' && ch != '*')
			return false;
	}
	return colons <= 1;
}

static int events_add(struct cfg_parser *p, yaml_node_t *v, const char *field, char *buf,
		      size_t *o, const char *s, size_t len)
{
	char one[VMT_CONFIG_MAX_EVENTS];

	snprintf(one, sizeof(one), "%.*s", (int)VMT_MIN(len, sizeof(one) - 1), s);
	if (!len)
		return cfg_error(p, v, field, "an empty entry in the event list");
	if (memchr(s, ',', len))
		return cfg_error(p, v, field, "%s contains a comma: give one event per entry", SHOW(one));
	if (!event_is_valid(s, len))
		return cfg_error(p, v, field, "%s is not an event (system:event of [A-Za-z0-9_*])",
				 SHOW(one));
	if (*o + !!*o + len >= VMT_CONFIG_MAX_EVENTS)
		return cfg_error(p, v, field, "the events joined with commas are longer than %d bytes",
				 VMT_CONFIG_MAX_EVENTS - 1);
	if (*o)
		buf[(*o)++] = ',';
	memcpy(buf + *o, s, len);
	*o += len;
	buf[*o] = 0;
	return 0;
}

/* A list, or one comma-separated string, joined into dst with commas. */
static int events_parse(struct cfg_parser *p, yaml_node_t *v, const char *field, char *dst)
{
	char buf[VMT_CONFIG_MAX_EVENTS] = "";
	size_t o = 0;
	int r;

	if (v->type == YAML_SEQUENCE_NODE) {
		size_t i = 0;

		for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
		     it++, i++) {
			yaml_node_t *e = node_at(p, *it);
			char f[FIELD_MAX];
			const char *s = NULL;

			snprintf(f, sizeof(f), "%s[%zu]", field, i);
			r = node_scalar(p, e, f, "an event name", true, &s);
			if (r < 0)
				return r;
			r = events_add(p, e, f, buf, &o, s, strlen(s));
			if (r < 0)
				return r;
		}
	} else {
		const char *s, *end;

		r = node_scalar(p, v, field, "a list of events or a comma-separated string", true, &s);
		if (r < 0)
			return r;
		s += strspn(s, " \t");
		/* blank means leave the guest's events, as [] does */
		while (*s) {
			size_t len;

			end = strchr(s, ',');
			len = end ? (size_t)(end - s) : strlen(s);
			while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
				len--;
			r = events_add(p, v, field, buf, &o, s, len);
			if (r < 0)
				return r;
			if (!end)
				break;
			s = end + 1;
			s += strspn(s, " \t");
			if (!*s)
				return cfg_error(p, v, field, "an empty entry in the event list");
		}
	}
	memcpy(dst, buf, o + 1);
	return 0;
}

static int rec_events(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;

	return events_parse(p, v, field, rec->events);
}

static int rec_meta_max(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;

	return node_size(p, v, field, META_MIN, META_MAX, false, &rec->meta_max);
}

static int rec_flush_timeout(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;
	uint64_t ms;
	int r;

	r = node_duration(p, v, field, 1, 1, FLUSH_MAX_MS, &ms);
	if (r < 0)
		return r;
	rec->flush_timeout_ms = (uint32_t)ms;
	return 0;
}

static const struct field_def record_defs[] = {
	{ "ring_size", rec_ring_size },
	{ "guest_buffer_size", rec_guest_buffer },
	{ "clock", rec_clock },
	{ "events", rec_events },
	{ "metadata_max", rec_meta_max },
	{ "flush_timeout", rec_flush_timeout },
};

/* Overrides the keys given; the rest of rec stays as it was. */
static int record_parse(struct cfg_parser *p, yaml_node_t *v, const char *field,
			struct vmt_record_conf *rec)
{
	return map_parse(p, v, field, "record settings", record_defs, ARRAY_SIZE(record_defs), rec);
}

/* ---- guests ------------------------------------------------------------ */

static int guest_name(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct guest_parse *gp = obj;
	const char *s = NULL;
	int r;

	r = node_scalar(p, v, field, "a guest name", false, &s);
	if (r < 0)
		return r;
	if (!name_is_valid(s))
		return cfg_error(p, v, field,
				 "%s is not a valid name ([A-Za-z0-9_.-], 1 to 64 characters, no leading '.')",
				 SHOW(s));
	if (!strcmp(s, "host"))
		return cfg_error(p, v, field, "\"host\" is reserved for the host's own trace (host:)");
	strcpy(gp->g->name, s);
	gp->name = v;
	return 0;
}

static int guest_path(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct guest_parse *gp = obj;

	gp->path = v;
	return node_path(p, v, field, true, DIR_MAX, gp->g->path);
}

static int transport_parse(struct cfg_parser *p, yaml_node_t *v, const char *field,
			   enum vmt_transport *dst)
{
	const char *s = NULL;
	int r;

	r = node_scalar(p, v, field, "a transport", false, &s);
	if (r < 0)
		return r;
	for (size_t i = 0; i < ARRAY_SIZE(transports); i++)
		if (!strcmp(s, transports[i])) {
			*dst = (enum vmt_transport)i;
			return 0;
		}
	return cfg_error(p, v, field, "%s is not a transport (auto, fifo, socket)", SHOW(s));
}

static int guest_transport(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct guest_parse *gp = obj;

	return transport_parse(p, v, field, &gp->g->transport);
}

static int guest_cpus(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct guest_parse *gp = obj;
	long long n;
	int r;

	r = node_int(p, v, field, 0, VMT_MAX_CPUS, &n);
	if (r < 0)
		return r;
	gp->g->cpus = (uint32_t)n;
	return 0;
}

static int guest_record(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct guest_parse *gp = obj;

	return record_parse(p, v, field, &gp->g->rec);
}

enum { GUEST_NAME, GUEST_PATH };
static const struct field_def guest_defs[] = {
	[GUEST_NAME] = { "name", guest_name },
	[GUEST_PATH] = { "path", guest_path },
	{ "transport", guest_transport },
	{ "cpus", guest_cpus },
	{ "record", guest_record },
};

static int guest_parse(struct cfg_parser *p, yaml_node_t *v, size_t idx)
{
	struct vmt_config *c = p->c;
	struct guest_parse gp = { .g = &c->guests[idx] };
	char field[FIELD_MAX], sub[FIELD_MAX];
	uint32_t seen;
	int r;

	snprintf(field, sizeof(field), "%s[%zu]", "guests", idx);
	gp.g->transport = VMT_TRANSPORT_AUTO;
	gp.g->rec = c->rec;
	gp.g->line = (int)v->start_mark.line + 1;
	if (v->type != YAML_MAPPING_NODE)
		return cfg_error(p, v, field, "expected a mapping with a guest's name and path, found %s",
				 node_kind(v));
	r = map_walk(p, v, field, guest_defs, ARRAY_SIZE(guest_defs), &gp, &seen);
	if (r < 0)
		return r;
	for (size_t k = GUEST_NAME; k <= GUEST_PATH; k++)
		if (!(seen & 1u << k)) {
			field_join(sub, sizeof(sub), field, guest_defs[k].key);
			return cfg_error(p, v, sub, "missing: every guest needs a name and a path");
		}
	if (gp.g->transport == VMT_TRANSPORT_SOCKET &&
	    strlen(gp.g->path) + strlen(CHANNEL_SUFFIX_MAX) > SUN_PATH_MAX) {
		field_join(sub, sizeof(sub), field, "path");
		return cfg_error(p, gp.path, sub,
				 "too long for transport socket: %s is %zu bytes, more than %d",
				 "PATH" CHANNEL_SUFFIX_MAX, strlen(gp.g->path) + strlen(CHANNEL_SUFFIX_MAX),
				 SUN_PATH_MAX);
	}
	for (size_t j = 0; j < idx; j++) {
		const struct vmt_guest_conf *o = &c->guests[j];

		if (!strcmp(o->name, gp.g->name)) {
			field_join(sub, sizeof(sub), field, "name");
			return cfg_error(p, gp.name, sub, "%s is already the name of %s[%zu] (line %d)",
					 SHOW(o->name), "guests", j, o->line);
		}
		if (!strcmp(o->path, gp.g->path)) {
			field_join(sub, sizeof(sub), field, "path");
			return cfg_error(p, gp.path, sub, "%s is already the path of %s[%zu] (line %d)",
					 SHOW(o->path), "guests", j, o->line);
		}
	}
	return 0;
}

static int guests_parse(struct cfg_parser *p, yaml_node_t *v)
{
	struct vmt_config *c = p->c;
	size_t n;
	int r;

	if (node_is_null(v))
		return 0;
	if (v->type != YAML_SEQUENCE_NODE)
		return cfg_error(p, v, "guests", "expected a list of guests, found %s",
				 node_kind(v));
	n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
	if (n > VMT_CONFIG_MAX_GUESTS) {
		char field[FIELD_MAX];

		snprintf(field, sizeof(field), "%s[%d]", "guests", VMT_CONFIG_MAX_GUESTS);
		return cfg_error(p, node_at(p, v->data.sequence.items.start[VMT_CONFIG_MAX_GUESTS]),
				 field, "more than %d guests", VMT_CONFIG_MAX_GUESTS);
	}
	if (!n)
		return 0;
	c->guests = calloc(n, sizeof(*c->guests));
	if (!c->guests)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		c->nguests = (uint32_t)i + 1;
		r = guest_parse(p, node_at(p, v->data.sequence.items.start[i]), i);
		if (r < 0)
			return r;
	}
	return 0;
}

/* ---- discovery --------------------------------------------------------- */

static int disc_path(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct discovery_parse *dp = obj;

	dp->path = v;
	return node_path(p, v, field, true, DIR_MAX, dp->d->path);
}

static int disc_layout(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct discovery_parse *dp = obj;
	const char *s = NULL;
	int r;

	r = node_scalar(p, v, field, "a layout", false, &s);
	if (r < 0)
		return r;
	for (size_t i = 0; i < ARRAY_SIZE(layouts); i++)
		if (!strcmp(s, layouts[i])) {
			dp->d->layout = (enum vmt_layout)i;
			return 0;
		}
	return cfg_error(p, v, field, "%s is not a layout (vmtraced, libvirt)", SHOW(s));
}

static int disc_transport(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct discovery_parse *dp = obj;

	dp->transport = v;
	return transport_parse(p, v, field, &dp->d->transport);
}

enum { DISC_PATH };
static const struct field_def discovery_defs[] = {
	[DISC_PATH] = { "path", disc_path },
	{ "layout", disc_layout },
	{ "transport", disc_transport },
};

/* a strictly inside b: both normalized by node_path */
static bool path_is_inside(const char *a, const char *b)
{
	size_t n = strlen(b);

	if (n == 1)
		return a[1] != 0;	/* b is "/" */
	return !strncmp(a, b, n) && a[n] == '/';
}

static int discovery_parse_one(struct cfg_parser *p, yaml_node_t *v, size_t idx)
{
	struct vmt_config *c = p->c;
	struct discovery_parse dp = { .d = &c->discovery[idx] };
	char field[FIELD_MAX], sub[FIELD_MAX];
	uint32_t seen;
	int r;

	snprintf(field, sizeof(field), "%s[%zu]", "discovery", idx);
	dp.d->layout = VMT_LAYOUT_VMTRACED;
	dp.d->transport = VMT_TRANSPORT_AUTO;
	dp.d->line = (int)v->start_mark.line + 1;
	if (v->type != YAML_MAPPING_NODE)
		return cfg_error(p, v, field, "expected a mapping with a folder's path, found %s",
				 node_kind(v));
	r = map_walk(p, v, field, discovery_defs, ARRAY_SIZE(discovery_defs), &dp, &seen);
	if (r < 0)
		return r;
	if (!(seen & 1u << DISC_PATH)) {
		field_join(sub, sizeof(sub), field, "path");
		return cfg_error(p, v, sub, "missing: every discovery entry needs a path");
	}
	if (dp.d->layout == VMT_LAYOUT_LIBVIRT && dp.d->transport == VMT_TRANSPORT_FIFO) {
		field_join(sub, sizeof(sub), field, "transport");
		return cfg_error(p, dp.transport, sub,
				 "\"fifo\" with layout libvirt: libvirt's channels are unix sockets");
	}
	field_join(sub, sizeof(sub), field, "path");
	for (size_t j = 0; j < idx; j++) {
		const struct vmt_discovery_conf *o = &c->discovery[j];

		if (!strcmp(o->path, dp.d->path))
			return cfg_error(p, dp.path, sub, "%s is already the path of %s[%zu] (line %d)",
					 SHOW(o->path), "discovery", j, o->line);
		/* a folder in a watched folder would be taken for a guest */
		if (path_is_inside(dp.d->path, o->path) || path_is_inside(o->path, dp.d->path))
			return cfg_error(p, dp.path, sub, "%s %s %s, the path of %s[%zu] (line %d)",
					 SHOW(dp.d->path),
					 path_is_inside(dp.d->path, o->path) ? "is inside" : "contains",
					 SHOW(o->path), "discovery", j, o->line);
	}
	for (size_t j = 0; j < c->nguests; j++) {
		const struct vmt_guest_conf *g = &c->guests[j];

		if (!strcmp(g->path, dp.d->path))
			return cfg_error(p, dp.path, sub, "%s is already the path of %s[%zu] (line %d)",
					 SHOW(g->path), "guests", j, g->line);
	}
	return 0;
}

static int discovery_parse(struct cfg_parser *p, yaml_node_t *v)
{
	struct vmt_config *c = p->c;
	size_t n;
	int r;

	if (node_is_null(v))
		return 0;
	if (v->type != YAML_SEQUENCE_NODE)
		return cfg_error(p, v, "discovery", "expected a list of folders, found %s",
				 node_kind(v));
	n = (size_t)(v->data.sequence.items.top - v->data.sequence.items.start);
	if (n > VMT_CONFIG_MAX_DISCOVERY) {
		char field[FIELD_MAX];

		snprintf(field, sizeof(field), "%s[%d]", "discovery", VMT_CONFIG_MAX_DISCOVERY);
		return cfg_error(p, node_at(p, v->data.sequence.items.start[VMT_CONFIG_MAX_DISCOVERY]),
				 field, "more than %d discovery folders", VMT_CONFIG_MAX_DISCOVERY);
	}
	if (!n)
		return 0;
	c->discovery = calloc(n, sizeof(*c->discovery));
	if (!c->discovery)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		c->ndiscovery = (uint32_t)i + 1;
		r = discovery_parse_one(p, node_at(p, v->data.sequence.items.start[i]), i);
		if (r < 0)
			return r;
	}
	return 0;
}

/* ---- triggers, retention, control -------------------------------------- */

static int trig_coalesce(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_trigger_conf *t = obj;
	uint64_t ms;
	int r;

	r = node_duration(p, v, field, 1, 0, COALESCE_MAX_MS, &ms);
	if (r < 0)
		return r;
	t->coalesce_ms = (uint32_t)ms;
	return 0;
}

static int trig_cooldown(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_trigger_conf *t = obj;
	uint64_t ms;
	int r;

	r = node_duration(p, v, field, 1, 0, COOLDOWN_MAX_MS, &ms);
	if (r < 0)
		return r;
	t->cooldown_ms = (uint32_t)ms;
	return 0;
}

static int trig_per_minute(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_trigger_conf *t = obj;
	long long n;
	int r;

	r = node_int(p, v, field, 0, PER_MINUTE_MAX, &n);
	if (r < 0)
		return r;
	t->max_per_minute = (uint32_t)n;
	return 0;
}

static const struct field_def trigger_defs[] = {
	{ "coalesce", trig_coalesce },
	{ "cooldown", trig_cooldown },
	{ "max_per_minute", trig_per_minute },
};

static int ret_max_bytes(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_retention_conf *rt = obj;

	return node_size(p, v, field, RETAIN_BYTES_MIN, RETAIN_BYTES_MAX, true, &rt->max_bytes);
}

static int ret_max_samples(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_retention_conf *rt = obj;
	long long n;
	int r;

	r = node_int(p, v, field, 0, RETAIN_SAMPLES_MAX, &n);
	if (r < 0)
		return r;
	rt->max_samples = (uint32_t)n;
	return 0;
}

static int ret_max_age(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_retention_conf *rt = obj;

	return node_duration(p, v, field, SEC_MS, 0, AGE_MAX_MS, &rt->max_age_s);
}

static const struct field_def retention_defs[] = {
	{ "max_bytes", ret_max_bytes },
	{ "max_samples", ret_max_samples },
	{ "max_age", ret_max_age },
};

static int ctl_group(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_control_conf *ctl = obj;

	return node_group(p, v, field, ctl->group);
}

static int ctl_read_group(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_control_conf *ctl = obj;

	return node_group(p, v, field, ctl->read_group);
}

static const struct field_def control_defs[] = {
	{ "group", ctl_group },
	{ "read_only_group", ctl_read_group },
};

/* ---- host -------------------------------------------------------------- */

static int host_enabled(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_host_conf *h = obj;

	return node_bool(p, v, field, &h->enabled);
}

static int host_events(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_host_conf *h = obj;

	return events_parse(p, v, field, h->events);
}

/* The host instance is vmtraced's own: nothing to leave, "" is mono. */
static int host_clock(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_host_conf *h = obj;
	int r;

	r = clock_parse(p, v, field, h->clock, sizeof(h->clock));
	if (r == 0 && !h->clock[0])
		strcpy(h->clock, "mono");
	return r;
}

static int host_ring_size(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_host_conf *h = obj;

	return ring_size_parse(p, v, field, &h->ring_size);
}

static int host_buffer_size(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_host_conf *h = obj;

	return buffer_kb_parse(p, v, field, &h->buffer_kb);
}

static int host_qemu_only(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_host_conf *h = obj;

	return node_bool(p, v, field, &h->qemu_only);
}

static const struct field_def host_defs[] = {
	{ "enabled", host_enabled },
	{ "events", host_events },
	{ "clock", host_clock },
	{ "ring_size", host_ring_size },
	{ "buffer_size", host_buffer_size },
	{ "qemu_only", host_qemu_only },
};

/* ---- top level --------------------------------------------------------- */

static int top_state_dir(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_config *c = obj;

	return node_path(p, v, field, true, DIR_MAX, c->state_dir);
}

static int top_control_socket(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_config *c = obj;

	return node_path(p, v, field, false, SUN_PATH_MAX, c->control_socket);
}

static int top_log_level(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_config *c = obj;
	const char *s = NULL;
	int r;

	r = node_scalar(p, v, field, "a log level", false, &s);
	if (r < 0)
		return r;
	for (size_t i = 0; i < ARRAY_SIZE(log_levels); i++)
		if (!strcmp(s, log_levels[i].name)) {
			c->log_level = log_levels[i].level;
			return 0;
		}
	return cfg_error(p, v, field, "%s is not a log level (error, warning, notice, info, debug)",
			 SHOW(s));
}

static int top_compression(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_config *c = obj;
	long long n;
	int r;

	r = node_int(p, v, field, 1, 19, &n);
	if (r < 0)
		return r;
	c->zstd_level = (int)n;
	return 0;
}

static int top_memory_max(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_config *c = obj;

	return node_size(p, v, field, MEMORY_MIN, MEMORY_MAX, true, &c->memory_max);
}

static int top_forget_after(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_config *c = obj;

	return node_duration(p, v, field, SEC_MS, 0, FORGET_MAX_MS, &c->forget_after_s);
}

static int top_control(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_config *c = obj;

	return map_parse(p, v, field, "control settings", control_defs, ARRAY_SIZE(control_defs),
			 &c->control);
}

static int top_triggers(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_config *c = obj;

	return map_parse(p, v, field, "trigger settings", trigger_defs, ARRAY_SIZE(trigger_defs),
			 &c->triggers);
}

static int top_retention(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_config *c = obj;

	return map_parse(p, v, field, "retention settings", retention_defs,
			 ARRAY_SIZE(retention_defs), &c->retention);
}

static int top_host(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_config *c = obj;
	yaml_node_t *ev;
	int r;

	r = map_parse(p, v, field, "host settings", host_defs, ARRAY_SIZE(host_defs), &c->host);
	if (r < 0)
		return r;
	if (c->host.enabled && !c->host.events[0]) {
		char sub[FIELD_MAX];

		ev = map_find(p, v, "events");
		field_join(sub, sizeof(sub), field, "events");
		return cfg_error(p, ev ? ev : v, sub,
				 "empty, but the host is enabled: it would record nothing");
	}
	return 0;
}

/* Checked against the guests' paths, so it waits for them. */
static int top_discovery(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	p->discovery = v;
	return 0;
}

static int top_record(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_config *c = obj;

	return record_parse(p, v, field, &c->rec);
}

/* Guests copy the defaults, so they wait until `record:` is read. */
static int top_guests(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	p->guests = v;
	return 0;
}

static const struct field_def top_defs[] = {
	{ "state_dir", top_state_dir },
	{ "control_socket", top_control_socket },
	{ "log_level", top_log_level },
	{ "compression_level", top_compression },
	{ "memory_max", top_memory_max },
	{ "forget_after", top_forget_after },
	{ "control", top_control },
	{ "triggers", top_triggers },
	{ "retention", top_retention },
	{ "record", top_record },
	{ "host", top_host },
	{ "discovery", top_discovery },
	{ "guests", top_guests },
};

/* libyaml's own message, with the line and column it gives. */
static int cfg_syntax_error(struct cfg_parser *p, yaml_parser_t *yp)
{
	size_t line, col;

	if (yp->error == YAML_MEMORY_ERROR) {
		if (p->err && p->err_len)
			snprintf(p->err, p->err_len, "%s: out of memory", p->name);
		return -ENOMEM;
	}
	if (yp->error == YAML_READER_ERROR) {
		/* reader errors carry a byte offset, not a mark */
		size_t off = VMT_MIN(yp->problem_offset, p->len);
		const char *nl = NULL;

		line = 1;
		for (const char *q = p->text; q < p->text + off; q++)
			if (*q == '\n') {
				line++;
				nl = q;
			}
		col = (size_t)(p->text + off - (nl ? nl + 1 : p->text)) + 1;
		if (yp->problem_value != -1)
			return cfg_error_at(p, line, col, NULL, "syntax error: %s (byte 0x%02x)",
					    yp->problem ? yp->problem : "unreadable input",
					    (unsigned)yp->problem_value & 0xff);
		return cfg_error_at(p, line, col, NULL, "syntax error: %s",
				    yp->problem ? yp->problem : "unreadable input");
	}
	line = yp->problem_mark.line + 1;
	col = yp->problem_mark.column + 1;
	if (yp->context)
		return cfg_error_at(p, line, col, NULL, "syntax error: %s (%s at %zu:%zu)",
				    yp->problem ? yp->problem : "invalid YAML", yp->context,
				    yp->context_mark.line + 1, yp->context_mark.column + 1);
	return cfg_error_at(p, line, col, NULL, "syntax error: %s",
			    yp->problem ? yp->problem : "invalid YAML");
}

/*
 * libyaml takes time quadratic in the nesting of flow collections (a few
 * megabytes of '[' would stall a reload), so scan the tokens first and stop
 * at a depth no valid configuration comes near. Scan errors are left for
 * the loader to report.
 */
static int depth_check(struct cfg_parser *p)
{
	yaml_parser_t yp;
	yaml_token_t tok;
	int depth = 0, r = 0;

	if (!yaml_parser_initialize(&yp))
		return -ENOMEM;
	yaml_parser_set_input_string(&yp, (const unsigned char *)p->text, p->len);
	while (!r && yaml_parser_scan(&yp, &tok)) {
		yaml_token_type_t t = tok.type;

		if (t == YAML_FLOW_SEQUENCE_START_TOKEN || t == YAML_FLOW_MAPPING_START_TOKEN ||
		    t == YAML_BLOCK_SEQUENCE_START_TOKEN || t == YAML_BLOCK_MAPPING_START_TOKEN) {
			if (++depth > CONFIG_DEPTH_MAX)
				r = cfg_error_at(p, tok.start_mark.line + 1, tok.start_mark.column + 1,
						 NULL, "nested more than %d levels deep", CONFIG_DEPTH_MAX);
		} else if (t == YAML_FLOW_SEQUENCE_END_TOKEN || t == YAML_FLOW_MAPPING_END_TOKEN ||
			   t == YAML_BLOCK_END_TOKEN) {
			depth--;
		}
		yaml_token_delete(&tok);
		if (t == YAML_STREAM_END_TOKEN || t == YAML_NO_TOKEN)
			break;
	}
	yaml_parser_delete(&yp);
	return r;
}

static int config_parse(struct cfg_parser *p, yaml_parser_t *yp)
{
	yaml_document_t extra;
	yaml_node_t *root, *next;
	uint32_t seen;
	int r;

	r = depth_check(p);
	if (r < 0)
		return r;
	if (!yaml_parser_load(yp, &p->doc))
		return cfg_syntax_error(p, yp);
	root = yaml_document_get_root_node(&p->doc);
	if (!root)
		return 0;	/* empty, or comments only: all defaults */

	/* two documents would silently drop the second */
	if (!yaml_parser_load(yp, &extra))
		return cfg_syntax_error(p, yp);
	next = yaml_document_get_root_node(&extra);
	if (next) {
		r = cfg_error(p, next, NULL, "a second YAML document: the configuration is one document");
		yaml_document_delete(&extra);
		return r;
	}
	yaml_document_delete(&extra);

	if (node_is_null(root))
		return 0;
	if (root->type != YAML_MAPPING_NODE)
		return cfg_error(p, root, NULL, "expected a mapping of settings, found %s",
				 node_kind(root));
	r = map_walk(p, root, "", top_defs, ARRAY_SIZE(top_defs), p->c, &seen);
	if (r < 0)
		return r;
	if (p->guests) {
		r = guests_parse(p, p->guests);
		if (r < 0)
			return r;
	}
	if (p->discovery)
		return discovery_parse(p, p->discovery);
	return 0;
}

int config_load_string(struct vmt_config *c, const char *name, const char *text, size_t len,
		       char *err, size_t err_len)
{
	struct cfg_parser p = {
		.name = name, .text = text, .len = len, .err = err, .err_len = err_len, .c = c,
	};
	yaml_parser_t yp;
	int r;

	config_init(c);
	if (err && err_len)
		err[0] = 0;
	if (!yaml_parser_initialize(&yp))
		return -ENOMEM;
	yaml_parser_set_input_string(&yp, (const unsigned char *)text, len);
	memset(&p.doc, 0, sizeof(p.doc));
	r = config_parse(&p, &yp);
	yaml_document_delete(&p.doc);
	yaml_parser_delete(&yp);
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
				snprintf(err, err_len, "%s: larger than %" PRIu64 "MiB", path, CONFIG_FILE_MAX / MiB);
			else
				snprintf(err, err_len, "%s: %s", path, strerror(-r));
		}
		return r;
	}
	return config_load_string(c, path, text, len, err, err_len);
}

/* ---- printing ---------------------------------------------------------- */

static bool word_is_reserved(const char *s)
{
	static const char *const words[] = {
		"~", "null", "true", "false", "yes", "no", "y", "n", "on", "off",
	};
	bool digits = true;

	for (size_t i = 0; i < ARRAY_SIZE(words); i++)
		if (!strcasecmp(s, words[i]))
			return true;
	for (const char *q = s; *q; q++)
		if (!isdigit((unsigned char)*q) && *q != '.')
			digits = false;
	return digits;	/* would read back as a number elsewhere */
}

/* Plain when it reads back as the same string in block and flow context. */
static void print_str(FILE *f, const char *s)
{
	size_t len = strlen(s);
	bool plain = len && (isalnum((unsigned char)s[0]) || s[0] == '/' || s[0] == '_' ||
			     s[0] == '.') && s[len - 1] != ':' && !word_is_reserved(s);

	for (const char *q = s; plain && *q; q++)
		plain = isalnum((unsigned char)*q) || strchr("/_.-:*", *q);
	if (plain) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20 || ch == 0x7f)
			fprintf(f, "\\x%02x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

/* "a:b,c:d" as a flow list */
static void print_events(FILE *f, const char *s)
{
	fputc('[', f);
	while (*s) {
		char one[VMT_CONFIG_MAX_EVENTS];
		size_t len = strcspn(s, ",");

		snprintf(one, sizeof(one), "%.*s", (int)len, s);
		print_str(f, one);
		s += len;
		if (*s) {
			fputs(", ", f);
			s++;
		}
	}
	fputc(']', f);
}

static void print_bool(FILE *f, int b)
{
	fputs(b ? "true" : "false", f);
}

static void print_record(FILE *f, const struct vmt_record_conf *r, const char *ind)
{
	fprintf(f, "%sring_size: %" PRIu64 "\n", ind, r->ring_size);
	fprintf(f, "%sguest_buffer_size: %" PRIu64 "\n", ind, (uint64_t)r->guest_buffer_kb * KiB);
	fprintf(f, "%sclock: ", ind);
	print_str(f, r->clock);
	fprintf(f, "\n%sevents: ", ind);
	print_events(f, r->events);
	fprintf(f, "\n%smetadata_max: %" PRIu64 "\n", ind, r->meta_max);
	fprintf(f, "%sflush_timeout: %" PRIu32 "ms\n", ind, r->flush_timeout_ms);
}

void config_print(const struct vmt_config *c, FILE *f)
{
	fputs("state_dir: ", f);
	print_str(f, c->state_dir);
	fputs("\ncontrol_socket: ", f);
	print_str(f, c->control_socket);
	fprintf(f, "\nlog_level: %s\n", log_level_name(c->log_level));
	fprintf(f, "compression_level: %d\n", c->zstd_level);
	fprintf(f, "memory_max: %" PRIu64 "\n", c->memory_max);
	fprintf(f, "forget_after: %" PRIu64 "s\n", c->forget_after_s);
	fputs("control:\n  group: ", f);
	print_str(f, c->control.group);
	fputs("\n  read_only_group: ", f);
	print_str(f, c->control.read_group);
	fputs("\ntriggers:\n", f);
	fprintf(f, "  coalesce: %" PRIu32 "ms\n", c->triggers.coalesce_ms);
	fprintf(f, "  cooldown: %" PRIu32 "ms\n", c->triggers.cooldown_ms);
	fprintf(f, "  max_per_minute: %" PRIu32 "\n", c->triggers.max_per_minute);
	fputs("retention:\n", f);
	fprintf(f, "  max_bytes: %" PRIu64 "\n", c->retention.max_bytes);
	fprintf(f, "  max_samples: %" PRIu32 "\n", c->retention.max_samples);
	fprintf(f, "  max_age: %" PRIu64 "s\n", c->retention.max_age_s);
	fputs("record:\n", f);
	print_record(f, &c->rec, "  ");
	fputs("host:\n  enabled: ", f);
	print_bool(f, c->host.enabled);
	fputs("\n  events: ", f);
	print_events(f, c->host.events);
	fputs("\n  clock: ", f);
	print_str(f, c->host.clock);
	fprintf(f, "\n  ring_size: %" PRIu64 "\n", c->host.ring_size);
	fprintf(f, "  buffer_size: %" PRIu64 "\n", (uint64_t)c->host.buffer_kb * KiB);
	fputs("  qemu_only: ", f);
	print_bool(f, c->host.qemu_only);
	fputc('\n', f);
	if (!c->ndiscovery)
		fputs("discovery: []\n", f);
	else
		fputs("discovery:\n", f);
	for (uint32_t i = 0; i < c->ndiscovery; i++) {
		const struct vmt_discovery_conf *d = &c->discovery[i];

		fputs("  - path: ", f);
		print_str(f, d->path);
		fprintf(f, "\n    layout: %s\n", layout_name(d->layout));
		fprintf(f, "    transport: %s\n", transport_name(d->transport));
	}
	if (!c->nguests) {
		fputs("guests: []\n", f);
		return;
	}
	fputs("guests:\n", f);
	for (uint32_t i = 0; i < c->nguests; i++) {
		const struct vmt_guest_conf *g = &c->guests[i];

		fputs("  - name: ", f);
		print_str(f, g->name);
		fputs("\n    path: ", f);
		print_str(f, g->path);
		fprintf(f, "\n    transport: %s\n", transport_name(g->transport));
		fprintf(f, "    cpus: %" PRIu32 "\n", g->cpus);
		fputs("    record:\n", f);
		print_record(f, &g->rec, "      ");
	}
}
