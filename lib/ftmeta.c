/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ftmeta.h"
#include "meta.h"
#include "util.h"

/* ---- event lists ----------------------------------------------------------- */

bool ftmeta_pattern_valid(const char *s, size_t len)
{
	size_t colons = 0;

	if (!len || s[0] == ':' || s[len - 1] == ':')
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];

		if (ch == ':')
			colons++;
		else if (!isalnum(ch) && ch != '_' && ch != '*')
			return false;
	}
	return colons <= 1;
}

/* pat (valid, NUL-terminated) against "sys:event"; only `*` is special. */
static bool pattern_match(const char *pat, const char *sysev)
{
	const char *pc = strchr(pat, ':'), *ec = strchr(sysev, ':');
	char ps[256], es[256];

	if (!ec || (size_t)(ec - sysev) >= sizeof(es))
		return false;
	memcpy(es, sysev, (size_t)(ec - sysev));
	es[ec - sysev] = 0;
	if (!pc)
		return !fnmatch(pat, es, 0) || !fnmatch(pat, ec + 1, 0);
	if ((size_t)(pc - pat) >= sizeof(ps))
		return false;
	memcpy(ps, pat, (size_t)(pc - pat));
	ps[pc - pat] = 0;
	return !fnmatch(ps, es, 0) && !fnmatch(pc + 1, ec + 1, 0);
}

static void note_add(char *s, size_t size, const char *name)
{
	size_t o = strlen(s);

	if (size)
		snprintf(s + o, size - o, "%s%s", o ? ", " : "", name);
}

