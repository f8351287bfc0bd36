/* SPDX-License-Identifier: MIT */
/* tcode's decoder: streams back into pages, every read bounded (tcode.h). */
#include <errno.h>
#include <string.h>

#include "frame.h"
#include "tcode-int.h"

static inline bool rd_varint(const uint8_t *p, size_t len, size_t *pos, uint64_t *v)
{
	uint64_t x = 0;

	if (*pos < len && p[*pos] < 0x80) {	/* most are one byte */
		*v = p[(*pos)++];
		return true;
	}
	if (len - *pos >= 2 && p[*pos + 1] < 0x80) {	/* then two */
		*v = (p[*pos] & 0x7fu) | (uint64_t)p[*pos + 1] << 7;
		*pos += 2;
		return true;
	}
	for (unsigned sh = 0; sh < 64; sh += 7) {
		uint8_t b;

		if (*pos >= len)
			return false;
		b = p[(*pos)++];
		if (sh == 63 && b > 1)
			return false;
		x |= (uint64_t)(b & 0x7f) << sh;
		if (!(b & 0x80)) {
			*v = x;
			return true;
		}
	}
	return false;
}

/* Every stream's reader is set at the start of a run (an absent stream
 * reads as empty): no reader is checked for its run on the way. */
static inline bool get_varint(struct vmt_tcode_ctx *c, uint32_t id, uint64_t *v)
{
	struct rd *r = &c->r[id];
	size_t pos = 0;

	if (!rd_varint(r->cur, (size_t)(r->end - r->cur), &pos, v))
		return false;
	r->cur += pos;
	return true;
}

static inline bool get_u8(struct vmt_tcode_ctx *c, uint32_t id, uint8_t *out)
{
	struct rd *r = &c->r[id];	/* a fixed stream */

	if (r->cur >= r->end)
		return false;
	*out = *r->cur++;
	return true;
}

static inline bool get_bytes(struct vmt_tcode_ctx *c, uint32_t id, uint8_t *out, size_t n)
{
	struct rd *r = &c->r[id];

	if (!n)		/* an absent stream's cur is NULL: no NULL + 0 */
		return true;
	if ((size_t)(r->end - r->cur) < n)
		return false;
	memcpy(out, r->cur, n);
	r->cur += n;
	return true;
}

/* A record's time delta from its four byte planes, one check for all. */
static inline bool get_delta(struct vmt_tcode_ctx *c, uint32_t *delta)
{
	struct rd *r = &c->r[S_DELTA];

	if ((r[0].cur >= r[0].end) | (r[1].cur >= r[1].end) | (r[2].cur >= r[2].end) |
	    (r[3].cur >= r[3].end))
		return false;
	*delta = *r[0].cur++ | (uint32_t)*r[1].cur++ << 8 | (uint32_t)*r[2].cur++ << 16 |
		 (uint32_t)*r[3].cur++ << 24;
	return true;
}

static bool dec_comm(struct vmt_tcode_ctx *c, uint8_t *out)
{
	uint64_t i;

	if (!get_varint(c, S_COMMIDX, &i))
		return false;
	if (i < c->ncomm) {
		memcpy(out, c->comms[i], COMM_LEN);
		return true;
	}
	if (i != c->ncomm || !get_bytes(c, S_COMMTAB, out, COMM_LEN))
		return false;
	if (c->ncomm < COMM_MAX)
		memcpy(c->comms[c->ncomm++], out, COMM_LEN);
	return true;
}

/* An integer told against its column's last value (OP_D*): size and sign
 * are constants where it is called, so int_put() and int_trunc() fold
 * (always_inline: with a caller per op gcc would not inline it, and each
 * field would pay a call and both switches). */
static inline __attribute__((always_inline)) bool
dec_delta(struct vmt_tcode_ctx *c, const struct seg *s, uint8_t *p, uint8_t size, bool sign)
{
	uint64_t z, v;

	if (!get_varint(c, s->strms[c->v], &z))
		return false;
	v = c->prev[s->col] + unzigzag(z);
	int_put(p + s->off, size, v);
	c->prev[s->col] = int_trunc(v, size, sign);
	return true;
}

