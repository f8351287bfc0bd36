/* SPDX-License-Identifier: MIT */
/* tcode's encoder: pages into streams (tcode.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "tcode-int.h"

/* Room for more bytes in stream id. Which streams a run used is found
 * once at its end (a stream is used when it holds bytes): a mark at the
 * first byte would cost a branch on every byte put. */
static inline uint8_t *strm_room(struct vmt_tcode_ctx *c, uint32_t id, size_t more)
{
	struct vmt_buf *s = &c->s[id];

	if (s->len + more > s->cap && buf_reserve(s, more) < 0)
		return NULL;
	return s->data + s->len;
}

static inline int put_bytes(struct vmt_tcode_ctx *c, uint32_t id, const void *p, size_t n)
{
	uint8_t *d;

	if (!n)
		return 0;
	d = strm_room(c, id, n);
	if (!d)
		return -ENOMEM;
	memcpy(d, p, n);
	c->s[id].len += n;
	return 0;
}

static inline int put_u8(struct vmt_tcode_ctx *c, uint32_t id, uint8_t v)
{
	uint8_t *d = strm_room(c, id, 1);

	if (!d)
		return -ENOMEM;
	*d = v;
	c->s[id].len++;
	return 0;
}

/* A record's time delta into its four byte planes: one check for all
 * while they have room. */
static inline int put_delta(struct vmt_tcode_ctx *c, uint32_t delta)
{
	struct vmt_buf *s = &c->s[S_DELTA];

	if ((s[0].len >= s[0].cap) | (s[1].len >= s[1].cap) | (s[2].len >= s[2].cap) |
	    (s[3].len >= s[3].cap)) {
		for (int k = 0; k < 4; k++)
			if (put_u8(c, S_DELTA + k, (uint8_t)(delta >> 8 * k)) < 0)
				return -ENOMEM;
		return 0;
	}
	for (int k = 0; k < 4; k++)
		s[k].data[s[k].len++] = (uint8_t)(delta >> 8 * k);
	return 0;
}

