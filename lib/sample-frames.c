/* SPDX-License-Identifier: MIT */
/*
 * Reading a CPU's FRAME sections (sample-int.h). A frame is refused, not
 * the file: one bad frame of a long window must not cost the rest of it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sample-int.h"
#include "util.h"

#define ZSTD_BLOCK_MAX 131072u

/*
 * The most bytes a payload of len bytes can decode to, so that a header
 * claiming more is refused before memory is taken: a zstd RLE block is 4
 * bytes for at most 128 KiB; an LZ4 sequence yields at most 255 bytes per
 * byte it takes.
 */
static uint64_t payload_raw_bound(uint32_t codec, uint64_t len)
{
	switch (codec) {
	case VMT_FRAME_ZSTD:
		return (len / 4 + 1) * ZSTD_BLOCK_MAX;
	case VMT_FRAME_LZ4:
		return len * 255;
	case VMT_FRAME_TCODE:
		return len * VMT_FRAME_TCODE_RATIO_MAX;
	default:
		return len;
	}
}

static void refuse(struct vmt_sample *s, uint32_t cpu, struct sample_frame_ref *fr, uint32_t k,
		   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void refuse(struct vmt_sample *s, uint32_t cpu, struct sample_frame_ref *fr, uint32_t k,
		   const char *fmt, ...)
{
	struct vmt_sample_refusal *r;
	va_list ap;

	fr->data = NULL;
	s->cpus[cpu].frames_refused++;
	if (s->nrefusals == VMT_SAMPLE_MAX_REFUSALS)
		return;
	fr->note = (int)s->nrefusals;
	r = &s->refusals[s->nrefusals++];
	*r = (struct vmt_sample_refusal){ .cpu = cpu, .frame = k, .run_frames = 1 };
	va_start(ap, fmt);
	vsnprintf(r->why, sizeof(r->why), fmt, ap);
	va_end(ap);
}

/* One frame's section: stored as written, its CRC, its header; -EBADMSG with why. */
static int frame_open(const struct vmt_vfile *f, struct sample_frame_ref *fr, char *why, size_t n)
{
	const uint8_t *p;
	void *owned;
	int r;

	if (fr->x->flags) {
		snprintf(why, n, "section flags %#x: a frame is never compressed again", fr->x->flags);
		return -EBADMSG;
	}
	/* stored as written: p points into the mapping, nothing is owned */
	r = vfile_section_data_why(f, fr->x, &p, &owned, why, n);
	if (r < 0)
		return r;
	r = frame_hdr_get(p, (size_t)fr->x->raw_size, &fr->h, why, n);
	if (r == 0)
		fr->data = p;
	return r;
}

/* The payload can hold the pages its header claims. */
static bool frame_fits(const struct vmt_sample *s, const struct vmt_frame_hdr *h,
		       const struct vmt_vsection *x)
{
	return (uint64_t)h->npages * s->page_size <=
	       payload_raw_bound(h->codec, x->raw_size - VMT_FRAME_HDR_SIZE);
}

uint64_t sample_section_cost(const struct vmt_vfile *f, const struct vmt_vsection *x, void *arg)
{
	const struct vmt_sample *s = arg;
	struct vmt_frame_hdr h;

	if (x->type != VMT_SAMPLE_SECT_FRAME)
		return UINT64_MAX;
	/* refused undecoded: a header that does not read, a claim its payload cannot hold */
	if (x->flags || x->raw_size < VMT_FRAME_HDR_SIZE ||
	    frame_hdr_get(f->map + x->offset, VMT_FRAME_HDR_SIZE, &h, NULL, 0) < 0 ||
	    !frame_fits(s, &h, x))
		return 0;
	return (uint64_t)h.npages * s->page_size;
}

uint64_t sample_frames_bound(const struct vmt_vfile *f, const struct vmt_sample *s, uint32_t cpu,
			     const struct sample_frame_ref *fr, uint32_t n)
{
	uint64_t pages = 0, most = s->cpus[cpu].frame_pages;

	for (uint32_t k = 0; k < n && pages < most; k++) {
		const struct vmt_vsection *x = fr[k].x;
		struct vmt_frame_hdr h;

		/* inside the file (vfile checked it), its CRC not checked yet: a
		 * header that does not read counts nothing */
		if (x->flags || x->raw_size < VMT_FRAME_HDR_SIZE ||
		    frame_hdr_get(f->map + x->offset, VMT_FRAME_HDR_SIZE, &h, NULL, 0) < 0 ||
		    !frame_fits(s, &h, x))
			continue;
		pages += h.npages;
	}
	return VMT_MIN(pages, most);
}

/*
 * Frame read into out, or refused with why. Its first_seq is not checked
 * against the frame before it: a stream's seqs have gaps (rejected pages)
 * and start again at 0 with a new agent, and a frame may hold both sides.
 * left: the CPU's frame pages not read yet.
 */
static int frame_read(const struct vmt_vfile *f, struct vmt_sample *s, struct sample_frame_ref *fr,
		      struct sample_tc *tc, uint64_t left, uint8_t *out, uint64_t room, char *why,
		      size_t n)
{
	const struct vmt_frame_hdr *h = &fr->h;
	int r = frame_open(f, fr, why, n);

	if (r < 0)
		return r;
	if (h->npages > left) {
		snprintf(why, n, "its %u pages run past the CPU's frame pages (%" PRIu64 " left)",
			 h->npages, left);
		return -EBADMSG;
	}
	if (!frame_fits(s, h, fr->x)) {
		snprintf(why, n, "%u pages of %u bytes cannot come from a %s payload of %" PRIu64 " bytes",
			 h->npages, s->page_size, frame_codec_name(h->codec),
			 fr->x->raw_size - VMT_FRAME_HDR_SIZE);
		return -EBADMSG;
	}
	if (h->npages > room) {	/* sample_frames_bound() counted it: never */
		snprintf(why, n, "no room for its %u pages", h->npages);
		return -EBADMSG;
	}
	return frame_decode_with(h->codec == VMT_FRAME_TCODE ? sample_tc_get(tc, s) : NULL, h->codec,
				 fr->data + VMT_FRAME_HDR_SIZE,
			    (size_t)fr->x->raw_size - VMT_FRAME_HDR_SIZE, out,
			    (size_t)h->npages * s->page_size, why, n);
}

/* The pages a refused frame's header claims, read without its CRC (the
 * damage may be in its payload): what a message can say, 0 if unknown. */
static uint32_t claimed_pages(const struct vmt_vfile *f, const struct sample_frame_ref *fr)
{
	struct vmt_frame_hdr h;

	if (fr->x->flags || fr->x->raw_size < VMT_FRAME_HDR_SIZE ||
	    frame_hdr_get(f->map + fr->x->offset, VMT_FRAME_HDR_SIZE, &h, NULL, 0) < 0)
		return 0;
	return h.npages;
}

/* The pages a row of refused frames left out, told to each of them listed. */
static void place_run(struct vmt_sample *s, struct sample_frame_ref *fr, uint32_t nrun,
		      uint64_t first_seq, uint64_t npages)
{
	for (uint32_t k = 0; k < nrun; k++) {
		if (fr[k].note < 0)
			continue;
		s->refusals[fr[k].note].first_seq = first_seq;
		s->refusals[fr[k].note].npages = (uint32_t)npages;
		s->refusals[fr[k].note].run_frames = nrun;
	}
}

int sample_frames_decode(const struct vmt_vfile *f, struct vmt_sample *s, uint32_t cpu,
			 struct sample_frame_ref *fr, uint32_t n, struct sample_tc *tc, uint8_t *out,
			 uint64_t room, uint64_t *pages, char *why, size_t why_len)
{
	struct vmt_sample_cpu *c = &s->cpus[cpu];
	uint64_t got = 0, seq = c->first_seq, run_pages = 0;
	uint32_t run = 0;
	char msg[200];

	uint8_t *scratch = NULL;
	uint64_t scratch_pages = 0;

	for (uint32_t k = 0; k < n; k++) {
		const struct vmt_frame_hdr *h = &fr[k].h;
		uint8_t *dst = out ? out + got * s->page_size : NULL;
		uint64_t space = room - got;

		fr[k].note = -1;
		if (!out && room == UINT64_MAX) {
			/* counting only: one frame at a time, its claim budgeted already */
			space = claimed_pages(f, &fr[k]);
			if (space > scratch_pages) {
				free(scratch);
				scratch = malloc((size_t)space * s->page_size);
				scratch_pages = scratch ? space : 0;
				if (!scratch)
					return -ENOMEM;
			}
			dst = scratch;
		}
		if (frame_read(f, s, &fr[k], tc, c->frame_pages - got, dst, space, msg, sizeof(msg)) < 0) {
			refuse(s, cpu, &fr[k], k, "%s", msg);
			run_pages += claimed_pages(f, &fr[k]);
			run++;
			continue;
		}
		/* what a row of refused frames held, for their lines: the seqs
		 * around it when they make sense (seqs may jump), else their
		 * headers' claims */
		if (run && h->first_seq >= seq && h->first_seq - seq <= c->frame_pages - got)
			run_pages = h->first_seq - seq;
		if (run)
			place_run(s, fr + k - run, run, seq, run_pages);
		run = 0;
		run_pages = 0;
		seq = h->first_seq + h->npages;
		got += h->npages;
		c->frames_read++;
		c->frame_bytes += fr[k].x->stored_size;
		c->frame_codecs |= 1u << h->codec;
	}
	free(scratch);
	/* refused frames hold what is missing; with none, nothing may be */
	if (run)
		place_run(s, fr + n - run, run, seq, c->frame_pages - got);
	if (!c->frames_refused && got != c->frame_pages)
		return vfile_bad(why, why_len, f, NULL, "cpu %u: its frames hold %" PRIu64
				 " pages, but its CPU record says %u", cpu, got, c->frame_pages);
	c->pages_refused = (uint32_t)(c->frame_pages - got);
	*pages = got;
	return 0;
}

int sample_refusal_text(const struct vmt_sample_refusal *r, char *out, size_t n)
{
	uint64_t last = r->first_seq + r->npages - 1;

	if (!r->npages)
		return snprintf(out, n, "cpu %u frame %u: %s; no pages of its own (the frames around it "
				"hold them all)", r->cpu, r->frame, r->why);
	if (r->run_frames == 1)
		return snprintf(out, n, "cpu %u frame %u: %s; its pages %" PRIu64 "..%" PRIu64
				" (%u) left out", r->cpu, r->frame, r->why, r->first_seq, last, r->npages);
	return snprintf(out, n, "cpu %u frame %u: %s; pages %" PRIu64 "..%" PRIu64 " (%u) left out, "
			"held by it and the %u refused frame(s) next to it", r->cpu, r->frame, r->why,
			r->first_seq, last, r->npages, r->run_frames - 1);
}
