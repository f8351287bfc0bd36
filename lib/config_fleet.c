/* SPDX-License-Identifier: MIT */
/*
 * config_fleet: the fleet: block (NATS servers, credentials, this host's
 * id, subjects, the object store bucket, the fleet dumps' budget) and a
 * guest's labels:. Absent, the fleet is off and nothing of it starts.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "config-int.h"
#include "util.h"

#define FLEET_PER_MINUTE_MAX 10000
#define FLEET_QUEUE_MAX 1000000
#define FLEET_REPLICAS_MAX 5	/* JetStream's own bound */

void config_fleet_init(struct vmt_fleet_conf *f)
{
	memset(f, 0, sizeof(*f));
	strcpy(f->subject_prefix, "vmtrace");
	strcpy(f->bucket, "vmtrace");
	f->replicas = 1;
	f->accept = VMT_FLEET_ACCEPT_HOST | VMT_FLEET_ACCEPT_LABEL;
	f->max_per_minute = 6;
	f->max_post_s = 60;
	strcpy(f->inbox_prefix, "_INBOX");
	f->queue_max = 10000;
	f->libvirt_labels = 1;
	strcpy(f->libvirt_uri, "qemu:///system");
}

/* One NATS subject token of ours: no '.', no wildcard, no space. */
bool config_token_valid(const char *s)
{
	if (!*s || strlen(s) > VMT_FLEET_TOKEN_MAX)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-')
			return false;
	return true;
}

/*
 * The words the subject layout (docs/FLEET.md) gives a meaning to: a host
 * named "label" would take <prefix>.dump.label.<k>.<v>, the label
 * requests of every host, for its own; "_all" names every guest of a
 * host. A label key or value of either reads as the same, so neither is
 * one either (lvmeta's labels go through config_label_token_valid too).
 */
bool config_token_reserved(const char *s)
{
	return !strcmp(s, "label") || !strcmp(s, "_all");
}

bool config_label_token_valid(const char *s)
{
	return config_token_valid(s) && !config_token_reserved(s);
}

bool config_subject_valid(const char *s, size_t max)
{
	size_t len = strlen(s), tok = 0;

	if (!len || len > max)
		return false;
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '.') {
			if (!tok)
				return false;	/* an empty token */
			tok = 0;
			continue;
		}
		if (c <= 0x20 || c >= 0x7f || c == '*' || c == '>')
			return false;
		tok++;
	}
	return tok > 0;
}

static int read_token(struct yamlconf *y, yaml_node_t *v, const char *field, char *dst,
		      bool reserved_ok)
{
	const char *s = NULL;
	int r;

	r = yamlconf_read_scalar(y, v, field, "a NATS subject token", false, &s);
	if (r < 0)
		return r;
	if (!config_token_valid(s))
		return yamlconf_error(y, v, field,
				      "%s is not one NATS subject token ([A-Za-z0-9_-], 1 to %d bytes)",
				      SHOW(s), VMT_FLEET_TOKEN_MAX);
	if (!reserved_ok && config_token_reserved(s))
		return yamlconf_error(y, v, field,
				      "%s is reserved: the fleet's subjects give it a meaning "
				      "(<prefix>.dump.label.<key>.<value>, <prefix>.dump.<host>._all)",
				      SHOW(s));
	strcpy(dst, s);
	return 0;
}

static int read_text(struct yamlconf *y, yaml_node_t *v, const char *field, char *dst,
		     size_t size)
{
	const char *s = NULL;
	int r;

	r = yamlconf_read_scalar(y, v, field, "a string", false, &s);
	if (r < 0)
		return r;
	if (strlen(s) >= size)
		return yamlconf_error(y, v, field, "too long (at most %zu bytes)", size - 1);
	for (const char *q = s; *q; q++)
		if ((unsigned char)*q < 0x20 || *q == 0x7f)
			return yamlconf_error(y, v, field, "holds a control character");
	strcpy(dst, s);
	return 0;
}

