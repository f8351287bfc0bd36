/* SPDX-License-Identifier: MIT */
/*
 * sindex: the samples on disk as the writer last saw them, so that SAMPLES
 * is answered from memory, never from the file system in the event loop.
 * The writer thread makes a new index from each retention pass
 * (sindex_from_store) and hands it back in its job; the loop's thread owns
 * the live one: it takes a pass's index over (sindex_take) and adds a
 * sample written with no pass after it (sindex_add). Files that others put
 * into or remove from the state folder are seen at the next pass.
 */
#ifndef VMT_SINDEX_H
#define VMT_SINDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "retention.h"
#include "sample.h"

struct vmt_sindex_entry {
	char *path;		/* STATE_DIR/<guest>/<name> */
	char guest[VMT_NAME_MAX];
	uint64_t created_ns;	/* from the name */
	uint64_t bytes;
	int info_error;		/* 0: aux_version and reason hold; else why does */
	uint32_t aux_version;
	char *text;		/* the first trigger's reason (NULL: none), or why */
	bool uploaded;		/* the fleet's marker was there at the last pass */
};

struct vmt_sindex {
	struct vmt_sindex_entry *v;	/* oldest first: created_ns, then file name */
	size_t n, cap;
	bool built;		/* a retention pass has filled it */
	int error;		/* the last pass could not scan: -errno; 0 */
};

/* *out (empty before) gets st's samples. -ENOMEM: *out is freed. */
int sindex_from_store(struct vmt_sindex *out, const struct vmt_store *st);
/* A copy of e in its place (one of the same path is replaced). */
int sindex_add(struct vmt_sindex *ix, const struct vmt_sindex_entry *e);
/* ix becomes from (built), from is left empty. */
void sindex_take(struct vmt_sindex *ix, struct vmt_sindex *from);
void sindex_free(struct vmt_sindex *ix);

#endif
