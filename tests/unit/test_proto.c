/* SPDX-License-Identifier: MIT */
/* proto: encoders, decoders and the framer against malformed input. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "meta.h"
#include "proto.h"
#include "testutil.h"
#include "util.h"

static struct vmt_proto_rx *rx;

static void setup(void)
{
	rx = malloc(sizeof(*rx));
	proto_rx_init(rx);
}

static void teardown(void)
{
	free(rx);
}

static void feed(const void *p, size_t n)
{
	size_t room;
	uint8_t *dst = proto_rx_space(rx, &room);

	ck_assert_uint_ge(room, n);
	memcpy(dst, p, n);
	proto_rx_wrote(rx, n);
}

static struct vmt_hello hello(void)
{
	struct vmt_hello h = { .version = VMT_PROTO_VERSION, .ncpus = 2, .page_size = 4096,
			       .mono_ns = 123, .echo = 0xfeed };

	strcpy(h.release, "6.1.0-56-cloud-amd64");
	strcpy(h.clock, "mono");
	strcpy(h.boot_id, "0b3b7e0e-2c8a-4a5e-9f0e-6d5d3c2b1a09");
	strcpy(h.agent, "vmtrace-agent 0.1.0");
	return h;
}

START_TEST(hello_round_trip)
{
	struct vmt_buf b = { 0 };
	struct vmt_hello h = hello(), g;
	struct vmt_msg m;

	ck_assert_int_eq(proto_put_hello(&b, &h), 0);
	ck_assert_uint_eq(b.len, VMT_PROTO_HDR_SIZE + VMT_HELLO_SIZE);
	feed(b.data, b.len);
	ck_assert_int_eq(proto_rx_next(rx, &m), 1);
	ck_assert_uint_eq(m.type, VMT_MSG_HELLO);
	ck_assert_int_eq(proto_get_hello(m.payload, m.len, &g), 0);
	ck_assert_uint_eq(g.ncpus, 2);
	ck_assert_uint_eq(g.mono_ns, 123);
	ck_assert_uint_eq(g.echo, 0xfeed);
	ck_assert_str_eq(g.release, h.release);
	ck_assert_str_eq(g.boot_id, h.boot_id);
	ck_assert_str_eq(g.agent, h.agent);
	ck_assert_int_eq(proto_rx_next(rx, &m), 0);
	buf_free(&b);
}
END_TEST

START_TEST(hello_rejects_bad_fields)
{
	struct vmt_buf b = { 0 };
	struct vmt_hello h = hello(), g;
	uint8_t *p;

	proto_put_hello(&b, &h);
	p = b.data + VMT_PROTO_HDR_SIZE;
	put_le32(p + 4, 0);	/* no CPUs */
	ck_assert_int_eq(proto_get_hello(p, VMT_HELLO_SIZE, &g), -EBADMSG);
	put_le32(p + 4, VMT_MAX_CPUS + 1);
	ck_assert_int_eq(proto_get_hello(p, VMT_HELLO_SIZE, &g), -EBADMSG);
	put_le32(p + 4, 2);
	put_le32(p + 8, 4097);	/* not a power of two */
	ck_assert_int_eq(proto_get_hello(p, VMT_HELLO_SIZE, &g), -EBADMSG);
	put_le32(p + 8, 4096);
	memset(p + 24, 'x', VMT_STR_RELEASE);	/* no NUL */
	ck_assert_int_eq(proto_get_hello(p, VMT_HELLO_SIZE, &g), -EBADMSG);
	memset(p + 24, 0, VMT_STR_RELEASE);
	p[24] = '\n';	/* not printable: it would end up in logs */
	ck_assert_int_eq(proto_get_hello(p, VMT_HELLO_SIZE, &g), -EBADMSG);
	ck_assert_int_eq(proto_get_hello(p, VMT_HELLO_SIZE - 1, &g), -EBADMSG);
	buf_free(&b);
}
END_TEST

