/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <tracefs.h>

#include "corpus.h"
#include "meta.h"
#include "page.h"
#include "util.h"

#define CORPUS_FILE_MAX (512u << 20)
#define CAPTURE_SPAWNS 400	/* processes forked for load */
#define CAPTURE_PREFIX "vmt-test-"

static int dots_filter(const struct dirent *d)
{
	return strcmp(d->d_name, ".") && strcmp(d->d_name, "..");
}

/* Sorted entries of a directory; the count or -errno. */
static int dir_list(const char *path, struct dirent ***list)
{
	int n = scandir(path, list, dots_filter, alphasort);

	return n < 0 ? -errno : n;
}

static void dir_free(struct dirent **list, int n)
{
	for (int i = 0; i < n; i++)
		free(list[i]);
	free(list);
}

static bool absent(int r)
{
	return r == -ENOENT || r == -ENOTDIR;
}

/* dir/name into the bundle as name; an absent file is left out. */
static int bundle_add(struct vmt_buf *b, const char *dir, const char *name)
{
	_cleanup_free_ char *data = NULL;
	char path[PATH_MAX];
	size_t len;
	int r;

	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	r = read_file(path, CORPUS_FILE_MAX, &data, &len);
	if (absent(r))
		return 0;
	if (r < 0)
		return r;
	return meta_add(b, name, data, (uint32_t)len);
}

int corpus_load_meta(const char *metadir, struct vmt_buf *bundle)
{
	static const char *const files[] = {
		"events/header_page", "events/header_event", "printk_formats", "saved_cmdlines",
		"saved_tgids", "kallsyms", "trace_clock",
	};
	struct dirent **sys = NULL;
	char path[PATH_MAX];
	int nsys, r = 0;

	for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(files); i++)
		r = bundle_add(bundle, metadir, files[i]);
	if (r < 0)
		return r;
	snprintf(path, sizeof(path), "%s/events", metadir);
	nsys = dir_list(path, &sys);
	if (nsys < 0)
		return nsys;
	for (int i = 0; r >= 0 && i < nsys; i++) {
		struct dirent **ev = NULL;
		int nev;

		snprintf(path, sizeof(path), "%s/events/%s", metadir, sys[i]->d_name);
		nev = dir_list(path, &ev);
		if (nev < 0) {
			r = absent(nev) ? 0 : nev;	/* header_page and other files */
			continue;
		}
		for (int k = 0; r >= 0 && k < nev; k++) {
			char name[VMT_META_NAME_MAX + 1];

			if (snprintf(name, sizeof(name), "events/%s/%s/format", sys[i]->d_name,
				     ev[k]->d_name) >= (int)sizeof(name))
				r = -ENAMETOOLONG;
			else
				r = bundle_add(bundle, metadir, name);
		}
		dir_free(ev, nev);
	}
	dir_free(sys, nsys);
	return r;
}

int corpus_load_pages(const char *file, uint32_t page_size, uint8_t **pages, size_t *npages)
{
	char *data;
	size_t len;
	int r;

	if (!page_size)
		return -EINVAL;
	r = read_file(file, CORPUS_FILE_MAX, &data, &len);
	if (r < 0)
		return r;
	if (len % page_size) {
		free(data);
		return -EBADMSG;
	}
	*pages = (uint8_t *)data;
	*npages = len / page_size;
	return 0;
}

const uint8_t **corpus_page_ptrs(const uint8_t *pages, size_t npages, uint32_t page_size)
{
	const uint8_t **p = calloc(npages ? npages : 1, sizeof(*p));

	for (size_t i = 0; p && i < npages; i++)
		p[i] = pages + i * page_size;
	return p;
}

int corpus_read_expected(const char *file, uint64_t counts[CORPUS_MAX_CPUS], unsigned *ncpus)
{
	_cleanup_free_ char *data = NULL;
	size_t len;
	int r = read_file(file, 1 << 20, &data, &len);

	if (r < 0)
		return r;
	*ncpus = 0;
	for (char *line = strtok(data, "\n"); line; line = strtok(NULL, "\n")) {
		unsigned cpu;
		unsigned long long n;

		if (sscanf(line, "cpu%u %llu", &cpu, &n) != 2 || cpu >= CORPUS_MAX_CPUS)
			return -EBADMSG;
		counts[cpu] = n;
		*ncpus = VMT_MAX(*ncpus, cpu + 1);
	}
	return 0;
}

