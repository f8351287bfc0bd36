/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tracefs.h>

#include "ftmeta.h"
#include "ftrace.h"
#include "log.h"
#include "proto.h"
#include "util.h"

static const char *tracing_dir;

int ftrace_open(void)
{
	/* libtracefs mounts tracefs at /sys/kernel/tracing when it is not yet */
	tracing_dir = tracefs_tracing_dir();
	if (!tracing_dir)
		return log_error_errno(errno ? -errno : -ENOENT, "tracefs not found and not mountable: %m");
	log_debug("tracefs at %s", tracing_dir);
	return 0;
}

const char *ftrace_dir(void)
{
	return tracing_dir;
}

static int tfs_path(char *buf, size_t size, const char *name)
{
	int n = snprintf(buf, size, "%s/%s", tracing_dir, name);

	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

/* The agent records the top-level instance. */
static struct vmt_ftmeta ftrace_ftmeta(void)
{
	return (struct vmt_ftmeta){ .top = tracing_dir, .inst = tracing_dir,
				    .kallsyms = "/proc/kallsyms" };
}

int ftrace_marker_open(void)
{
	char path[1024];
	int fd, r = tfs_path(path, sizeof(path), "trace_marker");

	if (r < 0)
		return r;
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return log_warning_errno(-errno, "%s: %m", path);
	return fd;
}

static int tfs_read(const char *name, char **out, size_t *len)
{
	char path[1024];
	int r = tfs_path(path, sizeof(path), name);

	return r < 0 ? r : read_file(path, VMT_FTMETA_FILE_MAX, out, len);
}

static int tfs_write(const char *name, const char *val)
{
	errno = 0;
	if (tracefs_instance_file_write(NULL, name, val) < 0)
		return errno ? -errno : -EIO;
	return 0;
}

int ftrace_clock(char *buf, size_t size)
{
	char *c = tracefs_get_clock(NULL);

	if (!c)
		return -ENOENT;
	snprintf(buf, size, "%s", c);
	free(c);
	return 0;
}

int ftrace_tracing_on(int on)
{
	int r = on ? tracefs_trace_on(NULL) : tracefs_trace_off(NULL);

	return r < 0 ? log_error_errno(-EIO, "tracing_on=%d failed", on) : 0;
}

static int setup_events(const char *list, size_t len, unsigned *changed, char *err, size_t errlen)
{
	struct vmt_ftmeta f = ftrace_ftmeta();
	struct vmt_ftmeta_events ev;
	int r = ftmeta_events_plan(&f, list, len, &ev, err, errlen);

	if (r > 0) {
		snprintf(err, errlen, "no event matches '%s'", ev.missing);
		r = -ENOENT;
	}
	if (r >= 0)
		r = ftmeta_events_apply(&f, &ev, changed, err, errlen);
	if (r >= 0)
		log_info("events: %zu wanted, %zu were on, %u enable files written", ev.nwant,
			 ev.ncur, *changed);
	ftmeta_events_free(&ev);
	return r;
}

static int setup_buffer(uint32_t kb, char *err, size_t errlen)
{
	long long cur = -1;

	/* "7 (expanded: 1408)" before first use reads as 7: resize then */
	if (tracefs_instance_file_read_number(NULL, "buffer_size_kb", &cur) == 0 && cur == kb)
		return 0;
	if (tracefs_instance_set_buffer_size(NULL, kb, -1) < 0) {
		int r = errno ? -errno : -EIO;
		snprintf(err, errlen, "buffer_size_kb=%u: %s", kb, strerror(-r));
		return r;
	}
	return 0;
}

static int setup_clock(const char *clock, char *err, size_t errlen)
{
	char cur[VMT_STR_CLOCK];
	int r;

	if (ftrace_clock(cur, sizeof(cur)) == 0 && !strcmp(cur, clock))
		return 0;
	r = tfs_write("trace_clock", clock);
	if (r < 0)
		snprintf(err, errlen, "trace_clock=%s: %s", clock, strerror(-r));
	return r;
}

#define CMDLINES_SIZE 4096	/* task names kept by the kernel, at least */

static int setup_cmdlines_size(void)
{
	_cleanup_free_ char *cur = NULL;
	char v[16];
	size_t len;
	int r = tfs_read("saved_cmdlines_size", &cur, &len);

	if (r < 0)
		return r;
	if (strtoul(cur, NULL, 10) >= CMDLINES_SIZE)
		return 0;
	snprintf(v, sizeof(v), "%d", CMDLINES_SIZE);
	return tracefs_instance_file_write(NULL, "saved_cmdlines_size", v) < 0 ? -EIO : 0;
}

int ftrace_setup(const struct vmt_start *s, unsigned *changed, char *err, size_t errlen)
{
	int r;

	*changed = 0;
	err[0] = 0;
	if (tracefs_trace_off(NULL) < 0) {
		snprintf(err, errlen, "tracing_on=0 failed");
		return -EIO;
	}
	if (s->buffer_kb && (r = setup_buffer(s->buffer_kb, err, errlen)) < 0)
		return r;
	if (s->clock[0] && (r = setup_clock(s->clock, err, errlen)) < 0)
		return r;
	if (s->events_len && !(s->flags & VMT_START_KEEP_EVENTS) &&
	    (r = setup_events(s->events, s->events_len, changed, err, errlen)) < 0)
		return r;
	/* the kernel remembers the names of 128 tasks by default: a window of
	 * minutes sees more; the names go out with every dump (ftrace_tasks) */
	if (setup_cmdlines_size() < 0)
		log_debug("saved_cmdlines_size stays as it was");
	/* opening `trace` with O_TRUNC empties every CPU buffer and zeroes the
	 * per-CPU counters, so "read events" counts this session only */
	errno = 0;
	if (tracefs_instance_file_clear(NULL, "trace") < 0) {
		r = errno ? -errno : -EIO;
		snprintf(err, errlen, "clearing the buffer failed: %s", strerror(-r));
		return r;
	}
	return 0;
}

int ftrace_meta(struct vmt_buf *b, uint32_t *files)
{
	struct vmt_ftmeta f = ftrace_ftmeta();
	struct vmt_ftmeta_count n;
	char err[512];
	int fd, r;

	/* with kptr_restrict set, /proc/kallsyms shows zero addresses */
	fd = open("/proc/sys/kernel/kptr_restrict", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (write(fd, "0\n", 2) != 2)
			log_debug("kptr_restrict stays as it was");
		close(fd);
	}
	r = ftmeta_bundle(&f, b, &n, err, sizeof(err));
	*files = n.files;
	return r < 0 ? log_error_errno(r, "metadata: %s", err) : 0;
}

int ftrace_tasks(struct vmt_buf *b)
{
	struct vmt_ftmeta f = ftrace_ftmeta();
	char err[512];
	int r = ftmeta_tasks(&f, b, err, sizeof(err));

	return r < 0 && r != -EFBIG ? log_error_errno(r, "task tables: %s", err) : r;
}

/* "123.456789" (in-ns clocks print µs) or "123456" (counter clocks) */
static uint64_t parse_ts(const char *v)
{
	char *end;
	uint64_t sec = strtoull(v, &end, 10), frac = 0;
	int digits = 0;

	if (*end != '.')
		return sec;
	for (end++; isdigit((unsigned char)*end) && digits < 9; end++, digits++)
		frac = frac * 10 + (uint64_t)(*end - '0');
	for (; digits < 9; digits++)
		frac *= 10;
	return sec * 1000000000ull + frac;
}

int ftrace_parse_stats(const char *text, size_t len, struct vmt_cpu_stats *st)
{
	static const struct {
		const char *name;
		size_t off;
		int ts;
	} fields[] = {
		{ "entries", offsetof(struct vmt_cpu_stats, entries), 0 },
		{ "overrun", offsetof(struct vmt_cpu_stats, overrun), 0 },
		{ "commit overrun", offsetof(struct vmt_cpu_stats, commit_overrun), 0 },
		{ "bytes", offsetof(struct vmt_cpu_stats, bytes), 0 },
		{ "oldest event ts", offsetof(struct vmt_cpu_stats, oldest_ts), 1 },
		{ "now ts", offsetof(struct vmt_cpu_stats, now_ts), 1 },
		{ "dropped events", offsetof(struct vmt_cpu_stats, dropped), 0 },
		{ "read events", offsetof(struct vmt_cpu_stats, read), 0 },
	};
	const char *p = text, *end = text + len;
	int have_read = 0;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *colon;
		size_t ll = nl ? (size_t)(nl - p) : (size_t)(end - p);
		char line[128];

		if (ll < sizeof(line)) {
			memcpy(line, p, ll);
			line[ll] = 0;
			colon = strchr(line, ':');
			for (size_t i = 0; colon && i < ARRAY_SIZE(fields); i++) {
				const char *v = colon + 1;
				uint64_t *f = (uint64_t *)((char *)st + fields[i].off);

				if (strlen(fields[i].name) != (size_t)(colon - line) ||
				    memcmp(line, fields[i].name, (size_t)(colon - line)))
					continue;
				while (*v == ' ' || *v == '\t')
					v++;
				*f = fields[i].ts ? parse_ts(v) : strtoull(v, NULL, 10);
				have_read |= f == &st->read;
			}
		}
		p += ll + 1;
	}
	return have_read ? 0 : -EBADMSG;
}

int ftrace_cpu_stats(unsigned cpu, struct vmt_cpu_stats *st)
{
	_cleanup_free_ char *text = NULL;
	char name[64];
	size_t len;
	uint64_t sent = st->bytes_sent;
	int r;

	snprintf(name, sizeof(name), "per_cpu/cpu%u/stats", cpu);
	r = tfs_read(name, &text, &len);
	if (r < 0)
		return r;
	memset(st, 0, sizeof(*st));
	st->bytes_sent = sent;
	return ftrace_parse_stats(text, len, st);
}