static int f_servers(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_fleet_conf *f = obj;
	char item[YAMLCONF_FIELD_MAX];
	size_t n;

	if (v->type != YAML_SEQUENCE_NODE)
		return yamlconf_error(y, v, field, "expected a list of nats:// URLs, found %s",
				      yamlconf_kind(v));
	n = yamlconf_list_len(v);
	if (!n || n > VMT_FLEET_MAX_SERVERS)
		return yamlconf_error(y, v, field, "1 to %d servers", VMT_FLEET_MAX_SERVERS);
	for (size_t i = 0; i < n; i++) {
		yaml_node_t *it = yamlconf_list_item(y, v, i);
		char *dst = f->servers[i];
		int r;

		snprintf(item, sizeof(item), "%s[%zu]", field, i);
		r = read_text(y, it, item, dst, sizeof(f->servers[i]));
		if (r < 0)
			return r;
		if (strncmp(dst, "nats://", 7) && strncmp(dst, "tls://", 6))
			return yamlconf_error(y, it, item, "%s is not a nats:// or tls:// URL",
					      SHOW(dst));
		for (const char *q = dst; *q; q++)
			if (isspace((unsigned char)*q) || *q == ',')
				return yamlconf_error(y, it, item, "%s: no spaces or commas",
						      SHOW(dst));
	}
	f->nservers = (uint32_t)n;
	return 0;
}

static int f_user(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	return read_text(y, v, field, ((struct vmt_fleet_conf *)obj)->user, 128);
}

static int f_password(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	return read_text(y, v, field, ((struct vmt_fleet_conf *)obj)->password, 128);
}

static int f_file(struct yamlconf *y, yaml_node_t *v, const char *field, char *dst)
{
	return yamlconf_read_path(y, v, field, false, 4095, dst);
}

static int f_nkey(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	return f_file(y, v, field, ((struct vmt_fleet_conf *)obj)->nkey_seed);
}

static int f_creds(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	return f_file(y, v, field, ((struct vmt_fleet_conf *)obj)->creds);
}

static int tls_ca(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	return f_file(y, v, field, ((struct vmt_fleet_conf *)obj)->tls_ca);
}

static int tls_cert(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	return f_file(y, v, field, ((struct vmt_fleet_conf *)obj)->tls_cert);
}

static int tls_key(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	return f_file(y, v, field, ((struct vmt_fleet_conf *)obj)->tls_key);
}

static const struct yamlconf_key tls_keys[] = {
	{ "ca", tls_ca },
	{ "cert", tls_cert },
	{ "key", tls_key },
};

static int f_tls(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	((struct vmt_fleet_conf *)obj)->tls = 1;	/* even empty: TLS, the system's CAs */
	return yamlconf_read_block(y, v, field, "TLS settings", tls_keys, ARRAY_SIZE(tls_keys), obj);
}

static int f_host_id(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	return read_token(y, v, field, ((struct vmt_fleet_conf *)obj)->host_id, false);
}

static int f_prefix(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	return read_token(y, v, field, ((struct vmt_fleet_conf *)obj)->subject_prefix, true);
}

static int f_bucket(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	return read_token(y, v, field, ((struct vmt_fleet_conf *)obj)->bucket, true);
}

static int f_replicas(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	return yamlconf_read_u32(y, v, field, 1, FLEET_REPLICAS_MAX,
				 &((struct vmt_fleet_conf *)obj)->replicas);
}

static int f_per_minute(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	return yamlconf_read_u32(y, v, field, 0, FLEET_PER_MINUTE_MAX,
				 &((struct vmt_fleet_conf *)obj)->max_per_minute);
}

static int f_max_post(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_fleet_conf *f = obj;
	uint64_t s;
	int r = yamlconf_read_duration(y, v, field, SEC_MS, 0, VMT_FLEET_POST_MAX_S * SEC_MS, &s);

	if (r == 0)
		f->max_post_s = (uint32_t)s;
	return r;
}

/* The prefix of the requesters' inboxes (a client's custom inbox prefix,
 * without the trailing '.'): answers go under it and nowhere else. */
static int f_inbox_prefix(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_fleet_conf *f = obj;
	const char *s = NULL;
	int r;

	r = yamlconf_read_scalar(y, v, field, "a NATS subject", false, &s);
	if (r < 0)
		return r;
	if (!config_subject_valid(s, VMT_FLEET_INBOX_MAX))
		return yamlconf_error(y, v, field, "%s is not a NATS subject without wildcards "
				      "(tokens of printable ASCII, no trailing '.', 1 to %d bytes)",
				      SHOW(s), VMT_FLEET_INBOX_MAX);
	if (s[0] == '$')
		return yamlconf_error(y, v, field, "%s: subjects under '$' are the server's "
				      "(JetStream, the object store), never an inbox", SHOW(s));
	strcpy(f->inbox_prefix, s);
	return 0;
}

