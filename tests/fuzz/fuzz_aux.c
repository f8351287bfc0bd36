/* SPDX-License-Identifier: MIT */
/*
 * The aux file (lib/aux.h): aux_read_mem() with a bundle limit of 1 MiB,
 * on the input and on a copy with its CRCs made right (vfile_fixup()).
 * An aux that reads must pass meta_validate(), hash to its id, and read
 * back the same after aux_write() into a memfd.
 */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "aux.h"
#include "fuzz.h"
#include "meta.h"

#define MAX_META (1u << 20)

static int memfd = -1;

static void round_trip(const struct vmt_aux *a)
{
	struct vmt_aux b;
	struct stat st;
	char why[256];
	uint8_t *m;

	if (memfd < 0) {
		memfd = memfd_create("fuzz-aux", MFD_CLOEXEC);
		if (memfd < 0)
			abort();
	}
	FUZZ_CHECK(ftruncate(memfd, 0) == 0);
	FUZZ_CHECK(aux_write(memfd, a) == 0);
	FUZZ_CHECK(fstat(memfd, &st) == 0 && st.st_size > 0);
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, memfd, 0);
	FUZZ_CHECK(m != MAP_FAILED);
	FUZZ_CHECK(aux_read_mem(m, (size_t)st.st_size, MAX_META, &b, why, sizeof(why)) == 0);
	munmap(m, (size_t)st.st_size);
	FUZZ_CHECK(b.id == a->id && b.version == a->version && b.ncpus == a->ncpus &&
		   b.page_size == a->page_size && !strcmp(b.guest, a->guest) &&
		   b.meta_len == a->meta_len && !memcmp(b.meta, a->meta, a->meta_len));
	aux_free(&b);
}

static void one(const uint8_t *data, size_t size)
{
	struct vmt_aux a;
	const char *mwhy;
	char why[256];
	int r;

	r = aux_read_mem(data, size, MAX_META, &a, why, sizeof(why));
	FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -ENOMEM);
	if (r < 0) {
		FUZZ_CHECK(!a.meta && !a.meta_len);
		FUZZ_CHECK(r != -EBADMSG || why[0]);
		return;
	}
	FUZZ_CHECK(a.meta && a.meta_len <= MAX_META);
	FUZZ_CHECK(meta_validate(a.meta, a.meta_len, &mwhy) == 0);
	FUZZ_CHECK(aux_compute_id(&a) == a.id);
	FUZZ_CHECK(memchr(a.guest, 0, sizeof(a.guest)) && memchr(a.release, 0, sizeof(a.release)) &&
		   memchr(a.clock, 0, sizeof(a.clock)) && memchr(a.boot_id, 0, sizeof(a.boot_id)) &&
		   memchr(a.agent, 0, sizeof(a.agent)));
	round_trip(&a);
	aux_free(&a);
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
