/* SPDX-License-Identifier: MIT */
/*
 * The guest control protocol (lib/proto.h): the receive framer and every
 * decoder, on bytes as a hostile guest could write them to agent-ctl-path.
 *
 * Decoders: proto_get_hello, _start, _flushed, _sync, _synced, _prev_begin; a decoder
 * added to proto.h belongs in drain() below.
 *
 * Input: 4 bytes of chunk sizes, then the stream. The stream is fed to the
 * framer in chunks of those sizes in turn (0 = all that fits), as reads of
 * a port would hand it over; every message handed out goes through every
 * decoder, whatever its type, and a decoded message must survive
 * encode/decode unchanged.
 */
#include <string.h>

#include "fuzz.h"
#include "proto.h"
#include "util.h"

#define CHUNK_HDR 4

static struct vmt_proto_rx rx;	/* 64 KiB: not on the stack */
static struct vmt_cpu_stats st[VMT_MAX_CPUS], st2[VMT_MAX_CPUS];

static void check_hello(const struct vmt_msg *m)
{
	struct vmt_hello h, h2;
	struct vmt_buf b = { 0 };

	if (proto_get_hello(m->payload, m->len, &h) < 0)
		return;
	FUZZ_CHECK(m->len == VMT_HELLO_SIZE);
	FUZZ_CHECK(proto_put_hello(&b, &h) == 0);
	FUZZ_CHECK(b.len == VMT_PROTO_HDR_SIZE + VMT_HELLO_SIZE);
	FUZZ_CHECK(proto_get_hello(b.data + VMT_PROTO_HDR_SIZE, VMT_HELLO_SIZE, &h2) == 0);
	/* field by field: the struct has padding */
	FUZZ_CHECK(h.version == h2.version && h.ncpus == h2.ncpus && h.page_size == h2.page_size &&
		   h.flags == h2.flags && h.mono_ns == h2.mono_ns && h.echo == h2.echo &&
		   !memcmp(h.release, h2.release, sizeof(h.release)) &&
		   !memcmp(h.clock, h2.clock, sizeof(h.clock)) &&
		   !memcmp(h.boot_id, h2.boot_id, sizeof(h.boot_id)) &&
		   !memcmp(h.agent, h2.agent, sizeof(h.agent)));
	buf_free(&b);
}

static void check_start(const struct vmt_msg *m)
{
	struct vmt_start s, s2;
	struct vmt_buf b = { 0 };

	if (proto_get_start(m->payload, m->len, &s) < 0)
		return;
	FUZZ_CHECK(s.events_len == m->len - VMT_START_FIXED);
	FUZZ_CHECK(s.events == (const char *)m->payload + VMT_START_FIXED);
	if (s.events_len > 4096)	/* the framer bounds START, not the decoder */
		return;
	FUZZ_CHECK(proto_put_start(&b, &s) == 0);
	FUZZ_CHECK(proto_get_start(b.data + VMT_PROTO_HDR_SIZE, (uint32_t)b.len - VMT_PROTO_HDR_SIZE,
				   &s2) == 0);
	FUZZ_CHECK(s.buffer_kb == s2.buffer_kb && s.flags == s2.flags &&
		   !memcmp(s.clock, s2.clock, sizeof(s.clock)) && s.events_len == s2.events_len &&
		   !memcmp(s.events, s2.events, s.events_len));
	buf_free(&b);
}

static void check_flushed(const struct vmt_msg *m)
{
	struct vmt_buf b = { 0 };
	uint64_t id, id2;
	uint32_t n, n2;

	if (proto_get_flushed(m->payload, m->len, &id, &n, st) < 0)
		return;
	FUZZ_CHECK(n <= VMT_MAX_CPUS && m->len == 16 + n * VMT_CPU_STATS_SIZE);
	FUZZ_CHECK(proto_put_flushed(&b, id, n, st) == 0);
	FUZZ_CHECK(proto_get_flushed(b.data + VMT_PROTO_HDR_SIZE, (uint32_t)b.len - VMT_PROTO_HDR_SIZE,
				     &id2, &n2, st2) == 0);
	FUZZ_CHECK(id == id2 && n == n2 && !memcmp(st, st2, n * sizeof(*st)));
	buf_free(&b);
}

static void check_sync(const struct vmt_msg *m)
{
	struct vmt_sync s, s2;
	struct vmt_buf b = { 0 };

	if (proto_get_sync(m->payload, m->len, &s) < 0)
		return;
	FUZZ_CHECK(m->len == 16 && s.reserved == 0);
	FUZZ_CHECK(proto_put_sync(&b, &s) == 0);
	FUZZ_CHECK(proto_get_sync(b.data + VMT_PROTO_HDR_SIZE, (uint32_t)b.len - VMT_PROTO_HDR_SIZE,
				  &s2) == 0);
	FUZZ_CHECK(s.id == s2.id && s.flags == s2.flags);
	buf_free(&b);
}

