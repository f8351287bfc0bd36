/* SPDX-License-Identifier: MIT */
/*
 * The ring module's smaller parts: the tcode schema a ring's frames are
 * made with (shared by a guest's rings and the compressor's jobs in flight,
 * counted), and the ring's counters as a sample carries them.
 */
#include <stdlib.h>

#include "ring.h"
#include "sample.h"
#include "tcode.h"

struct vmt_schema *schema_new(const uint8_t *bundle, size_t len, uint32_t page_size)
{
	struct vmt_schema *s = calloc(1, sizeof(*s));

	if (s && tcode_new(&s->t, bundle, len, page_size) < 0) {
		free(s);
		return NULL;
	}
	if (s)
		s->refs = 1;
	return s;
}

struct vmt_schema *schema_ref(struct vmt_schema *s)
{
	if (s)
		s->refs++;
	return s;
}

void schema_unref(struct vmt_schema *s)
{
	if (!s || --s->refs)
		return;
	tcode_free(s->t);
	free(s);
}

void ring_set_schema(struct vmt_ring *r, struct vmt_schema *s)
{
	schema_ref(s);
	schema_unref(r->schema);
	r->schema = s;
}

const struct vmt_tcode *ring_schema(const struct vmt_ring *r)
{
	return r->schema ? r->schema->t : NULL;
}

/* A counter added to the ring needs a tag in the sample format (docs/FORMAT.md). */
_Static_assert(sizeof(struct vmt_ring_counters) == sizeof(struct vmt_sample_counters),
	       "ring and sample counters differ");

void ring_counters_to_sample(const struct vmt_ring_counters *c, struct vmt_sample_counters *out)
{
	*out = (struct vmt_sample_counters){
		.bytes_in = c->bytes_in,
		.pages_in = c->pages_in,
		.pages_overwritten = c->pages_overwritten,
		.pages_guest_lost = c->pages_guest_lost,
		.events_guest_lost = c->events_guest_lost,
		.pages_rejected = c->pages_rejected,
		.bytes_rejected = c->bytes_rejected,
		.ts_backwards = c->ts_backwards,
		.events_in = c->events_in,
		.frames_made = c->frames_made,
		.pages_stored_raw = c->pages_stored_raw,
		.frame_bytes_in = c->frame_bytes_in,
		.frame_bytes_out = c->frame_bytes_out,
		.frames_overwritten = c->frames_overwritten,
	};
}
