/* SPDX-License-Identifier: MIT */
/*
 * The sample file (lib/sample.h): sample_read_mem() on the input, and
 * sample_read_info_fd() on a memfd holding the same bytes. Both run twice:
 * on the input as it is (CRC checks included) and on a copy whose CRCs
 * vfile_fixup() made right, so that mutations reach the section parsers.
 * A sample that reads is written back (uncompressed, into a memfd, its
 * decoded frames as raw pages) and must read again with the same INFO and
 * pages. Seeds with FRAME sections (version 2) lead into frame reading.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "fuzz.h"
#include "sample.h"
#include "vfile.h"

static int memfd = -1;

static int memfd_put(const uint8_t *data, size_t size)
{
	if (memfd < 0) {
		memfd = memfd_create("fuzz-sample", MFD_CLOEXEC);
		if (memfd < 0)
			abort();
	}
	if (ftruncate(memfd, 0) < 0 || (size && pwrite(memfd, data, size, 0) != (ssize_t)size))
		abort();
	return memfd;
}

static void same_info(const struct vmt_sample *a, const struct vmt_sample *b)
{
	FUZZ_CHECK(!strcmp(a->guest, b->guest) && a->aux_version == b->aux_version &&
		   a->aux_id == b->aux_id && a->created_ns == b->created_ns &&
		   a->page_size == b->page_size && a->ncpus == b->ncpus &&
		   a->ntriggers == b->ntriggers);
}

static void round_trip(const struct vmt_sample *s)
{
	struct vmt_sample *back = NULL, info, *raw = malloc(sizeof(*raw));
	struct vmt_sample_cpu cpus[VMT_MAX_CPUS];
	char why[256];
	int fd = memfd_put(NULL, 0);

	/* what was read holds every page decoded: written back with no frame */
	if (!raw)
		abort();
	*raw = *s;
	memcpy(cpus, s->cpus, s->ncpus * sizeof(*cpus));
	for (uint32_t i = 0; i < s->ncpus; i++)
		cpus[i].frame_pages = 0;
	raw->cpus = cpus;
	FUZZ_CHECK(sample_write(fd, raw, 0, 0) == 0);
	free(raw);
	FUZZ_CHECK(sample_read_info_fd(fd, &info, why, sizeof(why)) == 0);
	same_info(s, &info);
	{
		struct stat st;
		uint8_t *m;

		FUZZ_CHECK(fstat(fd, &st) == 0);
		m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		FUZZ_CHECK(m != MAP_FAILED);
		FUZZ_CHECK(sample_read_mem(m, (size_t)st.st_size, &back, why, sizeof(why)) == 0);
		munmap(m, (size_t)st.st_size);
	}
	same_info(s, back);
	FUZZ_CHECK(s->clock.method == back->clock.method && s->clock.npoints == back->clock.npoints &&
		   s->clock.nvcpus == back->clock.nvcpus);
	for (uint32_t i = 0; i < s->ncpus; i++) {
		const struct vmt_sample_cpu *a = &s->cpus[i], *b = &back->cpus[i];

		FUZZ_CHECK(a->npages == b->npages && a->first_ts == b->first_ts &&
			   a->last_ts == b->last_ts && a->events == b->events);
		FUZZ_CHECK(!a->npages ||
			   !memcmp(a->pages, b->pages, (size_t)a->npages * s->page_size));
	}
	sample_free(back);
}

/* Refused frames: their pages were the frames', and each line is one. */
static void refusals_ok(const struct vmt_sample *s)
{
	uint64_t refused = 0;
	char line[512];

	for (uint32_t i = 0; i < s->ncpus; i++) {
		const struct vmt_sample_cpu *c = &s->cpus[i];

		FUZZ_CHECK(c->pages_refused <= c->frame_pages && c->frames_refused >= (c->pages_refused > 0));
		refused += c->frames_refused;
	}
	FUZZ_CHECK(s->nrefusals <= VMT_SAMPLE_MAX_REFUSALS && s->nrefusals <= refused);
	for (uint32_t i = 0; i < s->nrefusals; i++) {
		FUZZ_CHECK(s->refusals[i].cpu < s->ncpus && s->refusals[i].run_frames >= 1);
		FUZZ_CHECK(sample_refusal_text(&s->refusals[i], line, sizeof(line)) > 0);
	}
}

