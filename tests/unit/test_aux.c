/* SPDX-License-Identifier: MIT */
/* Aux files: round trip, content id, and every way a file can be bad. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "aux.h"
#include "meta.h"
#include "testutil.h"
#include "util.h"
#include "tlv.h"
#include "afile.h"
#include "vfile.h"

#define MAX_META (16u << 20)

static void make_aux(struct vmt_aux *a, size_t kallsyms_lines)
{
	struct vmt_buf b = { 0 }, k = { 0 };
	static const char hp[] = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n";
	static const char fmt[] = "name: sched_switch\nID: 316\nformat:\n";

	memset(a, 0, sizeof(*a));
	snprintf(a->guest, sizeof(a->guest), "vm1");
	a->version = 4;
	a->created_ns = 1795349594000000000ull;
	a->ncpus = 2;
	a->page_size = 4096;
	snprintf(a->release, sizeof(a->release), "6.1.0-28-cloud-amd64");
	snprintf(a->clock, sizeof(a->clock), "global");
	snprintf(a->boot_id, sizeof(a->boot_id), "3f1c2e4a-9b7d-4c1e-8f00-0123456789ab");
	snprintf(a->agent, sizeof(a->agent), "vmtrace-agent 0.1.0");
	ck_assert_int_eq(meta_add(&b, "events/header_page", hp, sizeof(hp) - 1), 0);
	ck_assert_int_eq(meta_add(&b, "events/sched/sched_switch/format", fmt, sizeof(fmt) - 1), 0);
	for (size_t i = 0; i < kallsyms_lines; i++) {
		char line[64];
		int n = snprintf(line, sizeof(line), "ffffffff81%06zx T func_%zu\n", i * 16, i);
		buf_append(&k, line, (size_t)n);
	}
	ck_assert_int_eq(meta_add(&b, "kallsyms", k.data, (uint32_t)k.len), 0);
	buf_free(&k);
	a->meta = b.data;
	a->meta_len = b.len;
	a->id = aux_compute_id(a);
}

static uint8_t *write_mem(const struct vmt_aux *a, size_t *len)
{
	int fd = test_memfd("aux-test");
	uint8_t *b;

	ck_assert_int_eq(aux_write(fd, a), 0);
	b = test_slurp(fd, len);
	close(fd);
	return b;
}

static void assert_same(const struct vmt_aux *x, const struct vmt_aux *y)
{
	ck_assert_str_eq(x->guest, y->guest);
	ck_assert_uint_eq(x->version, y->version);
	ck_assert_uint_eq(x->id, y->id);
	ck_assert_uint_eq(x->created_ns, y->created_ns);
	ck_assert_uint_eq(x->ncpus, y->ncpus);
	ck_assert_uint_eq(x->page_size, y->page_size);
	ck_assert_str_eq(x->release, y->release);
	ck_assert_str_eq(x->clock, y->clock);
	ck_assert_str_eq(x->boot_id, y->boot_id);
	ck_assert_str_eq(x->agent, y->agent);
	ck_assert_uint_eq(x->meta_len, y->meta_len);
	ck_assert(!memcmp(x->meta, y->meta, x->meta_len));
}

static void reseal(uint8_t *h)
{
	put_le32(h + 36, crc32c(0, h, 36));
}

/* INFO records in the tags of docs/FORMAT.md, for a given id; skip leaves one out. */
static void info_tlv(struct vmt_buf *b, const struct vmt_aux *a, int skip)
{
	if (skip != 0x01) tlv_put_str(b, 0x01, a->guest);
	if (skip != 0x02) tlv_put_u32(b, 0x02, a->version);
	if (skip != 0x03) tlv_put_u64(b, 0x03, a->id);
	if (skip != 0x04) tlv_put_u64(b, 0x04, a->created_ns);
	if (skip != 0x05) tlv_put_u32(b, 0x05, a->ncpus);
	if (skip != 0x06) tlv_put_u32(b, 0x06, a->page_size);
	if (skip != 0x07) tlv_put_str(b, 0x07, a->release);
	if (skip != 0x08) tlv_put_str(b, 0x08, a->clock);
	if (skip != 0x09) tlv_put_str(b, 0x09, a->boot_id);
	if (skip != 0x0a) tlv_put_str(b, 0x0a, a->agent);
}

