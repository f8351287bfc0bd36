/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include "pagepool.h"
#include "util.h"

_Static_assert(sizeof(struct vmt_reserve_hdr) == 56, "the reserve header's layout is version 1's");

static uint64_t new_id(void)
{
	uint64_t id = 0;

	/* only told apart from the reserves of earlier lifetimes: time will do */
	if (getrandom(&id, sizeof(id), GRND_NONBLOCK) != sizeof(id))
		id = now_realtime_ns() ^ ((uint64_t)getpid() << 32);
	return id ? id : 1;
}

/* A sealed memfd for the header page and bytes of pages, mapped shared and
 * not populated: the reserve costs one page until a dump needs it. */
static int pool_memfd(struct vmt_pagepool *p, size_t bytes)
{
	size_t size = VMT_RESERVE_HDR_BYTES + bytes;
	struct vmt_reserve_hdr h;
	uint8_t *m;
	int fd, err = sealed_memfd("vmtraced-reserve", size, MAP_NORESERVE, &fd, &m);

	if (err < 0)
		return err;
	h = (struct vmt_reserve_hdr){ .magic = VMT_RESERVE_MAGIC, .layout = VMT_RESERVE_LAYOUT,
				      .hdr_size = sizeof(h), .id = new_id(), .created_ns = now_realtime_ns(),
				      .bytes = bytes, .size = size, .unit = VMT_POOL_UNIT };
	h.crc = crc32c(0, &h, offsetof(struct vmt_reserve_hdr, crc));
	memcpy(m, &h, sizeof(h));
	p->fd = fd;
	p->id = h.id;
	p->base = m;
	p->mem = p->base + VMT_RESERVE_HDR_BYTES;
	return 0;
}

int pagepool_init(struct vmt_pagepool *p, size_t bytes)
{
	size_t units = bytes / VMT_POOL_UNIT;
	int err;

	memset(p, 0, sizeof(*p));
	p->fd = -1;
	if (!units)
		return 0;
	err = pool_memfd(p, units * VMT_POOL_UNIT);
	if (err < 0)
		return err;
	p->bytes = units * VMT_POOL_UNIT;
	p->holds = calloc(units, sizeof(*p->holds));
	p->in_slot = calloc(units, 1);
	if (!p->holds || !p->in_slot) {
		pagepool_free(p);
		return -ENOMEM;
	}
	return 0;
}

void pagepool_free(struct vmt_pagepool *p)
{
	if (p->base)
		munmap(p->base, VMT_RESERVE_HDR_BYTES + p->bytes);
	if (p->fd >= 0 && p->base)
		close(p->fd);
	free(p->holds);
	free(p->in_slot);
	memset(p, 0, sizeof(*p));
	p->fd = -1;
}

uint64_t pagepool_offset(const struct vmt_pagepool *p, const uint8_t *page)
{
	return (uint64_t)(page - p->mem);
}

void pagepool_name(const struct vmt_pagepool *p, char *buf, size_t n)
{
	snprintf(buf, n, VMT_RESERVE_FDNAME_PREFIX "%016llx", (unsigned long long)p->id);
}

int pagepool_read_hdr(const uint8_t *base, size_t size, struct vmt_reserve_hdr *h, char *why, size_t n)
{
	if (size < VMT_RESERVE_HDR_BYTES) {
		snprintf(why, n, "%zu bytes: too small for a dump reserve", size);
		return -EBADMSG;
	}
	memcpy(h, base, sizeof(*h));
	if (h->magic != VMT_RESERVE_MAGIC) {
		snprintf(why, n, "not a dump reserve (magic %016llx)", (unsigned long long)h->magic);
		return -EBADMSG;
	}
	if (h->layout != VMT_RESERVE_LAYOUT) {
		snprintf(why, n, "another layout version (%u; this vmtraced reads %u)", h->layout,
			 VMT_RESERVE_LAYOUT);
		return -EPROTO;
	}
	if (h->hdr_size != sizeof(*h)) {
		snprintf(why, n, "header of %u bytes, not %zu", h->hdr_size, sizeof(*h));
		return -EBADMSG;
	}
	if (crc32c(0, h, offsetof(struct vmt_reserve_hdr, crc)) != h->crc) {
		snprintf(why, n, "header checksum mismatch");
		return -EBADMSG;
	}
	if (h->unit != VMT_POOL_UNIT || h->bytes % VMT_POOL_UNIT || h->size != size ||
	    h->bytes != size - VMT_RESERVE_HDR_BYTES) {
		snprintf(why, n, "sizes that do not add up (%llu bytes of pages in %zu)",
			 (unsigned long long)h->bytes, size);
		return -EBADMSG;
	}
	return 0;
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
	/* nothing borrowed: the memory goes back to the kernel (a shared
	 * mapping's DONTNEED would leave the memfd's pages in place) */
	if (fallocate(p->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, VMT_RESERVE_HDR_BYTES,
		      (off_t)p->top) < 0)
		madvise(p->mem, p->top, MADV_REMOVE);
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