static inline int put_varint(struct vmt_tcode_ctx *c, uint32_t id, uint64_t v)
{
	uint8_t *d = strm_room(c, id, 10), *o = d;

	if (!d)
		return -ENOMEM;
	if (v < 0x4000) {	/* one or two bytes: most values */
		if (v < 0x80) {
			*o = (uint8_t)v;
			c->s[id].len++;
			return 0;
		}
		o[0] = (uint8_t)(v | 0x80);
		o[1] = (uint8_t)(v >> 7);
		c->s[id].len += 2;
		return 0;
	}
	while (v >= 0x80) {
		*o++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*o++ = (uint8_t)v;
	c->s[id].len += (size_t)(o - d);
	return 0;
}

static inline uint32_t comm_hash(const uint8_t *s)
{
	uint64_t a = get_le64(s), b = get_le64(s + 8);

	return (uint32_t)(((a * 0x9e3779b97f4a7c15ull) ^ (b * 0xc2b2ae3d27d4eb4full)) >> 40);
}

static int enc_comm(struct vmt_tcode_ctx *c, const uint8_t *s)
{
	uint32_t h = comm_hash(s) & (2 * COMM_MAX - 1);

	for (;; h = (h + 1) & (2 * COMM_MAX - 1)) {
		uint16_t v = c->chash[h];

		if (!v)
			break;
		if (!memcmp(c->comms[v - 1], s, COMM_LEN))
			return put_varint(c, S_COMMIDX, v - 1u);
	}
	if (put_varint(c, S_COMMIDX, c->ncomm) < 0 || put_bytes(c, S_COMMTAB, s, COMM_LEN) < 0)
		return -ENOMEM;
	if (c->ncomm < COMM_MAX) {
		memcpy(c->comms[c->ncomm], s, COMM_LEN);
		c->chash[h] = (uint16_t)++c->ncomm;
	}
	return 0;
}

/* An integer told against its column's last value (OP_D*), as the
 * decoder's dec_delta(): size and sign are constants where it is called. */
static inline __attribute__((always_inline)) int
enc_delta(struct vmt_tcode_ctx *c, const struct seg *s, const uint8_t *p, uint8_t size, bool sign)
{
	uint64_t v = int_get(p + s->off, size, sign);
	int r = put_varint(c, s->strms[TCODE_V_ENC], zigzag(v - c->prev[s->col]));

	c->prev[s->col] = v;
	return r;
}

/* A data record's payload; its id (the first two bytes, when there are
 * two) is already in S_ID and pl its plan, or NULL. */
static int enc_event(struct vmt_tcode_ctx *c, const struct plan *pl, const uint8_t *p,
		     uint32_t len, struct vmt_tcode_stats *st)
{
	bool pred = false;
	int r = 0;

	if (len < 2) {
		st->events_raw++;
		return put_bytes(c, S_DRAW, p, len);
	}
	if (!pl || pl->fixed > len) {
		st->events_raw++;
		return put_bytes(c, S_DRAW, p + 2, len - 2);
	}
	st->events++;
	if (pl->sw) {
		pred = c->sw_valid && !memcmp(p + pl->prev_comm, c->sw_comm, COMM_LEN) &&
		       get_le32(p + pl->prev_pid) == c->sw_pid &&
		       get_le32(p + pl->prev_prio) == c->sw_prio;
		if (put_u8(c, S_PRED, pred) < 0)
			return -ENOMEM;
		st->predicted += pred;
	}
	for (uint16_t i = 0; i < pl->nseg && r >= 0; i++) {
		const struct seg *s = &pl->segs[i];

		if (pred && s->pred)
			continue;
		switch (s->ops[TCODE_V_ENC]) {
#define ENC_CASE(op, size, sign) case op: r = enc_delta(c, s, p, size, sign); break;
		TCODE_DELTA_OPS(ENC_CASE)
#undef ENC_CASE
		case OP_INT: {
			uint64_t v = int_get(p + s->off, s->size, s->sign);

			r = put_varint(c, s->strms[TCODE_V_ENC], zigzag(v - int_base(c, pl, s, p)));
			int_seen(c, pl, s, p, v);
			break;
		}
		case OP_COMM:
			r = enc_comm(c, p + s->off);
			break;
		default:
			r = put_bytes(c, S_FRAW, p + s->off, s->len);
			break;
		}
	}
	if (r < 0 || put_bytes(c, S_DTAIL, p + pl->fixed, len - pl->fixed) < 0)
		return -ENOMEM;
	anchor_seen(c, pl);
	if (pl->sw) {
		memcpy(c->sw_comm, p + pl->next_comm, COMM_LEN);
		c->sw_pid = get_le32(p + pl->next_pid);
		c->sw_prio = get_le32(p + pl->next_prio);
		c->sw_valid = true;
	}
	return 0;
}

/*
 * A record's header: its type (0 when a data record has the type_len its
 * id had last time: then only the id tells it), its event (1 + the index
 * of its plan, or 0 and the id the schema does not know), its time delta
 * in byte planes. *pl: a data record's plan, or NULL.
 */
static int enc_header(struct vmt_tcode_ctx *c, const uint8_t *rec, uint32_t type, uint32_t delta,
		      uint32_t size, const struct plan **pl)
{
	uint8_t sym = (uint8_t)(1 + type);

	*pl = NULL;
	if (type < TYPE_PADDING && size - data_at(type) >= 2) {
		uint16_t id = get_le16(rec + data_at(type));
		uint8_t *last;

		*pl = tcode_plan_find(c->t, id);
		if (*pl) {
			last = &c->last_type[*pl - c->t->plans];
			if (*last == 1 + type)
				sym = 0;
			*last = (uint8_t)(1 + type);
		}
		if (put_u8(c, S_TYPE, sym) < 0 ||
		    put_varint(c, S_ID, *pl ? (uint64_t)(*pl - c->t->plans) + 1 : 0) < 0 ||
		    (!*pl && put_varint(c, S_ID, id) < 0))
			return -ENOMEM;
	} else if (put_u8(c, S_TYPE, sym) < 0) {
		return -ENOMEM;
	}
	return put_delta(c, delta);
}

static bool all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

static int enc_page(struct vmt_tcode_ctx *c, const uint8_t *page, uint64_t *prev_ts,
		    struct vmt_tcode_stats *st)
{
	const struct vmt_page_layout *l = &c->t->l;
	uint64_t ts = get_le64(page + l->ts_offset);
	uint64_t word = l->commit_size == 8 ? get_le64(page + l->commit_offset)
					    : get_le32(page + l->commit_offset);
	const uint8_t *d = page + l->data_offset;
	uint32_t room = l->page_size - l->data_offset, pos = 0, nrec = 0;
	uint64_t commit = word & VMT_PAGE_COMMIT_MASK;
	uint8_t mode;

	if (commit > room)
		commit = 0;	/* nothing walks: the page travels in its tail */
	if (put_varint(c, S_PTS, zigzag(ts - *prev_ts)) < 0 || put_varint(c, S_PCOMMIT, word) < 0)
		return -ENOMEM;
	*prev_ts = ts;
	c->ts = ts;
	for (uint32_t i = 0; i < c->t->nhdr_other; i++)
		if (put_bytes(c, S_HDRRAW, page + c->t->hdr_other[i], 1) < 0)
			return -ENOMEM;
	/* the walk stops where page_walk() would, or at what it would refuse */
	while (pos + 4 <= commit) {
		uint32_t h = get_le32(d + pos), type = h & 0x1f, delta = h >> 5, arr = 0;
		const struct plan *pl;
		uint64_t size;
		int r = 0;

		if (type == TYPE_PADDING) {
			if (!delta || pos + 8 > commit)
				break;
			arr = get_le32(d + pos + 4);
			size = 4 + (uint64_t)arr;
			if (size < 8 || pos + size > commit)
				break;
		} else if (type >= TYPE_TIME_EXTEND || type == 0) {
			if (pos + 8 > commit)
				break;
			arr = get_le32(d + pos + 4);
			if (type == 0 && arr < 4)
				break;
			size = type ? 8 : 8 + ((arr - 4ull + 3) & ~3ull);
			if (pos + size > commit)
				break;
		} else {
			size = 4 + (uint64_t)type * 4;
			if (pos + size > commit)
				break;
		}
		ts_step(c, type, delta, arr);
		r = enc_header(c, d + pos, type, delta, (uint32_t)size, &pl);
		if (r < 0)
			return r;
		if ((type == 0 || type >= TYPE_PADDING) && put_varint(c, S_ARR, arr) < 0)
			return -ENOMEM;
		if (type == TYPE_PADDING)
			r = put_bytes(c, S_PADRAW, d + pos + 8, size - 8);
		else if (type == 0)
			r = enc_event(c, pl, d + pos + 8, (uint32_t)size - 8, st);
		else if (type < TYPE_PADDING)
			r = enc_event(c, pl, d + pos + 4, (uint32_t)size - 4, st);
		if (r < 0)
			return r;
		pos += (uint32_t)size;
		nrec++;
	}
	st->records += nrec;
	if (put_varint(c, S_NREC, nrec) < 0)
		return -ENOMEM;
	mode = !all_zero(d + pos, room - pos);
	if (put_u8(c, S_TAILMODE, mode) < 0)
		return -ENOMEM;
	if (mode) {
		st->tail_raw++;
		if (put_bytes(c, S_TAIL, d + pos, room - pos) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* The streams that hold bytes, in increasing id (the table's order). */
static void run_used(struct vmt_tcode_ctx *c)
{
	c->nused = 0;
	for (uint32_t id = 0; id < c->nstreams; id++)
		if (c->s[id].len)
			c->used[c->nused++] = id;
}

static void run_reset(struct vmt_tcode_ctx *c)
{
	run_used(c);
	for (uint32_t i = 0; i < c->nused; i++)
		c->s[c->used[i]].len = 0;
	c->nused = 0;
	run_state_reset(c);
	memset(c->chash, 0, sizeof(c->chash));
}

static int buf_varint(struct vmt_buf *b, uint64_t v)
{
	uint8_t t[10];
	size_t n = 0;

	while (v >= 0x80) {
		t[n++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	t[n++] = (uint8_t)v;
	return buf_append(b, t, n);
}

int tcode_encode(struct vmt_tcode_ctx *c, const uint8_t *pages, uint32_t npages,
		 struct vmt_buf *out, struct vmt_tcode_stats *st)
{
	struct vmt_tcode_stats mine = { 0 };
	uint64_t prev_ts = 0;
	int r = 0;

	c->stored = 0;
	if (!npages || npages > VMT_FRAME_MAX_PAGES)
		return -EINVAL;
	run_reset(c);
	for (uint32_t i = 0; i < npages && r >= 0; i++)
		r = enc_page(c, pages + (size_t)i * c->t->l.page_size, &prev_ts, &mine);
	if (r < 0)
		goto out;
	mine.pages = npages;
	run_used(c);
	if ((r = buf_append(out, "TC", 2)) < 0 ||
	    (r = buf_append(out, &(uint8_t){ VMT_TCODE_VERSION }, 1)) < 0 ||
	    (r = buf_varint(out, npages)) < 0 || (r = buf_varint(out, c->nused)) < 0)
		goto out;
	for (uint32_t i = 0; i < c->nused && r >= 0; i++)
		if ((r = buf_varint(out, c->used[i])) >= 0)
			r = buf_varint(out, c->s[c->used[i]].len);
	/* the streams' bytes in the table's order, those stored last */
	for (int last = 0; last < 2; last++)
		for (uint32_t i = 0; i < c->nused && r >= 0; i++) {
			struct vmt_buf *sb = &c->s[c->used[i]];

			if (stream_stored(TCODE_V_ENC, c->used[i]) != last)
				continue;
			r = buf_append(out, sb->data, sb->len);
			c->stored += last ? sb->len : 0;
		}
	if (r >= 0 && st) {
		st->pages += mine.pages;
		st->records += mine.records;
		st->events += mine.events;
		st->events_raw += mine.events_raw;
		st->tail_raw += mine.tail_raw;
		st->predicted += mine.predicted;
	}
out:
	run_reset(c);
	return r < 0 ? r : 0;
}

size_t tcode_stored_tail(const struct vmt_tcode_ctx *c)
{
	return c->stored;
}
