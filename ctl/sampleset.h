/* SPDX-License-Identifier: MIT */
/*
 * sampleset: the samples vmtracectl was given, read, checked and sorted into
 * groups of one guest boot (guest name + aux content id), each with its aux
 * file and, per CPU, its pages in time order with every page kept once.
 * merge, report and info read samples through it.
 *
 * Problems (a corrupt sample, a refused frame in one, a missing aux, a gap
 * between two samples, a guest split by a reboot) are printed to stderr, one
 * line each, and counted; what can still be used is kept.
 */
#ifndef VMT_SAMPLESET_H
#define VMT_SAMPLESET_H

#include <stdbool.h>
#include <stdint.h>

#include "aux.h"
#include "clocksync.h"
#include "page.h"
#include "sample.h"

struct vmt_sset_cpu {
	/* sset_cpu_load() .. sset_cpu_unload(): npages pointers, ascending time */
	const uint8_t **pages;
	/* from sset_cpu_load() on (they stay after sset_cpu_unload()) */
	bool loaded;
	uint64_t npages;
	uint64_t events;	/* events on those pages */
	uint64_t duplicates;	/* pages dropped because an earlier sample had them */
	/* a previous boot's persistent ring buffer (VMT_PREV_BOOT_REASON): its
	 * pages taken, those whose events the other samples had (dropped), and
	 * those cut to the events after the others' last one */
	uint64_t prev_pages, prev_dropped, prev_cut;
	uint64_t gaps;		/* places where pages are missing between two samples */
	uint64_t gap_pages;	/* pages missing there, as the stream sequence tells */
	uint64_t refused_frames;	/* frames the samples' reader refused (corrupt) */
	uint64_t refused_pages;	/* pages missing for that, as the samples tell */
	uint64_t first_ts, last_ts;	/* window over all samples, 0 if no page */
	uint8_t **blocks;	/* the pages' copies, held while loaded */
	uint32_t nblocks;
};

struct vmt_sset_group {
	char guest[VMT_NAME_MAX];
	uint64_t aux_id;
	uint32_t aux_version;
	struct vmt_aux aux;	/* read and checked against aux_id */
	/* ascending created_ns; checked whole, but holding no pages (their
	 * cpus[].npages, counters and refusals as sample_read() gives them) */
	struct vmt_sample **samples;
	uint32_t nsamples;
	const char **paths;	/* file of each sample */
	uint32_t ncpus, page_size;
	struct vmt_page_layout layout;	/* from the aux's events/header_page */
	struct vmt_sset_cpu *cpus;	/* ncpus */
	struct vmt_clock_info clock;	/* the samples' clock data put together */
	/* the bundle to decode with: the aux's, its task tables merged with the
	 * samples' (a later sample's name for a pid wins); aux.meta if no sample
	 * carries task tables */
	const uint8_t *meta;
	size_t meta_len;
	uint8_t *own_meta;	/* meta when it is not aux.meta */
	uint32_t tasks_samples;	/* samples that carried task tables */
	uint64_t trace_id;	/* stable id for trace.dat TRACEID/GUEST/TIME_SHIFT */
	bool boot_split;	/* another group has the same guest (it rebooted) */
};

struct vmt_sset {
	struct vmt_sset_group *groups;	/* by guest name, then boot order */
	uint32_t ngroups;
	uint32_t bad_samples;	/* unreadable or refused */
	uint32_t no_aux;	/* samples left out because their aux was missing or wrong */
	uint32_t bad_cpus;	/* a sample's CPU that no longer read at sset_cpu_load() */
	uint64_t max_memory;	/* each sample's read budget (vfile_budget()); 0: the default */
	bool quiet;		/* no per-problem lines on stderr */
	void (*progress)(void *arg, uint64_t done, uint64_t total);	/* bytes read; may be NULL */
	void *progress_arg;
};

/*
 * Read paths (sample files), check each whole (one CPU's pages in memory at
 * a time), group them; no pages are kept: sset_cpu_load() reads a group's
 * CPU when it is wanted.
 * aux_path, if not NULL, is the aux file to use for every group that needs
 * its id; otherwise each sample's aux is looked up beside it. 0, or -ENOMEM;
 * bad samples only count (see above). The set may end up with no group.
 */
int sset_load(struct vmt_sset *set, const char *const *paths, uint32_t npaths, const char *aux_path);
/*
 * A group's CPU c from each of its samples in turn: pages that parse, each
 * kept once (copied, so that only one sample's CPU is decoded at a time),
 * in time order, with npages, events, duplicates and the window set. A
 * sample whose CPU no longer reads is said and counted (bad_cpus). 0 or
 * -ENOMEM. sset_cpu_unload() lets the pages go.
 */
int sset_cpu_load(struct vmt_sset *set, struct vmt_sset_group *g, uint32_t c);
void sset_cpu_unload(struct vmt_sset_group *g, uint32_t c);
void sset_free(struct vmt_sset *set);

#endif
