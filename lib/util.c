/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/mman.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "util.h"

int buf_reserve(struct vmt_buf *b, size_t more)
{
	size_t need, cap;
	uint8_t *p;

	if (more > SIZE_MAX / 2 - b->len)
		return -ENOMEM;
	need = b->len + more;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap *= 2;
	p = realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

int buf_append(struct vmt_buf *b, const void *p, size_t n)
{
	int r = buf_reserve(b, n);

	if (r < 0)
		return r;
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	return 0;
}

int buf_put_le16(struct vmt_buf *b, uint16_t v)
{
	uint8_t t[2];

	put_le16(t, v);
	return buf_append(b, t, 2);
}

int buf_put_le32(struct vmt_buf *b, uint32_t v)
{
	uint8_t t[4];

	put_le32(t, v);
	return buf_append(b, t, 4);
}

int buf_put_le64(struct vmt_buf *b, uint64_t v)
{
	uint8_t t[8];

	put_le64(t, v);
	return buf_append(b, t, 8);
}

int buf_put_str(struct vmt_buf *b, const char *s)
{
	return buf_append(b, s, strlen(s) + 1);
}

void buf_free(struct vmt_buf *b)
{
	free(b->data);
	*b = (struct vmt_buf){ 0 };
}

/* CRC32C (Castagnoli), reflected, table driven. */
static uint32_t crc_table[8][256];
static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		crc_table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

#if defined(__x86_64__)
/* SSE4.2's crc32 instruction is CRC32C: a ring header is checksummed after
 * every page, and the tables took an eighth of the event loop flat out. */
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const uint8_t *p,
								 size_t len)
{
	uint64_t c = crc;

	for (; len >= 8; p += 8, len -= 8) {
		uint64_t v;

		memcpy(&v, p, 8);
		c = __builtin_ia32_crc32di(c, v);
	}
	crc = (uint32_t)c;
	while (len--)
		crc = __builtin_ia32_crc32qi(crc, *p++);
	return crc;
}
#endif

uint32_t crc32c_sw(uint32_t crc, const void *data, size_t len)
{
	static int inited;
	const uint8_t *p = data;

	if (!__atomic_load_n(&inited, __ATOMIC_ACQUIRE)) {
		crc_init();	/* idempotent: racing threads compute the same table */
		__atomic_store_n(&inited, 1, __ATOMIC_RELEASE);
	}
	crc = ~crc;
	while (len >= 8) {
		uint32_t lo = get_le32(p) ^ crc, hi = get_le32(p + 4);
		crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
		      crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^
		      crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
		      crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
		p += 8;
		len -= 8;
	}
	while (len--)
		crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
	return ~crc;
}

uint32_t crc32c(uint32_t crc, const void *data, size_t len)
{
#if defined(__x86_64__)
	if (__builtin_cpu_supports("sse4.2"))
		return ~crc32c_sse42(~crc, data, len);
#endif
	return crc32c_sw(crc, data, len);
}

/* The one write-all loop: at off, or at the file's position (!at). */
static int write_loop(int fd, struct iovec *v, int n, bool at, uint64_t off)
{
	for (;;) {
		ssize_t r;

		while (n > 0 && !v->iov_len) {	/* nothing to write is written */
			v++;
			n--;
		}
		if (n <= 0)
			return 0;
		if (at && off > (uint64_t)INT64_MAX)
			return -EFBIG;
		r = at ? pwritev(fd, v, n, (off_t)off) : writev(fd, v, n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EIO;
		off += (uint64_t)r;
		while (n > 0 && (size_t)r >= v->iov_len) {
			r -= (ssize_t)v->iov_len;
			v++;
			n--;
		}
		if (n > 0) {
			v->iov_base = (uint8_t *)v->iov_base + r;
			v->iov_len -= (size_t)r;
		}
	}
}

int pwritev_all(int fd, struct iovec *v, int n, uint64_t off)
{
	return write_loop(fd, v, n, true, off);
}

int writev_all(int fd, struct iovec *v, int n)
{
	return write_loop(fd, v, n, false, 0);
}

int pwrite_all(int fd, const void *buf, size_t n, uint64_t off)
{
	struct iovec v = { .iov_base = (void *)buf, .iov_len = n };

	return write_loop(fd, &v, 1, true, off);
}

int why_bad(char *why, size_t n, const char *fmt, ...)
{
	va_list ap;

	if (why && n) {
		va_start(ap, fmt);
		vsnprintf(why, n, fmt, ap);
		va_end(ap);
	}
	return -EBADMSG;
}

int write_full(int fd, const void *buf, size_t n)
{
	struct iovec v = { .iov_base = (void *)buf, .iov_len = n };

	return write_loop(fd, &v, 1, false, 0);
}

int read_file(const char *path, size_t max, char **out, size_t *len)
{
	struct vmt_buf b = { 0 };
	int fd, r = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	for (;;) {
		ssize_t n;

		r = buf_reserve(&b, 65536 + 1);
		if (r < 0)
			break;
		n = read(fd, b.data + b.len, 65536);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r = -errno;
			break;
		}
		if (n == 0)
			break;
		b.len += (size_t)n;
		if (b.len > max) {
			r = -EFBIG;
			break;
		}
	}
	close(fd);
	if (r < 0) {
		buf_free(&b);
		return r;
	}
	if (buf_reserve(&b, 1) < 0) {
		buf_free(&b);
		return -ENOMEM;
	}
	b.data[b.len] = 0;
	*out = (char *)b.data;
	*len = b.len;
	return 0;
}

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t now_realtime_ns(void) { return clock_ns(CLOCK_REALTIME); }
uint64_t now_monotonic_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

