/* SPDX-License-Identifier: MIT */
/*
 * Retention over real sample and aux files, published with afile into a
 * temporary STATE_DIR: limits by count, bytes and age, aux files kept while
 * needed or pinned, temporaries, what must never be touched, listing.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aux.h"
#include "meta.h"
#include "retention.h"
#include "sample.h"
#include "testutil.h"
#include "util.h"
#include "afile.h"
#include "vfile.h"

#define T0 1795349594ull	/* 2026-11-22T12:13:14Z */
#define NOW (T0 + 100000)

/* ---- helpers --------------------------------------------------------- */

static void mkdir_ok(const char *path)
{
	ck_assert_msg(mkdir(path, 0750) == 0 || errno == EEXIST, "mkdir %s: %s", path,
		      strerror(errno));
}

static void sample_name(char *out, size_t n, const char *guest, uint64_t s, uint32_t us)
{
	ck_assert_int_eq(sample_file_name(out, n, guest, s * 1000000000ull + us * 1000ull + 999), 0);
}

/* A sample of one CPU and npages zero pages; returns its size on disk. */
static uint64_t put_sample(const char *dir, const char *guest, uint64_t s, uint32_t us,
			   uint32_t aux_version, uint32_t npages, const char *reason)
{
	struct vmt_sample *x = calloc(1, sizeof(*x));
	struct vmt_sample_cpu c = { 0 };
	char gdir[PATH_MAX], name[VMT_STORE_NAME_MAX];
	struct vmt_afile f;
	struct stat st;

	ck_assert_ptr_nonnull(x);
	snprintf(gdir, sizeof(gdir), "%s/%s", dir, guest);
	mkdir_ok(gdir);
	snprintf(x->guest, sizeof(x->guest), "%s", guest);
	snprintf(x->host, sizeof(x->host), "host");
	x->aux_version = aux_version;
	x->aux_id = 0x1234;
	x->created_ns = s * 1000000000ull + us * 1000ull + 999;
	x->dump_id = s - T0;
	x->page_size = 4096;
	x->ncpus = 1;
	x->cpus = &c;
	c.npages = npages;
	c.pages = npages ? calloc(npages, 4096) : NULL;
	if (reason) {
		x->ntriggers = 2;
		x->triggers[0].kind = VMT_TRIGGER_CONTROL;
		snprintf(x->triggers[0].reason, sizeof(x->triggers[0].reason), "%s", reason);
		x->triggers[1].kind = VMT_TRIGGER_SIGNAL;
		snprintf(x->triggers[1].reason, sizeof(x->triggers[1].reason), "second");
	}
	sample_name(name, sizeof(name), guest, s, us);
	ck_assert_int_eq(afile_create(&f, gdir, name), 0);
	ck_assert_int_eq(sample_write(f.fd, x, 0, 0), 0);
	ck_assert_int_eq(afile_commit(&f), 0);
	free(c.pages);
	free(x);
	snprintf(gdir + strlen(gdir), sizeof(gdir) - strlen(gdir), "/%s", name);
	ck_assert_int_eq(stat(gdir, &st), 0);
	return (uint64_t)st.st_size;
}

static uint64_t put_aux(const char *dir, const char *guest, uint32_t version, size_t extra)
{
	static const char hp[] = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n";
	char gdir[PATH_MAX], name[64];
	struct vmt_buf b = { 0 };
	struct vmt_aux a = { 0 };
	struct vmt_afile f;
	struct stat st;
	char *junk = calloc(1, extra + 1);

	snprintf(gdir, sizeof(gdir), "%s/%s", dir, guest);
	mkdir_ok(gdir);
	snprintf(a.guest, sizeof(a.guest), "%s", guest);
	a.version = version;
	a.created_ns = T0 * 1000000000ull;
	a.ncpus = 1;
	a.page_size = 4096;
	snprintf(a.release, sizeof(a.release), "6.1.0");
	snprintf(a.clock, sizeof(a.clock), "global");
	snprintf(a.boot_id, sizeof(a.boot_id), "boot");
	snprintf(a.agent, sizeof(a.agent), "agent");
	ck_assert_int_eq(meta_add(&b, "events/header_page", hp, sizeof(hp) - 1), 0);
	/* incompressible-ish bytes so that sizes differ */
	for (size_t i = 0; i < extra; i++)
		junk[i] = (char)('a' + (i * 7919 + i / 13) % 26);
	ck_assert_int_eq(meta_add(&b, "kallsyms", junk, (uint32_t)extra), 0);
	a.meta = b.data;
	a.meta_len = b.len;
	a.id = aux_compute_id(&a);
	ck_assert_int_eq(aux_file_name(name, sizeof(name), version), 0);
	ck_assert_int_eq(afile_create(&f, gdir, name), 0);
	ck_assert_int_eq(aux_write(f.fd, &a), 0);
	ck_assert_int_eq(afile_commit(&f), 0);
	buf_free(&b);
	free(junk);
	snprintf(gdir + strlen(gdir), sizeof(gdir) - strlen(gdir), "/%s", name);
	ck_assert_int_eq(stat(gdir, &st), 0);
	return (uint64_t)st.st_size;
}

static void put_file(const char *dir, const char *guest, const char *name, const char *text)
{
	char p[PATH_MAX];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, guest);
	mkdir_ok(p);
	snprintf(p, sizeof(p), "%s/%s/%s", dir, guest, name);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write_full(fd, text, strlen(text)), 0);
	close(fd);
}

static void set_mtime(const char *dir, const char *guest, const char *name, uint64_t s)
{
	char p[PATH_MAX];
	struct timespec t[2] = { { (time_t)s, 0 }, { (time_t)s, 0 } };

	snprintf(p, sizeof(p), "%s/%s/%s", dir, guest, name);
	ck_assert_int_eq(utimensat(AT_FDCWD, p, t, AT_SYMLINK_NOFOLLOW), 0);
}

static bool has(const char *dir, const char *guest, const char *name)
{
	char p[PATH_MAX];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s/%s", dir, guest, name);
	return lstat(p, &st) == 0;
}

static bool has_sample(const char *dir, const char *guest, uint64_t s, uint32_t us)
{
	char name[VMT_STORE_NAME_MAX];

	sample_name(name, sizeof(name), guest, s, us);
	return has(dir, guest, name);
}

static bool has_aux(const char *dir, const char *guest, uint32_t v)
{
	char name[64];

	aux_file_name(name, sizeof(name), v);
	return has(dir, guest, name);
}

static struct vmt_retention_result apply(const char *dir, uint64_t max_bytes, uint32_t max_samples,
					 uint64_t max_age, const struct vmt_aux_pin *pins,
					 size_t npins)
{
	struct vmt_retention_conf rc = { .max_bytes = max_bytes, .max_samples = max_samples,
					 .max_age_s = max_age };
	struct vmt_retention_result res;

	ck_assert_int_eq(retention_apply(dir, &rc, pins, npins, NOW, &res), 0);
	ck_assert_int_eq(res.errors, 0);
	ck_assert_int_eq(res.first_error, 0);
	return res;
}