START_TEST(start_round_trip)
{
	struct vmt_buf b = { 0 };
	struct vmt_start s = { .buffer_kb = 4096, .events = "sched:*,irq:*", .events_len = 13 }, t;
	struct vmt_msg m;

	strcpy(s.clock, "mono");
	ck_assert_int_eq(proto_put_start(&b, &s), 0);
	feed(b.data, b.len);
	ck_assert_int_eq(proto_rx_next(rx, &m), 1);
	ck_assert_int_eq(proto_get_start(m.payload, m.len, &t), 0);
	ck_assert_uint_eq(t.buffer_kb, 4096);
	ck_assert_str_eq(t.clock, "mono");
	ck_assert_uint_eq(t.events_len, 13);
	ck_assert_mem_eq(t.events, "sched:*,irq:*", 13);
	/* events_len that disagrees with the payload */
	put_le32((uint8_t *)m.payload + 40, 14);
	ck_assert_int_eq(proto_get_start(m.payload, m.len, &t), -EBADMSG);
	buf_free(&b);
}
END_TEST

START_TEST(flushed_round_trip)
{
	struct vmt_buf b = { 0 };
	struct vmt_cpu_stats st[3] = { { .bytes_sent = 8192, .read = 5 }, { .overrun = 7 },
				       { .now_ts = 99 } };
	struct vmt_cpu_stats *got = calloc(VMT_MAX_CPUS, sizeof(*got));
	struct vmt_msg m;
	uint64_t id;
	uint32_t n;

	ck_assert_int_eq(proto_put_flushed(&b, 42, 3, st), 0);
	feed(b.data, b.len);
	ck_assert_int_eq(proto_rx_next(rx, &m), 1);
	ck_assert_int_eq(proto_get_flushed(m.payload, m.len, &id, &n, got), 0);
	ck_assert_uint_eq(id, 42);
	ck_assert_uint_eq(n, 3);
	ck_assert_uint_eq(got[0].bytes_sent, 8192);
	ck_assert_uint_eq(got[0].read, 5);
	ck_assert_uint_eq(got[1].overrun, 7);
	ck_assert_uint_eq(got[2].now_ts, 99);
	ck_assert_int_eq(proto_get_flushed(m.payload, m.len - 8, &id, &n, got), -EBADMSG);
	free(got);
	buf_free(&b);
}
END_TEST

/* The previous boot's set: PREV_BEGIN checked whole, PREV_PAGES bounded. */
START_TEST(prev_round_trip)
{
	struct vmt_buf b = { 0 };
	struct vmt_prev_begin pb = { .ncpus = 2, .flags = VMT_PREV_FLAGS, .text_delta = -0x200000,
				     .data_delta = 7, .pages = 35, .cpus_lost = 0x2,
				     .top_gap_kib = 14208 }, got;
	uint8_t bad[VMT_PREV_BEGIN_SIZE];
	struct vmt_msg m;

	ck_assert_int_eq(proto_put_prev_begin(&b, &pb), 0);
	feed(b.data, b.len);
	ck_assert_int_eq(proto_rx_next(rx, &m), 1);
	ck_assert_uint_eq(m.type, VMT_MSG_PREV_BEGIN);
	ck_assert_int_eq(proto_get_prev_begin(m.payload, m.len, &got), 0);
	ck_assert_uint_eq(got.ncpus, 2);
	ck_assert_uint_eq(got.flags, VMT_PREV_FLAGS);
	ck_assert_uint_eq(got.cpus_lost, 0x2);
	ck_assert_uint_eq(got.top_gap_kib, 14208);
	ck_assert(got.text_delta == -0x200000);
	ck_assert(got.data_delta == 7);
	ck_assert_uint_eq(got.pages, 35);
	ck_assert_int_eq(proto_get_prev_begin(m.payload, m.len - 1, &got), -EBADMSG);
	memcpy(bad, m.payload, sizeof(bad));
	put_le32(bad, 0);	/* no CPU */
	ck_assert_int_eq(proto_get_prev_begin(bad, sizeof(bad), &got), -EBADMSG);
	put_le32(bad, VMT_MAX_CPUS + 1);
	ck_assert_int_eq(proto_get_prev_begin(bad, sizeof(bad), &got), -EBADMSG);
	memcpy(bad, m.payload, sizeof(bad));
	put_le32(bad + 4, 0x8);	/* a flag this version does not know */
	ck_assert_int_eq(proto_get_prev_begin(bad, sizeof(bad), &got), -EBADMSG);
	memcpy(bad, m.payload, sizeof(bad));
	put_le32(bad + 36, 1);	/* reserved */
	ck_assert_int_eq(proto_get_prev_begin(bad, sizeof(bad), &got), -EBADMSG);
	/* a page set: a cpu, a count, at least one smallest page; at most 64 KiB */
	ck_assert_int_eq(proto_check_len(VMT_MSG_PREV_PAGES, 8 + 256), 0);
	ck_assert_int_eq(proto_check_len(VMT_MSG_PREV_PAGES, 8), -EBADMSG);
	ck_assert_int_eq(proto_check_len(VMT_MSG_PREV_PAGES, 8 + VMT_PREV_PAGES_MAX * 4096), 0);
	ck_assert_int_eq(proto_check_len(VMT_MSG_PREV_END, 8), 0);
	ck_assert_int_eq(proto_check_len(VMT_MSG_PREV_END, 9), -EBADMSG);
	buf_free(&b);
}
END_TEST