static int f_queue_max(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	return yamlconf_read_u32(y, v, field, 1, FLEET_QUEUE_MAX,
				 &((struct vmt_fleet_conf *)obj)->queue_max);
}

static int f_libvirt_labels(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	return yamlconf_read_bool(y, v, field, &((struct vmt_fleet_conf *)obj)->libvirt_labels);
}

static int f_libvirt_uri(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_fleet_conf *f = obj;
	int r = read_text(y, v, field, f->libvirt_uri, sizeof(f->libvirt_uri));

	if (r == 0 && !f->libvirt_uri[0])
		return yamlconf_error(y, v, field, "a libvirt URI (qemu:///system) is needed");
	return r;
}

/* accept: [host, label]: which dump subjects this host subscribes to */
static int f_accept(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj)
{
	struct vmt_fleet_conf *f = obj;
	char item[YAMLCONF_FIELD_MAX];
	uint32_t acc = 0;

	if (v->type != YAML_SEQUENCE_NODE)
		return yamlconf_error(y, v, field, "expected a list of host, label; found %s",
				      yamlconf_kind(v));
	for (size_t i = 0; i < yamlconf_list_len(v); i++) {
		yaml_node_t *it = yamlconf_list_item(y, v, i);
		const char *s = NULL;
		int r;

		snprintf(item, sizeof(item), "%s[%zu]", field, i);
		r = yamlconf_read_scalar(y, it, item, "host or label", false, &s);
		if (r < 0)
			return r;
		if (!strcmp(s, "host"))
			acc |= VMT_FLEET_ACCEPT_HOST;
		else if (!strcmp(s, "label"))
			acc |= VMT_FLEET_ACCEPT_LABEL;
		else
			return yamlconf_error(y, it, item, "%s is not host or label", SHOW(s));
	}
	f->accept = acc;
	return 0;
}

static const struct yamlconf_key fleet_keys[] = {
	{ "servers", f_servers },
	{ "user", f_user },
	{ "password", f_password },
	{ "nkey_seed", f_nkey },
	{ "creds", f_creds },
	{ "tls", f_tls },
	{ "host_id", f_host_id },
	{ "subject_prefix", f_prefix },
	{ "bucket", f_bucket },
	{ "replicas", f_replicas },
	{ "accept", f_accept },
	{ "max_per_minute", f_per_minute },
	{ "max_post", f_max_post },
	{ "inbox_prefix", f_inbox_prefix },
	{ "queue_max", f_queue_max },
	{ "libvirt_labels", f_libvirt_labels },
	{ "libvirt_uri", f_libvirt_uri },
};

int config_fleet_parse(struct yamlconf *y, yaml_node_t *v, const char *field,
		       struct vmt_fleet_conf *f)
{
	int r;
	int n = 0;
	size_t pl;

	if (v->type != YAML_MAPPING_NODE)
		return yamlconf_error(y, v, field, "expected a mapping of fleet settings, found %s",
				      yamlconf_kind(v));
	r = yamlconf_read_block(y, v, field, "fleet settings", fleet_keys, ARRAY_SIZE(fleet_keys), f);
	if (r < 0)
		return r;
	if (!f->nservers)
		return yamlconf_error(y, v, field, "servers: at least one nats:// URL is needed");
	n = !!f->user[0] + !!f->nkey_seed[0] + !!f->creds[0];
	if (n > 1)
		return yamlconf_error(y, v, field, "user, nkey_seed and creds exclude each other");
	if (!!f->user[0] != !!f->password[0])
		return yamlconf_error(y, v, field, "user and password go together");
	if (!!f->tls_cert[0] != !!f->tls_key[0])
		return yamlconf_error(y, v, field, "tls: cert and key go together");
	/* an inbox under the fleet's own subjects would let a reply land on them */
	pl = strlen(f->subject_prefix);
	if (!strncmp(f->inbox_prefix, f->subject_prefix, pl) &&
	    (f->inbox_prefix[pl] == '.' || !f->inbox_prefix[pl]))
		return yamlconf_error(y, v, field, "inbox_prefix \"%s\" is under subject_prefix "
				      "\"%s\": answers would go to the fleet's own subjects",
				      f->inbox_prefix, f->subject_prefix);
	f->enabled = 1;
	return 0;
}

