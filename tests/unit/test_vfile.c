/* SPDX-License-Identifier: MIT */
/* The container, TLV records and atomic publishing. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "testutil.h"
#include "util.h"
#include "tlv.h"
#include "afile.h"
#include "vfile.h"

static const char MAGIC[8] = { 'T', 'E', 'S', 'T', 'F', 'I', 'L', '1' };
#define BIG (1ull << 30)

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	/* compressible but not trivially: a few repeating words and noise */
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x = x * 1103515245u + 12345u;
		p[i] = (i & 64) ? (uint8_t)(x >> 24) : (uint8_t)(i / 7);
	}
}

/* Read every section's data: 0 if the whole file is good. */
static int read_all(const uint8_t *buf, size_t len, char *why, size_t n)
{
	struct vmt_vfile f;
	int r = vfile_open_mem(&f, buf, len, MAGIC, BIG, why, n);

	if (r < 0)
		return r;
	for (uint32_t i = 0; r == 0 && i < f.nsect; i++) {
		const uint8_t *p;
		void *owned;

		r = vfile_section_data_why(&f, &f.sect[i], &p, &owned, why, n);
		free(owned);
	}
	vfile_close(&f);
	return r;
}

/* A small file with a raw and a zstd section. */
static uint8_t *small_file(size_t *len)
{
	struct vmt_vfile_writer w = { .zstd_level = 3 };
	uint8_t d[300];
	int fd = test_memfd("vfile-test");
	uint8_t *b;

	fill(d, sizeof(d), 1);
	ck_assert_int_eq(vfile_writer_start(&w, fd, MAGIC, 1, 42), 0);
	ck_assert_int_eq(vfile_write_section(&w, 1, 0, 0, "hello", 5), 0);
	ck_assert_int_eq(vfile_write_section(&w, 0x20, 1, VMT_VSECT_ZSTD, d, sizeof(d)), 0);
	ck_assert_int_eq(vfile_write_section(&w, 0x20, 2, VMT_VSECT_ZSTD, NULL, 0), 0);
	ck_assert_int_eq(vfile_writer_finish(&w), 0);
	b = test_slurp(fd, len);
	close(fd);
	return b;
}

static void reseal(uint8_t *hdr)
{
	put_le32(hdr + 36, crc32c(0, hdr, 36));
}

START_TEST(test_round_trip_raw_and_zstd)
{
	static uint8_t a[10000], z[70000];
	struct vmt_vfile_writer w = { .zstd_level = 5 };
	struct vmt_vfile f;
	const struct vmt_vsection *s;
	const uint8_t *p;
	void *owned;
	char why[200];
	int fd = test_memfd("vfile-test");

	fill(a, sizeof(a), 2);
	fill(z, sizeof(z), 3);
	ck_assert_int_eq(vfile_writer_start(&w, fd, MAGIC, 7, 123456789), 0);
	ck_assert_int_eq(vfile_write_section(&w, 1, 0, 0, a, sizeof(a)), 0);
	ck_assert_int_eq(vfile_write_section(&w, 2, 5, VMT_VSECT_ZSTD, z, sizeof(z)), 0);
	ck_assert_int_eq(vfile_write_section(&w, 3, 0, 0, NULL, 0), 0);
	ck_assert_int_eq(vfile_write_section(&w, 3, 1, VMT_VSECT_ZSTD, NULL, 0), 0);
	ck_assert_int_eq(vfile_write_section(&w, VMT_VSECT_END, 0, 0, a, 1), -EINVAL);
	ck_assert_int_eq(vfile_writer_finish(&w), -EINVAL);	/* sticky */

	/* again, without the bad call */
	ck_assert_int_eq(ftruncate(fd, 0), 0);
	ck_assert_int_eq(vfile_writer_start(&w, fd, MAGIC, 7, 123456789), 0);
	ck_assert_int_eq(vfile_write_section(&w, 1, 0, 0, a, sizeof(a)), 0);
	ck_assert_int_eq(vfile_write_section(&w, 2, 5, VMT_VSECT_ZSTD, z, sizeof(z)), 0);
	ck_assert_int_eq(vfile_write_section(&w, 3, 0, 0, NULL, 0), 0);
	ck_assert_int_eq(vfile_write_section(&w, 3, 1, VMT_VSECT_ZSTD, NULL, 0), 0);
	ck_assert_int_eq(vfile_writer_finish(&w), 0);
	ck_assert_ptr_null(w.zctx);

	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ck_assert_int_eq(vfile_open(&f, path, MAGIC, BIG, why, sizeof(why)), 0);
	ck_assert_uint_eq(f.format_version, 7);
	ck_assert_uint_eq(f.created_ns, 123456789);
	ck_assert_uint_eq(f.nsect, 4);
	ck_assert_uint_eq(f.size, w.offset);

	s = vfile_find(&f, 2, VMT_VSECT_ANY);
	ck_assert_ptr_nonnull(s);
	ck_assert_uint_eq(s->id, 5);
	ck_assert_uint_eq(s->flags, VMT_VSECT_ZSTD);
	ck_assert_uint_eq(s->raw_size, sizeof(z));
	ck_assert_uint_lt(s->stored_size, sizeof(z));
	ck_assert_int_eq(vfile_section_data(&f, s, &p, &owned), 0);
	ck_assert_ptr_eq(p, owned);
	ck_assert_mem_eq(p, z, sizeof(z));
	free(owned);

	s = vfile_find(&f, 1, 0);
	ck_assert_int_eq(vfile_section_data(&f, s, &p, &owned), 0);
	ck_assert_ptr_null(owned);
	ck_assert_ptr_eq(p, f.map + s->offset);
	ck_assert_mem_eq(p, a, sizeof(a));

	ck_assert_ptr_null(vfile_find(&f, 3, 7));
	for (uint32_t id = 0; id < 2; id++) {
		s = vfile_find(&f, 3, id);
		ck_assert_ptr_nonnull(s);
		ck_assert_int_eq(vfile_section_data(&f, s, &p, &owned), 0);
		ck_assert_uint_eq(s->raw_size, 0);
		free(owned);
	}
	vfile_close(&f);
	close(fd);
}
END_TEST

