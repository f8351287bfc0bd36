/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tracefs.h>

#include "ftrace.h"
#include "log.h"
#include "meta.h"
#include "proto.h"
#include "util.h"

/* tracefs files report size 0 and kallsyms is large: read to EOF, bounded */
#define FILE_MAX (256u << 20)

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

	return r < 0 ? r : read_file(path, FILE_MAX, out, len);
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

/* Splits text into NUL-terminated lines in place, skipping empty ones. */
static int split_lines(char *text, char ***out, size_t *n)
{
	size_t cap = 0, k = 0;
	char **v = NULL, *save = NULL;

	for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		if (k == cap) {
			char **t = realloc(v, (cap = cap ? cap * 2 : 256) * sizeof(*v));
			if (!t) {
				free(v);
				return -ENOMEM;
			}
			v = t;
		}
		v[k++] = l;
	}
	*out = v;
	*n = k;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int pattern_ok(const char *p)
{
	if (!*p)
		return 0;
	for (; *p; p++)
		if (!isalnum((unsigned char)*p) && !strchr("_.-*?:", *p))
			return 0;
	return 1;
}

/* One pattern against "sys:event", with set_event's meaning: "sys:ev" (globs
 * allowed), "sys:" for a whole system, a bare word for a system or an event. */
static int pattern_match(const char *pat, const char *sysev)
{
	const char *pc = strchr(pat, ':'), *ec = strchr(sysev, ':');
	char ps[256], es[256];

	if (!ec || (size_t)(ec - sysev) >= sizeof(es) || strlen(pat) >= sizeof(ps))
		return 0;
	memcpy(es, sysev, (size_t)(ec - sysev));
	es[ec - sysev] = 0;
	if (!pc)
		return !fnmatch(pat, es, 0) || !fnmatch(pat, ec + 1, 0);
	memcpy(ps, pat, (size_t)(pc - pat));
	ps[pc - pat] = 0;
	return !fnmatch(ps, es, 0) && (!pc[1] || !fnmatch(pc + 1, ec + 1, 0));
}

int ftrace_match_events(const char *list, size_t len, char **avail, size_t n,
			char ***out, size_t *nout, char *err, size_t errlen)
{
	char *hit = calloc(n ? n : 1, 1), **v;
	size_t i = 0, k = 0;
	int r = 0;

	if (!hit)
		return -ENOMEM;
	while (i < len && r == 0) {
		char pat[256];
		size_t j = i, a, b;
		int any = 0;

		while (j < len && list[j] != ',')
			j++;
		for (a = i; a < j && list[a] == ' '; a++)
			;
		for (b = j; b > a && list[b - 1] == ' '; b--)
			;
		i = j + 1;
		if (a == b)
			continue;
		if (b - a >= sizeof(pat)) {
			snprintf(err, errlen, "event pattern too long");
			r = -EINVAL;
			break;
		}
		memcpy(pat, list + a, b - a);
		pat[b - a] = 0;
		if (!pattern_ok(pat) || strchr(strchr(pat, ':') ? strchr(pat, ':') + 1 : pat, ':')) {
			snprintf(err, errlen, "bad event pattern '%s'", pat);
			r = -EINVAL;
			break;
		}
		for (size_t e = 0; e < n; e++)
			if (pattern_match(pat, avail[e]))
				hit[e] = any = 1;
		if (!any) {
			snprintf(err, errlen, "no event matches '%s'", pat);
			r = -ENOENT;
		}
	}
	if (r < 0) {
		free(hit);
		return r;
	}
	v = malloc((n ? n : 1) * sizeof(*v));
	if (!v) {
		free(hit);
		return -ENOMEM;
	}
	for (size_t e = 0; e < n; e++)
		if (hit[e] && (!k || strcmp(v[k - 1], avail[e])))
			v[k++] = avail[e];
	free(hit);
	*out = v;
	*nout = k;
	return 0;
}

static int event_set_enable(const char *sysev, const char *val)
{
	char sys[256];
	const char *c = strchr(sysev, ':');

	if (!c || (size_t)(c - sysev) >= sizeof(sys))
		return -EINVAL;
	memcpy(sys, sysev, (size_t)(c - sysev));
	sys[c - sysev] = 0;
	errno = 0;
	if (tracefs_event_file_write(NULL, sys, c + 1, "enable", val) < 0)
		return errno ? -errno : -EIO;
	return 0;
}

/*
 * Makes the enabled set exactly want (sorted) by writing only the enable
 * files of events whose state differs: an event already on is not touched,
 * so its tracepoint is not re-patched.
 */
static int events_apply(char **want, size_t nw, char **cur, size_t nc, unsigned *changed,
			char *err, size_t errlen)
{
	size_t i = 0, j = 0;
	int r;

	while (i < nw || j < nc) {
		int c = i == nw ? 1 : j == nc ? -1 : strcmp(want[i], cur[j]);
		const char *ev = c < 0 ? want[i] : cur[j];

		if (c == 0) {
			i++, j++;
			continue;
		}
		r = event_set_enable(ev, c < 0 ? "1" : "0");
		if (r < 0) {
			snprintf(err, errlen, "cannot %s %s: %s", c < 0 ? "enable" : "disable", ev,
				 strerror(-r));
			return r;
		}
		log_debug("%s %s", c < 0 ? "enabled" : "disabled", ev);
		(*changed)++;
		if (c < 0)
			i++;
		else
			j++;
	}
	return 0;
}

