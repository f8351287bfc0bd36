/* SPDX-License-Identifier: MIT */
/*
 * The helper's side of hostpriv: the tracefs work of the host source. The
 * instance (host: instance, "vmtraced") is ours alone, so nothing another tracer set up is
 * touched; one left by a daemon that died is removed and made afresh. Its
 * events, the qemu_only filters and the metadata (built once, like the
 * agent's: it becomes the "host" guest's aux) are made here; the daemon
 * reads the pages through the descriptors handed back. One process, one
 * instance: its state is this file's.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <tracefs.h>
#include <unistd.h>

#include "ftmeta.h"
#include "hostpriv-int.h"
#include "log.h"
#include "meta.h"

#define HOST_GUEST "host"
#define META_MAX (256u << 20)	/* kallsyms alone is several MiB */
/*
 * poll() on trace_pipe_raw waits for at least one full page and for
 * buffer_percent of the buffer: 1% wakes the daemon every ~10 pages of a
 * 4 MiB buffer. 0 would not do: poll would then report a partial page,
 * which splice cannot take, and the loop would spin.
 */
#define BUFFER_PERCENT "1"

/* Thread names of QEMU: the process ("qemu-system-x86", "qemu-kvm"), its
 * vCPUs with debug-threads=on ("CPU 0/KVM", "CPU 0/TCG"), vhost workers. */
static const char *const qemu_comms[] = { "qemu*", "CPU *", "vhost-*" };

static struct tfs {
	struct tracefs_instance *inst;
	char *dir;		/* the instance's folder */
	const char *top;	/* tracefs */
	const struct hp_setup *rq;
} tfs;

static int errno_or(int fallback)
{
	return errno > 0 ? -errno : fallback;
}

/* Where ftmeta finds the instance's files and the host's. */
static struct vmt_ftmeta tfs_ftmeta(void)
{
	return (struct vmt_ftmeta){ .top = tfs.top, .inst = tfs.dir, .kallsyms = "/proc/kallsyms",
				    .max = META_MAX };
}

