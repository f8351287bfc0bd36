/* SPDX-License-Identifier: MIT */
/*
 * proto: the guest control protocol spoken on the virtio-serial port
 * agent-ctl-path between vmtrace-agent (guest) and vmtraced (host).
 *
 * A message is a 16-byte header followed by `len` payload bytes, all
 * little-endian. The stream may carry stale or hostile bytes: the parser
 * (struct vmt_proto_rx) resynchronises on the magic, and every message is
 * checked against its type's size bounds before a payload is handed out.
 * See docs/PROTOCOL.md. Bump VMT_PROTO_VERSION on any incompatible change.
 */
#ifndef VMT_PROTO_H
#define VMT_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define VMT_PROTO_MAGIC 0x50544d56u	/* "VMTP" in little-endian byte order */
#define VMT_PROTO_VERSION 1
#define VMT_PROTO_HDR_SIZE 16
#define VMT_PROTO_MAX_PAYLOAD 65536
#define VMT_MAX_CPUS 256
#define VMT_MAX_PAGE_SIZE 65536
#define VMT_STR_RELEASE 65
#define VMT_STR_CLOCK 32
#define VMT_STR_BOOTID 40
#define VMT_STR_AGENT 32

/*
 * X(name, value, min payload, max payload)
 * Sizes of the fixed structs below are given as literals so that the table
 * is the one place to read what is accepted.
 */
#define VMT_PROTO_MESSAGES(X)                                                        \
	X(HOST_HELLO,   1, 8,   8)     /* host->guest: u32 version, u32 nonce      */ \
	X(HELLO,        2, 200, 200)   /* guest->host: struct vmt_hello            */ \
	X(START,        3, 48,  48 + 4096) /* host->guest: struct vmt_start + events */ \
	X(STARTED,      4, 8,   8 + 512) /* guest->host: i32 error, u32 ncpus, text  */ \
	X(META_BEGIN,   5, 16,  16)    /* guest->host: u64 total, u32 files, u32 0  */ \
	X(META_DATA,    6, 1,   VMT_PROTO_MAX_PAYLOAD) /* guest->host: bundle bytes  */ \
	X(META_END,     7, 8,   8)     /* guest->host: u32 crc32c, u32 0           */ \
	X(STOP,         8, 0,   0)     /* host->guest                              */ \
	X(STOPPED,      9, 0,   0)     /* guest->host                              */ \
	X(FLUSH,       10, 8,   8)     /* host->guest: u64 flush id                */ \
	X(FLUSHED,     11, 16,  16 + VMT_MAX_CPUS * 80) /* guest->host: see below  */ \
	X(ERROR,       12, 4,   4 + 512) /* guest->host: i32 errno, text            */ \
	X(TRIGGER,     13, 0,   256)   /* guest->host: reason text                  */ \
	X(STREAM,      14, 0,   0)     /* host->guest: metadata taken, start pages  */ \
	X(SYNC,        15, 16,  16)    /* host->guest: struct vmt_sync             */ \
	X(SYNCED,      16, 32,  32)    /* guest->host: struct vmt_synced           */ \
	X(TASKS,       17, 9,   VMT_PROTO_MAX_PAYLOAD) /* guest->host: u32 offset, \
					 u32 total, then bytes of the task tables */ \
	X(BYE,         18, 0,   256)   /* guest->host: the agent exits on purpose: why */ \
	X(PREV_BEGIN,  19, 40,  40)    /* guest->host: struct vmt_prev_begin        */ \
	X(PREV_PAGES,  20, 8 + 256, VMT_PROTO_MAX_PAYLOAD) /* guest->host: u32 cpu, \
					 u32 npages, then whole pages of the previous boot */ \
	X(PREV_END,    21, 8,   8)     /* guest->host: i32 status, u32 pages sent   */

enum vmt_msg_type {
#define X(name, value, min, max) VMT_MSG_##name = value,
	VMT_PROTO_MESSAGES(X)
#undef X
	VMT_MSG_MAX_
};

const char *proto_msg_name(unsigned type);
/* 0 if a payload of len bytes is acceptable for type, else -EBADMSG. */
int proto_check_len(unsigned type, uint32_t len);

