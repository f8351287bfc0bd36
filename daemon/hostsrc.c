/* SPDX-License-Identifier: MIT */
/*
 * The host source, set up and taken down: the instance "vmtraced" is ours
 * alone, so nothing another tracer set up is touched; one left by a daemon
 * that died is removed and made afresh. Its events, the qemu_only filters,
 * the metadata (built once, like the agent's, it becomes the "host" guest's
 * aux) and that guest are made here; hostsrc-read.c reads the pages.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <tracefs.h>
#include <unistd.h>

#include "ftmeta.h"
#include "hostsrc-int.h"
#include "log.h"
#include "meta.h"
#include "page.h"

#define INSTANCE "vmtraced"
#define AGENT_NAME "vmtraced host source"
#define META_MAX (256u << 20)	/* kallsyms alone is several MiB */
/*
 * poll() on trace_pipe_raw waits for at least one full page and for
 * buffer_percent of the buffer: 1% wakes us every ~10 pages of a 4 MiB
 * buffer. 0 would not do: poll would then report a partial page, which
 * splice cannot take, and the loop would spin.
 */
#define BUFFER_PERCENT "1"

/* Thread names of QEMU: the process ("qemu-system-x86", "qemu-kvm"), its
 * vCPUs with debug-threads=on ("CPU 0/KVM", "CPU 0/TCG"), vhost workers. */
static const char *const qemu_comms[] = { "qemu*", "CPU *", "vhost-*" };

/* ---- the instance --------------------------------------------------------- */

static int errno_or(int fallback)
{
	return errno > 0 ? -errno : fallback;
}

/* Where ftmeta finds the instance's files and the host's. */
static struct vmt_ftmeta hostsrc_ftmeta(const struct vmt_hostsrc *h)
{
	return (struct vmt_ftmeta){ .top = h->top, .inst = h->dir, .kallsyms = "/proc/kallsyms",
				    .max = META_MAX };
}

/* Enable host.events; those that match nothing are named in one message. */
static int hostsrc_enable_events(struct vmt_hostsrc *h)
{
	const char *list = h->env->conf->host.events;
	struct vmt_ftmeta f = hostsrc_ftmeta(h);
	struct vmt_ftmeta_events ev;
	unsigned written;
	char err[512];
	int r = ftmeta_events_plan(&f, list, strlen(list), &ev, err, sizeof(err));

	if (r >= 0 && !ev.nwant) {
		r = log_guest(VMT_LOG_ERR, -ENOENT, HOST_GUEST,
			      "none of the host events can be enabled (%s): no host recording",
			      ev.missing);
	} else {
		if (r > 0)
			log_guest(VMT_LOG_WARNING, 0, HOST_GUEST,
				  "not available on this kernel, left out: %s", ev.missing);
		if (r >= 0)
			r = ftmeta_events_apply(&f, &ev, &written, err, sizeof(err));
		if (r < 0)
			log_guest(VMT_LOG_ERR, r, HOST_GUEST, "host events: %s", err);
	}
	ftmeta_events_free(&ev);
	return r < 0 ? r : 0;
}

static bool format_has(const char *fmt, const char *field)
{
	char a[80], b[80];

	snprintf(a, sizeof(a), " %s[", field);
	snprintf(b, sizeof(b), " %s;", field);
	return strstr(fmt, a) || strstr(fmt, b);
}

static void filter_add(char *f, size_t n, const char *field)
{
	for (size_t i = 0; i < ARRAY_SIZE(qemu_comms); i++) {
		size_t o = strlen(f);
		snprintf(f + o, n - o, "%s%s ~ \"%s\"", o ? " || " : "", field, qemu_comms[i]);
	}
}

/*
 * qemu_only: each sched event keeps what concerns QEMU's threads, by the
 * names it carries (prev/next of a switch, the woken task, ...) or else
 * the current task's (COMM). An event whose filter the kernel refuses is
 * turned off rather than recorded for every task of the host.
 */
