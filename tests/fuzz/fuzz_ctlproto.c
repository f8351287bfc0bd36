/* SPDX-License-Identifier: MIT */
/*
 * The control-socket protocol (lib/ctlproto.h), from both ends: a request
 * as vmtraced receives it (daemon/control.c) and an answer as vmtracectl
 * receives it (ctl/client.c, ctl/status.c). The input is one packet.
 *
 * ctl_msg_parse(), then the record reads those programs apply to a message
 * of its type: tlv_next() over the payload and tlv_u32/tlv_u64/tlv_str
 * into destinations of the programs' sizes. Every record is also read the
 * way ctl/status.c reads answers it does not expect. The destinations are
 * malloc'd at exactly those sizes, so an overrun shows.
 *
 * Then the schema (ctlproto.h): a message ctl_msg_check() passes carries
 * only tags its type allows, each readable by its wire type's reader, and
 * written again through the typed writers it comes out byte for byte.
 */
#include <errno.h>
#include <string.h>

#include "ctlproto.h"
#include "fuzz.h"
#include "sample.h"	/* VMT_NAME_MAX, VMT_REASON_MAX */
#include "tlv.h"
#include "vfile.h"

/* The destinations' sizes in those programs. */
#define DAEMON_DUMP_REASON (VMT_REASON_MAX - 40)	/* control.c handle_dump */
#define CLIENT_ERROR 512	/* ctl/client.h struct vmt_ctl_client.error */
#define STATUS_STR 512		/* ctl/status.c struct rec.str[] */
#define FILE_PATH 4400		/* ctl/status.c, the paths of a DUMP's FILE answers */

static void str_into(const struct vmt_tlv *t, size_t n)
{
	char *dst = malloc(n);
	int r;

	if (!dst)
		abort();
	r = tlv_str(t, dst, n);
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	if (r == 0) {
		FUZZ_CHECK(strlen(dst) == t->len && t->len < n);
		/* what the daemon then asks of a guest name */
		if (n == VMT_NAME_MAX)
			(void)name_is_valid(dst);
	}
	free(dst);
}

static void num_of(const struct vmt_tlv *t)
{
	uint32_t u32;
	uint64_t u64;

	FUZZ_CHECK((tlv_u32(t, &u32) == 0) == (t->len == 4));
	FUZZ_CHECK((tlv_u64(t, &u64) == 0) == (t->len == 8));
}

/* One record, read the way the receiver of a message of this type does. */
static void record(unsigned type, const struct vmt_tlv *t)
{
	switch (type) {
	case VMT_CTL_DUMP:	/* daemon: handle_dump */
		if (t->tag == VMT_CTAG_GUEST)
			str_into(t, VMT_NAME_MAX);
		else if (t->tag == VMT_CTAG_WINDOW_NS || t->tag == VMT_CTAG_POST_NS)
			num_of(t);
		else if (t->tag == VMT_CTAG_REASON)
			str_into(t, DAEMON_DUMP_REASON);
		break;
	case VMT_CTL_SAMPLES:	/* daemon: handle_samples */
		if (t->tag == VMT_CTAG_GUEST)
			str_into(t, VMT_NAME_MAX);
		break;
	case VMT_CTL_ERROR:	/* vmtracectl: client_next */
		if (t->tag == VMT_CTAG_ERRNO)
			num_of(t);
		else if (t->tag == VMT_CTAG_MESSAGE)
			str_into(t, CLIENT_ERROR);
		break;
	case VMT_CTL_FILE:	/* vmtracectl dump */
		if (t->tag == VMT_CTAG_PATH)
			str_into(t, FILE_PATH);
		break;
	}
	/* vmtracectl status/guests/samples: rec_parse, by the tag's kind */
	num_of(t);
	str_into(t, STATUS_STR);
}

