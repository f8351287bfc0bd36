/* SPDX-License-Identifier: MIT */
/*
 * yamlconf: the schema-free half of reading a configuration, internal to
 * the config module (only lib/config*.c include it). It owns the libyaml
 * parser and document, messages of the form "NAME:LINE:COL: FIELD: ...",
 * readers that turn one node into a checked value, and the walk of a
 * mapping through a table of known keys. What the keys mean is config's.
 */
#ifndef VMT_YAMLCONF_H
#define VMT_YAMLCONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <yaml.h>

#define KiB ((uint64_t)1 << 10)
#define MiB ((uint64_t)1 << 20)
#define GiB ((uint64_t)1 << 30)
#define TiB ((uint64_t)1 << 40)
#define SEC_MS ((uint64_t)1000)
#define DAY_MS (86400 * SEC_MS)

/* Room for a field's name, "guests[1].record.ring_size". */
#define YAMLCONF_FIELD_MAX 192

struct yamlconf {
	yaml_parser_t parser;
	yaml_document_t doc;
	const char *name;	/* file name in messages */
	const char *text;	/* reader errors give a byte offset only */
	size_t len;
	char *err;
	size_t err_len;
};

/*
 * One key of a mapping: fn reads the value v into obj. field is the key's
 * full name for messages.
 */
struct yamlconf_key {
	const char *key;
	int (*fn)(struct yamlconf *y, yaml_node_t *v, const char *field, void *obj);
};

/*
 * Read len bytes of text (no NUL needed); name stands for the file in
 * messages, written to err (may be NULL). Clears err. -ENOMEM if libyaml
 * cannot start; else yamlconf_close() must follow.
 */
int yamlconf_open(struct yamlconf *y, const char *name, const char *text, size_t len,
		  char *err, size_t err_len);
/*
 * Parse the one document: *root is NULL for an empty file or comments
 * only. Syntax errors, nesting too deep and a second document fail.
 */
int yamlconf_load(struct yamlconf *y, yaml_node_t **root);
void yamlconf_close(struct yamlconf *y);

/* Writes "NAME:LINE:COL: FIELD: message" for node at; returns -EINVAL. */
int yamlconf_error(struct yamlconf *y, const yaml_node_t *at, const char *field, const char *fmt,
		   ...) __attribute__((format(printf, 4, 5)));
/* A value from the file, quoted and cut short, safe on one line. */
const char *yamlconf_show(const char *s, char *buf, size_t n);
#define SHOW(s) yamlconf_show((s), (char[96]){ 0 }, 96)
/* "guests[1].record" + "ring_size"; keys from the file are escaped. */
void yamlconf_join(char *out, size_t n, const char *prefix, const char *key);

yaml_node_t *yamlconf_node(struct yamlconf *y, int i);
/* "a mapping", "a list" or "a single value", for messages. */
const char *yamlconf_kind(const yaml_node_t *n);
bool yamlconf_is_null(const yaml_node_t *n);
size_t yamlconf_list_len(const yaml_node_t *list);
yaml_node_t *yamlconf_list_item(struct yamlconf *y, const yaml_node_t *list, size_t i);

/*
 * Readers of one value: each checks the node, writes *out only on
 * success, and names field and what was expected in its message.
 */
/* The scalar's text; null gives "" where null_ok, else an error. */
int yamlconf_read_scalar(struct yamlconf *y, yaml_node_t *n, const char *field, const char *what,
			 bool null_ok, const char **out);
int yamlconf_read_int(struct yamlconf *y, yaml_node_t *n, const char *field, long long min,
		      long long max, long long *out);
/* The same into a uint32_t (0 <= min <= max < 2^32). */
int yamlconf_read_u32(struct yamlconf *y, yaml_node_t *n, const char *field, uint32_t min,
		      uint32_t max, uint32_t *out);
/* Bytes; zero_ok allows 0 below min ("no limit"). */
int yamlconf_read_size(struct yamlconf *y, yaml_node_t *n, const char *field, uint64_t min,
		       uint64_t max, bool zero_ok, uint64_t *out);
/*
 * A duration between min_ms and max_ms, stored in units of unit_ms (1 or
 * 1000): a field kept in seconds refuses "1500ms" rather than round it.
 */
int yamlconf_read_duration(struct yamlconf *y, yaml_node_t *n, const char *field,
			   uint64_t unit_ms, uint64_t min_ms, uint64_t max_ms, uint64_t *out);
int yamlconf_read_bool(struct yamlconf *y, yaml_node_t *n, const char *field, int *out);
/*
 * An absolute path, with "//" collapsed and, for a directory, the
 * trailing '/' dropped, so that two spellings of one folder compare equal.
 * At most max bytes; dst holds max + 1.
 */
int yamlconf_read_path(struct yamlconf *y, yaml_node_t *n, const char *field, bool dir,
		       size_t max, char *dst);

/*
 * Walk a mapping: every key must be in keys (at most 32) and given once.
 * The bit for each key found is set in *seen, so callers can tell what is
 * missing.
 */
int yamlconf_walk_map(struct yamlconf *y, yaml_node_t *map, const char *prefix,
		      const struct yamlconf_key *keys, size_t nkeys, void *obj, uint32_t *seen);
/* A block of settings: null keeps them all, else a mapping of known keys. */
int yamlconf_read_block(struct yamlconf *y, yaml_node_t *v, const char *field, const char *what,
			const struct yamlconf_key *keys, size_t nkeys, void *obj);
/* The value of key in a mapping, NULL if absent. */
yaml_node_t *yamlconf_find_key(struct yamlconf *y, yaml_node_t *map, const char *key);

#endif
