/* SPDX-License-Identifier: MIT */
/*
 * The guest metadata bundle (lib/meta.h), as META_DATA messages bring it
 * and aux files keep it: meta_validate(), then meta_next() over the whole
 * bundle and meta_find() of the names the host looks up. The input is the
 * bundle, in a buffer of exactly its size.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "fuzz.h"
#include "meta.h"

static const char *const names[] = {
	"events/header_page", "events/header_event", "trace_clock", "kallsyms",
	"events/sched/sched_switch/format", "printk_formats",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *b = malloc(size ? size : 1);
	struct vmt_meta_entry e, f;
	const char *why = NULL;
	size_t pos = 0, n = 0;
	int valid, r;

	if (!b)
		abort();
	memcpy(b, data, size);
	valid = meta_validate(b, size, &why);
	FUZZ_CHECK(valid == 0 || (valid == -EBADMSG && why));

	while ((r = meta_next(b, size, &pos, &e)) == 1) {
		FUZZ_CHECK(e.name_len >= 1 && e.name_len <= VMT_META_NAME_MAX);
		FUZZ_CHECK((const uint8_t *)e.name >= b && e.data + e.data_len <= b + size);
		FUZZ_CHECK(pos <= size);
		n++;
		if (valid == 0) {
			/* a valid bundle has no duplicates: find gives this entry */
			char name[VMT_META_NAME_MAX + 1];

			memcpy(name, e.name, e.name_len);
			name[e.name_len] = 0;
			FUZZ_CHECK(meta_find(b, size, name, &f) == 0);
			FUZZ_CHECK(f.data == e.data && f.data_len == e.data_len);
		}
	}
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	if (valid == 0)
		FUZZ_CHECK(r == 0 && n <= VMT_META_MAX_FILES);

	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		r = meta_find(b, size, names[i], &f);
		FUZZ_CHECK(r == 0 || r == -ENOENT || r == -EBADMSG);
		if (r == 0)
			FUZZ_CHECK(f.name_len == strlen(names[i]) && f.data + f.data_len <= b + size);
	}
	if (valid == 0)
		FUZZ_CHECK(meta_find(b, size, "events/header_page", &f) == 0);

	/* as task tables (TASKS from an agent, a sample's section) */
	why = NULL;
	r = meta_tasks_validate(b, size, &why);
	FUZZ_CHECK(r == 0 || (r == -EBADMSG && why));
	if (r == 0)
		FUZZ_CHECK(size <= VMT_TASKS_MAX);
	/* as saved_cmdlines text, cut in two: every line out is "PID NAME\n",
	 * pids ascending and each once */
	{
		const char *texts[2] = { (const char *)b, (const char *)b + size / 2 };
		size_t lens[2] = { size / 2, size - size / 2 };
		struct vmt_buf out = { 0 };
		uint64_t last = 0;
		bool first = true;

		FUZZ_CHECK(meta_cmdlines_merge(&out, texts, lens, 2) == 0);
		for (size_t p = 0; p < out.len;) {
			const uint8_t *nl = memchr(out.data + p, '\n', out.len - p);
			uint64_t pid = 0;
			size_t q = p;

			FUZZ_CHECK(nl != NULL);
			while (out.data[q] >= '0' && out.data[q] <= '9')
				pid = pid * 10 + (uint64_t)(out.data[q++] - '0');
			FUZZ_CHECK(q > p && out.data[q] == ' ' && (const uint8_t *)nl > out.data + q + 1);
			FUZZ_CHECK(pid <= UINT32_MAX && (first || pid > last));
			last = pid;
			first = false;
			p = (size_t)(nl - out.data) + 1;
		}
		buf_free(&out);
	}
	free(b);
	return 0;
}
