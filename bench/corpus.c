/* SPDX-License-Identifier: MIT */
/*
 * The benchmarks' input: a corpus's real guest pages (one file per CPU) and
 * a small metadata bundle built from its meta/ folder: the header files, the
 * sched, irq and timer event formats, those of the syscall events its
 * set_event names (guest-6.1-busy's), trace_clock, printk_formats and
 * saved_cmdlines. No kallsyms: it would only make every session start
 * slower, and the daemon does not need it to stream.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "meta.h"
#include "page.h"

static int add_file(struct bench_corpus *c, const char *rel)
{
	char path[1100];
	char *data;
	size_t len;
	int r;

	snprintf(path, sizeof(path), "%s/meta/%s", c->dir, rel);
	r = read_file(path, 16 << 20, &data, &len);
	if (r < 0)
		return r;
	r = meta_add(&c->bundle, rel, data, (uint32_t)len);
	free(data);
	if (r == 0)
		c->bundle_files++;
	return r;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* events/SYS/EVENT/format for every event of a system, sorted. */
static int add_system(struct bench_corpus *c, const char *sys)
{
	char path[1100], rel[600];
	char *names[512];
	unsigned n = 0;
	struct dirent *de;
	DIR *d;
	int r = 0;

	snprintf(path, sizeof(path), "%s/meta/events/%s", c->dir, sys);
	d = opendir(path);
	if (!d)
		return -errno;
	while ((de = readdir(d)) && n < 512) {
		struct stat st;
		char f[1400];

		snprintf(f, sizeof(f), "%s/%s/format", path, de->d_name);
		if (de->d_name[0] != '.' && !stat(f, &st) && S_ISREG(st.st_mode))
			names[n++] = strdup(de->d_name);
	}
	closedir(d);
	qsort(names, n, sizeof(*names), cmp_str);
	for (unsigned i = 0; i < n; i++) {
		snprintf(rel, sizeof(rel), "events/%s/%s/format", sys, names[i]);
		if (r == 0)
			r = add_file(c, rel);
		free(names[i]);
	}
	return r;
}

/* events/syscalls/EVENT/format of each "syscalls:EVENT" line of set_event
 * (not the whole system: some 700 formats the daemon does not need). */
static void add_syscalls(struct bench_corpus *c)
{
	char path[1100], rel[600];
	char *data, *save = NULL;
	size_t len;

	snprintf(path, sizeof(path), "%s/meta/set_event", c->dir);
	if (read_file(path, 1 << 20, &data, &len) < 0)
		return;
	for (char *l = strtok_r(data, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		if (strncmp(l, "syscalls:", 9) || strchr(l + 9, '/') || strlen(l + 9) > 200)
			continue;
		snprintf(rel, sizeof(rel), "events/syscalls/%s/format", l + 9);
		add_file(c, rel);
	}
	free(data);
}

static int load_pages(struct bench_corpus *c, unsigned cpu)
{
	char path[1100];
	struct vmt_page_layout l;
	char *data;
	size_t len;
	int r;

	snprintf(path, sizeof(path), "%s/pages/cpu%u.raw", c->dir, cpu);
	r = read_file(path, 1u << 30, &data, &len);
	if (r < 0)
		return r;
	if (!len || len % BENCH_PS) {
		free(data);
		return -EBADMSG;
	}
	c->pages[cpu] = (uint8_t *)data;
	c->npages[cpu] = len / BENCH_PS;
	c->ev_prefix[cpu] = calloc(c->npages[cpu] + 1, sizeof(uint64_t));
	if (!c->ev_prefix[cpu])
		return -ENOMEM;
	page_layout_default(&l, BENCH_PS);
	for (size_t i = 0; i < c->npages[cpu]; i++) {
		struct vmt_page_info info = { 0 };

		if (page_scan(&l, c->pages[cpu] + i * BENCH_PS, &info) < 0)
			info.events = 0;
		c->ev_prefix[cpu][i + 1] = c->ev_prefix[cpu][i] + info.events;
	}
	return 0;
}

int corpus_open(struct bench_corpus *c)
{
	static const char *const top[] = { "events/header_page", "events/header_event",
					   "printk_formats", "saved_cmdlines", "trace_clock" };
	static const char *const systems[] = { "irq", "sched", "timer" };
	const char *e = getenv("VMT_CORPUS");
	const char *name = getenv("VMT_BENCH_CORPUS");
	int r;

	memset(c, 0, sizeof(*c));
	if (!name || !*name || strchr(name, '/'))
		name = "guest-6.1";
	snprintf(c->name, sizeof(c->name), "%s", e ? e : name);
	if (e) {
		snprintf(c->dir, sizeof(c->dir), "%s", e);
	} else {
		/* unpacked by make from tests/corpus/, else the shared one */
		const char *src = getenv("VMT_SRCDIR") ? getenv("VMT_SRCDIR") : ".";
		const char *b = getenv("VMT_BUILD") ? getenv("VMT_BUILD") : "build";
		struct stat st;

		snprintf(c->dir, sizeof(c->dir), "%s%s%s/corpus/%s", b[0] == '/' ? "" : src,
			 b[0] == '/' ? "" : "/", b, name);
		if (stat(c->dir, &st) < 0)
			snprintf(c->dir, sizeof(c->dir), "%s/../shared/corpus/%s", src, name);
	}
	for (size_t i = 0; i < ARRAY_SIZE(top); i++) {
		r = add_file(c, top[i]);
		if (r < 0 && i == 0)
			return r;	/* header_page is what the daemon checks */
	}
	for (size_t i = 0; i < ARRAY_SIZE(systems); i++)
		add_system(c, systems[i]);
	add_syscalls(c);
	for (unsigned cpu = 0; cpu < BENCH_CPUS; cpu++) {
		r = load_pages(c, cpu);
		if (r < 0)
			return r;
		c->ncpus++;
	}
	return 0;
}

uint64_t corpus_events(const struct bench_corpus *c, unsigned cpu, uint64_t n)
{
	uint64_t np = c->npages[cpu];

	return (n / np) * c->ev_prefix[cpu][np] + c->ev_prefix[cpu][n % np];
}
