/* SPDX-License-Identifier: MIT */
/*
 * retention-int: what retention.c (the store, scanned) and retention-plan.c
 * (what goes, deleted) share. Not for other modules.
 */
#ifndef VMT_RETENTION_INT_H
#define VMT_RETENTION_INT_H

#include "retention.h"

/* qsort/bsearch order of vmt_store.aux: by guest, then version. */
int retention_cmp_aux(const void *a, const void *b);

#endif