/* max_aux alone */
static struct vmt_retention_result apply_aux(const char *dir, uint32_t max_aux,
					     const struct vmt_aux_pin *pins, size_t npins)
{
	struct vmt_retention_conf rc = { .max_aux = max_aux };
	struct vmt_retention_result res;

	ck_assert_int_eq(retention_apply(dir, &rc, pins, npins, NOW, &res), 0);
	ck_assert_int_eq(res.errors, 0);
	ck_assert_int_eq(res.first_error, 0);
	return res;
}

static void nothing_more(const char *dir, uint64_t max_bytes, uint32_t max_samples,
			 uint64_t max_age, const struct vmt_aux_pin *pins, size_t npins)
{
	struct vmt_retention_result r = apply(dir, max_bytes, max_samples, max_age, pins, npins);

	ck_assert_uint_eq(r.samples, 0);
	ck_assert_uint_eq(r.aux, 0);
	ck_assert_uint_eq(r.temps, 0);
	ck_assert_uint_eq(r.bytes, 0);
}

/* ---- tests ----------------------------------------------------------- */

START_TEST(test_read_info)
{
	char *dir = test_mkdtemp("ret"), name[VMT_STORE_NAME_MAX], path[PATH_MAX], why[256];
	struct vmt_sample *s = malloc(sizeof(*s));
	uint8_t h[40];
	int fd;

	ck_assert_ptr_nonnull(dir);
	ck_assert_ptr_nonnull(s);
	put_sample(dir, "vm1", T0, 5, 7, 64, "latency over 5 ms");
	sample_name(name, sizeof(name), "vm1", T0, 5);
	snprintf(path, sizeof(path), "%s/vm1/%s", dir, name);
	ck_assert_msg(sample_read_info(path, s, why, sizeof(why)) == 0, "%s", why);
	ck_assert_str_eq(s->guest, "vm1");
	ck_assert_uint_eq(s->aux_version, 7);
	ck_assert_uint_eq(s->created_ns, T0 * 1000000000ull + 5999);
	ck_assert_uint_eq(s->ncpus, 1);
	ck_assert_ptr_null(s->cpus);
	ck_assert_uint_eq(s->ntriggers, 2);
	ck_assert_str_eq(s->triggers[0].reason, "latency over 5 ms");
	ck_assert_str_eq(s->triggers[1].reason, "second");

	/* pages are not read: a bad CRC in PAGES data does not matter here */
	fd = open(path, O_RDWR);
	ck_assert_int_ge(fd, 0);
	{
		off_t end = lseek(fd, 0, SEEK_END);
		uint8_t x;
		/* a byte of the last PAGES data: before END's header */
		ck_assert_int_eq(pread(fd, &x, 1, end - 41), 1);
		x ^= 0xff;
		ck_assert_int_eq(pwrite(fd, &x, 1, end - 41), 1);
	}
	ck_assert_msg(sample_read_info(path, s, why, sizeof(why)) == 0, "%s", why);
	{
		struct vmt_sample *all;
		ck_assert_int_eq(sample_read(path, &all, why, sizeof(why)), -EBADMSG);
	}
	/* a bad INFO is: flip the INFO section's data CRC */
	ck_assert_int_eq(pread(fd, h, 40, 32), 40);
	ck_assert_uint_eq(get_le32(h), VMT_SAMPLE_SECT_INFO);
	h[12] ^= 1;
	put_le32(h + 36, crc32c(0, h, 36));
	ck_assert_int_eq(pwrite(fd, h, 40, 32), 40);
	ck_assert_int_eq(sample_read_info(path, s, why, sizeof(why)), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(why, "data CRC"));
	ck_assert_uint_eq(s->aux_version, 0);
	/* truncated: no END */
	ck_assert_int_eq(ftruncate(fd, lseek(fd, 0, SEEK_END) - 1), 0);
	ck_assert_int_eq(sample_read_info(path, s, why, sizeof(why)), -EBADMSG);
	ck_assert_int_eq(ftruncate(fd, 0), 0);
	ck_assert_int_eq(sample_read_info(path, s, why, sizeof(why)), -EBADMSG);
	close(fd);
	/* a FIFO neither hangs nor passes */
	snprintf(path, sizeof(path), "%s/fifo", dir);
	ck_assert_int_eq(mkfifo(path, 0600), 0);
	ck_assert_int_eq(sample_read_info(path, s, why, sizeof(why)), -EINVAL);
	snprintf(path, sizeof(path), "%s/none", dir);
	ck_assert_int_eq(sample_read_info(path, s, why, sizeof(why)), -ENOENT);
	free(s);
	test_rmtree(dir);
	free(dir);
}
END_TEST

