/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ftmeta.h"
#include "ftrace.h"
#include "log.h"
#include "prev.h"

static int write_file(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC), r = 0;

	if (fd < 0)
		return -errno;
	if (write(fd, val, strlen(val)) < 0)
		r = -errno;
	close(fd);
	return r;
}

/* Is clock the one in force in a trace_clock file ("local [mono] ...")? */
static bool clock_is(const char *path, const char *clock)
{
	_cleanup_free_ char *t = NULL;
	char want[VMT_STR_CLOCK + 2];
	size_t len;

	snprintf(want, sizeof(want), "[%s]", clock);
	return read_file(path, 4096, &t, &len) == 0 && strstr(t, want);
}

/* "text delta:\t-123\ndata delta:\t0\n" (6.12; later kernels print other
 * lines, then the delta stays unknown: VMT_PREV_DELTA unset) */
static void prev_read_info(struct vmt_prev *p)
{
	_cleanup_free_ char *t = NULL;
	char path[600];
	const char *s;
	size_t len;

	snprintf(path, sizeof(path), "%s/last_boot_info", p->dir);
	if (read_file(path, 4096, &t, &len) < 0)
		return;
	if ((s = strstr(t, "text delta:")) && sscanf(s + 11, "%" SCNd64, &p->b.text_delta) == 1)
		p->b.flags |= VMT_PREV_DELTA;
	if ((s = strstr(t, "data delta:")))
		sscanf(s + 11, "%" SCNd64, &p->b.data_delta);
	log_info("%s: %.*s", path, (int)strcspn(t, "\n"), t);
}

/*
 * What the kernel said at boot (/dev/kmsg, from its start): where it
 * mapped the instance ("Tracing: mapped boot instance boot_map at physical
 * memory 0x... of size 0x..."), and per CPU whether the old buffer held
 * ("Ring buffer meta [N] is from previous boot!") or not ("Ring buffer
 * boot meta [N] buffer invalid commit", "... mismatch ..."). 6.12's words;
 * another kernel's leave the flags unset.
 */
static void prev_read_kmsg(struct vmt_prev *p, uint64_t *addr, uint64_t *size)
{
	char rec[1024];
	bool told = false;
	int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	*addr = *size = 0;
	if (fd < 0)
		return;
	for (;;) {
		ssize_t n = read(fd, rec, sizeof(rec) - 1);
		const char *m, *x;
		unsigned cpu;

		if (n < 0 && errno == EPIPE)
			continue;	/* overwritten records: read on */
		if (n <= 0)
			break;
		rec[n] = 0;
		if (!(m = strchr(rec, ';')))
			continue;
		m++;
		if ((x = strstr(m, "mapped boot instance " VMT_PREV_INSTANCE " at physical memory ")))
			sscanf(x + strlen("mapped boot instance " VMT_PREV_INSTANCE " at physical memory "),
			       "%" SCNx64 " of size %" SCNx64, addr, size);
		if ((x = strstr(m, "Ring buffer meta [")) && strstr(x, "from previous boot") &&
		    sscanf(x + 18, "%u", &cpu) == 1)
			told = true;
		if ((x = strstr(m, "Ring buffer boot meta")) && (x = strchr(x, '[')) &&
		    sscanf(x + 1, "%u", &cpu) == 1) {
			told = true;
			if (cpu < 32)
				p->b.cpus_lost |= 1u << cpu;
		}
	}
	close(fd);
	if (told)
		p->b.flags |= VMT_PREV_KMSG;
}

/* How far the region ends below the top of the "System RAM" range of
 * /proc/iomem that holds it: firmware and the boot loader's initrd land at
 * the top of RAM at a reboot (SeaBIOS overwrote a region 14 MiB below it). */
