/* SPDX-License-Identifier: MIT */
/*
 * ring-queue: rings waiting their turn, linked through the rings (the
 * compressor's, for a free job). The ring module's: a ring's fields are
 * written by its files alone.
 */
#include "ring.h"

void ring_queue_init(struct vmt_ring_queue *q)
{
	q->head = NULL;
	q->tail = &q->head;
}

void ring_queue_push(struct vmt_ring_queue *q, struct vmt_ring *r, const void *owner,
		     uint32_t codec, int level)
{
	if (r->queued)
		return;
	r->queued = true;
	r->qowner = owner;
	r->qcodec = codec;
	r->qlevel = level;
	r->qnext = NULL;
	*q->tail = r;
	q->tail = &r->qnext;
}

struct vmt_ring *ring_queue_pop(struct vmt_ring_queue *q, const void **owner, uint32_t *codec,
				int *level)
{
	struct vmt_ring *r = q->head;

	if (!r)
		return NULL;
	q->head = r->qnext;
	if (!q->head)
		q->tail = &q->head;
	r->qnext = NULL;
	r->queued = false;
	*owner = r->qowner;
	*codec = r->qcodec;
	*level = r->qlevel;
	return r;
}

void ring_queue_remove(struct vmt_ring_queue *q, struct vmt_ring *r)
{
	for (struct vmt_ring **p = &q->head; *p; p = &(*p)->qnext)
		if (*p == r) {
			*p = r->qnext;
			if (!*p)
				q->tail = p;
			r->qnext = NULL;
			r->queued = false;
			return;
		}
}

void ring_queue_clear(struct vmt_ring_queue *q)
{
	const void *o;
	uint32_t c;
	int l;

	while (ring_queue_pop(q, &o, &c, &l))
		;
}