#define SOURCE_TSC (-1)

int trace_clock_source(const char *c, int *source)
{
	static const struct { const char *name; int id; } map[] = {
		{ "mono", CLOCK_MONOTONIC },
		{ "mono_raw", CLOCK_MONOTONIC_RAW },
		{ "boot", CLOCK_BOOTTIME },
		{ "tai", CLOCK_TAI },
#if defined(__x86_64__) || defined(__i386__)
		{ "x86-tsc", SOURCE_TSC },
#endif
	};

	for (size_t i = 0; i < ARRAY_SIZE(map); i++)
		if (!strcmp(c, map[i].name)) {
			*source = map[i].id;
			return 0;
		}
	return -EOPNOTSUPP;
}

uint64_t trace_clock_now(int source)
{
#if defined(__x86_64__) || defined(__i386__)
	if (source == SOURCE_TSC)
		return __rdtsc();
#endif
	return clock_ns(source);
}

bool name_is_valid(const char *s)
{
	size_t n = 0;

	if (!s || !*s || *s == '.')
		return false;
	for (; s[n]; n++) {
		unsigned char c = (unsigned char)s[n];
		if (!(isalnum(c) || c == '_' || c == '-' || c == '.'))
			return false;
		if (n >= 64)
			return false;
	}
	return true;
}

int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mul = 1;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -errno;
	while (*end == ' ')
		end++;
	if (*end) {
		switch (toupper((unsigned char)*end)) {
		case 'K': mul = 1ull << 10; break;
		case 'M': mul = 1ull << 20; break;
		case 'G': mul = 1ull << 30; break;
		case 'T': mul = 1ull << 40; break;
		case 'B': mul = 1; break;
		default: return -EINVAL;
		}
		end++;
		if (mul > 1 && (!strcmp(end, "iB") || !strcmp(end, "ib") || !strcmp(end, "B") || !strcmp(end, "b")))
			end += strlen(end);
		if (*end)
			return -EINVAL;
	}
	if (v > UINT64_MAX / mul)
		return -ERANGE;
	*out = v * mul;
	return 0;
}

int parse_duration_ms(const char *s, uint64_t *ms)
{
	static const struct {
		const char *unit;
		uint64_t ms;
	} units[] = {
		{ "", 1000 }, { "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 },
		{ "d", 86400000 },
	};
	unsigned long long v;
	char *end;
	size_t i;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	/* the unit first: "99999999999999999999x" is garbage, not overflow */
	while (*end == ' ')
		end++;
	for (i = 0; i < ARRAY_SIZE(units); i++)
		if (!strcmp(end, units[i].unit))
			break;
	if (i == ARRAY_SIZE(units))
		return -EINVAL;
	if (errno || v > UINT64_MAX / units[i].ms)
		return -ERANGE;
	*ms = v * units[i].ms;
	return 0;
}

int sealed_memfd(const char *name, size_t size, int map_flags, int *fd_out, uint8_t **base)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING), err;
	void *m;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		err = errno == ENOSPC || errno == EFBIG ? -ENOMEM : -errno;
		close(fd);
		return err;
	}
	m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | map_flags, fd, 0);
	if (m == MAP_FAILED) {
		close(fd);
		return -ENOMEM;
	}
	*fd_out = fd;
	*base = m;
	return 0;
}
