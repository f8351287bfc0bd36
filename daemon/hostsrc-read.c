/* SPDX-License-Identifier: MIT */
/*
 * hostsrc-read: the host source's pages into the "host" guest's rings.
 * Full pages are spliced out of each CPU's trace_pipe_raw into a pipe and
 * read from it into the ring's fill slot, as poll() (or, where it cannot,
 * a timer) says they come; a flush also read()s the page the kernel is
 * still writing. Reading pauses while a dump holds the ring's next page.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hostsrc-int.h"
#include "log.h"

#define READ_BUDGET_PAGES 64	/* per callback, so the host cannot starve the guests */
_Static_assert(READ_BUDGET_PAGES <= VMT_RING_BURST_PAGES, "see ring.h");
#define PIPE_PAGES 64
#define POLL_USEC 100000	/* when trace_pipe_raw cannot be polled */
#define PARTIAL_READS 4		/* a flush reads the page being written, and a few more */
#define EMPTY_WAKEUPS_MAX 100	/* poll said ready but no page came: poll is not for us */

static void hostsrc_cpu_fail(struct vmt_hostsrc_cpu *c, int err, const char *what)
{
	if (!c->broken)
		log_guest(VMT_LOG_ERR, err, HOST_GUEST, "cpu%u: %s failed, its events are lost from now: %m",
			  c->cpu, what);
	c->broken = true;
	c->src = sd_event_source_disable_unref(c->src);
}

static void hostsrc_commit(struct vmt_hostsrc_cpu *c, struct vmt_ring *r, uint32_t n)
{
	int k = ring_fill_commit(r, n);

	if (k == -EBADMSG && c->rejected_logged++ < 3)
		log_guest(VMT_LOG_WARNING, 0, HOST_GUEST,
			  "cpu%u: page %llu rejected (bad commit or event length)", c->cpu,
			  (unsigned long long)(r->next_seq - 1));
	if (k == 1)
		guest_compress(c->h->g, c->cpu);
}

/* The ring's next page is held by a dump and the reserve is used up: the
 * kernel's buffer (and the pipe) hold the trace until a dump is written. */
static void hostsrc_pause(struct vmt_hostsrc_cpu *c)
{
	if (c->paused)
		return;
	c->paused = true;
	c->empty_wakeups = 0;
	guest_count_read_pause(c->h->g);
	if (c->src)
		sd_event_source_set_enabled(c->src, SD_EVENT_OFF);
	log_guest(VMT_LOG_WARNING, 0, HOST_GUEST, "cpu%u: reading paused: its next page is held by a dump "
		  "being written and dump_reserve is used up", c->cpu);
}

void hostsrc_resume(struct vmt_hostsrc *h)
{
	for (uint32_t i = 0; h && h->cpus && i < h->ncpus; i++) {
		struct vmt_hostsrc_cpu *c = &h->cpus[i];

		if (!c->paused)
			continue;
		c->paused = false;
		if (c->src && !c->broken)
			sd_event_source_set_enabled(c->src, SD_EVENT_ON);
	}
}

/* Move up to budget whole pages of one CPU into its ring: true once the
 * kernel has no full page left (or reading stopped), false if the budget
 * ran out first. */