static void check_synced(const struct vmt_msg *m)
{
	struct vmt_synced s, s2;
	struct vmt_buf b = { 0 };

	if (proto_get_synced(m->payload, m->len, &s) < 0)
		return;
	FUZZ_CHECK(m->len == 32 && s.status <= 0 && s.status > -4096);
	FUZZ_CHECK(proto_put_synced(&b, &s) == 0);
	FUZZ_CHECK(proto_get_synced(b.data + VMT_PROTO_HDR_SIZE,
				    (uint32_t)b.len - VMT_PROTO_HDR_SIZE, &s2) == 0);
	FUZZ_CHECK(s.id == s2.id && s.t2 == s2.t2 && s.t3 == s2.t3 && s.status == s2.status);
	buf_free(&b);
}

static void check_prev_begin(const struct vmt_msg *m)
{
	struct vmt_prev_begin p, p2;
	struct vmt_buf b = { 0 };

	if (proto_get_prev_begin(m->payload, m->len, &p) < 0)
		return;
	FUZZ_CHECK(m->len == VMT_PREV_BEGIN_SIZE && p.ncpus && p.ncpus <= VMT_MAX_CPUS &&
		   !(p.flags & ~(uint32_t)VMT_PREV_FLAGS));
	FUZZ_CHECK(proto_put_prev_begin(&b, &p) == 0);
	FUZZ_CHECK(proto_get_prev_begin(b.data + VMT_PROTO_HDR_SIZE,
					(uint32_t)b.len - VMT_PROTO_HDR_SIZE, &p2) == 0);
	FUZZ_CHECK(p.ncpus == p2.ncpus && p.flags == p2.flags && p.text_delta == p2.text_delta &&
		   p.data_delta == p2.data_delta && p.pages == p2.pages &&
		   p.cpus_lost == p2.cpus_lost && p.top_gap_kib == p2.top_gap_kib);
	buf_free(&b);
}

static void drain(void)
{
	struct vmt_msg m;

	while (proto_rx_next(&rx, &m) == 1) {
		FUZZ_CHECK(proto_check_len(m.type, m.len) == 0);
		FUZZ_CHECK(m.payload == rx.buf + rx.off + VMT_PROTO_HDR_SIZE);
		FUZZ_CHECK(VMT_PROTO_HDR_SIZE + (size_t)m.len <= rx.len - rx.off);
		FUZZ_CHECK(strcmp(proto_msg_name(m.type), "UNKNOWN"));
		/* every decoder on every message: a decoder must not trust the type */
		check_hello(&m);
		check_start(&m);
		check_flushed(&m);
		check_sync(&m);
		check_synced(&m);
		check_prev_begin(&m);
	}
	FUZZ_CHECK(rx.off <= rx.len && rx.len <= sizeof(rx.buf));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t chunks[CHUNK_HDR] = { 0, 0, 0, 0 };
	size_t pos = 0, k = 0, abandons = 0;

	if (size >= CHUNK_HDR) {
		memcpy(chunks, data, CHUNK_HDR);
		data += CHUNK_HDR;
		size -= CHUNK_HDR;
	}
	proto_rx_init(&rx);
	while (pos < size) {
		size_t room, want = chunks[k++ % CHUNK_HDR];
		uint8_t *sp = proto_rx_space(&rx, &room);

		/* after a drain the framer holds less than one message: never full */
		FUZZ_CHECK(room > 0);
		FUZZ_CHECK(sp == rx.buf + rx.len);
		if (!want || want > room)
			want = room;
		if (want > size - pos)
			want = size - pos;
		memcpy(sp, data + pos, want);
		proto_rx_wrote(&rx, want);
		pos += want;
		drain();
		/* a chunk size with its top bit set: the writer "went away" here */
		if (chunks[(k - 1) % CHUNK_HDR] & 0x80) {
			size_t held = proto_rx_partial(&rx);
			uint64_t rej = rx.rejected_bytes;

			proto_rx_abandon(&rx);
			abandons++;
			FUZZ_CHECK(held ? rx.rejected_bytes > rej : rx.rejected_bytes == rej);
			FUZZ_CHECK(proto_rx_partial(&rx) < held || !held);
			drain();
		}
	}
	drain();
	FUZZ_CHECK(rx.rejected_bytes <= size);
	/* linear: compaction moves a byte once, but for a message given up
	 * (each abandon may move what is held behind its first byte again) */
	FUZZ_CHECK(rx.moved_bytes <= size * (abandons + 1));
	return 0;
}
