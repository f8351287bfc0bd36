/* SPDX-License-Identifier: MIT */
/*
 * Clock sync: the estimate from probes, the guest -> host mapping (which
 * must agree with trace-cmd's TIME_SHIFT arithmetic), the CLOCK section
 * codec and its bounds, and the SYNC/SYNCED messages.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clocksync.h"
#include "proto.h"
#include "testutil.h"
#include "util.h"
#include "vfile.h"

/* A probe of a guest whose clock is host + skew, delays d1 there, d2 back. */
static struct vmt_sync_probe probe(uint64_t t1, int64_t skew, uint64_t d1, uint64_t d2, uint64_t work)
{
	uint64_t t2 = (uint64_t)((int64_t)(t1 + d1) + skew);

	return (struct vmt_sync_probe){ t1, t2, t2 + work, t1 + d1 + work + d2 };
}

START_TEST(test_estimate_symmetric)
{
	struct vmt_sync_probe p[8];
	struct vmt_sync_point pt;

	for (int i = 0; i < 8; i++)
		p[i] = probe(1000000 + i * 100000, 5000000000ll, 40000 + i * 10000, 40000 + i * 10000, 3000);
	ck_assert_int_eq(clocksync_estimate(p, 8, &pt), 0);
	/* host = guest + offset */
	ck_assert_int_eq(pt.offset, -5000000000ll);
	ck_assert_uint_eq(pt.rtt, 80000);	/* the fastest kept */
	ck_assert_uint_eq(pt.probes, 2);	/* a quarter of 8 */
	ck_assert_uint_eq(pt.cpu, VMT_SYNC_ALL_CPUS);
	/* the guest midpoint of one of the two kept */
	ck_assert(pt.guest_ts == 5000000000ull + 1000000 + 40000 + 1500 ||
		  pt.guest_ts == 5000000000ull + 1100000 + 50000 + 1500);
}
END_TEST

START_TEST(test_estimate_slow_probes_left_out)
{
	struct vmt_sync_probe p[8];
	struct vmt_sync_point pt;

	/* one fast symmetric probe; the others queued 5 ms on the way in only */
	p[0] = probe(0, -777, 20000, 20000, 1000);
	for (int i = 1; i < 8; i++)
		p[i] = probe((uint64_t)i * 1000000, -777, 5000000, 20000, 1000);
	ck_assert_int_eq(clocksync_estimate(p, 8, &pt), 0);
	ck_assert_int_eq(pt.offset, 777);
	ck_assert_uint_eq(pt.probes, 1);
}
END_TEST

START_TEST(test_estimate_refuses_nonsense)
{
	struct vmt_sync_probe p[2] = {
		{ .t1 = 100, .t2 = 50, .t3 = 40, .t4 = 200 },	/* t3 < t2 */
		{ .t1 = 100, .t2 = 0, .t3 = 500, .t4 = 200 },	/* guest longer than the round trip */
	};
	struct vmt_sync_point pt;

	ck_assert_int_eq(clocksync_estimate(p, 2, &pt), -EINVAL);
	ck_assert_int_eq(clocksync_estimate(p, 0, &pt), -EINVAL);
}
END_TEST

/* trace-cmd 3.1's timestamp_correction_calc + timestamp_host_sync, by hand */
START_TEST(test_to_host_interpolates)
{
	struct vmt_sync_point pts[3] = {
		{ .guest_ts = 1000, .offset = 100, .cpu = VMT_SYNC_ALL_CPUS },
		{ .guest_ts = 2000, .offset = 200, .cpu = VMT_SYNC_ALL_CPUS },
		{ .guest_ts = 4000, .offset = 0, .cpu = VMT_SYNC_ALL_CPUS },
	};
	struct vmt_clock_info ci = { .points = pts, .npoints = 3 };

	ck_assert_uint_eq(clocksync_to_host(&ci, 0, 1500), 1500 + 150);
	/* -99.5 truncates to -99 in trace-cmd's (offset + delta / 2) / delta */
	ck_assert_uint_eq(clocksync_to_host(&ci, 1, 3000), 3000 + 101);
	ck_assert_uint_eq(clocksync_to_host(&ci, 0, 500), 500 + 51);	/* before: first pair */
	ck_assert_uint_eq(clocksync_to_host(&ci, 0, 5000), 5000 - 99);	/* after: last pair */
	ci.npoints = 1;
	ck_assert_uint_eq(clocksync_to_host(&ci, 0, 5000), 5100);
	ci.npoints = 0;
	ck_assert_uint_eq(clocksync_to_host(&ci, 0, 5000), 5000);
}
END_TEST

START_TEST(test_to_host_per_cpu)
{
	struct vmt_sync_point pts[2] = {
		{ .guest_ts = 1000, .offset = -10, .cpu = 0 },
		{ .guest_ts = 1000, .offset = -20, .cpu = 1 },
	};
	struct vmt_clock_info ci = { .points = pts, .npoints = 2 };

	ck_assert_uint_eq(clocksync_to_host(&ci, 0, 5000), 4990);
	ck_assert_uint_eq(clocksync_to_host(&ci, 1, 5000), 4980);
	ck_assert_uint_eq(clocksync_to_host(&ci, 2, 5000), 5000);
}
END_TEST

