/* SPDX-License-Identifier: MIT */
/*
 * vmtracectl report: the events of samples as text, like `trace-cmd report`
 * but without trace-cmd: sampleset.c reads the samples (each page once),
 * decode.c turns pages into events with the guest's own formats, and here
 * every group's CPUs are merged into one time line, filtered and printed
 * (or only counted, --stats).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <traceevent/trace-seq.h>

#include "commands.h"
#include "decode.h"
#include "sampleset.h"
#include "util.h"

#define REPORT_IDS 65536
#define REPORT_MAX_PATTERNS 64

struct report_opts {
	bool stats, raw_time, host_time;
	bool cpus[VMT_MAX_CPUS];
	bool cpu_filter;
	const char *events[REPORT_MAX_PATTERNS];
	unsigned nevents;
	const char *guests[REPORT_MAX_PATTERNS];
	unsigned nguests;
	uint64_t since, until;
};

struct rgroup {
	const struct vmt_sset_group *g;
	struct vmt_decoder *dec;
	char label[VMT_NAME_MAX + 16];
	bool convert;		/* to the host's time line */
	uint64_t *counts;	/* REPORT_IDS, by event id */
	uint8_t *match;		/* REPORT_IDS: 0 not yet known, 1 shown, 2 filtered out */
	uint64_t unknown, bad_pages;	/* bad_pages: summed from the streams at the end */
};

struct report {
	struct report_opts o;
	struct rgroup *groups;
	uint32_t ngroups;
	struct vmt_decode_stream *streams;
	uint32_t nstreams;
	struct vmt_decode_merge line;	/* the merged time line */
	int label_width;	/* 0: one group, no guest column */
	struct trace_seq seq;
	bool out_failed;
	int out_errno;
	uint64_t invalid;	/* events not decoded: their fields lie outside them */
};

/* ---- options ---------------------------------------------------------------- */

/* ---- filters ---------------------------------------------------------------- */

static bool event_shown(struct report *r, struct rgroup *rg, int id, const struct tep_event *e)
{
	if (!r->o.nevents)
		return true;
	if (!e)
		return false;
	if (rg->match[id])
		return rg->match[id] == 1;
	rg->match[id] = decode_event_matches(e, r->o.events, r->o.nevents) ? 1 : 2;
	return rg->match[id] == 1;
}

static bool guest_shown(const struct report_opts *o, const char *guest)
{
	if (!o->nguests)
		return true;
	for (unsigned i = 0; i < o->nguests; i++)
		if (!strcmp(o->guests[i], guest))
			return true;
	return false;
}

static uint64_t to_host(void *clock, uint32_t cpu, uint64_t ts)
{
	return clocksync_to_host(clock, cpu, ts);
}

/* ---- output ---------------------------------------------------------------- */

static void out_line(struct report *r)
{
	trace_seq_terminate(&r->seq);
	if (r->seq.state != TRACE_SEQ__GOOD) {
		r->out_failed = true;
		r->out_errno = ENOMEM;
		return;
	}
	/* a trace_marker text ends in its own newline, as trace-cmd shows it */
	while (r->seq.len && r->seq.buffer[r->seq.len - 1] == '\n')
		r->seq.buffer[--r->seq.len] = 0;
	/* guest strings: one line per event, and no escapes reach a terminal */
	for (unsigned i = 0; i < r->seq.len; i++)
		if ((unsigned char)r->seq.buffer[i] < 0x20 || r->seq.buffer[i] == 0x7f)
			r->seq.buffer[i] = r->seq.buffer[i] == '\t' ? '\t' : '?';
	if (trace_seq_putc(&r->seq, '\n') != 1) {
		r->out_failed = true;
		r->out_errno = ENOMEM;
		return;
	}
	if (fwrite(r->seq.buffer, 1, r->seq.len, stdout) != r->seq.len) {
		r->out_failed = true;
		r->out_errno = errno;
	}
}

