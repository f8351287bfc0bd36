/* SPDX-License-Identifier: MIT */
#include <errno.h>

#include "proto.h"
#include "util.h"

static const struct {
	const char *name;
	uint32_t min, max;
} msg_table[VMT_MSG_MAX_] = {
#define X(n, value, lo, hi) [value] = { #n, lo, hi },
	VMT_PROTO_MESSAGES(X)
#undef X
};

const char *proto_msg_name(unsigned type)
{
	if (type >= VMT_MSG_MAX_ || !msg_table[type].name)
		return "UNKNOWN";
	return msg_table[type].name;
}

int proto_check_len(unsigned type, uint32_t len)
{
	if (type >= VMT_MSG_MAX_ || !msg_table[type].name)
		return -EBADMSG;
	if (len < msg_table[type].min || len > msg_table[type].max)
		return -EBADMSG;
	return 0;
}

int proto_put(struct vmt_buf *out, unsigned type, const void *payload, uint32_t len)
{
	static uint32_t seq;	/* diagnostic only; a race just repeats a number */
	uint8_t h[VMT_PROTO_HDR_SIZE];
	int r;

	if (proto_check_len(type, len) < 0)
		return -EINVAL;
	put_le32(h, VMT_PROTO_MAGIC);
	put_le16(h + 4, VMT_PROTO_VERSION);
	put_le16(h + 6, (uint16_t)type);
	put_le32(h + 8, len);
	put_le32(h + 12, seq++);
	r = buf_reserve(out, sizeof(h) + len);
	if (r < 0)
		return r;
	buf_append(out, h, sizeof(h));
	return buf_append(out, payload, len);
}

static void put_str(uint8_t *dst, const char *s, size_t n)
{
	size_t l = strnlen(s, n - 1);

	memset(dst, 0, n);
	memcpy(dst, s, l);
}

/* A fixed-size string field from the wire: must hold a NUL and printable
 * characters only, since it ends up in logs and file names. */
static int get_str(char *dst, const uint8_t *src, size_t n)
{
	size_t l = strnlen((const char *)src, n);

	if (l == n)
		return -EBADMSG;
	for (size_t i = 0; i < l; i++)
		if (src[i] < 0x20 || src[i] > 0x7e)
			return -EBADMSG;
	memcpy(dst, src, l);
	memset(dst + l, 0, n - l);
	return 0;
}

int proto_put_hello(struct vmt_buf *out, const struct vmt_hello *h)
{
	uint8_t p[VMT_HELLO_SIZE] = { 0 };

	put_le32(p, h->version);
	put_le32(p + 4, h->ncpus);
	put_le32(p + 8, h->page_size);
	put_le32(p + 12, h->flags);
	put_le64(p + 16, h->mono_ns);
	put_str(p + 24, h->release, VMT_STR_RELEASE);
	put_str(p + 89, h->clock, VMT_STR_CLOCK);
	put_str(p + 121, h->boot_id, VMT_STR_BOOTID);
	put_str(p + 161, h->agent, VMT_STR_AGENT);
	put_le32(p + 196, h->echo);
	return proto_put(out, VMT_MSG_HELLO, p, sizeof(p));
}

int proto_get_hello(const void *payload, uint32_t len, struct vmt_hello *h)
{
	const uint8_t *p = payload;
	struct vmt_hello t;

	if (len != VMT_HELLO_SIZE)
		return -EBADMSG;
	t.version = get_le32(p);
	t.ncpus = get_le32(p + 4);
	t.page_size = get_le32(p + 8);
	t.flags = get_le32(p + 12);
	t.mono_ns = get_le64(p + 16);
	if (get_str(t.release, p + 24, VMT_STR_RELEASE) < 0 ||
	    get_str(t.clock, p + 89, VMT_STR_CLOCK) < 0 ||
	    get_str(t.boot_id, p + 121, VMT_STR_BOOTID) < 0 ||
	    get_str(t.agent, p + 161, VMT_STR_AGENT) < 0)
		return -EBADMSG;
	t.echo = get_le32(p + 196);
	if (t.ncpus == 0 || t.ncpus > VMT_MAX_CPUS)
		return -EBADMSG;
	/* a power of two the page header fits in, at most 64 KiB */
	if (t.page_size < 256 || t.page_size > VMT_MAX_PAGE_SIZE || (t.page_size & (t.page_size - 1)))
		return -EBADMSG;
	*h = t;
	return 0;
}

int proto_put_start(struct vmt_buf *out, const struct vmt_start *s)
{
	uint8_t p[VMT_START_FIXED + 4096];
	uint32_t n = s->events_len;

	if (n > 4096)
		return -E2BIG;
	memset(p, 0, VMT_START_FIXED);
	put_le32(p, s->buffer_kb);
	put_le32(p + 4, s->flags);
	put_str(p + 8, s->clock, VMT_STR_CLOCK);
	put_le32(p + 40, n);
	memcpy(p + VMT_START_FIXED, s->events, n);
	return proto_put(out, VMT_MSG_START, p, VMT_START_FIXED + n);
}

