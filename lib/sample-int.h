/* SPDX-License-Identifier: MIT */
/*
 * Inside the sample reader: a CPU's FRAME sections (lib/sample-frames.c),
 * judged before any page memory is taken, then decoded into the CPU's
 * pages. A frame that fails is refused (docs/FORMAT.md 2.5): its pages are
 * left out and said in the sample's refusals, and the rest is read.
 */
#ifndef VMT_SAMPLE_INT_H
#define VMT_SAMPLE_INT_H

#include <stdbool.h>

#include "frame.h"
#include "sample.h"
#include "vfile.h"

struct sample_frame_ref {
	const struct vmt_vsection *x;
	struct vmt_frame_hdr h;
	const uint8_t *data;	/* header and payload, CRC checked; NULL once refused */
	int note;		/* its line in s->refusals, -1 if not listed */
};

/*
 * The schema TCODE frames decode with (lib/tcode.h): the caller's, else
 * made from the aux given or the one beside the sample (the aux its INFO
 * names: version and content id), looked for at the first such frame.
 */
struct sample_tc {
	const struct vmt_tcode *t;
	const char *aux_path;	/* tried first */
	const char *path;	/* the sample's, NULL in memory */
	bool tried;
	struct vmt_tcode *own;	/* made for this read only: tcode_free() it */
};
/* The schema, or NULL when there is none (the frames are then refused). */
const struct vmt_tcode *sample_tc_get(struct sample_tc *tc, const struct vmt_sample *s);

/*
 * vfile_budget_check()'s cost of a section of a sample (arg): a FRAME
 * section the pages its header claims (read without the CRC), 0 when it
 * is refused undecoded (its header does not read or claims more than its
 * payload can hold); UINT64_MAX (vfile's default) for the others.
 */
uint64_t sample_section_cost(const struct vmt_vfile *f, const struct vmt_vsection *x, void *arg);
/*
 * The most pages the n frames of s->cpus[cpu] (in file order) can decode
 * to, from their headers as they stand, without the CRC: what to allocate
 * before decoding. Never more than the CPU's frame_pages.
 */
uint64_t sample_frames_bound(const struct vmt_vfile *f, const struct vmt_sample *s, uint32_t cpu,
			     const struct sample_frame_ref *fr, uint32_t n);
/*
 * Read the frames in file order into out (room pages), page after page:
 * CRC, header, inside the CPU's frame pages, its size against its
 * payload's, then decoded (first_seq is not judged: seqs have gaps). A frame failing any of it is refused: its pages
 * are left out and counted, and it is said in s->refusals. *pages gets the
 * pages read. -EBADMSG with why when the frames read and the refused ones
 * cannot hold the CPU record's frame_pages (a refused frame at the end
 * holds whatever is missing; frames read do not). With out NULL and room
 * UINT64_MAX it only counts: each frame is decoded into a scratch buffer of
 * its own size, one at a time.
 */
int sample_frames_decode(const struct vmt_vfile *f, struct vmt_sample *s, uint32_t cpu,
			 struct sample_frame_ref *fr, uint32_t n, struct sample_tc *tc, uint8_t *out,
			 uint64_t room, uint64_t *pages, char *why, size_t why_len);

#endif
