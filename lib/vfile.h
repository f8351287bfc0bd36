/* SPDX-License-Identifier: MIT */
/*
 * vfile: the container that sample (.vmts) and aux (.vmtaux) files share.
 * A 32-byte file header, then sections, each a 40-byte header and its data,
 * optionally zstd-compressed, each with a CRC32C of its header and of its
 * stored data; an END section last, so a truncated file is never mistaken
 * for a whole one. Little-endian throughout. See docs/FORMAT.md.
 *
 * Readers trust nothing: every size is checked against the file and against
 * the caller's limit before memory is allocated.
 */
#ifndef VMT_VFILE_H
#define VMT_VFILE_H

#include <stddef.h>
#include <stdint.h>

#define VMT_VFILE_HDR_SIZE 32
#define VMT_VSECT_HDR_SIZE 40
#define VMT_VSECT_END 0xffffu
#define VMT_VSECT_ZSTD 0x1u	/* section flags */

struct vmt_vfile_writer {
	int fd;
	uint64_t offset;
	uint32_t sections;
	int zstd_level;		/* 0 = store sections uncompressed */
	int zstd_workers;	/* for large sections */
	int error;		/* first error, sticky */
	void *zctx;		/* the compressor, kept across sections; finish frees it */
};

/*
 * Write the file header: magic is 8 bytes ("VMTSMPL1"...). Set zstd_level
 * and zstd_workers before; the fd is written with pwrite from offset 0.
 * Once started, always call vfile_writer_finish(), even after an error:
 * it releases the compressor.
 */
int vfile_writer_start(struct vmt_vfile_writer *w, int fd, const char magic[8],
		       uint32_t format_version, uint64_t created_ns);
/* Append a section; compress only if flags has VMT_VSECT_ZSTD. */
int vfile_write_section(struct vmt_vfile_writer *w, uint32_t type, uint32_t id,
			uint32_t flags, const void *data, uint64_t len);
/* Same, from a list of pieces (the pages of a ring), without gathering them. */
struct vmt_iovec {
	const void *base;
	size_t len;
};
int vfile_write_sectionv(struct vmt_vfile_writer *w, uint32_t type, uint32_t id,
			 uint32_t flags, const struct vmt_iovec *iov, size_t n);
/* END section (skipped after an error). Returns w->error or 0. The caller fsyncs and renames. */
int vfile_writer_finish(struct vmt_vfile_writer *w);

struct vmt_vsection {
	uint32_t type, id, flags, data_crc;
	uint64_t offset;	/* of the stored data in the file */
	uint64_t stored_size;
	uint64_t raw_size;
};

struct vmt_vfile {
	const uint8_t *map;	/* whole file, read-only mapping */
	size_t size;
	char magic[8];
	uint32_t format_version;
	uint64_t created_ns;
	struct vmt_vsection *sect;	/* in file order, END not included */
	uint32_t nsect;
	int unmap;		/* map is ours (vfile_open): vfile_close() unmaps it */
};

/*
 * Map and index a file. Returns 0, or -EBADMSG with a reason in why
 * (bad magic, header CRC, truncated, section past end, no END, ...);
 * -errno for I/O. max_raw bounds every section's uncompressed size.
 */
int vfile_open(struct vmt_vfile *f, const char *path, const char magic[8], uint64_t max_raw,
	       char *why, size_t why_len);
/* The same over a buffer the caller keeps alive (fuzzing, tests). */
int vfile_open_mem(struct vmt_vfile *f, const void *data, size_t size, const char magic[8],
		   uint64_t max_raw, char *why, size_t why_len);
void vfile_close(struct vmt_vfile *f);

/*
 * What a reader may decode of a file from elsewhere (docs/FORMAT.md 1.4):
 * real sections and frames are 3-8:1, so VMT_READ_RATIO times the file's
 * size, plus VMT_READ_SLACK for small files, and never more than
 * VMT_READ_CAP. A max_memory (vmtracectl --max-memory) other than 0 is the
 * budget instead: it may raise the bound or lower it.
 */
#define VMT_READ_RATIO 64u
#define VMT_READ_SLACK (32ull << 20)
#define VMT_READ_CAP (4ull << 30)
uint64_t vfile_budget(uint64_t file_size, uint64_t max_memory);
/*
 * What decoding every section costs, added up in file order, against
 * budget, before any is decoded: a compressed section its raw size, a
 * stored one nothing (it is read in place), unless cost (may be NULL)
 * says otherwise for a section (a sample's frames) by returning other than
 * UINT64_MAX. -EBADMSG with why naming the section where the sum passes the
 * budget; 0 and *sum (may be NULL) otherwise.
 */
int vfile_budget_check(const struct vmt_vfile *f, uint64_t budget,
		       uint64_t (*cost)(const struct vmt_vfile *f, const struct vmt_vsection *s, void *arg),
		       void *arg, uint64_t *sum, char *why, size_t why_len);

/* First section of type (and id, unless id is VMT_VSECT_ANY); NULL if none. */
#define VMT_VSECT_ANY 0xffffffffu
const struct vmt_vsection *vfile_find(const struct vmt_vfile *f, uint32_t type, uint32_t id);

/*
 * Check the data CRC and hand out the uncompressed data: *out points into
 * the mapping for stored sections (*owned NULL), or to a malloc'd buffer
 * the caller frees (*owned == *out). -EBADMSG on CRC or decompression error.
 */
int vfile_section_data(const struct vmt_vfile *f, const struct vmt_vsection *s,
		       const uint8_t **out, void **owned);
/* The same, with the reason in why: "section 3 (type 0x20 id 1): data CRC mismatch". */
int vfile_section_data_why(const struct vmt_vfile *f, const struct vmt_vsection *s,
			   const uint8_t **out, void **owned, char *why, size_t why_len);

/* -EBADMSG, with why "section I (type T id N): MSG" (or MSG if s is NULL). */
int vfile_bad(char *why, size_t why_len, const struct vmt_vfile *f, const struct vmt_vsection *s,
	      const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#endif
