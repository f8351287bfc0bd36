/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ringmem.h"
#include "util.h"

_Static_assert(sizeof(struct vmt_ringmem_hdr) == 408, "the header's layout is version 2's");
_Static_assert(sizeof(struct vmt_ringmem_hdr) <= VMT_RINGMEM_COPY_OFF, "two copies fit the header page");
_Static_assert(VMT_RINGMEM_FIXED_BYTES % 8 == 0, "the changing part starts aligned");

#define ALIGN_UP(x, a) (((x) + (a) - 1) / (a) * (a))

void ringmem_layout(const struct vmt_ringmem_geom *g, struct vmt_ringmem_layout *l)
{
	l->pages_off = VMT_RINGMEM_HDR_BYTES;
	l->slots_off = l->pages_off + (size_t)g->nslots * g->page_size;
	l->desc_off = ALIGN_UP(l->slots_off + (size_t)g->nslots * VMT_RINGMEM_SLOT_BYTES, 8);
	l->arena_off = ALIGN_UP(l->desc_off + (size_t)g->desc_cap * VMT_RINGMEM_DESC_BYTES, 64);
	l->size = ALIGN_UP(l->arena_off + g->arena, 4096);
}

/* The handle of a ring's memfd (fd, mapped at base, size bytes), its pages
 * from pages_off on. */
static struct vmt_ringmem *ringmem_alloc(int fd, uint8_t *base, size_t size, uint32_t nslots,
					 uint32_t page_size, size_t pages_off)
{
	struct vmt_ringmem *rm = calloc(1, sizeof(*rm) + (size_t)nslots * sizeof(rm->holds[0]));

	if (!rm)
		return NULL;
	rm->base = base;
	rm->size = size;
	rm->fd = fd;
	rm->mem = base + pages_off;
	rm->bytes = (size_t)nslots * page_size;
	rm->page_size = page_size;
	rm->refs = 1;
	return rm;
}

int ringmem_new(struct vmt_ringmem **out, const struct vmt_ringmem_geom *g)
{
	struct vmt_ringmem_layout l;
	struct vmt_ringmem_hdr *h;
	struct vmt_ringmem *rm;
	uint8_t *base = NULL;
	int fd = -1, err;

	*out = NULL;
	ringmem_layout(g, &l);
	/* pre-faulted: the ring's memory is spent now, not when a guest gets busy */
	err = sealed_memfd("vmtraced-ring", l.size, MAP_POPULATE, &fd, &base);
	if (err < 0)
		return err;
	rm = ringmem_alloc(fd, base, l.size, g->nslots, g->page_size, l.pages_off);
	if (!rm) {
		munmap(base, l.size);
		close(fd);
		return -ENOMEM;
	}
	h = &rm->shadow;
	*h = (struct vmt_ringmem_hdr){
		.magic = VMT_PERSIST_MAGIC, .layout = VMT_PERSIST_LAYOUT, .hdr_size = sizeof(*h),
		.created_ns = now_realtime_ns(), .lifetimes = 1, .page_size = g->page_size,
		.nr_pages = g->nslots ? g->nslots - 1 : 0, .desc_cap = g->desc_cap,
		.arena_bytes = g->arena, .size = l.size, .pages_off = l.pages_off,
		.slots_off = l.slots_off, .desc_off = l.desc_off, .arena_off = l.arena_off,
	};
	ringmem_fixed_changed(rm);
	*out = rm;
	return 0;
}

int ringmem_wrap(struct vmt_ringmem **out, int fd, uint8_t *base, size_t size,
		 const struct vmt_ringmem_hdr *h)
{
	struct vmt_ringmem *rm = ringmem_alloc(fd, base, size, h->nr_pages + 1, h->page_size, h->pages_off);

	*out = rm;
	if (!rm)
		return -ENOMEM;
	rm->shadow = *h;
	ringmem_fixed_changed(rm);
	return 0;
}

void ringmem_ref(struct vmt_ringmem *rm)
{
	rm->refs++;
}

void ringmem_unref(struct vmt_ringmem *rm)
{
	if (!rm || --rm->refs)
		return;
	munmap(rm->base, rm->size);
	close(rm->fd);
	free(rm);
}

void ringmem_fixed_changed(struct vmt_ringmem *rm)
{
	rm->fixed_crc = crc32c(0, &rm->shadow, VMT_RINGMEM_FIXED_BYTES);
}

void ringmem_publish(struct vmt_ringmem *rm)
{
	struct vmt_ringmem_hdr *h = &rm->shadow;
	const uint8_t *moving = (const uint8_t *)h + VMT_RINGMEM_FIXED_BYTES;

	h->gen++;
	h->updated_ns = now_realtime_ns();
	/* CRC32C continues: the fixed part's CRC is the seed of the rest */
	h->crc = crc32c(rm->fixed_crc, moving, offsetof(struct vmt_ringmem_hdr, crc) - VMT_RINGMEM_FIXED_BYTES);
	/* the pages, records and frames this header covers are in memory
	 * before it: a SIGKILL stops the thread at a store in program order,
	 * so the compiler's order is the one that counts */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	memcpy(rm->base + (h->gen & 1) * VMT_RINGMEM_COPY_OFF, h, sizeof(*h));
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

/* One copy: 1 valid, 0 not (why says what), -EPROTO for another layout version. */
static int copy_check(const uint8_t *p, struct vmt_ringmem_hdr *h, char *why, size_t n)
{
	memcpy(h, p, sizeof(*h));
	if (h->magic != VMT_PERSIST_MAGIC) {
		snprintf(why, n, "not a ring's memory (magic %016llx)", (unsigned long long)h->magic);
		return 0;
	}
	if (h->layout != VMT_PERSIST_LAYOUT) {
		snprintf(why, n, "another layout version (%u; this vmtraced reads %u)", h->layout,
			 VMT_PERSIST_LAYOUT);
		return -EPROTO;
	}
	if (h->hdr_size != sizeof(*h)) {
		snprintf(why, n, "header of %u bytes, not %zu", h->hdr_size, sizeof(*h));
		return 0;
	}
	if (crc32c(0, h, offsetof(struct vmt_ringmem_hdr, crc)) != h->crc) {
		snprintf(why, n, "header checksum mismatch");
		return 0;
	}
	return 1;
}

int ringmem_read_hdr(const uint8_t *base, size_t size, struct vmt_ringmem_hdr *out, char *why, size_t n)
{
	struct vmt_ringmem_hdr a, b;
	char wa[96] = "", wb[96] = "";
	int ka, kb;

	if (size < VMT_RINGMEM_HDR_BYTES) {
		snprintf(why, n, "%zu bytes: too small for a ring's memory", size);
		return -EBADMSG;
	}
	ka = copy_check(base, &a, wa, sizeof(wa));
	kb = copy_check(base + VMT_RINGMEM_COPY_OFF, &b, wb, sizeof(wb));
	if (ka == 1 && (kb != 1 || a.gen > b.gen))
		*out = a;
	else if (kb == 1)
		*out = b;
	else {
		/* another layout names itself: say so rather than "checksum" */
		snprintf(why, n, "%s", ka == -EPROTO ? wa : kb == -EPROTO ? wb : wa);
		return ka == -EPROTO || kb == -EPROTO ? -EPROTO : -EBADMSG;
	}
	return 0;
}