/* HELLO payload (200 bytes) */
struct vmt_hello {
	uint32_t version;	/* VMT_PROTO_VERSION of the agent */
	uint32_t ncpus;		/* CPUs with a trace-path-cpuN port */
	uint32_t page_size;	/* ring-buffer page size, 4096 on x86 */
	uint32_t flags;		/* VMT_HELLO_* */
	uint64_t mono_ns;	/* guest CLOCK_MONOTONIC when sent */
	char release[VMT_STR_RELEASE];	/* uname -r, NUL-padded */
	char clock[VMT_STR_CLOCK];	/* trace clock in force */
	char boot_id[VMT_STR_BOOTID];	/* /proc/sys/kernel/random/boot_id */
	char agent[VMT_STR_AGENT];	/* agent version string */
	uint32_t echo;		/* nonce of the HOST_HELLO answered, 0 if unasked */
};
#define VMT_HELLO_SIZE 200
#define VMT_HELLO_TRACING 0x1	/* agent is already streaming (reconnect) */
#define VMT_HELLO_SYNC 0x2	/* agent answers SYNC */
/* agent answers SYNC at any time while streaming (liveness pings too) and
 * says BYE before it exits on purpose: the host may watch its silence */
#define VMT_HELLO_BYE 0x4

/* START payload: fixed 48 bytes, then events_len bytes of event list */
struct vmt_start {
	uint32_t buffer_kb;	/* per-CPU guest ring buffer size, 0 = leave */
	uint32_t flags;		/* VMT_START_* */
	char clock[VMT_STR_CLOCK];	/* trace clock to set, "" = leave */
	uint32_t events_len;	/* bytes of the list after the fixed part */
	uint32_t reserved;
	const char *events;	/* "sched:*,irq:irq_handler_entry", not NUL-terminated */
};
#define VMT_START_FIXED 48
#define VMT_START_KEEP_EVENTS 0x1	/* leave the guest's enabled events as they are */
/* the host takes the previous boot's persistent ring buffer (PREV_*): an
 * older host does not set it, and the agent then sends none */
#define VMT_START_PREV 0x2

/*
 * PREV_BEGIN: the previous boot's pages follow (a persistent ring buffer,
 * Linux >= 6.12 reserve_mem= + trace_instance=, read before anything was
 * enabled in it this boot), as PREV_PAGES, then PREV_END.
 */
struct vmt_prev_begin {
	uint32_t ncpus;		/* CPUs whose pages may follow, <= HELLO's */
	uint32_t flags;		/* VMT_PREV_* */
	int64_t text_delta;	/* last_boot_info: this boot's _text minus the previous one's */
	int64_t data_delta;
	uint32_t pages;		/* pages that follow, in all */
	uint32_t cpus_lost;	/* bit N: the kernel found CPU N's old buffer invalid (N < 32) */
	uint32_t top_gap_kib;	/* the region ends this far below the top of its RAM range */
	uint32_t reserved;
};
#define VMT_PREV_BEGIN_SIZE 40
#define VMT_PREV_DELTA 0x1	/* the deltas were read (last_boot_info) */
#define VMT_PREV_KMSG 0x2	/* the kernel's verdict per CPU was read: cpus_lost holds */
#define VMT_PREV_GAP 0x4	/* the region was found in RAM: top_gap_kib holds */
#define VMT_PREV_FLAGS 0x7
#define VMT_PREV_PAGES_MAX 15	/* per PREV_PAGES: 8 + 15 * 4096 <= 64 KiB */

/* FLUSHED payload: u64 flush id, u32 ncpus, u32 0, then ncpus records */
struct vmt_cpu_stats {
	uint64_t bytes_sent;	/* bytes written to trace-path-cpuN since START */
	uint64_t entries;	/* per_cpu/cpuN/stats, as the guest kernel counts */
	uint64_t overrun;
	uint64_t commit_overrun;
	uint64_t bytes;
	uint64_t oldest_ts;	/* ns */
	uint64_t now_ts;	/* ns */
	uint64_t dropped;
	uint64_t read;
	uint64_t reserved;
};
#define VMT_CPU_STATS_SIZE 80

/*
 * Clock probe (see clocksync.h). The agent reads its clock (the user-space
 * twin of its trace clock) as soon as the message is read, t2, and again
 * just before answering, t3; status is -EOPNOTSUPP when its trace clock has
 * no such twin (t2 = t3 = 0 then).
 */
struct vmt_sync {
	uint64_t id;
	uint32_t flags;		/* VMT_SYNC_F_* */
	uint32_t reserved;
};
#define VMT_SYNC_F_MARKER 0x1	/* also write "vmtrace-sync ID" into the guest trace */
/* ids with this bit are the host's liveness pings (guest-alive.c), not
 * clock probes: answered the same way, their times unused */