/* ---- capture from this machine ---- */

struct capture {
	struct tracefs_instance *inst;
	const char *top;	/* the tracefs mount */
	uint32_t page_size;
	unsigned ncpus;
	int fds[CORPUS_MAX_CPUS];	/* trace_pipe_raw per CPU, -1 if offline */
	struct vmt_buf pages[CORPUS_MAX_CPUS];
};

static int mkdir_p(const char *path)
{
	char p[PATH_MAX];

	if (snprintf(p, sizeof(p), "%s", path) >= (int)sizeof(p))
		return -ENAMETOOLONG;
	for (char *s = p + 1; ; s++) {
		if (*s && *s != '/')
			continue;
		char c = *s;
		*s = 0;
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			return -errno;
		if (!c)
			return 0;
		*s = c;
	}
}

static int file_write(const char *path, const void *data, size_t len)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	if (fd < 0)
		return -errno;
	return write_full(fd, data, len);
}

/* Copy src to dst, making dst's directory; an absent src is skipped unless
 * required. */
static int file_copy(const char *src, const char *dst, bool required)
{
	_cleanup_free_ char *data = NULL;
	char dir[PATH_MAX];
	size_t len;
	int r = read_file(src, CORPUS_FILE_MAX, &data, &len);

	if (r < 0)
		return absent(r) && !required ? 0 : r;
	snprintf(dir, sizeof(dir), "%s", dst);
	*strrchr(dir, '/') = 0;
	r = mkdir_p(dir);
	return r < 0 ? r : file_write(dst, data, len);
}

/* The ring-buffer page size: header_page's data offset plus its size. */
static int capture_page_size(const char *top, uint32_t *page_size)
{
	_cleanup_free_ char *text = NULL;
	char path[PATH_MAX];
	unsigned off, size;
	const char *f;
	size_t len;
	int r;

	snprintf(path, sizeof(path), "%s/events/header_page", top);
	r = read_file(path, 1 << 16, &text, &len);
	if (r < 0)
		return r;
	f = strstr(text, " data;");
	if (!f || sscanf(f, " data;\toffset:%u;\tsize:%u;", &off, &size) != 2 || !size)
		return -EBADMSG;
	*page_size = off + size;
	return 0;
}

struct sweep {
	char names[16][64];
	int n;
};

static int sweep_cb(const char *name, void *data)
{
	struct sweep *s = data;
	char *end;
	long pid;

	if (strncmp(name, CAPTURE_PREFIX, strlen(CAPTURE_PREFIX)))
		return 0;
	pid = strtol(name + strlen(CAPTURE_PREFIX), &end, 10);
	if (*end || pid <= 0 || !(kill((pid_t)pid, 0) < 0 && errno == ESRCH))
		return 0;
	if (s->n < (int)ARRAY_SIZE(s->names))
		snprintf(s->names[s->n++], sizeof(s->names[0]), "%s", name);
	return 0;
}

/* Remove instances left by test processes that died mid-capture. */
static void capture_sweep(void)
{
	struct sweep s = { .n = 0 };

	tracefs_instances_walk(sweep_cb, &s);
	for (int i = 0; i < s.n; i++) {
		struct tracefs_instance *inst = tracefs_instance_alloc(NULL, s.names[i]);

		if (inst) {
			tracefs_instance_destroy(inst);
			tracefs_instance_free(inst);
		}
	}
}

static int capture_open(struct capture *c)
{
	char *dir = tracefs_instance_get_dir(c->inst);
	unsigned opened = 0;
	long n = sysconf(_SC_NPROCESSORS_CONF);

	if (!dir)
		return -ENOMEM;
	c->ncpus = (unsigned)VMT_MIN(VMT_MAX(n, 1L), (long)CORPUS_MAX_CPUS);
	for (unsigned cpu = 0; cpu < c->ncpus; cpu++) {
		char path[PATH_MAX];

		snprintf(path, sizeof(path), "%s/per_cpu/cpu%u/trace_pipe_raw", dir, cpu);
		c->fds[cpu] = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
		opened += c->fds[cpu] >= 0;
	}
	tracefs_put_tracing_file(dir);
	return opened ? 0 : -ENOENT;
}

