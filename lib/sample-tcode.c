/* SPDX-License-Identifier: MIT */
/*
 * The schema a sample's TCODE frames decode with (sample-int.h): made from
 * the guest's aux, once per aux in a process (a merge reads many samples of
 * one aux), and kept to the end: a few, each the size of its formats.
 */
#include <errno.h>
#include <libgen.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "aux.h"
#include "sample-int.h"
#include "tcode.h"

#define TC_CACHE 8
#define TC_META_MAX (1ull << 30)

static struct {
	uint64_t aux_id;
	uint32_t page_size;
	struct vmt_tcode *t;
} cache[TC_CACHE];
static uint32_t cache_next;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

static struct vmt_tcode *cache_find(uint64_t aux_id, uint32_t page_size)
{
	for (uint32_t i = 0; i < TC_CACHE; i++)
		if (cache[i].t && cache[i].aux_id == aux_id && cache[i].page_size == page_size)
			return cache[i].t;
	return NULL;
}

/* The schema of the aux at path if it is the sample's; NULL otherwise. */
static struct vmt_tcode *tc_from(const char *path, const struct vmt_sample *s)
{
	struct vmt_tcode *t = NULL;
	struct vmt_aux a;
	char why[256];

	if (aux_read(path, TC_META_MAX, &a, why, sizeof(why)) < 0)
		return NULL;
	if (a.id == s->aux_id && tcode_new(&t, a.meta, a.meta_len, s->page_size) < 0)
		t = NULL;
	aux_free(&a);
	return t;
}

const struct vmt_tcode *sample_tc_get(struct sample_tc *tc, const struct vmt_sample *s)
{
	struct vmt_tcode *t;
	char path[4200], name[64];

	if (tc->t || tc->tried)
		return tc->t;
	tc->tried = true;
	pthread_mutex_lock(&cache_lock);
	t = cache_find(s->aux_id, s->page_size);
	if (!t && tc->aux_path)
		t = tc_from(tc->aux_path, s);
	if (!t && tc->path && aux_file_name(name, sizeof(name), s->aux_version) >= 0) {
		char *dup = strdup(tc->path);

		if (dup) {
			snprintf(path, sizeof(path), "%s/%s", dirname(dup), name);
			free(dup);
			t = tc_from(path, s);
		}
	}
	if (t && !cache_find(s->aux_id, s->page_size)) {
		if (cache_next < TC_CACHE) {
			cache[cache_next].aux_id = s->aux_id;
			cache[cache_next].page_size = s->page_size;
			cache[cache_next++].t = t;
		} else {
			tc->own = t;	/* full (another reader may use each): this read's */
		}
	}
	pthread_mutex_unlock(&cache_lock);
	tc->t = t;
	return t;
}
