/* SPDX-License-Identifier: MIT */
/*
 * config_guests: where guests are found. guests: lists them one by one
 * (name, channel folder, transport, own record settings); discovery: names
 * folders watched for guests that come and go. Names and paths must not
 * clash, and no watched folder may hold another or a listed guest's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config-int.h"
#include "proto.h"
#include "util.h"

#define CHANNEL_SUFFIX_MAX "/trace-path-cpu255"

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

static int transport_parse(struct yamlconf *y, yaml_node_t *v, const char *field,
			   enum vmt_transport *dst)
{
	const char *s = NULL;
	int r;

	r = yamlconf_read_scalar(y, v, field, "a transport", false, &s);
	if (r < 0)
		return r;
	for (size_t i = 0; i < ARRAY_SIZE(transports); i++)
		if (!strcmp(s, transports[i])) {
			*dst = (enum vmt_transport)i;
			return 0;
		}
	return yamlconf_error(y, v, field, "%s is not a transport (auto, fifo, socket)", SHOW(s));
}

/* ---- guests ------------------------------------------------------------ */

static int guest_name(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct guest_parse *gp = obj;
	const char *s = NULL;
	int r;

	r = yamlconf_read_scalar(y, v, field, "a guest name", false, &s);
	if (r < 0)
		return r;
	if (!name_is_valid(s))
		return yamlconf_error(y, v, field,
				      "%s is not a valid name ([A-Za-z0-9_.-], 1 to 64 characters, no leading '.')",
				      SHOW(s));
	if (!strcmp(s, "host"))
		return yamlconf_error(y, v, field,
				      "\"host\" is reserved for the host's own trace (host:)");
	strcpy(gp->g->name, s);
	gp->name = v;
	return 0;
}

static int guest_path(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct guest_parse *gp = obj;

	gp->path = v;
	return yamlconf_read_path(y, v, field, true, DIR_MAX, gp->g->path);
}

static int guest_transport(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct guest_parse *gp = obj;

	return transport_parse(y, v, field, &gp->g->transport);
}

static int guest_cpus(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct guest_parse *gp = obj;

	return yamlconf_read_u32(y, v, field, 0, VMT_MAX_CPUS, &gp->g->cpus);
}

static int guest_pidfile(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct guest_parse *gp = obj;

	return config_guest_pidfile(y, v, field, gp->g->pidfile);
}

static int guest_record(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct guest_parse *gp = obj;

	return config_record_parse(y, v, field, &gp->g->rec, false);
}

static int guest_labels(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct guest_parse *gp = obj;

	return config_guest_labels(y, v, field, gp->g->labels, sizeof(gp->g->labels));
}

enum { GUEST_NAME, GUEST_PATH };
static const struct yamlconf_key guest_keys[] = {
	[GUEST_NAME] = { "name", guest_name },
	[GUEST_PATH] = { "path", guest_path },
	{ "transport", guest_transport },
	{ "cpus", guest_cpus },
	{ "record", guest_record },
	{ "pidfile", guest_pidfile },
	{ "labels", guest_labels },
};