static void print_event(struct report *r, struct vmt_decode_stream *s)
{
	struct rgroup *rg = s->user;
	struct tep_handle *tep = decode_tep(rg->dec);
	struct tep_record rec;
	enum vmt_decode_check check;
	struct tep_event *e = decode_record(rg->dec, &s->ev, (int)s->cpu, &rec, &check);
	uint64_t sec = s->ts / 1000000000ull, usec = (s->ts % 1000000000ull + 500) / 1000;

	if (usec >= 1000000) {
		sec++;
		usec -= 1000000;
	}
	trace_seq_reset(&r->seq);
	if (r->label_width)
		trace_seq_printf(&r->seq, "%-*s ", r->label_width, rg->label);
	if (s->missed) {
		if (s->missed > 0)
			trace_seq_printf(&r->seq, "CPU:%u [%lld EVENTS DROPPED]", s->cpu, s->missed);
		else
			trace_seq_printf(&r->seq, "CPU:%u [EVENTS DROPPED]", s->cpu);
		s->missed = 0;
		out_line(r);
		trace_seq_reset(&r->seq);
		if (r->label_width)
			trace_seq_printf(&r->seq, "%-*s ", r->label_width, rg->label);
	}
	if (!e) {
		int pid = s->ev.size >= 8 ? (int)get_le32(s->ev.data + 4) : -1;
		trace_seq_printf(&r->seq, "%16s-%-5d [%03u] %5" PRIu64 ".%06" PRIu64 ": [UNKNOWN EVENT id %d]",
				 tep_data_comm_from_pid(tep, pid), pid, s->cpu, sec, usec,
				 decode_event_id(&s->ev));
		out_line(r);
		return;
	}
	tep_print_event(tep, &r->seq, &rec, "%16s-%-5d [%03d] ", TEP_PRINT_COMM, TEP_PRINT_PID,
			TEP_PRINT_CPU);
	trace_seq_printf(&r->seq, "%5" PRIu64 ".%06" PRIu64 ": ", sec, usec);
	if (check != DECODE_OK)
		r->invalid++;
	if (check == DECODE_SHORT)
		trace_seq_printf(&r->seq, "%s: [event too short: %u bytes]", e->name, s->ev.size);
	else if (check == DECODE_BAD_FORMAT)
		trace_seq_printf(&r->seq, "%s: [invalid format: a field lies outside the record]",
				 e->name);
	else if (check == DECODE_BAD_DYNAMIC)
		trace_seq_printf(&r->seq, "%s: [invalid event: a dynamic field points outside it]",
				 e->name);
	else
		tep_print_event(tep, &r->seq, &rec, "%s: %s", TEP_PRINT_NAME, TEP_PRINT_INFO);
	out_line(r);
}

struct stat_row {
	char name[128];
	uint64_t n;
};

static int stat_cmp(const void *a, const void *b)
{
	const struct stat_row *x = a, *y = b;

	if (x->n != y->n)
		return x->n > y->n ? -1 : 1;
	return -strcmp(x->name, y->name);	/* as `sort -rn` on `uniq -c` */
}

/* Counts of groups [from, to) by event name, as "%7N NAME:" lines. */
static int print_stats(struct report *r, uint32_t from, uint32_t to)
{
	struct stat_row *rows = NULL;
	size_t n = 0, cap = 0;

	for (uint32_t gi = from; gi < to; gi++) {
		struct rgroup *rg = &r->groups[gi];
		for (int id = 0; id < REPORT_IDS; id++) {
			struct tep_event *e;
			struct stat_row row = { .n = rg->counts[id] };
			size_t i;

			if (!row.n)
				continue;
			e = decode_find(rg->dec, id);
			if (e && e->name)
				snprintf(row.name, sizeof(row.name), "%s", e->name);
			else
				snprintf(row.name, sizeof(row.name), "[UNKNOWN EVENT id %d]", id);
			for (i = 0; i < n && strcmp(rows[i].name, row.name); i++)
				;
			if (i < n) {
				rows[i].n += row.n;
				continue;
			}
			if (n == cap) {
				struct stat_row *nr = realloc(rows, (cap = cap ? 2 * cap : 64) * sizeof(*rows));
				if (!nr) {
					free(rows);
					return -ENOMEM;
				}
				rows = nr;
			}
			rows[n++] = row;
		}
	}
	qsort(rows, n, sizeof(*rows), stat_cmp);
	for (size_t i = 0; i < n; i++)
		printf("%7" PRIu64 " %s:\n", rows[i].n, rows[i].name);
	free(rows);
	return 0;
}

