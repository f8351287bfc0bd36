/* SPDX-License-Identifier: MIT */
/*
 * producer: many fast guests in one thread. Each guest is a folder of FIFO
 * pairs laid out as vmtraced expects (agent-ctl-path.{in,out},
 * trace-path-cpuN.{in,out}); the guest writes P.out and reads P.in, as
 * QEMU's -chardev pipe does. One epoll loop serves every channel: control
 * messages are answered at once (FLUSH included, so a dump's round trip is
 * not delayed by the page writes), and each writable data FIFO gets
 * non-blocking writes of up to 16 pages of the corpus, looped, until it
 * is full or its turn's budget is spent.
 *
 * With a rate, each data channel has a token bucket: a timerfd ticks every
 * TICK_NS and adds what the clock says has passed since the last refill
 * (so a late tick gives more, not less), up to BURST_NS worth; a channel
 * with no tokens left stops asking for EPOLLOUT until the next tick.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "proto.h"

#define CHUNK (16 * BENCH_PS)		/* one write: a default pipe's capacity */
#define TURN_BUDGET (64 * BENCH_PS)	/* per readiness event, so every channel gets turns */
#define TICK_NS 2000000ull		/* token refills, with a rate */
#define BURST_NS 20000000ull		/* a bucket holds at most this long's bytes */

enum { TAG_WAKE, TAG_CTL, TAG_DATA, TAG_TICK };
#define TAG(kind, g, c) ((uint64_t)(kind) | (uint64_t)(g) << 8 | (uint64_t)(c) << 40)
#define TAG_KIND(t) ((unsigned)((t) & 0xff))
#define TAG_GUEST(t) ((unsigned)(((t) >> 8) & 0xffffffff))
#define TAG_CPU(t) ((unsigned)((t) >> 40))

struct pchan {
	int fd;			/* trace-path-cpuN.out, non-blocking */
	uint64_t sent;		/* bytes since STREAM */
	size_t pos;		/* where in the corpus loop */
	bool armed;		/* EPOLLOUT asked for */
	int64_t tokens;		/* bytes it may write now, with a rate */
};

struct pguest {
	char dir[600];
	int ctl_in;		/* host -> guest, non-blocking */
	int ctl_out;		/* guest -> host, blocking (small messages) */
	struct vmt_proto_rx *rx;
	bool streaming;
	struct pchan ch[BENCH_CPUS];
};

struct producer {
	struct producer_conf c;
	struct pguest *g;
	int epfd, wake_fd, tick_fd;
	uint64_t chan_rate;	/* bytes/s per data channel; 0: flat out */
	uint64_t refill_ns;	/* last refill of the buckets */
	pthread_t th;
	bool started;
	int stop, paused;	/* set by the caller's thread */
	uint64_t rate;		/* the same: bytes/s per guest asked for */
	int applied_pause;
	uint64_t bytes;		/* atomic: all data bytes written */
};

static int fifo_open(const char *dir, const char *name, const char *sfx, int flags)
{
	char p[1000];

	snprintf(p, sizeof(p), "%s/%s.%s", dir, name, sfx);
	if (mkfifo(p, 0600) < 0 && errno != EEXIST)
		return -errno;
	if (flags < 0)
		return 0;
	return open(p, flags | O_RDWR | O_CLOEXEC);
}

static void ctl_send(struct pguest *g, struct vmt_buf *b)
{
	/* blocking fd: a FIFO holds 64 KiB and the daemon reads it at once */
	write_full(g->ctl_out, b->data, b->len);
	b->len = 0;
}

static void arm(struct producer *p, unsigned gi, unsigned c)
{
	struct pguest *g = &p->g[gi];
	bool want = g->streaming && !p->applied_pause && (!p->chan_rate || g->ch[c].tokens > 0);
	struct epoll_event ev = { .events = want ? EPOLLOUT : 0, .data.u64 = TAG(TAG_DATA, gi, c) };

	if (want == g->ch[c].armed)
		return;
	epoll_ctl(p->epfd, EPOLL_CTL_MOD, g->ch[c].fd, &ev);
	g->ch[c].armed = want;
}

static void set_streaming(struct producer *p, unsigned gi, bool on)
{
	struct pguest *g = &p->g[gi];

	g->streaming = on;
	for (unsigned c = 0; c < BENCH_CPUS; c++)
		arm(p, gi, c);
}

