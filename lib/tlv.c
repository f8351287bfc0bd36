/* SPDX-License-Identifier: MIT */
/* Records inside sections: u16 tag, u16 0, u32 len, data. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "tlv.h"
#include "util.h"

/* ---- TLV records ----------------------------------------------------- */

int tlv_put(struct vmt_buf *b, uint16_t tag, const void *data, uint32_t len)
{
	int r = buf_reserve(b, 8 + (size_t)len);

	if (r < 0)
		return r;
	buf_put_le16(b, tag);
	buf_put_le16(b, 0);
	buf_put_le32(b, len);
	return buf_append(b, data, len);
}

int tlv_put_u32(struct vmt_buf *b, uint16_t tag, uint32_t v)
{
	uint8_t t[4];

	put_le32(t, v);
	return tlv_put(b, tag, t, 4);
}

int tlv_put_u64(struct vmt_buf *b, uint16_t tag, uint64_t v)
{
	uint8_t t[8];

	put_le64(t, v);
	return tlv_put(b, tag, t, 8);
}

int tlv_put_str(struct vmt_buf *b, uint16_t tag, const char *s)
{
	size_t n = strlen(s);

	if (n > UINT32_MAX)
		return -EINVAL;
	return tlv_put(b, tag, s, (uint32_t)n);
}

int tlv_next(const uint8_t *p, size_t len, size_t *pos, struct vmt_tlv *t)
{
	size_t at = *pos;

	if (at == len)
		return 0;
	if (at > len || len - at < 8)
		return -EBADMSG;
	/* the reserved half-word is kept for flags old readers must refuse */
	if (get_le16(p + at + 2))
		return -EBADMSG;
	t->tag = get_le16(p + at);
	t->len = get_le32(p + at + 4);
	if (t->len > len - at - 8)
		return -EBADMSG;
	t->data = p + at + 8;
	*pos = at + 8 + t->len;
	return 1;
}

int tlv_u32(const struct vmt_tlv *t, uint32_t *v)
{
	if (t->len != 4)
		return -EBADMSG;
	*v = get_le32(t->data);
	return 0;
}

int tlv_u64(const struct vmt_tlv *t, uint64_t *v)
{
	if (t->len != 8)
		return -EBADMSG;
	*v = get_le64(t->data);
	return 0;
}

static bool printable(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
			return false;
	return true;
}

int tlv_str(const struct vmt_tlv *t, char *dst, size_t n)
{
	if (!n || t->len > n - 1 || !printable((const char *)t->data, t->len))
		return -EBADMSG;
	if (t->len)
		memcpy(dst, t->data, t->len);
	dst[t->len] = 0;
	return 0;
}

int tlv_put_fields(struct vmt_buf *b, const struct vmt_tlv_field *tab, size_t n, const void *obj)
{
	const uint8_t *o = obj;
	int r = 0;

	for (size_t i = 0; r == 0 && i < n; i++) {
		const struct vmt_tlv_field *e = &tab[i];
		const void *p = o + e->offset;
		size_t len;

		switch (e->kind) {
		case VMT_TLV_U32:
			if (e->size != 4)
				return -EINVAL;
			r = tlv_put_u32(b, e->tag, *(const uint32_t *)p);
			break;
		case VMT_TLV_U64:
			if (e->size != 8)
				return -EINVAL;
			r = tlv_put_u64(b, e->tag, *(const uint64_t *)p);
			break;
		case VMT_TLV_STR:
			len = strnlen(p, e->size);
			if (len == e->size || !printable(p, len))
				return -EINVAL;
			r = tlv_put(b, e->tag, p, (uint32_t)len);
			break;
		default:
			return -EINVAL;
		}
	}
	return r;
}

int tlv_get_field(const struct vmt_tlv *t, const struct vmt_tlv_field *tab, size_t n,
		  void *obj, uint64_t *seen, char *why, size_t why_len)
{
	uint8_t *o = obj;

	for (size_t i = 0; i < n && i < VMT_TLV_MAX_FIELDS; i++) {
		const struct vmt_tlv_field *e = &tab[i];
		void *p = o + e->offset;
		int r = -EBADMSG;

		if (e->tag != t->tag)
			continue;
		if (*seen & (1ull << i))
			return why_bad(why, why_len, "%s (tag 0x%x) appears twice", e->name, e->tag);
		switch (e->kind) {
		case VMT_TLV_U32:
			if (e->size == 4)
				r = tlv_u32(t, p);
			break;
		case VMT_TLV_U64:
			if (e->size == 8)
				r = tlv_u64(t, p);
			break;
		case VMT_TLV_STR:
			r = tlv_str(t, p, e->size);
			break;
		}
		if (r < 0)
			return why_bad(why, why_len, "%s (tag 0x%x): bad value of %u bytes", e->name,
				   e->tag, t->len);
		*seen |= 1ull << i;
		return 1;
	}
	return 0;
}

int tlv_check_fields(const struct vmt_tlv_field *tab, size_t n, uint64_t seen,
		     char *why, size_t why_len)
{
	for (size_t i = 0; i < n && i < VMT_TLV_MAX_FIELDS; i++)
		if (!(seen & (1ull << i)))
			return why_bad(why, why_len, "no %s (tag 0x%x)", tab[i].name, tab[i].tag);
	return 0;
}

int tlv_parse_fields(const uint8_t *p, size_t len, const struct vmt_tlv_field *tab, size_t n,
		     void *obj,
		     int (*other)(const struct vmt_tlv *t, void *obj, char *why, size_t why_len),
		     char *why, size_t why_len)
{
	struct vmt_tlv rec;
	uint64_t seen = 0;
	size_t pos = 0;
	int r;

	while ((r = tlv_next(p, len, &pos, &rec)) > 0) {
		if (other) {
			r = other(&rec, obj, why, why_len);
			if (r < 0)
				return r;
			if (r > 0)
				continue;
		}
		r = tlv_get_field(&rec, tab, n, obj, &seen, why, why_len);
		if (r < 0)
			return r;
	}
	if (r < 0) {
		snprintf(why, why_len, "bad record at offset %zu", pos);
		return r;
	}
	return tlv_check_fields(tab, n, seen, why, why_len);
}