START_TEST(test_many_iovecs_and_workers)
{
	/* the pages of a ring, in many pieces of odd sizes, 0 included */
	const size_t total = 12u << 20;
	uint8_t *big = malloc(total);
	struct vmt_iovec *iov = calloc(20000, sizeof(*iov));
	size_t n = 0, off = 0;
	ZSTD_bounds b = ZSTD_cParam_getBounds(ZSTD_c_nbWorkers);

	ck_assert_ptr_nonnull(big);
	fill(big, total, 4);
	while (off < total) {
		size_t len = VMT_MIN(total - off, (n % 5 == 0) ? 0 : (n * 977) % 9000 + 1);
		iov[n].base = big + off;
		iov[n].len = len;
		off += len;
		n++;
	}
	ck_assert_uint_lt(n, 20000);
	for (int workers = 0; workers <= 2; workers += 2) {
		for (int level = 0; level <= 1; level++) {
			struct vmt_vfile_writer w = { .zstd_level = level, .zstd_workers = workers };
			struct vmt_vfile f;
			const uint8_t *p;
			void *owned;
			char why[200];
			int fd = test_memfd("vfile-test");
			size_t len;
			uint8_t *buf;

			ck_assert_int_eq(vfile_writer_start(&w, fd, MAGIC, 1, 0), 0);
			ck_assert_int_eq(vfile_write_sectionv(&w, 0x20, 0, level ? VMT_VSECT_ZSTD : 0, iov, n), 0);
			/* a small one after a big one reuses the compressor */
			ck_assert_int_eq(vfile_write_sectionv(&w, 0x20, 1, level ? VMT_VSECT_ZSTD : 0, iov + 1, 3), 0);
			ck_assert_int_eq(vfile_writer_finish(&w), 0);
			buf = test_slurp(fd, &len);
			ck_assert_int_eq(vfile_open_mem(&f, buf, len, MAGIC, BIG, why, sizeof(why)), 0);
			ck_assert_uint_eq(f.nsect, 2);
			ck_assert_uint_eq(f.sect[0].raw_size, total);
			ck_assert_int_eq(vfile_section_data_why(&f, &f.sect[0], &p, &owned, why, sizeof(why)), 0);
			ck_assert(memcmp(p, big, total) == 0);
			free(owned);
			ck_assert_int_eq(vfile_section_data(&f, &f.sect[1], &p, &owned), 0);
			ck_assert_uint_eq(f.sect[1].raw_size, iov[1].len + iov[2].len + iov[3].len);
			ck_assert(memcmp(p, big + (iov[1].base ? (const uint8_t *)iov[1].base - big : 0),
					 (size_t)f.sect[1].raw_size) == 0);
			free(owned);
			vfile_close(&f);
			free(buf);
			close(fd);
		}
	}
	if (ZSTD_isError(b.error) || b.upperBound == 0)
		printf("note: libzstd without threads, workers fell back to 0\n");
	free(iov);
	free(big);
}
END_TEST