/* One byte at a time, with garbage in front and between. */
START_TEST(framer_resyncs_on_garbage)
{
	struct vmt_buf b = { 0 };
	struct vmt_hello h = hello();
	struct vmt_msg m;
	int got = 0;

	buf_append(&b, "garbage!VMT", 11);
	proto_put_hello(&b, &h);
	buf_append(&b, "\x56\x4d\x54", 3);	/* a torn magic */
	proto_put(&b, VMT_MSG_STOPPED, NULL, 0);
	for (size_t i = 0; i < b.len; i++) {
		feed(b.data + i, 1);
		while (proto_rx_next(rx, &m) > 0) {
			ck_assert_int_eq(proto_check_len(m.type, m.len), 0);
			ck_assert_uint_eq(m.type, got == 0 ? VMT_MSG_HELLO : VMT_MSG_STOPPED);
			got++;
		}
	}
	ck_assert_int_eq(got, 2);
	ck_assert_uint_eq(rx->rejected_bytes, 14);
	buf_free(&b);
}
END_TEST

/* A writer that died 10 bytes into a 64 KiB message, then a new one's HELLO:
 * the framer waits for the rest until told to give the message up, then
 * finds the HELLO inside what it held. */
START_TEST(framer_abandons_an_unfinished_message)
{
	struct vmt_buf b = { 0 };
	struct vmt_hello h = hello(), got;
	struct vmt_msg m;
	uint8_t hdr[VMT_PROTO_HDR_SIZE + 10] = { 0 };

	put_le32(hdr, VMT_PROTO_MAGIC);
	put_le16(hdr + 4, VMT_PROTO_VERSION);
	put_le16(hdr + 6, VMT_MSG_META_DATA);
	put_le32(hdr + 8, VMT_PROTO_MAX_PAYLOAD);
	buf_append(&b, hdr, sizeof(hdr));
	h.echo = 0;
	proto_put_hello(&b, &h);
	feed(b.data, b.len);
	ck_assert_int_eq(proto_rx_next(rx, &m), 0);
	ck_assert_uint_eq(proto_rx_partial(rx), b.len);
	ck_assert_uint_eq(rx->rejected_bytes, 0);

	proto_rx_abandon(rx);
	ck_assert_uint_eq(rx->rejected_bytes, sizeof(hdr));
	ck_assert_uint_eq(rx->rejected_msgs, 1);
	ck_assert_int_eq(rx->last_error, -ETIMEDOUT);
	ck_assert_int_eq(proto_rx_next(rx, &m), 1);
	ck_assert_uint_eq(m.type, VMT_MSG_HELLO);
	ck_assert_int_eq(proto_get_hello(m.payload, m.len, &got), 0);
	ck_assert_str_eq(got.release, h.release);
	ck_assert_int_eq(proto_rx_next(rx, &m), 0);
	ck_assert_uint_eq(proto_rx_partial(rx), 0);

	/* nothing held: nothing to give up */
	proto_rx_abandon(rx);
	ck_assert_uint_eq(rx->rejected_bytes, sizeof(hdr));
	/* a half message with no header after it goes whole */
	feed(hdr, sizeof(hdr));
	ck_assert_int_eq(proto_rx_next(rx, &m), 0);
	proto_rx_abandon(rx);
	ck_assert_uint_eq(rx->rejected_bytes, 2 * sizeof(hdr));
	ck_assert_uint_eq(proto_rx_partial(rx), 0);
	buf_free(&b);
}
END_TEST

