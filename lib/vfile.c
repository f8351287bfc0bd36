/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "util.h"
#include "vfile.h"

/*
 * The densest a zstd frame can be is an RLE block: 4 bytes (3 of block
 * header, 1 of content) for at most 128 KiB. A raw_size above this bound
 * cannot be the content of stored_size bytes, so the reader refuses it
 * before anything is allocated.
 */
#define ZSTD_BLOCK_MAX (128u * 1024)

/* A job of zstd's worker threads, in bytes (zctx_get). */
#define VFILE_ZSTD_JOB (1024u * 1024)

static uint64_t zstd_raw_bound(uint64_t stored)
{
	return (stored / 4 + 1) * ZSTD_BLOCK_MAX;
}

/* ---- writer ---------------------------------------------------------- */

static int writer_fail(struct vmt_vfile_writer *w, int r)
{
	if (!w->error)
		w->error = r;
	return w->error;
}

int vfile_writer_start(struct vmt_vfile_writer *w, int fd, const char magic[8],
		       uint32_t format_version, uint64_t created_ns)
{
	uint8_t h[VMT_VFILE_HDR_SIZE] = { 0 };
	int r;

	w->fd = fd;
	w->offset = 0;
	w->sections = 0;
	w->error = 0;
	w->zctx = NULL;
	memcpy(h, magic, 8);
	put_le32(h + 8, format_version);
	put_le32(h + 12, VMT_VFILE_HDR_SIZE);
	put_le64(h + 16, created_ns);
	put_le32(h + 24, 0);
	put_le32(h + 28, crc32c(0, h, 28));
	r = pwrite_all(fd, h, sizeof(h), 0);
	if (r < 0)
		return writer_fail(w, r);
	w->offset = VMT_VFILE_HDR_SIZE;
	return 0;
}

static void sect_hdr_build(uint8_t h[VMT_VSECT_HDR_SIZE], uint32_t type, uint32_t id,
			   uint32_t flags, uint32_t data_crc, uint64_t stored, uint64_t raw)
{
	put_le32(h + 0, type);
	put_le32(h + 4, id);
	put_le32(h + 8, flags);
	put_le32(h + 12, data_crc);
	put_le64(h + 16, stored);
	put_le64(h + 24, raw);
	put_le32(h + 32, 0);
	put_le32(h + 36, crc32c(0, h, 36));
}

static int zctx_get(struct vmt_vfile_writer *w, ZSTD_CCtx **out)
{
	ZSTD_CCtx *c = w->zctx;

	if (!c) {
		c = ZSTD_createCCtx();
		if (!c)
			return -ENOMEM;
		if (ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, w->zstd_level))) {
			ZSTD_freeCCtx(c);
			return -EINVAL;
		}
		if (w->zstd_workers > 0) {
			ZSTD_bounds b = ZSTD_cParam_getBounds(ZSTD_c_nbWorkers);
			int n = w->zstd_workers;

			/* a libzstd built without threads has an upper bound of 0:
			 * compress in the calling thread then */
			if (!ZSTD_isError(b.error) && b.upperBound > 0) {
				n = VMT_MIN(n, b.upperBound);
				if (ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_nbWorkers, n)))
					ZSTD_CCtx_setParameter(c, ZSTD_c_nbWorkers, 0);
				/* its buffers are about seven jobs: 12 MiB at the
				 * default job (four windows, 2 MiB at level 1), 3.4
				 * MiB at 512 KiB, the least, but a 256 MiB window
				 * then took 1.2-1.3 s against 0.8-0.9; at 1 MiB
				 * about 7 MiB and 0.97-0.99 s (bench/README.md) */
				else
					ZSTD_CCtx_setParameter(c, ZSTD_c_jobSize, VFILE_ZSTD_JOB);
			}
		}
		w->zctx = c;
	}
	*out = c;
	return 0;
}

