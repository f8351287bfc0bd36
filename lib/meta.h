/* SPDX-License-Identifier: MIT */
/*
 * meta: the guest metadata bundle, the files a host needs to decode the
 * guest's pages later: events/header_page, events/header_event,
 * events/<system>/<event>/format, printk_formats, saved_cmdlines,
 * saved_tgids, kallsyms, trace_clock. Named as in tracefs
 * (kallsyms is /proc/kallsyms).
 *
 * Encoding: back-to-back entries, little-endian:
 *   u32 name_len, u32 data_len, name (no NUL), data
 * The bundle comes from the guest: meta_validate() checks every entry
 * against the limits before anything else reads it.
 */
#ifndef VMT_META_H
#define VMT_META_H

#include <stddef.h>
#include <stdint.h>

#define VMT_META_NAME_MAX 255
#define VMT_META_MAX_FILES 65536

struct vmt_buf;

struct vmt_meta_entry {
	const char *name;	/* not NUL-terminated */
	uint32_t name_len;
	const uint8_t *data;
	uint32_t data_len;
};

/* Append one file. */
int meta_add(struct vmt_buf *b, const char *name, const void *data, uint32_t len);

/*
 * 0 if the bundle is well formed: every entry inside it, names of
 * [A-Za-z0-9_.:+-] and '/', relative, no "..", no empty component, at most
 * VMT_META_MAX_FILES entries, no duplicate, and events/header_page present.
 * -EBADMSG otherwise, with a reason in why (a static string).
 */
int meta_validate(const uint8_t *bundle, size_t len, const char **why);

/* Iterate: *pos starts at 0; returns 1 with e filled, 0 at the end, -EBADMSG. */
int meta_next(const uint8_t *bundle, size_t len, size_t *pos, struct vmt_meta_entry *e);

/* Look one file up by name; 0 and e filled, or -ENOENT. */
int meta_find(const uint8_t *bundle, size_t len, const char *name, struct vmt_meta_entry *e);

/*
 * Task tables: a bundle of only saved_cmdlines and saved_tgids (each at
 * most once), the names of the tasks a guest ran, refreshed at each dump
 * (the aux file has them as they were at the session's start).
 */
#define VMT_TASKS_MAX (1u << 20)
/* 0 if tasks is such a bundle of at most VMT_TASKS_MAX bytes; -EBADMSG and why. */
int meta_tasks_validate(const uint8_t *tasks, size_t len, const char **why);

/*
 * saved_cmdlines texts ("PID COMM" per line) merged into one, for the
 * pids of all of them; a later text's name wins. Lines that do not read
 * as "PID COMM" are dropped. out is cleared first; sorted by pid.
 */
int meta_cmdlines_merge(struct vmt_buf *out, const char *const *texts, const size_t *lens,
			size_t n);

#endif