START_TEST(framer_rejects_bad_headers)
{
	uint8_t h[VMT_PROTO_HDR_SIZE];
	struct vmt_buf b = { 0 };
	struct vmt_msg m;

	/* oversize length */
	put_le32(h, VMT_PROTO_MAGIC);
	put_le16(h + 4, VMT_PROTO_VERSION);
	put_le16(h + 6, VMT_MSG_META_DATA);
	put_le32(h + 8, VMT_PROTO_MAX_PAYLOAD + 1);
	put_le32(h + 12, 0);
	feed(h, sizeof(h));
	ck_assert_int_eq(proto_rx_next(rx, &m), 0);
	ck_assert_uint_eq(rx->rejected_msgs, 1);
	/* wrong version */
	put_le32(h + 8, 1);
	put_le16(h + 4, 99);
	feed(h, sizeof(h));
	ck_assert_int_eq(proto_rx_next(rx, &m), 0);
	ck_assert_int_eq(rx->last_error, -EPROTONOSUPPORT);
	/* unknown type, and a HELLO of the wrong size */
	put_le16(h + 4, VMT_PROTO_VERSION);
	put_le16(h + 6, 77);
	feed(h, sizeof(h));
	put_le16(h + 6, VMT_MSG_HELLO);
	put_le32(h + 8, 10);
	feed(h, sizeof(h));
	ck_assert_int_eq(proto_rx_next(rx, &m), 0);
	/* and a good one still gets through */
	proto_put(&b, VMT_MSG_STOP, NULL, 0);
	feed(b.data, b.len);
	ck_assert_int_eq(proto_rx_next(rx, &m), 1);
	ck_assert_uint_eq(m.type, VMT_MSG_STOP);
	buf_free(&b);
}
END_TEST

START_TEST(framer_never_buffers_more_than_one_message)
{
	struct vmt_msg m;
	uint8_t junk[4096];
	size_t room;

	memset(junk, 'V', sizeof(junk));
	for (int i = 0; i < 100; i++) {
		uint8_t *dst = proto_rx_space(rx, &room);
		size_t n = VMT_MIN(room, sizeof(junk));
		memcpy(dst, junk, n);
		proto_rx_wrote(rx, n);
		while (proto_rx_next(rx, &m) > 0)
			ck_abort_msg("junk parsed as a message");
		ck_assert_uint_lt(rx->len - rx->off, 4);
	}
	ck_assert_uint_ge(rx->rejected_bytes, 100 * 4096 - 4);
}
END_TEST

/*
 * 64 KiB of the magic repeated: every 4 bytes a header that fails, and a
 * resync past it. Before, each skip moved the rest of the buffer (~0.5 GB
 * of memmove for 64 KiB); the bytes moved must now stay within what was
 * fed, and so must messages in a stream of the smallest ones.
 */
