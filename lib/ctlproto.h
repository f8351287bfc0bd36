/* SPDX-License-Identifier: MIT */
/*
 * ctlproto: the control-socket protocol between vmtracectl and vmtraced, a
 * unix SOCK_SEQPACKET socket, one message per packet: a 16-byte header and
 * TLV records (vfile.h's tlv_*). A request gets zero or more records and
 * then END, or an ERROR. See docs/PROTOCOL.md. Bump VMT_CTL_VERSION on any
 * incompatible change.
 */
#ifndef VMT_CTLPROTO_H
#define VMT_CTLPROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tlv.h"
#include "vfile.h"	/* struct vmt_buf, tlv_put_*: the typed writers' */

#define VMT_CTL_MAGIC 0x43544d56u	/* "VMTC" little-endian */
#define VMT_CTL_VERSION 1
#define VMT_CTL_HDR_SIZE 16
#define VMT_CTL_MAX_MSG 65536
#define VMT_CTL_DEFAULT_SOCKET "/run/vmtraced/control.sock"

/*
 * The schema: every message type, who sends it, and the tags it may carry
 * (VMT_CTL_TAGS below gives each tag's wire type). Both ends, the fuzz
 * target and docs/PROTOCOL.md's tables (checked by tests/unit/test_ctlproto)
 * follow it. A reader skips tags it does not know, so a tag may be added
 * to a message without a new version; never change a tag's type.
 *
 * X(name, value, sender, tags): sender client or daemon; tags a list
 * macro, T(TAG) for each tag the message may carry.
 */
#define VMT_CTL_MESSAGES(X)                                  \
	X(STATUS,     1, client, VMT_CTL_NO_TAGS)            \
	X(DUMP,       2, client, VMT_CTL_DUMP_TAGS)          \
	X(GUESTS,     3, client, VMT_CTL_NO_TAGS)            \
	X(SAMPLES,    4, client, VMT_CTL_SAMPLES_TAGS)       \
	X(RELOAD,     5, client, VMT_CTL_NO_TAGS)            \
	X(UPGRADE,    6, client, VMT_CTL_NO_TAGS)            \
	X(ERROR,    100, daemon, VMT_CTL_ERROR_TAGS)         \
	X(END,      101, daemon, VMT_CTL_NO_TAGS)            \
	X(DAEMON,   102, daemon, VMT_CTL_DAEMON_TAGS)        \
	X(GUEST,    103, daemon, VMT_CTL_GUEST_TAGS)         \
	X(FILE,     104, daemon, VMT_CTL_FILE_TAGS)          \
	X(CPU,      105, daemon, VMT_CTL_NO_TAGS)            \
	X(DETECTOR, 106, daemon, VMT_CTL_DETECTOR_TAGS)

#define VMT_CTL_NO_TAGS(T)
#define VMT_CTL_DUMP_TAGS(T) T(GUEST) T(REASON) T(WINDOW_NS) T(POST_NS)
#define VMT_CTL_SAMPLES_TAGS(T) T(GUEST)
#define VMT_CTL_ERROR_TAGS(T) T(ERRNO) T(MESSAGE)
#define VMT_CTL_DAEMON_TAGS(T)                                                      \
	T(VERSION) T(UPTIME_NS) T(MEM_USED) T(MEM_CAP) T(DUMPS) T(DUMP_ERRORS) T(PATH) \
	T(TRIGGERS) T(TRIGGERS_SUPPRESSED) T(REFUSED) T(GUESTS_REFUSED) T(RESERVE)   \
	T(RESERVE_USED) T(RESERVE_PEAK) T(DISCOVERY_REFUSED) T(COMPRESS_CPU_NS)       \
	T(COMPRESS_BUSY) T(COMPRESS_BYTES_IN) T(COMPRESS_BYTES_OUT) T(RINGS_ADOPTED)  \
	T(RINGS_REFUSED) T(RINGS_UNCLAIMED) T(UPGRADES) T(SESSIONS_ADOPTED)            \
	T(SESSIONS_REFUSED) T(FLEET_STATE) T(FLEET_SERVER) T(FLEET_ERROR) T(FLEET_QUEUE) \
	T(FLEET_UPLOADED) T(FLEET_UPLOADED_BYTES) T(FLEET_UPLOAD_FAILURES)             \
	T(FLEET_TRIGGERS) T(FLEET_REFUSED) T(FLEET_AUTH_FAILURES) T(RESERVES_REFUSED) \
	T(COMPRESS_OVER_SHARE) T(FLEET_SUBJECTS) T(LIBVIRT_STATE) T(LIBVIRT_ERROR)     \
	T(LIBVIRT_READS) T(LIBVIRT_REFUSED) T(LIBVIRT_CONNECT_FAILURES)                \
	T(FLEET_REPLIES_REFUSED) T(DUMPS_PENDING) T(DUMP_NEXT_NS) T(DUMPS_REFUSED)     \
	T(DISCOVERY_UNREADABLE) T(DISCOVERY_UNREADABLE_PATH) T(DISCOVERY_UNREADABLE_ERRNO) \
	T(COMPRESS_TCODE_FALLBACK)
