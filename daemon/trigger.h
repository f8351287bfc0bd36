/* SPDX-License-Identifier: MIT */
/*
 * trigger: the policy that decides whether an automatic dump may happen
 * now. An operator's dump (signal, vmtracectl) always happens; the BPF
 * detectors' and the guests' are held back by
 *   - a per-guest cooldown (triggers.cooldown_ms since its last dump),
 *   - a global bucket of triggers.max_per_minute,
 *   - for a dump a guest causes (TRIGGER, an oops line, a new boot, new
 *     events, a new shape), a bucket of its own (per_guest_per_minute),
 *     and it may not take the last quarter of the global bucket, kept for
 *     the detectors, nor (once it has spent some of its own in the last
 *     minute) the quarter before that, kept for the guests that have not.
 * Pure: no clock of its own (now is given), no logging.
 */
#ifndef VMT_TRIGGER_H
#define VMT_TRIGGER_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "sample.h"

/* per_min tokens a minute, refilled evenly; full at first use. */
struct vmt_bucket {
	double tokens;
	uint64_t at_ns;		/* CLOCK_MONOTONIC of the last fill, 0 = never */
};

void bucket_fill(struct vmt_bucket *b, uint32_t per_min, uint64_t now);
/* Take a token if there is one; per_min 0 is no limit (always true). */
bool bucket_take(struct vmt_bucket *b, uint32_t per_min, uint64_t now);
/* Seconds until the next token (0 if one is there). */
double bucket_wait_s(const struct vmt_bucket *b, uint32_t per_min);

/* What one guest has spent. */
struct vmt_trigger_budget {
	struct vmt_bucket own;	/* per_guest_per_minute */
	uint64_t last_dump_ns;	/* CLOCK_MONOTONIC of its last dump, 0 = none */
};

/* The daemon's. */
struct vmt_trigger_policy {
	struct vmt_bucket global;	/* max_per_minute */
};

/* Detectors' and guests' triggers are; an operator's are not. */
bool trigger_is_automatic(const struct vmt_trigger *t);
/* Its last dump is more recent than the cooldown. */
bool trigger_cooling(const struct vmt_trigger_conf *c, const struct vmt_trigger_budget *g,
		     uint64_t now);
/* May an automatic dump start now? A detector's (g NULL) may take every
 * global token; one a guest caused (g its budget) needs a token of its own
 * and leaves the shares. Takes the tokens if so. */
bool trigger_take(struct vmt_trigger_policy *p, const struct vmt_trigger_conf *c,
		  struct vmt_trigger_budget *g, uint64_t now);

#endif
