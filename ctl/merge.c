/* SPDX-License-Identifier: MIT */
/*
 * vmtracectl merge: samples of any guests and of the host -> one trace.dat
 * per guest boot and one for the host, linked as trace-cmd links a host and
 * its guests: TRACEID in each, GUEST (vCPU -> host thread) in the host's,
 * TIME_SHIFT (the clock points) in each guest's, so that
 * `trace-cmd report -i host.dat -i guest.dat` and KernelShark put every
 * guest's events on the host's time line. sampleset.c reads and checks the
 * samples and keeps each page once.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "afile.h"
#include "commands.h"
#include "config.h"
#include "decode.h"
#include "meta.h"
#include "sampleset.h"
#include "tracedat.h"
#include "util.h"

#define HOST_GUEST "host"
#define DEFAULT_CONFIG "/etc/vmtraced/vmtraced.yaml"

struct progress {
	uint64_t start_ns;
	bool shown;
};

/* On a terminal, once a merge has taken a second. */
static void progress_cb(void *arg, uint64_t done, uint64_t total)
{
	struct progress *p = arg;

	if (!total || now_monotonic_ns() - p->start_ns < 1000000000ull)
		return;
	fprintf(stderr, "\rreading samples: %3u%% (%" PRIu64 " of %" PRIu64 " MiB)",
		(unsigned)(done * 100 / total), done >> 20, total >> 20);
	p->shown = true;
}

static void stats_text(char *out, size_t n, const struct vmt_cpu_stats *st)
{
	snprintf(out, n,
		 "entries: %" PRIu64 "\noverrun: %" PRIu64 "\ncommit overrun: %" PRIu64
		 "\nbytes: %" PRIu64 "\noldest event ts: %" PRIu64 ".%06" PRIu64
		 "\nnow ts: %" PRIu64 ".%06" PRIu64 "\ndropped events: %" PRIu64
		 "\nread events: %" PRIu64 "\n",
		 st->entries, st->overrun, st->commit_overrun, st->bytes, st->oldest_ts / 1000000000,
		 (st->oldest_ts % 1000000000) / 1000, st->now_ts / 1000000000,
		 (st->now_ts % 1000000000) / 1000, st->dropped, st->read);
}

static bool is_host(const struct vmt_sset_group *g)
{
	return !strcmp(g->guest, HOST_GUEST);
}

static void group_file(char *out, size_t n, const char *dir, const struct vmt_sset_group *g)
{
	if (g->boot_split)
		snprintf(out, n, "%s/%s-aux%u.dat", dir, g->guest, g->aux_version);
	else
		snprintf(out, n, "%s/%s.dat", dir, g->guest);
}

/* Why a guest's file gets no TIME_SHIFT, or NULL if it gets one. */
static const char *shift_refused(const struct vmt_sset_group *g)
{
	const struct vmt_clock_info *ci = &g->clock;

	if (!ci->npoints)
		return ci->why[0] ? ci->why : "the samples carry no clock points";
	for (uint32_t c = 0; c < g->ncpus; c++) {
		bool any = false;
		for (uint32_t i = 0; i < ci->npoints && !any; i++)
			any = ci->points[i].cpu == VMT_SYNC_ALL_CPUS || ci->points[i].cpu == c;
		if (!any)
			return "a vCPU has no clock point";
	}
	return NULL;
}

/*
 * The guest wrote its formats, and trace-cmd and KernelShark read those of
 * a trace.dat through libtraceevent, trusting them: an entry that crashes
 * its parser, or a format with a field outside any record (read out of
 * bounds for every event of it), is left out of the file, as report
 * leaves it out (decode_unsafe_entries()); those events show as unknown.
 * *out gets the bundle to write. 0, -EBADMSG with why, -ENOMEM.
 */
static int safe_meta(const struct vmt_sset_group *g, struct vmt_buf *out,
		     struct vmt_decode_unsafe *u, const char **why)
{
	struct vmt_meta_entry e;
	size_t pos = 0, n = 0;
	uint32_t k = 0;
	bool *unsafe;
	int r;