static int hostsrc_filter_sched(struct vmt_hostsrc *h)
{
	_cleanup_free_ char *set = tracefs_instance_file_read(h->inst, "set_event", NULL);
	char *save = NULL;

	if (!set)
		return log_guest(VMT_LOG_ERR, errno_or(-EIO), HOST_GUEST, "cannot read set_event: %m");
	for (char *l = strtok_r(set, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		_cleanup_free_ char *fmt = NULL;
		char path[PATH_MAX], filter[512] = "";
		size_t len;

		if (strncmp(l, "sched:", 6))
			continue;
		snprintf(path, sizeof(path), "%s/events/sched/%s/format", h->top, l + 6);
		if (read_file(path, 1 << 20, &fmt, &len) < 0)
			fmt = NULL;
		if (fmt && format_has(fmt, "prev_comm") && format_has(fmt, "next_comm")) {
			filter_add(filter, sizeof(filter), "prev_comm");
			filter_add(filter, sizeof(filter), "next_comm");
		} else if (fmt && format_has(fmt, "parent_comm") && format_has(fmt, "child_comm")) {
			filter_add(filter, sizeof(filter), "parent_comm");
			filter_add(filter, sizeof(filter), "child_comm");
		} else if (fmt && format_has(fmt, "comm")) {
			filter_add(filter, sizeof(filter), "comm");
		} else {
			filter_add(filter, sizeof(filter), "COMM");
		}
		errno = 0;
		if (tracefs_event_file_write(h->inst, "sched", l + 6, "filter", filter) < 0) {
			log_guest(VMT_LOG_WARNING, errno_or(-EIO), HOST_GUEST,
				  "sched:%s: filter '%s' refused, event left out: %m", l + 6, filter);
			tracefs_event_file_write(h->inst, "sched", l + 6, "enable", "0");
			continue;
		}
		log_guest(VMT_LOG_DEBUG, 0, HOST_GUEST, "sched:%s filter: %s", l + 6, filter);
	}
	return 0;
}

/* Create the instance, or remove a stale one and create it again. */
static int hostsrc_instance(struct vmt_hostsrc *h)
{
	char path[PATH_MAX];

	/* libtracefs leaks when it cannot make the folder: ask first */
	snprintf(path, sizeof(path), "%s/instances", h->top);
	if (faccessat(AT_FDCWD, path, W_OK | X_OK, AT_EACCESS) < 0)
		return log_guest(VMT_LOG_ERR, -errno, HOST_GUEST,
				 "cannot create ftrace instances in %s (root needed): %m", path);
	errno = 0;
	h->inst = tracefs_instance_create(INSTANCE);
	if (h->inst && !tracefs_instance_is_new(h->inst)) {
		log_guest(VMT_LOG_NOTICE, 0, HOST_GUEST,
			  "ftrace instance " INSTANCE " left from an earlier run: made afresh");
		errno = 0;
		if (tracefs_instance_destroy(h->inst) < 0) {
			int r = errno_or(-EBUSY);
			tracefs_instance_free(h->inst);
			h->inst = NULL;
			return log_guest(VMT_LOG_ERR, r, HOST_GUEST,
					 "cannot remove the ftrace instance " INSTANCE
					 " (another vmtraced running?): %m");
		}
		tracefs_instance_free(h->inst);
		errno = 0;
		h->inst = tracefs_instance_create(INSTANCE);
	}
	if (!h->inst)
		return log_guest(VMT_LOG_ERR, errno_or(-EIO), HOST_GUEST,
				 "cannot create the ftrace instance %s/" INSTANCE ": %m", path);
	h->dir = tracefs_instance_get_dir(h->inst);
	return h->dir ? 0 : -ENOMEM;
}

static int hostsrc_configure(struct vmt_hostsrc *h)
{
	const struct vmt_host_conf *hc = &h->env->conf->host;
	const char *clock = hc->clock[0] ? hc->clock : "mono";
	int r;

	/* a new instance traces at once: nothing may flow before the filters */
	if (tracefs_trace_off(h->inst) < 0)
		return log_guest(VMT_LOG_ERR, errno_or(-EIO), HOST_GUEST, "tracing_on=0: %m");
	errno = 0;
	if (hc->buffer_kb && tracefs_instance_set_buffer_size(h->inst, hc->buffer_kb, -1) < 0)
		return log_guest(VMT_LOG_ERR, errno_or(-EIO), HOST_GUEST, "buffer_size_kb=%u: %m",
				 hc->buffer_kb);
	errno = 0;
	if (tracefs_instance_file_write(h->inst, "trace_clock", clock) < 0)
		return log_guest(VMT_LOG_ERR, errno_or(-EINVAL), HOST_GUEST, "trace_clock=%s: %m",
				 clock);
	errno = 0;
	h->poll_ok = tracefs_instance_file_write(h->inst, "buffer_percent", BUFFER_PERCENT) > 0;
	r = hostsrc_enable_events(h);
	if (r >= 0 && hc->qemu_only)
		r = hostsrc_filter_sched(h);
	if (r < 0)
		return r;
	errno = 0;
	if (tracefs_instance_file_clear(h->inst, "trace") < 0)
		return log_guest(VMT_LOG_ERR, errno_or(-EIO), HOST_GUEST, "clearing the buffer: %m");
	return 0;
}

/* CPUs as the instance numbers them: one past the highest per_cpu/cpuN. */
static uint32_t hostsrc_count_cpus(const struct vmt_hostsrc *h)
{
	char path[PATH_MAX];
	struct dirent *de;
	uint32_t n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "%s/per_cpu", h->dir);
	d = opendir(path);
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		unsigned c;
		char tail;

		if (sscanf(de->d_name, "cpu%u%c", &c, &tail) == 1 && c < VMT_MAX_CPUS && c + 1 > n)
			n = c + 1;
	}
	closedir(d);
	return n;
}