START_TEST(test_scan_names)
{
	char *dir = test_mkdtemp("ret"), p[PATH_MAX], good[VMT_STORE_NAME_MAX], tmp[200];
	struct vmt_store st;
	uint64_t sb, ab;

	ck_assert_ptr_nonnull(dir);
	sb = put_sample(dir, "vm-1.a", T0 + 1, 123456, 1, 1, "why");
	ab = put_aux(dir, "vm-1.a", 1, 100);
	sample_name(good, sizeof(good), "vm-1.a", T0 + 1, 123456);
	/* near misses of both patterns: neither counted nor touched */
	put_file(dir, "vm-1.a", "vm-1.a-20261332T121314.123456Z.vmts", "x");	/* month 13 */
	put_file(dir, "vm-1.a", "vm-1.a-20260230T121314.123456Z.vmts", "x");	/* Feb 30 */
	put_file(dir, "vm-1.a", "vm-1.a-20261122T121314.12345Z.vmts", "x");
	put_file(dir, "vm-1.a", "vm-1.a-20261122T121314.123456Z.vmts~", "x");
	put_file(dir, "vm-1.a", "vm-2-20261122T121314.123456Z.vmts", "x");	/* not this guest */
	put_file(dir, "vm-1.a", "vm-1-20261122T121314.123456Z.vmts", "x");
	put_file(dir, "vm-1.a", "aux-1.vmtaux", "x");
	put_file(dir, "vm-1.a", "aux-0000001.vmtaux", "x");
	put_file(dir, "vm-1.a", "aux-000000.vmtaux", "x");
	put_file(dir, "vm-1.a", "aux-99999999999.vmtaux", "x");
	put_file(dir, "vm-1.a", "aux-+00001.vmtaux", "x");
	put_file(dir, "vm-1.a", "notes.txt", "x");
	put_file(dir, "vm-1.a", ".notes.tmp-abc123", "x");
	put_file(dir, "vm-1.a", ".aux-000001.vmtaux.tmp-abc12", "x");
	put_file(dir, "vm-1.a", ".aux-000001.vmtaux.tmp-abc12_", "x");
	/* temporaries of both patterns */
	snprintf(tmp, sizeof(tmp), ".%s.tmp-Ab3xYz", good);
	put_file(dir, "vm-1.a", tmp, "partial");
	put_file(dir, "vm-1.a", ".aux-000002.vmtaux.tmp-000000", "partial");
	/* folders that are no guest's, files at the top */
	put_file(dir, ".hidden", "aux-000001.vmtaux", "x");
	put_file(dir, "bad name", "aux-000001.vmtaux", "x");
	snprintf(p, sizeof(p), "%s/aux-000001.vmtaux", dir);
	ck_assert_int_eq(close(open(p, O_WRONLY | O_CREAT, 0600)), 0);
	/* a folder named like a sample */
	snprintf(p, sizeof(p), "%s/vm-1.a/vm-1.a-20261122T121314.123456Z.vmts", dir);
	mkdir_ok(p);

	ck_assert_int_eq(retention_scan(dir, &st), 0);
	ck_assert_uint_eq(st.nguests, 1);
	ck_assert_str_eq(st.guests[0].name, "vm-1.a");
	ck_assert_uint_eq(st.guests[0].nsamples, 1);
	ck_assert_uint_eq(st.guests[0].bytes, sb + ab);
	ck_assert_uint_eq(st.nsamples, 1);
	ck_assert_str_eq(st.samples[0].name, good);
	ck_assert_uint_eq(st.samples[0].created_ns, (T0 + 1) * 1000000000ull + 123456000ull);
	ck_assert_uint_eq(st.samples[0].bytes, sb);
	ck_assert_int_eq(st.samples[0].info_error, 0);
	ck_assert_uint_eq(st.samples[0].aux_version, 1);
	ck_assert_uint_eq(st.samples[0].dump_id, 1);
	ck_assert_uint_eq(st.samples[0].ntriggers, 2);
	ck_assert_str_eq(st.samples[0].triggers[0].reason, "why");
	snprintf(p, sizeof(p), "%s/vm-1.a/%s", dir, good);
	ck_assert_str_eq(st.samples[0].path, p);
	ck_assert_uint_eq(st.naux, 1);
	ck_assert_uint_eq(st.aux[0].version, 1);
	ck_assert_uint_eq(st.aux[0].bytes, ab);
	ck_assert_uint_eq(st.sample_bytes, sb);
	ck_assert_uint_eq(st.aux_bytes, ab);
	ck_assert_uint_eq(st.ntemps, 2);
	ck_assert_str_eq(st.temps[0].name, ".aux-000002.vmtaux.tmp-000000");
	ck_assert_str_eq(st.temps[1].name, tmp);
	ck_assert_uint_eq(st.temps[1].bytes, 7);
	retention_store_free(&st);
	ck_assert_ptr_null(st.samples);

	/* delete everything deletable: the near misses stay */
	set_mtime(dir, "vm-1.a", tmp, NOW - 3600);
	set_mtime(dir, "vm-1.a", ".aux-000002.vmtaux.tmp-000000", NOW - 3600);
	set_mtime(dir, "vm-1.a", ".notes.tmp-abc123", NOW - 3600);
	{
		struct vmt_retention_result r = apply(dir, 1, 0, 0, NULL, 0);

		ck_assert_uint_eq(r.samples, 1);
		ck_assert_uint_eq(r.aux, 1);
		ck_assert_uint_eq(r.temps, 2);
		ck_assert_uint_eq(r.bytes, sb + ab);
		ck_assert_uint_eq(r.kept_samples, 0);
		ck_assert_uint_eq(r.kept_bytes, 0);
		ck_assert_int_eq(r.unmet, 0);
	}
	ck_assert(!has(dir, "vm-1.a", good));
	ck_assert(has(dir, "vm-1.a", "vm-1.a-20261332T121314.123456Z.vmts"));
	ck_assert(has(dir, "vm-1.a", "vm-1.a-20260230T121314.123456Z.vmts"));
	ck_assert(has(dir, "vm-1.a", "vm-2-20261122T121314.123456Z.vmts"));
	ck_assert(has(dir, "vm-1.a", "aux-1.vmtaux"));
	ck_assert(has(dir, "vm-1.a", "aux-0000001.vmtaux"));
	ck_assert(has(dir, "vm-1.a", "aux-000000.vmtaux"));
	ck_assert(has(dir, "vm-1.a", "notes.txt"));
	ck_assert(has(dir, "vm-1.a", ".notes.tmp-abc123"));
	ck_assert(has(dir, "vm-1.a", ".aux-000001.vmtaux.tmp-abc12"));
	ck_assert(has(dir, "vm-1.a", "vm-1.a-20261122T121314.123456Z.vmts"));
	ck_assert(has(dir, ".hidden", "aux-000001.vmtaux"));
	ck_assert(has(dir, "bad name", "aux-000001.vmtaux"));
	ck_assert(has(dir, ".", "aux-000001.vmtaux"));
	nothing_more(dir, 1, 0, 0, NULL, 0);
	test_rmtree(dir);
	free(dir);
}
END_TEST

START_TEST(test_count_per_guest)
{
	char *dir = test_mkdtemp("ret");
	struct vmt_retention_result r;

	ck_assert_ptr_nonnull(dir);
	put_aux(dir, "a", 1, 10);
	put_aux(dir, "b", 1, 10);
	for (uint32_t i = 0; i < 5; i++)
		put_sample(dir, "a", T0 + 10 * i, 0, 1, 1, NULL);
	/* b's are the oldest of all, but b is within its count */
	put_sample(dir, "b", T0 - 100, 0, 1, 1, NULL);
	put_sample(dir, "b", T0 - 99, 0, 1, 1, NULL);
	/* same second: the microseconds order them */
	put_sample(dir, "a", T0 + 40, 1, 1, 1, NULL);

	r = apply(dir, 0, 3, 0, NULL, 0);
	ck_assert_uint_eq(r.samples, 3);
	ck_assert_uint_eq(r.aux, 0);
	ck_assert_uint_eq(r.kept_samples, 5);
	ck_assert_uint_eq(r.kept_aux, 2);
	ck_assert_int_eq(r.unmet, 0);
	ck_assert(!has_sample(dir, "a", T0, 0));
	ck_assert(!has_sample(dir, "a", T0 + 10, 0));
	ck_assert(!has_sample(dir, "a", T0 + 20, 0));
	ck_assert(has_sample(dir, "a", T0 + 30, 0));
	ck_assert(has_sample(dir, "a", T0 + 40, 0));
	ck_assert(has_sample(dir, "a", T0 + 40, 1));
	ck_assert(has_sample(dir, "b", T0 - 100, 0));
	ck_assert(has_sample(dir, "b", T0 - 99, 0));
	nothing_more(dir, 0, 3, 0, NULL, 0);

	r = apply(dir, 0, 1, 0, NULL, 0);
	ck_assert_uint_eq(r.samples, 3);
	ck_assert(!has_sample(dir, "a", T0 + 40, 0));
	ck_assert(has_sample(dir, "a", T0 + 40, 1));
	ck_assert(!has_sample(dir, "b", T0 - 100, 0));
	ck_assert(has_sample(dir, "b", T0 - 99, 0));
	ck_assert(has_aux(dir, "a", 1) && has_aux(dir, "b", 1));
	nothing_more(dir, 0, 1, 0, NULL, 0);
	test_rmtree(dir);
	free(dir);
}
END_TEST