#define VMT_CTL_GUEST_TAGS(T)                                                       \
	T(GUEST) T(STATE) T(UPTIME_NS) T(NCPUS) T(RELEASE) T(AUX_VERSION) T(PAGES)     \
	T(CAPACITY) T(MEM_USED) T(BYTES_IN) T(PAGES_IN) T(EVENTS_IN)                   \
	T(PAGES_OVERWRITTEN) T(PAGES_GUEST_LOST) T(EVENTS_GUEST_LOST)                  \
	T(PAGES_REJECTED) T(BYTES_REJECTED) T(CTL_REJECTED) T(TS_BACKWARDS)            \
	T(FIRST_TS) T(LAST_TS) T(LAST_DUMP) T(STALE_BYTES) T(FLUSH_TIMEOUTS)           \
	T(SESSIONS) T(META_REJECTED) T(TRIGGERS_SUPPRESSED) T(MSGS_UNEXPECTED)         \
	T(FLUSH_BAD) T(AGENT_ERRORS) T(READ_PAUSES) T(PATHS_REFUSED)                  \
	T(PAGES_DISCARDED) T(HELLOS_DEFERRED) T(FLAGS) T(COMPRESSION) T(FRAME_PAGES)   \
	T(FRAME_BYTES) T(FRAMES_MADE) T(PAGES_STORED_RAW) T(FRAMES_OVERWRITTEN) T(PAGE_SIZE)  \
	T(WINDOW_SINCE_NS) T(LIFETIMES) T(LABELS) T(LATE_ANSWERS) T(SILENCES)
/* a DUMP's files: PATH only; SAMPLES' also the rest */
#define VMT_CTL_FILE_TAGS(T) \
	T(PATH) T(GUEST) T(CREATED_NS) T(BYTES) T(AUX_VERSION) T(REASON) T(MESSAGE) T(UPLOADED)
#define VMT_CTL_DETECTOR_TAGS(T)                                                    \
	T(NAME) T(ENABLED) T(LOADED) T(MESSAGE) T(EVENTS) T(SEEN) T(FIRED)             \
	T(TRIGGERS_SUPPRESSED) T(DROPPED) T(FILTERED)

enum vmt_ctl_type {
#define X(n, v, from, tags) VMT_CTL_##n = v,
	VMT_CTL_MESSAGES(X)
#undef X
};
const char *ctl_msg_name(unsigned type);

/* TLV tags used in payloads. X(name, value, kind) kind, the wire type:
 * i32 u32 (4 bytes) u64 (8) str (NUL-terminated). Numbered densely: append. */
