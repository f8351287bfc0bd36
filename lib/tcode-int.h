/* SPDX-License-Identifier: MIT */
/*
 * tcode's parts (tcode.c: the schema; tcode-enc.c, tcode-dec.c): the
 * streams, a schema's plans and a context, and what encoder and decoder
 * must compute alike.
 */
#ifndef VMT_TCODE_INT_H
#define VMT_TCODE_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "tcode.h"
#include "util.h"

#define TYPE_PADDING 29
#define TYPE_TIME_EXTEND 30
#define TYPE_TIME_STAMP 31
#define COMM_LEN 16
#define COMM_MAX 4096u		/* interned task names per run */
#define ACC_SLOTS 1024u		/* tasks whose vruntime is followed per run */

/* The fixed streams; columns follow, one per integer field. */
enum {
	S_PTS,		/* page timestamp, zigzag delta from the previous page's */
	S_PCOMMIT,	/* the commit word as it is */
	S_HDRRAW,	/* header bytes other than the timestamp and commit */
	S_NREC,		/* records walked per page */
	S_TAILMODE,	/* 0: the rest of the page is zeros; 1: raw in S_TAIL */
	S_TAIL,
	S_TYPE,		/* 0: a data record of its id's last type_len; else 1 + type_len */
	S_DELTA,	/* time_delta of each record: 4 byte planes, low first (version 2:
			 * the two low ones stored, stream_stored()) */
	S_DELTA1,
	S_DELTA2,
	S_DELTA3,
	S_ARR,		/* array[0] of padding, time and long records */
	S_PADRAW,	/* a discarded event's bytes */
	S_ID,		/* a data record's event: version 1 its common_type; version 2
			 * 1 + its plan's index, or 0 and the common_type */
	S_DRAW,		/* data records the schema does not explain */
	S_DTAIL,	/* bytes past an event's fixed fields (dynamic data, alignment) */
	S_FRAW,		/* fixed bytes that are no integer nor task name */
	S_COMMIDX,	/* interned name index; the count so far means a new one */
	S_COMMTAB,	/* new names, 16 bytes each */
	S_PRED,		/* sched_switch: 1 if prev_* is the previous switch's next_* */
	NFIXED
};

enum seg_kind { SEG_INT, SEG_COMM, SEG_RAW };

/* What the coders do with a segment, set once its plan is complete
 * (plan_ops()): an integer told against its column's previous value has
 * an op of its own for each size and sign, so the hot loops branch once
 * on the op instead of on size, sign, rel and acc for every field.
 * X(op, size, sign): the one list the enum and both coders' cases are
 * made from. */
#define TCODE_DELTA_OPS(X) \
	X(OP_D8U, 1, false) X(OP_D8S, 1, true) X(OP_D16U, 2, false) X(OP_D16S, 2, true) \
	X(OP_D32U, 4, false) X(OP_D32S, 4, true) X(OP_D64, 8, false)
#define TCODE_OP_ENUM(op, size, sign) op,
enum seg_op {
	OP_RAW, OP_COMM,
	OP_INT,		/* any other integer: int_base() and int_seen() */
	TCODE_DELTA_OPS(TCODE_OP_ENUM)
};
#undef TCODE_OP_ENUM

/* What an OP_INT field is told against besides its column's last value. */
enum seg_rel {
	REL_NONE,
	REL_SOFT,	/* the field at rel_off of the same record (softexpires from expires) */
	REL_TS,		/* version 2: the record's time since the last sched_switch or
			 * sched_stat_runtime of the run (sched_stat_runtime's runtime) */
	REL_CLOCK,	/* version 2: the record's time plus the last such field's offset
			 * from its record's time (hrtimer_expire_entry's now) */
};

/* Format versions a context reads: index 0 is version 1, 1 version 2;
 * the encoder writes the newest. */
#define TCODE_NVERS 2
#define TCODE_V_ENC (VMT_TCODE_VERSION - 1)
_Static_assert(TCODE_V_ENC == TCODE_NVERS - 1, "the encoder writes the newest version");

struct seg {
	uint8_t kind;
	uint8_t ops[TCODE_NVERS];	/* enum seg_op, by version */
	uint8_t size;		/* SEG_INT: 1, 2, 4, 8 */
	uint8_t sign;		/* SEG_INT: sign-extended before the difference */
	uint8_t pred;		/* a sched_switch prev_* field */
	uint8_t rel;		/* SEG_INT: enum seg_rel */
	uint8_t acc;		/* SEG_INT: sched_stat_runtime's vruntime, see struct plan */
	uint16_t rel_off;
	uint16_t off, len;
	uint32_t col;		/* SEG_INT: its last value is prev[col] */
	/* SEG_INT: the stream it is written to, by version: NFIXED + col, but in
	 * version 2 common_preempt_count goes with common_flags */
	uint32_t strms[TCODE_NVERS];
};