/* ---- metadata --------------------------------------------------------------- */

static int hostsrc_meta(struct vmt_hostsrc *h, struct vmt_buf *b)
{
	struct vmt_ftmeta f = hostsrc_ftmeta(h);
	struct vmt_ftmeta_count n;
	char err[512];
	const char *why;
	int r;

	/* the host's kptr_restrict is left as it is: root reads real addresses
	 * unless it is 2 */
	r = ftmeta_bundle(&f, b, &n, err, sizeof(err));
	if (r < 0)
		return log_guest(VMT_LOG_ERR, r, HOST_GUEST, "metadata: %s", err);
	if (!n.systems)
		return log_guest(VMT_LOG_ERR, -ENOENT, HOST_GUEST, "no host event is enabled");
	if (meta_validate(b->data, b->len, &why) < 0)
		return log_guest(VMT_LOG_ERR, -EBADMSG, HOST_GUEST, "metadata: %s", why);
	return 0;
}

/* The host's task tables now, for the dump's sample, as an agent sends them;
 * the last ones stay if they cannot be read. */
void hostsrc_tasks(struct vmt_hostsrc *h)
{
	struct vmt_ftmeta f = hostsrc_ftmeta(h);
	struct vmt_buf t = { 0 };
	char err[512];

	if (ftmeta_tasks(&f, &t, err, sizeof(err)) < 0) {
		buf_free(&t);
		return;
	}
	buf_free(&h->g->tasks);
	h->g->tasks = t;
	guest_settle_meta(h->g);
}

/* ---- the "host" guest -------------------------------------------------------- */

static void read_line(const char *path, char *out, size_t n)
{
	_cleanup_free_ char *s = NULL;
	size_t len;

	out[0] = 0;
	if (read_file(path, 4096, &s, &len) < 0)
		return;
	s[strcspn(s, "\n")] = 0;
	snprintf(out, n, "%s", s);
}