/* Enable the events; those that match nothing are named in one message. */
static int tfs_enable_events(void)
{
	const char *list = tfs.rq->events;
	struct vmt_ftmeta f = tfs_ftmeta();
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
static int tfs_filter_sched(void)
{
	_cleanup_free_ char *set = tracefs_instance_file_read(tfs.inst, "set_event", NULL);
	char *save = NULL;

	if (!set)
		return log_guest(VMT_LOG_ERR, errno_or(-EIO), HOST_GUEST, "cannot read set_event: %m");
	for (char *l = strtok_r(set, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		_cleanup_free_ char *fmt = NULL;
		char path[PATH_MAX], filter[512] = "";
		size_t len;

		if (strncmp(l, "sched:", 6))
			continue;
		snprintf(path, sizeof(path), "%s/events/sched/%s/format", tfs.top, l + 6);
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
		if (tracefs_event_file_write(tfs.inst, "sched", l + 6, "filter", filter) < 0) {
			log_guest(VMT_LOG_WARNING, errno_or(-EIO), HOST_GUEST,
				  "sched:%s: filter '%s' refused, event left out: %m", l + 6, filter);
			tracefs_event_file_write(tfs.inst, "sched", l + 6, "enable", "0");
			continue;
		}
		log_guest(VMT_LOG_DEBUG, 0, HOST_GUEST, "sched:%s filter: %s", l + 6, filter);
	}
	return 0;
}

/* Create the instance, or remove a stale one and create it again. */
static int tfs_instance(void)
{
	char path[PATH_MAX];

	/* libtracefs leaks when it cannot make the folder: ask first */
	snprintf(path, sizeof(path), "%s/instances", tfs.top);
	if (faccessat(AT_FDCWD, path, W_OK | X_OK, AT_EACCESS) < 0)
		return log_guest(VMT_LOG_ERR, -errno, HOST_GUEST,
				 "cannot create ftrace instances in %s (root needed): %m", path);
	errno = 0;
	tfs.inst = tracefs_instance_create(tfs.rq->instance);
	if (tfs.inst && !tracefs_instance_is_new(tfs.inst)) {
		log_guest(VMT_LOG_NOTICE, 0, HOST_GUEST,
			  "ftrace instance %s left from an earlier run: made afresh", tfs.rq->instance);
		errno = 0;
		if (tracefs_instance_destroy(tfs.inst) < 0) {
			int r = errno_or(-EBUSY);
			tracefs_instance_free(tfs.inst);
			tfs.inst = NULL;
			return log_guest(VMT_LOG_ERR, r, HOST_GUEST,
					 "cannot remove the ftrace instance %s (another vmtraced running?): %m",
					 tfs.rq->instance);
		}
		tracefs_instance_free(tfs.inst);
		errno = 0;
		tfs.inst = tracefs_instance_create(tfs.rq->instance);
	}
	if (!tfs.inst)
		return log_guest(VMT_LOG_ERR, errno_or(-EIO), HOST_GUEST,
				 "cannot create the ftrace instance %s/%s: %m", path, tfs.rq->instance);
	tfs.dir = tracefs_instance_get_dir(tfs.inst);
	return tfs.dir ? 0 : -ENOMEM;
}

static int tfs_configure(void)
{
	const char *clock = tfs.rq->clock[0] ? tfs.rq->clock : "mono";
	int r;

	/* a new instance traces at once: nothing may flow before the filters */
	if (tracefs_trace_off(tfs.inst) < 0)
		return log_guest(VMT_LOG_ERR, errno_or(-EIO), HOST_GUEST, "tracing_on=0: %m");
	errno = 0;
	if (tfs.rq->buffer_kb && tracefs_instance_set_buffer_size(tfs.inst, tfs.rq->buffer_kb, -1) < 0)
		return log_guest(VMT_LOG_ERR, errno_or(-EIO), HOST_GUEST, "buffer_size_kb=%u: %m",
				 tfs.rq->buffer_kb);
	errno = 0;
	if (tracefs_instance_file_write(tfs.inst, "trace_clock", clock) < 0)
		return log_guest(VMT_LOG_ERR, errno_or(-EINVAL), HOST_GUEST, "trace_clock=%s: %m",
				 clock);
	r = tfs_enable_events();
	if (r >= 0 && tfs.rq->qemu_only)
		r = tfs_filter_sched();
	if (r < 0)
		return r;
	errno = 0;
	if (tracefs_instance_file_clear(tfs.inst, "trace") < 0)
		return log_guest(VMT_LOG_ERR, errno_or(-EIO), HOST_GUEST, "clearing the buffer: %m");
	return 0;
}

/* CPUs as the instance numbers them: one past the highest per_cpu/cpuN. */
static uint32_t tfs_count_cpus(void)
{
	char path[PATH_MAX];
	struct dirent *de;
	uint32_t n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "%s/per_cpu", tfs.dir);
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

/* b into a sealed memfd. */
static int tfs_memfd(const struct vmt_buf *b, const char *name)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	size_t off = 0;

	if (fd < 0)
		return -errno;
	while (off < b->len) {
		ssize_t n = write(fd, b->data + off, b->len - off);
		if (n <= 0) {
			int r = n < 0 ? -errno : -EIO;
			close(fd);
			return r;
		}
		off += (size_t)n;
	}
	fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);
	return fd;
}

static int tfs_meta(struct vmt_buf *b)
{
	struct vmt_ftmeta f = tfs_ftmeta();
	struct vmt_ftmeta_count n;
	char err[512];
	const char *why;
	int r;

	/* the host's kptr_restrict is left as it is: CAP_SYSLOG reads real
	 * addresses unless it is 2 */
	r = ftmeta_bundle(&f, b, &n, err, sizeof(err));
	if (r < 0)
		return log_guest(VMT_LOG_ERR, r, HOST_GUEST, "metadata: %s", err);
	if (!n.systems)
		return log_guest(VMT_LOG_ERR, -ENOENT, HOST_GUEST, "no host event is enabled");
	if (meta_validate(b->data, b->len, &why) < 0)
		return log_guest(VMT_LOG_ERR, -EBADMSG, HOST_GUEST, "metadata: %s", why);
	return 0;
}

