/* SPDX-License-Identifier: MIT */
/*
 * The ftrace page (lib/page.h): page_layout_parse() on guest header_page
 * text, then page_scan(), page_walk() and page_cut_before() on a page.
 *
 * Input: u8 flags, u16 text length, the header_page text, then the page
 * bytes. The page is a malloc'd buffer of exactly the page size, so that
 * AddressSanitizer sees a read past its end; it is filled with the page
 * bytes, then zeros. Page sizes 4096 and 256 (the smallest a HELLO allows).
 * A text that does not parse leaves the default 64-bit layout. flags bit 0
 * picks the cut time from a u64 after the text instead of from an event.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "page.h"

struct walk_state {
	const struct vmt_page_layout *l;
	uint32_t events, want;
	uint64_t ts_want;
};

static int walk_cb(uint64_t ts, uint32_t offset, uint32_t size, void *data)
{
	struct walk_state *w = data;

	FUZZ_CHECK(offset >= w->l->data_offset && size >= 4);
	FUZZ_CHECK((uint64_t)offset + size <= w->l->page_size);
	if (w->events++ == w->want)
		w->ts_want = ts;
	return 0;
}

static void one_page(const uint8_t *in, size_t in_len, const char *text, size_t text_len,
		     uint32_t page_size, uint8_t flags, uint64_t t_raw)
{
	struct vmt_page_layout l;
	struct vmt_page_info info, after;
	struct walk_state w = { .l = &l, .want = flags >> 1 };
	uint8_t *page = malloc(page_size), *cut = malloc(page_size);
	uint64_t t_start;
	int r;

	if (!page || !cut)
		abort();
	if (page_layout_parse(&l, text, text_len, page_size) < 0)
		page_layout_default(&l, page_size);
	FUZZ_CHECK(l.page_size == page_size && l.data_offset < page_size);
	memset(page, 0, page_size);
	memcpy(page, in, VMT_MIN(in_len, page_size));

	r = page_scan(&l, page, &info);
	FUZZ_CHECK(r == 0 || r == -EBADMSG);
	FUZZ_CHECK(page_walk(&l, page, walk_cb, &w) == r);
	if (r == 0)
		FUZZ_CHECK(w.events == info.events);

	/* cut at an event's time (or at a time from the input) */
	t_start = (flags & 1) ? t_raw : w.events > w.want ? w.ts_want : info.last_ts + 1;
	memcpy(cut, page, page_size);
	r = page_cut_before(&l, cut, t_start);
	if (r > 0) {
		FUZZ_CHECK(page_scan(&l, cut, &after) == 0);
		FUZZ_CHECK(after.events + (uint32_t)r == info.events);
		if (after.events)
			FUZZ_CHECK(after.first_ts >= t_start);
	} else if (r == 0) {
		FUZZ_CHECK(!memcmp(cut, page, page_size));
	} else {
		FUZZ_CHECK(r == -EBADMSG);
	}
	free(page);
	free(cut);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t flags;
	size_t tl;
	uint64_t t_raw = 0;
	char *text;

	if (size < 3)
		return 0;
	flags = data[0];
	tl = get_le16(data + 1);
	data += 3;
	size -= 3;
	if (tl > size)
		tl = size;
	/* a copy of exactly tl bytes: the parser must not need a NUL */
	text = malloc(tl ? tl : 1);
	if (!text)
		abort();
	memcpy(text, data, tl);
	data += tl;
	size -= tl;
	if ((flags & 1) && size >= 8) {
		t_raw = get_le64(data);
		data += 8;
		size -= 8;
	}
	one_page(data, size, text, tl, 4096, flags, t_raw);
	one_page(data, size, text, tl, 256, flags, t_raw);
	free(text);
	return 0;
}