static void send_hello(struct producer *p, struct pguest *g, uint32_t echo)
{
	struct vmt_hello h = { .version = VMT_PROTO_VERSION, .ncpus = BENCH_CPUS,
			       .page_size = BENCH_PS, .mono_ns = now_monotonic_ns(), .echo = echo };
	struct vmt_buf b = { 0 };

	snprintf(h.release, sizeof(h.release), "6.1.0-bench");
	snprintf(h.clock, sizeof(h.clock), "global");
	snprintf(h.boot_id, sizeof(h.boot_id), "bench-boot");
	snprintf(h.agent, sizeof(h.agent), "vmtbench");
	/* answers SYNC and says BYE, as vmtrace-agent does: the daemon watches
	 * its silence (guest_silence), so the soak shows a false alarm */
	h.flags |= VMT_HELLO_SYNC | VMT_HELLO_BYE;
	proto_put_hello(&b, &h);
	ctl_send(g, &b);
	buf_free(&b);
}

static void send_start_reply(struct producer *p, struct pguest *g)
{
	const struct vmt_buf *m = &p->c.corpus->bundle;
	struct vmt_buf b = { 0 };
	uint8_t x[16] = { 0 };

	put_le32(x + 4, BENCH_CPUS);
	proto_put(&b, VMT_MSG_STARTED, x, 8);
	put_le64(x, m->len);
	put_le32(x + 8, p->c.corpus->bundle_files);
	put_le32(x + 12, 0);
	proto_put(&b, VMT_MSG_META_BEGIN, x, 16);
	ctl_send(g, &b);
	for (size_t off = 0; off < m->len; off += VMT_PROTO_MAX_PAYLOAD) {
		proto_put(&b, VMT_MSG_META_DATA, m->data + off,
			  (uint32_t)VMT_MIN(VMT_PROTO_MAX_PAYLOAD, m->len - off));
		ctl_send(g, &b);
	}
	put_le32(x, crc32c(0, m->data, m->len));
	put_le32(x + 4, 0);
	proto_put(&b, VMT_MSG_META_END, x, 8);
	ctl_send(g, &b);
	buf_free(&b);
}

static void send_flushed(struct producer *p, struct pguest *g, uint64_t id)
{
	struct vmt_cpu_stats st[BENCH_CPUS] = { 0 };
	struct vmt_buf b = { 0 };

	for (unsigned c = 0; c < BENCH_CPUS; c++) {
		/* whole pages only: a page half written when the FLUSH came is
		 * not part of the window */
		uint64_t pages = g->ch[c].sent / BENCH_PS;

		st[c].bytes_sent = pages * BENCH_PS;
		st[c].read = corpus_events(p->c.corpus, c % p->c.corpus->ncpus, pages);
		st[c].entries = st[c].read;
	}
	proto_put_flushed(&b, id, BENCH_CPUS, st);
	ctl_send(g, &b);
	buf_free(&b);
}

static void on_ctl(struct producer *p, unsigned gi)
{
	struct pguest *g = &p->g[gi];

	for (;;) {
		struct vmt_msg m;
		size_t room;
		uint8_t *buf = proto_rx_space(g->rx, &room);
		ssize_t n = read(g->ctl_in, buf, room);

		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			return;
		}
		proto_rx_wrote(g->rx, (size_t)n);
		while (proto_rx_next(g->rx, &m) > 0) {
			switch (m.type) {
			case VMT_MSG_HOST_HELLO:
				send_hello(p, g, get_le32(m.payload + 4));
				break;
			case VMT_MSG_START:
				set_streaming(p, gi, false);
				send_start_reply(p, g);
				break;
			case VMT_MSG_STREAM:
				for (unsigned c = 0; c < BENCH_CPUS; c++) {
					g->ch[c].sent = 0;
					g->ch[c].pos = 0;
				}
				set_streaming(p, gi, true);
				break;
			case VMT_MSG_FLUSH:
				send_flushed(p, g, get_le64(m.payload));
				break;
			case VMT_MSG_SYNC: {
				/* no clock to read here: an answer all the same */
				struct vmt_synced a = { .status = -EOPNOTSUPP };
				struct vmt_sync sy;
				struct vmt_buf b = { 0 };

				if (proto_get_sync(m.payload, m.len, &sy) == 0) {
					a.id = sy.id;
					proto_put_synced(&b, &a);
					ctl_send(g, &b);
					buf_free(&b);
				}
				break;
			}
			case VMT_MSG_STOP: {
				struct vmt_buf b = { 0 };
				set_streaming(p, gi, false);
				proto_put(&b, VMT_MSG_STOPPED, NULL, 0);
				ctl_send(g, &b);
				buf_free(&b);
				break;
			}
			}
		}
	}
}

