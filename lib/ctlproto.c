/* SPDX-License-Identifier: MIT */
#include <errno.h>

#include "ctlproto.h"
#include "util.h"
#include "vfile.h"

const char *ctl_msg_name(unsigned type)
{
	switch (type) {
#define X(n, v) case v: return #n;
	VMT_CTL_MESSAGES(X)
#undef X
	}
	return "UNKNOWN";
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
