/* SPDX-License-Identifier: MIT */
/*
 * corpus: real ftrace input for the suites. Reads a metadata directory in
 * tracefs layout into a meta bundle and a file of back-to-back ring-buffer
 * pages into memory, and captures this machine's own pages, at test time,
 * into the same layout as /work/shared/corpus/guest-6.1:
 *
 *   OUT/meta/events/header_page, header_event, <system>/<event>/format,
 *   OUT/meta/printk_formats, saved_cmdlines, saved_tgids, kallsyms,
 *   trace_clock, per_cpu/cpuN/stats
 *   OUT/pages/cpuN.raw     the pages as trace_pipe_raw gave them
 *   OUT/expected           "cpuN EVENTS" per CPU, as page_scan() counts them
 */
#ifndef VMT_TEST_CORPUS_H
#define VMT_TEST_CORPUS_H

#include <stddef.h>
#include <stdint.h>

struct vmt_buf;

#define CORPUS_MAX_CPUS 256

/* Append metadir's files to bundle with meta_add(): events/header_page,
 * events/header_event, events/<system>/<event>/format (sorted),
 * printk_formats, saved_cmdlines, saved_tgids, kallsyms, trace_clock. A file
 * that is absent is left out. 0 or -errno. */
int corpus_load_meta(const char *metadir, struct vmt_buf *bundle);

/* Read a file of whole pages; *pages is malloc'd. -EBADMSG if the size is
 * not a multiple of page_size. */
int corpus_load_pages(const char *file, uint32_t page_size, uint8_t **pages, size_t *npages);

/* Pointers to each page of a corpus_load_pages() buffer, malloc'd; NULL if
 * out of memory (or npages is 0: then nothing is needed). */
const uint8_t **corpus_page_ptrs(const uint8_t *pages, size_t npages, uint32_t page_size);

/* Read OUT/expected: counts[cpu] for every "cpuN COUNT" line, *ncpus one
 * past the highest CPU listed. */
int corpus_read_expected(const char *file, uint64_t counts[CORPUS_MAX_CPUS], unsigned *ncpus);

/*
 * Trace sched:* and irq:* in a fresh instance "vmt-test-<pid>" of the
 * tracefs at tracefs (NULL: libtracefs' own) for about seconds while forking
 * a few hundred processes, and write outdir as above. The instance is
 * removed on every path, and leftovers of dead test processes first.
 * -EPERM unless root. Callers skip on their own when not root or without
 * tracefs.
 */
int capture_host(const char *tracefs, unsigned seconds, const char *outdir);

#endif