#define VMT_CTL_TAGS(X)                       \
	X(ERRNO,            1, i32)           \
	X(MESSAGE,          2, str)           \
	X(GUEST,            3, str)           \
	X(REASON,           4, str)           \
	X(PATH,             5, str)           \
	X(VERSION,          6, str)           \
	X(UPTIME_NS,        7, u64)           \
	X(MEM_USED,         8, u64)           \
	X(MEM_CAP,          9, u64)           \
	X(DUMPS,           10, u64)           \
	X(DUMP_ERRORS,     11, u64)           \
	X(STATE,           12, str)           \
	X(NCPUS,           13, u32)           \
	X(CPU,             14, u32)           \
	X(PAGES,           15, u64)           \
	X(CAPACITY,        16, u64)           \
	X(BYTES_IN,        17, u64)           \
	X(PAGES_IN,        18, u64)           \
	X(PAGES_OVERWRITTEN, 19, u64)         \
	X(PAGES_GUEST_LOST, 20, u64)          \
	X(BYTES_REJECTED,  21, u64)           \
	X(FIRST_TS,        22, u64)           \
	X(LAST_TS,         23, u64)           \
	X(AUX_VERSION,     24, u32)           \
	X(LAST_DUMP,       25, str)           \
	X(EVENTS_IN,       26, u64)           \
	X(CTL_REJECTED,    27, u64)           \
	X(RELEASE,         28, str)           \
	X(PAGES_REJECTED,  29, u64)           \
	X(EVENTS_GUEST_LOST, 30, u64)         \
	X(TS_BACKWARDS,    31, u64)           \
	X(WINDOW_NS,       32, u64)           \
	X(POST_NS,         33, u64)           \
	X(TRIGGERS,        34, u64)           \
	X(TRIGGERS_SUPPRESSED, 35, u64)       \
	X(CREATED_NS,      36, u64)           \
	X(BYTES,           37, u64)           \
	X(STALE_BYTES,     38, u64)           \
	X(FLUSH_TIMEOUTS,  39, u64)           \
	X(SESSIONS,        40, u64)           \
	X(META_REJECTED,   41, u64)           \
	X(REFUSED,         42, u64)           \
	X(GUESTS_REFUSED,  43, u64)           \
	X(FLAGS,           44, u32)           \
	X(NAME,            45, str)           \
	X(LOADED,          46, u32)           \
	X(EVENTS,          47, u64)           \
	X(SEEN,            48, u64)           \
	X(FIRED,           49, u64)           \
	X(DROPPED,         50, u64)           \
	X(ENABLED,         51, u32)           \
	X(MSGS_UNEXPECTED, 52, u64)           \
	X(FLUSH_BAD,       53, u64)           \
	X(AGENT_ERRORS,    54, u64)           \
	X(READ_PAUSES,     55, u64)           \
	X(RESERVE,         56, u64)           \
	X(RESERVE_USED,    57, u64)           \
	X(RESERVE_PEAK,    58, u64)           \
	X(PATHS_REFUSED,   59, u64)           \
	X(PAGES_DISCARDED, 60, u64)           \
	X(HELLOS_DEFERRED, 61, u64)           \
	X(DISCOVERY_REFUSED, 62, u64)         \
	X(FILTERED,        63, u64)           \
	X(COMPRESSION,     64, str)           \
	X(FRAME_PAGES,     65, u64)           \
	X(FRAME_BYTES,     66, u64)           \
	X(FRAMES_MADE,     67, u64)           \
	X(PAGES_STORED_RAW, 68, u64)          \
	X(FRAMES_OVERWRITTEN, 69, u64)        \
	X(PAGE_SIZE,       70, u32)           \
	X(COMPRESS_CPU_NS, 71, u64)           \
	X(COMPRESS_BUSY,   72, u64)           \
	X(COMPRESS_BYTES_IN, 73, u64)         \
	X(COMPRESS_BYTES_OUT, 74, u64)        \
	X(RINGS_ADOPTED,   75, u64)           \
	X(RINGS_REFUSED,   76, u64)           \
	X(RINGS_UNCLAIMED, 77, u64)           \
	X(WINDOW_SINCE_NS, 78, u64)           \
	X(LIFETIMES,       79, u32)           \
	X(UPGRADES,        80, u32)           \
	X(SESSIONS_ADOPTED, 81, u64)          \
	X(SESSIONS_REFUSED, 82, u64)          \
	X(FLEET_STATE,     83, str)           \
	X(FLEET_SERVER,    84, str)           \
	X(FLEET_ERROR,     85, str)           \
	X(FLEET_QUEUE,     86, u64)           \
	X(FLEET_UPLOADED,  87, u64)           \
	X(FLEET_UPLOADED_BYTES, 88, u64)      \
	X(FLEET_UPLOAD_FAILURES, 89, u64)     \
	X(FLEET_TRIGGERS,  90, u64)           \
	X(FLEET_REFUSED,   91, u64)           \
	X(FLEET_AUTH_FAILURES, 92, u64)       \
	X(UPLOADED,        93, u32)           \
	X(RESERVES_REFUSED, 94, u64)          \
	X(COMPRESS_OVER_SHARE, 95, u64)       \
	X(LABELS,          96, str)           \
	X(FLEET_SUBJECTS,  97, u32)           \
	X(LIBVIRT_STATE,   98, str)           \
	X(LIBVIRT_ERROR,   99, str)           \
	X(LIBVIRT_READS,  100, u64)           \
	X(LIBVIRT_REFUSED, 101, u64)          \
	X(LIBVIRT_CONNECT_FAILURES, 102, u64) \
	X(FLEET_REPLIES_REFUSED, 103, u64)    \
	X(DUMPS_PENDING,  104, u32)           \
	X(DUMP_NEXT_NS,   105, u64)           \
	X(DUMPS_REFUSED,  106, u64)           \
	X(LATE_ANSWERS,   107, u64)           \
	X(SILENCES,       108, u64)           \
	X(DISCOVERY_UNREADABLE, 109, u64)     \
	X(DISCOVERY_UNREADABLE_PATH, 110, str) \
	X(DISCOVERY_UNREADABLE_ERRNO, 111, u32) \
	X(COMPRESS_TCODE_FALLBACK, 112, u64)