START_TEST(test_bytes_across_guests)
{
	char *dir = test_mkdtemp("ret");
	struct vmt_retention_result r;
	uint64_t total = 0, s[6], a1, b1;

	ck_assert_ptr_nonnull(dir);
	total += a1 = put_aux(dir, "a", 1, 1000);
	total += b1 = put_aux(dir, "b", 1, 3000);
	/* interleaved in time: a0 b1 a2 b3 a4 b5 */
	for (uint32_t i = 0; i < 6; i++)
		total += s[i] = put_sample(dir, i % 2 ? "b" : "a", T0 + i, 0, 1, 1 + i, NULL);

	/* exactly the two oldest must go, whichever guest they belong to */
	r = apply(dir, total - s[0] - s[1], 0, 0, NULL, 0);
	ck_assert_uint_eq(r.samples, 2);
	ck_assert_uint_eq(r.bytes, s[0] + s[1]);
	ck_assert_uint_eq(r.kept_bytes, total - s[0] - s[1]);
	ck_assert_int_eq(r.unmet, 0);
	ck_assert(!has_sample(dir, "a", T0, 0));
	ck_assert(!has_sample(dir, "b", T0 + 1, 0));
	ck_assert(has_sample(dir, "a", T0 + 2, 0));
	nothing_more(dir, total - s[0] - s[1], 0, 0, NULL, 0);

	/* one byte less takes the next one too */
	r = apply(dir, total - s[0] - s[1] - 1, 0, 0, NULL, 0);
	ck_assert_uint_eq(r.samples, 1);
	ck_assert(!has_sample(dir, "a", T0 + 2, 0));

	/*
	 * Room for b's aux and its last sample: b3 goes, then a4, and with a's
	 * last sample a's aux goes too, which is enough: b5 stays.
	 */
	r = apply(dir, b1 + s[5], 0, 0, NULL, 0);
	ck_assert_uint_eq(r.samples, 2);
	ck_assert_uint_eq(r.aux, 1);
	ck_assert_uint_eq(r.bytes, s[3] + s[4] + a1);
	ck_assert(!has_aux(dir, "a", 1));
	ck_assert(has_aux(dir, "b", 1));
	ck_assert(has_sample(dir, "b", T0 + 5, 0));
	ck_assert_uint_eq(r.kept_bytes, b1 + s[5]);
	ck_assert_int_eq(r.unmet, 0);
	nothing_more(dir, b1 + s[5], 0, 0, NULL, 0);
	test_rmtree(dir);
	free(dir);
}
END_TEST

START_TEST(test_age)
{
	char *dir = test_mkdtemp("ret");
	struct vmt_retention_result r;

	ck_assert_ptr_nonnull(dir);
	put_sample(dir, "vm1", NOW - 1000, 0, 1, 0, NULL);
	put_sample(dir, "vm1", NOW - 101, 0, 1, 0, NULL);
	put_sample(dir, "vm1", NOW - 100, 0, 1, 0, NULL);	/* exactly max_age: kept */
	put_sample(dir, "vm1", NOW - 50, 0, 1, 0, NULL);
	put_sample(dir, "vm1", NOW + 50, 0, 1, 0, NULL);	/* a clock ahead: kept */
	put_sample(dir, "vm2", NOW - 5000, 0, 1, 0, NULL);
	r = apply(dir, 0, 0, 100, NULL, 0);
	ck_assert_uint_eq(r.samples, 3);
	ck_assert_uint_eq(r.kept_samples, 3);
	ck_assert(!has_sample(dir, "vm1", NOW - 1000, 0));
	ck_assert(!has_sample(dir, "vm1", NOW - 101, 0));
	ck_assert(!has_sample(dir, "vm2", NOW - 5000, 0));
	ck_assert(has_sample(dir, "vm1", NOW - 100, 0));
	ck_assert(has_sample(dir, "vm1", NOW - 50, 0));
	ck_assert(has_sample(dir, "vm1", NOW + 50, 0));
	nothing_more(dir, 0, 0, 100, NULL, 0);
	/* no limit at all: nothing goes */
	nothing_more(dir, 0, 0, 0, NULL, 0);
	test_rmtree(dir);
	free(dir);
}
END_TEST

START_TEST(test_aux_needed)
{
	char *dir = test_mkdtemp("ret");
	struct vmt_retention_result r;

	ck_assert_ptr_nonnull(dir);
	put_aux(dir, "vm1", 1, 10);
	put_aux(dir, "vm1", 2, 10);
	put_aux(dir, "vm1", 3, 10);	/* needed by nothing */
	put_aux(dir, "vm2", 1, 10);	/* vm2 has no sample */
	put_sample(dir, "vm1", T0 + 1, 0, 1, 0, NULL);
	put_sample(dir, "vm1", T0 + 2, 0, 1, 0, NULL);
	put_sample(dir, "vm1", T0 + 3, 0, 2, 0, NULL);
	put_sample(dir, "vm1", T0 + 4, 0, 9, 0, NULL);	/* its aux is missing */

	/* no limit: only the aux files nothing needs go */
	r = apply(dir, 0, 0, 0, NULL, 0);
	ck_assert_uint_eq(r.samples, 0);
	ck_assert_uint_eq(r.aux, 2);
	ck_assert(!has_aux(dir, "vm1", 3) && !has_aux(dir, "vm2", 1));
	ck_assert(has_aux(dir, "vm1", 1) && has_aux(dir, "vm1", 2));

	r = apply(dir, 0, 3, 0, NULL, 0);
	ck_assert_uint_eq(r.samples, 1);
	ck_assert_uint_eq(r.aux, 0);
	ck_assert(has_aux(dir, "vm1", 1));	/* T0 + 2 still needs it */
	r = apply(dir, 0, 2, 0, NULL, 0);
	ck_assert_uint_eq(r.samples, 1);
	ck_assert_uint_eq(r.aux, 1);
	ck_assert(!has_aux(dir, "vm1", 1));
	ck_assert(has_aux(dir, "vm1", 2));
	r = apply(dir, 0, 1, 0, NULL, 0);
	ck_assert_uint_eq(r.samples, 1);
	ck_assert_uint_eq(r.aux, 1);
	ck_assert(!has_aux(dir, "vm1", 2));
	ck_assert(has_sample(dir, "vm1", T0 + 4, 0));
	nothing_more(dir, 0, 1, 0, NULL, 0);
	test_rmtree(dir);
	free(dir);
}
END_TEST