START_TEST(framer_work_is_linear)
{
	const size_t total = 64 << 10;
	uint8_t *junk = malloc(total), mg[4];
	struct vmt_buf b = { 0 };
	struct vmt_msg m;
	size_t fed = 0, room, got = 0, msgs = 0;

	ck_assert_ptr_nonnull(junk);
	put_le32(mg, VMT_PROTO_MAGIC);
	for (size_t i = 0; i < total; i += 4)
		memcpy(junk + i, mg, 4);
	while (fed < total) {
		uint8_t *dst = proto_rx_space(rx, &room);
		size_t n = VMT_MIN(room, VMT_MIN(total - fed, (size_t)4096));

		memcpy(dst, junk + fed, n);
		proto_rx_wrote(rx, n);
		fed += n;
		while (proto_rx_next(rx, &m) > 0)
			ck_abort_msg("magic bytes parsed as a message");
	}
	ck_assert_uint_le(rx->moved_bytes, total);
	ck_assert_uint_ge(rx->rejected_bytes, total - VMT_PROTO_HDR_SIZE);
	printf("framer: %zu bytes of magic: %llu rejected, %llu moved\n", total,
	       (unsigned long long)rx->rejected_bytes, (unsigned long long)rx->moved_bytes);

	/* 64 KiB of STOPs (header only), fed in reads of 4096 */
	proto_rx_init(rx);
	while (b.len < total)
		proto_put(&b, VMT_MSG_STOP, NULL, 0);
	for (fed = 0; fed < b.len;) {
		uint8_t *dst = proto_rx_space(rx, &room);
		size_t n = VMT_MIN(room, VMT_MIN(b.len - fed, (size_t)4096));

		memcpy(dst, b.data + fed, n);
		proto_rx_wrote(rx, n);
		fed += n;
		while (proto_rx_next(rx, &m) > 0)
			got++;
	}
	msgs = b.len / VMT_PROTO_HDR_SIZE;
	ck_assert_uint_eq(got, msgs);
	ck_assert_uint_eq(rx->rejected_bytes, 0);
	ck_assert_uint_le(rx->moved_bytes, b.len);
	buf_free(&b);
	free(junk);
}
END_TEST

START_TEST(random_streams_never_crash)
{
	struct vmt_buf b = { 0 };
	struct vmt_hello h = hello();
	struct vmt_msg m;

	srand(7);
	for (int round = 0; round < 2000; round++) {
		size_t room;
		uint8_t *dst;
		size_t n;

		b.len = 0;
		/* valid messages with random bytes flipped, and random lengths */
		proto_put_hello(&b, &h);
		proto_put(&b, VMT_MSG_FLUSH, "\1\2\3\4\5\6\7\10", 8);
		for (int k = 0; k < 3; k++)
			b.data[rand() % b.len] ^= (uint8_t)(1 << (rand() % 8));
		dst = proto_rx_space(rx, &room);
		n = VMT_MIN(room, b.len);
		memcpy(dst, b.data, n);
		proto_rx_wrote(rx, n);
		while (proto_rx_next(rx, &m) > 0)
			ck_assert_int_eq(proto_check_len(m.type, m.len), 0);
	}
	buf_free(&b);
}
END_TEST

