/* SPDX-License-Identifier: MIT */
/*
 * corpusexport SAMPLE AUX OUTDIR: write a sample of vmtraced (and the aux
 * file it needs) in the layout of the fixed corpus (tests/corpus/README.md):
 *
 *   OUTDIR/pages/cpuN.raw          the window's pages, as the guest wrote them
 *   OUTDIR/meta/<bundle files>     header_page, formats, kallsyms, ... from
 *                                  the aux; saved_cmdlines and saved_tgids
 *                                  from the sample's task tables (at the dump)
 *                                  when it has them
 *   OUTDIR/meta/per_cpu/cpuN/stats the agent's last per_cpu stats, in tracefs'
 *                                  own format
 *
 * Every page must pass page_scan(); the window must be whole (no page pushed
 * out of the ring, none rejected, no frame refused). One line per CPU says
 * pages, events and pages with the missed-events flag. Exit 1 on a window
 * that is not whole or a page that does not walk, 2 on usage.
 * tests/corpus/mkbusy.sh uses it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "aux.h"
#include "meta.h"
#include "page.h"
#include "sample.h"
#include "util.h"

#define META_MAX (256ull << 20)

/* mkdir -p of path's parent folders. */
static int mkparents(char *path)
{
	for (char *p = strchr(path + 1, '/'); p; p = strchr(p + 1, '/')) {
		*p = 0;
		if (mkdir(path, 0755) < 0 && errno != EEXIST) {
			int r = -errno;

			*p = '/';
			return r;
		}
		*p = '/';
	}
	return 0;
}

