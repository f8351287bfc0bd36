/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "pagepool.h"
#include "util.h"

int pagepool_init(struct vmt_pagepool *p, size_t bytes)
{
	size_t units = bytes / VMT_POOL_UNIT;

	memset(p, 0, sizeof(*p));
	if (!units)
		return 0;
	/* not populated: the reserve costs nothing until a dump needs it */
	p->mem = mmap(NULL, units * VMT_POOL_UNIT, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p->mem == MAP_FAILED) {
		p->mem = NULL;
		return -ENOMEM;
	}
	p->holds = calloc(units, sizeof(*p->holds));
	p->in_slot = calloc(units, 1);
	if (!p->holds || !p->in_slot) {
		pagepool_free(p);
		return -ENOMEM;
	}
	p->bytes = units * VMT_POOL_UNIT;
	return 0;
}

void pagepool_free(struct vmt_pagepool *p)
{
	if (p->mem)
		munmap(p->mem, p->bytes ? p->bytes : VMT_POOL_UNIT);
	free(p->holds);
	free(p->in_slot);
	memset(p, 0, sizeof(*p));
}

static uint32_t unit_of(const struct vmt_pagepool *p, const uint8_t *page)
{
	return (uint32_t)((size_t)(page - p->mem) / VMT_POOL_UNIT);
}

/* The free list of pages of size bytes; -1 if none, or none left to start. */
static int class_of(const struct vmt_pagepool *p, uint32_t size)
{
	for (int i = 0; i < VMT_POOL_CLASSES; i++)
		if (p->cls[i].size == size)
			return i;
	return -1;
}

static int class_add(struct vmt_pagepool *p, uint32_t size)
{
	int k = class_of(p, size);

	if (k < 0 && (k = class_of(p, 0)) >= 0)
		p->cls[k].size = size;
	return k;
}

uint32_t pagepool_available(const struct vmt_pagepool *p, uint32_t size)
{
	int k;
	uint64_t n;

	if (!p || !p->mem || !size || size % VMT_POOL_UNIT)
		return 0;
	k = class_of(p, size);
	if (k < 0 && class_of(p, 0) < 0)
		return 0;	/* a new page size needs a free class */
	n = k < 0 ? 0 : p->cls[k].n;
	n += (p->bytes - p->top) / size;
	return (uint32_t)VMT_MIN(n, UINT32_MAX);
}

uint8_t *pagepool_get(struct vmt_pagepool *p, uint32_t size)
{
	uint8_t *page;
	int k;

	if (!pagepool_available(p, size))
		return NULL;
	k = class_add(p, size);
	if (p->cls[k].head) {
		page = p->mem + (size_t)(p->cls[k].head - 1) * VMT_POOL_UNIT;
		memcpy(&p->cls[k].head, page, sizeof(uint32_t));
		p->cls[k].n--;
	} else {
		page = p->mem + p->top;
		p->top += size;
	}
	p->in_slot[unit_of(p, page)] = 1;
	p->in_use += size;
	p->peak = VMT_MAX(p->peak, p->in_use);
	p->borrowed++;
	return page;
}

uint32_t pagepool_holds(const struct vmt_pagepool *p, const uint8_t *page)
{
	return p->holds[unit_of(p, page)];
}

void pagepool_hold(struct vmt_pagepool *p, const uint8_t *page)
{
	p->holds[unit_of(p, page)]++;
}

static void pool_put(struct vmt_pagepool *p, uint8_t *page, uint32_t size)
{
	int k = class_add(p, size);

	memcpy(page, &p->cls[k].head, sizeof(uint32_t));
	p->cls[k].head = unit_of(p, page) + 1;
	p->cls[k].n++;
	p->in_use -= size;
	if (p->in_use)
		return;
	/* nothing borrowed: the memory goes back to the kernel */
	madvise(p->mem, p->top, MADV_DONTNEED);
	p->top = 0;
	for (int i = 0; i < VMT_POOL_CLASSES; i++)
		p->cls[i].size = p->cls[i].head = p->cls[i].n = 0;
}

void pagepool_release(struct vmt_pagepool *p, uint8_t *page, uint32_t size)
{
	uint32_t u = unit_of(p, page);

	if (p->holds[u] && !--p->holds[u] && !p->in_slot[u])
		pool_put(p, page, size);
}

void pagepool_unslot(struct vmt_pagepool *p, uint8_t *page, uint32_t size)
{
	uint32_t u = unit_of(p, page);

	if (!p->in_slot[u])
		return;
	p->in_slot[u] = 0;
	if (!p->holds[u])
		pool_put(p, page, size);
}
