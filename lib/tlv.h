/* SPDX-License-Identifier: MIT */
/*
 * TLV records, the body of a sample's, an aux file's and the control
 * protocol's sections.
 */
#ifndef VMT_TLV_H
#define VMT_TLV_H

#include <stddef.h>
#include <stdint.h>

/* Records inside sections: u16 tag, u16 0, u32 len, data. */
struct vmt_buf;
int tlv_put(struct vmt_buf *b, uint16_t tag, const void *data, uint32_t len);
int tlv_put_u32(struct vmt_buf *b, uint16_t tag, uint32_t v);
int tlv_put_u64(struct vmt_buf *b, uint16_t tag, uint64_t v);
int tlv_put_str(struct vmt_buf *b, uint16_t tag, const char *s);

struct vmt_tlv {
	uint16_t tag;
	uint32_t len;
	const uint8_t *data;
};
/* 1 and t filled, 0 at the end, -EBADMSG if a record runs past len. */
int tlv_next(const uint8_t *p, size_t len, size_t *pos, struct vmt_tlv *t);
/* Typed reads: -EBADMSG if the length is not the type's. */
int tlv_u32(const struct vmt_tlv *t, uint32_t *v);
int tlv_u64(const struct vmt_tlv *t, uint64_t *v);
/* Copy a string of printable characters into dst[n]; -EBADMSG if it does not fit. */
int tlv_str(const struct vmt_tlv *t, char *dst, size_t n);

/*
 * Table-driven records, so that a writer and its reader share one list of
 * tags: each entry names a member of a struct by offset.
 */
enum vmt_tlv_kind { VMT_TLV_U32 = 1, VMT_TLV_U64, VMT_TLV_STR };
struct vmt_tlv_field {
	uint16_t tag;
	uint16_t kind;		/* enum vmt_tlv_kind */
	uint32_t size;		/* of the member: 4, 8, or the char array's */
	size_t offset;		/* of the member in the struct */
	const char *name;	/* for messages */
};
#define VMT_TLV_FIELD(tag, kind, type, member) \
	{ tag, VMT_TLV_##kind, sizeof(((type *)0)->member), offsetof(type, member), #member }
#define VMT_TLV_MAX_FIELDS 64	/* seen is a 64-bit mask */
/* Append one record per entry, from obj; -EINVAL on a string that does not
 * fit or is not printable, or on a bad table. */
int tlv_put_fields(struct vmt_buf *b, const struct vmt_tlv_field *tab, size_t n, const void *obj);
/*
 * If t's tag is in tab, store its value in obj, set bit i in *seen and
 * return 1; 0 if the tag is not in tab (skip it). -EBADMSG with why on a
 * wrong length, a bad string, or a tag seen twice.
 */
int tlv_get_field(const struct vmt_tlv *t, const struct vmt_tlv_field *tab, size_t n,
		  void *obj, uint64_t *seen, char *why, size_t why_len);
/* -EBADMSG with why naming the first entry of tab not in seen. */
int tlv_check_fields(const struct vmt_tlv_field *tab, size_t n, uint64_t seen,
		     char *why, size_t why_len);
/*
 * Every record of p[len] against tab, then tlv_check_fields(). A record
 * may first be offered to other() (NULL: none), which returns 1 when it
 * took it, 0 to let the table have it, or -EBADMSG with why.
 */
int tlv_parse_fields(const uint8_t *p, size_t len, const struct vmt_tlv_field *tab, size_t n,
		     void *obj,
		     int (*other)(const struct vmt_tlv *t, void *obj, char *why, size_t why_len),
		     char *why, size_t why_len);

#endif