/* A data record's payload, its id (if it has one) written already. */
static bool dec_event(struct vmt_tcode_ctx *c, const struct plan *pl, uint8_t *p, uint32_t len)
{
	uint8_t pred = 0;

	if (len < 2)
		return get_bytes(c, S_DRAW, p, len);
	if (!pl || pl->fixed > len)
		return get_bytes(c, S_DRAW, p + 2, len - 2);
	if (pl->sw) {
		if (!get_u8(c, S_PRED, &pred) || pred > 1 || (pred && !c->sw_valid))
			return false;
		if (pred) {
			memcpy(p + pl->prev_comm, c->sw_comm, COMM_LEN);
			put_le32(p + pl->prev_pid, c->sw_pid);
			put_le32(p + pl->prev_prio, c->sw_prio);
		}
	}
	for (uint16_t i = 0; i < pl->nseg; i++) {
		const struct seg *s = &pl->segs[i];
		bool ok = true;

		if (pred && s->pred)
			continue;
		switch (s->ops[c->v]) {
#define DEC_CASE(op, size, sign) case op: ok = dec_delta(c, s, p, size, sign); break;
		TCODE_DELTA_OPS(DEC_CASE)
#undef DEC_CASE
		case OP_INT: {
			uint64_t z, v;

			if (!get_varint(c, s->strms[c->v], &z))
				return false;
			v = int_base(c, pl, s, p) + unzigzag(z);
			int_put(p + s->off, s->size, v);
			/* as the encoder saw it: as read back, sign-extended */
			int_seen(c, pl, s, p, int_trunc(v, s->size, s->sign));
			break;
		}
		case OP_COMM:
			ok = dec_comm(c, p + s->off);
			break;
		default:
			ok = get_bytes(c, S_FRAW, p + s->off, s->len);
			break;
		}
		if (!ok)
			return false;
	}
	if (!get_bytes(c, S_DTAIL, p + pl->fixed, len - pl->fixed))
		return false;
	anchor_seen(c, pl);
	if (pl->sw) {
		memcpy(c->sw_comm, p + pl->next_comm, COMM_LEN);
		c->sw_pid = get_le32(p + pl->next_pid);
		c->sw_prio = get_le32(p + pl->next_prio);
		c->sw_valid = true;
	}
	return true;
}

/* A data record's event: version 1 its id; version 2 1 + its plan's index,
 * or 0 and an id the schema does not know. *pl: its plan, or NULL. */
static inline __attribute__((always_inline)) bool
get_event(struct vmt_tcode_ctx *c, uint64_t *id, const struct plan **pl)
{
	uint64_t x;

	if (!get_varint(c, S_ID, &x))
		return false;
	if (!c->v) {
		*id = x;
		*pl = x <= 0xffff ? tcode_plan_find(c->t, (uint16_t)x) : NULL;
		return x <= 0xffff;
	}
	if (!x) {
		*pl = NULL;
		return get_varint(c, S_ID, id) && *id <= 0xffff;
	}
	/* only the plan its id finds, as the encoder wrote it */
	if (x > c->t->nplans || !c->t->plans[x - 1].first)
		return false;
	*pl = &c->t->plans[x - 1];
	*id = (*pl)->id;
	return true;
}

static bool dec_page(struct vmt_tcode_ctx *c, uint8_t *page, uint64_t *prev_ts)
{
	const struct vmt_page_layout *l = &c->t->l;
	uint8_t *d = page + l->data_offset, mode;
	uint32_t room = l->page_size - l->data_offset, pos = 0;
	uint64_t z, word, nrec;

	if (!get_varint(c, S_PTS, &z) || !get_varint(c, S_PCOMMIT, &word))
		return false;
	*prev_ts += unzigzag(z);
	c->ts = *prev_ts;
	put_le64(page + l->ts_offset, *prev_ts);
	if (l->commit_size == 8)
		put_le64(page + l->commit_offset, word);
	else if (word > UINT32_MAX)
		return false;
	else
		put_le32(page + l->commit_offset, (uint32_t)word);
	for (uint32_t i = 0; i < c->t->nhdr_other; i++)
		if (!get_bytes(c, S_HDRRAW, page + c->t->hdr_other[i], 1))
			return false;
	if (!get_varint(c, S_NREC, &nrec) || nrec > room / 4)
		return false;
	for (uint64_t k = 0; k < nrec; k++) {
		uint64_t arr = 0, size, id = 0;
		uint32_t delta = 0;
		const struct plan *pl = NULL;
		uint8_t sym, type;
		bool ok, has_id;

		if (!get_u8(c, S_TYPE, &sym) || sym > 32)
			return false;
		if (!sym) {	/* a data record of its id's last type_len */
			if (!get_event(c, &id, &pl) || !pl || !c->last_type[pl - c->t->plans])
				return false;
			type = (uint8_t)(c->last_type[pl - c->t->plans] - 1);
			has_id = true;
		} else {
			type = (uint8_t)(sym - 1);
			has_id = false;
		}
		if (!get_delta(c, &delta))
			return false;
		if (delta >= 1u << 27)
			return false;
		if ((type == 0 || type >= TYPE_PADDING) && (!get_varint(c, S_ARR, &arr) ||
							    arr > UINT32_MAX))
			return false;
		ts_step(c, type, delta, arr);
		if (type == TYPE_PADDING)
			size = 4 + arr;
		else if (type >= TYPE_TIME_EXTEND)
			size = 8;
		else if (type == 0)
			size = arr < 4 ? 0 : 8 + ((arr - 4 + 3) & ~3ull);
		else
			size = 4 + (uint64_t)type * 4;
		if (size < 8 || size > room - pos)
			return false;
		put_le32(d + pos, type | delta << 5);
		if (type == 0 || type >= TYPE_PADDING)
			put_le32(d + pos + 4, (uint32_t)arr);
		if (type < TYPE_PADDING && size - data_at(type) >= 2) {
			if (!has_id && !get_event(c, &id, &pl))
				return false;
			if (pl)
				c->last_type[pl - c->t->plans] = (uint8_t)(1 + type);
			put_le16(d + pos + data_at(type), (uint16_t)id);
		} else if (has_id) {
			return false;	/* the encoder predicts only records with an id */
		}
		if (type == TYPE_PADDING)
			ok = get_bytes(c, S_PADRAW, d + pos + 8, size - 8);
		else if (type < TYPE_PADDING)
			ok = dec_event(c, pl, d + pos + data_at(type), (uint32_t)(size - data_at(type)));
		else
			ok = true;
		if (!ok)
			return false;
		pos += (uint32_t)size;
	}
	if (!get_u8(c, S_TAILMODE, &mode) || mode > 1)
		return false;
	if (mode)
		return get_bytes(c, S_TAIL, d + pos, room - pos);
	memset(d + pos, 0, room - pos);
	return true;
}