static void on_data(struct producer *p, unsigned gi, unsigned c)
{
	struct pguest *g = &p->g[gi];
	struct pchan *ch = &g->ch[c];
	unsigned cc = c % p->c.corpus->ncpus;
	const uint8_t *src = p->c.corpus->pages[cc];
	size_t len = p->c.corpus->npages[cc] * BENCH_PS;
	size_t budget = TURN_BUDGET;

	if (!g->streaming || p->applied_pause)
		return;
	if (p->chan_rate) {
		if (ch->tokens <= 0) {
			arm(p, gi, c);
			return;
		}
		budget = VMT_MIN(budget, (size_t)ch->tokens);
	}
	while (budget) {
		size_t want = VMT_MIN(VMT_MIN((size_t)CHUNK, len - ch->pos), budget);
		ssize_t n = write(ch->fd, src + ch->pos, want);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;	/* EAGAIN: full */
		}
		ch->pos += (size_t)n;
		if (ch->pos == len)
			ch->pos = 0;
		ch->sent += (uint64_t)n;
		budget -= (size_t)n;
		ch->tokens -= n;
		__atomic_add_fetch(&p->bytes, (uint64_t)n, __ATOMIC_RELAXED);
		if ((size_t)n < want)
			return;	/* the pipe is full now */
	}
	if (p->chan_rate && ch->tokens <= 0)
		arm(p, gi, c);	/* until the next refill */
}

/* The clock, not the tick count, says how many bytes are due: a tick that
 * comes late (a busy machine) refills more. */
static void on_tick(struct producer *p)
{
	uint64_t v, now = bench_now_ns(), dt = now - p->refill_ns;
	int64_t add, cap = (int64_t)(p->chan_rate * BURST_NS / 1000000000ull);

	if (read(p->tick_fd, &v, sizeof(v)) < 0) {
		/* spurious: the refill below is right anyway */
	}
	add = (int64_t)((double)p->chan_rate * (double)dt / 1e9);
	if (add <= 0)
		return;
	p->refill_ns = now;
	for (unsigned gi = 0; gi < p->c.nguests; gi++)
		for (unsigned c = 0; c < BENCH_CPUS; c++) {
			struct pchan *ch = &p->g[gi].ch[c];

			/* capped: a channel that waited (pipe full, paused) does not burst */
			ch->tokens = VMT_MIN(ch->tokens + add, cap);
			arm(p, gi, c);
		}
}

/* The rate the caller asked for, if it changed: the timer ticks only
 * with a rate, so that a producer flat out has no wake-ups of its own. */
static void apply_rate(struct producer *p)
{
	uint64_t rate = __atomic_load_n(&p->rate, __ATOMIC_ACQUIRE);
	uint64_t chan = rate ? VMT_MAX(rate / BENCH_CPUS, 1) : 0;
	struct itimerspec it = { 0 };

	if (chan == p->chan_rate)
		return;
	if (chan)
		it = (struct itimerspec){ .it_interval = { 0, TICK_NS }, .it_value = { 0, TICK_NS } };
	timerfd_settime(p->tick_fd, 0, &it, NULL);
	p->chan_rate = chan;
	p->refill_ns = bench_now_ns();
	for (unsigned gi = 0; gi < p->c.nguests; gi++)
		for (unsigned c = 0; c < BENCH_CPUS; c++) {
			p->g[gi].ch[c].tokens = 0;
			arm(p, gi, c);
		}
}

static void *producer_main(void *arg)
{
	struct producer *p = arg;
	struct epoll_event ev[256];

	while (!__atomic_load_n(&p->stop, __ATOMIC_ACQUIRE)) {
		int n = epoll_wait(p->epfd, ev, ARRAY_SIZE(ev), -1);

		for (int i = 0; i < n; i++) {
			uint64_t t = ev[i].data.u64;

			switch (TAG_KIND(t)) {
			case TAG_WAKE: {
				uint64_t v;
				int pz = __atomic_load_n(&p->paused, __ATOMIC_ACQUIRE);
				if (read(p->wake_fd, &v, sizeof(v)) < 0) {
					/* spurious: nothing to do */
				}
				p->applied_pause = pz;
				apply_rate(p);
				for (unsigned g = 0; g < p->c.nguests; g++)
					for (unsigned c = 0; c < BENCH_CPUS; c++)
						arm(p, g, c);
				break;
			}
			case TAG_CTL:
				on_ctl(p, TAG_GUEST(t));
				break;
			case TAG_DATA:
				on_data(p, TAG_GUEST(t), TAG_CPU(t));
				break;
			case TAG_TICK:
				on_tick(p);
				break;
			}
		}
	}
	return NULL;
}