/* Compress iov as one frame, writing it from offset off; crc and size of what was written. */
static int write_zstd(struct vmt_vfile_writer *w, const struct vmt_iovec *iov, size_t n,
		      uint64_t raw, uint64_t off, uint32_t *crc, uint64_t *stored)
{
	size_t outcap = ZSTD_CStreamOutSize();
	ZSTD_CCtx *c;
	uint8_t *obuf;
	uint64_t done = 0;
	int r;

	r = zctx_get(w, &c);
	if (r < 0)
		return r;
	obuf = malloc(outcap);
	if (!obuf)
		return -ENOMEM;
	ZSTD_CCtx_reset(c, ZSTD_reset_session_only);
	/* the pledged size puts raw_size into the frame header, which readers check */
	if (ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(c, raw))) {
		r = -EINVAL;
		goto out;
	}
	*crc = 0;
	for (size_t i = 0; i <= n; i++) {
		int last = i == n;
		ZSTD_inBuffer in = { last ? NULL : iov[i].base, last ? 0 : iov[i].len, 0 };
		ZSTD_EndDirective mode = last ? ZSTD_e_end : ZSTD_e_continue;
		size_t left;

		do {
			ZSTD_outBuffer o = { obuf, outcap, 0 };

			left = ZSTD_compressStream2(c, &o, &in, mode);
			if (ZSTD_isError(left)) {
				r = ZSTD_getErrorCode(left) == ZSTD_error_memory_allocation ? -ENOMEM : -EIO;
				goto out;
			}
			if (o.pos) {
				r = pwrite_all(w->fd, obuf, o.pos, off + done);
				if (r < 0)
					goto out;
				*crc = crc32c(*crc, obuf, o.pos);
				done += o.pos;
			}
		} while (last ? left != 0 : in.pos < in.size);
	}
	*stored = done;
	r = 0;
out:
	if (r < 0)
		ZSTD_CCtx_reset(c, ZSTD_reset_session_only);
	free(obuf);
	return r;
}

/* Write iov as is from offset off, a batch of pieces per system call. */
static int write_raw(struct vmt_vfile_writer *w, const struct vmt_iovec *iov, size_t n,
		     uint64_t off, uint32_t *crc)
{
	*crc = 0;
	for (size_t i = 0; i < n;) {
		struct iovec b[64];
		uint64_t blen = 0;
		int k = 0, r;

		for (; i < n && k < (int)ARRAY_SIZE(b); i++) {
			if (!iov[i].len)
				continue;
			/* CRC just before the write, while the piece is in cache */
			*crc = crc32c(*crc, iov[i].base, iov[i].len);
			b[k].iov_base = (void *)iov[i].base;
			b[k].iov_len = iov[i].len;
			blen += iov[i].len;
			k++;
		}
		r = pwritev_all(w->fd, b, k, off);
		if (r < 0)
			return r;
		off += blen;
	}
	return 0;
}

int vfile_write_sectionv(struct vmt_vfile_writer *w, uint32_t type, uint32_t id,
			 uint32_t flags, const struct vmt_iovec *iov, size_t n)
{
	uint8_t h[VMT_VSECT_HDR_SIZE] = { 0 };
	uint64_t raw = 0, stored, hoff = w->offset, doff = w->offset + VMT_VSECT_HDR_SIZE;
	uint32_t crc = 0;
	int r;

	if (w->error)
		return w->error;
	if (type == VMT_VSECT_END || (flags & ~VMT_VSECT_ZSTD) || (n && !iov))
		return writer_fail(w, -EINVAL);
	for (size_t i = 0; i < n; i++) {
		if (iov[i].len && !iov[i].base)
			return writer_fail(w, -EINVAL);
		if (iov[i].len > UINT64_MAX - raw)
			return writer_fail(w, -EOVERFLOW);
		raw += iov[i].len;
	}

	/* the header comes first but its CRC (and stored size) come last */
	r = pwrite_all(w->fd, h, sizeof(h), hoff);
	if (r < 0)
		return writer_fail(w, r);
	if (flags & VMT_VSECT_ZSTD) {
		r = write_zstd(w, iov, n, raw, doff, &crc, &stored);
	} else {
		r = write_raw(w, iov, n, doff, &crc);
		stored = raw;
	}
	if (r < 0)
		return writer_fail(w, r);
	sect_hdr_build(h, type, id, flags, crc, stored, raw);
	r = pwrite_all(w->fd, h, sizeof(h), hoff);
	if (r < 0)
		return writer_fail(w, r);
	w->offset = doff + stored;
	w->sections++;
	return 0;
}