static void tfs_destroy(void)
{
	if (tfs.inst) {
		tracefs_trace_off(tfs.inst);
		tracefs_event_disable(tfs.inst, NULL, NULL);
		/* an open trace_pipe_raw would keep it busy: the daemon closed its
		 * own, ours were closed once sent */
		errno = 0;
		if (tracefs_instance_destroy(tfs.inst) < 0)
			log_guest(VMT_LOG_WARNING, errno_or(-EBUSY), HOST_GUEST,
				  "cannot remove the ftrace instance %s: %m", tfs.rq->instance);
		tracefs_instance_free(tfs.inst);
		tfs.inst = NULL;
	}
	if (tfs.dir)
		tracefs_put_tracing_file(tfs.dir);
	tfs.dir = NULL;
}

/* Strings from the daemon: NUL inside, and what tracefs takes. */
static bool setup_valid(const struct hp_setup *rq)
{
	size_t ne = strnlen(rq->events, sizeof(rq->events));
	size_t nc = strnlen(rq->clock, sizeof(rq->clock));

	/* a name, never a path: the helper may write where the daemon may not */
	if (strnlen(rq->instance, sizeof(rq->instance)) == sizeof(rq->instance) ||
	    !config_host_instance_ok(rq->instance))
		return false;

	if (ne == sizeof(rq->events) || nc == sizeof(rq->clock) || rq->buffer_kb > (1u << 22))
		return false;
	for (size_t i = 0; i < nc; i++)
		if (!((rq->clock[i] >= 'a' && rq->clock[i] <= 'z') ||
		      (rq->clock[i] >= '0' && rq->clock[i] <= '9') || rq->clock[i] == '_'))
			return false;
	/* the list is split and each pattern checked by ftmeta_events_plan */
	return true;
}

