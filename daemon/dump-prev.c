/* SPDX-License-Identifier: MIT */
/*
 * dump-prev: a sample of a guest's previous boot from the pages its
 * persistent ring buffer kept (guest-prev.c checked them): the job takes
 * each CPU's buffer (job->partial, freed with it), written like any
 * sample, under the aux that boot's pages decode with; the writer's answer
 * gives their memory back to the guest's count (guest_prev_written). Not a dump request: no flush, no window frozen, and
 * no budget of its own (the guest's sessions_per_minute bound it: one set
 * per session, a ring's worth of pages per CPU).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dump-int.h"
#include "guest.h"
#include "log.h"
#include "page.h"

static void prev_cpu(struct vmt_prev_set *set, uint32_t c, uint8_t **own, struct vmt_sample_cpu *sc,
		     struct vmt_iovec *iov)
{
	uint32_t ps = set->layout->page_size;
	uint8_t *dst;

	sc->cpu = c;
	if (c >= set->ncpus || !set->npages[c])
		return;
	dst = *own = set->cpu[c].data;
	set->cpu[c] = (struct vmt_buf){ 0 };
	sc->npages = set->npages[c];
	sc->first_ts = UINT64_MAX;
	for (uint32_t i = 0; i < sc->npages; i++) {
		struct vmt_page_info info;

		if (page_scan(set->layout, dst + (size_t)i * ps, &info) < 0)
			continue;	/* checked as it came: cannot happen */
		if (info.events) {
			sc->first_ts = VMT_MIN(sc->first_ts, info.first_ts);
			sc->last_ts = VMT_MAX(sc->last_ts, info.last_ts);
		}
		sc->events += info.events;
		sc->counters.pages_guest_lost += info.missed_flag;
	}
	if (sc->first_ts > sc->last_ts)
		sc->first_ts = sc->last_ts;
	sc->counters.pages_in = sc->npages;
	sc->counters.bytes_in = (uint64_t)sc->npages * ps;
	sc->counters.events_in = sc->events;
	sc->counters.pages_rejected = set->rejected[c];
	sc->counters.bytes_rejected = set->rejected[c] * ps;
	iov->base = dst;
	iov->len = (size_t)sc->npages * ps;
	sc->iov = iov;
	sc->niov = 1;
}

void dump_guest_prev(struct vmt_dumps *ds, struct vmt_guest *g, struct vmt_prev_set *set)
{
	struct vmt_job *job = calloc(1, sizeof(*job));
	struct vmt_sample *s;
	uint64_t total = 0;
	uint32_t ps = set->layout->page_size, n = set->nrings;

	for (uint32_t c = 0; c < set->ncpus; c++)
		total += set->npages[c];
	if (!job || !n || set->ncpus > n)
		goto fail;
	s = &job->sample;
	job->kind = VMT_JOB_SAMPLE;
	dump_job_retention(ds, job);
	job->zstd_level = ds->conf->zstd_level;
	snprintf(job->dir, sizeof(job->dir), "%s/%s", ds->conf->state_dir, set->guest);
	/* job_free() frees partial and iovs: the pages and their pieces */
	job->partial = calloc(n, sizeof(*job->partial));
	job->iovs = calloc(n, sizeof(*job->iovs));
	s->cpus = calloc(n, sizeof(*s->cpus));
	if (!job->partial || !job->iovs || !s->cpus)
		goto fail;
	snprintf(s->guest, sizeof(s->guest), "%s", set->guest);
	snprintf(s->host, sizeof(s->host), "%s", ds->hostname);
	s->aux_version = set->aux_version;
	s->aux_id = set->aux_id;
	s->created_ns = now_realtime_ns();
	s->page_size = ps;
	s->ncpus = n;
	s->ntriggers = 1;
	s->triggers[0] = set->trigger;
	for (uint32_t c = 0; c < n; c++)
		prev_cpu(set, c, &job->partial[c], &s->cpus[c], &job->iovs[c]);
	sample_file_name(job->name, sizeof(job->name), set->guest, s->created_ns);
	/* the aux in force decodes them (a boot this daemon did not hold):
	 * its file goes first, as for the window's own samples */
	if (set->queue_aux)
		dump_submit_aux(ds, g);
	ds->dumps++;
	writer_submit(ds->writer, job);
	return;
fail:
	log_guest(VMT_LOG_ERR, -ENOMEM, set->guest, "cannot queue the previous boot's sample: %m");
	ds->dump_errors++;
	job_free(job);
	guest_prev_written(g, total * ps);	/* what it took is freed */
}

void dump_prev_done(struct vmt_dumps *ds, const struct vmt_job *job)
{
	struct vmt_guest *g = guest_list_find(ds->guests, job->sample.guest);
	uint64_t bytes = 0;

	for (uint32_t c = 0; c < job->sample.ncpus; c++)
		bytes += (uint64_t)job->sample.cpus[c].npages * job->sample.page_size;
	if (g)
		guest_prev_written(g, bytes);
}
