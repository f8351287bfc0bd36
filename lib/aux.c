/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "aux.h"
#include "meta.h"
#include "util.h"
#include "tlv.h"
#include "vfile.h"

#define AUX_INFO_MAX (64u << 10)
#define AUX_CLOCK_MAX (256u << 10)

static const struct vmt_tlv_field info_fields[] = {
	VMT_TLV_FIELD(0x01, STR, struct vmt_aux, guest),
	VMT_TLV_FIELD(0x02, U32, struct vmt_aux, version),
	VMT_TLV_FIELD(0x03, U64, struct vmt_aux, id),
	VMT_TLV_FIELD(0x04, U64, struct vmt_aux, created_ns),
	VMT_TLV_FIELD(0x05, U32, struct vmt_aux, ncpus),
	VMT_TLV_FIELD(0x06, U32, struct vmt_aux, page_size),
	VMT_TLV_FIELD(0x07, STR, struct vmt_aux, release),
	VMT_TLV_FIELD(0x08, STR, struct vmt_aux, clock),
	VMT_TLV_FIELD(0x09, STR, struct vmt_aux, boot_id),
	VMT_TLV_FIELD(0x0a, STR, struct vmt_aux, agent),
};

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++) {
		h ^= b[i];
		h *= FNV_PRIME;
	}
	return h;
}

static uint64_t fnv_u32(uint64_t h, uint32_t v)
{
	uint8_t t[4];

	put_le32(t, v);
	return fnv(h, t, 4);
}

/* Length first, so that ("ab", "c") and ("a", "bc") hash apart. */
static uint64_t fnv_str(uint64_t h, const char *s, size_t size)
{
	size_t n = strnlen(s, size);

	return fnv(fnv_u32(h, (uint32_t)n), s, n);
}

uint64_t aux_compute_id(const struct vmt_aux *a)
{
	uint64_t h = FNV_OFFSET;
	uint8_t t[8];

	h = fnv_u32(h, a->ncpus);
	h = fnv_u32(h, a->page_size);
	h = fnv_str(h, a->release, sizeof(a->release));
	h = fnv_str(h, a->clock, sizeof(a->clock));
	h = fnv_str(h, a->boot_id, sizeof(a->boot_id));
	put_le64(t, a->meta_len);
	h = fnv(h, t, 8);
	if (a->meta_len)
		h = fnv(h, a->meta, a->meta_len);
	return h;
}

static bool page_size_ok(uint32_t ps)
{
	return ps >= 256 && ps <= VMT_MAX_PAGE_SIZE && !(ps & (ps - 1));
}

int aux_write(int fd, const struct vmt_aux *a)
{
	struct vmt_vfile_writer w = { .zstd_level = VMT_AUX_ZSTD_LEVEL };
	struct vmt_buf b = { 0 };
	const char *mwhy;
	int r;

	if (!a || strnlen(a->guest, sizeof(a->guest)) == sizeof(a->guest) || !name_is_valid(a->guest) ||
	    !a->version || !a->ncpus || a->ncpus > VMT_MAX_CPUS || !page_size_ok(a->page_size) ||
	    !a->meta || meta_validate(a->meta, a->meta_len, &mwhy) < 0 || a->id != aux_compute_id(a))
		return -EINVAL;
	r = tlv_put_fields(&b, info_fields, ARRAY_SIZE(info_fields), a);
	if (r < 0) {
		buf_free(&b);
		return r;
	}
	r = vfile_writer_start(&w, fd, VMT_AUX_MAGIC, VMT_AUX_VERSION, a->created_ns);
	if (r == 0)
		r = vfile_write_section(&w, VMT_AUX_SECT_INFO, 0, 0, b.data, b.len);
	if (r == 0)
		r = vfile_write_section(&w, VMT_AUX_SECT_META, 0, VMT_VSECT_ZSTD, a->meta, a->meta_len);
	if (r == 0 && a->have_clock) {
		b.len = 0;
		r = clock_info_put(&b, &a->sync);
		if (r == 0)
			r = vfile_write_section(&w, VMT_AUX_SECT_CLOCK, 0, 0, b.data, b.len);
	}
	buf_free(&b);
	if (r < 0) {
		vfile_writer_finish(&w);
		return r;
	}
	return vfile_writer_finish(&w);
}


static int parse_info(const uint8_t *p, size_t len, struct vmt_aux *a, char *msg, size_t n)
{
	int r = tlv_parse_fields(p, len, info_fields, ARRAY_SIZE(info_fields), a, NULL, msg, n);

	if (r < 0)
		return r;
	if (!name_is_valid(a->guest))
		snprintf(msg, n, "bad guest name");
	else if (!a->version)
		snprintf(msg, n, "version 0");
	else if (!a->ncpus || a->ncpus > VMT_MAX_CPUS)
		snprintf(msg, n, "ncpus %u not in 1..%d", a->ncpus, VMT_MAX_CPUS);
	else if (!page_size_ok(a->page_size))
		snprintf(msg, n, "page size %u is not a power of two in 256..%d", a->page_size,
			 VMT_MAX_PAGE_SIZE);
	else
		return 0;
	return -EBADMSG;
}