int ftmeta_match(const char *list, size_t len, char *const *avail, size_t n, char ***out,
		 size_t *nout, char *missing, size_t missing_size)
{
	_cleanup_free_ char *copy = strndup(list, len), *hit = calloc(n ? n : 1, 1);
	char **v, *save = NULL;
	size_t k = 0;
	int unmatched = 0;

	if (missing_size)
		missing[0] = 0;
	if (!copy || !hit)
		return -ENOMEM;
	for (char *p = strtok_r(copy, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
		size_t pl;
		bool any = false;

		p += strspn(p, " ");
		for (pl = strlen(p); pl && p[pl - 1] == ' '; pl--)
			;
		p[pl] = 0;
		if (!pl)
			continue;
		if (!ftmeta_pattern_valid(p, pl)) {
			if (missing_size)
				snprintf(missing, missing_size, "bad event pattern '%s'", p);
			return -EINVAL;
		}
		for (size_t e = 0; e < n; e++)
			if (pattern_match(p, avail[e]))
				hit[e] = any = true;
		if (!any) {
			unmatched++;
			note_add(missing, missing_size, p);
		}
	}
	v = malloc((n ? n : 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t e = 0; e < n; e++)
		if (hit[e] && (!k || strcmp(v[k - 1], avail[e])))
			v[k++] = avail[e];
	*out = v;
	*nout = k;
	return unmatched;
}

/* ---- files ----------------------------------------------------------------- */

static int path_join(char *buf, size_t size, const char *dir, const char *name)
{
	int n = snprintf(buf, size, "%s/%s", dir, name);

	return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

static int fail(char *err, size_t errlen, int r, const char *what)
{
	snprintf(err, errlen, "%s: %s", what, strerror(-r));
	return r;
}

/* dir/name read whole; -errno with the path in err. */
static int read_in(const char *dir, const char *name, char **out, size_t *len, char *err,
		   size_t errlen)
{
	char path[4096];
	int r = path_join(path, sizeof(path), dir, name);

	if (r >= 0)
		r = read_file(path, VMT_FTMETA_FILE_MAX, out, len);
	return r < 0 ? fail(err, errlen, r, path) : 0;
}

static int write_in(const char *dir, const char *name, const char *val)
{
	char path[4096];
	int fd, r = path_join(path, sizeof(path), dir, name);

	if (r < 0)
		return r;
	fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = write_full(fd, val, strlen(val));
	close(fd);
	return r;
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

/* dir/name as sorted lines, pointing into *text. */
static int read_lines(const char *dir, const char *name, char **text, char ***lines, size_t *n,
		      char *err, size_t errlen)
{
	size_t len;
	int r = read_in(dir, name, text, &len, err, errlen);

	if (r >= 0 && split_lines(*text, lines, n) < 0)
		r = -ENOMEM;
	if (r >= 0 && *n)	/* an empty file gives no array */
		qsort(*lines, *n, sizeof(**lines), cmp_str);
	return r;
}

/* ---- applying an event list ------------------------------------------------ */

int ftmeta_events_plan(const struct vmt_ftmeta *f, const char *list, size_t len,
		       struct vmt_ftmeta_events *ev, char *err, size_t errlen)
{
	size_t navail;
	int r;

	*ev = (struct vmt_ftmeta_events){ 0 };
	r = read_lines(f->top, "available_events", &ev->avail_text, &ev->avail, &navail, err,
		       errlen);
	if (r >= 0)
		r = read_lines(f->inst, "set_event", &ev->cur_text, &ev->cur, &ev->ncur, err, errlen);
	if (r < 0)
		return r;
	r = ftmeta_match(list, len, ev->avail, navail, &ev->want, &ev->nwant, ev->missing,
			 sizeof(ev->missing));
	if (r == -EINVAL)
		snprintf(err, errlen, "%s", ev->missing);
	if (r >= 0)
		ev->unmatched = (unsigned)r;
	return r;
}

static int event_enable(const char *inst, const char *sysev, const char *val)
{
	const char *c = strchr(sysev, ':');
	char name[1024];
	int n;

	if (!c)
		return -EINVAL;
	n = snprintf(name, sizeof(name), "events/%.*s/%s/enable", (int)(c - sysev), sysev, c + 1);
	if (n < 0 || (size_t)n >= sizeof(name))
		return -ENAMETOOLONG;
	return write_in(inst, name, val);
}

int ftmeta_events_apply(const struct vmt_ftmeta *f, const struct vmt_ftmeta_events *ev,
			unsigned *written, char *err, size_t errlen)
{
	size_t i = 0, j = 0;

	*written = 0;
	while (i < ev->nwant || j < ev->ncur) {
		int c = i == ev->nwant ? 1 : j == ev->ncur ? -1 : strcmp(ev->want[i], ev->cur[j]);
		const char *e = c < 0 ? ev->want[i] : ev->cur[j];
		int r;

		if (c == 0) {
			i++, j++;
			continue;
		}
		r = event_enable(f->inst, e, c < 0 ? "1" : "0");
		if (r < 0) {
			snprintf(err, errlen, "cannot %s %s: %s", c < 0 ? "enable" : "disable", e,
				 strerror(-r));
			return r;
		}
		(*written)++;
		if (c < 0)
			i++;
		else
			j++;
	}
	return 0;
}

void ftmeta_events_free(struct vmt_ftmeta_events *ev)
{
	free(ev->want);
	free(ev->avail);
	free(ev->cur);
	free(ev->avail_text);
	free(ev->cur_text);
	*ev = (struct vmt_ftmeta_events){ 0 };
}

/* ---- the bundle ------------------------------------------------------------ */

struct bundle_ctx {
	const struct vmt_ftmeta *f;
	struct vmt_buf *b;
	uint32_t *files;
	char *err;
	size_t errlen;
};

/* The file at path as the entry name; a missing or unreadable optional
 * file is left out. */
static int add_path(struct bundle_ctx *x, const char *name, const char *path, bool required)
{
	_cleanup_free_ char *data = NULL;
	size_t len;
	int r = read_file(path, VMT_FTMETA_FILE_MAX, &data, &len);

	if (r < 0) {
		if (!required && (r == -ENOENT || r == -EACCES || r == -EPERM))
			return 0;
		return fail(x->err, x->errlen, r, path);
	}
	if (x->f->max && x->b->len + 8 + strlen(name) + len > x->f->max) {
		snprintf(x->err, x->errlen, "over %zu MiB with %s", x->f->max >> 20, name);
		return -EFBIG;
	}
	r = meta_add(x->b, name, data, (uint32_t)len);
	if (r < 0)
		return fail(x->err, x->errlen, r, name);
	(*x->files)++;
	return 0;
}

static int add_in(struct bundle_ctx *x, const char *dir, const char *name, bool required)
{
	char path[4096];
	int r = path_join(path, sizeof(path), dir, name);

	return r < 0 ? fail(x->err, x->errlen, r, name) : add_path(x, name, path, required);
}

/* Every event's format, in directory order (as tracefs_system_events()). */
static int add_system(struct bundle_ctx *x, const char *sys)
{
	char dir[4096];
	struct dirent *de;
	unsigned events = 0;
	int r = 0;
	DIR *d;

	if (snprintf(dir, sizeof(dir), "%s/events/%s", x->f->top, sys) >= (int)sizeof(dir))
		return fail(x->err, x->errlen, -ENAMETOOLONG, sys);
	d = opendir(dir);
	while (d && r >= 0 && (de = readdir(d))) {
		char name[512];
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    fstatat(dirfd(d), de->d_name, &st, 0) < 0 || !S_ISDIR(st.st_mode))
			continue;
		events++;
		if (snprintf(name, sizeof(name), "events/%s/%s/format", sys, de->d_name) >=
		    (int)sizeof(name))
			r = fail(x->err, x->errlen, -ENAMETOOLONG, de->d_name);
		else
			r = add_in(x, x->f->top, name, false);
	}
	if (d)
		closedir(d);
	if (r >= 0 && !events) {
		snprintf(x->err, x->errlen, "no events in system %s", sys);
		r = -ENOENT;
	}
	return r;
}

/* The systems of inst/set_event's "sys:event" lines, ftrace aside. */
static int add_enabled(struct bundle_ctx *x, uint32_t *systems)
{
	_cleanup_free_ char *text = NULL;
	_cleanup_free_ char **v = NULL;
	size_t nl, k = 0;
	int r = read_in(x->f->inst, "set_event", &text, &nl, x->err, x->errlen);

	if (r < 0)
		return r;
	if (split_lines(text, &v, &nl) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < nl; i++) {
		char *c = strchr(v[i], ':');

		if (c) {
			*c = 0;
			v[k++] = v[i];
		}
	}
	if (k)
		qsort(v, k, sizeof(*v), cmp_str);
	nl = k, k = 0;
	for (size_t i = 0; i < nl; i++)
		if (strcmp(v[i], "ftrace") && (!k || strcmp(v[k - 1], v[i])))
			v[k++] = v[i];
	*systems = (uint32_t)k;
	for (size_t i = 0; r >= 0 && i < k; i++)
		r = add_system(x, v[i]);
	return r;
}

int ftmeta_bundle(const struct vmt_ftmeta *f, struct vmt_buf *b, struct vmt_ftmeta_count *n,
		  char *err, size_t errlen)
{
	static const char *const top_files[] = { "printk_formats", "saved_cmdlines", "saved_tgids" };
	struct bundle_ctx x = { f, b, &n->files, err, errlen };
	int r;

	*n = (struct vmt_ftmeta_count){ 0 };
	r = add_in(&x, f->inst, "events/header_page", true);
	if (r >= 0)
		r = add_in(&x, f->inst, "events/header_event", true);
	if (r >= 0)
		r = add_system(&x, "ftrace");
	if (r >= 0)
		r = add_enabled(&x, &n->systems);
	for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(top_files); i++)
		r = add_in(&x, f->top, top_files[i], false);
	if (r >= 0)
		r = add_in(&x, f->inst, "trace_clock", false);
	if (r >= 0 && f->kallsyms)
		r = add_path(&x, "kallsyms", f->kallsyms, false);
	return r;
}

int ftmeta_tasks(const struct vmt_ftmeta *f, struct vmt_buf *b, char *err, size_t errlen)
{
	uint32_t files = 0;
	struct vmt_ftmeta limits = *f;
	struct bundle_ctx x = { &limits, b, &files, err, errlen };
	size_t cmdlines;
	int r;

	limits.max = 0;
	b->len = 0;
	r = add_in(&x, f->top, "saved_cmdlines", true);
	if (r < 0)
		return r;
	if (b->len > VMT_TASKS_MAX) {
		b->len = 0;
		snprintf(err, errlen, "saved_cmdlines: over %u KiB", VMT_TASKS_MAX >> 10);
		return -EFBIG;
	}
	cmdlines = b->len;
	r = add_in(&x, f->top, "saved_tgids", false);
	if (r < 0 || b->len > VMT_TASKS_MAX)
		b->len = cmdlines;
	return 0;
}