static int guest_parse(struct yamlconf *y, struct vmt_config *c, yaml_node_t *v, size_t idx)
{
	struct guest_parse gp = { .g = &c->guests[idx] };
	char field[YAMLCONF_FIELD_MAX], sub[YAMLCONF_FIELD_MAX];
	uint32_t seen;
	int r;

	snprintf(field, sizeof(field), "%s[%zu]", "guests", idx);
	gp.g->transport = VMT_TRANSPORT_AUTO;
	gp.g->rec = c->rec;
	gp.g->line = (int)v->start_mark.line + 1;
	if (v->type != YAML_MAPPING_NODE)
		return yamlconf_error(y, v, field,
				      "expected a mapping with a guest's name and path, found %s",
				      yamlconf_kind(v));
	r = yamlconf_walk_map(y, v, field, guest_keys, ARRAY_SIZE(guest_keys), &gp, &seen);
	if (r < 0)
		return r;
	for (size_t k = GUEST_NAME; k <= GUEST_PATH; k++)
		if (!(seen & 1u << k)) {
			yamlconf_join(sub, sizeof(sub), field, guest_keys[k].key);
			return yamlconf_error(y, v, sub,
					      "missing: every guest needs a name and a path");
		}
	if (gp.g->transport == VMT_TRANSPORT_SOCKET &&
	    strlen(gp.g->path) + strlen(CHANNEL_SUFFIX_MAX) > SUN_PATH_MAX) {
		yamlconf_join(sub, sizeof(sub), field, "path");
		return yamlconf_error(y, gp.path, sub,
				      "too long for transport socket: %s is %zu bytes, more than %d",
				      "PATH" CHANNEL_SUFFIX_MAX,
				      strlen(gp.g->path) + strlen(CHANNEL_SUFFIX_MAX),
				      SUN_PATH_MAX);
	}
	for (size_t j = 0; j < idx; j++) {
		const struct vmt_guest_conf *o = &c->guests[j];

		if (!strcmp(o->name, gp.g->name)) {
			yamlconf_join(sub, sizeof(sub), field, "name");
			return yamlconf_error(y, gp.name, sub,
					      "%s is already the name of %s[%zu] (line %d)",
					      SHOW(o->name), "guests", j, o->line);
		}
		if (!strcmp(o->path, gp.g->path)) {
			yamlconf_join(sub, sizeof(sub), field, "path");
			return yamlconf_error(y, gp.path, sub,
					      "%s is already the path of %s[%zu] (line %d)",
					      SHOW(o->path), "guests", j, o->line);
		}
	}
	return 0;
}

int config_guests_parse(struct yamlconf *y, struct vmt_config *c, yaml_node_t *v)
{
	size_t n;
	int r;

	if (yamlconf_is_null(v))
		return 0;
	if (v->type != YAML_SEQUENCE_NODE)
		return yamlconf_error(y, v, "guests", "expected a list of guests, found %s",
				      yamlconf_kind(v));
	n = yamlconf_list_len(v);
	if (n > VMT_CONFIG_MAX_GUESTS) {
		char field[YAMLCONF_FIELD_MAX];

		snprintf(field, sizeof(field), "%s[%d]", "guests", VMT_CONFIG_MAX_GUESTS);
		return yamlconf_error(y, yamlconf_list_item(y, v, VMT_CONFIG_MAX_GUESTS), field,
				      "more than %d guests", VMT_CONFIG_MAX_GUESTS);
	}
	if (!n)
		return 0;
	c->guests = calloc(n, sizeof(*c->guests));
	if (!c->guests)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		c->nguests = (uint32_t)i + 1;
		r = guest_parse(y, c, yamlconf_list_item(y, v, i), i);
		if (r < 0)
			return r;
	}
	return 0;
}

/* ---- discovery --------------------------------------------------------- */

static int disc_path(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct discovery_parse *dp = obj;

	dp->path = v;
	return yamlconf_read_path(y, v, field, true, DIR_MAX, dp->d->path);
}

static int disc_layout(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct discovery_parse *dp = obj;
	const char *s = NULL;
	int r;

	r = yamlconf_read_scalar(y, v, field, "a layout", false, &s);
	if (r < 0)
		return r;
	for (size_t i = 0; i < ARRAY_SIZE(layouts); i++)
		if (!strcmp(s, layouts[i])) {
			dp->d->layout = (enum vmt_layout)i;
			return 0;
		}
	return yamlconf_error(y, v, field, "%s is not a layout (vmtraced, libvirt)", SHOW(s));
}

static int disc_transport(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct discovery_parse *dp = obj;

	dp->transport = v;
	return transport_parse(y, v, field, &dp->d->transport);
}

enum { DISC_PATH };
static const struct yamlconf_key discovery_keys[] = {
	[DISC_PATH] = { "path", disc_path },
	{ "layout", disc_layout },
	{ "transport", disc_transport },
};

/* a strictly inside b: both normalized by yamlconf_read_path */
static bool path_is_inside(const char *a, const char *b)
{
	size_t n = strlen(b);

	if (n == 1)
		return a[1] != 0;	/* b is "/" */
	return !strncmp(a, b, n) && a[n] == '/';
}