static int serve_setup(int fd, const struct hp_setup *rq)
{
	struct hp_setup_reply rp = { 0 };
	struct vmt_buf meta = { 0 };
	int fds[2] = { -1, -1 }, cpu[HP_FDS_MAX];
	unsigned ncpu = 0;
	ssize_t kb;
	char *clock;
	int r;

	tfs_destroy();	/* a set-up before this one the daemon did not take down */
	tfs.rq = rq;
	errno = 0;
	tfs.top = tracefs_tracing_dir();
	if (!tfs.top) {
		r = log_guest(VMT_LOG_ERR, errno_or(-ENOENT), HOST_GUEST,
			      "tracefs not found and cannot be mounted: no host recording (%m)");
		return hp_send(fd, HP_REPLY, r, NULL, 0, NULL, 0);
	}
	r = tfs_instance();
	if (r >= 0)
		r = tfs_configure();
	if (r >= 0)
		r = tfs_meta(&meta);
	if (r >= 0) {
		rp.ncpus = tfs_count_cpus();
		if (!rp.ncpus)
			r = log_guest(VMT_LOG_ERR, -ENOENT, HOST_GUEST, "no CPU in %s/per_cpu", tfs.dir);
	}
	if (r >= 0) {
		fds[0] = tfs_memfd(&meta, "vmtraced-host-meta");
		if (fds[0] < 0)
			r = log_guest(VMT_LOG_ERR, fds[0], HOST_GUEST, "memfd: %m");
	}
	buf_free(&meta);
	if (r < 0) {
		tfs_destroy();
		return hp_send(fd, HP_REPLY, r, NULL, 0, NULL, 0);
	}
	errno = 0;
	rp.poll_ok = tracefs_instance_file_write(tfs.inst, "buffer_percent", BUFFER_PERCENT) > 0;
	kb = tracefs_instance_get_buffer_size(tfs.inst, 0);
	rp.buffer_kb = kb > 0 && kb <= UINT32_MAX ? (uint32_t)kb : 0;
	clock = tracefs_get_clock(tfs.inst);
	snprintf(rp.clock, sizeof(rp.clock), "%s", clock ? clock : (rq->clock[0] ? rq->clock : "mono"));
	free(clock);
	snprintf(rp.dir, sizeof(rp.dir), "%s", tfs.dir);
	{
		char path[PATH_MAX];

		snprintf(path, sizeof(path), "%s/trace_marker", tfs.dir);
		fds[1] = open(path, O_WRONLY | O_CLOEXEC);
		rp.have_marker = fds[1] >= 0;
	}
	/* which CPUs have a buffer: a CPU that is not there has none */
	int *all = calloc(rp.ncpus, sizeof(*all));
	if (!all) {
		r = -ENOMEM;
	} else {
		for (uint32_t i = 0; i < rp.ncpus; i++) {
			char path[PATH_MAX];

			snprintf(path, sizeof(path), "%s/per_cpu/cpu%u/trace_pipe_raw", tfs.dir, i);
			all[i] = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
			rp.present[i] = all[i] >= 0;
			rp.nfds += all[i] >= 0;
		}
		if (!rp.nfds)
			r = log_guest(VMT_LOG_ERR, -ENOENT, HOST_GUEST,
				      "no per_cpu/cpuN/trace_pipe_raw can be opened in %s", tfs.dir);
	}
	if (r >= 0)
		r = hp_send(fd, HP_REPLY, 0, &rp, sizeof(rp), fds, rp.have_marker ? 2 : 1);
	else
		hp_send(fd, HP_REPLY, r, NULL, 0, NULL, 0);
	for (uint32_t i = 0; all && r >= 0 && i < rp.ncpus; i++) {
		if (all[i] >= 0)
			cpu[ncpu++] = all[i];
		if (ncpu == HP_FDS_MAX || (ncpu && i + 1 == rp.ncpus)) {
			struct hp_fds n = { .n = ncpu };
			r = hp_send(fd, HP_FDS, 0, &n, sizeof(n), cpu, ncpu);
			ncpu = 0;
		}
	}
	/* ours are closed: the daemon's keep the buffers open, and ours would
	 * keep the instance busy when it is to go */
	for (uint32_t i = 0; all && i < rp.ncpus; i++)
		if (all[i] >= 0)
			close(all[i]);
	free(all);
	for (int i = 0; i < 2; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	if (r < 0)
		tfs_destroy();
	return r;
}

static int serve_tasks(int fd)
{
	struct vmt_ftmeta f = tfs_ftmeta();
	struct vmt_buf t = { 0 };
	char err[512];
	int r = tfs.inst ? ftmeta_tasks(&f, &t, err, sizeof(err)) : -ENOENT;
	int mfd = r >= 0 ? tfs_memfd(&t, "vmtraced-host-tasks") : -1;

	buf_free(&t);
	if (r >= 0 && mfd < 0)
		r = mfd;
	r = hp_send(fd, HP_REPLY, r < 0 ? r : 0, NULL, 0, mfd >= 0 ? &mfd : NULL, mfd >= 0);
	if (mfd >= 0)
		close(mfd);
	return r;
}

int hostpriv_serve_one(int fd)
{
	static struct hp_setup rq;	/* 4 KiB: not on the stack of every call */
	struct hp_hdr h;
	unsigned nfds = 0;
	int r = hp_recv(fd, -1, &h, &rq, sizeof(rq), NULL, &nfds);

	if (r < 0)
		return r;
	switch (h.type) {
	case HP_HELLO: {
		struct hp_hello hl = { .pid = (uint32_t)getpid() };
		return h.len ? -EBADMSG : hp_send(fd, HP_REPLY, 0, &hl, sizeof(hl), NULL, 0);
	}
	case HP_SETUP:
		if (h.len != sizeof(rq) || !setup_valid(&rq)) {
			log_guest(VMT_LOG_ERR, -EBADMSG, HOST_GUEST, "host source helper: a set-up "
				  "request that does not check: refused");
			return hp_send(fd, HP_REPLY, -EINVAL, NULL, 0, NULL, 0);
		}
		return serve_setup(fd, &rq);
	case HP_TRACE_ON:
		if (h.len)
			return -EBADMSG;
		errno = 0;
		r = !tfs.inst ? -ENOENT : tracefs_trace_on(tfs.inst) < 0 ? errno_or(-EIO) : 0;
		if (r < 0)
			log_guest(VMT_LOG_ERR, r, HOST_GUEST, "tracing_on=1: %m");
		return hp_send(fd, HP_REPLY, r, NULL, 0, NULL, 0);
	case HP_TASKS:
		return h.len ? -EBADMSG : serve_tasks(fd);
	case HP_DESTROY:
		if (h.len)
			return -EBADMSG;
		tfs_destroy();
		return hp_send(fd, HP_REPLY, 0, NULL, 0, NULL, 0);
	default:
		return -EBADMSG;
	}
}
