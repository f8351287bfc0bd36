/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clocksync.h"
#include "util.h"
#include "tlv.h"
#include "vfile.h"

#define TAG_POINTS 0x10
#define TAG_VCPUS 0x11

static const struct vmt_tlv_field clock_fields[] = {
	VMT_TLV_FIELD(0x01, U32, struct vmt_clock_info, method),
	VMT_TLV_FIELD(0x02, STR, struct vmt_clock_info, guest_clock),
	VMT_TLV_FIELD(0x03, STR, struct vmt_clock_info, host_clock),
	VMT_TLV_FIELD(0x04, STR, struct vmt_clock_info, why),
	VMT_TLV_FIELD(0x05, U32, struct vmt_clock_info, qemu_pid),
};

const char *sync_method_name(uint32_t m)
{
	switch (m) {
#define X(n, v, t) case v: return t;
	VMT_SYNC_METHODS(X)
#undef X
	}
	return "unknown";
}

void clock_info_free(struct vmt_clock_info *ci)
{
	free(ci->points);
	ci->points = NULL;
	ci->npoints = 0;
}

struct measured {
	uint64_t rtt;
	int64_t offset;
	uint64_t guest_ts;
};

static int by_rtt(const void *a, const void *b)
{
	const struct measured *x = a, *y = b;

	return (x->rtt > y->rtt) - (x->rtt < y->rtt);
}

static int by_offset(const void *a, const void *b)
{
	const struct measured *x = a, *y = b;

	return (x->offset > y->offset) - (x->offset < y->offset);
}

int clocksync_estimate(const struct vmt_sync_probe *p, uint32_t n, struct vmt_sync_point *out)
{
	struct measured m[VMT_SYNC_MAX_PROBES];
	uint32_t ok = 0, kept = 1;
	uint64_t best;

	for (uint32_t i = 0; i < n && i < VMT_SYNC_MAX_PROBES; i++) {
		const struct vmt_sync_probe *q = &p[i];
		if (q->t4 < q->t1 || q->t3 < q->t2 || q->t3 - q->t2 > q->t4 - q->t1)
			continue;
		/* host = guest + offset: with symmetric delays the guest's midpoint
		 * (t2 + t3) / 2 happened at the host's (t1 + t4) / 2 */
		m[ok++] = (struct measured){
			.rtt = (q->t4 - q->t1) - (q->t3 - q->t2),
			.offset = (int64_t)((q->t1 - q->t2) + (q->t4 - q->t3)) / 2,
			.guest_ts = q->t2 / 2 + q->t3 / 2 + (q->t2 & q->t3 & 1),
		};
	}
	if (!ok)
		return -EINVAL;
	/* the fastest round trips waited least in queues, so carry the least
	 * asymmetry: keep those within 1.5 x the fastest, at most a quarter */
	qsort(m, ok, sizeof(m[0]), by_rtt);
	while (kept < VMT_MAX(1u, ok / 4) && m[kept].rtt <= m[0].rtt + m[0].rtt / 2)
		kept++;
	best = m[0].rtt;
	qsort(m, kept, sizeof(m[0]), by_offset);
	*out = (struct vmt_sync_point){
		.guest_ts = m[kept / 2].guest_ts,
		.offset = m[kept / 2].offset,
		.rtt = best,
		.cpu = VMT_SYNC_ALL_CPUS,
		.probes = kept,
	};
	return 0;
}

/* trace-cmd's timestamp_correction_calc(), without scaling */
static uint64_t shift(uint64_t ts, const struct vmt_sync_point *a, const struct vmt_sync_point *b)
{
	int64_t cor = a->offset;

	if (b && b->guest_ts != a->guest_ts) {
		int64_t delta = (int64_t)(b->guest_ts - a->guest_ts);
		__int128 o = (__int128)((int64_t)ts - (int64_t)a->guest_ts) * (b->offset - a->offset);
		cor = a->offset + (int64_t)((o + delta / 2) / delta);
	}
	return cor < 0 ? ts - (uint64_t)(-cor) : ts + (uint64_t)cor;
}

uint64_t clocksync_to_host(const struct vmt_clock_info *ci, uint32_t cpu, uint64_t ts)
{
	const struct vmt_sync_point *pts[2] = { 0 }, *prev = NULL;
	uint32_t n = 0;

	/* the points of this cpu (or of all), in order; keep the pair around ts */
	for (uint32_t i = 0; i < ci->npoints; i++) {
		const struct vmt_sync_point *q = &ci->points[i];
		if (q->cpu != VMT_SYNC_ALL_CPUS && q->cpu != cpu)
			continue;
		if (prev && q->guest_ts == prev->guest_ts)
			continue;
		n++;
		if (!pts[0]) {
			pts[0] = q;
		} else if (!pts[1]) {
			pts[1] = q;
		} else if (ts > pts[1]->guest_ts) {
			pts[0] = pts[1];
			pts[1] = q;
		}
		prev = q;
	}
	if (!n)
		return ts;
	return shift(ts, pts[0], pts[1]);
}

