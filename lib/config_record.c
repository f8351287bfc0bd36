/* SPDX-License-Identifier: MIT */
/*
 * config_record: what is traced and how much of it is kept. The record:
 * block (top-level defaults, and a guest's own overrides) and host:, which
 * records the host's ftrace like a guest and shares its field types: ring
 * and buffer sizes, trace clocks, event lists.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "config-int.h"
#include "frame.h"
#include "ftmeta.h"
#include "util.h"

#define RING_PAGE ((uint64_t)4096)
#define RING_MAX (64 * GiB)
#define GUEST_BUFFER_MIN (4 * KiB)
#define GUEST_BUFFER_MAX (64 * GiB)
/* A bare number is bytes: the minimum catches "64" written for 64MiB. */
#define META_MIN (64 * KiB)
#define META_MAX (4 * GiB)
#define FLUSH_MAX_MS (60 * SEC_MS)

static int ring_size_parse(struct yamlconf *y, yaml_node_t *v, const char *field, uint64_t *dst)
{
	uint64_t s;
	int r;

	r = yamlconf_read_size(y, v, field, RING_PAGE, RING_MAX, false, &s);
	if (r < 0)
		return r;
	*dst = (s + RING_PAGE - 1) / RING_PAGE * RING_PAGE;
	return 0;
}

static int buffer_kb_parse(struct yamlconf *y, yaml_node_t *v, const char *field, uint32_t *dst)
{
	uint64_t s;
	int r;

	r = yamlconf_read_size(y, v, field, GUEST_BUFFER_MIN, GUEST_BUFFER_MAX, true, &s);
	if (r < 0)
		return r;
	*dst = (uint32_t)((s + KiB - 1) / KiB);
	return 0;
}

static int clock_parse(struct yamlconf *y, yaml_node_t *v, const char *field, char *dst,
		       size_t size)
{
	const char *s = NULL;
	int r;

	r = yamlconf_read_scalar(y, v, field, "a trace clock name", true, &s);
	if (r < 0)
		return r;
	if (strlen(s) >= size)
		return yamlconf_error(y, v, field,
				      "%s is too long for a trace clock (at most %zu bytes)",
				      SHOW(s), size - 1);
	for (const char *q = s; *q; q++)
		if (!isalnum((unsigned char)*q) && *q != '_' && *q != '-')
			return yamlconf_error(y, v, field,
					      "%s is not a trace clock name ([A-Za-z0-9_-])",
					      SHOW(s));
	strcpy(dst, s);
	return 0;
}

/* ---- event lists ------------------------------------------------------- */

static int events_add(struct yamlconf *y, yaml_node_t *v, const char *field, char *buf,
		      size_t *o, const char *s, size_t len)
{
	char one[VMT_CONFIG_MAX_EVENTS];

	snprintf(one, sizeof(one), "%.*s", (int)VMT_MIN(len, sizeof(one) - 1), s);
	if (!len)
		return yamlconf_error(y, v, field, "an empty entry in the event list");
	if (memchr(s, ',', len))
		return yamlconf_error(y, v, field, "%s contains a comma: give one event per entry",
				      SHOW(one));
	if (!ftmeta_pattern_valid(s, len))
		return yamlconf_error(y, v, field,
				      "%s is not an event (system:event of [A-Za-z0-9_*])",
				      SHOW(one));
	if (*o + !!*o + len >= VMT_CONFIG_MAX_EVENTS)
		return yamlconf_error(y, v, field,
				      "the events joined with commas are longer than %d bytes",
				      VMT_CONFIG_MAX_EVENTS - 1);
	if (*o)
		buf[(*o)++] = ',';
	memcpy(buf + *o, s, len);
	*o += len;
	buf[*o] = 0;
	return 0;
}

/* A list, or one comma-separated string, joined into dst with commas. */
static int events_parse(struct yamlconf *y, yaml_node_t *v, const char *field, char *dst)
{
	char buf[VMT_CONFIG_MAX_EVENTS] = "";
	size_t o = 0;
	int r;

	if (v->type == YAML_SEQUENCE_NODE) {
		for (size_t i = 0; i < yamlconf_list_len(v); i++) {
			yaml_node_t *e = yamlconf_list_item(y, v, i);
			char f[YAMLCONF_FIELD_MAX];
			const char *s = NULL;

			snprintf(f, sizeof(f), "%s[%zu]", field, i);
			r = yamlconf_read_scalar(y, e, f, "an event name", true, &s);
			if (r < 0)
				return r;
			r = events_add(y, e, f, buf, &o, s, strlen(s));
			if (r < 0)
				return r;
		}
	} else {
		const char *s, *end;

		r = yamlconf_read_scalar(y, v, field,
					 "a list of events or a comma-separated string", true, &s);
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
			r = events_add(y, v, field, buf, &o, s, len);
			if (r < 0)
				return r;
			if (!end)
				break;
			s = end + 1;
			s += strspn(s, " \t");
			if (!*s)
				return yamlconf_error(y, v, field,
						      "an empty entry in the event list");
		}
	}
	memcpy(dst, buf, o + 1);
	return 0;
}