static void prev_gap(struct vmt_prev *p, uint64_t addr, uint64_t size)
{
	_cleanup_free_ char *t = NULL;
	size_t len;

	if (!size || read_file("/proc/iomem", 1 << 20, &t, &len) < 0)
		return;
	for (char *save, *l = strtok_r(t, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		uint64_t lo, hi;

		/* top-level ranges only: nested ones start with spaces */
		if (*l == ' ' || !strstr(l, "System RAM") ||
		    sscanf(l, "%" SCNx64 "-%" SCNx64, &lo, &hi) != 2)
			continue;
		if (addr < lo || addr + size - 1 > hi)
			continue;
		p->b.top_gap_kib = (uint32_t)VMT_MIN((hi + 1 - addr - size) >> 10, (uint64_t)UINT32_MAX);
		p->b.flags |= VMT_PREV_GAP;
		if (hi + 1 - addr - size < VMT_PREV_GAP_MIN)
			log_warning("%s: the region ends %" PRIu64 " KiB below the top of RAM: firmware "
				    "may overwrite it at a reboot (give the guest more memory)",
				    p->dir, (hi + 1 - addr - size) >> 10);
		return;
	}
}

/* One CPU's pages, consumed: whole pages, as trace_pipe_raw gives them. */
static int prev_read_cpu(struct vmt_prev *p, unsigned cpu, size_t *total)
{
	char path[600];
	int fd, r = 0;

	snprintf(path, sizeof(path), "%s/per_cpu/cpu%u/trace_pipe_raw", p->dir, cpu);
	fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	while (*total + p->page_size <= VMT_PREV_MAX_BYTES) {
		ssize_t n;

		if ((r = buf_reserve(&p->cpu[cpu], p->page_size)) < 0)
			break;
		n = read(fd, p->cpu[cpu].data + p->cpu[cpu].len, p->page_size);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			r = 0;
			break;
		}
		if (n <= 0) {
			r = n < 0 ? -errno : 0;
			break;
		}
		if ((size_t)n != p->page_size) {
			r = -EPROTO;	/* never a piece of a page */
			break;
		}
		p->cpu[cpu].len += p->page_size;
		*total += p->page_size;
	}
	if (*total + p->page_size > VMT_PREV_MAX_BYTES)
		r = -EFBIG;
	close(fd);
	return r;
}