static int discovery_parse_one(struct yamlconf *y, struct vmt_config *c, yaml_node_t *v,
			       size_t idx)
{
	struct discovery_parse dp = { .d = &c->discovery[idx] };
	char field[YAMLCONF_FIELD_MAX], sub[YAMLCONF_FIELD_MAX];
	uint32_t seen;
	int r;

	snprintf(field, sizeof(field), "%s[%zu]", "discovery", idx);
	dp.d->layout = VMT_LAYOUT_VMTRACED;
	dp.d->transport = VMT_TRANSPORT_AUTO;
	dp.d->line = (int)v->start_mark.line + 1;
	if (v->type != YAML_MAPPING_NODE)
		return yamlconf_error(y, v, field,
				      "expected a mapping with a folder's path, found %s",
				      yamlconf_kind(v));
	r = yamlconf_walk_map(y, v, field, discovery_keys, ARRAY_SIZE(discovery_keys), &dp, &seen);
	if (r < 0)
		return r;
	if (!(seen & 1u << DISC_PATH)) {
		yamlconf_join(sub, sizeof(sub), field, "path");
		return yamlconf_error(y, v, sub, "missing: every discovery entry needs a path");
	}
	if (dp.d->layout == VMT_LAYOUT_LIBVIRT && dp.d->transport == VMT_TRANSPORT_FIFO) {
		yamlconf_join(sub, sizeof(sub), field, "transport");
		return yamlconf_error(y, dp.transport, sub,
				      "\"fifo\" with layout libvirt: libvirt's channels are unix sockets");
	}
	yamlconf_join(sub, sizeof(sub), field, "path");
	for (size_t j = 0; j < idx; j++) {
		const struct vmt_discovery_conf *o = &c->discovery[j];
		bool inside = path_is_inside(dp.d->path, o->path);

		if (!strcmp(o->path, dp.d->path))
			return yamlconf_error(y, dp.path, sub,
					      "%s is already the path of %s[%zu] (line %d)",
					      SHOW(o->path), "discovery", j, o->line);
		/* a folder in a watched folder would be taken for a guest */
		if (inside || path_is_inside(o->path, dp.d->path))
			return yamlconf_error(y, dp.path, sub,
					      "%s %s %s, the path of %s[%zu] (line %d)",
					      SHOW(dp.d->path), inside ? "is inside" : "contains",
					      SHOW(o->path), "discovery", j, o->line);
	}
	for (size_t j = 0; j < c->nguests; j++) {
		const struct vmt_guest_conf *g = &c->guests[j];

		if (!strcmp(g->path, dp.d->path))
			return yamlconf_error(y, dp.path, sub,
					      "%s is already the path of %s[%zu] (line %d)",
					      SHOW(g->path), "guests", j, g->line);
	}
	return 0;
}

int config_discovery_parse(struct yamlconf *y, struct vmt_config *c, yaml_node_t *v)
{
	size_t n;
	int r;

	if (yamlconf_is_null(v))
		return 0;
	if (v->type != YAML_SEQUENCE_NODE)
		return yamlconf_error(y, v, "discovery", "expected a list of folders, found %s",
				      yamlconf_kind(v));
	n = yamlconf_list_len(v);
	if (n > VMT_CONFIG_MAX_DISCOVERY) {
		char field[YAMLCONF_FIELD_MAX];

		snprintf(field, sizeof(field), "%s[%d]", "discovery", VMT_CONFIG_MAX_DISCOVERY);
		return yamlconf_error(y, yamlconf_list_item(y, v, VMT_CONFIG_MAX_DISCOVERY), field,
				      "more than %d discovery folders", VMT_CONFIG_MAX_DISCOVERY);
	}
	if (!n)
		return 0;
	c->discovery = calloc(n, sizeof(*c->discovery));
	if (!c->discovery)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		c->ndiscovery = (uint32_t)i + 1;
		r = discovery_parse_one(y, c, yamlconf_list_item(y, v, i), i);
		if (r < 0)
			return r;
	}
	return 0;
}