static int put_file(const char *dir, const char *name, size_t name_len, const void *data,
		    size_t len)
{
	char path[PATH_MAX];
	int fd, r;

	if (snprintf(path, sizeof(path), "%s/%.*s", dir, (int)name_len, name) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	r = mkparents(path);
	if (r < 0)
		return r;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	r = write_full(fd, data, len);
	close(fd);
	return r;
}

/* Every file of a bundle into dir; 0 or -errno. */
static int put_bundle(const char *dir, const uint8_t *b, size_t len)
{
	struct vmt_meta_entry e;
	size_t pos = 0;
	int r;

	while ((r = meta_next(b, len, &pos, &e)) == 1) {
		r = put_file(dir, e.name, e.name_len, e.data, e.data_len);
		if (r < 0)
			return r;
	}
	return r;
}

/* per_cpu/cpuN/stats as tracefs prints it (kernel/trace/trace.c). */
static int put_stats(const char *dir, uint32_t cpu, const struct vmt_cpu_stats *st)
{
	char name[64], text[512];
	int n;

	snprintf(name, sizeof(name), "per_cpu/cpu%u/stats", cpu);
	n = snprintf(text, sizeof(text),
		     "entries: %llu\noverrun: %llu\ncommit overrun: %llu\nbytes: %llu\n"
		     "oldest event ts: %5llu.%06llu\nnow ts: %5llu.%06llu\n"
		     "dropped events: %llu\nread events: %llu\n",
		     (unsigned long long)st->entries, (unsigned long long)st->overrun,
		     (unsigned long long)st->commit_overrun, (unsigned long long)st->bytes,
		     (unsigned long long)(st->oldest_ts / 1000000000),
		     (unsigned long long)(st->oldest_ts % 1000000000 / 1000),
		     (unsigned long long)(st->now_ts / 1000000000),
		     (unsigned long long)(st->now_ts % 1000000000 / 1000),
		     (unsigned long long)st->dropped, (unsigned long long)st->read);
	return put_file(dir, name, strlen(name), text, (size_t)n);
}

/* Scan and write one CPU's pages; 0, or 1 if the window is not whole. */
static int export_cpu(const char *out, const struct vmt_page_layout *l,
		      const struct vmt_sample *s, const struct vmt_sample_cpu *c)
{
	const struct vmt_sample_counters *k = &c->counters;
	uint64_t events = 0, missed = 0, bad = 0;
	char name[64];
	int r;

	for (uint32_t i = 0; i < c->npages; i++) {
		struct vmt_page_info info;

		if (page_scan(l, c->pages + (size_t)i * s->page_size, &info) < 0) {
			fprintf(stderr, "corpusexport: cpu%u page %u does not walk\n", c->cpu, i);
			bad++;
			continue;
		}
		events += info.events;
		missed += info.missed_flag;
	}
	snprintf(name, sizeof(name), "pages/cpu%u.raw", c->cpu);
	r = put_file(out, name, strlen(name), c->pages, (size_t)c->npages * s->page_size);
	if (r < 0) {
		fprintf(stderr, "corpusexport: %s/%s: %s\n", out, name, strerror(-r));
		return 1;
	}
	printf("cpu%u pages %u events %llu missed_flag %llu bad %llu first_seq %llu; ring: in %llu "
	       "overwritten %llu rejected %llu guest_lost %llu frames_refused %u\n",
	       c->cpu, c->npages, (unsigned long long)events, (unsigned long long)missed,
	       (unsigned long long)bad, (unsigned long long)c->first_seq,
	       (unsigned long long)k->pages_in, (unsigned long long)k->pages_overwritten,
	       (unsigned long long)k->pages_rejected, (unsigned long long)k->pages_guest_lost,
	       c->frames_refused);
	if (bad || k->pages_overwritten || k->pages_rejected || c->frames_refused ||
	    c->first_seq != 0) {
		fprintf(stderr, "corpusexport: cpu%u: the window is not every page the guest sent\n",
			c->cpu);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct vmt_sample *s = NULL;
	struct vmt_aux a = { 0 };
	struct vmt_meta_entry hp;
	struct vmt_page_layout l;
	char meta[PATH_MAX], why[256];
	int r, rc = 0;

	if (argc != 4) {
		fprintf(stderr, "usage: corpusexport SAMPLE AUX OUTDIR\n");
		return 2;
	}
	/* the aux named, not one beside the sample: tcode frames decode with it */
	r = sample_read_with(argv[1], &(struct vmt_sample_read_opts){ .aux_path = argv[2] }, &s, why,
			     sizeof(why));
	if (r < 0) {
		fprintf(stderr, "corpusexport: %s: %s\n", argv[1], r == -EBADMSG ? why : strerror(-r));
		return 1;
	}
	r = aux_read(argv[2], META_MAX, &a, why, sizeof(why));
	if (r < 0) {
		fprintf(stderr, "corpusexport: %s: %s\n", argv[2], r == -EBADMSG ? why : strerror(-r));
		sample_free(s);
		return 1;
	}
	if (a.id != s->aux_id || a.page_size != s->page_size) {
		fprintf(stderr, "corpusexport: %s is not the aux of %s\n", argv[2], argv[1]);
		rc = 1;
		goto out;
	}
	/* aux_read() validated the bundle: header_page is there, names are
	 * relative and without ".." */
	r = meta_find(a.meta, a.meta_len, "events/header_page", &hp);
	if (r == 0)
		r = page_layout_parse(&l, (const char *)hp.data, hp.data_len, s->page_size);
	if (r < 0) {
		fprintf(stderr, "corpusexport: %s: no header_page that reads\n", argv[2]);
		rc = 1;
		goto out;
	}
	snprintf(meta, sizeof(meta), "%s/meta", argv[3]);
	r = put_bundle(meta, a.meta, a.meta_len);
	if (r >= 0 && s->tasks_len)
		r = put_bundle(meta, s->tasks, s->tasks_len);
	for (uint32_t i = 0; r >= 0 && i < s->ncpus; i++)
		if (s->cpus[i].have_guest_stats)
			r = put_stats(meta, i, &s->cpus[i].guest);
	if (r < 0) {
		fprintf(stderr, "corpusexport: %s: %s\n", meta, strerror(-r));
		rc = 1;
		goto out;
	}
	printf("guest %s kernel %s clock %s cpus %u page_size %u tasks %s\n", s->guest, a.release,
	       a.clock, s->ncpus, s->page_size, s->tasks_len ? "from the dump" : "from the aux");
	for (uint32_t i = 0; i < s->ncpus; i++)
		rc |= export_cpu(argv[3], &l, s, &s->cpus[i]);
out:
	aux_free(&a);
	sample_free(s);
	return rc;
}