/* ---- set-up ---------------------------------------------------------------- */

static int report_groups(struct report *r, struct vmt_sset *set)
{
	bool any_clock = false;
	uint32_t nstreams = 0;

	r->groups = calloc(set->ngroups ? set->ngroups : 1, sizeof(*r->groups));
	if (!r->groups)
		return -ENOMEM;
	for (uint32_t i = 0; i < set->ngroups; i++) {
		const struct vmt_sset_group *g = &set->groups[i];
		struct rgroup *rg = &r->groups[r->ngroups];
		struct vmt_decode_info info;
		const char *why = "";
		int ret;

		if (!guest_shown(&r->o, g->guest))
			continue;
		rg->g = g;
		if (g->boot_split)
			snprintf(rg->label, sizeof(rg->label), "%s#aux%u", g->guest, g->aux_version);
		else
			snprintf(rg->label, sizeof(rg->label), "%s", g->guest);
		ret = decode_open(&rg->dec, g->meta, g->meta_len, &g->layout, &info, &why);
		if (ret == -ENOMEM)
			return ret;
		if (ret < 0) {
			fprintf(stderr, "vmtracectl: %s: cannot decode with its aux: %s; left out\n",
				rg->label, why);
			continue;
		}
		if (info.formats_failed)
			fprintf(stderr, "vmtracectl: %s: %u of %u event formats do not parse\n", rg->label,
				info.formats_failed, info.formats);
		if (info.formats_crashed)
			fprintf(stderr, "vmtracectl: %s: %u metadata entries crash libtraceevent's parser: "
				"left out\n", rg->label, info.formats_crashed);
		rg->counts = calloc(REPORT_IDS, sizeof(*rg->counts));
		rg->match = calloc(REPORT_IDS, 1);
		if (!rg->counts || !rg->match) {
			r->ngroups++;
			return -ENOMEM;
		}
		any_clock |= g->clock.npoints > 0 && strcmp(g->guest, "host");
		nstreams += g->ncpus;
		r->ngroups++;
	}
	if (!r->o.raw_time && (r->o.host_time || any_clock))
		for (uint32_t i = 0; i < r->ngroups; i++) {
			struct rgroup *rg = &r->groups[i];
			if (!strcmp(rg->g->guest, "host"))
				continue;
			rg->convert = rg->g->clock.npoints > 0;
			if (!rg->convert)
				fprintf(stderr, "vmtracectl: %s: no clock data (%s); its own clock is printed\n",
					rg->label, rg->g->clock.why[0] ? rg->g->clock.why : "none in the samples");
		}
	if (r->ngroups > 1)
		for (uint32_t i = 0; i < r->ngroups; i++)
			r->label_width = VMT_MAX(r->label_width, (int)strlen(r->groups[i].label));
	r->streams = calloc(nstreams ? nstreams : 1, sizeof(*r->streams));
	if (!r->streams)
		return -ENOMEM;
	for (uint32_t i = 0; i < r->ngroups; i++) {
		struct rgroup *rg = &r->groups[i];
		/* the set's own group: report_groups() took it from set, const only to the rest */
		struct vmt_sset_group *g = (struct vmt_sset_group *)rg->g;

		for (uint32_t c = 0; c < rg->g->ncpus; c++) {
			struct vmt_decode_stream *s = &r->streams[r->nstreams];
			int ret;

			if (r->o.cpu_filter && (c >= VMT_MAX_CPUS || !r->o.cpus[c]))
				continue;
			/* the time line interleaves every stream: each holds its pages
			 * (each once, however many samples held them) to the end */
			ret = sset_cpu_load(set, g, c);
			if (ret < 0)
				return ret;
			if (!g->cpus[c].npages)
				continue;
			if (decode_cursor_init(&s->cur, rg->dec) < 0)
				return -ENOMEM;
			s->pages = rg->g->cpus[c].pages;
			s->npages = rg->g->cpus[c].npages;
			s->label = rg->label;
			s->cpu = c;
			s->order = r->nstreams++;	/* ties: group, then CPU */
			s->to_line = rg->convert ? to_host : NULL;
			s->arg = (void *)&rg->g->clock;
			s->user = rg;
		}
	}
	return decode_merge_init(&r->line, r->streams, r->nstreams);
}