static void capture_close(struct capture *c)
{
	for (unsigned cpu = 0; cpu < CORPUS_MAX_CPUS; cpu++) {
		if (c->fds[cpu] >= 0)
			close(c->fds[cpu]);
		c->fds[cpu] = -1;
	}
}

/* Take every page the kernel has now; a partial one comes out as is. */
static int capture_drain(struct capture *c)
{
	for (unsigned cpu = 0; cpu < c->ncpus; cpu++) {
		struct vmt_buf *b = &c->pages[cpu];

		while (c->fds[cpu] >= 0) {
			ssize_t n;
			int r = buf_reserve(b, c->page_size);

			if (r < 0)
				return r;
			n = read(c->fds[cpu], b->data + b->len, c->page_size);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0 && errno == EAGAIN)
				break;
			if (n < 0)
				return -errno;
			if (n == 0)
				break;
			memset(b->data + b->len + n, 0, c->page_size - (size_t)n);
			b->len += c->page_size;
		}
	}
	return 0;
}

static void spawn_true(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		execl("/bin/true", "true", (char *)NULL);
		_exit(0);
	}
	if (pid > 0)
		waitpid(pid, NULL, 0);
}

/* Fork and exec for load, sleep a little, and keep the buffers drained. */
static int capture_load(struct capture *c, unsigned seconds)
{
	uint64_t end = now_monotonic_ns() + (uint64_t)seconds * 1000000000ull;
	struct timespec nap = { 0, 10 * 1000 * 1000 };
	unsigned spawned = 0;
	int r = 0;

	while (r >= 0 && now_monotonic_ns() < end) {
		for (int i = 0; i < 8 && spawned < CAPTURE_SPAWNS; i++, spawned++)
			spawn_true();
		nanosleep(&nap, NULL);
		r = capture_drain(c);
	}
	return r;
}

static int capture_save_meta(const struct capture *c, const char *out)
{
	static const char *const top_files[] = {
		"events/header_page", "events/header_event", "printk_formats", "saved_cmdlines",
		"saved_tgids",
	};
	static const char *const systems[] = { "sched", "irq", "ftrace" };
	char src[PATH_MAX], dst[PATH_MAX];
	char *dir = tracefs_instance_get_dir(c->inst);
	int r = 0;

	if (!dir)
		return -ENOMEM;
	for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(top_files); i++) {
		snprintf(src, sizeof(src), "%s/%s", c->top, top_files[i]);
		snprintf(dst, sizeof(dst), "%s/meta/%s", out, top_files[i]);
		r = file_copy(src, dst, i < 2);
	}
	for (size_t i = 0; r >= 0 && i < ARRAY_SIZE(systems); i++) {
		struct dirent **ev = NULL;
		int n;

		snprintf(src, sizeof(src), "%s/events/%s", c->top, systems[i]);
		n = dir_list(src, &ev);
		for (int k = 0; r >= 0 && k < n; k++) {
			snprintf(src, sizeof(src), "%s/events/%s/%s/format", c->top, systems[i],
				 ev[k]->d_name);
			snprintf(dst, sizeof(dst), "%s/meta/events/%s/%s/format", out, systems[i],
				 ev[k]->d_name);
			r = file_copy(src, dst, false);
		}
		if (n > 0)
			dir_free(ev, n);
	}
	snprintf(dst, sizeof(dst), "%s/meta/kallsyms", out);
	if (r >= 0)
		r = file_copy("/proc/kallsyms", dst, false);
	snprintf(src, sizeof(src), "%s/trace_clock", dir);
	snprintf(dst, sizeof(dst), "%s/meta/trace_clock", out);
	if (r >= 0)
		r = file_copy(src, dst, true);
	for (unsigned cpu = 0; r >= 0 && cpu < c->ncpus; cpu++) {
		if (c->fds[cpu] < 0)
			continue;
		snprintf(src, sizeof(src), "%s/per_cpu/cpu%u/stats", dir, cpu);
		snprintf(dst, sizeof(dst), "%s/meta/per_cpu/cpu%u/stats", out, cpu);
		r = file_copy(src, dst, false);
	}
	tracefs_put_tracing_file(dir);
	return r;
}

