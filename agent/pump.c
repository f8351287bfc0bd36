/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "ftrace.h"
#include "log.h"
#include "proto.h"
#include "pump.h"
#include "util.h"

/* With no full page ready, look again when a pipeful should be: poll() on
 * trace_pipe_raw only wakes at buffer_percent (half full by default), so
 * the pump sets its own deadline from the rate it has seen. A wake-up costs
 * the same for one page as for sixteen, and under a slow stream most of
 * the agent's CPU went to waking every 100 ms for a page or two. Never
 * sooner than BUSY_POLL_MS (a stream faster than a pipeful in that time
 * keeps the pump looping without a wait), never later than IDLE_POLL_MAX_MS
 * nor the partial-page interval: a full page leaves the guest as soon as a
 * partial one would, so a guest that dies still leaves its last second. */
#define BUSY_POLL_MS 10
#define IDLE_POLL_MAX_MS 1000
/* A port whose host end is closed reports POLLHUP without waiting */
#define HUP_POLL_MS 100
/* Without a buffer_size_kb to go by, a flush drains at most this much */
#define FLUSH_DRAIN_DEFAULT (64u << 20)

struct vmt_pump {
	struct vmt_pumps *set;
	unsigned cpu;
	int trace_fd, port_fd, pipe_rd, pipe_wr, wake_fd;
	size_t chunk;		/* pipe capacity, whole pages */
	uint64_t drain_max;	/* a flush moves at most this many full-page bytes */
	size_t in_pipe;		/* spliced in, not yet out */
	uint64_t bytes_sent;	/* the thread's own; copied into stats at a cut */
	struct vmt_cpu_stats stats;	/* at the last cut, under set->lock */
	bool failed;		/* stopped consuming after an error */
	uint64_t partial_due_ns;	/* CLOCK_MONOTONIC: the next timed partial page */
	uint64_t waited_ns;	/* CLOCK_MONOTONIC: when the last wait began */
	uint64_t rate;		/* bytes per second, smoothed over the waits */
	uint8_t *page;		/* the partial page read at a flush */
	pthread_t thread;
	bool running;
};

struct vmt_pumps {
	pthread_mutex_t lock;
	unsigned ncpus, page_size;
	int notify_fd;
	uint64_t flush_interval_ns;	/* timed partial pages, 0: none */
	uint64_t gen;		/* last flush asked */
	uint64_t collected;	/* last flush handed out by pump_flush_done */
	unsigned pending;	/* CPUs yet to answer gen */
	bool final, quit;
	struct vmt_pump cpu[];
};