	while (meta_next(g->meta, g->meta_len, &pos, &e) > 0)
		n++;
	unsafe = calloc(n + 1, sizeof(*unsafe));
	if (!unsafe)
		return -ENOMEM;
	r = decode_unsafe_entries(g->meta, g->meta_len, &g->layout, unsafe, u, why);
	for (pos = 0; r == 0 && meta_next(g->meta, g->meta_len, &pos, &e) > 0; k++) {
		char name[VMT_META_NAME_MAX + 1];

		if (unsafe[k])
			continue;
		snprintf(name, sizeof(name), "%.*s", (int)e.name_len, e.name);
		r = meta_add(out, name, e.data, e.data_len);
	}
	free(unsafe);
	return r;
}

static void print_summary(const char *path, const struct vmt_sset_group *g, bool shifted,
			  const struct vmt_decode_unsafe *u)
{
	const struct vmt_sample *last = g->samples[g->nsamples - 1];
	uint64_t pages = 0, dups = 0, events = 0, first = UINT64_MAX, lastts = 0;
	uint64_t prev = 0, prev_dropped = 0, prev_cut = 0;

	for (uint32_t c = 0; c < g->ncpus; c++) {
		const struct vmt_sset_cpu *sc = &g->cpus[c];
		pages += sc->npages;
		dups += sc->duplicates;
		events += sc->events;
		prev += sc->prev_pages;
		prev_dropped += sc->prev_dropped;
		prev_cut += sc->prev_cut;
		if (sc->npages) {
			first = VMT_MIN(first, sc->first_ts);
			lastts = VMT_MAX(lastts, sc->last_ts);
		}
	}
	printf("%s: %s %s (%s), %u CPUs, %u sample(s), aux %u\n", path, is_host(g) ? "host" : "guest",
	       g->guest, g->aux.release, g->ncpus, g->nsamples, g->aux_version);
	printf("  pages %" PRIu64 " (%" PRIu64 " duplicates dropped), events %" PRIu64 ", window %.3f s\n",
	       pages, dups, events, first == UINT64_MAX ? 0.0 : (double)(lastts - first) / 1e9);
	if (prev || prev_dropped)
		printf("  previous boot's persistent ring buffer: %" PRIu64 " pages added (%" PRIu64
		       " cut to the events after the others'), %" PRIu64 " left out: the others had "
		       "their events\n", prev, prev_cut, prev_dropped);
	if (!is_host(g)) {
		const struct vmt_clock_info *ci = &g->clock;
		if (shifted) {
			uint64_t best = UINT64_MAX;
			for (uint32_t i = 0; i < ci->npoints; i++)
				best = VMT_MIN(best, ci->points[i].rtt);
			printf("  clock: %s -> host %s by %s, %u points, offset %+.6f s, best bound %.1f us\n",
			       ci->guest_clock, ci->host_clock, sync_method_name(ci->method), ci->npoints,
			       (double)ci->points[0].offset / 1e9, (double)best / 2e3);
		} else {
			printf("  clock: not shifted to the host's: %s\n", shift_refused(g));
		}
	}
	if (u->crashed || u->outside)
		printf("  formats: %u left out (%u crash libtraceevent's parser, %u with a field "
		       "outside any record): their events show as unknown\n",
		       u->crashed + u->outside, u->crashed, u->outside);
	for (uint32_t c = 0; c < g->ncpus; c++) {
		const struct vmt_sset_cpu *sc = &g->cpus[c];
		const struct vmt_sample_cpu *lc = c < last->ncpus ? &last->cpus[c] : NULL;

		printf("  cpu%u: %" PRIu64 " pages", c, sc->npages);
		if (lc)
			printf("; ring: in %" PRIu64 ", overwritten %" PRIu64 ", guest-lost %" PRIu64
			       ", rejected %" PRIu64 " B", lc->counters.pages_in, lc->counters.pages_overwritten,
			       lc->counters.pages_guest_lost, lc->counters.bytes_rejected);
		if (sc->gaps)
			printf("; %" PRIu64 " gap(s), %" PRIu64 " pages missing", sc->gaps, sc->gap_pages);
		if (sc->refused_frames)
			printf("; %" PRIu64 " corrupt frame(s) refused, %" PRIu64 " pages missing",
			       sc->refused_frames, sc->refused_pages);
		if (lc && lc->have_guest_stats)
			printf("; guest: read %" PRIu64 ", overrun %" PRIu64 ", dropped %" PRIu64,
			       lc->guest.read, lc->guest.overrun, lc->guest.dropped);
		printf("\n");
	}
}

