/* SPDX-License-Identifier: MIT */
/*
 * The transcoder (lib/tcode.h), against a schema of real formats (the
 * corpus guest's sched_switch, sched_stat_runtime, hrtimer_start,
 * softirq_entry, sched_process_exec, sched_wakeup; print fmt lines left
 * out, the schema does not read them).
 *
 * Input: u8 flags, then bytes. flags bit 0 set: the bytes are an encoding,
 * decoded into 1 + (flags >> 1) % 4 pages: refused (-EBADMSG) or pages,
 * and pages that decode must encode and decode to themselves. Bit 0 clear:
 * the bytes, zero-filled to whole pages (1 to 4), are pages: they must
 * encode, and decode bit for bit. Pages are malloc'd of exactly their size.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "meta.h"
#include "tcode.h"

#define PS 4096u

static const struct {
	const char *name, *text;
} formats[] = {
	{ "events/sched/sched_switch/format",
	"name: sched_switch\n"
	"ID: 314\n"
	"format:\n"
	"\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
	"\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
	"\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
	"\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
	"\n"
	"\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:1;\n"
	"\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n"
	"\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n"
	"\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n"
	"\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:1;\n"
	"\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n"
	"\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n"
	"\n" },
	{ "events/sched/sched_stat_runtime/format",
	"name: sched_stat_runtime\n"
	"ID: 302\n"
	"format:\n"
	"\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
	"\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
	"\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
	"\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
	"\n"
	"\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:1;\n"
	"\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n"
	"\tfield:u64 runtime;\toffset:32;\tsize:8;\tsigned:0;\n"
	"\tfield:u64 vruntime;\toffset:40;\tsize:8;\tsigned:0;\n"
	"\n" },
	{ "events/timer/hrtimer_start/format",
	"name: hrtimer_start\n"
	"ID: 374\n"
	"format:\n"
	"\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
	"\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
	"\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
	"\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
	"\n"
	"\tfield:void * hrtimer;\toffset:8;\tsize:8;\tsigned:0;\n"
	"\tfield:void * function;\toffset:16;\tsize:8;\tsigned:0;\n"
	"\tfield:s64 expires;\toffset:24;\tsize:8;\tsigned:1;\n"
	"\tfield:s64 softexpires;\toffset:32;\tsize:8;\tsigned:1;\n"
	"\tfield:enum hrtimer_mode mode;\toffset:40;\tsize:4;\tsigned:0;\n"
	"\tfield:bool was_armed;\toffset:44;\tsize:1;\tsigned:0;\n"
	"\n" },
	{ "events/irq/softirq_entry/format",
	"name: softirq_entry\n"
	"ID: 145\n"
	"format:\n"
	"\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
	"\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
	"\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
	"\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
	"\n"
	"\tfield:unsigned int vec;\toffset:8;\tsize:4;\tsigned:0;\n"
	"\n" },
	{ "events/sched/sched_process_exec/format",
	"name: sched_process_exec\n"
	"ID: 307\n"
	"format:\n"
	"\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
	"\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
	"\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
	"\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
	"\n"
	"\tfield:__data_loc char[] filename;\toffset:8;\tsize:4;\tsigned:1;\n"
	"\tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;\n"
	"\tfield:pid_t old_pid;\toffset:16;\tsize:4;\tsigned:1;\n"
	"\n" },
	{ "events/sched/sched_wakeup/format",
	"name: sched_wakeup\n"
	"ID: 316\n"
	"format:\n"
	"\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
	"\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
	"\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
	"\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
	"\n"
	"\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:1;\n"
	"\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n"
	"\tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;\n"
	"\tfield:int target_cpu;\toffset:32;\tsize:4;\tsigned:1;\n"
	"\n" },
};

static const char header_page[] =
	"\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
	"\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n"
	"\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n"
	"\tfield: char data;\toffset:16;\tsize:4080;\tsigned:1;\n";

static struct vmt_tcode *tc;
static struct vmt_tcode_ctx *enc, *dec;

static void schema(void)
{
	struct vmt_buf b = { 0 };

	if (tc)
		return;
	if (meta_add(&b, "events/header_page", header_page, sizeof(header_page) - 1) < 0)
		abort();
	for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
		if (meta_add(&b, formats[i].name, formats[i].text,
			     (uint32_t)strlen(formats[i].text)) < 0)
			abort();
	FUZZ_CHECK(tcode_new(&tc, b.data, b.len, PS) == 0);
	FUZZ_CHECK(tcode_nevents(tc) == sizeof(formats) / sizeof(formats[0]));
	FUZZ_CHECK(tcode_ctx_new(&enc, tc) == 0 && tcode_ctx_new(&dec, tc) == 0);
	buf_free(&b);
}

/* pages -> encoding -> pages, the same */
static void round_trip(const uint8_t *pages, uint32_t n)
{
	struct vmt_buf out = { 0 };
	uint8_t *back = malloc((size_t)n * PS);

	if (!back)
		abort();
	FUZZ_CHECK(tcode_encode(enc, pages, n, &out, NULL) == 0);
	FUZZ_CHECK(tcode_decode(dec, out.data, out.len, back, n) == 0);
	FUZZ_CHECK(!memcmp(back, pages, (size_t)n * PS));
	buf_free(&out);
	free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t n;
	uint8_t *pages;
	int r;

	if (size < 1)
		return 0;
	schema();
	n = 1 + (data[0] >> 1) % 4;
	pages = calloc(n, PS);
	if (!pages)
		abort();
	if (data[0] & 1) {
		uint8_t *in = malloc(size - 1 ? size - 1 : 1);

		if (!in)
			abort();
		memcpy(in, data + 1, size - 1);
		r = tcode_decode(dec, in, size - 1, pages, n);
		FUZZ_CHECK(r == 0 || r == -EBADMSG);
		if (r == 0)
			round_trip(pages, n);
		free(in);
	} else {
		memcpy(pages, data + 1, VMT_MIN(size - 1, (size_t)n * PS));
		round_trip(pages, n);
	}
	free(pages);
	return 0;
}