/* The stream table: each (id, length) checked, readers set; the streams end
 * the input exactly, the stored ones last (version 2). With check, instead:
 * every stream read to its end. */
static bool dec_table(struct vmt_tcode_ctx *c, const uint8_t *in, size_t len, size_t pos,
		      uint64_t ns, bool check)
{
	size_t off = pos, soff, data;
	uint64_t id, sl, last = 0, kept = 0;

	for (uint64_t i = 0; i < ns; i++) {	/* where the data starts, where the stored */
		if (!rd_varint(in, len, &off, &id) || !rd_varint(in, len, &off, &sl) || sl > len)
			return false;
		if (!stream_stored(c->v, (uint32_t)VMT_MIN(id, UINT32_MAX)))
			kept += sl;	/* no overflow: ns <= nstreams, each <= len */
	}
	if (kept > len - off)
		return false;
	data = off;
	soff = off + kept;
	for (uint64_t i = 0; i < ns; i++) {
		size_t *at;
		struct rd *r;

		rd_varint(in, len, &pos, &id);
		rd_varint(in, len, &pos, &sl);
		if (check) {
			if (c->r[id].cur != c->r[id].end)
				return false;
			continue;
		}
		/* increasing ids, so none twice; no empty stream */
		at = stream_stored(c->v, (uint32_t)VMT_MIN(id, UINT32_MAX)) ? &soff : &off;
		if (id >= c->nstreams || (i && id <= last) || !sl || sl > len - *at)
			return false;
		last = id;
		r = &c->r[id];
		r->cur = in + *at;
		r->end = in + *at + sl;
		*at += sl;
	}
	return check || (off == data + kept && soff == len);
}

int tcode_decode(struct vmt_tcode_ctx *c, const uint8_t *in, size_t len, uint8_t *pages,
		 uint32_t npages)
{
	uint64_t n, ns, prev_ts = 0;
	size_t pos = 3;
	bool ok = true;

	if (len < 3 || in[0] != 'T' || in[1] != 'C' || !in[2] || in[2] > VMT_TCODE_VERSION)
		return -EBADMSG;
	c->v = (uint8_t)(in[2] - 1);
	if (!rd_varint(in, len, &pos, &n) || n != npages || !npages || npages > VMT_FRAME_MAX_PAGES ||
	    !rd_varint(in, len, &pos, &ns) || ns > c->nstreams)
		return -EBADMSG;
	memset(c->r, 0, c->nstreams * sizeof(*c->r));	/* absent ones read as empty */
	if (!dec_table(c, in, len, pos, ns, false))
		return -EBADMSG;
	run_state_reset(c);
	for (uint32_t i = 0; i < npages && ok; i++)
		ok = dec_page(c, pages + (size_t)i * c->t->l.page_size, &prev_ts);
	return ok && dec_table(c, in, len, pos, ns, true) ? 0 : -EBADMSG;
}