static void report_free(struct report *r)
{
	for (uint32_t i = 0; i < r->nstreams; i++)
		decode_cursor_free(&r->streams[i].cur);
	for (uint32_t i = 0; i < r->ngroups; i++) {
		decode_close(r->groups[i].dec);
		free(r->groups[i].counts);
		free(r->groups[i].match);
	}
	free(r->groups);
	free(r->streams);
	decode_merge_free(&r->line);
	trace_seq_destroy(&r->seq);
}

static void report_run(struct report *r)
{
	struct vmt_decode_stream *s;

	while ((s = decode_merge_top(&r->line)) && !r->out_failed) {
		struct rgroup *rg = s->user;

		if (s->ts >= r->o.since && s->ts <= r->o.until) {
			int id = decode_event_id(&s->ev);
			struct tep_event *e = decode_find(rg->dec, id);

			if (event_shown(r, rg, id, e)) {
				if (id >= 0)
					rg->counts[id]++;
				if (!e)
					rg->unknown++;
				if (!r->o.stats)
					print_event(r, s);
			}
		}
		decode_merge_pop(&r->line);
	}
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: vmtracectl report [--aux FILE] [--cpu LIST] [--event PATTERN]... [--guest NAME]...\n"
		"                         [--since SEC] [--until SEC] [--host-time|--raw-time] [--stats]\n"
		"                         [--max-memory SIZE] SAMPLE...\n");
}