/* A message the schema passed: typed reads succeed, typed writes repeat it. */
static void schema_holds(unsigned type, uint32_t id, const uint8_t *pkt, size_t size)
{
	const uint8_t *payload = pkt + VMT_CTL_HDR_SIZE;
	size_t plen = size - VMT_CTL_HDR_SIZE, pos = 0;
	struct vmt_buf b = { 0 };
	struct vmt_tlv t;
	uint32_t u32;
	uint64_t u64;
	char *str;

	FUZZ_CHECK(ctl_msg_sender(type) != NULL);
	FUZZ_CHECK(ctl_msg_begin(&b, type, id) == 0);
	while (tlv_next(payload, plen, &pos, &t) == 1) {
		FUZZ_CHECK(ctl_msg_allows(type, t.tag) && ctl_tag_name(t.tag));
		switch (ctl_tag_kind(t.tag)) {
		case VMT_CTK_I32:
		case VMT_CTK_U32:
			FUZZ_CHECK(tlv_u32(&t, &u32) == 0);
			FUZZ_CHECK(tlv_put_u32(&b, t.tag, u32) == 0);
			break;
		case VMT_CTK_U64:
			FUZZ_CHECK(tlv_u64(&t, &u64) == 0);
			FUZZ_CHECK(tlv_put_u64(&b, t.tag, u64) == 0);
			break;
		case VMT_CTK_STR:
			str = malloc(t.len + 1);
			if (!str)
				abort();
			memcpy(str, t.data, t.len);
			str[t.len] = 0;
			FUZZ_CHECK(strlen(str) == t.len);	/* no NUL inside */
			FUZZ_CHECK(tlv_put_str(&b, t.tag, str) == 0);
			free(str);
			break;
		case VMT_CTK_NONE:
			FUZZ_CHECK(!"an allowed tag the schema does not know");
		}
	}
	FUZZ_CHECK(ctl_msg_end(&b) == 0);
	FUZZ_CHECK(b.len == size && !memcmp(b.data, pkt, size));
	buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* a copy of exactly the packet's size, as recv() leaves it */
	uint8_t *pkt = malloc(size ? size : 1);
	const uint8_t *payload;
	struct vmt_tlv t;
	uint32_t id, plen;
	unsigned type;
	size_t pos = 0;
	int r;

	if (!pkt)
		abort();
	memcpy(pkt, data, size);
	r = ctl_msg_parse(pkt, size, &type, &id, &payload, &plen);
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	if (r == 0) {
		FUZZ_CHECK(size >= VMT_CTL_HDR_SIZE && size <= VMT_CTL_MAX_MSG);
		FUZZ_CHECK(payload == pkt + VMT_CTL_HDR_SIZE && plen == size - VMT_CTL_HDR_SIZE);
		FUZZ_CHECK(strcmp(ctl_msg_name(type), "UNKNOWN"));
		while ((r = tlv_next(payload, plen, &pos, &t)) == 1) {
			FUZZ_CHECK(t.data >= payload && t.data + t.len <= payload + plen);
			record(type, &t);
		}
		/* ctl_msg_parse promised that the records tile the payload */
		FUZZ_CHECK(r == 0 && pos == plen);
		r = ctl_msg_check(type, payload, plen, NULL);
		FUZZ_CHECK(r == 0 || r == -EPROTO || r == -EBADMSG);
		if (r == 0)
			schema_holds(type, id, pkt, size);
	} else if (size >= VMT_CTL_HDR_SIZE) {
		/* the receivers stop at a bad record: walk what a lax reader would */
		plen = (uint32_t)VMT_MIN(size - VMT_CTL_HDR_SIZE, (size_t)VMT_CTL_MAX_MSG);
		while (tlv_next(pkt + VMT_CTL_HDR_SIZE, plen, &pos, &t) == 1) {
			FUZZ_CHECK(t.data + t.len <= pkt + VMT_CTL_HDR_SIZE + plen);
			record(0, &t);
		}
	}
	free(pkt);
	return 0;
}