static void make_info(struct vmt_clock_info *ci, uint32_t n)
{
	memset(ci, 0, sizeof(*ci));
	ci->method = VMT_SYNC_PTP;
	strcpy(ci->guest_clock, "mono");
	strcpy(ci->host_clock, "mono");
	ci->qemu_pid = 4242;
	ci->nvcpus = 2;
	ci->vcpu_tid[0] = 4243;
	ci->vcpu_tid[1] = 4244;
	ci->npoints = n;
	ci->points = calloc(n ? n : 1, sizeof(*ci->points));
	for (uint32_t i = 0; i < n; i++)
		ci->points[i] = (struct vmt_sync_point){ 1000 + i, -(int64_t)i, 50000, VMT_SYNC_ALL_CPUS, 2 };
}

START_TEST(test_codec_round_trip)
{
	struct vmt_clock_info a, b;
	struct vmt_buf buf = { 0 };
	char why[128];

	make_info(&a, 5);
	ck_assert_int_eq(clock_info_put(&buf, &a), 0);
	ck_assert_int_eq(clock_info_parse(buf.data, buf.len, &b, why, sizeof(why)), 0);
	ck_assert_uint_eq(b.method, VMT_SYNC_PTP);
	ck_assert_str_eq(b.guest_clock, "mono");
	ck_assert_uint_eq(b.qemu_pid, 4242);
	ck_assert_uint_eq(b.nvcpus, 2);
	ck_assert_uint_eq(b.vcpu_tid[1], 4244);
	ck_assert_uint_eq(b.npoints, 5);
	ck_assert_int_eq(memcmp(a.points, b.points, 5 * sizeof(*a.points)), 0);
	/* every truncation is refused, never read past */
	for (size_t n = 0; n < buf.len; n++) {
		struct vmt_clock_info c;
		if (clock_info_parse(buf.data, n, &c, why, sizeof(why)) == 0)
			clock_info_free(&c);
	}
	clock_info_free(&a);
	clock_info_free(&b);
	buf_free(&buf);
}
END_TEST

START_TEST(test_codec_bounds)
{
	struct vmt_clock_info a, b;
	struct vmt_buf buf = { 0 };
	char why[128];

	make_info(&a, 3);
	a.points[2].guest_ts = 0;	/* out of order */
	ck_assert_int_eq(clock_info_put(&buf, &a), 0);
	ck_assert_int_eq(clock_info_parse(buf.data, buf.len, &b, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "sync points out of order");
	clock_info_free(&a);

	make_info(&a, VMT_SYNC_MAX_POINTS + 1);
	ck_assert_int_eq(clock_info_put(&buf, &a), -EINVAL);
	clock_info_free(&a);

	make_info(&a, 1);
	a.method = 7;
	buf.len = 0;
	ck_assert_int_eq(clock_info_put(&buf, &a), 0);
	ck_assert_int_eq(clock_info_parse(buf.data, buf.len, &b, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "unknown sync method");
	clock_info_free(&a);
	buf_free(&buf);
}
END_TEST

START_TEST(test_sync_messages)
{
	struct vmt_buf b = { 0 };
	struct vmt_synced in = { .id = 9, .t2 = 11, .t3 = 12, .status = -EOPNOTSUPP }, out;
	struct vmt_sync s = { .id = 7, .flags = VMT_SYNC_F_MARKER }, s2;

	ck_assert_int_eq(proto_put_sync(&b, &s), 0);
	ck_assert_int_eq(proto_get_sync(b.data + VMT_PROTO_HDR_SIZE, 16, &s2), 0);
	ck_assert_uint_eq(s2.id, 7);
	ck_assert_uint_eq(s2.flags, VMT_SYNC_F_MARKER);
	b.len = 0;
	ck_assert_int_eq(proto_put_synced(&b, &in), 0);
	ck_assert_int_eq(proto_get_synced(b.data + VMT_PROTO_HDR_SIZE, 32, &out), 0);
	ck_assert_uint_eq(out.t3, 12);
	ck_assert_int_eq(out.status, -EOPNOTSUPP);
	/* a positive status, or one past any errno, is not an answer */
	put_le32(b.data + VMT_PROTO_HDR_SIZE + 24, 5);
	ck_assert_int_eq(proto_get_synced(b.data + VMT_PROTO_HDR_SIZE, 32, &out), -EBADMSG);
	ck_assert_int_eq(proto_check_len(VMT_MSG_SYNCED, 31), -EBADMSG);
	buf_free(&b);
}
END_TEST

START_TEST(test_trace_clock_source)
{
	int src;

	ck_assert_int_eq(trace_clock_source("mono", &src), 0);
	ck_assert_int_eq(trace_clock_source("boot", &src), 0);
	ck_assert_int_eq(trace_clock_source("local", &src), -EOPNOTSUPP);
	ck_assert_int_eq(trace_clock_source("global", &src), -EOPNOTSUPP);
	ck_assert_int_eq(trace_clock_source("mono", &src), 0);
	ck_assert_uint_ge(trace_clock_now(src) + 1000000000ull, now_monotonic_ns());
}
END_TEST

int main(void)
{
	Suite *s = suite_create("clocksync");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_estimate_symmetric);
	tcase_add_test(tc, test_estimate_slow_probes_left_out);
	tcase_add_test(tc, test_estimate_refuses_nonsense);
	tcase_add_test(tc, test_to_host_interpolates);
	tcase_add_test(tc, test_to_host_per_cpu);
	tcase_add_test(tc, test_codec_round_trip);
	tcase_add_test(tc, test_codec_bounds);
	tcase_add_test(tc, test_sync_messages);
	tcase_add_test(tc, test_trace_clock_source);
	suite_add_tcase(s, tc);
	return test_run_suite(s);
}
