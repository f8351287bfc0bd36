/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
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

int meta_tasks_validate(const uint8_t *tasks, size_t len, const char **why)
{
	struct vmt_meta_entry e;
	size_t pos = 0;
	bool cmdlines = false, tgids = false;
	int r;

	if (len > VMT_TASKS_MAX) {
		*why = "task tables over 1 MiB";
		return -EBADMSG;
	}
	while ((r = meta_next(tasks, len, &pos, &e)) > 0) {
		bool *seen;

		if (e.name_len == 14 && !memcmp(e.name, "saved_cmdlines", 14))
			seen = &cmdlines;
		else if (e.name_len == 11 && !memcmp(e.name, "saved_tgids", 11))
			seen = &tgids;
		else {
			*why = "task tables hold a file other than saved_cmdlines and saved_tgids";
			return -EBADMSG;
		}
		if (*seen) {
			*why = "task tables name a file twice";
			return -EBADMSG;
		}
		*seen = true;
	}
	if (r < 0)
		*why = "task tables: an entry runs past the end";
	return r < 0 ? -EBADMSG : 0;
}

struct cmdline {
	uint32_t pid;
	uint32_t order;		/* position over all texts: the later wins */
	const char *comm;
	uint32_t comm_len;
};

static int cmdline_cmp(const void *a, const void *b)
{
	const struct cmdline *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

int meta_cmdlines_merge(struct vmt_buf *out, const char *const *texts, const size_t *lens,
			size_t n)
{
	struct cmdline *v = NULL;
	size_t nv = 0, cap = 0;
	int r = 0;

	out->len = 0;
	for (size_t t = 0; t < n; t++) {
		const char *p = texts[t], *end = texts[t] + lens[t];

		while (p < end) {
			const char *nl = memchr(p, '\n', (size_t)(end - p)), *le = nl ? nl : end;
			const char *q = p, *comm;
			uint64_t pid = 0;
			bool digits = false;

			while (q < le && *q >= '0' && *q <= '9' && pid <= UINT32_MAX) {
				pid = pid * 10 + (uint64_t)(*q++ - '0');
				digits = true;
			}
			comm = q + 1;
			if (digits && pid <= UINT32_MAX && q < le && *q == ' ' && comm < le &&
			    le - comm <= 64) {
				if (nv == cap) {
					struct cmdline *nvp;

					cap = cap ? 2 * cap : 256;
					nvp = realloc(v, cap * sizeof(*v));
					if (!nvp) {
						r = -ENOMEM;
						goto out;
					}
					v = nvp;
				}
				v[nv] = (struct cmdline){ (uint32_t)pid, (uint32_t)nv, comm,
							  (uint32_t)(le - comm) };
				nv++;
			}
			p = nl ? nl + 1 : end;
		}
	}
	if (nv)
		qsort(v, nv, sizeof(*v), cmdline_cmp);
	for (size_t i = 0; i < nv; i++) {
		char num[16];
		int l;

		if (i + 1 < nv && v[i + 1].pid == v[i].pid)
			continue;	/* a later name for this pid follows */
		l = snprintf(num, sizeof(num), "%u ", v[i].pid);
		if (buf_append(out, num, (size_t)l) < 0 || buf_append(out, v[i].comm, v[i].comm_len) < 0 ||
		    buf_append(out, "\n", 1) < 0) {
			r = -ENOMEM;
			goto out;
		}
	}
out:
	free(v);
	return r;
}