static void fd_close(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void pump_wake(struct vmt_pump *c)
{
	uint64_t one = 1;

	if (write(c->wake_fd, &one, sizeof(one)) < 0)
		log_debug("cpu%u: wake: %m", c->cpu);
}

static void wake_drain(struct vmt_pump *c)
{
	uint64_t v;

	if (read(c->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		log_debug("cpu%u: wake read: %m", c->cpu);
}

static bool pump_quitting(struct vmt_pump *c)
{
	bool r;

	pthread_mutex_lock(&c->set->lock);
	r = c->set->quit;
	pthread_mutex_unlock(&c->set->lock);
	return r;
}

static bool pump_should_stop(struct vmt_pump *c, uint64_t seen)
{
	bool r;

	pthread_mutex_lock(&c->set->lock);
	r = c->set->quit || c->set->gen != seen;
	pthread_mutex_unlock(&c->set->lock);
	return r;
}

/*
 * Waits until the port takes more, or the pump is woken. A closed host end
 * (socket chardev not connected) shows as POLLHUP without POLLOUT and does
 * not block poll(): wait on the wake fd alone then.
 */
static int port_wait(struct vmt_pump *c)
{
	struct pollfd p[2] = { { c->port_fd, POLLOUT, 0 }, { c->wake_fd, POLLIN, 0 } };
	int n = poll(p, 2, -1);

	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	if ((p[0].revents & (POLLHUP | POLLERR)) && !(p[0].revents & POLLOUT)) {
		if (poll(&p[1], 1, HUP_POLL_MS) < 0 && errno != EINTR)
			return -errno;
	}
	if (p[0].revents & POLLNVAL)
		return -EBADF;
	return 0;
}

/* A write or splice to the port gave n <= 0: 0 to try again (interrupted,
 * or the port has room now), or -errno. */
static int port_retry(struct vmt_pump *c, ssize_t n)
{
	if (n == 0)
		return -EIO;
	if (errno == EINTR)
		return 0;
	if (errno != EAGAIN)
		return -errno;
	if (pump_quitting(c))
		return -ECANCELED;
	return port_wait(c);
}

/* Empties the pipe into the port. Blocks (in poll) while the host does not
 * read; only quit interrupts it, since a flush must not lose bytes. */
static int pipe_out(struct vmt_pump *c)
{
	int r;

	while (c->in_pipe) {
		ssize_t n = splice(c->pipe_rd, NULL, c->port_fd, NULL, c->in_pipe,
				   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n > 0) {
			c->in_pipe -= (size_t)n;
			c->bytes_sent += (uint64_t)n;
			continue;
		}
		r = port_retry(c, n);
		if (r < 0)
			return r;
	}
	return 0;
}

/* A buffer of page_size bytes to the port; write() of a virtio port takes
 * up to 32 KiB at once, so a page goes out whole or not at all. */
static int page_out(struct vmt_pump *c, const uint8_t *p, size_t len)
{
	size_t done = 0;
	int r;

	while (done < len) {
		ssize_t n = write(c->port_fd, p + done, len - done);
		if (n > 0) {
			done += (size_t)n;
			c->bytes_sent += (uint64_t)n;
			continue;
		}
		r = port_retry(c, n);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Moves the full pages ready now. Bytes moved, 0 if none, or -errno. */
static ssize_t pump_move(struct vmt_pump *c)
{
	ssize_t n;
	int r;

	n = splice(c->trace_fd, NULL, c->pipe_wr, NULL, c->chunk, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	c->in_pipe += (size_t)n;
	r = pipe_out(c);
	return r < 0 ? r : n;
}

/* How long to wait for the next pipeful, in ms, from the rate moved
 * over the waits before (a quarter of each new reading: a burst does not
 * shorten the waits at once, but a half-full buffer wakes poll() anyway). */
static int pump_timeout(struct vmt_pump *c, uint64_t round, uint64_t now)
{
	uint64_t cap = IDLE_POLL_MAX_MS, ms;
	uint64_t flush_ms = c->set->flush_interval_ns / 1000000;

	if (c->waited_ns && now > c->waited_ns) {
		uint64_t r = round * 1000000000ull / (now - c->waited_ns);
		c->rate = c->rate ? (3 * c->rate + r) / 4 : r;
	}
	c->waited_ns = now;
	if (flush_ms && flush_ms < cap)
		cap = flush_ms;
	if (c->partial_due_ns > now && (c->partial_due_ns - now) / 1000000 < cap)
		cap = (c->partial_due_ns - now) / 1000000 + 1;
	ms = c->rate ? c->chunk * 1000ull / c->rate : cap;
	if (ms > cap)
		ms = cap;
	return ms < BUSY_POLL_MS ? BUSY_POLL_MS : (int)ms;
}

/* Waits for pages, a flush or quit, without spinning. */
static void pump_idle(struct vmt_pump *c, uint64_t round)
{
	struct pollfd p[2] = { { c->trace_fd, POLLIN, 0 }, { c->wake_fd, POLLIN, 0 } };
	int n = c->failed ? poll(&p[1], 1, -1)
			  : poll(p, 2, pump_timeout(c, round, now_monotonic_ns()));

	if (n < 0 && errno != EINTR)
		log_debug("cpu%u: poll: %m", c->cpu);
	if (p[1].revents & POLLIN)
		wake_drain(c);
}

static void pump_fail(struct vmt_pump *c, int r, const char *what)
{
	log_error_errno(r, "cpu%u: %s: %m; this CPU stops streaming", c->cpu, what);
	c->failed = true;
}

/* One read() of trace_pipe_raw hands out the page being written, with
 * its commit so far. 1 if a page went out, 0 if there was none, -errno. */
static int pump_read_page(struct vmt_pump *c)
{
	ssize_t n = read(c->trace_fd, c->page, c->set->page_size);

	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (n == 0)
		return 0;
	if ((size_t)n < c->set->page_size) {
		/* never seen; keeps the port page-aligned for the host */
		log_warning("cpu%u: partial read of %zd bytes, padded", c->cpu, n);
		memset(c->page + n, 0, c->set->page_size - (size_t)n);
	}
	n = page_out(c, c->page, c->set->page_size);
	return n < 0 ? (int)n : 1;
}

/*
 * The cut for one CPU: the full pages, then the partial page, then the
 * stats, with nothing consumed in between, so that "read events" counts
 * exactly the events inside the first bytes_sent bytes of the port. The
 * final cut (tracing is off by then) reads until the buffer is empty.
 */
static void pump_cut(struct vmt_pump *c, bool final, struct vmt_cpu_stats *st)
{
	uint64_t start = c->bytes_sent;
	ssize_t n = 0;
	int r;

	/* what was in the buffer when the flush came is at most its size; more
	 * would be chasing a CPU that produces as fast as we drain (the function
	 * tracer records the pump's own work) */
	while (!c->failed && c->bytes_sent - start < c->drain_max) {
		n = pump_move(c);
		if (n <= 0)
			break;
	}
	for (unsigned k = 0; n >= 0 && !c->failed; k++) {
		n = pump_read_page(c);
		if (n <= 0 || !final || (uint64_t)k * c->set->page_size > c->drain_max)
			break;
	}
	if (n < 0 && n != -ECANCELED)
		pump_fail(c, (int)n, "flush");
	memset(st, 0, sizeof(*st));
	st->bytes_sent = c->bytes_sent;
	r = ftrace_cpu_stats(c->cpu, st);
	if (r < 0)
		log_error_errno(r, "cpu%u: stats: %m", c->cpu);
	log_debug("cpu%u: %sflush at %llu bytes, read events %llu", c->cpu, final ? "final " : "",
		  (unsigned long long)st->bytes_sent, (unsigned long long)st->read);
}

/*
 * The timed partial page: at most one per interval. A read of
 * trace_pipe_raw gives nothing (EAGAIN) when every event has gone out, so
 * an idle CPU sends only when it has new events. A CPU that moved whole
 * pages since the last wait has little in its partial page: its turn
 * waits for a quiet moment, or the end of the next interval.
 */
static void pump_partial(struct vmt_pump *c, uint64_t round)
{
	uint64_t now = now_monotonic_ns();
	int r;

	if (!c->partial_due_ns)
		c->partial_due_ns = now + c->set->flush_interval_ns;
	if (now < c->partial_due_ns || (round && now < c->partial_due_ns + c->set->flush_interval_ns))
		return;
	c->partial_due_ns = now + c->set->flush_interval_ns;
	r = pump_read_page(c);
	if (r < 0 && r != -ECANCELED)
		pump_fail(c, r, "partial page");
}

static void *pump_main(void *arg)
{
	struct vmt_pump *c = arg;
	struct vmt_pumps *s = c->set;
	uint64_t seen = 0;
	uint64_t round = 0;	/* bytes moved since the last wait */

	for (;;) {
		uint64_t gen;
		bool quit, final;

		pthread_mutex_lock(&s->lock);
		gen = s->gen;
		quit = s->quit;
		final = s->final;
		pthread_mutex_unlock(&s->lock);
		if (quit)
			break;
		if (gen != seen) {
			struct vmt_cpu_stats st;
			uint64_t one = 1;

			pump_cut(c, final, &st);
			seen = gen;
			pthread_mutex_lock(&s->lock);
			c->stats = st;
			if (--s->pending == 0 && write(s->notify_fd, &one, sizeof(one)) < 0)
				log_error("notify: %m");
			pthread_mutex_unlock(&s->lock);
			if (final)
				break;
			continue;
		}
		if (!c->failed) {
			ssize_t n = pump_move(c);
			if (n > 0)
				round += (uint64_t)n;
			/* less than a pipeful: no other full page was ready */
			if (n >= (ssize_t)c->chunk)
				continue;
			if (n == -ECANCELED)
				break;
			if (n < 0)
				pump_fail(c, (int)n, "splice");
		}
		if (!c->failed && s->flush_interval_ns)
			pump_partial(c, round);
		if (!pump_should_stop(c, seen))
			pump_idle(c, round);
		round = 0;
	}
	return NULL;
}

static int pump_open_cpu(struct vmt_pump *c, const char *tdir, const char *pdir)
{
	char path[512], *kb;
	size_t len;
	int fds[2];
	long sz;

	snprintf(path, sizeof(path), "%s/per_cpu/cpu%u/trace_pipe_raw", tdir, c->cpu);
	c->trace_fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (c->trace_fd < 0)
		return log_error_errno(-errno, "%s: %m", path);
	/* non-blocking so that a host that stops reading cannot wedge a pump:
	 * the thread waits in poll() where it can be woken */
	snprintf(path, sizeof(path), "%s/trace-path-cpu%u", pdir, c->cpu);
	c->port_fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	if (c->port_fd < 0)
		return log_error_errno(-errno, "%s: %m", path);
	if (pipe2(fds, O_CLOEXEC) < 0)
		return log_error_errno(-errno, "pipe: %m");
	c->pipe_rd = fds[0];
	c->pipe_wr = fds[1];
	/* a splice into the port becomes one virtqueue buffer with an sg entry
	 * per page: the default pipe (16 pages) relies on indirect descriptors
	 * less than a bigger one would, and 64 pages were measured no faster */
	sz = fcntl(c->pipe_wr, F_GETPIPE_SZ);
	c->chunk = sz > 0 ? (size_t)sz : 65536;
	c->chunk -= c->chunk % c->set->page_size;
	if (!c->chunk)
		return log_error_errno(-EINVAL, "pipe smaller than a page");
	snprintf(path, sizeof(path), "%s/per_cpu/cpu%u/buffer_size_kb", tdir, c->cpu);
	c->drain_max = FLUSH_DRAIN_DEFAULT;
	if (read_file(path, 64, &kb, &len) == 0) {
		/* "1408" or "7 (expanded: 1408)" before first use */
		char *x = strstr(kb, "expanded:");
		unsigned long long v = strtoull(x ? x + 9 : kb, NULL, 10);
		if (v)
			c->drain_max = v * 1024 + c->chunk;
		free(kb);
	}
	c->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (c->wake_fd < 0)
		return log_error_errno(-errno, "eventfd: %m");
	c->page = malloc(c->set->page_size);
	return c->page ? 0 : -ENOMEM;
}

int pump_open(struct vmt_pumps **out, const char *tracing_dir, const char *ports_dir,
	      unsigned ncpus, unsigned page_size, int notify_fd, unsigned flush_interval_ms)
{
	struct vmt_pumps *s;
	int r = 0;

	s = calloc(1, sizeof(*s) + ncpus * sizeof(s->cpu[0]));
	if (!s)
		return -ENOMEM;
	pthread_mutex_init(&s->lock, NULL);
	s->ncpus = ncpus;
	s->page_size = page_size;
	s->notify_fd = notify_fd;
	s->flush_interval_ns = (uint64_t)flush_interval_ms * 1000000;
	for (unsigned i = 0; i < ncpus; i++) {
		struct vmt_pump *c = &s->cpu[i];

		c->set = s;
		c->cpu = i;
		c->trace_fd = c->port_fd = c->pipe_rd = c->pipe_wr = c->wake_fd = -1;
	}
	for (unsigned i = 0; i < ncpus && r >= 0; i++)
		r = pump_open_cpu(&s->cpu[i], tracing_dir, ports_dir);
	if (r < 0) {
		pump_close(s);
		return r;
	}
	*out = s;
	return 0;
}

int pump_run(struct vmt_pumps *s)
{
	for (unsigned i = 0; i < s->ncpus; i++) {
		struct vmt_pump *c = &s->cpu[i];
		int r = pthread_create(&c->thread, NULL, pump_main, c);

		if (r)
			return log_error_errno(-r, "cpu%u: thread: %m", i);
		c->running = true;
	}
	return 0;
}

int pump_flush(struct vmt_pumps *s, bool final)
{
	pthread_mutex_lock(&s->lock);
	if (s->pending) {
		pthread_mutex_unlock(&s->lock);
		return -EBUSY;
	}
	s->gen++;
	s->final = final;
	s->pending = s->ncpus;
	pthread_mutex_unlock(&s->lock);
	for (unsigned i = 0; i < s->ncpus; i++)
		pump_wake(&s->cpu[i]);
	return 0;
}

bool pump_flush_pending(struct vmt_pumps *s)
{
	bool r;

	pthread_mutex_lock(&s->lock);
	r = s->pending > 0;
	pthread_mutex_unlock(&s->lock);
	return r;
}

int pump_flush_done(struct vmt_pumps *s, struct vmt_cpu_stats *st)
{
	int r = 0;

	pthread_mutex_lock(&s->lock);
	if (!s->pending && s->gen != s->collected) {
		for (unsigned i = 0; i < s->ncpus; i++)
			st[i] = s->cpu[i].stats;
		s->collected = s->gen;
		r = 1;
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

void pump_close(struct vmt_pumps *s)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->quit = true;
	pthread_mutex_unlock(&s->lock);
	for (unsigned i = 0; i < s->ncpus; i++)
		if (s->cpu[i].running)
			pump_wake(&s->cpu[i]);
	for (unsigned i = 0; i < s->ncpus; i++) {
		struct vmt_pump *c = &s->cpu[i];

		if (c->running)
			pthread_join(c->thread, NULL);
		fd_close(&c->trace_fd);
		fd_close(&c->port_fd);
		fd_close(&c->pipe_rd);
		fd_close(&c->pipe_wr);
		fd_close(&c->wake_fd);
		free(c->page);
	}
	pthread_mutex_destroy(&s->lock);
	free(s);
}