struct linkage {
	uint64_t host_id;	/* TRACEID of the host's file (made up if none is merged) */
	struct vmt_tracedat_guest *guests;
	uint32_t nguests;
};

/* The group whose CPUs tracedat_write() asks for, one at a time. */
struct group_load {
	struct vmt_sset *set;
	struct vmt_sset_group *g;
};

static int group_cpu_load(void *arg, uint32_t i, const uint8_t *const **pages, uint64_t *npages)
{
	struct group_load *gl = arg;
	int r = sset_cpu_load(gl->set, gl->g, i);

	*pages = gl->g->cpus[i].pages;
	*npages = gl->g->cpus[i].npages;
	return r;
}

static void group_cpu_unload(void *arg, uint32_t i)
{
	struct group_load *gl = arg;

	sset_cpu_unload(gl->g, i);
}

static int write_group(const char *path, struct vmt_sset *set, struct vmt_sset_group *g,
		       const struct linkage *lk, bool quiet)
{
	struct group_load gl = { set, g };
	struct vmt_tracedat_cpu *cpus = calloc(g->ncpus, sizeof(*cpus));
	char **stats = calloc(g->ncpus, sizeof(*stats));
	const struct vmt_sample *last = g->samples[g->nsamples - 1];
	struct vmt_tracedat_shift shift = { 0 };
	char uname[256], why[512];
	bool shifted = false;
	struct vmt_afile af = { .fd = -1, .dirfd = -1 };
	struct vmt_decode_unsafe u;
	struct vmt_buf meta = { 0 };
	const char *bad = NULL;
	int r = -ENOMEM;

	if (!cpus || !stats)
		goto done;
	r = safe_meta(g, &meta, &u, &bad);
	if (r < 0) {
		fprintf(stderr, "vmtracectl: cannot write %s: %s\n", path,
			r == -EBADMSG && bad ? bad : strerror(-r));
		goto done;
	}
	if (u.crashed || u.outside)
		fprintf(stderr, "vmtracectl: %s: guest %s, aux %u: %u metadata entr%s crash "
			"libtraceevent's parser, %u event format(s) have a field outside any record: "
			"left out of the trace\n", path, g->guest, g->aux_version, u.crashed,
			u.crashed == 1 ? "y" : "ies", u.outside);
	r = -ENOMEM;
	for (uint32_t c = 0; c < g->ncpus; c++) {
		cpus[c] = (struct vmt_tracedat_cpu){ .cpu = c };
		if (c < last->ncpus && last->cpus[c].have_guest_stats) {
			stats[c] = malloc(512);
			if (!stats[c])
				goto done;
			stats_text(stats[c], 512, &last->cpus[c].guest);
			cpus[c].stats = stats[c];
		}
	}
	snprintf(uname, sizeof(uname), "Linux %s %s", g->guest, g->aux.release);
	struct vmt_tracedat_input in = {
		.meta = meta.data,
		.meta_len = meta.len,
		.page_size = g->page_size,
		.ncpus = g->ncpus,
		.clock = g->aux.clock,
		.uname = uname,
		.cpus = cpus,
		.nr_cpus = g->ncpus,
		.trace_id = is_host(g) ? lk->host_id : g->trace_id,
		.zstd_level = 3,
		/* one CPU's pages in memory at a time */
		.load = group_cpu_load,
		.unload = group_cpu_unload,
		.load_arg = &gl,
	};
	if (is_host(g)) {
		in.guests = lk->guests;
		in.nguests = lk->nguests;
	} else if (!shift_refused(g)) {
		shift = (struct vmt_tracedat_shift){ .peer_trace_id = lk->host_id, .ncpus = g->ncpus,
						     .points = g->clock.points, .npoints = g->clock.npoints };
		in.shift = &shift;
		shifted = true;
	}
	/*
	 * Written under a new temporary name (O_EXCL, mode 0600 like the
	 * samples it comes from: a trace is as private as they are) and
	 * renamed over PATH: nothing already at PATH, a symlink say, is
	 * followed or written through.
	 */
	{
		char dir[4096];
		const char *slash = strrchr(path, '/');

		snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 1,
			 slash ? (slash == path ? "/" : path) : ".");
		r = afile_create(&af, dir, slash ? slash + 1 : path);
	}
	if (r < 0) {
		fprintf(stderr, "vmtracectl: cannot create %s: %s\n", path, strerror(-r));
		goto done;
	}
	r = tracedat_write(af.fd, &in, why, sizeof(why));
	if (r < 0) {
		fprintf(stderr, "vmtracectl: cannot write %s: %s\n", path, r == -EBADMSG || r == -EINVAL ? why : strerror(-r));
		afile_abort(&af);
		goto done;
	}
	r = afile_commit(&af);
	if (r < 0) {
		fprintf(stderr, "vmtracectl: cannot write %s: %s\n", path, strerror(-r));
		goto done;
	}
	if (!quiet)
		print_summary(path, g, shifted, &u);
