/* SPDX-License-Identifier: MIT */
/*
 * The report decoder (ctl/decode.c) on an event format and a page that a
 * guest wrote. Input: a 16-bit length L, L bytes of one event's format
 * text (events/fz/ev/format), then the rest as one 4096-byte page (zero
 * padded). Every event of the page is decoded; one decode_record() accepts
 * goes through libtraceevent's printing, which must stay inside the record
 * (ASan): a format or a record that points outside is refused first.
 */
#include <string.h>

#include <traceevent/event-parse.h>
#include <traceevent/trace-seq.h>

#include "decode.h"
#include "fuzz.h"
#include "meta.h"

#define PS 4096

/* libtraceevent 1.7 leaks a few bytes on some format texts it refuses
 * (inside tep_parse_event): its leak, not the decoder's; vmtracectl parses
 * formats once per run. Any other leak still fails the target. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
	return "leak:libtraceevent.so\n";
}

static const char header_page[] =
	"\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
	"\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n"
	"\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n"
	"\tfield: char data;\toffset:16;\tsize:4080;\tsigned:1;\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t page[PS];
	struct vmt_buf bundle = { 0 };
	struct vmt_page_layout l;
	struct vmt_decoder *d = NULL;
	struct vmt_decode_info info;
	struct vmt_decode_cursor c;
	struct vmt_raw_event ev;
	struct trace_seq seq;
	const char *why = NULL;
	size_t flen;

	if (size < 2)
		return 0;
	flen = get_le16(data);
	if (flen > size - 2)
		return 0;
	memset(page, 0, sizeof(page));
	memcpy(page, data + 2 + flen, VMT_MIN(size - 2 - flen, sizeof(page)));
	if (meta_add(&bundle, "events/header_page", header_page, sizeof(header_page) - 1) < 0 ||
	    meta_add(&bundle, "events/fz/ev/format", data + 2, flen) < 0)
		goto out;
	page_layout_default(&l, PS);
	if (decode_open(&d, bundle.data, bundle.len, &l, &info, &why) < 0)
		goto out;
	FUZZ_CHECK(decode_cursor_init(&c, d) == 0);
	trace_seq_init(&seq);
	if (decode_page_load(&c, page, &why) == 0) {
		for (int n = 0; n < PS && decode_page_next(&c, &ev) == 1; n++) {
			enum vmt_decode_check check;
			struct tep_record rec;
			struct tep_event *e = decode_record(d, &ev, 0, &rec, &check);

			FUZZ_CHECK(ev.data >= page && ev.data + ev.size <= page + PS);
			if (!e || check != DECODE_OK)
				continue;
			trace_seq_reset(&seq);
			tep_print_event(decode_tep(d), &seq, &rec, "%s: %s", TEP_PRINT_NAME,
					TEP_PRINT_INFO);
		}
	}
	trace_seq_destroy(&seq);
	decode_cursor_free(&c);
out:
	if (d)
		decode_close(d);
	buf_free(&bundle);
	return 0;
}