int vfile_write_section(struct vmt_vfile_writer *w, uint32_t type, uint32_t id,
			uint32_t flags, const void *data, uint64_t len)
{
	struct vmt_iovec v = { data, (size_t)len };

	if (len > SIZE_MAX)
		return writer_fail(w, -EOVERFLOW);
	return vfile_write_sectionv(w, type, id, flags, &v, len ? 1 : 0);
}

int vfile_writer_finish(struct vmt_vfile_writer *w)
{
	uint8_t h[VMT_VSECT_HDR_SIZE];
	int r;

	ZSTD_freeCCtx(w->zctx);
	w->zctx = NULL;
	if (w->error)
		return w->error;
	sect_hdr_build(h, VMT_VSECT_END, w->sections, 0, crc32c(0, NULL, 0), 0, 0);
	r = pwrite_all(w->fd, h, sizeof(h), w->offset);
	if (r < 0)
		return writer_fail(w, r);
	w->offset += VMT_VSECT_HDR_SIZE;
	return 0;
}

/* ---- reader ---------------------------------------------------------- */

/* len bytes of f at pos: in the mapping, or read into buf (vfile_open_fd). */
static const uint8_t *vfile_at(const struct vmt_vfile *f, uint64_t pos, size_t len, uint8_t *buf,
			       int *err)
{
	size_t got = 0;

	if (f->map)
		return f->map + pos;
	while (got < len) {
		ssize_t r = pread(f->fd, buf + got, len - got, (off_t)(pos + got));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			*err = r < 0 ? -errno : -EIO;	/* shorter than fstat said: it changed */
			return NULL;
		}
		got += (size_t)r;
	}
	return buf;
}