/* labels: {key: value, ...}, both tokens; kept as "k=v,k=v" */
int config_guest_labels(struct yamlconf *y, yaml_node_t *v, const char *field, char *dst,
			size_t size)
{
	size_t o = 0;

	if (v->type != YAML_MAPPING_NODE)
		return yamlconf_error(y, v, field, "expected a mapping of labels, found %s",
				      yamlconf_kind(v));
	dst[0] = 0;
	for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
		yaml_node_t *k = yamlconf_node(y, p->key), *val = yamlconf_node(y, p->value);
		char kf[YAMLCONF_FIELD_MAX];
		char key[VMT_FLEET_TOKEN_MAX + 1], value[VMT_FLEET_TOKEN_MAX + 1];
		int r;

		r = read_token(y, k, field, key, false);
		if (r < 0)
			return r;
		yamlconf_join(kf, sizeof(kf), field, key);
		r = read_token(y, val, kf, value, false);
		if (r < 0)
			return r;
		r = snprintf(dst + o, size - o, "%s%s=%s", o ? "," : "", key, value);
		if (r < 0 || (size_t)r >= size - o)
			return yamlconf_error(y, v, field, "too many labels (%zu bytes at most)",
					      size - 1);
		o += (size_t)r;
	}
	return 0;
}

static void print_q(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

void config_fleet_print(const struct vmt_config *c, FILE *f)
{
	const struct vmt_fleet_conf *fl = &c->fleet;

	if (!fl->enabled)
		return;
	fputs("fleet:\n  servers:\n", f);
	for (uint32_t i = 0; i < fl->nservers; i++) {
		fputs("    - ", f);
		print_q(f, fl->servers[i]);
		fputc('\n', f);
	}
	if (fl->user[0]) {
		fputs("  user: ", f);
		print_q(f, fl->user);
		fputs("\n  password: \"(hidden)\"\n", f);	/* never printed */
	}
	if (fl->nkey_seed[0]) {
		fputs("  nkey_seed: ", f);
		print_q(f, fl->nkey_seed);
		fputc('\n', f);
	}
	if (fl->creds[0]) {
		fputs("  creds: ", f);
		print_q(f, fl->creds);
		fputc('\n', f);
	}
	if (fl->tls && !fl->tls_ca[0] && !fl->tls_cert[0])
		fputs("  tls: {}\n", f);
	if (fl->tls_ca[0] || fl->tls_cert[0]) {
		fputs("  tls:\n", f);
		if (fl->tls_ca[0]) {
			fputs("    ca: ", f);
			print_q(f, fl->tls_ca);
			fputc('\n', f);
		}
		if (fl->tls_cert[0]) {
			fputs("    cert: ", f);
			print_q(f, fl->tls_cert);
			fputs("\n    key: ", f);
			print_q(f, fl->tls_key);
			fputc('\n', f);
		}
	}
	if (fl->host_id[0])
		fprintf(f, "  host_id: %s\n", fl->host_id);
	fprintf(f, "  subject_prefix: %s\n  bucket: %s\n  replicas: %" PRIu32 "\n",
		fl->subject_prefix, fl->bucket, fl->replicas);
	fprintf(f, "  accept: [%s%s%s]\n", fl->accept & VMT_FLEET_ACCEPT_HOST ? "host" : "",
		fl->accept == (VMT_FLEET_ACCEPT_HOST | VMT_FLEET_ACCEPT_LABEL) ? ", " : "",
		fl->accept & VMT_FLEET_ACCEPT_LABEL ? "label" : "");
	fprintf(f, "  max_per_minute: %" PRIu32 "\n  max_post: %" PRIu32 "s\n  inbox_prefix: ",
		fl->max_per_minute, fl->max_post_s);
	print_q(f, fl->inbox_prefix);
	fprintf(f, "\n  queue_max: %" PRIu32 "\n", fl->queue_max);
	fprintf(f, "  libvirt_labels: %s\n  libvirt_uri: ", fl->libvirt_labels ? "true" : "false");
	print_q(f, fl->libvirt_uri);
	fputc('\n', f);
}
