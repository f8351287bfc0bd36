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

#include <stddef.h>
#include <stdint.h>

#define VMT_CTL_MAGIC 0x43544d56u	/* "VMTC" little-endian */
#define VMT_CTL_VERSION 1
#define VMT_CTL_HDR_SIZE 16
#define VMT_CTL_MAX_MSG 65536
#define VMT_CTL_DEFAULT_SOCKET "/run/vmtraced/control.sock"

/* X(name, value) */
#define VMT_CTL_MESSAGES(X)  \
	X(STATUS,   1)       \
	X(DUMP,     2)       \
	X(GUESTS,   3)       \
	X(SAMPLES,  4)       \
	X(RELOAD,   5)       \
	X(ERROR,  100)       \
	X(END,    101)       \
	X(DAEMON, 102)       \
	X(GUEST,  103)       \
	X(FILE,   104)       \
	X(CPU,    105)       \
	X(DETECTOR, 106)

enum vmt_ctl_type {
#define X(n, v) VMT_CTL_##n = v,
	VMT_CTL_MESSAGES(X)
#undef X
};
const char *ctl_msg_name(unsigned type);

/* TLV tags used in payloads. X(name, value, kind) kind: u32 u64 str */
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
	X(HELLOS_DEFERRED, 61, u64)

enum vmt_ctl_tag {
#define X(n, v, k) VMT_CTAG_##n = v,
	VMT_CTL_TAGS(X)
#undef X
};

struct vmt_buf;
/* Start a message in b (cleared first); add records with tlv_put*(). */
int ctl_msg_begin(struct vmt_buf *b, unsigned type, uint32_t id);
/* Patch the length into the header; -EMSGSIZE past VMT_CTL_MAX_MSG. */
int ctl_msg_end(struct vmt_buf *b);

/* Check a received packet; 0 with type, id, payload filled, or -EBADMSG. */
int ctl_msg_parse(const void *p, size_t len, unsigned *type, uint32_t *id,
		  const uint8_t **payload, uint32_t *plen);

#endif