enum vmt_ctl_tag {
#define X(n, v, k) VMT_CTAG_##n = v,
	VMT_CTL_TAGS(X)
#undef X
};

/* One past the highest tag (they are dense, ctlproto.c checks it). */
enum {
#define X(n, v, k) +1
	VMT_CTAG_LIMIT = 1 VMT_CTL_TAGS(X)
#undef X
};

enum vmt_ctl_kind { VMT_CTK_NONE, VMT_CTK_I32, VMT_CTK_U32, VMT_CTK_U64, VMT_CTK_STR };

/* "GUEST", ...; NULL for a tag not in the schema. */
const char *ctl_tag_name(unsigned tag);
/* Its wire type, VMT_CTK_NONE for a tag not in the schema. */
enum vmt_ctl_kind ctl_tag_kind(unsigned tag);
/* "client" or "daemon"; NULL for an unknown type. */
const char *ctl_msg_sender(unsigned type);
/* May a message of this type carry this tag? */
bool ctl_msg_allows(unsigned type, unsigned tag);

/*
 * Typed writers, one per tag, ctl_put_NAME(b, value): the value's C type
 * is the tag's wire type, so a tag cannot be put with the wrong size.
 * Which message may carry it is checked by ctl_msg_check().
 */
#define VMT_CTL_CTYPE_i32 int32_t
#define VMT_CTL_CTYPE_u32 uint32_t
#define VMT_CTL_CTYPE_u64 uint64_t
#define VMT_CTL_CTYPE_str const char *
#define VMT_CTL_PUT_i32(b, tag, v) tlv_put_u32(b, tag, (uint32_t)(v))
#define VMT_CTL_PUT_u32 tlv_put_u32
#define VMT_CTL_PUT_u64 tlv_put_u64
#define VMT_CTL_PUT_str tlv_put_str
#define X(n, v, k)                                                          \
	static inline int ctl_put_##n(struct vmt_buf *b, VMT_CTL_CTYPE_##k x) \
	{                                                                   \
		return VMT_CTL_PUT_##k(b, VMT_CTAG_##n, x);                   \
	}
VMT_CTL_TAGS(X)
#undef X

/* Start a message in b (cleared first); add records with tlv_put*(). */
int ctl_msg_begin(struct vmt_buf *b, unsigned type, uint32_t id);
/* Patch the length into the header; -EMSGSIZE past VMT_CTL_MAX_MSG. */
int ctl_msg_end(struct vmt_buf *b);

/* Check a received packet; 0 with type, id, payload filled, or -EBADMSG. */
int ctl_msg_parse(const void *p, size_t len, unsigned *type, uint32_t *id,
		  const uint8_t **payload, uint32_t *plen);
/*
 * Check a payload against the schema: every tag known, allowed in a
 * message of this type and of its wire type's size (a string
 * NUL-terminated, no NUL inside). 0, -EPROTO for a tag the message may
 * not carry (*bad_tag set, may be NULL), -EBADMSG for a malformed one.
 * The writers hold themselves to it; a reader need not (it skips the
 * tags it does not know, which a newer peer may send).
 */
int ctl_msg_check(unsigned type, const uint8_t *payload, size_t len, unsigned *bad_tag);

#endif