/* Rings, hello and aux of the guest that stands for the host. */
static int hostsrc_guest(struct vmt_hostsrc *h, struct vmt_buf *bundle,
			 const struct vmt_page_layout *layout)
{
	const struct vmt_config *conf = h->env->conf;
	struct vmt_guest_conf gc = { .line = 0 };
	struct vmt_guest *g;
	struct vmt_hello *hl;
	struct vmt_aux *a;
	struct utsname u;
	char *clock;
	bool exists;
	int r;

	snprintf(gc.name, sizeof(gc.name), HOST_GUEST);
	gc.rec = conf->rec;
	gc.rec.ring_size = conf->host.ring_size;
	gc.rec.meta_max = META_MAX;
	snprintf(gc.rec.clock, sizeof(gc.rec.clock), "%s", conf->host.clock);
	snprintf(gc.rec.events, sizeof(gc.rec.events), "%s", conf->host.events);
	r = guest_new(h->env, &gc, &g);
	if (r < 0)
		return log_guest(VMT_LOG_ERR, r, HOST_GUEST, "%m");
	h->g = g;
	r = guest_setup_rings(g, h->ncpus, h->page_size);
	if (r < 0)
		return r == -ENOSPC ? r : log_guest(VMT_LOG_ERR, r, HOST_GUEST, "cannot allocate rings: %m");

	hl = &g->hello;
	hl->version = VMT_PROTO_VERSION;
	hl->ncpus = h->ncpus;
	hl->page_size = h->page_size;
	hl->mono_ns = now_monotonic_ns();
	if (uname(&u) == 0)
		snprintf(hl->release, sizeof(hl->release), "%s", u.release);
	clock = tracefs_get_clock(h->inst);
	snprintf(hl->clock, sizeof(hl->clock), "%s", clock ? clock : conf->host.clock);
	free(clock);
	read_line("/proc/sys/kernel/random/boot_id", hl->boot_id, sizeof(hl->boot_id));
	snprintf(hl->agent, sizeof(hl->agent), AGENT_NAME);
	g->have_hello = true;
	g->c.sessions = 1;

	a = &g->aux;
	snprintf(a->guest, sizeof(a->guest), HOST_GUEST);
	a->ncpus = hl->ncpus;
	a->page_size = hl->page_size;
	snprintf(a->release, sizeof(a->release), "%s", hl->release);
	snprintf(a->clock, sizeof(a->clock), "%s", hl->clock);
	snprintf(a->boot_id, sizeof(a->boot_id), "%s", hl->boot_id);
	snprintf(a->agent, sizeof(a->agent), "%s", hl->agent);
	a->meta = bundle->data;
	a->meta_len = bundle->len;
	*bundle = (struct vmt_buf){ 0 };
	a->id = aux_compute_id(a);
	a->created_ns = now_realtime_ns();
	a->version = guest_aux_version(g, a->id, &exists);
	g->have_aux = true;
	guest_settle_meta(g);	/* the bundle counts under memory_max until it is written */
	/* the bundle stays: the aux file is written ahead of the first sample */
	log_guest(VMT_LOG_INFO, 0, HOST_GUEST, "aux version %u (%s)", a->version,
		  exists ? "already on disk" : "new");

	g->layout = *layout;
	for (uint32_t i = 0; i < g->nrings; i++) {
		g->rings[i].layout = *layout;
		ring_reset_stream(&g->rings[i], 0);
		g->stream_base[i] = g->rings[i].next_seq;
	}
	g->state = GUEST_STREAMING;
	g->state_since_ns = now_monotonic_ns();
	return 0;
}

/* The header page says how big a sub-buffer is: data offset plus data size. */
static int hostsrc_layout(struct vmt_hostsrc *h, const struct vmt_buf *bundle,
			  struct vmt_page_layout *l)
{
	struct vmt_meta_entry e;
	char text[2048];
	const char *f;
	unsigned off, size;

	if (meta_find(bundle->data, bundle->len, "events/header_page", &e) < 0 ||
	    e.data_len >= sizeof(text))
		return -EBADMSG;
	memcpy(text, e.data, e.data_len);
	text[e.data_len] = 0;
	f = strstr(text, " data;");
	h->page_size = (uint32_t)getpagesize();
	if (f && sscanf(f, " data;\toffset:%u;\tsize:%u;", &off, &size) == 2 && off + size >= 64 &&
	    off + size <= (1u << 20))
		h->page_size = off + size;
	if (page_layout_parse(l, text, e.data_len, h->page_size) < 0)
		return log_guest(VMT_LOG_ERR, -EBADMSG, HOST_GUEST,
				 "events/header_page does not describe a page we can read");
	return 0;
}

static void src_flush(void *h)
{
	hostsrc_flush(h);
}

static void src_resume(void *h)
{
	hostsrc_resume(h);
}

static void src_free(void *h)
{
	hostsrc_free(h);
}