/*
 * The other ways of reading (vmtracectl's): CHECK refuses what KEEP
 * refuses and counts the same pages; FRAMES (info) refuses no more than
 * KEEP and counts the same pages when both read; ONE_CPU reads the CPU's
 * pages KEEP read.
 */
static void modes_agree(const uint8_t *data, size_t size, int r, const struct vmt_sample *s)
{
	static const enum vmt_sample_pages modes[] = { VMT_SAMPLE_PAGES_CHECK, VMT_SAMPLE_PAGES_FRAMES,
						       VMT_SAMPLE_PAGES_ONE_CPU };
	char why[256];

	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		struct vmt_sample_read_opts o = { .pages = modes[m], .cpu = 0 };
		struct vmt_sample *t = NULL;
		int rt = sample_read_mem_with(data, size, &o, &t, why, sizeof(why));

		FUZZ_CHECK(rt == 0 || rt == -EBADMSG || rt == -ENOMEM);
		if (modes[m] == VMT_SAMPLE_PAGES_CHECK && r != -ENOMEM && rt != -ENOMEM)
			FUZZ_CHECK((rt == 0) == (r == 0));
		if (modes[m] == VMT_SAMPLE_PAGES_FRAMES && r == 0 && rt != -ENOMEM)
			FUZZ_CHECK(rt == 0);
		if (rt == 0 && r == 0) {
			for (uint32_t i = 0; i < s->ncpus; i++) {
				if (modes[m] == VMT_SAMPLE_PAGES_ONE_CPU && i)
					continue;
				FUZZ_CHECK(t->cpus[i].npages == s->cpus[i].npages);
				FUZZ_CHECK((t->cpus[i].pages != NULL) ==
					   (modes[m] == VMT_SAMPLE_PAGES_ONE_CPU && s->cpus[i].npages));
			}
			if (modes[m] == VMT_SAMPLE_PAGES_ONE_CPU && s->cpus[0].npages)
				FUZZ_CHECK(!memcmp(t->cpus[0].pages, s->cpus[0].pages,
						   (size_t)s->cpus[0].npages * s->page_size));
		}
		sample_free(t);
	}
}

static void one(const uint8_t *data, size_t size)
{
	struct vmt_sample *s = NULL, info;
	char why[256];
	int r, ri;

	r = sample_read_mem(data, size, &s, why, sizeof(why));
	FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -ENOMEM);
	if (r == 0) {
		uint64_t bytes = 0;

		FUZZ_CHECK(s && s->ncpus >= 1 && s->ncpus <= VMT_MAX_CPUS && s->cpus);
		/* what was decoded is within the budget of the input's size */
		for (uint32_t i = 0; i < s->ncpus; i++)
			bytes += (uint64_t)s->cpus[i].npages * s->page_size;
		FUZZ_CHECK(bytes <= vfile_budget(size, 0));
		FUZZ_CHECK(s->ntriggers <= VMT_SAMPLE_MAX_TRIGGERS);
		for (uint32_t i = 0; i < s->ncpus; i++)
			FUZZ_CHECK(s->cpus[i].cpu == i && (!s->cpus[i].npages || s->cpus[i].pages));
		refusals_ok(s);
	} else {
		FUZZ_CHECK(!s);
		FUZZ_CHECK(r != -EBADMSG || why[0]);
	}

	modes_agree(data, size, r, s);
	ri = sample_read_info_fd(memfd_put(data, size), &info, why, sizeof(why));
	FUZZ_CHECK(ri == 0 || ri == -EBADMSG || ri == -ENOMEM);
	/* INFO is a part of what sample_read checks */
	if (r == 0) {
		FUZZ_CHECK(ri == 0);
		same_info(s, &info);
		round_trip(s);
	}
	sample_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *copy = malloc(size ? size : 1);

	if (!copy)
		abort();
	memcpy(copy, data, size);
	one(copy, size);
	vfile_fixup(copy, size);
	if (memcmp(copy, data, size))
		one(copy, size);
	free(copy);
	return 0;
}