done:
	buf_free(&meta);
	for (uint32_t c = 0; stats && c < g->ncpus; c++)
		free(stats[c]);
	free(stats);
	free(cpus);
	return r;
}

/* ---- --since/--until: samples from the state folder ----------------------- */

/* "@EPOCH", "-30m" (that long ago), "YYYY-MM-DD[THH:MM[:SS]][Z]" (local time without Z). */
static int parse_when(const char *s, uint64_t *ns)
{
	struct tm tm = { 0 };
	uint64_t ms;
	const char *end;
	time_t t;

	if (s[0] == '@') {
		char *e;
		double v = strtod(s + 1, &e);
		if (e == s + 1 || *e || v < 0)
			return -EINVAL;
		*ns = (uint64_t)(v * 1e9);
		return 0;
	}
	if (s[0] == '-') {
		if (parse_duration_ms(s + 1, &ms) < 0)
			return -EINVAL;
		*ns = now_realtime_ns() - ms * 1000000ull;
		return 0;
	}
	end = strptime(s, "%Y-%m-%d", &tm);
	if (end && (*end == 'T' || *end == ' ')) {
		const char *e2 = strptime(end + 1, "%H:%M:%S", &tm);
		end = e2 ? e2 : strptime(end + 1, "%H:%M", &tm);
	}
	if (!end || (*end && strcmp(end, "Z")))
		return -EINVAL;
	tm.tm_isdst = -1;
	t = *end == 'Z' ? timegm(&tm) : mktime(&tm);
	if (t < 0)
		return -EINVAL;
	*ns = (uint64_t)t * 1000000000ull;
	return 0;
}

struct pick {
	char *path;
	uint64_t created;
};

static int pick_cmp(const void *a, const void *b)
{
	const struct pick *x = a, *y = b;

	return (x->created > y->created) - (x->created < y->created);
}

/*
 * A guest's samples frozen in [since, until], and the first one after until:
 * a ring holds the past, so that one still covers until.
 */