/* An aux file of INFO (from info) and META (bundle), written by hand. */
static uint8_t *craft(const struct vmt_buf *info, const void *bundle, size_t blen, uint32_t version,
		      size_t *len)
{
	struct vmt_vfile_writer w = { .zstd_level = 3 };
	int fd = test_memfd("aux-test");
	uint8_t *b;

	ck_assert_int_eq(vfile_writer_start(&w, fd, VMT_AUX_MAGIC, version, 0), 0);
	ck_assert_int_eq(vfile_write_section(&w, 0x01, 0, 0, info->data, info->len), 0);
	ck_assert_int_eq(vfile_write_section(&w, 0x30, 0, VMT_VSECT_ZSTD, bundle, blen), 0);
	ck_assert_int_eq(vfile_writer_finish(&w), 0);
	b = test_slurp(fd, len);
	close(fd);
	return b;
}

static int read_mem(const uint8_t *b, size_t len, char *why, size_t n)
{
	struct vmt_aux a;
	int r = aux_read_mem(b, len, MAX_META, &a, why, n);

	if (r < 0)
		ck_assert_ptr_null(a.meta);
	aux_free(&a);
	return r;
}

START_TEST(test_round_trip)
{
	struct vmt_aux a, r;
	char why[256] = "", *dir = test_mkdtemp("aux"), name[64], path[512];
	struct vmt_afile f;
	size_t len;
	uint8_t *b;

	make_aux(&a, 20000);
	b = write_mem(&a, &len);
	ck_assert_uint_lt(len, a.meta_len / 2);	/* the bundle is compressed */
	ck_assert_msg(aux_read_mem(b, len, MAX_META, &r, why, sizeof(why)) == 0, "%s", why);
	assert_same(&a, &r);
	aux_free(&r);
	ck_assert_ptr_null(r.meta);
	free(b);

	/* on disk, published */
	ck_assert_ptr_nonnull(dir);
	ck_assert_int_eq(aux_file_name(name, sizeof(name), a.version), 0);
	ck_assert_str_eq(name, "aux-000004.vmtaux");
	ck_assert_int_eq(afile_create(&f, dir, name), 0);
	ck_assert_int_eq(aux_write(f.fd, &a), 0);
	ck_assert_int_eq(afile_commit(&f), 0);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	ck_assert_msg(aux_read(path, MAX_META, &r, why, sizeof(why)) == 0, "%s", why);
	assert_same(&a, &r);
	aux_free(&r);
	/* max_meta bounds the bundle */
	ck_assert_int_eq(aux_read(path, a.meta_len - 1, &r, why, sizeof(why)), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(why, "section 1 (type 0x30 id 0): raw size"));
	ck_assert_ptr_null(r.meta);
	ck_assert_int_eq(aux_read(path, a.meta_len, &r, why, sizeof(why)), 0);
	aux_free(&r);
	ck_assert_int_eq(aux_read("/nonexistent/aux-000001.vmtaux", MAX_META, &r, why, sizeof(why)),
			 -ENOENT);
	test_rmtree(dir);
	free(dir);
	free(a.meta);
}
END_TEST