int proto_get_start(const void *payload, uint32_t len, struct vmt_start *s)
{
	const uint8_t *p = payload;
	struct vmt_start t;

	if (len < VMT_START_FIXED)
		return -EBADMSG;
	t.buffer_kb = get_le32(p);
	t.flags = get_le32(p + 4);
	if (get_str(t.clock, p + 8, VMT_STR_CLOCK) < 0)
		return -EBADMSG;
	t.events_len = get_le32(p + 40);
	t.reserved = 0;
	if (t.events_len != len - VMT_START_FIXED)
		return -EBADMSG;
	t.events = (const char *)p + VMT_START_FIXED;
	for (uint32_t i = 0; i < t.events_len; i++)
		if (t.events[i] < 0x20 || t.events[i] > 0x7e)
			return -EBADMSG;
	*s = t;
	return 0;
}

int proto_put_flushed(struct vmt_buf *out, uint64_t id, uint32_t ncpus,
		      const struct vmt_cpu_stats *st)
{
	struct vmt_buf p = { 0 };
	int r;

	if (ncpus > VMT_MAX_CPUS)
		return -E2BIG;
	r = buf_put_le64(&p, id);
	if (r >= 0)
		r = buf_put_le32(&p, ncpus);
	if (r >= 0)
		r = buf_put_le32(&p, 0);
	for (uint32_t i = 0; r >= 0 && i < ncpus; i++) {
		const uint64_t *f = &st[i].bytes_sent;
		for (int k = 0; r >= 0 && k < VMT_CPU_STATS_SIZE / 8; k++)
			r = buf_put_le64(&p, f[k]);
	}
	if (r >= 0)
		r = proto_put(out, VMT_MSG_FLUSHED, p.data, (uint32_t)p.len);
	buf_free(&p);
	return r;
}

int proto_get_flushed(const void *payload, uint32_t len, uint64_t *id, uint32_t *ncpus,
		      struct vmt_cpu_stats *st)
{
	const uint8_t *p = payload;
	uint32_t n;

	if (len < 16)
		return -EBADMSG;
	n = get_le32(p + 8);
	if (n > VMT_MAX_CPUS || len != 16 + (uint64_t)n * VMT_CPU_STATS_SIZE)
		return -EBADMSG;
	*id = get_le64(p);
	*ncpus = n;
	for (uint32_t i = 0; i < n; i++) {
		uint64_t *f = &st[i].bytes_sent;
		for (int k = 0; k < VMT_CPU_STATS_SIZE / 8; k++)
			f[k] = get_le64(p + 16 + i * VMT_CPU_STATS_SIZE + k * 8);
	}
	return 0;
}

int proto_put_sync(struct vmt_buf *out, const struct vmt_sync *s)
{
	uint8_t p[16];

	put_le64(p, s->id);
	put_le32(p + 8, s->flags);
	put_le32(p + 12, 0);
	return proto_put(out, VMT_MSG_SYNC, p, sizeof(p));
}

int proto_get_sync(const void *payload, uint32_t len, struct vmt_sync *s)
{
	const uint8_t *p = payload;

	if (len != 16)
		return -EBADMSG;
	s->id = get_le64(p);
	s->flags = get_le32(p + 8);
	s->reserved = 0;
	return 0;
}

int proto_put_synced(struct vmt_buf *out, const struct vmt_synced *s)
{
	uint8_t p[32];

	put_le64(p, s->id);
	put_le64(p + 8, s->t2);
	put_le64(p + 16, s->t3);
	put_le32(p + 24, (uint32_t)s->status);
	put_le32(p + 28, 0);
	return proto_put(out, VMT_MSG_SYNCED, p, sizeof(p));
}

int proto_get_synced(const void *payload, uint32_t len, struct vmt_synced *s)
{
	const uint8_t *p = payload;
	int32_t st;

	if (len != 32)
		return -EBADMSG;
	st = (int32_t)get_le32(p + 24);
	if (st > 0 || st <= -4096)
		return -EBADMSG;
	s->id = get_le64(p);
	s->t2 = get_le64(p + 8);
	s->t3 = get_le64(p + 16);
	s->status = st;
	s->reserved = 0;
	return 0;
}

int proto_put_prev_begin(struct vmt_buf *out, const struct vmt_prev_begin *b)
{
	uint8_t p[VMT_PREV_BEGIN_SIZE];

	put_le32(p, b->ncpus);
	put_le32(p + 4, b->flags);
	put_le64(p + 8, (uint64_t)b->text_delta);
	put_le64(p + 16, (uint64_t)b->data_delta);
	put_le32(p + 24, b->pages);
	put_le32(p + 28, b->cpus_lost);
	put_le32(p + 32, b->top_gap_kib);
	put_le32(p + 36, 0);
	return proto_put(out, VMT_MSG_PREV_BEGIN, p, sizeof(p));
}

