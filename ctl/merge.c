/* SPDX-License-Identifier: MIT */
/*
 * vmtracectl merge: samples of one guest (and the aux file they name) ->
 * one trace.dat. Samples overlap when a ring was dumped more than once:
 * pages are put in time order per CPU and each page is kept once.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aux.h"
#include "commands.h"
#include "meta.h"
#include "page.h"
#include "sample.h"
#include "tracedat.h"
#include "util.h"

#define MERGE_META_MAX (1ull << 30)

struct mpage {
	const uint8_t *p;
	uint64_t ts;		/* page header timestamp */
	uint32_t crc;
	uint32_t commit;
};

static int mpage_cmp(const void *a, const void *b)
{
	const struct mpage *x = a, *y = b;

	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	if (x->commit != y->commit)
		return x->commit < y->commit ? -1 : 1;
	return (x->crc > y->crc) - (x->crc < y->crc);
}

static int find_aux(const char *sample_path, const struct vmt_sample *s, const char *aux_path,
		    struct vmt_aux *aux)
{
	char path[4200], name[64], why[256], *dup;
	int r;

	if (aux_path) {
		snprintf(path, sizeof(path), "%s", aux_path);
	} else {
		dup = strdup(sample_path);
		if (!dup)
			return -ENOMEM;
		aux_file_name(name, sizeof(name), s->aux_version);
		snprintf(path, sizeof(path), "%s/%s", dirname(dup), name);
		free(dup);
	}
	r = aux_read(path, MERGE_META_MAX, aux, why, sizeof(why));
	if (r < 0) {
		fprintf(stderr, "vmtracectl: %s: %s\n", path, r == -EBADMSG ? why : strerror(-r));
		return r;
	}
	if (aux->id != s->aux_id) {
		fprintf(stderr, "vmtracectl: %s is not the aux file %s needs (id %016" PRIx64 ", needs %016" PRIx64 ")\n",
			path, sample_path, aux->id, s->aux_id);
		aux_free(aux);
		return -EBADMSG;
	}
	return 0;
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

int cmd_merge(const struct vmt_ctl_opts *o, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "aux", required_argument, NULL, 'a' },
		{ "quiet", no_argument, NULL, 'q' },
		{ 0 },
	};
	const char *out = NULL, *aux_path = NULL;
	struct vmt_sample **samples = NULL;
	struct vmt_aux aux = { 0 };
	struct mpage **pages = NULL;
	uint64_t *npages = NULL, events = 0, dups = 0;
	struct vmt_tracedat_cpu *cpus = NULL;
	const uint8_t **ptrs = NULL;
	char **stats = NULL;
	struct vmt_page_layout layout;
	int opt, nsamples = 0, ret = 1, fd = -1, quiet = 0;
	uint32_t ncpus = 0, ps = 0;
	char why[512];

	(void)o;
	optind = 0;	/* 0: glibc forgets the permutation state of the last parse */
	while ((opt = getopt_long(argc, argv, "o:a:q", longopts, NULL)) != -1) {
		switch (opt) {
		case 'o': out = optarg; break;
		case 'a': aux_path = optarg; break;
		case 'q': quiet = 1; break;
		default: goto usage;
		}
	}
	if (!out || optind >= argc)
		goto usage;

	samples = calloc((size_t)(argc - optind), sizeof(*samples));
	if (!samples)
		goto done;
	for (int i = optind; i < argc; i++) {
		struct vmt_sample *s;
		int r = sample_read(argv[i], &s, why, sizeof(why));

		if (r < 0) {
			fprintf(stderr, "vmtracectl: %s: %s; skipped\n", argv[i],
				r == -EBADMSG ? why : strerror(-r));
			continue;
		}
		if (nsamples && (strcmp(s->guest, samples[0]->guest) || s->aux_id != samples[0]->aux_id)) {
			fprintf(stderr, "vmtracectl: %s: guest %s aux %u, not guest %s aux %u like %s; skipped\n",
				argv[i], s->guest, s->aux_version, samples[0]->guest,
				samples[0]->aux_version, argv[optind]);
			sample_free(s);
			continue;
		}
		if (!nsamples && find_aux(argv[i], s, aux_path, &aux) < 0) {
			sample_free(s);
			goto done;
		}
		samples[nsamples++] = s;
	}
	if (!nsamples) {
		fprintf(stderr, "vmtracectl: no sample to merge\n");
		goto done;
	}
	ncpus = samples[0]->ncpus;
	ps = samples[0]->page_size;
	page_layout_default(&layout, ps);
	{
		struct vmt_meta_entry hp;
		if (meta_find(aux.meta, aux.meta_len, "events/header_page", &hp) == 0)
			page_layout_parse(&layout, (const char *)hp.data, hp.data_len, ps);
	}

	pages = calloc(ncpus, sizeof(*pages));
	npages = calloc(ncpus, sizeof(*npages));
	cpus = calloc(ncpus, sizeof(*cpus));
	stats = calloc(ncpus, sizeof(*stats));
	if (!pages || !npages || !cpus || !stats)
		goto done;
	for (uint32_t c = 0; c < ncpus; c++) {
		uint64_t total = 0, k = 0;

		for (int i = 0; i < nsamples; i++)
			if (c < samples[i]->ncpus)
				total += samples[i]->cpus[c].npages;
		pages[c] = calloc(total ? total : 1, sizeof(**pages));
		if (!pages[c])
			goto done;
		for (int i = 0; i < nsamples; i++) {
			const struct vmt_sample_cpu *sc;
			if (c >= samples[i]->ncpus)
				continue;
			sc = &samples[i]->cpus[c];
			for (uint32_t p = 0; p < sc->npages; p++) {
				const uint8_t *pg = sc->pages + (size_t)p * ps;
				struct vmt_page_info info;
				if (page_scan(&layout, pg, &info) < 0)
					continue;	/* the daemon checked it; a tampered file is not trusted either */
				pages[c][k++] = (struct mpage){ pg, info.base_ts, crc32c(0, pg, ps), info.commit };
			}
		}
		qsort(pages[c], k, sizeof(**pages), mpage_cmp);
		/* identical neighbours are the same page dumped twice */
		uint64_t u = 0;
		for (uint64_t i = 0; i < k; i++) {
			if (u && !mpage_cmp(&pages[c][u - 1], &pages[c][i]) &&
			    !memcmp(pages[c][u - 1].p, pages[c][i].p, ps)) {
				dups++;
				continue;
			}
			pages[c][u++] = pages[c][i];
		}
		npages[c] = u;
	}

	for (uint32_t c = 0; c < ncpus; c++) {
		const struct vmt_sample_cpu *last = &samples[nsamples - 1]->cpus[c];
		const uint8_t **pp = calloc(npages[c] ? npages[c] : 1, sizeof(*pp));

		if (!pp)
			goto done;
		for (uint64_t i = 0; i < npages[c]; i++) {
			struct vmt_page_info info;
			pp[i] = pages[c][i].p;
			page_scan(&layout, pp[i], &info);
			events += info.events;
		}
		cpus[c].cpu = c;
		cpus[c].pages = pp;
		cpus[c].npages = npages[c];
		if (last->have_guest_stats) {
			stats[c] = malloc(512);
			if (stats[c])
				stats_text(stats[c], 512, &last->guest);
		}
		cpus[c].stats = stats[c];
	}

	char uname[256];
	snprintf(uname, sizeof(uname), "Linux %s %s", aux.guest, aux.release);
	struct vmt_tracedat_input in = {
		.meta = aux.meta,
		.meta_len = aux.meta_len,
		.page_size = ps,
		.ncpus = ncpus,
		.clock = aux.clock,
		.uname = uname,
		.cpus = cpus,
		.nr_cpus = ncpus,
		.zstd_level = 3,
	};
	fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "vmtracectl: cannot create %s: %s\n", out, strerror(errno));
		goto done;
	}
	int r = tracedat_write(fd, &in, why, sizeof(why));
	if (r < 0) {
		fprintf(stderr, "vmtracectl: cannot write %s: %s\n", out, r == -EBADMSG ? why : strerror(-r));
		unlink(out);
		goto done;
	}
	if (!quiet) {
		uint64_t first = UINT64_MAX, lastts = 0, tp = 0;
		printf("%s: guest %s (%s), %u CPUs, %d sample(s), aux %u\n", out, aux.guest, aux.release,
		       ncpus, nsamples, aux.version);
		for (uint32_t c = 0; c < ncpus; c++) {
			tp += npages[c];
			for (int i = 0; i < nsamples; i++) {
				const struct vmt_sample_cpu *sc = &samples[i]->cpus[c];
				if (!sc->npages)
					continue;
				first = VMT_MIN(first, sc->first_ts);
				lastts = VMT_MAX(lastts, sc->last_ts);
			}
		}
		printf("  pages %" PRIu64 " (%" PRIu64 " duplicates dropped), events %" PRIu64 ", window %.3f s\n",
		       tp, dups, events, first == UINT64_MAX ? 0.0 : (double)(lastts - first) / 1e9);
		for (uint32_t c = 0; c < ncpus; c++) {
			const struct vmt_sample_cpu *sc = &samples[nsamples - 1]->cpus[c];
			printf("  cpu%u: %" PRIu64 " pages; ring: in %" PRIu64 ", overwritten %" PRIu64
			       ", guest-lost %" PRIu64 ", rejected %" PRIu64 " B",
			       c, npages[c], sc->counters.pages_in, sc->counters.pages_overwritten,
			       sc->counters.pages_guest_lost, sc->counters.bytes_rejected);
			if (sc->have_guest_stats)
				printf("; guest: read %" PRIu64 ", overrun %" PRIu64 ", dropped %" PRIu64,
				       sc->guest.read, sc->guest.overrun, sc->guest.dropped);
			printf("\n");
		}
	}
	ret = 0;
	goto done;
usage:
	fprintf(stderr, "usage: vmtracectl merge -o OUT.dat [--aux AUX] SAMPLE...\n");
	ret = 2;
done:
	if (fd >= 0)
		close(fd);
	for (uint32_t c = 0; c < ncpus; c++) {
		if (pages)
			free(pages[c]);
		if (cpus)
			free((void *)cpus[c].pages);
		if (stats)
			free(stats[c]);
	}
	free(pages);
	free(npages);
	free(cpus);
	free(stats);
	free(ptrs);
	for (int i = 0; i < nsamples; i++)
		sample_free(samples[i]);
	free(samples);
	aux_free(&aux);
	return ret;
}
