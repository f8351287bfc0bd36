/* SPDX-License-Identifier: MIT */
/*
 * vmtracectl info SAMPLE...: what a sample holds, without the daemon: the
 * guest and its aux file, every trigger, and per CPU the window and every
 * counter, so that what was lost is visible before anything is merged.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "aux.h"
#include "commands.h"
#include "meta.h"
#include "sample.h"
#include "util.h"

static void when(char *out, size_t n, uint64_t realtime_ns)
{
	time_t s = (time_t)(realtime_ns / 1000000000);
	struct tm tm;

	gmtime_r(&s, &tm);
	strftime(out, n, "%Y-%m-%d %H:%M:%S", &tm);
	snprintf(out + strlen(out), n - strlen(out), ".%06" PRIu64 " UTC",
		 (realtime_ns % 1000000000) / 1000);
}

/* The aux file beside the sample: present, and the one it needs? */
static void show_aux(const char *path, const struct vmt_sample *s)
{
	char *dup = strdup(path), name[64], apath[4200], why[256];
	struct vmt_aux a = { 0 };
	int r;

	if (!dup)
		return;
	aux_file_name(name, sizeof(name), s->aux_version);
	snprintf(apath, sizeof(apath), "%s/%s", dirname(dup), name);
	free(dup);
	r = aux_read(apath, 1ull << 30, &a, why, sizeof(why));
	if (r < 0)
		printf("aux:      %s: %s\n", apath, r == -EBADMSG ? why : strerror(-r));
	else if (a.id != s->aux_id)
		printf("aux:      %s is another aux (id %016" PRIx64 ", the sample needs %016" PRIx64 ")\n",
		       apath, a.id, s->aux_id);
	else
		printf("aux:      %s: kernel %s, %u CPUs, clock %s, %s, %zu bytes of metadata\n", apath,
		       a.release, a.ncpus, a.clock, a.agent, a.meta_len);
	aux_free(&a);
}

/* Lines of a task table, or -1 if the sample has none. */
static long table_lines(const struct vmt_sample *s, const char *name)
{
	struct vmt_meta_entry e;
	long n = 0;

	if (meta_find(s->tasks, s->tasks_len, name, &e) < 0)
		return -1;
	for (uint32_t i = 0; i < e.data_len; i++)
		n += e.data[i] == '\n';
	return n;
}

/* The task tables taken at the dump, which name the tasks that ran since START. */
static void show_tasks(const struct vmt_sample *s)
{
	long names = table_lines(s, "saved_cmdlines"), tgids = table_lines(s, "saved_tgids");

	if (!s->tasks_len) {
		printf("tasks:    none taken at the dump (the aux file's, from the session's start, name "
		       "the tasks)\n");
		return;
	}
	printf("tasks:    %ld task names", names < 0 ? 0 : names);
	if (tgids >= 0)
		printf(", %ld thread groups", tgids);
	printf(" taken at the dump (%u bytes)\n", s->tasks_len);
}

/* The clock data: method, clocks, vCPU threads and the quality of the points. */
static void show_clock(const struct vmt_sample *s)
{
	const struct vmt_clock_info *ci = &s->clock;
	uint64_t best = UINT64_MAX, worst = 0;

	if (!s->have_clock) {
		printf("clock:    no clock data (a sample from before clock sync)\n");
		return;
	}
	printf("clock:    guest %s, host %s, sync %s", ci->guest_clock, ci->host_clock,
	       sync_method_name(ci->method));
	if (ci->why[0])
		printf(" (%s)", ci->why);
	printf("\n");
	if (ci->qemu_pid) {
		printf("qemu:     pid %u, vCPU threads", ci->qemu_pid);
		for (uint32_t i = 0; i < ci->nvcpus; i++)
			printf(" %u", ci->vcpu_tid[i]);
		printf("%s\n", ci->nvcpus ? "" : " unknown");
	}
	if (!ci->npoints)
		return;
	for (uint32_t i = 0; i < ci->npoints; i++) {
		best = VMT_MIN(best, ci->points[i].rtt);
		worst = VMT_MAX(worst, ci->points[i].rtt);
	}
	printf("sync:     %u points, offset %+.6f s at the first, %+.6f s at the last; "
	       "error bound (round trip / 2) %.1f to %.1f us\n",
	       ci->npoints, (double)ci->points[0].offset / 1e9,
	       (double)ci->points[ci->npoints - 1].offset / 1e9, (double)best / 2e3, (double)worst / 2e3);
}

/* A CPU's frames: how many, how well they compress, which the reader refused. */
static void show_frames(const struct vmt_sample *s, const struct vmt_sample_cpu *sc)
{
	uint64_t read_pages = (uint64_t)sc->frame_pages - sc->pages_refused;
	uint32_t ncodecs = 0;
	char line[512];

	if (!sc->frame_pages && !sc->frames_read && !sc->frames_refused)
		return;
	printf("          frames: %u read, %" PRIu64 " pages in %" PRIu64 " bytes", sc->frames_read,
	       read_pages, sc->frame_bytes);
	if (sc->frame_bytes)
		printf(" (ratio %.2f)", (double)read_pages * s->page_size / (double)sc->frame_bytes);
	for (uint32_t codec = 0; codec < 32; codec++)
		if (sc->frame_codecs & (1u << codec))
			printf("%s%s", ncodecs++ ? "+" : ", ", frame_codec_name(codec));
	if (sc->frames_refused)
		printf("; %u refused, %u pages left out", sc->frames_refused, sc->pages_refused);
	printf("\n");
	for (uint32_t i = 0; i < s->nrefusals; i++)
		if (s->refusals[i].cpu == sc->cpu) {
			sample_refusal_text(&s->refusals[i], line, sizeof(line));
			printf("          refused: %s\n", line);
		}
}

