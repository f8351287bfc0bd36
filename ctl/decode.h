/* SPDX-License-Identifier: MIT */
/*
 * decode: raw ftrace pages to events, with libtraceevent and nothing of
 * trace-cmd. A decoder is a tep handle set up from one aux metadata bundle
 * (the guest's own event formats, header_page, kallsyms, printk formats,
 * saved cmdlines); a cursor walks one page after another with kbuffer.
 *
 * Pages and bundles come from guests: a page is checked with page_scan()
 * before kbuffer sees it, every event is bounded by the page's commit, and
 * an event is handed to libtraceevent as a copy in a zero-padded buffer
 * large enough for any 16-bit dynamic-array offset and length, so that no
 * field read can leave it.
 */
#ifndef VMT_DECODE_H
#define VMT_DECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <traceevent/event-parse.h>

#include "page.h"

struct vmt_decoder;
struct kbuffer;

struct vmt_decode_info {
	uint32_t formats;	/* events/<system>/<event>/format entries */
	uint32_t formats_failed;	/* that libtraceevent refused, or left out: */
	uint32_t formats_crashed;	/* texts that crash libtraceevent's parser */
	bool kallsyms, printk, cmdlines;	/* found and parsed */
};

/*
 * A decoder for the pages of one guest boot. 0; -EBADMSG with why (a static
 * string) if the bundle is not well formed or its header_page is unusable;
 * -ENOMEM. A bundle without kallsyms etc. still decodes (no symbols).
 */
int decode_open(struct vmt_decoder **out, const uint8_t *bundle, size_t len,
		const struct vmt_page_layout *layout, struct vmt_decode_info *info,
		const char **why);
void decode_close(struct vmt_decoder *d);
struct tep_handle *decode_tep(struct vmt_decoder *d);

/* One event of a page: data points into the page. */
struct vmt_raw_event {
	uint64_t ts;		/* the guest's trace clock, absolute */
	const uint8_t *data;
	uint32_t size;
};

struct vmt_decode_cursor {
	struct vmt_decoder *d;
	struct kbuffer *kb;
	const uint8_t *page;
	const uint8_t *end;	/* end of the page's commit area */
	bool started;		/* kbuffer_read_event() done on this page */
	long long missed;	/* of the page loaded: -1 some, 0 none, N */
};

int decode_cursor_init(struct vmt_decode_cursor *c, struct vmt_decoder *d);
void decode_cursor_free(struct vmt_decode_cursor *c);
/*
 * Load one page; 0, or -EBADMSG with why if it is corrupt (the caller says
 * so once and goes on with the next page).
 */
int decode_page_load(struct vmt_decode_cursor *c, const uint8_t *page, const char **why);
/* The next event: 1, 0 at the end of the page, -EBADMSG if the rest of the
 * page is corrupt. */
int decode_page_next(struct vmt_decode_cursor *c, struct vmt_raw_event *ev);

/*
 * One CPU's pages, in time order, as events. A corrupt page is said once on
 * stderr (with label and cpu) and skipped. The caller fills the fields down
 * to user and calls decode_cursor_init(&s->cur, ...).
 */
struct vmt_decode_stream {
	struct vmt_decode_cursor cur;
	const uint8_t **pages;
	uint64_t npages, next_page;
	const char *label;	/* for messages */
	uint32_t cpu;
	uint32_t order;		/* ties on the time line: lower first */
	uint64_t (*to_line)(void *arg, uint32_t cpu, uint64_t ts);	/* NULL: the event's own */
	void *arg;
	void *user;
	struct vmt_raw_event ev;	/* the current event */
	uint64_t ts;		/* its time on the line */
	long long missed;	/* lost before the current page and not yet said: -1 some, N */
	uint64_t bad_pages;
};

/* The stream's next event into s->ev and s->ts: true, or false at its end. */
bool decode_stream_next(struct vmt_decode_stream *s);

/* Streams merged into one time line (a binary heap on ts, then order). */
struct vmt_decode_merge {
	struct vmt_decode_stream **heap;
	uint32_t n;
};

/* Takes each stream's first event; streams with none are left out. -ENOMEM. */
int decode_merge_init(struct vmt_decode_merge *m, struct vmt_decode_stream *streams, uint32_t n);
/* The stream holding the earliest event, NULL when every stream is done. */
struct vmt_decode_stream *decode_merge_top(const struct vmt_decode_merge *m);
/* Move the top stream on to its next event. */
void decode_merge_pop(struct vmt_decode_merge *m);
void decode_merge_free(struct vmt_decode_merge *m);

/* The event's type id (common_type). -1 if the event is too short to hold one. */
int decode_event_id(const struct vmt_raw_event *ev);
/* Whether a record may go through its format (only DECODE_OK may). */
enum vmt_decode_check {
	DECODE_OK,
	DECODE_SHORT,		/* shorter than the format's fixed fields */
	DECODE_BAD_FORMAT,	/* a field of the format lies outside any record */
	DECODE_BAD_DYNAMIC,	/* a __data_loc/__rel_loc field points outside the record */
};

/*
 * A record for tep_print_event(): ev copied into the decoder's buffer (valid
 * until the next call). Returns the event's format, or NULL if its id has
 * none. The guest wrote both the format and the record: *check says whether
 * every field the format names lies inside the record; anything but
 * DECODE_OK must not be printed through the format.
 */
struct tep_event *decode_record(struct vmt_decoder *d, const struct vmt_raw_event *ev, int cpu,
				struct tep_record *rec, enum vmt_decode_check *check);
/* The format of an id, NULL if unknown (cached). */
struct tep_event *decode_find(struct vmt_decoder *d, int id);

/*
 * For a bundle that goes where its formats are trusted (a trace.dat, read
 * by trace-cmd and KernelShark through libtraceevent, with no bounds
 * checks): unsafe[k] is set for each entry k (by its place in the bundle;
 * as many flags as entries) that crashes libtraceevent's parser (found in
 * a child, as decode_open() does), and for each format with a field
 * outside any record a page can hold, or a dynamic field that is not a
 * u32 (report shows each record of those as invalid). 0; -EBADMSG
 * with why if the bundle is malformed or its header_page crashes the
 * parser; -ENOMEM.
 */
struct vmt_decode_unsafe {
	uint32_t crashed;	/* entries that crash the parser */
	uint32_t outside;	/* formats with a field outside any record */
};
int decode_unsafe_entries(const uint8_t *bundle, size_t len, const struct vmt_page_layout *layout,
			  bool *unsafe, struct vmt_decode_unsafe *u, const char **why);

/* ---- filters ---- */

/* "0,2-3" into cpus[0..ncpus); -EINVAL for anything else (or a CPU >= ncpus). */
int decode_parse_cpus(const char *s, bool *cpus, unsigned ncpus);
/* "1234.5" seconds to ns, exactly (digits past the ninth are dropped); -EINVAL, -ERANGE. */
int decode_parse_seconds(const char *s, uint64_t *ns);
/*
 * Does e match one of the shell patterns? A pattern with ':' is matched
 * against "system:event" (sched:*), others against the event's name
 * (sched_switch, irq*).
 */
bool decode_event_matches(const struct tep_event *e, const char *const *patterns, unsigned n);

#endif