/* Options into *o: -1 to go on, else the status to exit with (0 after --help). */
static int report_options(int argc, char **argv, struct report_opts *o, const char **aux_path,
			  uint64_t *max_memory)
{
	static const struct option longopts[] = {
		{ "aux", required_argument, NULL, 'a' },
		{ "cpu", required_argument, NULL, 'C' },
		{ "event", required_argument, NULL, 'e' },
		{ "guest", required_argument, NULL, 'g' },
		{ "since", required_argument, NULL, 'S' },
		{ "until", required_argument, NULL, 'U' },
		{ "host-time", no_argument, NULL, 'H' },
		{ "raw-time", no_argument, NULL, 'R' },
		{ "stats", no_argument, NULL, 's' },
		{ "max-memory", required_argument, NULL, 'M' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int opt;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "a:C:e:g:sh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'a': *aux_path = optarg; break;
		case 'C':
			if (decode_parse_cpus(optarg, o->cpus, VMT_MAX_CPUS) < 0) {
				fprintf(stderr, "vmtracectl: --cpu %s: not a CPU list like 0,2-3\n", optarg);
				return 2;
			}
			o->cpu_filter = true;
			break;
		case 'e':
		case 'g':
			if ((opt == 'e' ? o->nevents : o->nguests) >= REPORT_MAX_PATTERNS) {
				fprintf(stderr, "vmtracectl: at most %d --event and --guest each\n", REPORT_MAX_PATTERNS);
				return 2;
			}
			if (opt == 'e')
				o->events[o->nevents++] = optarg;
			else
				o->guests[o->nguests++] = optarg;
			break;
		case 'S':
		case 'U':
			if (decode_parse_seconds(optarg, opt == 'S' ? &o->since : &o->until) < 0) {
				fprintf(stderr, "vmtracectl: --%s %s: not seconds like 1234.5\n",
					opt == 'S' ? "since" : "until", optarg);
				return 2;
			}
			break;
		case 'H': o->host_time = true; o->raw_time = false; break;
		case 'R': o->raw_time = true; o->host_time = false; break;
		case 's': o->stats = true; break;
		case 'M':
			if (ctl_max_memory(optarg, max_memory) < 0)
				return 2;
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	return -1;
}

/* A --guest that names no guest of the samples is worth a word, not a failure. */
static void warn_unknown_guests(const struct report_opts *o, const struct vmt_sset *set)
{
	for (unsigned i = 0; i < o->nguests; i++) {
		bool found = false;
		for (uint32_t k = 0; k < set->ngroups && !found; k++)
			found = !strcmp(set->groups[k].guest, o->guests[i]);
		if (!found)
			fprintf(stderr, "vmtracectl: --guest %s: no such guest in the samples\n", o->guests[i]);
	}
}

/* --stats: one table, or one per group and one of them all. */
static int report_stats(struct report *r)
{
	int ret = 0;

	if (r->ngroups == 1)
		return print_stats(r, 0, 1);
	for (uint32_t i = 0; i < r->ngroups && ret >= 0; i++) {
		printf("# %s\n", r->groups[i].label);
		ret = print_stats(r, i, i + 1);
	}
	if (ret >= 0) {
		printf("# all\n");
		ret = print_stats(r, 0, r->ngroups);
	}
	return ret;
}

/* Whether writing the report failed, the last buffered bytes included. */
static bool report_output_failed(struct report *r)
{
	if (!r->out_failed && (fflush(stdout) != 0 || ferror(stdout))) {
		r->out_failed = true;
		r->out_errno = errno;
	}
	return r->out_failed;
}

/* What was left out of the report, on stderr. */
static void warn_skipped(struct report *r)
{
	for (uint32_t i = 0; i < r->nstreams; i++)
		((struct rgroup *)r->streams[i].user)->bad_pages += r->streams[i].bad_pages;
	for (uint32_t i = 0; i < r->ngroups; i++) {
		struct rgroup *rg = &r->groups[i];
		if (rg->unknown || rg->bad_pages)
			fprintf(stderr, "vmtracectl: %s: %" PRIu64 " event(s) of unknown format, %" PRIu64
				" corrupt page(s) skipped\n", rg->label, rg->unknown, rg->bad_pages);
	}
	if (r->invalid)
		fprintf(stderr, "vmtracectl: %" PRIu64 " event(s) not decoded: a field of theirs lies "
			"outside the record (shown as invalid)\n", r->invalid);
}

int cmd_report(const struct vmt_ctl_opts *opts, int argc, char **argv)
{
	struct report r = { .o.until = UINT64_MAX };
	struct vmt_sset set = { 0 };
	const char *aux_path = NULL;
	int ret, rc;

	(void)opts;
	rc = report_options(argc, argv, &r.o, &aux_path, &set.max_memory);
	if (rc >= 0)
		return rc;
	rc = 0;
	ret = sset_load(&set, (const char *const *)argv + optind, (uint32_t)(argc - optind), aux_path);
	if (ret < 0) {
		fprintf(stderr, "vmtracectl: reading samples: %s\n", strerror(-ret));
		sset_free(&set);
		return 1;
	}
	warn_unknown_guests(&r.o, &set);
	trace_seq_init(&r.seq);
	ret = report_groups(&r, &set);
	if (ret < 0) {
		fprintf(stderr, "vmtracectl: %s\n", strerror(-ret));
		rc = 1;
		goto out;
	}
	if (!r.ngroups) {
		fprintf(stderr, "vmtracectl: nothing to report\n");
		rc = 1;
		goto out;
	}
	setvbuf(stdout, NULL, _IOFBF, 1 << 16);
	report_run(&r);
	if (r.o.stats && !r.out_failed) {
		ret = report_stats(&r);
		if (ret < 0) {
			fprintf(stderr, "vmtracectl: %s\n", strerror(-ret));
			rc = 1;
		}
	}
	if (report_output_failed(&r)) {
		/* a reader that went away (head) is no failure */
		if (r.out_errno != EPIPE) {
			fprintf(stderr, "vmtracectl: writing the report: %s\n", strerror(r.out_errno));
			rc = 1;
		}
	} else {
		warn_skipped(&r);
	}
	/* what was refused is said above; the status says it too */
	if (!rc && (set.bad_samples || set.no_aux || set.bad_cpus))
		rc = 3;
out:
	report_free(&r);
	sset_free(&set);
	return rc;
}