/* ---- record ------------------------------------------------------------ */

static int rec_ring_size(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;

	return ring_size_parse(y, v, field, &rec->ring_size);
}

static int rec_guest_buffer(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;

	return buffer_kb_parse(y, v, field, &rec->guest_buffer_kb);
}

static int rec_clock(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;

	return clock_parse(y, v, field, rec->clock, sizeof(rec->clock));
}

static int rec_events(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;

	return events_parse(y, v, field, rec->events);
}

static int rec_meta_max(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;

	return yamlconf_read_size(y, v, field, META_MIN, META_MAX, false, &rec->meta_max);
}

static int rec_flush_timeout(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;
	uint64_t ms;
	int r;

	r = yamlconf_read_duration(y, v, field, 1, 1, FLUSH_MAX_MS, &ms);
	if (r < 0)
		return r;
	rec->flush_timeout_ms = (uint32_t)ms;
	return 0;
}

static int rec_sessions(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;

	return yamlconf_read_u32(y, v, field, 0, 600, &rec->sessions_per_minute);
}

static int rec_compression(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;
	const char *s = NULL;
	int r, codec;

	r = yamlconf_read_scalar(y, v, field, "zstd, tcode, lz4 or off", false, &s);
	if (r < 0)
		return r;
	codec = frame_codec_parse(s);
	if (codec < 0)
		return yamlconf_error(y, v, field, "%s is not zstd, tcode, lz4 or off", SHOW(s));
	rec->compression = (uint32_t)codec;
	return 0;
}

static int rec_compression_level(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;

	return yamlconf_read_u32(y, v, field, 1, VMT_COMPRESSION_LEVEL_MAX, &rec->compression_level);
}

/* The daemon's, not a guest's: auto (0) or 1..16 worker threads. */
static int rec_compress_threads(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_record_conf *rec = obj;

	if (v->type == YAML_SCALAR_NODE && v->data.scalar.length == 4 &&
	    !memcmp(v->data.scalar.value, "auto", 4)) {
		rec->compress_threads = 0;
		return 0;
	}
	return yamlconf_read_u32(y, v, field, 1, VMT_COMPRESS_THREADS_CONF_MAX, &rec->compress_threads);
}

static const struct yamlconf_key record_keys[] = {
	{ "ring_size", rec_ring_size },
	{ "guest_buffer_size", rec_guest_buffer },
	{ "clock", rec_clock },
	{ "events", rec_events },
	{ "metadata_max", rec_meta_max },
	{ "flush_timeout", rec_flush_timeout },
	{ "sessions_per_minute", rec_sessions },
	{ "compression", rec_compression },
	{ "compression_level", rec_compression_level },
	/* the last: the top-level record: only (a guest's has one key less) */
	{ "compress_threads", rec_compress_threads },
};

int config_record_parse(struct yamlconf *y, yaml_node_t *v, const char *field,
			struct vmt_record_conf *rec, bool top)
{
	return yamlconf_read_block(y, v, field, "record settings", record_keys,
				   ARRAY_SIZE(record_keys) - !top, rec);
}

/* ---- host -------------------------------------------------------------- */

static int host_enabled(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_host_conf *h = obj;

	return yamlconf_read_bool(y, v, field, &h->enabled);
}

static int host_events(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_host_conf *h = obj;

	return events_parse(y, v, field, h->events);
}

/* The host instance is vmtraced's own: nothing to leave, "" is mono. */
static int host_clock(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_host_conf *h = obj;
	int r;

	r = clock_parse(y, v, field, h->clock, sizeof(h->clock));
	if (r == 0 && !h->clock[0])
		strcpy(h->clock, "mono");
	return r;
}

static int host_ring_size(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_host_conf *h = obj;

	return ring_size_parse(y, v, field, &h->ring_size);
}

static int host_buffer_size(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_host_conf *h = obj;

	return buffer_kb_parse(y, v, field, &h->buffer_kb);
}

static int host_qemu_only(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_host_conf *h = obj;

	return yamlconf_read_bool(y, v, field, &h->qemu_only);
}

static const struct yamlconf_key host_keys[] = {
	{ "enabled", host_enabled },
	{ "events", host_events },
	{ "clock", host_clock },
	{ "ring_size", host_ring_size },
	{ "buffer_size", host_buffer_size },
	{ "qemu_only", host_qemu_only },
};

int config_host_parse(struct yamlconf *y, yaml_node_t *v, const char *field,
		      struct vmt_host_conf *h)
{
	yaml_node_t *ev;
	int r;

	r = yamlconf_read_block(y, v, field, "host settings", host_keys, ARRAY_SIZE(host_keys), h);
	if (r < 0)
		return r;
	if (h->enabled && !h->events[0]) {
		char sub[YAMLCONF_FIELD_MAX];

		ev = yamlconf_find_key(y, v, "events");
		yamlconf_join(sub, sizeof(sub), field, "events");
		return yamlconf_error(y, ev ? ev : v, sub,
				      "empty, but the host is enabled: it would record nothing");
	}
	return 0;
}