START_TEST(test_compute_id)
{
	struct vmt_aux a, b;
	uint64_t id;

	make_aux(&a, 10);
	id = aux_compute_id(&a);
	ck_assert_uint_eq(id, a.id);
	b = a;
	/* not part of the content */
	snprintf(b.guest, sizeof(b.guest), "other");
	b.version = 99;
	b.created_ns = 1;
	snprintf(b.agent, sizeof(b.agent), "agent 2");
	ck_assert_uint_eq(aux_compute_id(&b), id);
	/* part of it */
	b = a;
	b.ncpus = 3;
	ck_assert_uint_ne(aux_compute_id(&b), id);
	b = a;
	b.page_size = 8192;
	ck_assert_uint_ne(aux_compute_id(&b), id);
	b = a;
	snprintf(b.clock, sizeof(b.clock), "local");
	ck_assert_uint_ne(aux_compute_id(&b), id);
	b = a;
	b.boot_id[0] = '4';
	ck_assert_uint_ne(aux_compute_id(&b), id);
	b = a;
	b.meta_len--;
	ck_assert_uint_ne(aux_compute_id(&b), id);
	b = a;
	/* strings are length-prefixed: moving a byte across a boundary changes the id */
	snprintf(b.release, sizeof(b.release), "6.1.0-28-cloud-amd6");
	snprintf(b.clock, sizeof(b.clock), "4global");
	ck_assert_uint_ne(aux_compute_id(&b), id);

	/* a fixed value, so the documented algorithm cannot drift */
	memset(&b, 0, sizeof(b));
	b.ncpus = 1;
	b.page_size = 4096;
	snprintf(b.release, sizeof(b.release), "r");
	snprintf(b.clock, sizeof(b.clock), "c");
	snprintf(b.boot_id, sizeof(b.boot_id), "b");
	b.meta = (uint8_t *)"M";
	b.meta_len = 1;
	{
		/* FNV-1a 64 over the documented bytes, computed here by hand */
		static const uint8_t bytes[] = { 1, 0, 0, 0, 0, 0x10, 0, 0, 1, 0, 0, 0, 'r', 1, 0, 0, 0, 'c',
						 1, 0, 0, 0, 'b', 1, 0, 0, 0, 0, 0, 0, 0, 'M' };
		uint64_t h = 0xcbf29ce484222325ull;

		for (size_t i = 0; i < sizeof(bytes); i++)
			h = (h ^ bytes[i]) * 0x100000001b3ull;
		ck_assert_uint_eq(aux_compute_id(&b), h);
	}
	free(a.meta);
}
END_TEST

START_TEST(test_write_checks)
{
	struct vmt_aux a;
	int fd = test_memfd("aux-test");
	uint8_t *m;

	make_aux(&a, 1);
	a.id++;
	ck_assert_int_eq(aux_write(fd, &a), -EINVAL);
	a.id--;
	snprintf(a.guest, sizeof(a.guest), "a b");
	ck_assert_int_eq(aux_write(fd, &a), -EINVAL);
	snprintf(a.guest, sizeof(a.guest), "vm1");
	a.version = 0;
	ck_assert_int_eq(aux_write(fd, &a), -EINVAL);
	a.version = 1;
	/* a bundle meta_validate() refuses: the header page renamed */
	m = a.meta;
	memcpy(m + 8, "events/header_pagX", 18);
	a.id = aux_compute_id(&a);
	ck_assert_int_eq(aux_write(fd, &a), -EINVAL);
	memcpy(m + 8, "events/header_page", 18);
	a.id = aux_compute_id(&a);
	a.release[3] = '\n';
	a.id = aux_compute_id(&a);
	ck_assert_int_eq(aux_write(fd, &a), -EINVAL);
	a.release[3] = '0';
	a.id = aux_compute_id(&a);
	ck_assert_int_eq(aux_write(fd, &a), 0);
	close(fd);
	free(a.meta);

	char out[32];
	ck_assert_int_eq(aux_file_name(out, sizeof(out), 1), 0);
	ck_assert_str_eq(out, "aux-000001.vmtaux");
	ck_assert_int_eq(aux_file_name(out, sizeof(out), 1234567), 0);
	ck_assert_str_eq(out, "aux-1234567.vmtaux");
	ck_assert_int_eq(aux_file_name(out, sizeof(out), 0), -EINVAL);
	ck_assert_int_eq(aux_file_name(out, 17, 1), -ENAMETOOLONG);
	ck_assert_int_eq(aux_file_name(out, 18, 1), 0);

	/* names of any width back to their version; near misses refused */
	{
		static const uint32_t vs[] = { 1, 999999, 1000000, 4294967295u };
		static const char *const bad[] = { "aux-00001.vmtaux", "aux-0001000000.vmtaux",
						   "aux-000000.vmtaux", "aux-4294967296.vmtaux",
						   "aux-00000a.vmtaux", "aux-000001.vmtau", "xaux-000001.vmtaux" };
		uint32_t v;

		for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++) {
			ck_assert_int_eq(aux_file_name(out, sizeof(out), vs[i]), 0);
			ck_assert(aux_file_version(out, strlen(out), &v));
			ck_assert_uint_eq(v, vs[i]);
		}
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
			ck_assert_msg(!aux_file_version(bad[i], strlen(bad[i]), &v), "%s taken", bad[i]);
	}
}
END_TEST

