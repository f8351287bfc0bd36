/* SPDX-License-Identifier: MIT */
/* yamlconf: libyaml's document as checked values; see yamlconf.h. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "yamlconf.h"

#define DEPTH_MAX 64

/* ---- messages ---------------------------------------------------------- */

const char *yamlconf_show(const char *s, char *buf, size_t n)
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
static void err_vwrite(struct yamlconf *y, size_t line, size_t col, const char *field,
		       const char *fmt, va_list ap)
{
	int n;

	if (!y->err || !y->err_len)
		return;
	if (field)
		n = snprintf(y->err, y->err_len, "%s:%zu:%zu: %s: ", y->name, line, col, field);
	else
		n = snprintf(y->err, y->err_len, "%s:%zu:%zu: ", y->name, line, col);
	if (n < 0 || (size_t)n >= y->err_len)
		return;
	vsnprintf(y->err + n, y->err_len - (size_t)n, fmt, ap);
}

int yamlconf_error(struct yamlconf *y, const yaml_node_t *at, const char *field, const char *fmt,
		   ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vwrite(y, at->start_mark.line + 1, at->start_mark.column + 1, field, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

__attribute__((format(printf, 5, 6)))
static int error_at(struct yamlconf *y, size_t line, size_t col, const char *field,
		    const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vwrite(y, line, col, field, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

void yamlconf_join(char *out, size_t n, const char *prefix, const char *key)
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

/* ---- the document ------------------------------------------------------ */

/* libyaml's own message, with the line and column it gives. */
static int syntax_error(struct yamlconf *y)
{
	yaml_parser_t *yp = &y->parser;
	size_t line, col;

	if (yp->error == YAML_MEMORY_ERROR) {
		if (y->err && y->err_len)
			snprintf(y->err, y->err_len, "%s: out of memory", y->name);
		return -ENOMEM;
	}
	if (yp->error == YAML_READER_ERROR) {
		/* reader errors carry a byte offset, not a mark */
		size_t off = VMT_MIN(yp->problem_offset, y->len);
		const char *nl = NULL;

		line = 1;
		for (const char *q = y->text; q < y->text + off; q++)
			if (*q == '\n') {
				line++;
				nl = q;
			}
		col = (size_t)(y->text + off - (nl ? nl + 1 : y->text)) + 1;
		if (yp->problem_value != -1)
			return error_at(y, line, col, NULL, "syntax error: %s (byte 0x%02x)",
					yp->problem ? yp->problem : "unreadable input",
					(unsigned)yp->problem_value & 0xff);
		return error_at(y, line, col, NULL, "syntax error: %s",
				yp->problem ? yp->problem : "unreadable input");
	}
	line = yp->problem_mark.line + 1;
	col = yp->problem_mark.column + 1;
	if (yp->context)
		return error_at(y, line, col, NULL, "syntax error: %s (%s at %zu:%zu)",
				yp->problem ? yp->problem : "invalid YAML", yp->context,
				yp->context_mark.line + 1, yp->context_mark.column + 1);
	return error_at(y, line, col, NULL, "syntax error: %s",
			yp->problem ? yp->problem : "invalid YAML");
}

/*
 * libyaml takes time quadratic in the nesting of flow collections (a few
 * megabytes of '[' would stall a reload), so scan the tokens first and stop
 * at a depth no valid configuration comes near. Scan errors are left for
 * the loader to report.
 */
static int depth_check(struct yamlconf *y)
{
	yaml_parser_t yp;
	yaml_token_t tok;
	int depth = 0, r = 0;

	if (!yaml_parser_initialize(&yp))
		return -ENOMEM;
	yaml_parser_set_input_string(&yp, (const unsigned char *)y->text, y->len);
	while (!r && yaml_parser_scan(&yp, &tok)) {
		yaml_token_type_t t = tok.type;

		if (t == YAML_FLOW_SEQUENCE_START_TOKEN || t == YAML_FLOW_MAPPING_START_TOKEN ||
		    t == YAML_BLOCK_SEQUENCE_START_TOKEN || t == YAML_BLOCK_MAPPING_START_TOKEN) {
			if (++depth > DEPTH_MAX)
				r = error_at(y, tok.start_mark.line + 1, tok.start_mark.column + 1,
					     NULL, "nested more than %d levels deep", DEPTH_MAX);
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

int yamlconf_open(struct yamlconf *y, const char *name, const char *text, size_t len,
		  char *err, size_t err_len)
{
	*y = (struct yamlconf){
		.name = name, .text = text, .len = len, .err = err, .err_len = err_len,
	};
	if (err && err_len)
		err[0] = 0;
	if (!yaml_parser_initialize(&y->parser))
		return -ENOMEM;
	yaml_parser_set_input_string(&y->parser, (const unsigned char *)text, len);
	return 0;
}

int yamlconf_load(struct yamlconf *y, yaml_node_t **root)
{
	yaml_document_t extra;
	yaml_node_t *next;
	int r;

	*root = NULL;
	r = depth_check(y);
	if (r < 0)
		return r;
	if (!yaml_parser_load(&y->parser, &y->doc))
		return syntax_error(y);
	*root = yaml_document_get_root_node(&y->doc);
	if (!*root)
		return 0;

	/* two documents would silently drop the second */
	if (!yaml_parser_load(&y->parser, &extra))
		return syntax_error(y);
	next = yaml_document_get_root_node(&extra);
	if (next) {
		r = yamlconf_error(y, next, NULL,
				   "a second YAML document: the configuration is one document");
		yaml_document_delete(&extra);
		return r;
	}
	yaml_document_delete(&extra);
	return 0;
}

void yamlconf_close(struct yamlconf *y)
{
	yaml_document_delete(&y->doc);
	yaml_parser_delete(&y->parser);
}

/* ---- nodes ------------------------------------------------------------- */

yaml_node_t *yamlconf_node(struct yamlconf *y, int i)
{
	return yaml_document_get_node(&y->doc, i);
}

const char *yamlconf_kind(const yaml_node_t *n)
{
	switch (n->type) {
	case YAML_MAPPING_NODE: return "a mapping";
	case YAML_SEQUENCE_NODE: return "a list";
	default: return "a single value";
	}
}

bool yamlconf_is_null(const yaml_node_t *n)
{
	const char *s = NULL;

	if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	s = (const char *)n->data.scalar.value;
	return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
	       !strcmp(s, "NULL");
}

size_t yamlconf_list_len(const yaml_node_t *list)
{
	return (size_t)(list->data.sequence.items.top - list->data.sequence.items.start);
}

yaml_node_t *yamlconf_list_item(struct yamlconf *y, const yaml_node_t *list, size_t i)
{
	return yamlconf_node(y, list->data.sequence.items.start[i]);
}

int yamlconf_read_scalar(struct yamlconf *y, yaml_node_t *n, const char *field, const char *what,
			 bool null_ok, const char **out)
{
	const char *s = NULL;

	if (n->type != YAML_SCALAR_NODE)
		return yamlconf_error(y, n, field, "expected %s, found %s", what, yamlconf_kind(n));
	s = (const char *)n->data.scalar.value;
	if (strlen(s) != n->data.scalar.length)
		return yamlconf_error(y, n, field, "contains a NUL byte");
	if (yamlconf_is_null(n)) {
		if (!null_ok)
			return yamlconf_error(y, n, field, "has no value, expected %s", what);
		s = "";
	}
	*out = s;
	return 0;
}

int yamlconf_read_int(struct yamlconf *y, yaml_node_t *n, const char *field, long long min,
		      long long max, long long *out)
{
	const char *s = NULL;
	char *end;
	long long v;
	int r;

	r = yamlconf_read_scalar(y, n, field, "an integer", false, &s);
	if (r < 0)
		return r;
	if (!isdigit((unsigned char)s[s[0] == '-']))
		return yamlconf_error(y, n, field, "%s is not an integer", SHOW(s));
	errno = 0;
	v = strtoll(s, &end, 10);
	if (*end)
		return yamlconf_error(y, n, field, "%s is not an integer", SHOW(s));
	if (errno || v < min || v > max)
		return yamlconf_error(y, n, field, "%s is out of range (%lld to %lld)", SHOW(s),
				      min, max);
	*out = v;
	return 0;
}

int yamlconf_read_u32(struct yamlconf *y, yaml_node_t *n, const char *field, uint32_t min,
		      uint32_t max, uint32_t *out)
{
	long long v;
	int r = yamlconf_read_int(y, n, field, min, max, &v);

	if (r >= 0)
		*out = (uint32_t)v;
	return r;
}

int yamlconf_read_size(struct yamlconf *y, yaml_node_t *n, const char *field, uint64_t min,
		       uint64_t max, bool zero_ok, uint64_t *out)
{
	const char *s = NULL;
	uint64_t v = 0;
	int r;

	r = yamlconf_read_scalar(y, n, field, "a size", false, &s);
	if (r < 0)
		return r;
	if (s[0] == '-')
		return yamlconf_error(y, n, field, "%s: a size cannot be negative", SHOW(s));
	r = parse_size(s, &v);
	if (r == -EINVAL)
		return yamlconf_error(y, n, field,
				      "%s is not a size (bytes, or with a unit: 64K, 16MiB, 1G)",
				      SHOW(s));
	if ((r < 0 || v < min || v > max) && !(r == 0 && v == 0 && zero_ok))
		return yamlconf_error(y, n, field, "%s is out of range (%s%s to %s)", SHOW(s),
				      zero_ok ? "0, or " : "", SIZE_TEXT(min), SIZE_TEXT(max));
	*out = v;
	return 0;
}

int yamlconf_read_duration(struct yamlconf *y, yaml_node_t *n, const char *field,
			   uint64_t unit_ms, uint64_t min_ms, uint64_t max_ms, uint64_t *out)
{
	const char *s = NULL;
	uint64_t v = 0;
	int r;

	r = yamlconf_read_scalar(y, n, field, "a duration", false, &s);
	if (r < 0)
		return r;
	if (s[0] == '-')
		return yamlconf_error(y, n, field, "%s: a duration cannot be negative", SHOW(s));
	r = parse_duration_ms(s, &v);
	if (r == -EINVAL)
		return yamlconf_error(y, n, field,
				      "%s is not a duration (500ms, 10s, 5m, 1h, 30d; a bare number is seconds)",
				      SHOW(s));
	if (r < 0 || v < min_ms || v > max_ms)
		return yamlconf_error(y, n, field, "%s is out of range (%s to %s)", SHOW(s),
				      DURATION_TEXT(min_ms), DURATION_TEXT(max_ms));
	if (v % unit_ms)
		return yamlconf_error(y, n, field, "%s is not a whole number of seconds", SHOW(s));
	*out = v / unit_ms;
	return 0;
}

int yamlconf_read_bool(struct yamlconf *y, yaml_node_t *n, const char *field, int *out)
{
	static const char *const words[] = { "false", "False", "FALSE", "true", "True", "TRUE" };
	const char *s = NULL;
	int r;

	r = yamlconf_read_scalar(y, n, field, "true or false", false, &s);
	if (r < 0)
		return r;
	for (size_t i = 0; i < ARRAY_SIZE(words); i++)
		if (!strcmp(s, words[i])) {
			*out = i >= 3;
			return 0;
		}
	return yamlconf_error(y, n, field, "%s is not true or false", SHOW(s));
}

int yamlconf_read_path(struct yamlconf *y, yaml_node_t *n, const char *field, bool dir,
		       size_t max, char *dst)
{
	char tmp[4096];
	const char *s = NULL;
	size_t o = 0;
	int r;

	r = yamlconf_read_scalar(y, n, field, "an absolute path", false, &s);
	if (r < 0)
		return r;
	if (s[0] != '/')
		return yamlconf_error(y, n, field, "%s is not an absolute path", SHOW(s));
	for (const char *q = s; *q; q++) {
		if ((unsigned char)*q < 0x20 || *q == 0x7f)
			return yamlconf_error(y, n, field, "%s contains a control character",
					      SHOW(s));
		if (*q == '/' && o && tmp[o - 1] == '/')
			continue;
		if (o + 1 >= sizeof(tmp))
			break;
		tmp[o++] = *q;
	}
	if (o > 1 && tmp[o - 1] == '/') {
		if (!dir)
			return yamlconf_error(y, n, field, "%s ends in '/': it must name a file",
					      SHOW(s));
		o--;
	}
	tmp[o] = 0;
	if (o > max)
		return yamlconf_error(y, n, field, "%s is too long (%zu bytes, at most %zu)",
				      SHOW(s), strlen(s), max);
	memcpy(dst, tmp, o + 1);
	return 0;
}

/* ---- mappings ---------------------------------------------------------- */

int yamlconf_walk_map(struct yamlconf *y, yaml_node_t *map, const char *prefix,
		      const struct yamlconf_key *keys, size_t nkeys, void *obj, uint32_t *seen)
{
	size_t first_line[32] = { 0 };

	*seen = 0;
	for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
	     pr++) {
		yaml_node_t *k = yamlconf_node(y, pr->key), *v = yamlconf_node(y, pr->value);
		char field[YAMLCONF_FIELD_MAX];
		const char *key;
		size_t i;
		int r;

		if (k->type != YAML_SCALAR_NODE)
			return yamlconf_error(y, k, *prefix ? prefix : NULL,
					      "a key must be a single word, found %s",
					      yamlconf_kind(k));
		key = (const char *)k->data.scalar.value;
		yamlconf_join(field, sizeof(field), prefix, key);
		for (i = 0; i < nkeys; i++)
			if (!strcmp(keys[i].key, key) && strlen(key) == k->data.scalar.length)
				break;
		if (i == nkeys)
			return yamlconf_error(y, k, field, "unknown key");
		if (*seen & 1u << i)
			return yamlconf_error(y, k, field, "given twice (first on line %zu)",
					      first_line[i]);
		*seen |= 1u << i;
		first_line[i] = k->start_mark.line + 1;
		r = keys[i].fn(y, v, field, obj);
		if (r < 0)
			return r;
	}
	return 0;
}

int yamlconf_read_block(struct yamlconf *y, yaml_node_t *v, const char *field, const char *what,
			const struct yamlconf_key *keys, size_t nkeys, void *obj)
{
	uint32_t seen;

	if (yamlconf_is_null(v))
		return 0;
	if (v->type != YAML_MAPPING_NODE)
		return yamlconf_error(y, v, field, "expected a mapping of %s, found %s", what,
				      yamlconf_kind(v));
	return yamlconf_walk_map(y, v, field, keys, nkeys, obj, &seen);
}

yaml_node_t *yamlconf_find_key(struct yamlconf *y, yaml_node_t *map, const char *key)
{
	if (map->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
	     pr++) {
		yaml_node_t *k = yamlconf_node(y, pr->key);

		if (k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, key))
			return yamlconf_node(y, pr->value);
	}
	return NULL;
}