int prev_read(struct vmt_prev *p, const char *tracefs, unsigned ncpus, unsigned page_size)
{
	struct stat st;
	size_t total = 0;
	int fd;

	memset(p, 0, sizeof(*p));
	p->ncpus = ncpus;
	p->page_size = page_size;
	snprintf(p->dir, sizeof(p->dir), "%s/instances/" VMT_PREV_INSTANCE, tracefs);
	if (stat(p->dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		p->dir[0] = 0;
		return 0;
	}
	if (page_size + 8 > VMT_PROTO_MAX_PAYLOAD) {
		log_warning("%s: pages of %u bytes do not fit a PREV_PAGES message: not read",
			    p->dir, page_size);
		p->dir[0] = 0;
		return 0;
	}
	if (access(VMT_PREV_STAMP, F_OK) == 0) {
		log_info("%s: read already in this boot (%s)", p->dir, VMT_PREV_STAMP);
		p->sent = true;
		return 0;
	}
	p->cpu = calloc(ncpus, sizeof(*p->cpu));
	if (!p->cpu)
		return -ENOMEM;
	prev_read_info(p);
	{
		uint64_t addr, size;

		prev_read_kmsg(p, &addr, &size);
		prev_gap(p, addr, size);
		if (p->b.cpus_lost)
			log_warning("%s: the kernel found the old buffer of CPUs 0x%x invalid", p->dir,
				    p->b.cpus_lost);
	}
	for (unsigned c = 0; c < ncpus; c++) {
		int r = prev_read_cpu(p, c, &total);

		if (r < 0 && !p->status) {
			p->status = r;
			log_warning_errno(r, "%s: cpu%u's previous boot's pages cut short: %m", p->dir, c);
		}
	}
	p->b.ncpus = ncpus;
	p->b.pages = (uint32_t)(total / page_size);
	/* the next agent of this boot must not send this boot's events */
	fd = open(VMT_PREV_STAMP, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		log_warning("%s: %m (an agent restarted in this boot would send this boot's "
			    "events as the previous one's)", VMT_PREV_STAMP);
	else
		close(fd);
	log_info("%s: %u pages of the previous boot", p->dir, p->b.pages);
	if (!p->b.pages)
		p->sent = true;
	return 0;
}

void prev_setup(struct vmt_prev *p, const struct vmt_start *s)
{
	struct vmt_ftmeta f = { .top = ftrace_dir(), .inst = p->dir, .kallsyms = "/proc/kallsyms" };
	struct vmt_ftmeta_events ev;
	_cleanup_free_ char *top = NULL;
	char clock[VMT_STR_CLOCK], path[600], err[300];
	const char *list = s->events;
	size_t len = s->events_len;
	unsigned written = 0;
	int r;

	if (!p->dir[0])
		return;
	/* its clock first: a change empties it */
	if (s->clock[0])
		snprintf(clock, sizeof(clock), "%s", s->clock);
	else if (ftrace_clock(clock, sizeof(clock)) < 0)
		clock[0] = 0;
	snprintf(path, sizeof(path), "%s/trace_clock", p->dir);
	if (clock[0] && !clock_is(path, clock) && (r = write_file(path, clock)) < 0)
		log_warning_errno(r, "%s=%s: %m", path, clock);
	if ((s->flags & VMT_START_KEEP_EVENTS) || !len) {
		/* the top-level instance's own set, one "sys:event" a line */
		snprintf(path, sizeof(path), "%s/set_event", ftrace_dir());
		if (read_file(path, VMT_FTMETA_FILE_MAX, &top, &len) < 0)
			return;
		for (size_t i = 0; i < len; i++)
			if (top[i] == '\n')
				top[i] = ',';
		list = top;
	}
	r = ftmeta_events_plan(&f, list, len, &ev, err, sizeof(err));
	if (r >= 0)
		r = ftmeta_events_apply(&f, &ev, &written, err, sizeof(err));
	if (r < 0)
		log_warning("%s: events not set up for the next boot: %s", p->dir, err);
	else
		log_info("%s: %zu events recorded for the next boot (%u enable files written)", p->dir,
			 ev.nwant, written);
	ftmeta_events_free(&ev);
}

bool prev_pending(const struct vmt_prev *p)
{
	return p->dir[0] && !p->sent;
}

bool prev_queue(struct vmt_prev *p, struct vmt_buf *out)
{
	static uint8_t m[VMT_PROTO_MAX_PAYLOAD];
	const size_t most = VMT_MIN((size_t)VMT_PREV_PAGES_MAX, (sizeof(m) - 8) / p->page_size) *
			    p->page_size;

	if (!p->sending) {
		if (proto_put_prev_begin(out, &p->b) < 0)
			return false;
		p->sending = true;
	}
	/* a few messages a call: the caller comes back when they are out */
	for (int k = 0; k < 4 && p->cur_cpu < p->ncpus;) {
		const struct vmt_buf *c = &p->cpu[p->cur_cpu];
		size_t n = VMT_MIN(c->len - p->cur_off, most);

		if (!n) {
			p->cur_cpu++;
			p->cur_off = 0;
			continue;
		}
		put_le32(m, p->cur_cpu);
		put_le32(m + 4, (uint32_t)(n / p->page_size));
		memcpy(m + 8, c->data + p->cur_off, n);
		if (proto_put(out, VMT_MSG_PREV_PAGES, m, (uint32_t)(8 + n)) < 0)
			return false;
		p->cur_off += n;
		p->sent_pages += (uint32_t)(n / p->page_size);
		k++;
	}
	if (p->cur_cpu < p->ncpus)
		return false;
	put_le32(m, (uint32_t)p->status);
	put_le32(m + 4, p->sent_pages);
	if (proto_put(out, VMT_MSG_PREV_END, m, 8) < 0)
		return false;
	log_info("the previous boot's %u pages sent", p->sent_pages);
	p->sent = true;
	prev_free(p);
	return true;
}

void prev_free(struct vmt_prev *p)
{
	for (unsigned c = 0; p->cpu && c < p->ncpus; c++)
		buf_free(&p->cpu[c]);
	free(p->cpu);
	p->cpu = NULL;
}