static int setup_events(const char *list, size_t len, unsigned *changed, char *err, size_t errlen)
{
	_cleanup_free_ char *avail_txt = NULL, *cur_txt = NULL;
	_cleanup_free_ char **avail = NULL, **cur = NULL, **want = NULL;
	size_t alen, clen, na, nc, nw;
	int r;

	r = tfs_read("available_events", &avail_txt, &alen);
	if (r >= 0)
		r = tfs_read("set_event", &cur_txt, &clen);
	if (r < 0) {
		snprintf(err, errlen, "cannot read available_events/set_event: %s", strerror(-r));
		return r;
	}
	if (split_lines(avail_txt, &avail, &na) < 0 || split_lines(cur_txt, &cur, &nc) < 0)
		return -ENOMEM;
	qsort(avail, na, sizeof(*avail), cmp_str);
	qsort(cur, nc, sizeof(*cur), cmp_str);
	r = ftrace_match_events(list, len, avail, na, &want, &nw, err, errlen);
	if (r < 0)
		return r;
	r = events_apply(want, nw, cur, nc, changed, err, errlen);
	if (r >= 0)
		log_info("events: %zu wanted, %zu were on, %u enable files written", nw, nc, *changed);
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

static int meta_add_path(struct vmt_buf *b, uint32_t *files, const char *name, const char *path,
			 int required)
{
	_cleanup_free_ char *data = NULL;
	size_t len;
	int r = read_file(path, FILE_MAX, &data, &len);

	if (r < 0) {
		if (!required && (r == -ENOENT || r == -EACCES || r == -EPERM))
			return 0;
		return log_error_errno(r, "metadata: %s: %m", path);
	}
	r = meta_add(b, name, data, (uint32_t)len);
	if (r < 0)
		return log_error_errno(r, "metadata: %s: %m", name);
	(*files)++;
	return 0;
}

static int meta_add_tfs(struct vmt_buf *b, uint32_t *files, const char *name, int required)
{
	char path[1024];
	int r = tfs_path(path, sizeof(path), name);

	return r < 0 ? r : meta_add_path(b, files, name, path, required);
}

static int meta_add_system(struct vmt_buf *b, uint32_t *files, const char *sys)
{
	char **evs = tracefs_system_events(tracing_dir, sys);
	int r = 0;

	if (!evs)
		return log_error_errno(-ENOENT, "metadata: no events in system %s", sys);
	for (char **e = evs; *e && r >= 0; e++) {
		char name[512];

		snprintf(name, sizeof(name), "events/%s/%s/format", sys, *e);
		r = meta_add_tfs(b, files, name, 0);
	}
	tracefs_list_free(evs);
	return r;
}

/* The systems with at least one enabled event, from set_event: distinct
 * "sys" prefixes, as a malloc'd sorted list of pointers into text. */
static int enabled_systems(char *text, char ***out, size_t *n)
{
	char **v;
	size_t k = 0, nl;
	int r = split_lines(text, &v, &nl);

	if (r < 0)
		return r;
	for (size_t i = 0; i < nl; i++) {
		char *c = strchr(v[i], ':');
		if (c)
			*c = 0;
	}
	qsort(v, nl, sizeof(*v), cmp_str);
	for (size_t i = 0; i < nl; i++)
		if (strcmp(v[i], "ftrace") && (!k || strcmp(v[k - 1], v[i])))
			v[k++] = v[i];
	*out = v;
	*n = k;
	return 0;
}

int ftrace_meta(struct vmt_buf *b, uint32_t *files)
{
	_cleanup_free_ char *set = NULL;
	_cleanup_free_ char **sys = NULL;
	size_t len, nsys;
	int fd, r;

	*files = 0;
	r = meta_add_tfs(b, files, "events/header_page", 1);
	if (r >= 0)
		r = meta_add_tfs(b, files, "events/header_event", 1);
	if (r >= 0)
		r = meta_add_system(b, files, "ftrace");
	if (r < 0)
		return r;
	r = tfs_read("set_event", &set, &len);
	if (r < 0)
		return log_error_errno(r, "metadata: set_event: %m");
	r = enabled_systems(set, &sys, &nsys);
	for (size_t i = 0; r >= 0 && i < nsys; i++)
		r = meta_add_system(b, files, sys[i]);
	if (r >= 0)
		r = meta_add_tfs(b, files, "printk_formats", 0);
	if (r >= 0)
		r = meta_add_tfs(b, files, "saved_cmdlines", 0);
	if (r >= 0)
		r = meta_add_tfs(b, files, "saved_tgids", 0);
	if (r >= 0)
		r = meta_add_tfs(b, files, "trace_clock", 0);
	if (r < 0)
		return r;
	/* with kptr_restrict set, /proc/kallsyms shows zero addresses */
	fd = open("/proc/sys/kernel/kptr_restrict", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (write(fd, "0\n", 2) != 2)
			log_debug("kptr_restrict stays as it was");
		close(fd);
	}
	return meta_add_path(b, files, "kallsyms", "/proc/kallsyms", 0);
}

int ftrace_tasks(struct vmt_buf *b)
{
	uint32_t files = 0;
	size_t cmdlines;
	int r;

	b->len = 0;
	r = meta_add_tfs(b, &files, "saved_cmdlines", 1);
	if (r < 0)
		return r;
	if (b->len > VMT_TASKS_MAX) {
		b->len = 0;
		return -EFBIG;
	}
	cmdlines = b->len;
	r = meta_add_tfs(b, &files, "saved_tgids", 0);
	if (r < 0 || b->len > VMT_TASKS_MAX)
		b->len = cmdlines;
	return 0;
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
