/* SPDX-License-Identifier: MIT */
/*
 * mem: the daemon's memory against memory_max. Three things count: every
 * guest's rings, the dump reserve (a page pool set aside at start, lent to
 * rings whose pages a dump holds), and the metadata guests hold in memory
 * (bundles being received, and those whose aux file is not written yet).
 * Guests take and give back what they use; what does not fit is refused,
 * and refused rings are counted.
 */
#ifndef VMT_MEM_H
#define VMT_MEM_H

#include <stdbool.h>
#include <stdint.h>

#include "pagepool.h"

struct vmt_mem {
	uint64_t max;		/* memory_max, 0 = no cap; follows reloads */
	uint64_t rings;		/* bytes of every guest's rings */
	uint64_t meta;		/* metadata held, as each holder last said */
	struct vmt_pagepool reserve;	/* dump_reserve, fixed at start */
	uint64_t rings_refused;	/* rings that did not fit */
};

/* The reserve is taken now, and counts against max from then on. */
int mem_init(struct vmt_mem *m, uint64_t max, uint64_t reserve_bytes);
void mem_free(struct vmt_mem *m);

/* Rings of need bytes: 0 and counted, or -ENOSPC (and rings_refused) when
 * rings + reserve + need would pass max. Metadata held does not stop rings:
 * a guest that cannot record is worse off than one whose bundle waits. */
int mem_take_rings(struct vmt_mem *m, uint64_t need);
void mem_give_rings(struct vmt_mem *m, uint64_t bytes);
/* May need more bytes of metadata be held now (everything counts)? */
bool mem_meta_fits(const struct vmt_mem *m, uint64_t need);
/* A holder now holds now bytes of metadata; *charged is what it held: the
 * total follows the difference. */
void mem_charge_meta(struct vmt_mem *m, uint64_t *charged, uint64_t now);
/* Everything counted: rings, metadata (the reserve is separate). */
static inline uint64_t mem_used(const struct vmt_mem *m)
{
	return m->rings + m->meta;
}

#endif
