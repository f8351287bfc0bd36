/* SPDX-License-Identifier: MIT */
/*
 * fakeguest: plays QEMU and vmtrace-agent for the integration suites, in a
 * child process: makes the channels (FIFO pairs or listening sockets),
 * answers the control protocol like the agent does, and streams the given
 * pages, one writer thread per CPU, counting bytes and events so that
 * FLUSHED says exactly what was sent.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fakeguest.h"
#include "testutil.h"
#include "page.h"
#include "proto.h"
#include "util.h"

struct endpoint {
	int listen_fd;		/* socket transport */
	int rfd, wfd;		/* host -> guest, guest -> host */
};

struct fg {
	const struct fakeguest_conf *c;
	struct endpoint ctl;
	struct endpoint data[FAKEGUEST_MAX_CPUS];
	pthread_mutex_t lock;
	pthread_mutex_t ctl_lock;	/* one writer at a time on the control port */
	pthread_cond_t cond;
	int streaming;
	unsigned start_gen;
	unsigned flush_gen;
	unsigned acked[FAKEGUEST_MAX_CPUS];
	uint64_t snap_bytes[FAKEGUEST_MAX_CPUS], snap_events[FAKEGUEST_MAX_CPUS];
	unsigned done_cpus;
	int done_fd;
	int gate_fd;		/* hold_after: a byte from the test opens the gate */
	int released;
	int mute;		/* said BYE: the agent is gone */
};

static int endpoint_make(struct endpoint *e, const char *dir, const char *name, int sock)
{
	char p[4200];

	e->listen_fd = e->rfd = e->wfd = -1;
	if (sock) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, name);
		unlink(sa.sun_path);
		e->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (e->listen_fd < 0 || bind(e->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
		    listen(e->listen_fd, 1) < 0)
			return -errno;
		return 0;
	}
	snprintf(p, sizeof(p), "%s/%s.in", dir, name);
	if (mkfifo(p, 0600) < 0 && errno != EEXIST)
		return -errno;
	e->rfd = open(p, O_RDWR | O_CLOEXEC);
	snprintf(p, sizeof(p), "%s/%s.out", dir, name);
	if (mkfifo(p, 0600) < 0 && errno != EEXIST)
		return -errno;
	e->wfd = open(p, O_RDWR | O_CLOEXEC);
	return e->rfd < 0 || e->wfd < 0 ? -errno : 0;
}

static bool endpoint_holds(const struct endpoint *e, int fd)
{
	return fd == e->listen_fd || fd == e->rfd || fd == e->wfd;
}

/*
 * In the child: close what it inherited from the test but does not use.
 * A fork without an exec keeps every descriptor, CLOEXEC or not: a stand-in
 * QEMU holding another port's listening socket (one the test closed, and
 * another guest's stand-in bound anew at the same path) would keep that old
 * socket accepting connections nobody reads.
 */
static void fg_close_inherited(const struct fg *g, int keep1, int keep2)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		int fd = atoi(de->d_name);
		bool keep = fd <= 2 || fd == dirfd(d) || fd == keep1 || fd == keep2 ||
			    endpoint_holds(&g->ctl, fd);

		for (unsigned i = 0; !keep && i < g->c->ncpus; i++)
			keep = endpoint_holds(&g->data[i], fd);
		if (!keep && de->d_name[0] != '.')
			close(fd);
	}
	closedir(d);
}

