/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "frames.h"
#include "util.h"

/* Frames compress at most this much, as far as the descriptors go: past
 * it, more frames than slots push out the oldest as bytes do. Trace pages
 * compress 4:1 to 8:1. */
#define FRAMES_RATIO_MAX 32u
#define FRAMES_MIN_DESC 8u

uint32_t frames_cap(size_t arena, size_t batch_bytes)
{
	size_t per = VMT_MAX(batch_bytes / FRAMES_RATIO_MAX, 256);

	return (uint32_t)VMT_MAX(arena / per, FRAMES_MIN_DESC);
}

_Static_assert(sizeof(struct vmt_frame_desc) == VMT_RINGMEM_DESC_BYTES, "a descriptor is version 1's");

static void framemem_unref(struct vmt_framemem *fm)
{
	if (!fm || --fm->refs)
		return;
	ringmem_unref(fm->rm);
	free(fm);
}

int frames_init(struct vmt_frames *f, size_t arena, uint32_t cap)
{
	struct vmt_ringmem_geom g = { .desc_cap = cap, .arena = arena };
	struct vmt_ringmem *rm;
	int err;

	memset(f, 0, sizeof(*f));
	if (!arena || !cap)
		return -EINVAL;
	err = ringmem_new(&rm, &g);
	if (err < 0)
		return err;
	err = frames_init_in(f, rm);
	ringmem_unref(rm);	/* the store has its own reference */
	return err;
}

int frames_init_in(struct vmt_frames *f, struct vmt_ringmem *rm)
{
	uint32_t cap = rm->shadow.desc_cap;
	struct vmt_framemem *fm;

	memset(f, 0, sizeof(*f));
	if (!cap || !rm->shadow.arena_bytes)
		return -EINVAL;
	fm = calloc(1, sizeof(*fm) + cap * sizeof(fm->holds[0]));
	if (!fm)
		return -ENOMEM;
	*fm = (struct vmt_framemem){ .rm = rm, .mem = rm->base + rm->shadow.arena_off,
				     .bytes = rm->shadow.arena_bytes, .refs = 1 };
	ringmem_ref(rm);
	f->fm = fm;
	f->d = (struct vmt_frame_desc *)(rm->base + rm->shadow.desc_off);
	f->cap = cap;
	return 0;
}

void frames_free(struct vmt_frames *f)
{
	framemem_unref(f->fm);
	memset(f, 0, sizeof(*f));
}

static uint32_t slot_of(const struct vmt_frames *f, uint32_t k)
{
	return (f->first + k) % f->cap;
}

/* Push out the oldest frame (dead or in the window). */
static int evict_oldest(struct vmt_frames *f, struct vmt_frames_evicted *ev)
{
	const struct vmt_frame_desc *d = &f->d[f->first];

	if (f->fm->holds[f->first])
		return -EBUSY;
	if (f->dead) {
		f->dead--;
	} else {
		f->count--;
		f->pages -= d->h.npages;
		f->stored -= d->len;
		ev->frames++;
		ev->pages += d->h.npages;
	}
	f->first = (f->first + 1) % f->cap;
	return 0;
}

/*
 * Where len bytes go, or -EAGAIN while the oldest frame is in the way.
 * The live bytes run from the oldest frame's offset to head, wrapping
 * once: free is [head, oldest) when the log has wrapped, else [head, end)
 * and [0, oldest).
 */
static int place(const struct vmt_frames *f, size_t len, size_t *pos)
{
	size_t oldest;

	if (!f->dead && !f->count) {
		*pos = 0;
		return 0;
	}
	oldest = f->d[f->first].off;
	if (oldest >= f->head) {
		if (f->head + len <= oldest) {
			*pos = f->head;
			return 0;
		}
		return -EAGAIN;
	}
	if (f->head + len <= f->fm->bytes) {
		*pos = f->head;
		return 0;
	}
	if (len <= oldest) {
		*pos = 0;
		return 0;
	}
	return -EAGAIN;
}

int frames_make_room(struct vmt_frames *f, size_t len, size_t *pos, struct vmt_frames_evicted *ev)
{
	int r;

	memset(ev, 0, sizeof(*ev));
	if (!f->fm || len > f->fm->bytes || len > UINT32_MAX)
		return -E2BIG;
	while (f->dead + f->count == f->cap) {
		r = evict_oldest(f, ev);
		if (r < 0)
			return r;
	}
	while (place(f, len, pos) < 0) {
		r = evict_oldest(f, ev);
		if (r < 0)
			return r;
	}
	return 0;
}

void frames_put(struct vmt_frames *f, size_t pos, const struct vmt_frame_hdr *h,
		const struct vmt_iovec *iov, size_t n, uint32_t crc)
{
	size_t len = 0;

	for (size_t i = 0; i < n; len += iov[i].len, i++)
		memcpy(f->fm->mem + pos + len, iov[i].base, iov[i].len);
	/* the payload is in before its descriptor: a successor reads what the
	 * header covers, and the header is published after this */
	f->d[slot_of(f, f->dead + f->count)] =
		(struct vmt_frame_desc){ .h = *h, .off = pos, .len = (uint32_t)len, .crc = crc };
	f->count++;
	f->pages += h->npages;
	f->stored += len;
	f->head = pos + len;
}

const struct vmt_frame_desc *frames_at(const struct vmt_frames *f, uint32_t i)
{
	return &f->d[slot_of(f, f->dead + i)];
}

const uint8_t *frames_payload(const struct vmt_frames *f, const struct vmt_frame_desc *d)
{
	return f->fm->mem + d->off;
}

void frames_clear(struct vmt_frames *f)
{
	f->dead += f->count;
	f->count = 0;
	f->pages = 0;
	f->stored = 0;
}

int frames_hold(struct vmt_frames *f, uint32_t first, uint32_t end, struct vmt_frames_hold *h)
{
	uint32_t n = end - first;

	memset(h, 0, sizeof(*h));
	if (first > end || end > f->count)
		return -EINVAL;
	if (!n)
		return 0;
	h->slots = calloc(n, sizeof(*h->slots));
	h->frames = calloc(n, sizeof(*h->frames));
	if (!h->slots || !h->frames) {
		free(h->slots);
		free(h->frames);
		memset(h, 0, sizeof(*h));
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t s = slot_of(f, f->dead + first + i);
		const struct vmt_frame_desc *d = &f->d[s];

		f->fm->holds[s]++;
		h->slots[i] = s;
		h->frames[i] = (struct vmt_sample_frame){ .h = d->h, .payload = f->fm->mem + d->off,
							  .len = d->len };
	}
	h->fm = f->fm;
	h->fm->refs++;
	h->n = n;
	return 0;
}

void frames_release(struct vmt_frames_hold *h)
{
	for (uint32_t i = 0; h->fm && i < h->n; i++)
		h->fm->holds[h->slots[i]]--;
	framemem_unref(h->fm);
	free(h->slots);
	free(h->frames);
	memset(h, 0, sizeof(*h));
}