START_TEST(test_header_checks)
{
	size_t len;
	uint8_t *b = small_file(&len), *c = malloc(len);
	struct vmt_vfile f;
	char why[200];

	ck_assert_int_eq(read_all(b, len, why, sizeof(why)), 0);

	memcpy(c, b, len);
	c[0] = 'X';
	ck_assert_int_eq(vfile_open_mem(&f, c, len, MAGIC, BIG, why, sizeof(why)), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(why, "bad magic"));

	memcpy(c, b, len);
	put_le32(c + 12, 40);
	put_le32(c + 28, crc32c(0, c, 28));
	ck_assert_int_eq(vfile_open_mem(&f, c, len, MAGIC, BIG, why, sizeof(why)), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(why, "header size"));

	memcpy(c, b, len);
	put_le32(c + 24, 1);
	put_le32(c + 28, crc32c(0, c, 28));
	ck_assert_int_eq(vfile_open_mem(&f, c, len, MAGIC, BIG, why, sizeof(why)), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(why, "flags"));

	memcpy(c, b, len);
	c[9] ^= 1;
	ck_assert_int_eq(vfile_open_mem(&f, c, len, MAGIC, BIG, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "file header CRC mismatch");

	/* the version is the caller's to judge */
	memcpy(c, b, len);
	put_le32(c + 8, 99);
	put_le32(c + 28, crc32c(0, c, 28));
	ck_assert_int_eq(vfile_open_mem(&f, c, len, MAGIC, BIG, why, sizeof(why)), 0);
	ck_assert_uint_eq(f.format_version, 99);
	vfile_close(&f);

	ck_assert_int_eq(vfile_open_mem(&f, NULL, 0, MAGIC, BIG, NULL, 0), -EBADMSG);
	ck_assert_int_eq(vfile_open(&f, "/nonexistent/x", MAGIC, BIG, why, sizeof(why)), -ENOENT);
	ck_assert_int_eq(vfile_open(&f, "/", MAGIC, BIG, why, sizeof(why)), -EINVAL);
	free(c);
	free(b);
}
END_TEST

START_TEST(test_end_section)
{
	size_t len;
	uint8_t *b = small_file(&len), *c = malloc(len + 100);
	uint8_t *end = NULL;
	struct vmt_vfile f;
	char why[200];

	end = b + len - VMT_VSECT_HDR_SIZE;
	ck_assert_uint_eq(get_le32(end), VMT_VSECT_END);
	ck_assert_uint_eq(get_le32(end + 4), 3);
	ck_assert_uint_eq(get_le32(end + 12), crc32c(0, NULL, 0));

	/* wrong count */
	memcpy(c, b, len);
	put_le32(c + len - 40 + 4, 2);
	reseal(c + len - 40);
	ck_assert_int_eq(vfile_open_mem(&f, c, len, MAGIC, BIG, why, sizeof(why)), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(why, "END section counts 2 sections, 3 precede it"));

	/* not empty */
	memcpy(c, b, len);
	put_le64(c + len - 40 + 16, 1);
	reseal(c + len - 40);
	ck_assert_int_eq(vfile_open_mem(&f, c, len, MAGIC, BIG, why, sizeof(why)), -EBADMSG);

	/* something after it */
	memcpy(c, b, len);
	memset(c + len, 0, 100);
	ck_assert_int_eq(vfile_open_mem(&f, c, len + 1, MAGIC, BIG, why, sizeof(why)), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(why, "1 bytes after the END section"));
	/* a second END after the first */
	memcpy(c + len, b + len - 40, 40);
	ck_assert_int_eq(vfile_open_mem(&f, c, len + 40, MAGIC, BIG, why, sizeof(why)), -EBADMSG);

	/* none at all */
	ck_assert_int_eq(vfile_open_mem(&f, b, len - 40, MAGIC, BIG, why, sizeof(why)), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(why, "no END section"));
	free(c);
	free(b);
}
END_TEST

/* Patch the zstd section (index 1) of small_file() and reseal its header. */
START_TEST(test_section_checks)
{
	size_t len;
	uint8_t *b = small_file(&len), *c = malloc(len);
	const size_t h1 = 32 + 40 + 5;	/* header of section 1 */
	struct vmt_vfile f;
	const uint8_t *p;
	void *owned;
	char why[200];

	ck_assert_uint_eq(get_le32(b + h1), 0x20);

	/* a huge raw size is refused at open, before any allocation */
	memcpy(c, b, len);
	put_le64(c + h1 + 24, 1ull << 50);
	reseal(c + h1);
	ck_assert_int_eq(vfile_open_mem(&f, c, len, MAGIC, BIG, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "section 1 (type 0x20 id 1): raw size 1125899906842624 exceeds the limit 1073741824");
	/* and so is one within the limit that no zstd frame of that size can hold */
	put_le64(c + h1 + 24, 1ull << 29);
	reseal(c + h1);
	ck_assert_int_eq(vfile_open_mem(&f, c, len, MAGIC, BIG, why, sizeof(why)), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(why, "impossible"));

	/* raw size disagrees with the frame's content size */
	memcpy(c, b, len);
	put_le64(c + h1 + 24, 299);
	reseal(c + h1);
	ck_assert_int_eq(vfile_open_mem(&f, c, len, MAGIC, BIG, why, sizeof(why)), 0);
	ck_assert_int_eq(vfile_section_data_why(&f, &f.sect[1], &p, &owned, why, sizeof(why)), -EBADMSG);
	ck_assert_ptr_null(owned);
	ck_assert_str_eq(why, "section 1 (type 0x20 id 1): zstd frame holds 300 bytes, section says 299");
	vfile_close(&f);

	/* data CRC */
	memcpy(c, b, len);
	c[h1 + 40 + 6] ^= 0x10;
	ck_assert_int_eq(vfile_open_mem(&f, c, len, MAGIC, BIG, why, sizeof(why)), 0);
	ck_assert_int_eq(vfile_section_data_why(&f, &f.sect[1], &p, &owned, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "section 1 (type 0x20 id 1): data CRC mismatch");
	ck_assert_int_eq(vfile_section_data(&f, &f.sect[1], &p, &owned), -EBADMSG);
	vfile_close(&f);

	/* stored size past the end */
	memcpy(c, b, len);
	put_le64(c + h1 + 16, len);
	reseal(c + h1);
	ck_assert_int_eq(vfile_open_mem(&f, c, len, MAGIC, BIG, why, sizeof(why)), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(why, "run past the end of the file"));

	/* unknown flags, reserved */
	memcpy(c, b, len);
	put_le32(c + h1 + 8, 3);
	reseal(c + h1);
	ck_assert_int_eq(vfile_open_mem(&f, c, len, MAGIC, BIG, why, sizeof(why)), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(why, "unknown flags"));
	memcpy(c, b, len);
	put_le32(c + h1 + 32, 1);
	reseal(c + h1);
	ck_assert_int_eq(vfile_open_mem(&f, c, len, MAGIC, BIG, why, sizeof(why)), -EBADMSG);

	/* a raw section whose sizes differ */
	memcpy(c, b, len);
	put_le64(c + 32 + 24, 6);
	reseal(c + 32);
	ck_assert_int_eq(vfile_open_mem(&f, c, len, MAGIC, BIG, why, sizeof(why)), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(why, "uncompressed"));

	/* max_raw */
	ck_assert_int_eq(vfile_open_mem(&f, b, len, MAGIC, 299, why, sizeof(why)), -EBADMSG);
	ck_assert_int_eq(vfile_open_mem(&f, b, len, MAGIC, 300, why, sizeof(why)), 0);
	vfile_close(&f);
	free(c);
	free(b);
}
END_TEST

/* Frames that are not exactly one zstd frame, with every CRC right. */
START_TEST(test_bad_frames)
{
	uint8_t d[1000], frame[2000], two[4000];
	size_t fl, l2;
	struct {
		const void *data;
		size_t len;
		uint64_t raw;
		const char *why;
	} cases[4];
	uint8_t skippable[16] = { 0x50, 0x2a, 0x4d, 0x18, 8, 0, 0, 0 };

	fill(d, sizeof(d), 5);
	fl = ZSTD_compress(frame, sizeof(frame), d, sizeof(d), 3);
	ck_assert(!ZSTD_isError(fl));
	memcpy(two, frame, fl);
	memcpy(two + fl, frame, fl);
	l2 = 2 * fl;
	cases[0] = (typeof(cases[0])){ two, l2, 1000, "not exactly one zstd frame" };
	cases[1] = (typeof(cases[0])){ skippable, sizeof(skippable), 0, "not a zstd frame" };
	cases[2] = (typeof(cases[0])){ frame, fl - 1, 1000, "not exactly one zstd frame" };
	cases[3] = (typeof(cases[0])){ "\x28\xb5\x2f\xfd", 4, 0, "content size" };
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct vmt_vfile_writer w = { 0 };
		struct vmt_vfile f;
		const uint8_t *p;
		void *owned;
		char why[200];
		size_t len;
		int fd = test_memfd("vfile-test");
		uint8_t *b;

		/* written raw, then flagged zstd with the raw size claimed */
		ck_assert_int_eq(vfile_writer_start(&w, fd, MAGIC, 1, 0), 0);
		ck_assert_int_eq(vfile_write_section(&w, 9, 0, 0, cases[i].data, cases[i].len), 0);
		ck_assert_int_eq(vfile_writer_finish(&w), 0);
		b = test_slurp(fd, &len);
		put_le32(b + 32 + 8, VMT_VSECT_ZSTD);
		put_le64(b + 32 + 24, cases[i].raw);
		reseal(b + 32);
		ck_assert_int_eq(vfile_open_mem(&f, b, len, MAGIC, BIG, why, sizeof(why)), 0);
		ck_assert_int_eq(vfile_section_data_why(&f, &f.sect[0], &p, &owned, why, sizeof(why)),
				 -EBADMSG);
		ck_assert_msg(strstr(why, cases[i].why), "case %zu: %s", i, why);
		vfile_close(&f);
		free(b);
		close(fd);
	}
}
END_TEST

START_TEST(test_every_truncation)
{
	size_t len;
	uint8_t *b = small_file(&len);
	char why[200];

	for (size_t n = 0; n < len; n++) {
		/* a copy of exactly n bytes, so ASan sees any read past it */
		uint8_t *c = malloc(n ? n : 1);

		memcpy(c, b, n);
		why[0] = 0;
		ck_assert_int_eq(read_all(c, n, why, sizeof(why)), -EBADMSG);
		ck_assert(why[0]);
		free(c);
	}
	ck_assert_int_eq(read_all(b, len, why, sizeof(why)), 0);
	free(b);
}
END_TEST

START_TEST(test_every_byte_flip)
{
	size_t len;
	uint8_t *b = small_file(&len), *c = malloc(len);
	static const uint8_t masks[] = { 0x01, 0x80, 0xff };
	char why[200];

	for (size_t i = 0; i < len; i++)
		for (size_t m = 0; m < ARRAY_SIZE(masks); m++) {
			memcpy(c, b, len);
			c[i] ^= masks[m];
			ck_assert_msg(read_all(c, len, why, sizeof(why)) == -EBADMSG,
				      "flip of byte %zu by 0x%x accepted", i, masks[m]);
		}
	free(c);
	free(b);
}
END_TEST

/* Corrupt compressed bytes with the CRCs fixed: zstd must fail cleanly or decode. */
START_TEST(test_zstd_fuzz)
{
	size_t len;
	uint8_t *b = small_file(&len), *c = malloc(len);
	const size_t h1 = 32 + 40 + 5;
	uint64_t stored = get_le64(b + h1 + 16);
	unsigned seed = 1;

	for (size_t i = 0; i < stored; i++)
		for (int k = 0; k < 4; k++) {
			struct vmt_vfile f;
			const uint8_t *p;
			void *owned;
			int r;

			memcpy(c, b, len);
			c[h1 + 40 + i] ^= (uint8_t)(k == 0 ? 0xff : rand_r(&seed) | 1);
			put_le32(c + h1 + 12, crc32c(0, c + h1 + 40, stored));
			reseal(c + h1);
			ck_assert_int_eq(vfile_open_mem(&f, c, len, MAGIC, BIG, NULL, 0), 0);
			r = vfile_section_data(&f, &f.sect[1], &p, &owned);
			ck_assert(r == 0 || r == -EBADMSG);
			if (r == 0)
				ck_assert_uint_eq(f.sect[1].raw_size, 300);
			free(owned);
			vfile_close(&f);
		}
	free(c);
	free(b);
}
END_TEST

START_TEST(test_crc_as_documented)
{
	uint8_t b[1000];

	ck_assert_uint_eq(crc32c(0, "123456789", 9), 0xe3069283u);
	ck_assert_uint_eq(crc32c_sw(0, "123456789", 9), 0xe3069283u);
	ck_assert_uint_eq(crc32c(0, NULL, 0), 0);
	/* the instruction and the tables agree on every length, every start,
	 * chained or not */
	for (size_t i = 0; i < sizeof(b); i++)
		b[i] = (uint8_t)(i * 131 + 7);
	for (size_t len = 0; len <= 40; len++)
		for (size_t off = 0; off < 8; off++)
			ck_assert_uint_eq(crc32c(0x1234, b + off, len), crc32c_sw(0x1234, b + off, len));
	ck_assert_uint_eq(crc32c(crc32c(0, b, 333), b + 333, 667), crc32c_sw(0, b, sizeof(b)));
}
END_TEST

START_TEST(test_tlv)
{
	struct vmt_buf b = { 0 };
	struct vmt_tlv t;
	size_t pos = 0;
	uint32_t v32;
	uint64_t v64;
	char s[8];

	ck_assert_int_eq(tlv_put_u32(&b, 1, 0xdeadbeef), 0);
	ck_assert_int_eq(tlv_put_u64(&b, 2, 0x0102030405060708ull), 0);
	ck_assert_int_eq(tlv_put_str(&b, 3, "abc"), 0);
	ck_assert_int_eq(tlv_put(&b, 0x7777, "zz", 2), 0);	/* unknown to the reader */
	ck_assert_int_eq(tlv_put(&b, 4, NULL, 0), 0);
	ck_assert_uint_eq(b.len, 12 + 16 + 11 + 10 + 8);
	/* the layout: u16 tag, u16 0, u32 len, data */
	ck_assert_uint_eq(get_le16(b.data), 1);
	ck_assert_uint_eq(get_le16(b.data + 2), 0);
	ck_assert_uint_eq(get_le32(b.data + 4), 4);
	ck_assert_uint_eq(get_le32(b.data + 8), 0xdeadbeef);

	ck_assert_int_eq(tlv_next(b.data, b.len, &pos, &t), 1);
	ck_assert_int_eq(tlv_u32(&t, &v32), 0);
	ck_assert_uint_eq(v32, 0xdeadbeef);
	ck_assert_int_eq(tlv_u64(&t, &v64), -EBADMSG);
	ck_assert_int_eq(tlv_next(b.data, b.len, &pos, &t), 1);
	ck_assert_int_eq(tlv_u64(&t, &v64), 0);
	ck_assert_uint_eq(v64, 0x0102030405060708ull);
	ck_assert_int_eq(tlv_u32(&t, &v32), -EBADMSG);
	ck_assert_int_eq(tlv_next(b.data, b.len, &pos, &t), 1);
	ck_assert_int_eq(tlv_str(&t, s, sizeof(s)), 0);
	ck_assert_str_eq(s, "abc");
	ck_assert_int_eq(tlv_str(&t, s, 3), -EBADMSG);	/* no room for the NUL */
	ck_assert_int_eq(tlv_str(&t, s, 4), 0);
	ck_assert_int_eq(tlv_next(b.data, b.len, &pos, &t), 1);
	ck_assert_uint_eq(t.tag, 0x7777);
	ck_assert_int_eq(tlv_next(b.data, b.len, &pos, &t), 1);
	ck_assert_uint_eq(t.len, 0);
	ck_assert_int_eq(tlv_str(&t, s, 1), 0);
	ck_assert_str_eq(s, "");
	ck_assert_int_eq(tlv_next(b.data, b.len, &pos, &t), 0);
	ck_assert_uint_eq(pos, b.len);

	/* every truncation inside a record is an error, at a record boundary the end */
	for (size_t n = 0; n < b.len; n++) {
		size_t at = 0;
		int r;

		while ((r = tlv_next(b.data, n, &at, &t)) > 0)
			;
		ck_assert(r == 0 || r == -EBADMSG);
		ck_assert(r == 0 ? (n == 0 || n == 12 || n == 28 || n == 39 || n == 49) : 1);
	}
	/* reserved half-word */
	b.data[2] = 1;
	pos = 0;
	ck_assert_int_eq(tlv_next(b.data, b.len, &pos, &t), -EBADMSG);
	/* non-printable strings */
	b.len = 0;
	ck_assert_int_eq(tlv_put(&b, 3, "a\nb", 3), 0);
	pos = 0;
	ck_assert_int_eq(tlv_next(b.data, b.len, &pos, &t), 1);
	ck_assert_int_eq(tlv_str(&t, s, sizeof(s)), -EBADMSG);
	/* a huge length */
	b.len = 0;
	ck_assert_int_eq(tlv_put(&b, 3, "abcd", 4), 0);
	put_le32(b.data + 4, 0xffffffffu);
	pos = 0;
	ck_assert_int_eq(tlv_next(b.data, b.len, &pos, &t), -EBADMSG);
	ck_assert_uint_eq(pos, 0);
	buf_free(&b);
}
END_TEST

struct rec {
	uint32_t a;
	uint64_t b;
	char s[6];
};
static const struct vmt_tlv_field rec_fields[] = {
	VMT_TLV_FIELD(1, U32, struct rec, a),
	VMT_TLV_FIELD(2, U64, struct rec, b),
	VMT_TLV_FIELD(3, STR, struct rec, s),
};

START_TEST(test_tlv_fields)
{
	struct rec in = { 7, 1ull << 40, "hello" }, out = { 0 };
	struct vmt_buf b = { 0 };
	struct vmt_tlv t;
	uint64_t seen = 0;
	size_t pos = 0;
	char why[100];
	int r;

	ck_assert_int_eq(tlv_put_fields(&b, rec_fields, 3, &in), 0);
	ck_assert_int_eq(tlv_put_u32(&b, 99, 1), 0);
	while ((r = tlv_next(b.data, b.len, &pos, &t)) > 0)
		ck_assert_int_eq(tlv_get_field(&t, rec_fields, 3, &out, &seen, why, sizeof(why)),
				 t.tag == 99 ? 0 : 1);
	ck_assert_int_eq(r, 0);
	ck_assert_int_eq(tlv_check_fields(rec_fields, 3, seen, why, sizeof(why)), 0);
	ck_assert_uint_eq(out.a, 7);
	ck_assert_uint_eq(out.b, 1ull << 40);
	ck_assert_str_eq(out.s, "hello");

	/* repeated */
	pos = 0;
	ck_assert_int_eq(tlv_next(b.data, b.len, &pos, &t), 1);
	ck_assert_int_eq(tlv_get_field(&t, rec_fields, 3, &out, &seen, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "a (tag 0x1) appears twice");
	/* missing */
	ck_assert_int_eq(tlv_check_fields(rec_fields, 3, 5, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "no b (tag 0x2)");
	/* wrong length */
	b.len = 0;
	ck_assert_int_eq(tlv_put_u64(&b, 1, 1), 0);
	pos = 0;
	seen = 0;
	ck_assert_int_eq(tlv_next(b.data, b.len, &pos, &t), 1);
	ck_assert_int_eq(tlv_get_field(&t, rec_fields, 3, &out, &seen, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "a (tag 0x1): bad value of 8 bytes");
	/* writer refuses what the reader would */
	memcpy(in.s, "toolon", 6);
	ck_assert_int_eq(tlv_put_fields(&b, rec_fields, 3, &in), -EINVAL);
	memcpy(in.s, "a\tb", 4);
	ck_assert_int_eq(tlv_put_fields(&b, rec_fields, 3, &in), -EINVAL);
	buf_free(&b);
}
END_TEST

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

START_TEST(test_afile_commit_abort)
{
	char *dir = test_mkdtemp("afile");
	char path[512], *data;
	struct vmt_afile a;
	struct stat st;
	size_t len;

	ck_assert_ptr_nonnull(dir);
	ck_assert_int_eq(afile_create(&a, dir, "x.vmts"), 0);
	ck_assert_int_eq(strncmp(a.tmpname, ".x.vmts.tmp-", 12), 0);
	/* the template was filled in (a random character may itself be 'X') */
	ck_assert_str_ne(a.tmpname + 12, "XXXXXX");
	ck_assert_uint_eq(strlen(a.tmpname), 18);
	ck_assert_int_eq(write_full(a.fd, "abc", 3), 0);
	snprintf(path, sizeof(path), "%s/x.vmts", dir);
	ck_assert_int_eq(stat(path, &st), -1);	/* not visible before commit */
	ck_assert_int_eq(count_entries(dir), 1);
	ck_assert_int_eq(afile_commit(&a), 0);
	ck_assert_int_eq(a.fd, -1);
	ck_assert_int_eq(read_file(path, 100, &data, &len), 0);
	ck_assert_uint_eq(len, 3);
	ck_assert_mem_eq(data, "abc", 3);
	free(data);
	ck_assert_int_eq(count_entries(dir), 1);
	afile_abort(&a);	/* no-op after commit */
	ck_assert_int_eq(stat(path, &st), 0);

	/* abort leaves nothing */
	ck_assert_int_eq(afile_create(&a, dir, "y.vmts"), 0);
	ck_assert_int_eq(write_full(a.fd, "abc", 3), 0);
	afile_abort(&a);
	afile_abort(&a);
	ck_assert_int_eq(count_entries(dir), 1);

	/* replace: readers see the old or the new file, whole */
	ck_assert_int_eq(afile_create(&a, dir, "x.vmts"), 0);
	ck_assert_int_eq(write_full(a.fd, "defg", 4), 0);
	ck_assert_int_eq(afile_commit(&a), 0);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_int_eq(st.st_size, 4);

	/* a commit that cannot rename: a non-empty directory holds the name */
	snprintf(path, sizeof(path), "%s/d", dir);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/d/f", dir);
	ck_assert_int_eq(close(open(path, O_CREAT | O_WRONLY, 0600)), 0);
	ck_assert_int_eq(afile_create(&a, dir, "d"), 0);
	ck_assert_int_eq(write_full(a.fd, "abc", 3), 0);
	ck_assert_int_lt(afile_commit(&a), 0);
	ck_assert_int_eq(a.fd, -1);
	ck_assert_int_eq(a.dirfd, -1);
	afile_abort(&a);
	ck_assert_int_eq(count_entries(dir), 2);	/* x.vmts and d: no temporary */
	snprintf(path, sizeof(path), "%s/d", dir);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));

	/* names */
	ck_assert_int_eq(afile_create(&a, dir, "a/b"), -EINVAL);
	ck_assert_int_eq(afile_create(&a, dir, ""), -EINVAL);
	ck_assert_int_eq(afile_create(&a, dir, ".."), -EINVAL);
	ck_assert_int_eq(afile_create(&a, "/nonexistent", "x"), -ENOENT);
	ck_assert_int_eq(a.fd, -1);
	ck_assert_int_eq(a.dirfd, -1);
	test_rmtree(dir);
	free(dir);
}
END_TEST

START_TEST(test_afile_enospc)
{
	char *dir;
	struct vmt_afile a;
	struct vmt_vfile_writer w = { .zstd_level = 1, .zstd_workers = 2 };
	static uint8_t d[256 << 10];
	int r;

	if (!test_have_root())
		VMT_SKIP("needs root to mount a small tmpfs");
	dir = test_mkdtemp("enospc");
	ck_assert_ptr_nonnull(dir);
	if (mount("tmpfs", dir, "tmpfs", 0, "size=64k") < 0) {
		test_rmtree(dir);
		free(dir);
		VMT_SKIP("cannot mount tmpfs: %s", strerror(errno));
	}
	/* random bytes do not compress: the stream runs into the full disk */
	for (size_t i = 0; i < sizeof(d); i++)
		d[i] = (uint8_t)(rand() >> 7);
	for (int level = 0; level <= 1; level++) {
		w.zstd_level = level;
		ck_assert_int_eq(afile_create(&a, dir, "full"), 0);
		r = vfile_writer_start(&w, a.fd, MAGIC, 1, 0);
		if (r == 0)
			r = vfile_write_section(&w, 1, 0, level ? VMT_VSECT_ZSTD : 0, d, sizeof(d));
		if (r == 0)
			r = vfile_write_section(&w, 1, 1, 0, d, sizeof(d));
		ck_assert_int_eq(vfile_write_section(&w, 1, 2, 0, d, 1), -ENOSPC);	/* sticky */
		ck_assert_int_eq(vfile_writer_finish(&w), -ENOSPC);
		ck_assert_int_eq(r, -ENOSPC);
		afile_abort(&a);
		ck_assert_int_eq(count_entries(dir), 0);
	}
	/* a small file still fits and is published */
	ck_assert_int_eq(afile_create(&a, dir, "small"), 0);
	ck_assert_int_eq(write_full(a.fd, d, 1000), 0);
	ck_assert_int_eq(afile_commit(&a), 0);
	ck_assert_int_eq(count_entries(dir), 1);
	umount2(dir, MNT_DETACH);
	test_rmtree(dir);
	free(dir);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("vfile");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_round_trip_raw_and_zstd);
	tcase_add_test(tc, test_many_iovecs_and_workers);
	tcase_add_test(tc, test_header_checks);
	tcase_add_test(tc, test_end_section);
	tcase_add_test(tc, test_section_checks);
	tcase_add_test(tc, test_bad_frames);
	tcase_add_test(tc, test_every_truncation);
	tcase_add_test(tc, test_every_byte_flip);
	tcase_add_test(tc, test_zstd_fuzz);
	tcase_add_test(tc, test_crc_as_documented);
	tcase_add_test(tc, test_tlv);
	tcase_add_test(tc, test_tlv_fields);
	tcase_add_test(tc, test_afile_commit_abort);
	tcase_add_test(tc, test_afile_enospc);
	suite_add_tcase(s, tc);
	return test_run_suite(s);
}