START_TEST(test_pinned)
{
	char *dir = test_mkdtemp("ret");
	struct vmt_aux_pin pins[] = { { "vm1", 2 }, { "vm2", 5 } };
	struct vmt_retention_result r;

	ck_assert_ptr_nonnull(dir);
	put_aux(dir, "vm1", 1, 10);
	put_aux(dir, "vm1", 2, 10);
	put_aux(dir, "vm2", 2, 10);	/* the same version, another guest: not pinned */
	put_sample(dir, "vm1", T0, 0, 2, 0, NULL);
	r = apply(dir, 0, 0, 1, pins, 2);
	ck_assert_uint_eq(r.samples, 1);
	ck_assert_uint_eq(r.aux, 2);
	ck_assert_uint_eq(r.kept_aux, 1);
	ck_assert(has_aux(dir, "vm1", 2));
	ck_assert(!has_aux(dir, "vm1", 1));
	ck_assert(!has_aux(dir, "vm2", 2));
	nothing_more(dir, 0, 0, 1, pins, 2);
	/* the session is over */
	r = apply(dir, 0, 0, 1, NULL, 0);
	ck_assert_uint_eq(r.aux, 1);
	ck_assert(!has_aux(dir, "vm1", 2));
	test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * max_aux: a guest's oldest samples go while it needs more aux files than
 * that; an aux file a kept sample needs stays, and so does a pinned one.
 */
START_TEST(test_max_aux)
{
	char *dir = test_mkdtemp("ret");
	struct vmt_aux_pin pin = { "vm1", 4 };
	struct vmt_retention_result r;

	ck_assert_ptr_nonnull(dir);
	for (uint32_t v = 1; v <= 4; v++)
		put_aux(dir, "vm1", v, 10);
	put_sample(dir, "vm1", T0 + 1, 0, 1, 0, NULL);
	put_sample(dir, "vm1", T0 + 2, 0, 1, 0, NULL);
	put_sample(dir, "vm1", T0 + 3, 0, 2, 0, NULL);
	put_sample(dir, "vm1", T0 + 4, 0, 3, 0, NULL);
	put_sample(dir, "vm1", T0 + 5, 0, 4, 0, NULL);
	put_sample(dir, "vm1", T0 + 6, 0, 2, 0, NULL);	/* aux 2 again, newer */
	/* vm2 is older and within the limit: none of vm1's business */
	put_aux(dir, "vm2", 1, 10);
	put_aux(dir, "vm2", 2, 10);
	put_sample(dir, "vm2", T0 - 100, 0, 1, 0, NULL);
	put_sample(dir, "vm2", T0 - 99, 0, 2, 0, NULL);

	/* no limit: nothing goes */
	nothing_more(dir, 0, 0, 0, NULL, 0);
	/* 2: vm1's four oldest go; aux 1 and 3 with them, aux 2 stays for
	 * T0 + 6 although T0 + 3 went */
	r = apply_aux(dir, 2, NULL, 0);
	ck_assert_uint_eq(r.samples, 4);
	ck_assert_uint_eq(r.aux, 2);
	ck_assert_uint_eq(r.kept_samples, 4);
	ck_assert_uint_eq(r.kept_aux, 4);
	ck_assert_int_eq(r.unmet, 0);
	for (uint64_t t = 1; t <= 4; t++)
		ck_assert(!has_sample(dir, "vm1", T0 + t, 0));
	ck_assert(has_sample(dir, "vm1", T0 + 5, 0) && has_sample(dir, "vm1", T0 + 6, 0));
	ck_assert(!has_aux(dir, "vm1", 1) && !has_aux(dir, "vm1", 3));
	ck_assert(has_aux(dir, "vm1", 2) && has_aux(dir, "vm1", 4));
	ck_assert(has_sample(dir, "vm2", T0 - 100, 0) && has_sample(dir, "vm2", T0 - 99, 0));
	ck_assert(has_aux(dir, "vm2", 1) && has_aux(dir, "vm2", 2));
	r = apply_aux(dir, 2, NULL, 0);
	ck_assert_uint_eq(r.samples + r.aux, 0);

	/* 1 with aux 4 pinned (the version the next sample is written with):
	 * it counts, and stays; the samples go oldest first until aux 2 is
	 * free */
	r = apply_aux(dir, 1, &pin, 1);
	ck_assert_uint_eq(r.samples, 2 + 1);	/* vm1's two, vm2's older one */
	ck_assert_uint_eq(r.aux, 2);		/* vm1's aux 2, vm2's aux 1 */
	ck_assert_int_eq(r.unmet, 0);
	ck_assert(!has_sample(dir, "vm1", T0 + 5, 0) && !has_sample(dir, "vm1", T0 + 6, 0));
	ck_assert(has_aux(dir, "vm1", 4) && !has_aux(dir, "vm1", 2));
	ck_assert(!has_sample(dir, "vm2", T0 - 100, 0) && has_sample(dir, "vm2", T0 - 99, 0));
	ck_assert(!has_aux(dir, "vm2", 1) && has_aux(dir, "vm2", 2));
	r = apply_aux(dir, 1, &pin, 1);
	ck_assert_uint_eq(r.samples + r.aux, 0);
	test_rmtree(dir);
	free(dir);
}
END_TEST

/* Pinned aux files over max_aux: their samples stay, since dropping them
 * frees nothing; the limit is said to be unmet. */
START_TEST(test_max_aux_pinned)
{
	char *dir = test_mkdtemp("ret");
	struct vmt_aux_pin pins[] = { { "vm1", 1 }, { "vm1", 2 } };
	struct vmt_retention_result r;

	ck_assert_ptr_nonnull(dir);
	put_aux(dir, "vm1", 1, 10);
	put_aux(dir, "vm1", 2, 10);
	put_aux(dir, "vm1", 3, 10);
	put_sample(dir, "vm1", T0 + 1, 0, 3, 0, NULL);
	put_sample(dir, "vm1", T0 + 2, 0, 1, 0, NULL);
	put_sample(dir, "vm1", T0 + 3, 0, 2, 0, NULL);
	r = apply_aux(dir, 1, pins, 2);
	ck_assert_uint_eq(r.samples, 1);	/* the one with aux 3: it freed it */
	ck_assert_uint_eq(r.aux, 1);
	ck_assert_int_eq(r.unmet, 1);
	ck_assert_uint_eq(r.kept_samples, 2);
	ck_assert_uint_eq(r.kept_aux, 2);
	ck_assert(!has_sample(dir, "vm1", T0 + 1, 0) && !has_aux(dir, "vm1", 3));
	ck_assert(has_sample(dir, "vm1", T0 + 2, 0) && has_sample(dir, "vm1", T0 + 3, 0));
	ck_assert(has_aux(dir, "vm1", 1) && has_aux(dir, "vm1", 2));
	r = apply_aux(dir, 1, pins, 2);
	ck_assert_uint_eq(r.samples + r.aux, 0);
	ck_assert_int_eq(r.unmet, 1);
	/* one pin left: aux 1 is needed by its sample alone, which goes */
	r = apply_aux(dir, 1, &pins[1], 1);
	ck_assert_uint_eq(r.samples, 1);
	ck_assert_uint_eq(r.aux, 1);
	ck_assert_int_eq(r.unmet, 0);
	ck_assert(!has_aux(dir, "vm1", 1) && has_aux(dir, "vm1", 2));
	ck_assert(has_sample(dir, "vm1", T0 + 3, 0));
	test_rmtree(dir);
	free(dir);
}
END_TEST

START_TEST(test_temps)
{
	char *dir = test_mkdtemp("ret"), good[VMT_STORE_NAME_MAX], t1[200], t2[200];
	struct vmt_retention_result r;

	ck_assert_ptr_nonnull(dir);
	sample_name(good, sizeof(good), "vm1", T0, 0);
	snprintf(t1, sizeof(t1), ".%s.tmp-aaaaaa", good);
	snprintf(t2, sizeof(t2), ".%s.tmp-bbbbbb", good);
	put_file(dir, "vm1", t1, "x");
	put_file(dir, "vm1", t2, "x");
	put_file(dir, "vm1", ".aux-000001.vmtaux.tmp-cccccc", "x");
	put_file(dir, "vm1", ".aux-000002.vmtaux.tmp-dddddd", "x");
	set_mtime(dir, "vm1", t1, NOW - 59);	/* a writer at work */
	set_mtime(dir, "vm1", t2, NOW - 60);
	set_mtime(dir, "vm1", ".aux-000001.vmtaux.tmp-cccccc", NOW - 86400);
	set_mtime(dir, "vm1", ".aux-000002.vmtaux.tmp-dddddd", NOW + 10);
	r = apply(dir, 0, 0, 0, NULL, 0);
	ck_assert_uint_eq(r.temps, 2);
	ck_assert_uint_eq(r.bytes, 0);	/* samples and aux only */
	ck_assert(has(dir, "vm1", t1));
	ck_assert(!has(dir, "vm1", t2));
	ck_assert(!has(dir, "vm1", ".aux-000001.vmtaux.tmp-cccccc"));
	ck_assert(has(dir, "vm1", ".aux-000002.vmtaux.tmp-dddddd"));
	nothing_more(dir, 0, 0, 0, NULL, 0);
	/* temporaries do not count against max_bytes */
	nothing_more(dir, 1, 0, 0, NULL, 0);
	test_rmtree(dir);
	free(dir);
}
END_TEST

START_TEST(test_symlinks)
{
	char *dir = test_mkdtemp("ret"), *out = test_mkdtemp("ret-out");
	char name[VMT_STORE_NAME_MAX], p[PATH_MAX], q[PATH_MAX];
	struct vmt_retention_result r;
	struct vmt_store st;

	ck_assert_ptr_nonnull(dir);
	ck_assert_ptr_nonnull(out);
	/* outside: real files, reachable only through symlinks */
	put_sample(out, "vm1", T0 - 5000, 0, 1, 0, NULL);
	put_aux(out, "vm1", 1, 10);
	put_sample(out, "vmx", T0 - 5000, 0, 1, 0, NULL);
	/* a symlinked guest folder */
	snprintf(p, sizeof(p), "%s/vmx", out);
	snprintf(q, sizeof(q), "%s/vmx", dir);
	ck_assert_int_eq(symlink(p, q), 0);
	/* symlinks named like a sample and an aux, pointing outside */
	put_sample(dir, "vm1", T0, 0, 1, 0, NULL);
	sample_name(name, sizeof(name), "vm1", T0 - 5000, 0);
	snprintf(p, sizeof(p), "%s/vm1/%s", out, name);
	snprintf(q, sizeof(q), "%s/vm1/%s", dir, name);
	ck_assert_int_eq(symlink(p, q), 0);
	snprintf(p, sizeof(p), "%s/vm1/aux-000001.vmtaux", out);
	snprintf(q, sizeof(q), "%s/vm1/aux-000002.vmtaux", dir);
	ck_assert_int_eq(symlink(p, q), 0);
	/* and a dangling one */
	snprintf(q, sizeof(q), "%s/vm1/aux-000003.vmtaux", dir);
	ck_assert_int_eq(symlink("/nonexistent", q), 0);

	ck_assert_int_eq(retention_scan(dir, &st), 0);
	ck_assert_uint_eq(st.nguests, 1);
	ck_assert_uint_eq(st.nsamples, 1);
	ck_assert_uint_eq(st.naux, 0);
	retention_store_free(&st);

	r = apply(dir, 1, 0, 1, NULL, 0);
	ck_assert_uint_eq(r.samples, 1);
	ck_assert_uint_eq(r.aux, 0);
	ck_assert(!has_sample(dir, "vm1", T0, 0));
	ck_assert(has(dir, "vm1", name));	/* the links stay */
	ck_assert(has(dir, "vm1", "aux-000002.vmtaux"));
	ck_assert(has(dir, "vm1", "aux-000003.vmtaux"));
	ck_assert(has_sample(out, "vm1", T0 - 5000, 0));	/* and what they point to */
	ck_assert(has_aux(out, "vm1", 1));
	ck_assert(has_sample(out, "vmx", T0 - 5000, 0));
	snprintf(q, sizeof(q), "%s/vmx", dir);
	ck_assert_int_eq(lstat(q, &(struct stat){ 0 }), 0);
	test_rmtree(dir);
	test_rmtree(out);
	free(dir);
	free(out);
}
END_TEST

/* Break the INFO data CRC of a sample in place. */
static void corrupt_info(const char *dir, const char *guest, uint64_t s)
{
	char name[VMT_STORE_NAME_MAX], p[PATH_MAX];
	uint8_t h[40];
	int fd;

	sample_name(name, sizeof(name), guest, s, 0);
	snprintf(p, sizeof(p), "%s/%s/%s", dir, guest, name);
	fd = open(p, O_RDWR);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, h, 40, 32), 40);
	h[12] ^= 1;
	put_le32(h + 36, crc32c(0, h, 36));
	ck_assert_int_eq(pwrite(fd, h, 40, 32), 40);
	close(fd);
}

