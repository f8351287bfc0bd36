/* SPDX-License-Identifier: MIT */
/*
 * util: little helpers every module uses: cleanup attributes, little-endian
 * loads and stores for wire and file formats, a growable byte buffer, CRC32C,
 * and whole-read/whole-write I/O that retries EINTR and short transfers.
 */
#ifndef VMT_UTIL_H
#define VMT_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define VMT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define VMT_MAX(a, b) ((a) > (b) ? (a) : (b))
#define _unused_ __attribute__((unused))

static inline void freep(void *p) { free(*(void **)p); }
static inline void closep(int *fd) { if (*fd >= 0) close(*fd); }
#define _cleanup_free_ __attribute__((cleanup(freep)))
#define _cleanup_close_ __attribute__((cleanup(closep)))

static inline uint16_t get_le16(const void *p)
{
	const uint8_t *b = p;
	return (uint16_t)(b[0] | b[1] << 8);
}
static inline uint32_t get_le32(const void *p)
{
	const uint8_t *b = p;
	return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static inline uint64_t get_le64(const void *p)
{
	return (uint64_t)get_le32(p) | (uint64_t)get_le32((const uint8_t *)p + 4) << 32;
}
static inline void put_le16(void *p, uint16_t v)
{
	uint8_t *b = p;
	b[0] = (uint8_t)v; b[1] = (uint8_t)(v >> 8);
}
static inline void put_le32(void *p, uint32_t v)
{
	uint8_t *b = p;
	b[0] = (uint8_t)v; b[1] = (uint8_t)(v >> 8); b[2] = (uint8_t)(v >> 16); b[3] = (uint8_t)(v >> 24);
}
static inline void put_le64(void *p, uint64_t v)
{
	put_le32(p, (uint32_t)v);
	put_le32((uint8_t *)p + 4, (uint32_t)(v >> 32));
}

/* A growable byte buffer. len bytes used out of cap; all-zero is empty. */
struct vmt_buf {
	uint8_t *data;
	size_t len;
	size_t cap;
};

int buf_reserve(struct vmt_buf *b, size_t more);
int buf_append(struct vmt_buf *b, const void *p, size_t n);
int buf_put_le16(struct vmt_buf *b, uint16_t v);
int buf_put_le32(struct vmt_buf *b, uint32_t v);
int buf_put_le64(struct vmt_buf *b, uint64_t v);
/* Appends s and its NUL. */
int buf_put_str(struct vmt_buf *b, const char *s);
void buf_free(struct vmt_buf *b);

uint32_t crc32c(uint32_t crc, const void *data, size_t len);
/* The same from tables, whatever the CPU (crc32c uses SSE4.2 where there is). */
uint32_t crc32c_sw(uint32_t crc, const void *data, size_t len);

/* Retry EINTR and short writes: 0 or -errno. */
int write_full(int fd, const void *buf, size_t n);
/* A reader's refusal: why (if not NULL) says what, the result is -EBADMSG. */
int why_bad(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Every byte of v (consumed) or buf from offset off: 0 or -errno (-EIO on
 * a write of nothing, -EFBIG past the largest offset). write_full, at the
 * file's position, is the same loop. */
int pwritev_all(int fd, struct iovec *v, int n, uint64_t off);
int pwrite_all(int fd, const void *buf, size_t n, uint64_t off);
int writev_all(int fd, struct iovec *v, int n);
/* Reads a whole file (at most max bytes, -EFBIG beyond) into a malloc'd
 * buffer with a NUL after it. */
int read_file(const char *path, size_t max, char **out, size_t *len);

/* CLOCK_REALTIME / CLOCK_MONOTONIC in nanoseconds. */
uint64_t now_realtime_ns(void);
uint64_t now_monotonic_ns(void);
/*
 * The user-space clock that reads the same time as a trace clock: "mono",
 * "mono_raw", "boot", "tai" map to clock_gettime() clocks, "x86-tsc" to the
 * TSC (x86 only). -EOPNOTSUPP for clocks user space cannot read ("local",
 * "global", "counter", "perf", ...).
 */
int trace_clock_source(const char *trace_clock, int *source);
/* Read a source from trace_clock_source(): ns, or TSC cycles. */
uint64_t trace_clock_now(int source);

/* Names that become file names: [A-Za-z0-9_.-], 1..64 chars, no leading dot. */
bool name_is_valid(const char *s);

/* Parse "4096", "64K", "256MiB", "1G" into bytes. */
int parse_size(const char *s, uint64_t *out);
/* Parse "500ms", "10s", "5m", "1h", "30d" into milliseconds; a bare number
 * is seconds. -EINVAL for anything else, -ERANGE past UINT64_MAX ms. */
int parse_duration_ms(const char *s, uint64_t *ms);

/* A memfd of size bytes whose size is sealed (shrink, grow, the seals
 * themselves), mapped shared with map_flags added (MAP_POPULATE, ...):
 * what a successor may map and trust the size of. -ENOMEM when the memory
 * is not there. */
int sealed_memfd(const char *name, size_t size, int map_flags, int *fd_out, uint8_t **base);

#endif