struct plan {
	uint16_t id;
	bool first;		/* the plan tcode_plan_find() gives for its id */
	uint16_t fixed;		/* bytes the segments cover, from 0 */
	uint16_t nseg;
	bool sw;		/* sched_switch, predicted */
	bool rt;		/* sched_stat_runtime, its vruntime followed */
	uint16_t next_comm, next_pid, next_prio, prev_comm, prev_pid, prev_prio;
	/* sched_stat_runtime: a task's vruntime grows by its runtime (nice 0),
	 * so it is predicted as the task's last one plus this runtime */
	uint16_t acc_key, acc_add;
	struct seg *segs;
};

struct vmt_tcode {
	struct vmt_page_layout l;
	uint64_t id;		/* what it was built from (tcode_id) */
	uint64_t serial;	/* unique in the process: contexts know their schema by it */
	uint8_t hdr_other[64];	/* header bytes that are neither timestamp nor commit */
	uint32_t nhdr_other;
	struct plan *plans;
	uint32_t nplans;
	uint32_t ncols;
	uint32_t *slots;	/* open addressing: id << 16 | (plan + 1); 0 empty */
	uint32_t hmask;
};

struct rd {		/* a stream being read: cur up to end (both NULL: absent) */
	const uint8_t *cur, *end;
};

struct vmt_tcode_ctx {
	const struct vmt_tcode *t;
	uint32_t nstreams;
	/* encoder */
	struct vmt_buf *s;	/* a stream each (util.h's growable buffer) */
	uint32_t *used;
	uint32_t nused;
	size_t stored;		/* bytes at the end of the last run's output for no entropy coder */
	/* decoder */
	struct rd *r;
	uint8_t v;		/* the run's version, less one */
	/* both */
	uint64_t *prev;		/* per column */
	uint8_t *last_type;	/* per plan: 1 + the type_len its last record had */
	uint8_t comms[COMM_MAX][COMM_LEN];
	uint32_t ncomm;
	uint16_t chash[2 * COMM_MAX];	/* index + 1; 0 empty */
	uint64_t acc_gen;	/* acc_* slots of another run are empty */
	uint64_t acc_slot_gen[ACC_SLOTS];
	uint32_t acc_pid[ACC_SLOTS];
	uint64_t acc_val[ACC_SLOTS];
	uint64_t ts;		/* the record's time, as its page and deltas give it */
	uint64_t anchor;	/* REL_TS */
	uint64_t clk_off;	/* REL_CLOCK */
	bool anchor_valid, clk_valid;
	bool sw_valid;
	uint8_t sw_comm[COMM_LEN];
	uint32_t sw_pid, sw_prio;
};

static inline uint32_t id_hash(uint16_t id)
{
	return (uint32_t)id * 2654435761u;
}

static inline const struct plan *tcode_plan_find(const struct vmt_tcode *t, uint16_t id)
{
	for (uint32_t h = id_hash(id) & t->hmask;; h = (h + 1) & t->hmask) {
		uint32_t v = t->slots[h];

		if (!v)
			return NULL;
		if (v >> 16 == id)
			return &t->plans[(v & 0xffff) - 1];
	}
}


static inline uint64_t zigzag(uint64_t d)
{
	return (d << 1) ^ (uint64_t)((int64_t)d >> 63);
}

static inline uint64_t unzigzag(uint64_t z)
{
	return (z >> 1) ^ (0 - (z & 1));
}

static inline uint64_t int_get(const uint8_t *p, uint8_t size, bool sign)
{
	switch (size) {
	case 1: return sign ? (uint64_t)(int64_t)(int8_t)p[0] : p[0];
	case 2: return sign ? (uint64_t)(int64_t)(int16_t)get_le16(p) : get_le16(p);
	case 4: return sign ? (uint64_t)(int64_t)(int32_t)get_le32(p) : get_le32(p);
	default: return get_le64(p);
	}
}

/* v as int_get() reads it back once int_put() wrote it: its low size
 * bytes, sign-extended or not; no branch on the size (the decoder's hot
 * path, where the sizes of a record's fields alternate). */