/* Files with every CRC right whose content is wrong. */
START_TEST(test_bad_content)
{
	struct vmt_aux a, bad;
	struct vmt_buf info = { 0 }, m = { 0 };
	char why[256];
	size_t len;
	uint8_t *b;

	make_aux(&a, 5);
	info_tlv(&info, &a, -1);
	b = craft(&info, a.meta, a.meta_len, 1, &len);
	ck_assert_msg(read_mem(b, len, why, sizeof(why)) == 0, "%s", why);
	free(b);

	/* wrong version */
	b = craft(&info, a.meta, a.meta_len, 2, &len);
	ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "format version 2, this reader knows 1");
	free(b);

	/* a bundle that fails meta_validate, with its id right */
	ck_assert_int_eq(meta_add(&m, "events/header_page", "x", 1), 0);
	ck_assert_int_eq(meta_add(&m, "../etc/passwd", "x", 1), 0);
	bad = a;
	bad.meta = m.data;
	bad.meta_len = m.len;
	bad.id = aux_compute_id(&bad);
	info.len = 0;
	info_tlv(&info, &bad, -1);
	b = craft(&info, m.data, m.len, 1, &len);
	ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "section 1 (type 0x30 id 0): bad bundle: bad file name");
	free(b);
	/* and one without events/header_page */
	m.len = 0;
	ck_assert_int_eq(meta_add(&m, "kallsyms", "x", 1), 0);
	bad.meta = m.data;
	bad.meta_len = m.len;
	bad.id = aux_compute_id(&bad);
	info.len = 0;
	info_tlv(&info, &bad, -1);
	b = craft(&info, m.data, m.len, 1, &len);
	ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "section 1 (type 0x30 id 0): bad bundle: no events/header_page");
	free(b);

	/* the stored id is not the content's */
	bad = a;
	bad.id ^= 1;
	info.len = 0;
	info_tlv(&info, &bad, -1);
	b = craft(&info, a.meta, a.meta_len, 1, &len);
	ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(why, "section 0 (type 0x1 id 0): content id"));
	free(b);

	/* fields */
	info.len = 0;
	info_tlv(&info, &a, 0x09);
	b = craft(&info, a.meta, a.meta_len, 1, &len);
	ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "section 0 (type 0x1 id 0): no boot_id (tag 0x9)");
	free(b);
	bad = a;
	bad.page_size = 4000;
	bad.id = aux_compute_id(&bad);
	info.len = 0;
	info_tlv(&info, &bad, -1);
	b = craft(&info, a.meta, a.meta_len, 1, &len);
	ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "section 0 (type 0x1 id 0): page size 4000 is not a power of two in 256..65536");
	free(b);
	info.len = 0;
	info_tlv(&info, &a, 0x08);
	tlv_put_str(&info, 0x08, "0123456789012345678901234567890123456789");	/* > VMT_STR_CLOCK - 1 */
	b = craft(&info, a.meta, a.meta_len, 1, &len);
	ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "section 0 (type 0x1 id 0): clock (tag 0x8): bad value of 40 bytes");
	free(b);
	/* unknown records are skipped */
	info.len = 0;
	info_tlv(&info, &a, -1);
	tlv_put_str(&info, 0x4000, "from the future");
	b = craft(&info, a.meta, a.meta_len, 1, &len);
	ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), 0);
	free(b);

	/* sections: META missing, INFO twice */
	{
		struct vmt_vfile_writer w = { 0 };
		int fd = test_memfd("aux-test");

		info.len = 0;
		info_tlv(&info, &a, -1);
		ck_assert_int_eq(vfile_writer_start(&w, fd, VMT_AUX_MAGIC, 1, 0), 0);
		ck_assert_int_eq(vfile_write_section(&w, 0x01, 0, 0, info.data, info.len), 0);
		ck_assert_int_eq(vfile_writer_finish(&w), 0);
		b = test_slurp(fd, &len);
		ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
		ck_assert_str_eq(why, "no META section");
		free(b);
		ck_assert_int_eq(ftruncate(fd, 0), 0);
		ck_assert_int_eq(vfile_writer_start(&w, fd, VMT_AUX_MAGIC, 1, 0), 0);
		ck_assert_int_eq(vfile_write_section(&w, 0x01, 0, 0, info.data, info.len), 0);
		ck_assert_int_eq(vfile_write_section(&w, 0x30, 0, 0, a.meta, a.meta_len), 0);
		ck_assert_int_eq(vfile_write_section(&w, 0x01, 0, 0, info.data, info.len), 0);
		ck_assert_int_eq(vfile_writer_finish(&w), 0);
		b = test_slurp(fd, &len);
		ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
		ck_assert_str_eq(why, "section 2 (type 0x1 id 0): a second section of this type, or id not 0");
		free(b);
		close(fd);
	}
	buf_free(&info);
	buf_free(&m);
	free(a.meta);
}
END_TEST