static bool hostsrc_pump(struct vmt_hostsrc_cpu *c, uint32_t budget)
{
	struct vmt_hostsrc *h = c->h;
	struct vmt_ring *r = guest_ring(h->g, c->cpu);
	uint32_t ps = h->page_size;

	while (!c->broken && (budget || c->in_pipe)) {
		uint32_t room = ring_room(r, VMT_MIN(budget ? budget : 1, h->pipe_pages) * ps);

		if (room < ps) {
			hostsrc_pause(c);
			return true;
		}
		if (!c->in_pipe) {
			size_t want = (size_t)VMT_MIN(VMT_MIN(budget, h->pipe_pages), room / ps) * ps;
			ssize_t n = splice(c->fd, NULL, c->pipe[1], NULL, want, SPLICE_F_NONBLOCK);

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				/* EAGAIN: no full page now */
				if (n < 0 && errno != EAGAIN)
					hostsrc_cpu_fail(c, -errno, "splice from trace_pipe_raw");
				return true;
			}
			c->in_pipe = (size_t)n;
			budget -= (uint32_t)VMT_MIN((size_t)budget, ((size_t)n + ps - 1) / ps);
		}
		while (c->in_pipe) {
			uint8_t *p;
			ssize_t n;

			if (ring_room(r, ps) < ps) {
				hostsrc_pause(c);
				return true;
			}
			p = ring_fill_space(r, &room);
			n = read(c->pipe[0], p, VMT_MIN((size_t)room, c->in_pipe));

			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				hostsrc_cpu_fail(c, n < 0 ? -errno : -EIO, "read from the splice pipe");
				return true;
			}
			c->in_pipe -= (size_t)n;
			hostsrc_commit(c, r, (uint32_t)n);
		}
	}
	return c->broken;
}

/* The page the kernel is still writing: read() hands it out as it is. */
static void hostsrc_read_partial(struct vmt_hostsrc_cpu *c)
{
	struct vmt_ring *r = guest_ring(c->h->g, c->cpu);

	for (int i = 0; i < PARTIAL_READS && !c->broken; i++) {
		uint32_t room;
		uint8_t *p;
		ssize_t n;

		if (ring_room(r, c->h->page_size) < c->h->page_size)
			return;	/* held: the flush gets what is in the ring */
		p = ring_fill_space(r, &room);
		if (room != c->h->page_size)
			return;	/* the pipe gives whole pages: cannot happen */
		n = read(c->fd, p, room);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno != EAGAIN)
			hostsrc_cpu_fail(c, -errno, "read from trace_pipe_raw");
		if (n <= 0)
			return;
		if ((size_t)n < room)
			memset(p + n, 0, room - (size_t)n);
		hostsrc_commit(c, r, room);
	}
}

static int hostsrc_use_timer(struct vmt_hostsrc *h, int err, const char *why);

static int hostsrc_io_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct vmt_hostsrc_cpu *c = userdata;
	const struct vmt_ring *r = guest_ring(c->h->g, c->cpu);
	uint64_t seq = r->next_seq;

	hostsrc_pump(c, READ_BUDGET_PAGES);
	if (r->next_seq != seq)
		c->empty_wakeups = 0;
	else if (++c->empty_wakeups == EMPTY_WAKEUPS_MAX)
		hostsrc_use_timer(c->h, 0, "poll on trace_pipe_raw wakes without a full page");
	return 0;
}

static int hostsrc_timer_cb(sd_event_source *s, uint64_t usec, void *userdata)
{
	struct vmt_hostsrc *h = userdata;
	bool drained = true;

	for (uint32_t i = 0; i < h->ncpus; i++)
		if (h->cpus[i].fd >= 0)
			drained &= hostsrc_pump(&h->cpus[i], READ_BUDGET_PAGES);
	/* more is waiting: come back after the other sources had their turn */
	sd_event_source_set_time_relative(s, drained ? POLL_USEC : 0);
	sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
	return 0;
}