START_TEST(test_corrupt)
{
	char *dir = test_mkdtemp("ret"), name[VMT_STORE_NAME_MAX];
	struct vmt_retention_result r;
	struct vmt_store st;

	ck_assert_ptr_nonnull(dir);
	put_aux(dir, "vm1", 1, 10);
	put_aux(dir, "vm1", 2, 10);
	put_sample(dir, "vm1", T0, 0, 1, 0, NULL);
	put_sample(dir, "vm1", T0 + 1, 0, 2, 0, NULL);
	put_sample(dir, "vm1", T0 + 2, 0, 2, 0, NULL);
	corrupt_info(dir, "vm1", T0 + 1);	/* needed 2, but cannot say so */
	corrupt_info(dir, "vm1", T0 + 2);
	sample_name(name, sizeof(name), "vm1", T0 + 3, 0);
	put_file(dir, "vm1", name, "not a sample at all");

	ck_assert_int_eq(retention_scan(dir, &st), 0);
	ck_assert_uint_eq(st.nsamples, 4);
	ck_assert_int_eq(st.samples[0].info_error, 0);
	ck_assert_int_eq(st.samples[1].info_error, -EBADMSG);
	ck_assert_ptr_nonnull(strstr(st.samples[1].why, "data CRC"));
	ck_assert_uint_eq(st.samples[1].aux_version, 0);
	ck_assert_int_eq(st.samples[3].info_error, -EBADMSG);
	ck_assert_uint_eq(st.samples[3].bytes, 19);
	retention_store_free(&st);

	/* aux 2 is needed by no sample that can be read */
	r = apply(dir, 0, 0, 0, NULL, 0);
	ck_assert_uint_eq(r.samples, 0);
	ck_assert_uint_eq(r.aux, 1);
	ck_assert(!has_aux(dir, "vm1", 2));
	/* corrupt samples count like the others */
	r = apply(dir, 0, 2, 0, NULL, 0);
	ck_assert_uint_eq(r.samples, 2);
	ck_assert_uint_eq(r.aux, 1);
	ck_assert(!has_sample(dir, "vm1", T0, 0));
	ck_assert(!has_sample(dir, "vm1", T0 + 1, 0));
	ck_assert(has_sample(dir, "vm1", T0 + 2, 0));
	ck_assert(has(dir, "vm1", name));
	nothing_more(dir, 0, 2, 0, NULL, 0);
	test_rmtree(dir);
	free(dir);
}
END_TEST

