/* SPDX-License-Identifier: MIT */
/*
 * The schema the tcode targets (fuzz_tcode.c, fuzz_tframe.c) fuzz against:
 * six real formats of the corpus guest (sched_switch, sched_stat_runtime,
 * hrtimer_start, softirq_entry, sched_process_exec, sched_wakeup; print fmt
 * lines left out, the schema does not read them) and its header_page.
 */
#ifndef VMT_FUZZ_TCODE_SCHEMA_H
#define VMT_FUZZ_TCODE_SCHEMA_H

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

/* The schema, made once (the formats all taken). */
static struct vmt_tcode *fuzz_tcode_schema(void)
{
	static struct vmt_tcode *tc;
	struct vmt_buf b = { 0 };

	if (tc)
		return tc;
	if (meta_add(&b, "events/header_page", header_page, sizeof(header_page) - 1) < 0)
		abort();
	for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
		if (meta_add(&b, formats[i].name, formats[i].text,
			     (uint32_t)strlen(formats[i].text)) < 0)
			abort();
	FUZZ_CHECK(tcode_new(&tc, b.data, b.len, PS) == 0);
	FUZZ_CHECK(tcode_nevents(tc) == sizeof(formats) / sizeof(formats[0]));
	buf_free(&b);
	return tc;
}

#endif