int hostsrc_open(struct vmt_hostsrc *h)
{
	uint32_t opened = 0;
	ssize_t kb;

	h->cpus = calloc(h->ncpus, sizeof(*h->cpus));
	if (!h->cpus)
		return -ENOMEM;
	for (uint32_t i = 0; i < h->ncpus; i++)
		h->cpus[i] = (struct vmt_hostsrc_cpu){ .h = h, .cpu = i, .fd = -1, .pipe = { -1, -1 } };
	for (uint32_t i = 0; i < h->ncpus; i++) {
		struct vmt_hostsrc_cpu *c = &h->cpus[i];
		int sz;

		/* a CPU that is not there has no buffer: its ring stays empty */
		c->fd = h->in.cpu_fd[i];
		h->in.cpu_fd[i] = -1;
		if (c->fd < 0)
			continue;
		if (pipe2(c->pipe, O_NONBLOCK | O_CLOEXEC) < 0)
			return log_guest(VMT_LOG_ERR, -errno, HOST_GUEST, "pipe: %m");
		fcntl(c->pipe[1], F_SETPIPE_SZ, PIPE_PAGES * h->page_size);
		sz = fcntl(c->pipe[1], F_GETPIPE_SZ);
		h->pipe_pages = sz > 0 ? VMT_MAX((uint32_t)sz / h->page_size, 1u) : 1;
		opened++;
	}
	if (!opened)
		return log_guest(VMT_LOG_ERR, -ENOENT, HOST_GUEST,
				 "no per_cpu/cpuN/trace_pipe_raw can be opened in %s", h->in.dir);
	kb = h->in.buffer_kb;
	h->kernel_pages = kb > 0 ? (uint32_t)VMT_MIN((uint64_t)kb * 1024 / h->page_size, 1u << 24)
				 : 1u << 12;
	return 0;
}

/* Read on a timer instead of poll(); may be called from an io callback. */
static int hostsrc_use_timer(struct vmt_hostsrc *h, int err, const char *why)
{
	int r;

	if (err)
		log_guest(VMT_LOG_INFO, err, HOST_GUEST, "%s (%m): reading every %u ms", why,
			  POLL_USEC / 1000);
	else
		log_guest(VMT_LOG_INFO, 0, HOST_GUEST, "%s: reading every %u ms", why, POLL_USEC / 1000);
	for (uint32_t i = 0; i < h->ncpus; i++)
		h->cpus[i].src = sd_event_source_disable_unref(h->cpus[i].src);
	if (h->timer)
		return 0;
	r = sd_event_add_time_relative(h->env->event, &h->timer, CLOCK_MONOTONIC, POLL_USEC, 10000,
				       hostsrc_timer_cb, h);
	return r < 0 ? log_guest(VMT_LOG_ERR, r, HOST_GUEST, "cannot arm the read timer: %m") : 0;
}

/*
 * Measured on 6.18 under fork loops: poll wakes every ~12 pages and costs
 * about 6.5 us a page; a 100 ms timer costs a little less a page but wakes
 * an idle host too and, with every CPU busy, fell behind and lost events
 * where poll lost none. So poll, and the timer as the fallback.
 */
int hostsrc_watch(struct vmt_hostsrc *h)
{
	int r = 0;

	if (!h->in.poll_ok)
		return hostsrc_use_timer(h, 0, "no buffer_percent in this kernel");
	for (uint32_t i = 0; r >= 0 && i < h->ncpus; i++)
		if (h->cpus[i].fd >= 0)
			r = sd_event_add_io(h->env->event, &h->cpus[i].src, h->cpus[i].fd, EPOLLIN,
					    hostsrc_io_cb, &h->cpus[i]);
	return r < 0 ? hostsrc_use_timer(h, r, "trace_pipe_raw cannot be polled") : 0;
}

void hostsrc_close(struct vmt_hostsrc *h)
{
	h->timer = sd_event_source_disable_unref(h->timer);
	for (uint32_t i = 0; h->cpus && i < h->ncpus; i++) {
		struct vmt_hostsrc_cpu *c = &h->cpus[i];

		c->src = sd_event_source_disable_unref(c->src);
		for (int k = 0; k < 2; k++)
			if (c->pipe[k] >= 0)
				close(c->pipe[k]);
		if (c->fd >= 0)
			close(c->fd);
	}
	free(h->cpus);
	h->cpus = NULL;
}

void hostsrc_flush(struct vmt_hostsrc *h)
{
	if (!h)
		return;
	hostsrc_tasks(h);
	for (uint32_t i = 0; i < h->ncpus; i++) {
		struct vmt_hostsrc_cpu *c = &h->cpus[i];

		if (c->fd < 0)
			continue;
		hostsrc_pump(c, h->kernel_pages + 16);
		hostsrc_read_partial(c);
	}
}
