/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "meta.h"
#include "util.h"

int meta_add(struct vmt_buf *b, const char *name, const void *data, uint32_t len)
{
	size_t nl = strlen(name);
	int r;

	if (!nl || nl > VMT_META_NAME_MAX)
		return -EINVAL;
	r = buf_reserve(b, 8 + nl + len);
	if (r < 0)
		return r;
	buf_put_le32(b, (uint32_t)nl);
	buf_put_le32(b, len);
	buf_append(b, name, nl);
	return buf_append(b, data, len);
}

int meta_next(const uint8_t *bundle, size_t len, size_t *pos, struct vmt_meta_entry *e)
{
	size_t p = *pos;
	uint32_t nl, dl;

	if (p == len)
		return 0;
	if (len - p < 8)
		return -EBADMSG;
	nl = get_le32(bundle + p);
	dl = get_le32(bundle + p + 4);
	if (!nl || nl > VMT_META_NAME_MAX || nl > len - p - 8 || dl > len - p - 8 - nl)
		return -EBADMSG;
	e->name = (const char *)bundle + p + 8;
	e->name_len = nl;
	e->data = bundle + p + 8 + nl;
	e->data_len = dl;
	*pos = p + 8 + nl + dl;
	return 1;
}

static int name_ok(const char *n, uint32_t len)
{
	uint32_t comp = 0;

	if (n[0] == '/')
		return 0;
	for (uint32_t i = 0; i < len; i++) {
		char c = n[i];
		if (c == '/') {
			if (!comp)
				return 0;
			comp = 0;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-' || c == ':' || c == '+'))
			return 0;
		/* ".." as a whole component */
		if (c == '.' && comp == 1 && n[i - 1] == '.' && (i + 1 == len || n[i + 1] == '/'))
			return 0;
		comp++;
	}
	return comp > 0;
}

static int cmp_entry(const void *a, const void *b)
{
	const struct vmt_meta_entry *x = a, *y = b;
	uint32_t n = VMT_MIN(x->name_len, y->name_len);
	int c = memcmp(x->name, y->name, n);

	if (c)
		return c;
	return (x->name_len > y->name_len) - (x->name_len < y->name_len);
}

int meta_validate(const uint8_t *bundle, size_t len, const char **why)
{
	struct vmt_meta_entry e, *all = NULL;
	size_t pos = 0, n = 0, cap = 0;
	int have_header = 0, r;

	*why = NULL;
	while ((r = meta_next(bundle, len, &pos, &e)) > 0) {
		if (!name_ok(e.name, e.name_len)) {
			*why = "bad file name";
			goto bad;
		}
		if (n == VMT_META_MAX_FILES) {
			*why = "too many files";
			goto bad;
		}
		if (n == cap) {
			struct vmt_meta_entry *t;
			cap = cap ? cap * 2 : 256;
			t = realloc(all, cap * sizeof(*all));
			if (!t) {
				free(all);
				return -ENOMEM;
			}
			all = t;
		}
		all[n++] = e;
		if (e.name_len == 18 && !memcmp(e.name, "events/header_page", 18))
			have_header = 1;
	}
	if (r < 0) {
		*why = "entry runs past the end";
		goto bad;
	}
	if (!have_header) {
		*why = "no events/header_page";
		goto bad;
	}
	qsort(all, n, sizeof(*all), cmp_entry);
	for (size_t i = 1; i < n; i++)
		if (!cmp_entry(&all[i - 1], &all[i])) {
			*why = "duplicate file name";
			goto bad;
		}
	free(all);
	return 0;
bad:
	free(all);
	return -EBADMSG;
}

int meta_find(const uint8_t *bundle, size_t len, const char *name, struct vmt_meta_entry *e)
{
	size_t pos = 0, nl = strlen(name);
	int r;

	while ((r = meta_next(bundle, len, &pos, e)) > 0)
		if (e->name_len == nl && !memcmp(e->name, name, nl))
			return 0;
	return r < 0 ? r : -ENOENT;
}
