/* SPDX-License-Identifier: MIT */
#include <errno.h>

#include "mem.h"

int mem_init(struct vmt_mem *m, uint64_t max, uint64_t reserve_bytes)
{
	*m = (struct vmt_mem){ .max = max };
	return pagepool_init(&m->reserve, reserve_bytes);
}

void mem_free(struct vmt_mem *m)
{
	pagepool_free(&m->reserve);
}

int mem_take_rings(struct vmt_mem *m, uint64_t need)
{
	if (m->max && m->rings + m->reserve.bytes + need > m->max) {
		m->rings_refused++;
		return -ENOSPC;
	}
	m->rings += need;
	return 0;
}

void mem_give_rings(struct vmt_mem *m, uint64_t bytes)
{
	m->rings -= bytes <= m->rings ? bytes : m->rings;
}

bool mem_meta_fits(const struct vmt_mem *m, uint64_t need)
{
	return !m->max || m->rings + m->reserve.bytes + m->meta + need <= m->max;
}

void mem_charge_meta(struct vmt_mem *m, uint64_t *charged, uint64_t now)
{
	m->meta = m->meta - *charged + now;
	*charged = now;
}