static inline uint64_t int_trunc(uint64_t v, uint8_t size, bool sign)
{
	unsigned sh = 64 - 8u * size;

	return sign ? (uint64_t)((int64_t)(v << sh) >> sh) : (v << sh) >> sh;
}

static inline void int_put(uint8_t *p, uint8_t size, uint64_t v)
{
	switch (size) {
	case 1: p[0] = (uint8_t)v; break;
	case 2: put_le16(p, (uint16_t)v); break;
	case 4: put_le32(p, (uint32_t)v); break;
	default: put_le64(p, v); break;
	}
}

static inline uint32_t acc_find(struct vmt_tcode_ctx *c, uint32_t pid, bool *found)
{
	uint32_t h = (pid * 2654435761u) >> 22;	/* ACC_SLOTS = 1 << 10 */

	for (uint32_t i = 0; i < ACC_SLOTS; i++, h = (h + 1) & (ACC_SLOTS - 1))
		if (c->acc_slot_gen[h] != c->acc_gen || c->acc_pid[h] == pid) {
			*found = c->acc_slot_gen[h] == c->acc_gen;
			return h;
		}
	*found = false;
	return ACC_SLOTS;	/* full: no prediction */
}

/* What an integer field is told against: the previous value of its column,
 * another field of the record, or a task's vruntime plus its runtime. p
 * holds the fields before s (the decoder writes them in order). */
static inline uint64_t int_base(struct vmt_tcode_ctx *c, const struct plan *pl,
				const struct seg *s, const uint8_t *p)
{
	if (s->rel == REL_SOFT)
		return int_get(p + s->rel_off, s->size, s->sign);
	if (s->rel == REL_TS && c->anchor_valid)
		return c->ts - c->anchor;
	if (s->rel == REL_CLOCK && c->clk_valid)
		return c->ts + c->clk_off;
	if (s->acc) {
		bool found;
		uint32_t h = acc_find(c, get_le32(p + pl->acc_key), &found);

		if (found)
			return c->acc_val[h] + get_le64(p + pl->acc_add);
	}
	return c->prev[s->col];
}

static inline void int_seen(struct vmt_tcode_ctx *c, const struct plan *pl, const struct seg *s,
			    const uint8_t *p, uint64_t v)
{
	c->prev[s->col] = v;
	if (s->rel == REL_CLOCK) {
		c->clk_off = v - c->ts;
		c->clk_valid = true;
	}
	if (s->acc) {
		bool found;
		uint32_t h = acc_find(c, get_le32(p + pl->acc_key), &found);

		if (h < ACC_SLOTS) {
			c->acc_slot_gen[h] = c->acc_gen;
			c->acc_pid[h] = get_le32(p + pl->acc_key);
			c->acc_val[h] = v;
		}
	}
}

static inline uint32_t data_at(uint32_t type)
{
	return type ? 4 : 8;
}

/* Version 2's time-delta planes 0 and 1 are noise in nanoseconds: they end
 * the output, stored, kept away from the entropy coder's tables. */
static inline bool stream_stored(uint8_t v, uint32_t id)
{
	return v && (id == S_DELTA || id == S_DELTA1);
}

/* A record's time as both coders follow it (the page's time, then each
 * record's delta; a time extend adds, an absolute stamp sets). */
static inline void ts_step(struct vmt_tcode_ctx *c, uint32_t type, uint32_t delta, uint64_t arr)
{
	if (type == TYPE_TIME_EXTEND)
		c->ts += arr << 27 | delta;
	else if (type == TYPE_TIME_STAMP)
		c->ts = arr << 27 | delta;
	else if (type != TYPE_PADDING)
		c->ts += delta;
}

/* After a data record of plan pl: REL_TS counts from a switch or a
 * runtime. */
static inline void anchor_seen(struct vmt_tcode_ctx *c, const struct plan *pl)
{
	if (pl->sw || pl->rt) {
		c->anchor = c->ts;
		c->anchor_valid = true;
	}
}

/* The state both coders start a run with. */
static inline void run_state_reset(struct vmt_tcode_ctx *c)
{
	memset(c->prev, 0, (c->t->ncols ? c->t->ncols : 1) * sizeof(*c->prev));
	c->acc_gen++;
	memset(c->last_type, 0, c->t->nplans);
	c->ncomm = 0;
	c->sw_valid = false;
	c->anchor_valid = false;
	c->clk_valid = false;
	c->ts = 0;
}

#endif