static int vfile_index(struct vmt_vfile *f, const char magic[8], uint64_t max_raw,
		       char *why, size_t why_len)
{
	uint8_t fh[VMT_VFILE_HDR_SIZE], sh[VMT_VSECT_HDR_SIZE];
	const uint8_t *m;
	size_t size = f->size, pos = VMT_VFILE_HDR_SIZE, cap = 0;
	uint32_t n = 0;
	int err = 0;

	if (size < VMT_VFILE_HDR_SIZE)
		return why_bad(why, why_len, "truncated: %zu bytes, shorter than the file header", size);
	m = vfile_at(f, 0, sizeof(fh), fh, &err);
	if (!m)
		return err;
	if (memcmp(m, magic, 8))
		return why_bad(why, why_len, "bad magic: not a %.8s file", magic);
	if (get_le32(m + 28) != crc32c(0, m, 28))
		return why_bad(why, why_len, "file header CRC mismatch");
	if (get_le32(m + 12) != VMT_VFILE_HDR_SIZE)
		return why_bad(why, why_len, "file header size %u, expected %u", get_le32(m + 12),
			   VMT_VFILE_HDR_SIZE);
	if (get_le32(m + 24))
		return why_bad(why, why_len, "unknown file header flags 0x%x", get_le32(m + 24));
	memcpy(f->magic, m, 8);
	f->format_version = get_le32(m + 8);
	f->created_ns = get_le64(m + 16);

	for (;;) {
		const uint8_t *h;
		struct vmt_vsection s;

		if (size - pos < VMT_VSECT_HDR_SIZE)
			return why_bad(why, why_len, "truncated: no END section (%zu bytes after section %u)",
				   size - pos, n);
		h = vfile_at(f, pos, sizeof(sh), sh, &err);
		if (!h)
			return err;
		if (get_le32(h + 36) != crc32c(0, h, 36))
			return why_bad(why, why_len, "section %u at offset %zu: header CRC mismatch", n, pos);
		s.type = get_le32(h);
		s.id = get_le32(h + 4);
		s.flags = get_le32(h + 8);
		s.data_crc = get_le32(h + 12);
		s.stored_size = get_le64(h + 16);
		s.raw_size = get_le64(h + 24);
		s.offset = pos + VMT_VSECT_HDR_SIZE;

#define SBAD(fmt, ...) why_bad(why, why_len, "section %u (type 0x%x id %u): " fmt, n, s.type, s.id, \
			   ##__VA_ARGS__)
		if (s.flags & ~VMT_VSECT_ZSTD)
			return SBAD("unknown flags 0x%x", s.flags);
		if (get_le32(h + 32))
			return SBAD("reserved field is not 0");
		if (s.type == VMT_VSECT_END) {
			if (s.flags || s.stored_size || s.raw_size || s.data_crc != crc32c(0, NULL, 0))
				return SBAD("END section is not empty");
			if (s.id != n)
				return SBAD("END section counts %u sections, %u precede it", s.id, n);
			if (size - s.offset)
				return SBAD("%zu bytes after the END section", size - (size_t)s.offset);
			break;
		}
		if (s.stored_size > size - s.offset)
			return SBAD("%" PRIu64 " bytes of data at offset %" PRIu64
				    " run past the end of the file (%zu bytes)",
				    s.stored_size, s.offset, size);
		if (!(s.flags & VMT_VSECT_ZSTD) && s.raw_size != s.stored_size)
			return SBAD("stored size %" PRIu64 " differs from raw size %" PRIu64
				    " in an uncompressed section", s.stored_size, s.raw_size);
		if (s.raw_size > max_raw)
			return SBAD("raw size %" PRIu64 " exceeds the limit %" PRIu64, s.raw_size, max_raw);
		if ((s.flags & VMT_VSECT_ZSTD) && s.raw_size > zstd_raw_bound(s.stored_size))
			return SBAD("raw size %" PRIu64 " is impossible for %" PRIu64 " compressed bytes",
				    s.raw_size, s.stored_size);
#undef SBAD
		if (n == cap) {
			struct vmt_vsection *t;

			cap = cap ? cap * 2 : 16;
			t = realloc(f->sect, cap * sizeof(*t));
			if (!t)
				return -ENOMEM;
			f->sect = t;
		}
		f->sect[n++] = s;
		f->nsect = n;
		pos = (size_t)(s.offset + s.stored_size);
	}
	return 0;
}

int vfile_open_mem(struct vmt_vfile *f, const void *data, size_t size, const char magic[8],
		   uint64_t max_raw, char *why, size_t why_len)
{
	int r;

	memset(f, 0, sizeof(*f));
	if (why && why_len)
		why[0] = 0;
	f->map = data;
	f->size = data ? size : 0;
	r = vfile_index(f, magic, max_raw, why, why_len);
	if (r < 0)
		vfile_close(f);
	return r;
}

int vfile_open(struct vmt_vfile *f, const char *path, const char magic[8], uint64_t max_raw,
	       char *why, size_t why_len)
{
	struct stat st;
	void *m = NULL;
	int fd, r;

	memset(f, 0, sizeof(*f));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return -EINVAL;
	}
	if ((uint64_t)st.st_size > SIZE_MAX) {
		close(fd);
		return -EFBIG;
	}
	/* mmap of an empty file fails; let the header check say "truncated" */
	if (st.st_size > 0) {
		m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m == MAP_FAILED) {
			r = -errno;
			close(fd);
			return r;
		}
	}
	close(fd);
	r = vfile_open_mem(f, m, (size_t)st.st_size, magic, max_raw, why, why_len);
	if (r < 0) {
		if (m)
			munmap(m, (size_t)st.st_size);
		return r;
	}
	f->unmap = m != NULL;
	return 0;
}