/* What the "host" guest asks of its source instead of an agent. */
static const struct vmt_source_ops hostsrc_ops = {
	.flush = src_flush,
	.resume = src_resume,
	.free = src_free,
};

int hostsrc_new(const struct vmt_guest_env *env, struct vmt_guest **out)
{
	const struct vmt_config *conf = env->conf;
	struct vmt_hostsrc *h;
	struct vmt_buf bundle = { 0 };
	struct vmt_page_layout layout;
	int r;

	*out = NULL;
	if (!conf->host.enabled)
		return 0;
	h = calloc(1, sizeof(*h));
	if (h)
		h->marker_fd = -1;
	if (!h)
		return log_guest(VMT_LOG_ERR, -ENOMEM, HOST_GUEST, "%m");
	h->env = env;
	errno = 0;
	h->top = tracefs_tracing_dir();
	if (!h->top) {
		r = log_guest(VMT_LOG_ERR, errno_or(-ENOENT), HOST_GUEST,
			      "tracefs not found and cannot be mounted: no host recording (%m)");
		goto fail;
	}
	r = hostsrc_instance(h);
	if (r >= 0)
		r = hostsrc_configure(h);
	if (r >= 0)
		r = hostsrc_meta(h, &bundle);
	if (r >= 0)
		r = hostsrc_layout(h, &bundle, &layout);
	if (r >= 0) {
		h->ncpus = hostsrc_count_cpus(h);
		if (!h->ncpus)
			r = log_guest(VMT_LOG_ERR, -ENOENT, HOST_GUEST, "no CPU in %s/per_cpu", h->dir);
	}
	if (r >= 0)
		r = hostsrc_open(h);
	if (r >= 0)
		r = hostsrc_guest(h, &bundle, &layout);
	if (r >= 0)
		r = hostsrc_watch(h);
	if (r >= 0 && tracefs_trace_on(h->inst) < 0)
		r = log_guest(VMT_LOG_ERR, errno_or(-EIO), HOST_GUEST, "tracing_on=1: %m");
	if (r < 0)
		goto fail;
	h->g->src = h;
	h->g->src_ops = &hostsrc_ops;
	*out = h->g;
	log_guest(VMT_LOG_INFO, 0, HOST_GUEST, "recording %s in ftrace instance " INSTANCE
		  " (%u CPUs, clock %s%s)", conf->host.events, h->ncpus, h->g->hello.clock,
		  conf->host.qemu_only ? ", sched events of QEMU threads only" : "");
	return 0;
fail:
	buf_free(&bundle);
	if (h->g) {
		guest_free(h->g);
		h->g = NULL;
	}
	hostsrc_free(h);
	return r;
}

bool hostsrc_is(const struct vmt_guest *g)
{
	return g && g->src_ops == &hostsrc_ops;
}

void hostsrc_mark(struct vmt_guest *g, const char *text)
{
	struct vmt_hostsrc *h = hostsrc_is(g) ? g->src : NULL;

	if (!h || !h->dir)
		return;
	if (h->marker_fd < 0) {
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/trace_marker", h->dir);
		h->marker_fd = open(path, O_WRONLY | O_CLOEXEC);
		if (h->marker_fd < 0)
			return;
	}
	if (write(h->marker_fd, text, strlen(text)) < 0)
		log_debug("host trace_marker: %m");
}

void hostsrc_free(struct vmt_hostsrc *h)
{
	if (!h)
		return;
	hostsrc_close(h);
	if (h->marker_fd >= 0)
		close(h->marker_fd);
	if (h->inst) {
		tracefs_trace_off(h->inst);
		tracefs_event_disable(h->inst, NULL, NULL);
		/* an open trace_pipe_raw would keep it busy: all are closed */
		errno = 0;
		if (tracefs_instance_destroy(h->inst) < 0)
			log_guest(VMT_LOG_WARNING, errno_or(-EBUSY), HOST_GUEST,
				  "cannot remove the ftrace instance " INSTANCE ": %m");
		tracefs_instance_free(h->inst);
	}
	if (h->dir)
		tracefs_put_tracing_file(h->dir);
	free(h);
}
