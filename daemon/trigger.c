/* SPDX-License-Identifier: MIT */
#include "trigger.h"
#include "util.h"

void bucket_fill(struct vmt_bucket *b, uint32_t per_min, uint64_t now)
{
	if (!b->at_ns) {
		b->tokens = per_min;
		b->at_ns = now;
	}
	b->tokens += (double)(now - b->at_ns) * per_min / 60e9;
	if (b->tokens > per_min)
		b->tokens = per_min;
	b->at_ns = now;
}

bool bucket_take(struct vmt_bucket *b, uint32_t per_min, uint64_t now)
{
	if (!per_min)
		return true;
	bucket_fill(b, per_min, now);
	if (b->tokens < 1)
		return false;
	b->tokens -= 1;
	return true;
}

double bucket_wait_s(const struct vmt_bucket *b, uint32_t per_min)
{
	return !per_min || b->tokens >= 1 ? 0 : (1 - b->tokens) * 60 / per_min;
}

bool trigger_is_automatic(const struct vmt_trigger *t)
{
	return t->kind == VMT_TRIGGER_BPF || t->kind == VMT_TRIGGER_GUEST ||
	       t->kind == VMT_TRIGGER_SILENCE || t->kind == VMT_TRIGGER_LIBVIRT;
}

bool trigger_cooling(const struct vmt_trigger_conf *c, const struct vmt_trigger_budget *g,
		     uint64_t now)
{
	uint64_t cd = (uint64_t)c->cooldown_ms * 1000000;

	return g->last_dump_ns && cd && now - g->last_dump_ns < cd;
}

/* A share of the global bucket: a quarter of it, at least one token. */
static double global_share(uint32_t per_min)
{
	return per_min < 2 ? 0 : VMT_MAX(1.0, per_min / 4.0);
}

bool trigger_take(struct vmt_trigger_policy *p, const struct vmt_trigger_conf *c,
		  struct vmt_trigger_budget *g, uint64_t now)
{
	uint32_t per_min = c->max_per_minute, own = c->per_guest_per_minute;
	double floor = 0;

	if (g) {
		/* a guest whose own budget is full (it caused no dump for a
		 * minute) leaves the detectors' share; one that has been
		 * causing dumps leaves the quiet guests' as well */
		bool full = true;

		if (own) {
			bucket_fill(&g->own, own, now);
			full = g->own.tokens >= own;
			if (g->own.tokens < 1)
				return false;
		}
		floor = global_share(per_min) * (full ? 1 : 2);
	}
	if (per_min) {
		bucket_fill(&p->global, per_min, now);
		if (p->global.tokens - 1 < floor)
			return false;
		p->global.tokens -= 1;
	}
	if (g && own)
		g->own.tokens -= 1;
	return true;
}