static int pick_guest(const char *dir, const char *guest, uint64_t since, uint64_t until,
		      char ***paths, uint32_t *n)
{
	char gdir[4200];
	struct pick *all = NULL;
	uint32_t na = 0;
	struct dirent *de;
	DIR *d;
	bool after = false;

	snprintf(gdir, sizeof(gdir), "%s/%s", dir, guest);
	d = opendir(gdir);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		struct vmt_sample s;
		char p[4500], why[256];
		struct pick *np;

		if (de->d_name[0] == '.' || l < 6 || strcmp(de->d_name + l - 5, ".vmts"))
			continue;
		snprintf(p, sizeof(p), "%s/%s", gdir, de->d_name);
		if (sample_read_info(p, &s, why, sizeof(why)) < 0) {
			/* merge reads it again and says why */
			s.created_ns = since;
		}
		np = realloc(all, (na + 1) * sizeof(*np));
		if (!np)
			break;
		all = np;
		all[na].path = strdup(p);
		all[na++].created = s.created_ns;
	}
	closedir(d);
	qsort(all, na, sizeof(*all), pick_cmp);
	for (uint32_t i = 0; i < na; i++) {
		bool want = all[i].created >= since && (all[i].created <= until || !after);
		char **np;

		if (all[i].created > until) {
			if (after)
				want = false;
			after = true;
		}
		if (!want) {
			free(all[i].path);
			continue;
		}
		np = realloc(*paths, (*n + 1) * sizeof(*np));
		if (!np) {
			free(all[i].path);
			continue;
		}
		*paths = np;
		(*paths)[(*n)++] = all[i].path;
	}
	free(all);
	return 0;
}

static int pick_samples(const char *state_dir, char **guests, int nguests, uint64_t since,
			uint64_t until, char ***paths, uint32_t *n)
{
	struct dirent *de;
	DIR *d;

	if (nguests) {
		for (int i = 0; i < nguests; i++)
			if (!name_is_valid(guests[i]) || pick_guest(state_dir, guests[i], since, until, paths, n) < 0)
				fprintf(stderr, "vmtracectl: no samples of guest %s in %s\n", guests[i], state_dir);
		return 0;
	}
	d = opendir(state_dir);
	if (!d) {
		fprintf(stderr, "vmtracectl: %s: %s\n", state_dir, strerror(errno));
		return -errno;
	}
	while ((de = readdir(d)))
		if (de->d_name[0] != '.' && name_is_valid(de->d_name))
			pick_guest(state_dir, de->d_name, since, until, paths, n);
	closedir(d);
	return 0;
}

static int state_dir_of(const char *config, char *out, size_t n)
{
	struct vmt_config c;
	char err[512];
	int r = config_load(&c, config, err, sizeof(err));

	if (r < 0) {
		fprintf(stderr, "vmtracectl: %s\n", err);
		return r;
	}
	snprintf(out, n, "%s", c.state_dir);
	config_free(&c);
	return 0;
}

/* ---- the command ------------------------------------------------------------ */

static bool ends_with(const char *s, const char *tail)
{
	size_t a = strlen(s), b = strlen(tail);

	return a >= b && !strcmp(s + a - b, tail);
}

struct merge_opts {
	const char *out, *aux_path, *config, *since_s, *until_s;
	uint64_t max_memory;	/* --max-memory, 0 if not given */
	char state_dir[4096];	/* "" : the configuration's */
	int quiet;
};

static void merge_usage(FILE *f)
{
	fprintf(f, "usage: vmtracectl merge [-o DIR|FILE.dat] [--aux AUX] [-q] [--max-memory SIZE] SAMPLE...\n"
			"       vmtracectl merge [-o DIR] [-d STATE_DIR|-c CONFIG] [--max-memory SIZE]\n"
			"                        --since WHEN [--until WHEN] [GUEST...]\n");
}