static int guest_make(struct producer *p, unsigned gi)
{
	struct pguest *g = &p->g[gi];
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = TAG(TAG_CTL, gi, 0) };

	snprintf(g->dir, sizeof(g->dir), "%s/g%u", p->c.dir, gi);
	if (mkdir(g->dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	g->ctl_in = fifo_open(g->dir, "agent-ctl-path", "in", O_NONBLOCK);
	g->ctl_out = fifo_open(g->dir, "agent-ctl-path", "out", 0);
	if (g->ctl_in < 0 || g->ctl_out < 0)
		return -errno;
	g->rx = malloc(sizeof(*g->rx));
	if (!g->rx)
		return -ENOMEM;
	proto_rx_init(g->rx);
	if (epoll_ctl(p->epfd, EPOLL_CTL_ADD, g->ctl_in, &ev) < 0)
		return -errno;
	for (unsigned c = 0; c < BENCH_CPUS; c++) {
		char name[32];
		struct epoll_event dev = { .events = 0, .data.u64 = TAG(TAG_DATA, gi, c) };

		snprintf(name, sizeof(name), "trace-path-cpu%u", c);
		/* .in only has to exist: vmtraced never writes to a data port */
		if (fifo_open(g->dir, name, "in", -1) < 0)
			return -errno;
		g->ch[c].fd = fifo_open(g->dir, name, "out", O_NONBLOCK);
		if (g->ch[c].fd < 0 || epoll_ctl(p->epfd, EPOLL_CTL_ADD, g->ch[c].fd, &dev) < 0)
			return -errno;
	}
	if (p->c.no_handshake)
		set_streaming(p, gi, true);
	return 0;
}

int producer_start(struct producer **out, const struct producer_conf *c)
{
	struct producer *p = calloc(1, sizeof(*p));
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = TAG(TAG_WAKE, 0, 0) };
	int r;

	if (!p || c->nguests > BENCH_MAX_GUESTS) {
		free(p);
		return -EINVAL;
	}
	p->c = *c;
	p->g = calloc(c->nguests, sizeof(*p->g));
	for (unsigned i = 0; p->g && i < c->nguests; i++) {
		p->g[i].ctl_in = p->g[i].ctl_out = -1;
		for (unsigned k = 0; k < BENCH_CPUS; k++)
			p->g[i].ch[k].fd = -1;
	}
	p->tick_fd = -1;
	p->epfd = epoll_create1(EPOLL_CLOEXEC);
	p->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!p->g || p->epfd < 0 || p->wake_fd < 0 ||
	    epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->wake_fd, &ev) < 0) {
		producer_stop(p);
		return -ENOMEM;
	}
	{
		struct epoll_event tev = { .events = EPOLLIN, .data.u64 = TAG(TAG_TICK, 0, 0) };

		p->tick_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
		if (p->tick_fd < 0 || epoll_ctl(p->epfd, EPOLL_CTL_ADD, p->tick_fd, &tev) < 0) {
			producer_stop(p);
			return -errno;
		}
		p->rate = c->rate;
		apply_rate(p);
	}
	mkdir(c->dir, 0700);
	for (unsigned i = 0; i < c->nguests; i++) {
		r = guest_make(p, i);
		if (r < 0) {
			fprintf(stderr, "producer: guest %u: %s\n", i, strerror(-r));
			producer_stop(p);
			return r;
		}
	}
	r = -pthread_create(&p->th, NULL, producer_main, p);
	if (r < 0) {
		producer_stop(p);
		return r;
	}
	p->started = true;
	*out = p;
	return 0;
}

static void wake(struct producer *p)
{
	uint64_t one = 1;

	if (write(p->wake_fd, &one, sizeof(one)) < 0) {
		/* the counter cannot overflow here */
	}
}

void producer_pause(struct producer *p, bool paused)
{
	__atomic_store_n(&p->paused, paused, __ATOMIC_RELEASE);
	wake(p);
}

void producer_set_rate(struct producer *p, uint64_t rate)
{
	__atomic_store_n(&p->rate, rate, __ATOMIC_RELEASE);
	wake(p);
}

void producer_stop(struct producer *p)
{
	if (!p)
		return;
	if (p->started) {
		__atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
		wake(p);
		pthread_join(p->th, NULL);
	}
	for (unsigned i = 0; p->g && i < p->c.nguests; i++) {
		struct pguest *g = &p->g[i];
		if (g->ctl_in >= 0)
			close(g->ctl_in);
		if (g->ctl_out >= 0)
			close(g->ctl_out);
		for (unsigned c = 0; c < BENCH_CPUS; c++)
			if (g->ch[c].fd >= 0)
				close(g->ch[c].fd);
		free(g->rx);
	}
	free(p->g);
	if (p->epfd >= 0)
		close(p->epfd);
	if (p->wake_fd >= 0)
		close(p->wake_fd);
	if (p->tick_fd >= 0)
		close(p->tick_fd);
	free(p);
}

uint64_t producer_bytes(const struct producer *p)
{
	return __atomic_load_n(&p->bytes, __ATOMIC_RELAXED);
}

uint64_t producer_cpu_ns(const struct producer *p)
{
	struct timespec ts;
	clockid_t id;

	if (pthread_getcpuclockid(p->th, &id) || clock_gettime(id, &ts))
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const char *producer_guest_dir(const struct producer *p, unsigned i)
{
	return p->g[i].dir;
}