START_TEST(test_huge_meta)
{
	struct vmt_aux a;
	char why[256];
	size_t len;
	uint8_t *b, *h;

	make_aux(&a, 5);
	b = write_mem(&a, &len);
	/* the META header follows INFO */
	h = b + 32 + 40 + get_le64(b + 32 + 16);
	ck_assert_uint_eq(get_le32(h), 0x30);
	put_le64(h + 24, 1ull << 40);
	reseal(h);
	ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "section 1 (type 0x30 id 0): raw size 1099511627776 exceeds the limit 16777216");
	put_le64(h + 24, MAX_META);
	reseal(h);
	ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(why, "impossible"));
	free(b);

	/* a small max_meta, below the INFO bound */
	b = write_mem(&a, &len);
	{
		struct vmt_aux r;

		ck_assert_int_eq(aux_read_mem(b, len, 100, &r, why, sizeof(why)), -EBADMSG);
		ck_assert_ptr_nonnull(strstr(why, "section 1 (type 0x30 id 0): bundle of "));
		ck_assert_ptr_nonnull(strstr(why, "bytes, more than 100"));
		ck_assert_int_eq(aux_read_mem(b, len, a.meta_len, &r, why, sizeof(why)), 0);
		aux_free(&r);
	}
	free(b);
	free(a.meta);
}
END_TEST

START_TEST(test_every_truncation_and_flip)
{
	static const uint8_t masks[] = { 0x01, 0x80, 0xff };
	struct vmt_aux a;
	char why[256];
	size_t len;
	uint8_t *b, *c;

	make_aux(&a, 3);
	b = write_mem(&a, &len);
	ck_assert_int_eq(read_mem(b, len, why, sizeof(why)), 0);
	for (size_t n = 0; n < len; n++) {
		c = malloc(n ? n : 1);
		memcpy(c, b, n);
		why[0] = 0;
		ck_assert_msg(read_mem(c, n, why, sizeof(why)) == -EBADMSG, "length %zu", n);
		ck_assert(why[0]);
		free(c);
	}
	c = malloc(len);
	for (size_t i = 0; i < len; i++)
		for (size_t m = 0; m < ARRAY_SIZE(masks); m++) {
			memcpy(c, b, len);
			c[i] ^= masks[m];
			ck_assert_msg(read_mem(c, len, why, sizeof(why)) == -EBADMSG,
				      "flip of byte %zu by 0x%x accepted", i, masks[m]);
		}
	/* a sample is not an aux */
	memcpy(c, b, len);
	memcpy(c, "VMTSMPL1", 8);
	ck_assert_int_eq(read_mem(c, len, why, sizeof(why)), -EBADMSG);
	ck_assert_str_eq(why, "bad magic: not a VMTAUX01 file");
	free(c);
	free(b);
	free(a.meta);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("aux");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_compute_id);
	tcase_add_test(tc, test_write_checks);
	tcase_add_test(tc, test_bad_content);
	tcase_add_test(tc, test_huge_meta);
	tcase_add_test(tc, test_every_truncation_and_flip);
	suite_add_tcase(s, tc);
	return test_run_suite(s);
}
