/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sindex.h"

static void entry_free(struct vmt_sindex_entry *e)
{
	free(e->path);
	free(e->text);
}

void sindex_free(struct vmt_sindex *ix)
{
	for (size_t i = 0; i < ix->n; i++)
		entry_free(&ix->v[i]);
	free(ix->v);
	memset(ix, 0, sizeof(*ix));
}

static int entry_copy(struct vmt_sindex_entry *to, const struct vmt_sindex_entry *e)
{
	*to = *e;
	to->path = strdup(e->path);
	to->text = e->text ? strdup(e->text) : NULL;
	if (!to->path || (e->text && !to->text)) {
		entry_free(to);
		return -ENOMEM;
	}
	return 0;
}

static int reserve(struct vmt_sindex *ix, size_t n)
{
	struct vmt_sindex_entry *t;
	size_t c;

	if (n <= ix->cap)
		return 0;
	c = ix->cap ? ix->cap * 2 : 16;
	if (c < n)
		c = n;
	t = reallocarray(ix->v, c, sizeof(*t));
	if (!t)
		return -ENOMEM;
	ix->v = t;
	ix->cap = c;
	return 0;
}

int sindex_from_store(struct vmt_sindex *out, const struct vmt_store *st)
{
	memset(out, 0, sizeof(*out));
	if (reserve(out, st->nsamples) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < st->nsamples; i++) {
		const struct vmt_store_sample *s = &st->samples[i];
		struct vmt_sindex_entry e = {
			.path = s->path,
			.created_ns = s->created_ns,
			.bytes = s->bytes,
			.info_error = s->info_error,
			.aux_version = s->aux_version,
			.uploaded = !s->unuploaded,
		};

		snprintf(e.guest, sizeof(e.guest), "%s", st->guests[s->guest].name);
		if (s->info_error)
			e.text = (char *)s->why;
		else if (s->ntriggers)
			e.text = (char *)s->triggers[0].reason;
		if (entry_copy(&out->v[out->n], &e) < 0) {
			sindex_free(out);
			return -ENOMEM;
		}
		out->n++;
	}
	return 0;
}

static const char *base(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

/* The order of retention_scan(): the time in the name, ties by name. */
static int cmp(const struct vmt_sindex_entry *a, const struct vmt_sindex_entry *b)
{
	if (a->created_ns != b->created_ns)
		return a->created_ns < b->created_ns ? -1 : 1;
	return strcmp(base(a->path), base(b->path));
}

int sindex_add(struct vmt_sindex *ix, const struct vmt_sindex_entry *e)
{
	struct vmt_sindex_entry copy;
	size_t i = ix->n;

	/* a new sample is the newest: look from the end */
	while (i && cmp(&ix->v[i - 1], e) > 0)
		i--;
	if (entry_copy(&copy, e) < 0)
		return -ENOMEM;
	if (i && !strcmp(ix->v[i - 1].path, e->path)) {
		entry_free(&ix->v[i - 1]);
		ix->v[i - 1] = copy;
		return 0;
	}
	if (reserve(ix, ix->n + 1) < 0) {
		entry_free(&copy);
		return -ENOMEM;
	}
	memmove(&ix->v[i + 1], &ix->v[i], (ix->n - i) * sizeof(*ix->v));
	ix->v[i] = copy;
	ix->n++;
	return 0;
}

void sindex_take(struct vmt_sindex *ix, struct vmt_sindex *from)
{
	sindex_free(ix);
	*ix = *from;
	ix->built = true;
	ix->error = 0;
	memset(from, 0, sizeof(*from));
}