/* The ring's compression counters, from samples of format version 2. */
static void show_compression(const struct vmt_sample_counters *k)
{
	if (!k->frames_made && !k->pages_stored_raw && !k->frame_bytes_in && !k->frame_bytes_out &&
	    !k->frames_overwritten)
		return;
	printf("          compression: %" PRIu64 " frames made, %" PRIu64 " overwritten, %" PRIu64
	       " pages stored raw (the compressor behind), %" PRIu64 " bytes into %" PRIu64, k->frames_made,
	       k->frames_overwritten, k->pages_stored_raw, k->frame_bytes_in, k->frame_bytes_out);
	if (k->frame_bytes_out)
		printf(" (ratio %.2f)", (double)k->frame_bytes_in / (double)k->frame_bytes_out);
	printf("\n");
}

static void show(const char *path, const struct vmt_sample *s)
{
	char t[64];

	when(t, sizeof(t), s->created_ns);
	printf("%s\n", path);
	printf("guest:    %s on host %s, %u CPUs, pages of %u bytes, dump %" PRIu64 ", frozen %s\n",
	       s->guest, s->host, s->ncpus, s->page_size, s->dump_id, t);
	printf("needs:    aux version %u (id %016" PRIx64 ")\n", s->aux_version, s->aux_id);
	show_aux(path, s);
	show_clock(s);
	show_tasks(s);
	for (uint32_t i = 0; i < s->ntriggers; i++) {
		const struct vmt_trigger *tr = &s->triggers[i];

		when(t, sizeof(t), tr->time_ns);
		printf("trigger:  %s at %s, pid %u: %s", trigger_kind_name(tr->kind), t, tr->pid,
		       tr->reason);
		if (tr->threshold)
			printf(" (value %" PRIu64 ", threshold %" PRIu64 ")", tr->value, tr->threshold);
		printf("\n");
	}
	if (s->triggers_omitted)
		printf("trigger:  and %" PRIu64 " more, not listed\n", s->triggers_omitted);
	if (s->recovered_lifetimes) {
		when(t, sizeof(t), s->window_since_ns);
		printf("recovered: the daemon adopted a crashed predecessor's window before this "
		       "sample; held since %s, across %u daemon lifetimes\n", t, s->recovered_lifetimes);
	}
	printf("control:  %" PRIu64 " bytes of garbage in %" PRIu64 " messages skipped, %" PRIu64
	       " flush timeouts\n", s->ctl_rejected_bytes, s->ctl_rejected_msgs, s->flush_timeouts);
	for (uint32_t c = 0; c < s->ncpus; c++) {
		const struct vmt_sample_cpu *sc = &s->cpus[c];
		const struct vmt_sample_counters *k = &sc->counters;

		printf("cpu%-3u    %u pages, %" PRIu64 " events", sc->cpu, sc->npages, sc->events);
		if (sc->npages)
			printf(", %" PRIu64 ".%06" PRIu64 " to %" PRIu64 ".%06" PRIu64 " (%.3f s)",
			       sc->first_ts / 1000000000, sc->first_ts % 1000000000 / 1000,
			       sc->last_ts / 1000000000, sc->last_ts % 1000000000 / 1000,
			       (double)(sc->last_ts - sc->first_ts) / 1e9);
		printf("\n          ring: %" PRIu64 " pages in, %" PRIu64 " overwritten, %" PRIu64
		       " flagged lost by the guest (%" PRIu64 " events), %" PRIu64 " rejected (%" PRIu64
		       " bytes), %" PRIu64 " going back in time\n",
		       k->pages_in, k->pages_overwritten, k->pages_guest_lost, k->events_guest_lost,
		       k->pages_rejected, k->bytes_rejected, k->ts_backwards);
		show_compression(k);
		show_frames(s, sc);
		if (sc->have_guest_stats)
			printf("          guest: %" PRIu64 " events read, %" PRIu64 " overrun, %" PRIu64
			       " dropped, %" PRIu64 " bytes sent\n",
			       sc->guest.read, sc->guest.overrun, sc->guest.dropped, sc->guest.bytes_sent);
	}
}

/*
 * A sample is read without its pages: what info prints is in its small
 * sections, and its frames are decoded one at a time only to count what
 * the reader takes and refuses (VMT_SAMPLE_PAGES_FRAMES).
 */
int cmd_info(const struct vmt_ctl_opts *o, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "max-memory", required_argument, NULL, 'M' },
		{ 0 },
	};
	struct vmt_sample_read_opts ro = { .pages = VMT_SAMPLE_PAGES_FRAMES };
	int bad = 0, opt;

	(void)o;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (opt != 'M' || ctl_max_memory(optarg, &ro.max_memory) < 0) {
			ctl_command_usage(stderr, "info");
			return 2;
		}
	}
	if (optind >= argc) {
		ctl_command_usage(stderr, "info");
		return 2;
	}
	for (int i = optind; i < argc; i++) {
		struct vmt_sample *s;
		char why[512];
		int r = sample_read_with(argv[i], &ro, &s, why, sizeof(why));

		if (r < 0) {
			fprintf(stderr, "vmtracectl: %s: %s\n", argv[i], r == -EBADMSG ? why : strerror(-r));
			bad = 1;
			continue;
		}
		if (i > optind)
			printf("\n");
		show(argv[i], s);
		sample_free(s);
	}
	return bad;
}