int vfile_open_fd(struct vmt_vfile *f, int fd, const char magic[8], uint64_t max_raw,
		  char *why, size_t why_len)
{
	struct stat st;
	int r;

	memset(f, 0, sizeof(*f));
	if (why && why_len)
		why[0] = 0;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if ((uint64_t)st.st_size > SIZE_MAX)
		return -EFBIG;
	f->fd = fd;
	f->size = (size_t)st.st_size;
	r = vfile_index(f, magic, max_raw, why, why_len);
	if (r < 0)
		vfile_close(f);
	return r;
}

void vfile_close(struct vmt_vfile *f)
{
	if (f->unmap && f->map)
		munmap((void *)f->map, f->size);
	free(f->sect);
	memset(f, 0, sizeof(*f));
}

const struct vmt_vsection *vfile_find(const struct vmt_vfile *f, uint32_t type, uint32_t id)
{
	for (uint32_t i = 0; i < f->nsect; i++)
		if (f->sect[i].type == type && (id == VMT_VSECT_ANY || f->sect[i].id == id))
			return &f->sect[i];
	return NULL;
}

uint64_t vfile_budget(uint64_t file_size, uint64_t max_memory)
{
	if (max_memory)
		return max_memory;
	if (file_size > (VMT_READ_CAP - VMT_READ_SLACK) / VMT_READ_RATIO)
		return VMT_READ_CAP;
	return file_size * VMT_READ_RATIO + VMT_READ_SLACK;
}

int vfile_budget_check(const struct vmt_vfile *f, uint64_t budget,
		       uint64_t (*cost)(const struct vmt_vfile *f, const struct vmt_vsection *s, void *arg),
		       void *arg, uint64_t *sum, char *why, size_t why_len)
{
	uint64_t total = 0;

	for (uint32_t i = 0; i < f->nsect; i++) {
		const struct vmt_vsection *s = &f->sect[i];
		uint64_t c = cost ? cost(f, s, arg) : UINT64_MAX;

		if (c == UINT64_MAX)
			c = s->flags & VMT_VSECT_ZSTD ? s->raw_size : 0;
		if (c > budget - total) {
			total = c > UINT64_MAX - total ? UINT64_MAX : total + c;
			vfile_bad(why, why_len, f, s, "decodes to %" PRIu64 " bytes with the sections "
				  "before it, more than the reader's budget of %" PRIu64 " bytes for a "
				  "file of %zu (at most %u:1; --max-memory sets it)", total, budget,
				  f->size, VMT_READ_RATIO);
			return -EBADMSG;
		}
		total += c;
	}
	if (sum)
		*sum = total;
	return 0;
}

/* s's data, at src (in the mapping, or a copy the caller frees; NULL only
 * when s is outside the file): checked and decoded. */
