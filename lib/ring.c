/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ring.h"
#include "util.h"

uint64_t ring_mem_size(uint32_t nr_pages, uint32_t page_size)
{
	return ((uint64_t)nr_pages + 1) * (page_size + sizeof(struct vmt_ring_slot));
}

int ring_init(struct vmt_ring *r, uint32_t nr_pages, const struct vmt_page_layout *l)
{
	size_t bytes;
	void *m;

	memset(r, 0, sizeof(*r));
	if (!nr_pages || !l->page_size)
		return -EINVAL;
	bytes = ((size_t)nr_pages + 1) * l->page_size;
	/* pre-faulted: the ring's memory is spent now, not when a guest gets busy */
	m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (m == MAP_FAILED)
		return -ENOMEM;
	r->slots = calloc((size_t)nr_pages + 1, sizeof(*r->slots));
	if (!r->slots) {
		munmap(m, bytes);
		return -ENOMEM;
	}
	r->mem = m;
	r->layout = *l;
	r->nr_pages = nr_pages;
	return 0;
}

void ring_free(struct vmt_ring *r)
{
	if (r->mem)
		munmap(r->mem, ((size_t)r->nr_pages + 1) * r->layout.page_size);
	free(r->slots);
	memset(r, 0, sizeof(*r));
}

static uint32_t slot_index(const struct vmt_ring *r, uint32_t i)
{
	/* the oldest valid page sits count slots behind the fill slot */
	uint32_t n = r->nr_pages + 1;

	return (r->head + n - r->count + i) % n;
}

uint8_t *ring_fill_space(struct vmt_ring *r, uint32_t *room)
{
	*room = r->layout.page_size - r->fill;
	return r->mem + (size_t)r->head * r->layout.page_size + r->fill;
}

static int ring_complete(struct vmt_ring *r)
{
	const uint8_t *page = r->mem + (size_t)r->head * r->layout.page_size;
	struct vmt_page_info info;
	struct vmt_ring_slot *s;
	int err;

	r->fill = 0;
	err = page_scan(&r->layout, page, &info);
	if (err < 0) {
		r->c.pages_rejected++;
		r->c.bytes_rejected += r->layout.page_size;
		r->last_error = err;
		r->next_seq++;
		return err;
	}
	s = &r->slots[r->head];
	s->seq = r->next_seq++;
	s->first_ts = info.first_ts;
	s->last_ts = info.last_ts;
	s->events = info.events;
	s->flags = info.missed_flag ? VMT_SLOT_MISSED : 0;
	if (r->c.pages_in && info.first_ts < r->last_ts)
		r->c.ts_backwards++;
	r->last_ts = info.last_ts;
	r->c.pages_in++;
	r->c.events_in += info.events;
	if (info.missed_flag) {
		r->c.pages_guest_lost++;
		r->c.events_guest_lost += info.missed;
	}
	if (r->count == r->nr_pages)
		r->c.pages_overwritten++;
	else
		r->count++;
	r->head = (r->head + 1) % (r->nr_pages + 1);
	return 1;
}

int ring_fill_commit(struct vmt_ring *r, uint32_t n)
{
	r->fill += n;
	r->c.bytes_in += n;
	if (r->fill < r->layout.page_size)
		return 0;
	return ring_complete(r);
}

int ring_push(struct vmt_ring *r, const uint8_t *page)
{
	uint32_t room;
	uint8_t *dst;

	if (r->fill)
		ring_reset_stream(r, 0);
	dst = ring_fill_space(r, &room);
	memcpy(dst, page, room);
	return ring_fill_commit(r, room);
}

void ring_reset_stream(struct vmt_ring *r, int restart_seq)
{
	if (r->fill) {
		r->c.bytes_rejected += r->fill;
		r->fill = 0;
		r->next_seq++;
	}
	if (restart_seq)
		r->next_seq = 0;
}

void ring_clear(struct vmt_ring *r)
{
	r->count = 0;
	r->fill = 0;
}

uint64_t ring_stream_bytes(const struct vmt_ring *r)
{
	return r->next_seq * r->layout.page_size + r->fill;
}

const uint8_t *ring_page(const struct vmt_ring *r, uint32_t i)
{
	return r->mem + (size_t)slot_index(r, i) * r->layout.page_size;
}

const struct vmt_ring_slot *ring_slot(const struct vmt_ring *r, uint32_t i)
{
	return &r->slots[slot_index(r, i)];
}