#define VMT_SYNC_ID_PING (1ull << 63)

struct vmt_synced {
	uint64_t id;
	uint64_t t2, t3;	/* guest trace-clock time at receipt, at reply */
	int32_t status;		/* 0 or -errno */
	uint32_t reserved;
};

/* Encoders: append one whole message to out (a struct vmt_buf). */
struct vmt_buf;
int proto_put(struct vmt_buf *out, unsigned type, const void *payload, uint32_t len);
int proto_put_hello(struct vmt_buf *out, const struct vmt_hello *h);
int proto_put_start(struct vmt_buf *out, const struct vmt_start *s);
int proto_put_flushed(struct vmt_buf *out, uint64_t id, uint32_t ncpus,
		      const struct vmt_cpu_stats *st);
int proto_put_sync(struct vmt_buf *out, const struct vmt_sync *s);
int proto_put_synced(struct vmt_buf *out, const struct vmt_synced *s);
int proto_put_prev_begin(struct vmt_buf *out, const struct vmt_prev_begin *b);

/* Decoders: validate and fill; -EBADMSG with nothing filled on bad input. */
int proto_get_hello(const void *p, uint32_t len, struct vmt_hello *h);
/* s->events points into p */
int proto_get_start(const void *p, uint32_t len, struct vmt_start *s);
/* st must hold VMT_MAX_CPUS records */
int proto_get_flushed(const void *p, uint32_t len, uint64_t *id, uint32_t *ncpus,
		      struct vmt_cpu_stats *st);
int proto_get_sync(const void *p, uint32_t len, struct vmt_sync *s);
/* status must be 0 or a negative errno above -4096 */
int proto_get_synced(const void *p, uint32_t len, struct vmt_synced *s);
/* ncpus 1 .. VMT_MAX_CPUS, no unknown flag, reserved 0 */
int proto_get_prev_begin(const void *p, uint32_t len, struct vmt_prev_begin *b);

/*
 * Receive-side framer. Feed it bytes as they come; take complete messages
 * out with proto_rx_next(). Garbage before a valid header, unknown types,
 * bad versions and out-of-bounds lengths are skipped and counted in
 * rejected_bytes; the framer never buffers more than one maximal message.
 * Work is linear in the bytes fed: parsing moves an offset, and what is
 * left is moved to the front once per proto_rx_space().
 */
struct vmt_proto_rx {
	uint8_t buf[VMT_PROTO_HDR_SIZE + VMT_PROTO_MAX_PAYLOAD];
	size_t off;		/* bytes before off are parsed (compacted at the next read) */
	size_t len;		/* bytes in buf */
	uint64_t moved_bytes;	/* by compaction: linear in what was read */
	uint64_t rejected_bytes;
	uint64_t rejected_msgs;
	uint64_t messages;
	size_t pending;		/* bytes of the message handed out last */
	int last_error;		/* why the last rejection happened, -errno */
};

struct vmt_msg {
	unsigned type;
	uint32_t seq;
	uint32_t len;
	const uint8_t *payload;	/* valid until the next proto_rx_* call */
};

void proto_rx_init(struct vmt_proto_rx *rx);
/* Space to read into and how much; then proto_rx_wrote(n). */
uint8_t *proto_rx_space(struct vmt_proto_rx *rx, size_t *room);
void proto_rx_wrote(struct vmt_proto_rx *rx, size_t n);
/* 1 and *m filled when a message is ready, 0 when more bytes are needed. */
int proto_rx_next(struct vmt_proto_rx *rx, struct vmt_msg *m);
/* The stream ended (its connection closed): a message it left unfinished
 * is dropped and counted as rejected, so that it cannot swallow the bytes
 * of the next stream. The counters stay. */
void proto_rx_reset(struct vmt_proto_rx *rx);
/* Bytes held that do not make a whole message yet. */
size_t proto_rx_partial(const struct vmt_proto_rx *rx);
/*
 * The message begun in rx will never be finished: on a FIFO the agent (or
 * host) died half-way through it and its next incarnation writes on. Count
 * its first bytes as rejected and look for a header in what came after
 * them, so that the new writer's first message is not swallowed as the
 * rest of the old one. proto_rx_next() then carries on.
 */
void proto_rx_abandon(struct vmt_proto_rx *rx);

#endif