static int section_data_at(const struct vmt_vfile *f, const struct vmt_vsection *s,
			   const uint8_t *src, const uint8_t **out, void **owned, char *why,
			   size_t why_len)
{
	size_t stored = (size_t)s->stored_size;
	unsigned long long csize;
	ZSTD_DCtx *d;
	void *dst;
	size_t got;
	uintptr_t base = (uintptr_t)f->sect, at = (uintptr_t)s;
	long idx = f->nsect && at >= base && at < base + f->nsect * sizeof(*s) ?
		   (long)((at - base) / sizeof(*s)) : -1;

	*out = NULL;
	*owned = NULL;
#define SBAD(fmt, ...) why_bad(why, why_len, "section %ld (type 0x%x id %u): " fmt, idx, s->type, s->id, \
			   ##__VA_ARGS__)
	/* s may be a caller's copy: check it against the file again */
	if (!src || s->offset > f->size || s->stored_size > f->size - s->offset)
		return SBAD("data outside the file");
	if (crc32c(0, src, stored) != s->data_crc)
		return SBAD("data CRC mismatch");
	if (!(s->flags & VMT_VSECT_ZSTD)) {
		if (s->raw_size != s->stored_size)
			return SBAD("stored size differs from raw size");
		*out = src;
		return 0;
	}
	if (s->raw_size > SIZE_MAX || s->raw_size > zstd_raw_bound(s->stored_size))
		return SBAD("raw size %" PRIu64 " is impossible", s->raw_size);
	/* exactly one zstd frame (not a skippable one) declaring raw_size */
	if (stored < 4 || get_le32(src) != ZSTD_MAGICNUMBER)
		return SBAD("not a zstd frame");
	csize = ZSTD_getFrameContentSize(src, stored);
	if (csize == ZSTD_CONTENTSIZE_ERROR || csize == ZSTD_CONTENTSIZE_UNKNOWN)
		return SBAD("zstd frame header without a content size");
	if (csize != s->raw_size)
		return SBAD("zstd frame holds %llu bytes, section says %" PRIu64, csize, s->raw_size);
	got = ZSTD_findFrameCompressedSize(src, stored);
	if (ZSTD_isError(got) || got != stored)
		return SBAD("data is not exactly one zstd frame");

	dst = malloc(s->raw_size ? (size_t)s->raw_size : 1);
	if (!dst)
		return -ENOMEM;
	d = ZSTD_createDCtx();
	if (!d) {
		free(dst);
		return -ENOMEM;
	}
	got = ZSTD_decompressDCtx(d, dst, (size_t)s->raw_size, src, stored);
	ZSTD_freeDCtx(d);
	if (ZSTD_isError(got) || got != s->raw_size) {
		free(dst);
		if (ZSTD_isError(got))
			return SBAD("zstd: %s", ZSTD_getErrorName(got));
		return SBAD("zstd frame decompressed to %zu bytes, expected %" PRIu64, got, s->raw_size);
	}
#undef SBAD
	*out = dst;
	*owned = dst;
	return 0;
}

int vfile_section_data_why(const struct vmt_vfile *f, const struct vmt_vsection *s,
			   const uint8_t **out, void **owned, char *why, size_t why_len)
{
	uint8_t *copy;
	void *dec;
	int r = 0;

	if (s->offset > f->size || s->stored_size > f->size - s->offset)
		return section_data_at(f, s, NULL, out, owned, why, why_len);
	if (f->map)
		return section_data_at(f, s, f->map + s->offset, out, owned, why, why_len);
	*out = NULL;
	*owned = NULL;
	/* vfile_open_fd: read (the caller's to free), or decoded from the copy */
	copy = malloc(s->stored_size ? (size_t)s->stored_size : 1);
	if (!copy)
		return -ENOMEM;
	if (!vfile_at(f, s->offset, (size_t)s->stored_size, copy, &r)) {
		free(copy);
		return r;
	}
	r = section_data_at(f, s, copy, out, &dec, why, why_len);
	if (r < 0 || dec) {
		free(copy);
		*owned = dec;
		return r;
	}
	*owned = copy;
	return 0;
}

int vfile_section_data(const struct vmt_vfile *f, const struct vmt_vsection *s,
		       const uint8_t **out, void **owned)
{
	return vfile_section_data_why(f, s, out, owned, NULL, 0);
}

int vfile_bad(char *why, size_t why_len, const struct vmt_vfile *f, const struct vmt_vsection *s,
	      const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	if (!why || !why_len)
		return -EBADMSG;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (s)
		snprintf(why, why_len, "section %ld (type 0x%x id %u): %s", (long)(s - f->sect),
			 s->type, s->id, msg);
	else
		snprintf(why, why_len, "%s", msg);
	return -EBADMSG;
}
