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

#define CONFIG_FILE_MAX (16 * MiB)
#define RING_PAGE ((uint64_t)4096)
#define RING_MAX (64 * GiB)
#define GUEST_BUFFER_MIN (4 * KiB)
#define GUEST_BUFFER_MAX (64 * GiB)
/* A bare number is bytes: the minimum catches "64" written for 64MiB. */
#define META_MIN (64 * KiB)
#define META_MAX (4 * GiB)
#define FLUSH_MAX_MS 60000u
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
};

/* What one guest's mapping needs beyond the struct: nodes for messages. */
struct guest_parse {
	struct vmt_guest_conf *g;
	yaml_node_t *name;
	yaml_node_t *path;
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

const char *transport_name(enum vmt_transport t)
{
	if ((unsigned)t < ARRAY_SIZE(transports))
		return transports[t];
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
	record_init(&c->rec);
}

void config_free(struct vmt_config *c)
{
	free(c->guests);
	c->guests = NULL;
	c->nguests = 0;
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
	if (v && v % GiB == 0)
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

/* "1000" and "1000ms" are milliseconds, "2s" seconds. */
static int node_ms(struct cfg_parser *p, yaml_node_t *n, const char *field, uint32_t min,
		   uint32_t max, uint32_t *out)
{
	const char *s = NULL;
	char *end;
	unsigned long long v;
	int r;

	r = node_scalar(p, n, field, "a duration", false, &s);
	if (r < 0)
		return r;
	if (s[0] == '-')
		return cfg_error(p, n, field, "%s: a duration cannot be negative", SHOW(s));
	if (!isdigit((unsigned char)s[0]))
		goto bad;
	errno = 0;
	v = strtoull(s, &end, 10);
	while (*end == ' ')
		end++;
	if (!strcmp(end, "s"))
		v = v > UINT32_MAX ? UINT64_MAX : v * 1000;
	else if (*end && strcmp(end, "ms"))
		goto bad;
	if (errno || v < min || v > max)
		return cfg_error(p, n, field, "%s is out of range (%ums to %ums)", SHOW(s), min, max);
	*out = (uint32_t)v;
	return 0;
bad:
	return cfg_error(p, n, field, "%s is not a duration (milliseconds: 500, 500ms, or seconds: 2s)",
			 SHOW(s));
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

/* ---- record ------------------------------------------------------------ */

static int rec_ring_size(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;
	uint64_t s;
	int r;

	r = node_size(p, v, field, RING_PAGE, RING_MAX, false, &s);
	if (r < 0)
		return r;
	rec->ring_size = (s + RING_PAGE - 1) / RING_PAGE * RING_PAGE;
	return 0;
}

static int rec_guest_buffer(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;
	uint64_t s;
	int r;

	r = node_size(p, v, field, GUEST_BUFFER_MIN, GUEST_BUFFER_MAX, true, &s);
	if (r < 0)
		return r;
	rec->guest_buffer_kb = (uint32_t)((s + KiB - 1) / KiB);
	return 0;
}

static int rec_clock(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;
	const char *s = NULL;
	int r;

	r = node_scalar(p, v, field, "a trace clock name", true, &s);
	if (r < 0)
		return r;
	if (strlen(s) >= sizeof(rec->clock))
		return cfg_error(p, v, field, "%s is too long for a trace clock (at most %zu bytes)",
				 SHOW(s), sizeof(rec->clock) - 1);
	for (const char *q = s; *q; q++)
		if (!isalnum((unsigned char)*q) && *q != '_' && *q != '-')
			return cfg_error(p, v, field, "%s is not a trace clock name ([A-Za-z0-9_-])",
					 SHOW(s));
	strcpy(rec->clock, s);
	return 0;
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

static int rec_events(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;
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
	memcpy(rec->events, buf, o + 1);
	return 0;
}

static int rec_meta_max(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;

	return node_size(p, v, field, META_MIN, META_MAX, false, &rec->meta_max);
}

static int rec_flush_timeout(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;

	return node_ms(p, v, field, 1, FLUSH_MAX_MS, &rec->flush_timeout_ms);
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
	uint32_t seen;

	if (node_is_null(v))
		return 0;
	if (v->type != YAML_MAPPING_NODE)
		return cfg_error(p, v, field, "expected a mapping of record settings, found %s",
				 node_kind(v));
	return map_walk(p, v, field, record_defs, ARRAY_SIZE(record_defs), rec, &seen);
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

static int guest_transport(struct cfg_parser *p, yaml_node_t *v, const char *field, void *obj)
{
	struct guest_parse *gp = obj;
	const char *s = NULL;
	int r;

	r = node_scalar(p, v, field, "a transport", false, &s);
	if (r < 0)
		return r;
	for (size_t i = 0; i < ARRAY_SIZE(transports); i++)
		if (!strcmp(s, transports[i])) {
			gp->g->transport = (enum vmt_transport)i;
			return 0;
		}
	return cfg_error(p, v, field, "%s is not a transport (auto, fifo, socket)", SHOW(s));
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
	{ "record", top_record },
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
	if (p->guests)
		return guests_parse(p, p->guests);
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

static void print_record(FILE *f, const struct vmt_record_conf *r, const char *ind)
{
	const char *s = r->events;

	fprintf(f, "%sring_size: %" PRIu64 "\n", ind, r->ring_size);
	fprintf(f, "%sguest_buffer_size: %" PRIu64 "\n", ind, (uint64_t)r->guest_buffer_kb * KiB);
	fprintf(f, "%sclock: ", ind);
	print_str(f, r->clock);
	fprintf(f, "\n%sevents: [", ind);
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
	fprintf(f, "]\n");
	fprintf(f, "%smetadata_max: %" PRIu64 "\n", ind, r->meta_max);
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
	fputs("record:\n", f);
	print_record(f, &c->rec, "  ");
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