/* Sockets: wait for the host (again, after it went away). */
static void endpoint_accept(struct endpoint *e)
{
	int fd;

	if (e->listen_fd < 0)
		return;
	if (e->rfd >= 0)
		close(e->rfd);
	fd = accept4(e->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	e->rfd = e->wfd = fd;
}

/*
 * Sockets: a connection the host closed before it was accepted (it gave up
 * half-way through connecting its ports and tried again) is taken and
 * replaced by the next one, as QEMU's server chardev does on a hang-up.
 * Called once the host sent START: its live connection is queued by then.
 */
static void endpoint_accept_live(struct endpoint *e)
{
	for (;;) {
		struct pollfd p = { .fd = e->rfd, .events = POLLRDHUP };

		if (e->listen_fd < 0 || e->rfd < 0 || poll(&p, 1, 0) <= 0 ||
		    !(p.revents & (POLLHUP | POLLRDHUP | POLLERR)))
			return;
		endpoint_accept(e);
	}
}

static void ctl_write(struct fg *g, const struct vmt_buf *b)
{
	pthread_mutex_lock(&g->ctl_lock);
	write_full(g->ctl.wfd, b->data, b->len);
	pthread_mutex_unlock(&g->ctl_lock);
}

static void send_msg(struct fg *g, unsigned type, const void *p, uint32_t len)
{
	struct vmt_buf b = { 0 };

	proto_put(&b, type, p, len);
	ctl_write(g, &b);
	buf_free(&b);
}

static void send_hello(struct fg *g, uint32_t echo)
{
	struct vmt_buf b = { 0 };
	struct vmt_hello h = { .version = VMT_PROTO_VERSION, .ncpus = g->c->ncpus,
			       .page_size = g->c->page_size, .mono_ns = now_monotonic_ns() };

	snprintf(h.release, sizeof(h.release), "%s", g->c->release ? g->c->release : "6.1.0-fake");
	snprintf(h.clock, sizeof(h.clock), "local");
	snprintf(h.boot_id, sizeof(h.boot_id), "%s", g->c->boot_id ? g->c->boot_id : "fake-boot");
	snprintf(h.agent, sizeof(h.agent), "fakeguest");
	if (g->c->watched)
		h.flags |= VMT_HELLO_SYNC | VMT_HELLO_BYE;
	if (g->c->hello_ncpus)
		h.ncpus = g->c->hello_ncpus;
	h.echo = echo;
	proto_put_hello(&b, &h);
	ctl_write(g, &b);
	buf_free(&b);
}

static void send_meta(struct fg *g)
{
	const uint8_t *m = g->c->bundle;
	uint64_t len = g->c->bundle_len;
	uint8_t p[16] = { 0 };

	put_le64(p, g->c->meta_claim ? g->c->meta_claim : len);
	put_le32(p + 8, 0);
	send_msg(g, VMT_MSG_META_BEGIN, p, 16);
	for (uint64_t off = 0; off < len; off += 65536)
		send_msg(g, VMT_MSG_META_DATA, m + off, (uint32_t)VMT_MIN(65536, len - off));
	put_le32(p, crc32c(0, m, len) ^ (g->c->corrupt_meta_crc ? 1 : 0));
	put_le32(p + 4, 0);
	send_msg(g, VMT_MSG_META_END, p, 8);
	/* every byte of it is in the channel (a FIFO's reader may not have it yet) */
	if (g->done_fd >= 0 && write(g->done_fd, "m", 1) < 0) {
		/* the parent is gone; nothing to tell */
	}
}

struct cpu_arg {
	struct fg *g;
	unsigned cpu;
};

static void ack_flush(struct fg *g, unsigned cpu, uint64_t bytes, uint64_t events)
{
	/* called with the lock held, at a page boundary */
	if (g->acked[cpu] != g->flush_gen) {
		g->snap_bytes[cpu] = bytes;
		g->snap_events[cpu] = events;
		g->acked[cpu] = g->flush_gen;
		pthread_cond_broadcast(&g->cond);
	}
}

static void *cpu_main(void *arg)
{
	struct cpu_arg *a = arg;
	struct fg *g = a->g;
	const struct fakeguest_conf *c = g->c;
	unsigned cpu = a->cpu, gen = 0;
	struct vmt_page_layout l;

	page_layout_default(&l, c->page_size);
	endpoint_accept(&g->data[cpu]);
	for (;;) {
		uint64_t bytes = 0, events = 0;

		pthread_mutex_lock(&g->lock);
		while (!g->streaming || g->start_gen == gen) {
			ack_flush(g, cpu, bytes, events);
			pthread_cond_wait(&g->cond, &g->lock);
		}
		gen = g->start_gen;
		pthread_mutex_unlock(&g->lock);
		if (c->cut_after && gen > 1)
			endpoint_accept(&g->data[cpu]);	/* the host came back after the cut */
		endpoint_accept_live(&g->data[cpu]);

		for (size_t i = 0; i < c->npages[cpu]; i++) {
			const uint8_t *p = c->pages[cpu] + i * c->page_size;
			struct vmt_page_info info;

			if ((c->hold_after && gen == 1 && i == c->hold_after) ||
			    (c->hold_first && gen == 1 && i == 0)) {
				/* held at the gate, answering flushes meanwhile */
				pthread_mutex_lock(&g->lock);
				while (!g->released) {
					ack_flush(g, cpu, bytes, events);
					pthread_cond_wait(&g->cond, &g->lock);
				}
				pthread_mutex_unlock(&g->lock);
			}
			if (c->cut_after && cpu == 0 && gen == 1 && i == c->cut_after) {
				/* a guest gone in the middle of a page */
				write_full(g->data[cpu].wfd, p, c->page_size / 2);
				shutdown(g->data[cpu].wfd, SHUT_WR);
				break;
			}
			if (c->chunk) {
				/* pieces of odd sizes: the host must keep page boundaries */
				for (uint32_t off = 0; off < c->page_size; off += c->chunk)
					write_full(g->data[cpu].wfd, p + off, VMT_MIN(c->chunk, c->page_size - off));
			} else {
				write_full(g->data[cpu].wfd, p, c->page_size);
			}
			bytes += c->page_size;
			if (page_scan(&l, p, &info) == 0)
				events += info.events;
			pthread_mutex_lock(&g->lock);
			ack_flush(g, cpu, bytes, events);
			pthread_mutex_unlock(&g->lock);
			if (c->pages_per_sec)
				usleep(1000000 / c->pages_per_sec);
		}
		pthread_mutex_lock(&g->lock);
		ack_flush(g, cpu, bytes, events);
		if (g->done_cpus + 1 == c->ncpus && c->triggers) {
			/* the last CPU done asks for dumps, like vmtrace-agent trigger */
			pthread_mutex_unlock(&g->lock);
			for (unsigned k = 0; k < c->triggers || (c->triggers_until_release &&
								  !__atomic_load_n(&g->released,
										   __ATOMIC_RELAXED));
			     k++) {
				char reason[64];
				int n = snprintf(reason, sizeof(reason), "fake trigger %u", k);
				send_msg(g, VMT_MSG_TRIGGER, reason, (uint32_t)n);
				/* the dump a trigger starts flushes at once, as the
				 * agent's would: this CPU has sent all it will */
				pthread_mutex_lock(&g->lock);
				ack_flush(g, cpu, bytes, events);
				pthread_mutex_unlock(&g->lock);
				if (c->trigger_gap_ms)
					usleep(c->trigger_gap_ms * 1000);
			}
			pthread_mutex_lock(&g->lock);
		}
		if (++g->done_cpus == c->ncpus && g->done_fd >= 0) {
			if (write(g->done_fd, "d", 1) < 0) {
				/* the parent is gone; nothing to tell */
			}
		}
		/* idle until the next START, answering flushes */
		while (g->start_gen == gen) {
			ack_flush(g, cpu, bytes, events);
			pthread_cond_wait(&g->cond, &g->lock);
		}
		pthread_mutex_unlock(&g->lock);
	}
	return NULL;
}

static void do_flush(struct fg *g, uint64_t id)
{
	struct vmt_cpu_stats st[FAKEGUEST_MAX_CPUS] = { 0 };
	struct vmt_buf b = { 0 };

	pthread_mutex_lock(&g->lock);
	g->flush_gen++;
	pthread_cond_broadcast(&g->cond);
	for (unsigned c = 0; c < g->c->ncpus; c++)
		while (g->acked[c] != g->flush_gen)
			pthread_cond_wait(&g->cond, &g->lock);
	for (unsigned c = 0; c < g->c->ncpus; c++) {
		st[c].bytes_sent = g->snap_bytes[c] + (g->c->lie_in_flush ? 4096 * 1000 : 0);
		st[c].read = g->snap_events[c];
		st[c].entries = 0;
	}
	pthread_mutex_unlock(&g->lock);
	if (g->c->tasks_len) {
		uint32_t piece = g->c->tasks_piece ? g->c->tasks_piece : VMT_PROTO_MAX_PAYLOAD - 8;
		uint8_t *p = malloc(8 + piece);

		size_t count = (g->c->tasks_len + piece - 1) / piece;

		for (size_t k = 0; p && k < count; k++) {
			size_t off = (g->c->tasks_backwards ? count - 1 - k : k) * piece;
			uint32_t n = (uint32_t)VMT_MIN((size_t)piece, g->c->tasks_len - off);

			put_le32(p, (uint32_t)off);
			put_le32(p + 4, (uint32_t)g->c->tasks_len);
			memcpy(p + 8, g->c->tasks + off, n);
			proto_put(&b, VMT_MSG_TASKS, p, 8 + n);
		}
		free(p);
	}
	proto_put_flushed(&b, id, g->c->ncpus, st);
	ctl_write(g, &b);
	buf_free(&b);
}

/* Opens the gate when the test writes to it (fakeguest_release); 'b'
 * says BYE and mutes the agent (fakeguest_bye). */
static void *gate_main(void *arg)
{
	struct fg *g = arg;
	char ch;

	for (;;) {
		ssize_t n = read(g->gate_fd, &ch, 1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return NULL;
		if (ch == 'b') {
			static const char why[] = "signal 15";
			struct vmt_buf b = { 0 };

			proto_put(&b, VMT_MSG_BYE, why, sizeof(why) - 1);
			pthread_mutex_lock(&g->ctl_lock);
			write_full(g->ctl.wfd, b.data, b.len);
			g->mute = 1;
			pthread_mutex_unlock(&g->ctl_lock);
			buf_free(&b);
			continue;
		}
		pthread_mutex_lock(&g->lock);
		g->released = 1;
		pthread_cond_broadcast(&g->cond);
		pthread_mutex_unlock(&g->lock);
	}
}

static bool fg_mute(struct fg *g)
{
	bool m;

	pthread_mutex_lock(&g->ctl_lock);
	m = g->mute;
	pthread_mutex_unlock(&g->ctl_lock);
	return m;
}

/* SYNC: a real agent with a trace clock user space cannot read ("local")
 * answers -EOPNOTSUPP; the host's pings take any answer. */
static void answer_sync(struct fg *g, const struct vmt_msg *m)
{
	struct vmt_synced a = { .status = -EOPNOTSUPP };
	struct vmt_sync s;
	struct vmt_buf b = { 0 };

	if (proto_get_sync(m->payload, m->len, &s) < 0)
		return;
	if (g->c->sync_delay_ms)
		usleep(g->c->sync_delay_ms * 1000);
	a.id = s.id;
	proto_put_synced(&b, &a);
	ctl_write(g, &b);
	buf_free(&b);
}

/* What the host asked, for the test to count (HOST_HELLO 'h', START 's'). */
static void tell(struct fg *g, char ch)
{
	if (g->done_fd >= 0 && write(g->done_fd, &ch, 1) < 0) {
		/* the parent is gone; nothing to tell */
	}
}

static void fg_run(struct fg *g)
{
	struct vmt_proto_rx *rx = malloc(sizeof(*rx));
	pthread_t th[FAKEGUEST_MAX_CPUS];
	struct cpu_arg args[FAKEGUEST_MAX_CPUS];

	proto_rx_init(rx);
	pthread_mutex_init(&g->lock, NULL);
	pthread_mutex_init(&g->ctl_lock, NULL);
	pthread_cond_init(&g->cond, NULL);
	if (g->c->hold_after || g->c->hold_first || g->c->watched ||
	    g->c->triggers_until_release) {
		pthread_t gth;
		pthread_create(&gth, NULL, gate_main, g);
	}
	for (unsigned c = 0; c < g->c->ncpus; c++) {
		args[c] = (struct cpu_arg){ g, c };
		pthread_create(&th[c], NULL, cpu_main, &args[c]);
	}
	endpoint_accept(&g->ctl);
	if (g->c->garbage_first)
		write_full(g->ctl.wfd, "\x01garbage before hello", 21);
	send_hello(g, 0);
	for (;;) {
		struct vmt_msg m;
		size_t room;
		uint8_t *p = proto_rx_space(rx, &room);
		ssize_t n = read(g->ctl.rfd, p, room);

		if (n <= 0) {
			if (g->ctl.listen_fd < 0)
				_exit(0);
			endpoint_accept(&g->ctl);	/* the host reconnects */
			continue;
		}
		proto_rx_wrote(rx, (size_t)n);
		while (proto_rx_next(rx, &m) > 0) {
			if (fg_mute(g)) {
				if (m.type == VMT_MSG_HOST_HELLO)
					tell(g, 'h');
				continue;
			}
			switch (m.type) {
			case VMT_MSG_HOST_HELLO:
				tell(g, 'h');
				send_hello(g, get_le32(m.payload + 4));
				break;
			case VMT_MSG_START: {
				uint8_t s[8] = { 0 };
				tell(g, 's');
				pthread_mutex_lock(&g->lock);
				g->streaming = 0;
				pthread_mutex_unlock(&g->lock);
				send_msg(g, VMT_MSG_STARTED, s, 8);
				send_meta(g);
				break;
			}
			case VMT_MSG_STREAM: {
				if (g->c->after_stream_len) {
					struct vmt_buf b = { .data = (uint8_t *)g->c->after_stream,
							     .len = g->c->after_stream_len };
					ctl_write(g, &b);
				}
				pthread_mutex_lock(&g->lock);
				g->streaming = 1;
				g->done_cpus = 0;
				g->start_gen++;
				pthread_cond_broadcast(&g->cond);
				pthread_mutex_unlock(&g->lock);
				break;
			}
			case VMT_MSG_FLUSH:
				do_flush(g, get_le64(m.payload));
				break;
			case VMT_MSG_STOP:
				send_msg(g, VMT_MSG_STOPPED, NULL, 0);
				break;
			case VMT_MSG_SYNC:
				if (g->c->watched) {
					answer_sync(g, &m);
					tell(g, 'p');
				}
				break;
			}
		}
	}
}

int fakeguest_start(struct fakeguest *fg, const struct fakeguest_conf *c)
{
	int pfd[2], gfd[2];
	struct fg *g;
	pid_t pid;

	if (c->ncpus > FAKEGUEST_MAX_CPUS || pipe2(pfd, O_CLOEXEC) < 0)
		return -EINVAL;
	if (pipe2(gfd, O_CLOEXEC) < 0) {
		close(pfd[0]);
		close(pfd[1]);
		return -EINVAL;
	}
	mkdir(c->dir, 0700);
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->c = c;
	/* channels exist before the child runs, like QEMU's after start-up */
	if (endpoint_make(&g->ctl, c->dir, "agent-ctl-path", c->sockets) < 0)
		return -errno;
	for (unsigned i = 0; i < c->ncpus; i++) {
		char name[32];
		snprintf(name, sizeof(name), "trace-path-cpu%u", i);
		if (endpoint_make(&g->data[i], c->dir, name, c->sockets) < 0)
			return -errno;
	}
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		/* a guest left behind by a failed check would hold the test's files */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(pfd[0]);
		close(gfd[1]);
		fg_close_inherited(g, pfd[1], gfd[0]);
		g->done_fd = pfd[1];
		g->gate_fd = gfd[0];
		signal(SIGPIPE, SIG_IGN);
		/* a stand-in QEMU dies of the signal it is sent, as QEMU would:
		 * not through a sanitizer's handler, which turns it into SIGABRT */
		signal(SIGSEGV, SIG_DFL);
		signal(SIGBUS, SIG_DFL);
		fg_run(g);
		_exit(0);
	}
	close(pfd[1]);
	close(gfd[0]);
	fg->pid = pid;
	fg->sent_pages = fg->sent_meta = fg->waited_pages = fg->waited_meta = 0;
	fg->host_hellos = fg->starts = fg->syncs = 0;
	fg->done_fd = pfd[0];
	fg->gate_fd = gfd[1];
	/* the parent's copies of the channels are not needed */
	if (g->ctl.listen_fd >= 0)
		close(g->ctl.listen_fd);
	if (g->ctl.rfd >= 0)
		close(g->ctl.rfd);
	if (g->ctl.wfd >= 0 && g->ctl.wfd != g->ctl.rfd)
		close(g->ctl.wfd);
	for (unsigned i = 0; i < c->ncpus; i++) {
		struct endpoint *e = &g->data[i];
		if (e->listen_fd >= 0)
			close(e->listen_fd);
		if (e->rfd >= 0)
			close(e->rfd);
		if (e->wfd >= 0 && e->wfd != e->rfd)
			close(e->wfd);
	}
	free(g);
	return 0;
}

/* Read what the guest tells ('d' pages sent, 'm' metadata sent) until
 * *seen is past *waited, the times it was waited for. */
static int wait_for(struct fakeguest *fg, unsigned *seen, unsigned *waited, int timeout_ms)
{
	uint64_t end = test_now_ms() + (uint64_t)test_deadline_ms(timeout_ms);

	while (*seen <= *waited) {
		struct pollfd p = { .fd = fg->done_fd, .events = POLLIN };
		uint64_t now = test_now_ms();
		char ch;

		if (now >= end || poll(&p, 1, (int)(end - now)) <= 0)
			return -ETIMEDOUT;
		if (read(fg->done_fd, &ch, 1) != 1)
			return -EIO;
		fakeguest_count(fg, ch);
	}
	(*waited)++;
	return 0;
}

void fakeguest_count(struct fakeguest *fg, char ch)
{
	fg->sent_pages += ch == 'd';
	fg->sent_meta += ch == 'm';
	fg->host_hellos += ch == 'h';
	fg->starts += ch == 's';
	fg->syncs += ch == 'p';
}

void fakeguest_poll(struct fakeguest *fg)
{
	struct pollfd p = { .fd = fg->done_fd, .events = POLLIN };
	char ch;

	while (poll(&p, 1, 0) == 1 && read(fg->done_fd, &ch, 1) == 1)
		fakeguest_count(fg, ch);
}

int fakeguest_wait_sent(struct fakeguest *fg, int timeout_ms)
{
	return wait_for(fg, &fg->sent_pages, &fg->waited_pages, timeout_ms);
}

int fakeguest_wait_meta_sent(struct fakeguest *fg, int timeout_ms)
{
	return wait_for(fg, &fg->sent_meta, &fg->waited_meta, timeout_ms);
}

int fakeguest_bye(struct fakeguest *fg)
{
	return write(fg->gate_fd, "b", 1) == 1 ? 0 : -errno;
}

int fakeguest_release(struct fakeguest *fg)
{
	return write(fg->gate_fd, "g", 1) == 1 ? 0 : -errno;
}

void fakeguest_stop(struct fakeguest *fg)
{
	if (fg->pid > 0) {
		kill(fg->pid, SIGKILL);
		waitpid(fg->pid, NULL, 0);
	}
	if (fg->done_fd >= 0)
		close(fg->done_fd);
	if (fg->gate_fd >= 0)
		close(fg->gate_fd);
	fg->pid = 0;
	fg->done_fd = -1;
	fg->gate_fd = -1;
}