/*
 * A sample that cannot be read now (here: no file descriptor left) is not
 * corrupt: as long as it is there, every aux file of its guest stays.
 */
START_TEST(test_unreadable)
{
	char *dir = test_mkdtemp("ret");
	struct vmt_retention_result r;
	struct vmt_store st;
	struct rlimit old, tight;
	int n;

	ck_assert_ptr_nonnull(dir);
	put_aux(dir, "vm1", 1, 10);
	put_aux(dir, "vm1", 2, 10);
	put_aux(dir, "vm2", 1, 10);
	put_sample(dir, "vm1", T0, 0, 1, 0, NULL);
	put_sample(dir, "vm1", T0 + 1, 0, 1, 0, NULL);
	/* the scan holds two descriptors (state_dir, a guest folder): allow no third */
	n = open("/dev/null", O_RDONLY);
	ck_assert_int_ge(n, 0);
	close(n);
	if (fcntl(n + 1, F_GETFD) >= 0 || fcntl(n + 2, F_GETFD) >= 0)
		VMT_SKIP("descriptors %d..%d are not free", n, n + 2);
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
	tight = old;
	tight.rlim_cur = (rlim_t)n + 2;
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &tight), 0);

	ck_assert_int_eq(retention_scan(dir, &st), 0);
	ck_assert_uint_eq(st.nsamples, 2);
	ck_assert_int_eq(st.samples[0].info_error, -EMFILE);
	ck_assert_str_ne(st.samples[0].why, "");
	ck_assert_uint_gt(st.samples[0].bytes, 0);
	retention_store_free(&st);
	/* aux 2 is kept: the remaining sample might need it */
	r = apply(dir, 0, 1, 0, NULL, 0);
	ck_assert_uint_eq(r.samples, 1);
	ck_assert_uint_eq(r.aux, 1);	/* vm2's: no unreadable sample of vm2 */
	ck_assert(has_aux(dir, "vm1", 1) && has_aux(dir, "vm1", 2));
	ck_assert(!has_aux(dir, "vm2", 1));
	ck_assert(has_sample(dir, "vm1", T0 + 1, 0));

	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
	r = apply(dir, 0, 1, 0, NULL, 0);
	ck_assert_uint_eq(r.samples, 0);
	ck_assert_uint_eq(r.aux, 1);
	ck_assert(has_aux(dir, "vm1", 1) && !has_aux(dir, "vm1", 2));
	test_rmtree(dir);
	free(dir);
}
END_TEST

START_TEST(test_unmet)
{
	char *dir = test_mkdtemp("ret");
	struct vmt_aux_pin pin = { "vm1", 1 };
	struct vmt_retention_result r;
	uint64_t a;

	ck_assert_ptr_nonnull(dir);
	a = put_aux(dir, "vm1", 1, 5000);
	put_aux(dir, "vm2", 1, 10);
	put_sample(dir, "vm1", T0, 0, 1, 0, NULL);
	put_sample(dir, "vm2", T0 + 1, 0, 1, 0, NULL);
	/* what may go goes; the pinned aux cannot */
	r = apply(dir, a - 1, 0, 0, &pin, 1);
	ck_assert_uint_eq(r.samples, 2);
	ck_assert_uint_eq(r.aux, 1);
	ck_assert_int_eq(r.unmet, 1);
	ck_assert_uint_eq(r.kept_bytes, a);
	ck_assert_uint_eq(r.kept_aux, 1);
	ck_assert(has_aux(dir, "vm1", 1));
	ck_assert(!has_aux(dir, "vm2", 1));
	/* still unmet, nothing more to do */
	r = apply(dir, a - 1, 0, 0, &pin, 1);
	ck_assert_uint_eq(r.samples + r.aux, 0);
	ck_assert_int_eq(r.unmet, 1);
	/* met exactly */
	r = apply(dir, a, 0, 0, &pin, 1);
	ck_assert_int_eq(r.unmet, 0);
	test_rmtree(dir);
	free(dir);
}
END_TEST

