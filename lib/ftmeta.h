/* SPDX-License-Identifier: MIT */
/*
 * ftmeta: what the agent (in the guest, top-level instance) and the host
 * source (its own instance) both read from and write to tracefs: the event
 * lists of record.events and host.events matched against the kernel's
 * events and applied to an instance, the metadata bundle (lib/meta.h) and
 * the task tables. Plain file I/O on the folders the caller names, so a
 * fake tracefs in a temporary folder serves as well; no logging and no
 * globals: -errno and a one-line reason for the caller to log.
 *
 * Event patterns, as vmtraced.yaml(5) documents them (tracefs set_event
 * names, narrowed): "system:event", where either part may use `*` for any
 * run of characters, or one name alone, which matches a system or an event
 * of that name. Letters, digits, `_` and `*`, at most one `:`, none at
 * either end. Case matters.
 */
#ifndef VMT_FTMETA_H
#define VMT_FTMETA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct vmt_buf;

/* Where the files are. For the top-level instance inst is top. */
struct vmt_ftmeta {
	const char *top;	/* tracefs: available_events, event formats, printk_formats,
				 * saved_cmdlines, saved_tgids */
	const char *inst;	/* the instance recorded: set_event, events/header_page,
				 * events/header_event, trace_clock, events' enable files */
	const char *kallsyms;	/* "/proc/kallsyms"; NULL leaves it out */
	size_t max;		/* the bundle's bound (-EFBIG past it); 0: none */
};

/* Bytes read of one tracefs file at most: kallsyms is several MiB. */
#define VMT_FTMETA_FILE_MAX (256u << 20)

/* One pattern of len bytes, as documented above: true if well formed. */
bool ftmeta_pattern_valid(const char *s, size_t len);

/*
 * Pure: expands the comma-separated patterns of list (len bytes; spaces
 * around commas and empty entries are ignored) against avail ("sys:event"
 * strings, n of them, sorted). *out is a sorted, distinct, malloc'd array
 * of pointers into avail. Returns how many patterns matched nothing, their
 * names ", "-separated in missing (cut short if it is small); -EINVAL with
 * the pattern named in missing if one is malformed; -ENOMEM.
 */
int ftmeta_match(const char *list, size_t len, char *const *avail, size_t n, char ***out,
		 size_t *nout, char *missing, size_t missing_size);

/* An event list matched against a kernel, before it is applied. */
struct vmt_ftmeta_events {
	char **want;		/* sorted, distinct "sys:event" */
	size_t nwant;
	size_t ncur;		/* events the instance had enabled */
	unsigned unmatched;	/* patterns that matched no event */
	char missing[256];	/* those, ", "-separated, cut short if long */
	/* private */
	char *avail_text, *cur_text;
	char **avail, **cur;
};

/*
 * Reads top/available_events and inst/set_event and matches list against
 * them into ev (free it with ftmeta_events_free, also after a failure).
 * Returns ev->unmatched (the caller decides whether that is fatal), or
 * -errno with a reason in err.
 */
int ftmeta_events_plan(const struct vmt_ftmeta *f, const char *list, size_t len,
		       struct vmt_ftmeta_events *ev, char *err, size_t errlen);
/*
 * Makes the instance's enabled set exactly ev->want by writing only the
 * enable files of events whose state differs: an event already on is not
 * touched, so its tracepoint is not patched again. *written counts the
 * files written. Stops at the first write that fails: -errno and why.
 */
int ftmeta_events_apply(const struct vmt_ftmeta *f, const struct vmt_ftmeta_events *ev,
			unsigned *written, char *err, size_t errlen);
void ftmeta_events_free(struct vmt_ftmeta_events *ev);

struct vmt_ftmeta_count {
	uint32_t files;		/* entries in the bundle */
	uint32_t systems;	/* systems with an enabled event (ftrace aside) */
};

/*
 * Appends the metadata bundle to b, in this order: events/header_page and
 * events/header_event (required), the formats of every event of the
 * system ftrace and of each system with an event enabled in inst/set_event
 * (sorted by system, in directory order within one; a system with no
 * event is an error), then printk_formats, saved_cmdlines, saved_tgids,
 * trace_clock and kallsyms when they can be read. -errno with the file in
 * err; -EFBIG past f->max.
 */
int ftmeta_bundle(const struct vmt_ftmeta *f, struct vmt_buf *b, struct vmt_ftmeta_count *n,
		  char *err, size_t errlen);

/*
 * The task tables as they are now, into b (emptied first): saved_cmdlines,
 * then saved_tgids if it can be read and both fit in VMT_TASKS_MAX, a
 * bundle meta_tasks_validate() accepts. -EFBIG if saved_cmdlines alone
 * does not fit; -errno with the file in err.
 */
int ftmeta_tasks(const struct vmt_ftmeta *f, struct vmt_buf *b, char *err, size_t errlen);

#endif