/* pages/cpuN.raw and expected, counted with our own page walk. */
static int capture_save_pages(const struct capture *c, const char *out)
{
	_cleanup_free_ char *hp = NULL;
	struct vmt_page_layout l;
	struct vmt_buf exp = { 0 };
	char path[PATH_MAX];
	size_t hp_len;
	int r;

	snprintf(path, sizeof(path), "%s/meta/events/header_page", out);
	r = read_file(path, 1 << 16, &hp, &hp_len);
	if (r >= 0)
		r = page_layout_parse(&l, hp, hp_len, c->page_size);
	if (r >= 0) {
		snprintf(path, sizeof(path), "%s/pages", out);
		r = mkdir_p(path);
	}
	for (unsigned cpu = 0; r >= 0 && cpu < c->ncpus; cpu++) {
		const struct vmt_buf *b = &c->pages[cpu];
		uint64_t events = 0;
		char line[64];

		if (c->fds[cpu] < 0)
			continue;
		for (size_t off = 0; r >= 0 && off < b->len; off += c->page_size) {
			struct vmt_page_info info;

			r = page_scan(&l, b->data + off, &info);
			if (r >= 0)
				events += info.events;
		}
		snprintf(path, sizeof(path), "%s/pages/cpu%u.raw", out, cpu);
		if (r >= 0)
			r = file_write(path, b->data, b->len);
		snprintf(line, sizeof(line), "cpu%u %llu\n", cpu, (unsigned long long)events);
		if (r >= 0)
			r = buf_append(&exp, line, strlen(line));
	}
	snprintf(path, sizeof(path), "%s/expected", out);
	if (r >= 0)
		r = file_write(path, exp.data, exp.len);
	buf_free(&exp);
	return r;
}

static int capture_run(struct capture *c, unsigned seconds, const char *out)
{
	int r = capture_page_size(c->top, &c->page_size);

	if (r < 0)
		return r;
	/* room for a second of sched and irq events if draining falls behind */
	tracefs_instance_set_buffer_size(c->inst, 4096, -1);
	if (tracefs_event_enable(c->inst, "sched", NULL) < 0)
		return -ENOENT;
	tracefs_event_enable(c->inst, "irq", NULL);	/* optional */
	r = capture_open(c);
	if (r >= 0 && tracefs_trace_on(c->inst) < 0)
		r = -EIO;
	if (r >= 0)
		r = capture_load(c, seconds);
	tracefs_trace_off(c->inst);
	/* tracing is off: what is left, the partial pages included, comes out now */
	if (r >= 0)
		r = capture_drain(c);
	if (r >= 0)
		r = capture_save_meta(c, out);
	if (r >= 0)
		r = capture_save_pages(c, out);
	return r;
}

static struct tracefs_instance *capture_instance(void)
{
	char name[64];
	struct tracefs_instance *inst;

	snprintf(name, sizeof(name), CAPTURE_PREFIX "%d", (int)getpid());
	inst = tracefs_instance_create(name);
	if (inst && !tracefs_instance_is_new(inst)) {
		/* ours from an earlier run under a recycled pid: start clean */
		tracefs_instance_destroy(inst);
		tracefs_instance_free(inst);
		inst = tracefs_instance_create(name);
	}
	return inst;
}

int capture_host(const char *tracefs, unsigned seconds, const char *outdir)
{
	struct capture *c;
	int r;

	if (geteuid())
		return -EPERM;
	if (tracefs && tracefs_set_tracing_dir((char *)tracefs) < 0)
		return -ENOENT;
	capture_sweep();
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	for (unsigned cpu = 0; cpu < CORPUS_MAX_CPUS; cpu++)
		c->fds[cpu] = -1;
	c->top = tracefs ? tracefs : tracefs_tracing_dir();
	c->inst = capture_instance();
	if (!c->inst || !c->top) {
		r = errno ? -errno : -EIO;
		goto out;
	}
	r = capture_run(c, seconds, outdir);
out:
	/* an open trace_pipe_raw keeps the instance busy */
	capture_close(c);
	if (c->inst) {
		tracefs_event_disable(c->inst, NULL, NULL);
		if (tracefs_instance_destroy(c->inst) < 0 && r >= 0)
			r = -EBUSY;
		tracefs_instance_free(c->inst);
	}
	for (unsigned cpu = 0; cpu < CORPUS_MAX_CPUS; cpu++)
		buf_free(&c->pages[cpu]);
	free(c);
	return r;
}