/* Options into *m: -1 to go on, else the status to exit with. */
static int merge_options(int argc, char **argv, struct merge_opts *m)
{
	static const struct option longopts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "aux", required_argument, NULL, 'a' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "since", required_argument, NULL, 'S' },
		{ "until", required_argument, NULL, 'U' },
		{ "state-dir", required_argument, NULL, 'd' },
		{ "config", required_argument, NULL, 'c' },
		{ "max-memory", required_argument, NULL, 'M' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	int opt;

	optind = 0;	/* 0: glibc forgets the permutation state of the last parse */
	while ((opt = getopt_long(argc, argv, "o:a:qd:c:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'o': m->out = optarg; break;
		case 'a': m->aux_path = optarg; break;
		case 'q': m->quiet = 1; break;
		case 'S': m->since_s = optarg; break;
		case 'U': m->until_s = optarg; break;
		case 'd': snprintf(m->state_dir, sizeof(m->state_dir), "%s", optarg); break;
		case 'c': m->config = optarg; break;
		case 'M':
			if (ctl_max_memory(optarg, &m->max_memory) < 0)
				return 2;
			break;
		case 'h': merge_usage(stdout); return 0;
		default: merge_usage(stderr); return 2;
		}
	}
	return -1;
}

/*
 * --since/--until: the paths of the samples in the state folder frozen in
 * that time, of the guests named (of every guest if none). -1 to go on,
 * else the status to exit with.
 */
static int pick_by_time(struct merge_opts *m, char **guests, int nguests, char ***picked,
			uint32_t *npicked)
{
	uint64_t since = 0, until = UINT64_MAX;

	if ((m->since_s && parse_when(m->since_s, &since) < 0) ||
	    (m->until_s && parse_when(m->until_s, &until) < 0)) {
		fprintf(stderr, "vmtracectl: --since/--until take @EPOCH, -DURATION (ago) or "
				"YYYY-MM-DD[THH:MM[:SS]][Z], not '%s'\n",
			m->since_s && parse_when(m->since_s, &since) < 0 ? m->since_s : m->until_s);
		return 2;
	}
	if (!m->state_dir[0] && state_dir_of(m->config, m->state_dir, sizeof(m->state_dir)) < 0)
		return 1;
	pick_samples(m->state_dir, guests, nguests, since, until, picked, npicked);
	if (!*npicked) {
		fprintf(stderr, "vmtracectl: no sample in %s frozen in that time\n", m->state_dir);
		return 1;
	}
	return -1;
}

/* The samples into set, with a progress line on a terminal. */
static int load_samples(struct vmt_sset *set, const struct merge_opts *m, char *const *paths,
			uint32_t npaths, struct progress *prog)
{
	int ret;

	set->quiet = false;
	set->max_memory = m->max_memory;
	if (isatty(STDERR_FILENO) && !m->quiet) {
		set->progress = progress_cb;
		set->progress_arg = prog;
	}
	ret = sset_load(set, (const char *const *)paths, npaths, m->aux_path);
	if (prog->shown)
		fprintf(stderr, "\r%*s\r", 60, "");
	return ret;
}

/* -o: one FILE.dat for one group, else a folder (made if need be). */
static int prepare_output(const char *out, uint32_t ngroups, bool *one_file)
{
	*one_file = ends_with(out, ".dat");
	if (*one_file && ngroups > 1) {
		fprintf(stderr, "vmtracectl: the samples hold %u guest boots (or the host): "
				"-o takes a folder, not %s\n", ngroups, out);
		return -EINVAL;
	}
	if (!*one_file && mkdir(out, 0750) < 0 && errno != EEXIST) {
		int e = errno;

		fprintf(stderr, "vmtracectl: cannot create %s: %s\n", out, strerror(e));
		return -e;
	}
	return 0;
}

/* The host's file names its guests; each guest's file names the host. */
static int link_groups(const struct vmt_sset *set, struct linkage *lk)
{
	lk->guests = calloc(set->ngroups, sizeof(*lk->guests));
	if (!lk->guests)
		return -ENOMEM;
	lk->host_id = 0x766d7472616365ull;	/* "vmtrace": still links guests when no host is merged */
	for (uint32_t i = 0; i < set->ngroups; i++) {
		const struct vmt_sset_group *g = &set->groups[i];
		if (is_host(g)) {
			lk->host_id = g->trace_id;
			continue;
		}
		lk->guests[lk->nguests++] = (struct vmt_tracedat_guest){
			.name = g->guest, .trace_id = g->trace_id,
			.nvcpus = g->clock.nvcpus ? g->clock.nvcpus : g->ncpus,
			.vcpu_tid = g->clock.vcpu_tid,
		};
	}
	return 0;
}

/* One trace.dat per group; how many were written. */
static uint32_t write_groups(struct vmt_sset *set, const struct linkage *lk, const char *out,
			     bool one_file, bool quiet)
{
	uint32_t written = 0;

	for (uint32_t i = 0; i < set->ngroups; i++) {
		char path[4500];

		if (one_file)
			snprintf(path, sizeof(path), "%s", out);
		else
			group_file(path, sizeof(path), out, &set->groups[i]);
		if (write_group(path, set, &set->groups[i], lk, quiet) == 0)
			written++;
	}
	return written;
}

/* "out/" or "out//" as "out", so that the files print as "out/g1.dat" */
static void trim_slashes(char *out, size_t n, const char *path)
{
	size_t l;

	snprintf(out, n, "%s", path);
	l = strlen(out);
	while (l > 1 && out[l - 1] == '/')
		out[--l] = 0;
}

/* A folder of guests' files and no host.dat: why, once. */
static void say_no_host(const struct vmt_sset *set)
{
	for (uint32_t i = 0; i < set->ngroups; i++)
		if (is_host(&set->groups[i]))
			return;
	printf("no host.dat: the samples hold no trace of the host's own (vmtraced records it with "
	       "host: enabled: true, off in the shipped configuration)\n");
}

int cmd_merge(const struct vmt_ctl_opts *o, int argc, char **argv)
{
	struct merge_opts m = { .out = ".", .config = DEFAULT_CONFIG };
	char outdir[4096];
	char **picked = NULL;
	struct vmt_sset set = { 0 };
	struct progress prog = { .start_ns = now_monotonic_ns() };
	struct linkage lk = { 0 };
	uint32_t npicked = 0, written;
	int ret;
	bool one_file;

	(void)o;
	ret = merge_options(argc, argv, &m);
	if (ret >= 0)
		return ret;
	if (m.since_s || m.until_s) {
		ret = pick_by_time(&m, argv + optind, argc - optind, &picked, &npicked);
		if (ret >= 0)
			return ret;
	} else if (optind >= argc) {
		merge_usage(stderr);
		return 2;
	}

	if (picked)
		ret = load_samples(&set, &m, picked, npicked, &prog);
	else
		ret = load_samples(&set, &m, argv + optind, (uint32_t)(argc - optind), &prog);
	if (ret < 0) {
		fprintf(stderr, "vmtracectl: %s\n", strerror(-ret));
		ret = 1;
		goto done;
	}
	ret = 1;
	if (!set.ngroups) {
		fprintf(stderr, "vmtracectl: no sample to merge\n");
		goto done;
	}
	trim_slashes(outdir, sizeof(outdir), m.out);
	m.out = outdir;
	if (prepare_output(m.out, set.ngroups, &one_file) < 0 || link_groups(&set, &lk) < 0)
		goto done;
	written = write_groups(&set, &lk, m.out, one_file, m.quiet);
	if (!m.quiet && !one_file)
		say_no_host(&set);
	if (!m.quiet && (set.bad_samples || set.no_aux || set.bad_cpus))
		printf("%u sample(s) refused, %u left out for want of their aux file, %u sample CPU(s) "
		       "that no longer read\n", set.bad_samples, set.no_aux, set.bad_cpus);
	ret = written == set.ngroups && !set.bad_samples && !set.no_aux && !set.bad_cpus ? 0 :
	      written ? 3 : 1;
done:
	free(lk.guests);
	sset_free(&set);
	for (uint32_t i = 0; i < npicked; i++)
		free(picked[i]);
	free(picked);
	return ret;
}
