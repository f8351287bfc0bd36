/* SPDX-License-Identifier: MIT */
/*
 * ctlproto: the control socket's framing and its schema (ctlproto.h): the
 * tables below all come from VMT_CTL_MESSAGES and VMT_CTL_TAGS.
 */
#include <errno.h>
#include <string.h>

#include "ctlproto.h"
#include "util.h"
#include "tlv.h"
#include "vfile.h"

const char *ctl_msg_name(unsigned type)
{
	switch (type) {
#define X(n, v, from, tags) case v: return #n;
	VMT_CTL_MESSAGES(X)
#undef X
	}
	return "UNKNOWN";
}

/* dense tags: each below VMT_CTAG_LIMIT, and no two alike (the switch in
 * ctl_tag_name() would not compile) */
#define X(n, v, k) _Static_assert(v > 0 && v < VMT_CTAG_LIMIT, "tag " #n " out of order");
VMT_CTL_TAGS(X)
#undef X

static const struct {
	const char *name;
	enum vmt_ctl_kind kind;
} tags[VMT_CTAG_LIMIT] = {
#define KIND_i32 VMT_CTK_I32
#define KIND_u32 VMT_CTK_U32
#define KIND_u64 VMT_CTK_U64
#define KIND_str VMT_CTK_STR
#define X(n, v, k) [v] = { #n, KIND_##k },
	VMT_CTL_TAGS(X)
#undef X
};

const char *ctl_tag_name(unsigned tag)
{
	switch (tag) {
#define X(n, v, k) case v: return tags[v].name;
	VMT_CTL_TAGS(X)
#undef X
	}
	return NULL;
}

enum vmt_ctl_kind ctl_tag_kind(unsigned tag)
{
	return tag < VMT_CTAG_LIMIT ? tags[tag].kind : VMT_CTK_NONE;
}

const char *ctl_msg_sender(unsigned type)
{
	switch (type) {
#define X(n, v, from, tags) case v: return #from;
	VMT_CTL_MESSAGES(X)
#undef X
	}
	return NULL;
}

/* each message's tags, ending in 0 */
#define T(tag) VMT_CTAG_##tag,
#define X(n, v, from, list) static const uint16_t tags_##n[] = { list(T) 0 };
VMT_CTL_MESSAGES(X)
#undef X
#undef T

static const uint16_t *msg_tags(unsigned type)
{
	switch (type) {
#define X(n, v, from, list) case v: return tags_##n;
	VMT_CTL_MESSAGES(X)
#undef X
	}
	return NULL;
}

bool ctl_msg_allows(unsigned type, unsigned tag)
{
	const uint16_t *t = msg_tags(type);

	for (; t && *t; t++)
		if (*t == tag)
			return true;
	return false;
}

int ctl_msg_check(unsigned type, const uint8_t *payload, size_t len, unsigned *bad_tag)
{
	struct vmt_tlv t;
	size_t pos = 0;
	int r;

	while ((r = tlv_next(payload, len, &pos, &t)) > 0) {
		if (!ctl_msg_allows(type, t.tag)) {
			if (bad_tag)
				*bad_tag = t.tag;
			return -EPROTO;
		}
		switch (ctl_tag_kind(t.tag)) {
		case VMT_CTK_I32:
		case VMT_CTK_U32:
			if (t.len != 4)
				return -EBADMSG;
			break;
		case VMT_CTK_U64:
			if (t.len != 8)
				return -EBADMSG;
			break;
		case VMT_CTK_STR:
			if (t.len && memchr(t.data, 0, t.len))
				return -EBADMSG;
			break;
		case VMT_CTK_NONE:
			return -EPROTO;	/* not reached: allowed tags are known */
		}
	}
	return r < 0 ? -EBADMSG : 0;
}

static int ctl_type_known(unsigned type)
{
	return strcmp(ctl_msg_name(type), "UNKNOWN") != 0;
}

int ctl_msg_begin(struct vmt_buf *b, unsigned type, uint32_t id)
{
	uint8_t h[VMT_CTL_HDR_SIZE];

	b->len = 0;
	put_le32(h, VMT_CTL_MAGIC);
	put_le16(h + 4, VMT_CTL_VERSION);
	put_le16(h + 6, (uint16_t)type);
	put_le32(h + 8, 0);
	put_le32(h + 12, id);
	return buf_append(b, h, sizeof(h));
}

int ctl_msg_end(struct vmt_buf *b)
{
	if (b->len < VMT_CTL_HDR_SIZE)
		return -EINVAL;
	if (b->len > VMT_CTL_MAX_MSG)
		return -EMSGSIZE;
	put_le32(b->data + 8, (uint32_t)(b->len - VMT_CTL_HDR_SIZE));
	return 0;
}

int ctl_msg_parse(const void *p, size_t len, unsigned *type, uint32_t *id,
		  const uint8_t **payload, uint32_t *plen)
{
	const uint8_t *b = p;
	size_t pos = 0;
	struct vmt_tlv t;
	int r;

	if (len < VMT_CTL_HDR_SIZE || len > VMT_CTL_MAX_MSG)
		return -EBADMSG;
	if (get_le32(b) != VMT_CTL_MAGIC || get_le16(b + 4) != VMT_CTL_VERSION)
		return -EBADMSG;
	if (get_le32(b + 8) != len - VMT_CTL_HDR_SIZE || !ctl_type_known(get_le16(b + 6)))
		return -EBADMSG;
	/* the records must tile the payload exactly */
	while ((r = tlv_next(b + VMT_CTL_HDR_SIZE, len - VMT_CTL_HDR_SIZE, &pos, &t)) > 0)
		;
	if (r < 0)
		return -EBADMSG;
	*type = get_le16(b + 6);
	*id = get_le32(b + 12);
	*payload = b + VMT_CTL_HDR_SIZE;
	*plen = (uint32_t)(len - VMT_CTL_HDR_SIZE);
	return 0;
}