int clock_info_put(struct vmt_buf *b, const struct vmt_clock_info *ci)
{
	uint8_t rec[VMT_SYNC_POINT_SIZE];
	int r;

	if (ci->nvcpus > VMT_MAX_CPUS || ci->npoints > VMT_SYNC_MAX_POINTS)
		return -EINVAL;
	r = tlv_put_fields(b, clock_fields, ARRAY_SIZE(clock_fields), ci);
	if (r < 0)
		return r;
	{
		uint8_t v[4 * VMT_MAX_CPUS];
		for (uint32_t i = 0; i < ci->nvcpus; i++)
			put_le32(v + 4 * i, ci->vcpu_tid[i]);
		r = tlv_put(b, TAG_VCPUS, v, 4 * ci->nvcpus);
		if (r < 0)
			return r;
	}
	for (uint32_t i = 0; i < ci->npoints; i++) {
		const struct vmt_sync_point *p = &ci->points[i];
		put_le64(rec, p->guest_ts);
		put_le64(rec + 8, (uint64_t)p->offset);
		put_le64(rec + 16, p->rtt);
		put_le32(rec + 24, p->cpu);
		put_le32(rec + 28, p->probes);
		r = tlv_put(b, TAG_POINTS, rec, sizeof(rec));
		if (r < 0)
			return r;
	}
	return 0;
}

static int bad(char *why, size_t n, const char *msg)
{
	snprintf(why, n, "%s", msg);
	return -EBADMSG;
}

int clock_info_parse(const uint8_t *p, size_t len, struct vmt_clock_info *ci, char *why, size_t n)
{
	uint64_t seen = 0;
	size_t pos = 0, cap = 0;
	struct vmt_tlv t;
	bool vcpus = false;
	int r;

	memset(ci, 0, sizeof(*ci));
	while ((r = tlv_next(p, len, &pos, &t)) > 0) {
		if (t.tag == TAG_VCPUS) {
			if (vcpus || t.len % 4 || t.len / 4 > VMT_MAX_CPUS) {
				r = bad(why, n, "bad vcpu map");
				goto fail;
			}
			vcpus = true;
			ci->nvcpus = t.len / 4;
			for (uint32_t i = 0; i < ci->nvcpus; i++)
				ci->vcpu_tid[i] = get_le32(t.data + 4 * i);
			continue;
		}
		if (t.tag == TAG_POINTS) {
			struct vmt_sync_point q;
			if (t.len != VMT_SYNC_POINT_SIZE) {
				r = bad(why, n, "bad sync point size");
				goto fail;
			}
			if (ci->npoints == VMT_SYNC_MAX_POINTS) {
				r = bad(why, n, "more than 4096 sync points");
				goto fail;
			}
			q = (struct vmt_sync_point){
				.guest_ts = get_le64(t.data),
				.offset = (int64_t)get_le64(t.data + 8),
				.rtt = get_le64(t.data + 16),
				.cpu = get_le32(t.data + 24),
				.probes = get_le32(t.data + 28),
			};
			if (q.cpu != VMT_SYNC_ALL_CPUS && q.cpu >= VMT_MAX_CPUS) {
				r = bad(why, n, "sync point for a cpu out of range");
				goto fail;
			}
			if (ci->npoints && q.guest_ts < ci->points[ci->npoints - 1].guest_ts) {
				r = bad(why, n, "sync points out of order");
				goto fail;
			}
			if (ci->npoints == cap) {
				size_t nc = cap ? cap * 2 : 16;
				void *np = realloc(ci->points, nc * sizeof(*ci->points));
				if (!np) {
					r = -ENOMEM;
					goto fail;
				}
				ci->points = np;
				cap = nc;
			}
			ci->points[ci->npoints++] = q;
			continue;
		}
		r = tlv_get_field(&t, clock_fields, ARRAY_SIZE(clock_fields), ci, &seen, why, n);
		if (r < 0)
			goto fail;
	}
	if (r < 0) {
		bad(why, n, "record runs past the section");
		goto fail;
	}
	r = tlv_check_fields(clock_fields, ARRAY_SIZE(clock_fields), seen, why, n);
	if (r < 0)
		goto fail;
	if (ci->method > VMT_SYNC_KVM) {
		r = bad(why, n, "unknown sync method");
		goto fail;
	}
	return 0;
fail:
	clock_info_free(ci);
	return r;
}