START_TEST(test_list)
{
	char *dir = test_mkdtemp("ret"), p[PATH_MAX];
	struct vmt_store st;

	ck_assert_ptr_nonnull(dir);
	put_aux(dir, "a", 1, 10);
	put_sample(dir, "a", T0 + 1, 0, 1, 0, "one");
	put_sample(dir, "b", T0 + 2, 0, 3, 0, "two");
	put_sample(dir, "a", T0 + 3, 0, 1, 0, "three");
	put_sample(dir, "a", T0 + 3, 1, 1, 0, NULL);

	ck_assert_int_eq(retention_list(dir, NULL, &st), 0);
	ck_assert_uint_eq(st.nsamples, 4);
	ck_assert_uint_eq(st.nguests, 2);
	ck_assert_uint_eq(st.samples[0].created_ns, (T0 + 3) * 1000000000ull + 1000);
	ck_assert_uint_eq(st.samples[0].ntriggers, 0);
	ck_assert_str_eq(st.samples[1].triggers[0].reason, "three");
	ck_assert_str_eq(st.guests[st.samples[2].guest].name, "b");
	ck_assert_uint_eq(st.samples[2].aux_version, 3);
	ck_assert_str_eq(st.samples[2].triggers[0].reason, "two");
	ck_assert_uint_eq(st.samples[2].triggers[0].kind, VMT_TRIGGER_CONTROL);
	ck_assert_str_eq(st.samples[3].triggers[0].reason, "one");
	ck_assert_str_eq(st.samples[3].triggers[1].reason, "second");
	retention_store_free(&st);

	ck_assert_int_eq(retention_list(dir, "a", &st), 0);
	ck_assert_uint_eq(st.nsamples, 3);
	ck_assert_uint_eq(st.nguests, 1);
	ck_assert_uint_eq(st.naux, 1);
	ck_assert_str_eq(st.samples[2].triggers[0].reason, "one");
	retention_store_free(&st);

	ck_assert_int_eq(retention_list(dir, "nobody", &st), 0);
	ck_assert_uint_eq(st.nsamples, 0);
	ck_assert_uint_eq(st.nguests, 0);
	retention_store_free(&st);
	ck_assert_int_eq(retention_list(dir, "../a", &st), -EINVAL);
	retention_store_free(&st);
	ck_assert_int_eq(retention_list(dir, ".", &st), -EINVAL);
	retention_store_free(&st);

	/* no state dir: listing says so, applying has nothing to do */
	snprintf(p, sizeof(p), "%s/none", dir);
	ck_assert_int_eq(retention_list(p, NULL, &st), -ENOENT);
	retention_store_free(&st);
	ck_assert_int_eq(retention_scan(p, &st), -ENOENT);
	retention_store_free(&st);
	nothing_more(p, 1, 1, 1, NULL, 0);
	test_rmtree(dir);
	free(dir);
}
END_TEST

/* What retention_apply_kept() says is left is what a scan finds after it. */
START_TEST(test_kept)
{
	char *dir = test_mkdtemp("ret"), none[PATH_MAX];
	struct vmt_retention_conf rc = { .max_samples = 2 };
	struct vmt_retention_result r;
	struct vmt_store kept, st;

	ck_assert_ptr_nonnull(dir);
	put_aux(dir, "a", 1, 10);
	put_aux(dir, "b", 2, 10);
	for (uint32_t i = 0; i < 4; i++)
		put_sample(dir, "a", T0 + 10 * i, 0, 1, 1, i == 3 ? "last" : NULL);
	put_sample(dir, "b", T0 + 5, 0, 2, 1, "b's");
	put_file(dir, "b", "b-20261122T121320.000000Z.vmts", "not a sample");

	ck_assert_int_eq(retention_apply_kept(dir, &rc, NULL, 0, NOW, &r, &kept), 0);
	ck_assert_uint_eq(r.samples, 2);
	ck_assert_int_eq(retention_scan(dir, &st), 0);
	ck_assert_uint_eq(kept.nsamples, 4);
	ck_assert_uint_eq(kept.nsamples, st.nsamples);
	ck_assert_uint_eq(kept.sample_bytes, st.sample_bytes);
	for (size_t i = 0; i < st.nsamples; i++) {
		ck_assert_str_eq(kept.samples[i].path, st.samples[i].path);
		ck_assert_str_eq(kept.guests[kept.samples[i].guest].name,
				 st.guests[st.samples[i].guest].name);
		ck_assert_uint_eq(kept.samples[i].created_ns, st.samples[i].created_ns);
		ck_assert_uint_eq(kept.samples[i].bytes, st.samples[i].bytes);
		ck_assert_int_eq(kept.samples[i].info_error, st.samples[i].info_error);
		ck_assert_str_eq(kept.samples[i].why, st.samples[i].why);
		ck_assert_uint_eq(kept.samples[i].aux_version, st.samples[i].aux_version);
		ck_assert_uint_eq(kept.samples[i].ntriggers, st.samples[i].ntriggers);
	}
	for (size_t g = 0; g < st.nguests; g++) {
		ck_assert_uint_eq(kept.guests[g].nsamples, st.guests[g].nsamples);
		ck_assert_str_eq(kept.guests[g].name, st.guests[g].name);
	}
	ck_assert_int_eq(kept.samples[0].info_error, 0);	/* b's, the oldest */
	ck_assert_int_eq(kept.samples[1].info_error, -EBADMSG);	/* b's garbage */
	ck_assert_str_eq(kept.samples[3].triggers[0].reason, "last");
	retention_store_free(&kept);
	retention_store_free(&st);

	/* no state dir: nothing stored, nothing kept */
	snprintf(none, sizeof(none), "%s/none", dir);
	ck_assert_int_eq(retention_apply_kept(none, &rc, NULL, 0, NOW, &r, &kept), 0);
	ck_assert_uint_eq(kept.nsamples, 0);
	retention_store_free(&kept);
	test_rmtree(dir);
	free(dir);
}
END_TEST

START_TEST(test_idempotent)
{
	char *dir = test_mkdtemp("ret");
	struct vmt_retention_result r1, r2;

	ck_assert_ptr_nonnull(dir);
	for (uint32_t g = 0; g < 3; g++) {
		char guest[8];

		snprintf(guest, sizeof(guest), "g%u", g);
		put_aux(dir, guest, 1, 100);
		put_aux(dir, guest, 2, 100);
		for (uint32_t i = 0; i < 6; i++)
			put_sample(dir, guest, NOW - 1000 + 7 * i + g, 0, 1 + i / 3, 1 + (i + g) % 3, NULL);
	}
	r1 = apply(dir, 60000, 4, 990, NULL, 0);
	ck_assert_uint_gt(r1.samples, 0);
	ck_assert_int_eq(r1.unmet, 0);
	ck_assert_uint_le(r1.kept_bytes, 60000);
	r2 = apply(dir, 60000, 4, 990, NULL, 0);
	ck_assert_uint_eq(r2.samples + r2.aux + r2.temps, 0);
	ck_assert_uint_eq(r2.bytes, 0);
	ck_assert_uint_eq(r2.kept_samples, r1.kept_samples);
	ck_assert_uint_eq(r2.kept_aux, r1.kept_aux);
	ck_assert_uint_eq(r2.kept_bytes, r1.kept_bytes);
	test_rmtree(dir);
	free(dir);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("retention");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_read_info);
	tcase_add_test(tc, test_scan_names);
	tcase_add_test(tc, test_count_per_guest);
	tcase_add_test(tc, test_bytes_across_guests);
	tcase_add_test(tc, test_age);
	tcase_add_test(tc, test_aux_needed);
	tcase_add_test(tc, test_pinned);
	tcase_add_test(tc, test_max_aux);
	tcase_add_test(tc, test_max_aux_pinned);
	tcase_add_test(tc, test_temps);
	tcase_add_test(tc, test_symlinks);
	tcase_add_test(tc, test_corrupt);
	tcase_add_test(tc, test_unreadable);
	tcase_add_test(tc, test_unmet);
	tcase_add_test(tc, test_list);
	tcase_add_test(tc, test_idempotent);
	tcase_add_test(tc, test_kept);
	suite_add_tcase(s, tc);
	return test_run_suite(s);
}