static int aux_parse(const struct vmt_vfile *f, uint64_t max_meta, struct vmt_aux *a,
		     char *why, size_t n)
{
	const struct vmt_vsection *info = NULL, *meta = NULL, *clock = NULL;
	const char *mwhy;
	const uint8_t *p;
	void *owned;
	char msg[200];
	uint64_t id;
	int r;

	if (f->format_version != VMT_AUX_VERSION)
		return vfile_bad(why, n, f, NULL, "format version %u, this reader knows %d",
			    f->format_version, VMT_AUX_VERSION);
	/* an aux comes from elsewhere too: bounded by its size before decoding */
	r = vfile_budget_check(f, vfile_budget(f->size, 0), NULL, NULL, NULL, why, n);
	if (r < 0)
		return r;
	for (uint32_t i = 0; i < f->nsect; i++) {
		const struct vmt_vsection *x = &f->sect[i], **slot;

		if (x->type == VMT_AUX_SECT_INFO)
			slot = &info;
		else if (x->type == VMT_AUX_SECT_META)
			slot = &meta;
		else if (x->type == VMT_AUX_SECT_CLOCK)
			slot = &clock;
		else
			continue;	/* a later version's section */
		if (*slot || x->id)
			return vfile_bad(why, n, f, x, "a second section of this type, or id not 0");
		*slot = x;
	}
	if (!info || !meta)
		return vfile_bad(why, n, f, NULL, "no %s section", info ? "META" : "INFO");
	if (info->raw_size > AUX_INFO_MAX)
		return vfile_bad(why, n, f, info, "%" PRIu64 " bytes, more than %u", info->raw_size,
			    AUX_INFO_MAX);
	if (clock && clock->raw_size > AUX_CLOCK_MAX)
		return vfile_bad(why, n, f, clock, "%" PRIu64 " bytes, more than %u", clock->raw_size,
			    AUX_CLOCK_MAX);
	if (meta->raw_size > max_meta)
		return vfile_bad(why, n, f, meta, "bundle of %" PRIu64 " bytes, more than %" PRIu64,
			    meta->raw_size, max_meta);

	r = vfile_section_data_why(f, info, &p, &owned, why, n);
	if (r < 0)
		return r;
	r = parse_info(p, (size_t)info->raw_size, a, msg, sizeof(msg));
	free(owned);
	if (r < 0)
		return vfile_bad(why, n, f, info, "%s", msg);

	if (clock) {
		r = vfile_section_data_why(f, clock, &p, &owned, why, n);
		if (r < 0)
			return r;
		r = clock_info_parse(p, (size_t)clock->raw_size, &a->sync, msg, sizeof(msg));
		free(owned);
		if (r < 0)
			return vfile_bad(why, n, f, clock, "%s", msg);
		a->have_clock = true;
	}
	r = vfile_section_data_why(f, meta, &p, &owned, why, n);
	if (r < 0)
		return r;
	if (owned) {
		a->meta = owned;
	} else {
		a->meta = malloc(meta->raw_size ? (size_t)meta->raw_size : 1);
		if (!a->meta)
			return -ENOMEM;
		memcpy(a->meta, p, (size_t)meta->raw_size);
	}
	a->meta_len = (size_t)meta->raw_size;
	r = meta_validate(a->meta, a->meta_len, &mwhy);
	if (r == -EBADMSG)
		return vfile_bad(why, n, f, meta, "bad bundle: %s", mwhy ? mwhy : "?");
	if (r < 0)
		return r;
	id = aux_compute_id(a);
	if (id != a->id)
		return vfile_bad(why, n, f, info, "content id %016" PRIx64 ", but the content hashes to %016"
			    PRIx64, a->id, id);
	return 0;
}

int aux_read_mem(const void *data, size_t len, uint64_t max_meta, struct vmt_aux *a, char *why,
		 size_t why_len)
{
	struct vmt_vfile f;
	int r;

	memset(a, 0, sizeof(*a));
	r = vfile_open_mem(&f, data, len, VMT_AUX_MAGIC, VMT_MAX(max_meta, AUX_INFO_MAX), why,
			   why_len);
	if (r < 0)
		return r;
	r = aux_parse(&f, max_meta, a, why, why_len);
	vfile_close(&f);
	if (r < 0)
		aux_free(a);
	return r;
}

int aux_read(const char *path, uint64_t max_meta, struct vmt_aux *a, char *why, size_t why_len)
{
	struct vmt_vfile f;
	int r;

	memset(a, 0, sizeof(*a));
	r = vfile_open(&f, path, VMT_AUX_MAGIC, VMT_MAX(max_meta, AUX_INFO_MAX), why, why_len);
	if (r < 0)
		return r;
	r = aux_parse(&f, max_meta, a, why, why_len);
	vfile_close(&f);
	if (r < 0)
		aux_free(a);
	return r;
}

void aux_free(struct vmt_aux *a)
{
	free(a->meta);
	clock_info_free(&a->sync);
	memset(a, 0, sizeof(*a));
}

bool aux_file_version(const char *name, size_t len, uint32_t *version)
{
	char again[32];
	uint64_t v = 0;

	/* "aux-" + 6..10 digits + ".vmtaux", exactly as aux_file_name() writes */
	if (len < 17 || len > 21 || memcmp(name, "aux-", 4) || memcmp(name + len - 7, ".vmtaux", 7))
		return false;
	for (size_t i = 4; i < len - 7; i++) {
		if (name[i] < '0' || name[i] > '9')
			return false;
		v = v * 10 + (uint64_t)(name[i] - '0');
	}
	if (!v || v > UINT32_MAX || aux_file_name(again, sizeof(again), (uint32_t)v) < 0 ||
	    strlen(again) != len || memcmp(again, name, len))
		return false;
	*version = (uint32_t)v;
	return true;
}

int aux_file_name(char *out, size_t n, uint32_t version)
{
	int len;

	if (!version)
		return -EINVAL;
	len = snprintf(out, n, "aux-%06" PRIu32 ".vmtaux", version);
	if (len < 0 || (size_t)len >= n)
		return -ENAMETOOLONG;
	return 0;
}