START_TEST(meta_bundle_checks)
{
	struct vmt_buf b = { 0 };
	const char *why;
	struct vmt_meta_entry e;

	meta_add(&b, "events/header_page", "x", 1);
	meta_add(&b, "events/sched/sched_switch/format", "fmt", 3);
	meta_add(&b, "kallsyms", "", 0);
	ck_assert_int_eq(meta_validate(b.data, b.len, &why), 0);
	ck_assert_int_eq(meta_find(b.data, b.len, "events/sched/sched_switch/format", &e), 0);
	ck_assert_uint_eq(e.data_len, 3);
	ck_assert_int_eq(meta_find(b.data, b.len, "nope", &e), -ENOENT);
	/* every truncation inside an entry is refused; one at an entry boundary
	 * is a shorter valid bundle (the protocol's length and CRC catch it) */
	for (size_t n = 0; n < b.len; n++) {
		bool boundary = n == 8 + 18 + 1 || n == 8 + 18 + 1 + 8 + 32 + 3;
		ck_assert_int_eq(meta_validate(b.data, n, &why), boundary ? 0 : -EBADMSG);
	}
	/* bad names */
	const char *bad[] = { "../etc/passwd", "/abs", "a//b", "events/..", "sp ace", "x/../y" };
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct vmt_buf c = { 0 };
		meta_add(&c, "events/header_page", "x", 1);
		meta_add(&c, bad[i], "x", 1);
		ck_assert_msg(meta_validate(c.data, c.len, &why) == -EBADMSG, "%s accepted", bad[i]);
		buf_free(&c);
	}
	/* duplicates, and no header_page */
	meta_add(&b, "kallsyms", "", 0);
	ck_assert_int_eq(meta_validate(b.data, b.len, &why), -EBADMSG);
	ck_assert_str_eq(why, "duplicate file name");
	b.len = 0;
	meta_add(&b, "kallsyms", "", 0);
	ck_assert_int_eq(meta_validate(b.data, b.len, &why), -EBADMSG);
	buf_free(&b);
}
END_TEST

START_TEST(task_tables)
{
	static const char *const texts[] = { "1 init\n42 bash\n7 kworker/0:1\n", "junk\n42 vim\n\n99 x",
					     "18446744073709551616 big\n5 \n" };
	size_t lens[3];
	struct vmt_buf b = { 0 }, out = { 0 };
	const char *why;

	meta_add(&b, "saved_cmdlines", "1 init\n", 7);
	meta_add(&b, "saved_tgids", "1 1\n", 4);
	ck_assert_int_eq(meta_tasks_validate(b.data, b.len, &why), 0);
	ck_assert_int_eq(meta_tasks_validate(b.data, 0, &why), 0);
	ck_assert_int_eq(meta_tasks_validate(b.data, b.len - 1, &why), -EBADMSG);
	meta_add(&b, "saved_tgids", "", 0);
	ck_assert_int_eq(meta_tasks_validate(b.data, b.len, &why), -EBADMSG);
	ck_assert_str_eq(why, "task tables name a file twice");
	b.len = 0;
	meta_add(&b, "events/header_page", "x", 1);
	ck_assert_int_eq(meta_tasks_validate(b.data, b.len, &why), -EBADMSG);

	/* the later text's name wins; lines that are not "PID NAME" go */
	for (int i = 0; i < 3; i++)
		lens[i] = strlen(texts[i]);
	ck_assert_int_eq(meta_cmdlines_merge(&out, texts, lens, 3), 0);
	ck_assert_int_eq((int)out.len, (int)strlen("1 init\n7 kworker/0:1\n42 vim\n99 x\n"));
	ck_assert_mem_eq(out.data, "1 init\n7 kworker/0:1\n42 vim\n99 x\n", out.len);
	ck_assert_int_eq(meta_cmdlines_merge(&out, texts, lens, 0), 0);
	ck_assert_uint_eq(out.len, 0);
	buf_free(&b);
	buf_free(&out);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("proto");
	TCase *t = tcase_create("core");

	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, hello_round_trip);
	tcase_add_test(t, framer_abandons_an_unfinished_message);
	tcase_add_test(t, task_tables);
	tcase_add_test(t, hello_rejects_bad_fields);
	tcase_add_test(t, start_round_trip);
	tcase_add_test(t, flushed_round_trip);
	tcase_add_test(t, prev_round_trip);
	tcase_add_test(t, framer_resyncs_on_garbage);
	tcase_add_test(t, framer_rejects_bad_headers);
	tcase_add_test(t, framer_never_buffers_more_than_one_message);
	tcase_add_test(t, framer_work_is_linear);
	tcase_add_test(t, random_streams_never_crash);
	tcase_add_test(t, meta_bundle_checks);
	suite_add_tcase(s, t);
	return test_run_suite(s);
}