int proto_get_prev_begin(const void *payload, uint32_t len, struct vmt_prev_begin *b)
{
	const uint8_t *p = payload;
	uint32_t ncpus, flags;

	if (len != VMT_PREV_BEGIN_SIZE)
		return -EBADMSG;
	ncpus = get_le32(p);
	flags = get_le32(p + 4);
	if (!ncpus || ncpus > VMT_MAX_CPUS || (flags & ~(uint32_t)VMT_PREV_FLAGS) || get_le32(p + 36))
		return -EBADMSG;
	b->ncpus = ncpus;
	b->flags = flags;
	b->text_delta = (int64_t)get_le64(p + 8);
	b->data_delta = (int64_t)get_le64(p + 16);
	b->pages = get_le32(p + 24);
	b->cpus_lost = get_le32(p + 28);
	b->top_gap_kib = get_le32(p + 32);
	b->reserved = 0;
	return 0;
}

void proto_rx_init(struct vmt_proto_rx *rx)
{
	rx->off = 0;
	rx->len = 0;
	rx->pending = 0;
	rx->rejected_bytes = 0;
	rx->rejected_msgs = 0;
	rx->messages = 0;
	rx->moved_bytes = 0;
	rx->last_error = 0;
}

/* Bytes [off, len) are not parsed yet. Dropping only moves the offset: the
 * one memmove is in proto_rx_space(), once per read, so that a stream of
 * tiny messages or of skipped bytes costs linear work, not quadratic. */
static void rx_drop(struct vmt_proto_rx *rx, size_t n)
{
	rx->off += n;
	if (rx->off == rx->len)
		rx->off = rx->len = 0;
}

static void rx_take_pending(struct vmt_proto_rx *rx)
{
	if (rx->pending) {
		rx_drop(rx, rx->pending);
		rx->pending = 0;
	}
}

uint8_t *proto_rx_space(struct vmt_proto_rx *rx, size_t *room)
{
	rx_take_pending(rx);
	if (rx->off) {
		memmove(rx->buf, rx->buf + rx->off, rx->len - rx->off);
		rx->moved_bytes += rx->len - rx->off;
		rx->len -= rx->off;
		rx->off = 0;
	}
	*room = sizeof(rx->buf) - rx->len;
	return rx->buf + rx->len;
}

void proto_rx_wrote(struct vmt_proto_rx *rx, size_t n)
{
	rx->len += n;
}

/* Skip to the next byte that could start a header; count what was skipped. */
static void rx_resync(struct vmt_proto_rx *rx, int why)
{
	const uint8_t *p = rx->buf + rx->off;
	size_t i, n = rx->len - rx->off;
	uint8_t m[4];

	put_le32(m, VMT_PROTO_MAGIC);
	for (i = 1; i < n; i++) {
		const uint8_t *q = memchr(p + i, m[0], n - i);

		if (!q) {
			i = n;
			break;
		}
		i = (size_t)(q - p);
		if (!memcmp(q, m, VMT_MIN(4, n - i)))
			break;
	}
	rx->rejected_bytes += i;
	rx->rejected_msgs++;
	rx->last_error = why;
	rx_drop(rx, i);
}

int proto_rx_next(struct vmt_proto_rx *rx, struct vmt_msg *m)
{
	rx_take_pending(rx);
	while (rx->len - rx->off >= 4) {
		const uint8_t *h = rx->buf + rx->off;
		uint32_t len;
		unsigned type, version;

		if (get_le32(h) != VMT_PROTO_MAGIC) {
			rx_resync(rx, -EBADMSG);
			continue;
		}
		if (rx->len - rx->off < VMT_PROTO_HDR_SIZE)
			return 0;
		version = get_le16(h + 4);
		type = get_le16(h + 6);
		len = get_le32(h + 8);
		if (version != VMT_PROTO_VERSION) {
			rx_resync(rx, -EPROTONOSUPPORT);
			continue;
		}
		if (proto_check_len(type, len) < 0) {
			rx_resync(rx, -EBADMSG);
			continue;
		}
		if (rx->len - rx->off < VMT_PROTO_HDR_SIZE + len)
			return 0;
		m->type = type;
		m->seq = get_le32(h + 12);
		m->len = len;
		m->payload = h + VMT_PROTO_HDR_SIZE;
		rx->pending = VMT_PROTO_HDR_SIZE + len;
		rx->messages++;
		return 1;
	}
	/* fewer than 4 bytes: keep them only if they could begin the magic */
	if (rx->len > rx->off) {
		uint8_t mg[4];

		put_le32(mg, VMT_PROTO_MAGIC);
		if (memcmp(rx->buf + rx->off, mg, rx->len - rx->off))
			rx_resync(rx, -EBADMSG);
	}
	return 0;
}

size_t proto_rx_partial(const struct vmt_proto_rx *rx)
{
	return rx->len - rx->off - rx->pending;
}

void proto_rx_abandon(struct vmt_proto_rx *rx)
{
	rx_take_pending(rx);
	if (rx->len > rx->off)
		rx_resync(rx, -ETIMEDOUT);
}

void proto_rx_reset(struct vmt_proto_rx *rx)
{
	size_t partial = proto_rx_partial(rx);

	if (partial) {
		rx->rejected_bytes += partial;
		rx->rejected_msgs++;
		rx->last_error = -ECONNRESET;
	}
	rx->off = 0;
	rx->len = 0;
	rx->pending = 0;
}
