/* SPDX-License-Identifier: MIT */
/*
 * agentpeer: a minimal host end for vmtrace-agent, to check the agent on a
 * guest booted by tests/guest/boot.sh (docs/PROTOCOL.md, guest control).
 *
 *   agentpeer -r RUNDIR -o OUTDIR [-t pipe|socket] [-s SECS] [-f SECS]
 *             [-e EVENTS] [-k] [-b KB] [-c CLOCK] [-n SESSIONS] [-R] [-q] [-x]
 *
 * HOST_HELLO with a nonce (repeated until a HELLO), START, STARTED, the
 * metadata bundle (size, crc, meta_validate), then, like vmtraced, drains the
 * data ports and sends STREAM; from there the ports are read into
 * OUTDIR/cpuN.stream while FLUSH is sent every -f seconds (and once at the
 * end). At each FLUSHED the peer waits until each port has delivered
 * bytes_sent bytes of the session, decodes those pages (lib/page.h) and
 * checks that their events equal the agent's "read events". After -s
 * seconds (default 10): STOP, STOPPED, then a FLUSH answered while idle
 * gives the final cut: every port must have delivered exactly bytes_sent,
 * and the whole session must decode to the final read events. With -n N the
 * next session follows (START from idle; with -R the START is sent while
 * streaming instead, the agent stops by itself, and the tail after the last
 * FLUSHED is dropped with the drain). Each session K leaves OUTDIR/sK/meta/
 * (tracefs layout, for trace-cmd restore) and OUTDIR/sK/cpuN.raw (cut at
 * the last FLUSHED). -x first sends junk, bad headers, FLUSH and STOP while
 * idle and STARTs with bad event lists, which must be skipped or refused.
 * Exit status 0 only if every check held.
 *
 * Build: gcc -Ilib -D_GNU_SOURCE -o build/agent/agentpeer tests/tools/agentpeer.c \
 *        lib/proto.c lib/util.c lib/meta.c lib/log.c lib/page.c
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "meta.h"
#include "page.h"
#include "proto.h"
#include "util.h"


struct cpu {
	int fd;			/* data channel */
	int out;		/* OUTDIR/cpuN.stream */
	uint64_t recv;		/* bytes received since the peer started */
	uint64_t base;		/* stream offset where the session began */
	uint64_t counted;	/* stream offset decoded so far */
	uint64_t events;	/* data events decoded since base */
	uint64_t pages, missed_pages, empty_pages, bad_pages;
};

static struct {
	const char *run, *out, *transport, *events, *clock;
	double secs, every;
	uint32_t buffer_kb, flags;
	int sessions, quiet, abuse, restart;
	uint32_t nonce;
	int ctl_rd, ctl_wr;
	struct vmt_proto_rx rx;
	struct vmt_hello hello;
	struct cpu cpu[VMT_MAX_CPUS];
	unsigned ncpus;
	struct vmt_page_layout layout;
	struct vmt_buf bundle;
	uint64_t meta_total;
	int session;
	int failures;
	double t0;
} P = { .transport = "pipe", .events = "sched:*,irq:*,timer:*", .secs = 10, .sessions = 1,
	.ctl_rd = -1, .ctl_wr = -1 };

static double now(void)
{
	return (double)now_monotonic_ns() / 1e9;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;

	printf("[%7.3f] ", now() - P.t0);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;

	printf("[%7.3f] FAIL: ", now() - P.t0);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	P.failures++;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;

	printf("[%7.3f] FATAL: ", now() - P.t0);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	exit(1);
}

static int unix_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (strlen(path) >= sizeof(a.sun_path))
		die("%s: socket path too long", path);
	memcpy(a.sun_path, path, strlen(path));
	if (fd < 0)
		die("socket: %s", strerror(errno));
	/* QEMU may not have created its socket yet */
	for (int tries = 0; connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0; tries++) {
		if ((errno != ENOENT && errno != ECONNREFUSED) || tries == 300)
			die("connect %s: %s", path, strerror(errno));
		usleep(100000);
	}
	return fd;
}

/* pipe: NAME.in is what QEMU reads (host->guest), NAME.out what it writes */
static void channel_open(const char *name, int *rd, int *wr)
{
	char path[1024];

	if (!strcmp(P.transport, "socket")) {
		snprintf(path, sizeof(path), "%s/%s", P.run, name);
		*rd = unix_connect(path);
		if (wr)
			*wr = *rd;
		return;
	}
	snprintf(path, sizeof(path), "%s/%s.out", P.run, name);
	*rd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (*rd < 0)
		die("%s: %s", path, strerror(errno));
	if (wr) {
		snprintf(path, sizeof(path), "%s/%s.in", P.run, name);
		*wr = open(path, O_WRONLY | O_CLOEXEC);
		if (*wr < 0)
			die("%s: %s", path, strerror(errno));
	}
}

static void send_msg(unsigned type, const void *p, uint32_t len)
{
	struct vmt_buf b = { 0 };

	if (proto_put(&b, type, p, len) < 0 || write_full(P.ctl_wr, b.data, b.len) < 0)
		die("send %s: %s", proto_msg_name(type), strerror(errno));
	buf_free(&b);
}

static void send_start(void)
{
	struct vmt_buf b = { 0 };
	struct vmt_start s = { .buffer_kb = P.buffer_kb, .flags = P.flags,
			       .events = P.events, .events_len = (uint32_t)strlen(P.events) };

	snprintf(s.clock, sizeof(s.clock), "%s", P.clock ? P.clock : "");
	if (proto_put_start(&b, &s) < 0 || write_full(P.ctl_wr, b.data, b.len) < 0)
		die("send START");
	buf_free(&b);
	say("-> START events='%s' buffer_kb=%u clock='%s'%s", P.events, P.buffer_kb, s.clock,
	    P.flags & VMT_START_KEEP_EVENTS ? " KEEP_EVENTS" : "");
}

static void send_flush(uint64_t id)
{
	uint8_t p[8];

	put_le64(p, id);
	send_msg(VMT_MSG_FLUSH, p, 8);
	say("-> FLUSH %llu", (unsigned long long)id);
}

/* Decodes the pages of a CPU's stream up to offset `to`. */
static void cpu_count(unsigned i, uint64_t to)
{
	struct cpu *c = &P.cpu[i];
	uint32_t ps = P.layout.page_size;
	uint8_t *page = malloc(ps);

	while (c->counted + ps <= to) {
		struct vmt_page_info info;

		if (pread(c->out, page, ps, (off_t)c->counted) != (ssize_t)ps)
			die("pread cpu%u: %s", i, strerror(errno));
		if (page_scan(&P.layout, page, &info) < 0) {
			c->bad_pages++;
		} else {
			c->events += info.events;
			c->missed_pages += info.missed_flag;
			c->empty_pages += info.events == 0;
		}
		c->pages++;
		c->counted += ps;
	}
	free(page);
}

static void pump_data(int timeout_ms);

static void handle_data(unsigned i)
{
	struct cpu *c = &P.cpu[i];
	static uint8_t buf[1 << 20];
	ssize_t n = read(c->fd, buf, sizeof(buf));

	if (n > 0) {
		if (write_full(c->out, buf, (size_t)n) < 0)
			die("write cpu%u stream: %s", i, strerror(errno));
		c->recv += (uint64_t)n;
	} else if (n == 0) {
		die("cpu%u data channel closed", i);
	}
}

static int wait_msg(struct vmt_msg *m, double deadline);

/* Every CPU's session bytes up to sent[] have arrived: decode and compare. */
static void check_cut(uint64_t id, bool final, const struct vmt_cpu_stats *st, double took)
{
	uint64_t sum_read = 0, sum_dec = 0, sum_bytes = 0;
	double deadline = now() + 60;
	int ok = 1;

	for (;;) {
		unsigned done = 0;
		for (unsigned i = 0; i < P.ncpus; i++)
			done += P.cpu[i].recv - P.cpu[i].base >= st[i].bytes_sent;
		if (done == P.ncpus)
			break;
		if (now() > deadline) {
			fail("flush %llu: data never reached bytes_sent", (unsigned long long)id);
			return;
		}
		pump_data(100);
	}
	if (final) {
		/* nothing may follow the final cut: linger a little to see */
		double end = now() + 0.5;
		while (now() < end)
			pump_data(50);
	}
	for (unsigned i = 0; i < P.ncpus; i++) {
		struct cpu *c = &P.cpu[i];
		uint64_t to = c->base + st[i].bytes_sent;

		if (st[i].bytes_sent % P.layout.page_size) {
			fail("cpu%u: bytes_sent %llu is not whole pages", i,
			     (unsigned long long)st[i].bytes_sent);
			ok = 0;
		}
		cpu_count(i, to);
		if (c->events != st[i].read) {
			fail("cpu%u: decoded %llu events, agent read %llu", i,
			     (unsigned long long)c->events, (unsigned long long)st[i].read);
			ok = 0;
		}
		if (final && c->recv - c->base != st[i].bytes_sent) {
			fail("cpu%u: received %llu bytes, agent sent %llu", i,
			     (unsigned long long)(c->recv - c->base), (unsigned long long)st[i].bytes_sent);
			ok = 0;
		}
		if (!P.quiet || final)
			say("   cpu%u: sent=%llu pages=%llu (empty %llu, missed-flag %llu, bad %llu) "
			    "read=%llu decoded=%llu entries=%llu overrun=%llu commit_overrun=%llu dropped=%llu",
			    i, (unsigned long long)st[i].bytes_sent, (unsigned long long)c->pages,
			    (unsigned long long)c->empty_pages, (unsigned long long)c->missed_pages,
			    (unsigned long long)c->bad_pages, (unsigned long long)st[i].read,
			    (unsigned long long)c->events, (unsigned long long)st[i].entries,
			    (unsigned long long)st[i].overrun, (unsigned long long)st[i].commit_overrun,
			    (unsigned long long)st[i].dropped);
		sum_read += st[i].read;
		sum_dec += c->events;
		sum_bytes += st[i].bytes_sent;
	}
	say("FLUSHED %llu%s: %.3fs after FLUSH; bytes=%llu read events=%llu decoded=%llu %s",
	    (unsigned long long)id, final ? " final" : "", took, (unsigned long long)sum_bytes,
	    (unsigned long long)sum_read, (unsigned long long)sum_dec, ok ? "MATCH" : "MISMATCH");
}

static void save_session(const struct vmt_cpu_stats *st)
{
	char path[2048], dir[1024];
	size_t pos = 0;
	struct vmt_meta_entry e;

	snprintf(dir, sizeof(dir), "%s/s%d", P.out, P.session);
	mkdir(dir, 0755);
	while (meta_next(P.bundle.data, P.bundle.len, &pos, &e) > 0) {
		int fd;

		snprintf(path, sizeof(path), "%s/meta/%.*s", dir, (int)e.name_len, e.name);
		for (char *s = path + strlen(dir) + 1; (s = strchr(s, '/')); s++) {
			*s = 0;
			mkdir(path, 0755);
			*s = '/';
		}
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0 || write_full(fd, e.data, e.data_len) < 0)
			die("%s: %s", path, strerror(errno));
		close(fd);
	}
	for (unsigned i = 0; i < P.ncpus; i++) {
		struct cpu *c = &P.cpu[i];
		uint64_t left = st[i].bytes_sent;
		off_t off = (off_t)c->base;
		int fd;

		snprintf(path, sizeof(path), "%s/cpu%u.raw", dir, i);
		fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0)
			die("%s: %s", path, strerror(errno));
		while (left) {
			static uint8_t buf[1 << 16];
			ssize_t n = pread(c->out, buf, VMT_MIN(left, sizeof(buf)), off);
			if (n <= 0 || write_full(fd, buf, (size_t)n) < 0)
				die("copy %s", path);
			left -= (uint64_t)n;
			off += n;
		}
		close(fd);
	}
	{
		uint64_t ev = 0, rd = 0;
		for (unsigned i = 0; i < P.ncpus; i++) {
			ev += P.cpu[i].events;
			rd += st[i].read;
		}
		say("session %d saved in %s (meta/, cpuN.raw): %llu events decoded, %llu read", P.session,
		    dir, (unsigned long long)ev, (unsigned long long)rd);
	}
}

static void pump_data(int timeout_ms)
{
	struct pollfd p[VMT_MAX_CPUS];

	for (unsigned i = 0; i < P.ncpus; i++)
		p[i] = (struct pollfd){ P.cpu[i].fd, POLLIN, 0 };
	if (poll(p, P.ncpus, timeout_ms) < 0 && errno != EINTR)
		die("poll: %s", strerror(errno));
	for (unsigned i = 0; i < P.ncpus; i++)
		if (p[i].revents & (POLLIN | POLLHUP))
			handle_data(i);
}

/* Reads data and control until a message arrives; 0 at the deadline. */
static int wait_msg(struct vmt_msg *m, double deadline)
{
	for (;;) {
		struct pollfd p[1 + VMT_MAX_CPUS];
		double left = deadline - now();
		size_t room;
		uint8_t *sp;
		ssize_t n;

		if (proto_rx_next(&P.rx, m) > 0)
			return 1;
		if (left <= 0)
			return 0;
		p[0] = (struct pollfd){ P.ctl_rd, POLLIN, 0 };
		for (unsigned i = 0; i < P.ncpus; i++)
			p[1 + i] = (struct pollfd){ P.cpu[i].fd, POLLIN, 0 };
		if (poll(p, 1 + P.ncpus, (int)(left * 1000) + 1) < 0 && errno != EINTR)
			die("poll: %s", strerror(errno));
		for (unsigned i = 0; i < P.ncpus; i++)
			if (p[1 + i].revents & (POLLIN | POLLHUP))
				handle_data(i);
		if (!(p[0].revents & (POLLIN | POLLHUP)))
			continue;
		sp = proto_rx_space(&P.rx, &room);
		n = read(P.ctl_rd, sp, room);
		if (n == 0)
			die("control channel closed");
		if (n > 0)
			proto_rx_wrote(&P.rx, (size_t)n);
	}
}

static void expect_started(void)
{
	struct vmt_msg m;
	double deadline = now() + 120;
	uint32_t files = 0;

	buf_free(&P.bundle);
	for (;;) {
		if (!wait_msg(&m, deadline))
			die("no STARTED/metadata within 120 s");
		if (m.type == VMT_MSG_STARTED) {
			int32_t err = (int32_t)get_le32(m.payload);
			say("<- STARTED error=%d ncpus=%u '%.*s'", err, get_le32(m.payload + 4),
			    (int)(m.len - 8), m.payload + 8);
			if (err)
				die("START failed: %s", strerror(-err));
		} else if (m.type == VMT_MSG_META_BEGIN) {
			P.meta_total = get_le64(m.payload);
			files = get_le32(m.payload + 8);
		} else if (m.type == VMT_MSG_META_DATA) {
			buf_append(&P.bundle, m.payload, m.len);
		} else if (m.type == VMT_MSG_META_END) {
			break;
		} else if (m.type == VMT_MSG_FLUSHED || m.type == VMT_MSG_STOPPED || m.type == VMT_MSG_HELLO) {
			continue;	/* from before: a session cut or a repeated HELLO */
		} else {
			say("<- %s (unexpected while starting)", proto_msg_name(m.type));
		}
	}
	{
		uint32_t crc = get_le32(m.payload), got = crc32c(0, P.bundle.data, P.bundle.len);
		const char *why = NULL;
		struct vmt_meta_entry hp;
		size_t pos = 0;
		uint32_t n = 0;
		struct vmt_meta_entry e;

		if (P.bundle.len != P.meta_total || crc != got)
			die("bundle: %zu bytes of %llu, crc %08x, expected %08x", P.bundle.len,
			    (unsigned long long)P.meta_total, got, crc);
		if (meta_validate(P.bundle.data, P.bundle.len, &why) < 0)
			die("bundle invalid: %s", why);
		while (meta_next(P.bundle.data, P.bundle.len, &pos, &e) > 0)
			n++;
		if (n != files)
			fail("bundle: %u files, META_BEGIN said %u", n, files);
		meta_find(P.bundle.data, P.bundle.len, "events/header_page", &hp);
		if (page_layout_parse(&P.layout, (const char *)hp.data, hp.data_len,
				      P.hello.page_size) < 0)
			die("events/header_page does not parse");
		say("<- metadata: %zu bytes, %u files, crc32c %08x ok", P.bundle.len, n, crc);
	}
}

static struct vmt_msg expect(unsigned type, const char *why);

/* One FLUSH and its FLUSHED; final: the agent is idle, this is the end. */
static void flush_check(uint64_t id, bool final, struct vmt_cpu_stats *st)
{
	double t = now();
	struct vmt_msg m;
	uint64_t fid;
	uint32_t n;

	send_flush(id);
	for (;;) {
		m = expect(VMT_MSG_FLUSHED, "FLUSH");
		if (proto_get_flushed(m.payload, m.len, &fid, &n, st) < 0 || n != P.ncpus)
			die("bad FLUSHED");
		if (fid == id)
			break;
		say("<- FLUSHED %llu (not asked)", (unsigned long long)fid);
	}
	check_cut(id, final, st, now() - t);
}

/* After META_END, like vmtraced: whatever the data ports hold belongs to
 * no session; the session's bytes start after STREAM. */
static void stream(void)
{
	for (unsigned i = 0; i < P.ncpus; i++) {
		struct cpu *c = &P.cpu[i];
		uint64_t before = c->recv;

		for (;;) {
			struct pollfd p = { c->fd, POLLIN, 0 };
			if (poll(&p, 1, 0) <= 0 || !(p.revents & POLLIN))
				break;
			handle_data(i);
		}
		if (c->recv != before)
			say("   cpu%u: %llu stale bytes drained", i, (unsigned long long)(c->recv - before));
		c->base = c->counted = c->recv;
		c->events = c->pages = c->missed_pages = c->empty_pages = c->bad_pages = 0;
	}
	send_msg(VMT_MSG_STREAM, NULL, 0);
	say("-> STREAM");
}

/* Streams until `until`, flushing every P.every seconds and once at the
 * end; then STOP and the final cut, or (-R) a START while streaming. */
static void run_session(double until, int last)
{
	struct vmt_cpu_stats st[VMT_MAX_CPUS];
	uint64_t id = 1;
	double next = P.every > 0 ? now() + P.every : until, t_start = now();
	struct vmt_msg m;

	for (;;) {
		double t = now();
		if (t >= next) {
			flush_check(id++, false, st);
			if (t >= until)
				break;
			next = P.every > 0 ? VMT_MIN(t + P.every, until) : until;
			continue;
		}
		if (wait_msg(&m, next))
			say("<- %s (unexpected)", proto_msg_name(m.type));
	}
	if (last || !P.restart) {
		send_msg(VMT_MSG_STOP, NULL, 0);
		say("-> STOP");
		expect(VMT_MSG_STOPPED, "STOP");
		say("<- STOPPED");
		/* idle now: a FLUSH reports the final cut */
		flush_check(id, true, st);
	}
	{
		double dur = now() - t_start;
		uint64_t bytes = 0, ev = 0;
		for (unsigned i = 0; i < P.ncpus; i++) {
			bytes += st[i].bytes_sent;
			ev += P.cpu[i].events;
		}
		say("session %d: %.1f s, %llu bytes, %.1f pages/s, %.3f MB/s, %.0f events/s", P.session,
		    dur, (unsigned long long)bytes, (double)bytes / P.layout.page_size / dur,
		    (double)bytes / dur / 1e6, (double)ev / dur);
	}
	save_session(st);
	if (!last)
		send_start();	/* with -R the agent stops by itself first */
}

static struct vmt_msg expect(unsigned type, const char *why)
{
	struct vmt_msg m;
	double deadline = now() + 60;

	for (;;) {
		if (!wait_msg(&m, deadline))
			die("no %s within 60 s (%s)", proto_msg_name(type), why);
		if (m.type == type)
			return m;
		if (m.type != VMT_MSG_HELLO)
			say("<- %s (ignored while waiting for %s)", proto_msg_name(m.type),
			    proto_msg_name(type));
	}
}

/* -x: malformed input and out-of-state requests before the real START; the
 * agent must skip the first and answer the others. */
static void abuse(void)
{
	uint8_t junk[64], h[VMT_PROTO_HDR_SIZE + 8];
	const char *bad_events[] = { "nosuch:*", "sched:sched_switch;reboot", "a:b:c" };
	struct vmt_msg m;

	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(i * 37 + 11);
	if (write_full(P.ctl_wr, junk, sizeof(junk)) < 0)
		die("write");
	/* right magic, wrong version; right magic, unknown type; STOP with a payload */
	put_le32(h, VMT_PROTO_MAGIC); put_le16(h + 4, 99); put_le16(h + 6, VMT_MSG_STOP);
	put_le32(h + 8, 0); put_le32(h + 12, 0);
	write_full(P.ctl_wr, h, VMT_PROTO_HDR_SIZE);
	put_le16(h + 4, VMT_PROTO_VERSION); put_le16(h + 6, 99);
	write_full(P.ctl_wr, h, VMT_PROTO_HDR_SIZE);
	put_le16(h + 6, VMT_MSG_STOP); put_le32(h + 8, 8); memset(h + 16, 0, 8);
	write_full(P.ctl_wr, h, sizeof(h));
	say("-> 64 junk bytes, a bad version, a bad type, a STOP with a payload");

	send_flush(7);
	m = expect(VMT_MSG_FLUSHED, "FLUSH while idle");
	if (get_le64(m.payload) != 7)
		fail("FLUSHED id %llu, wanted 7", (unsigned long long)get_le64(m.payload));
	else
		say("<- FLUSHED 7 while idle");
	send_msg(VMT_MSG_STOP, NULL, 0);
	expect(VMT_MSG_STOPPED, "STOP while idle");
	say("<- STOPPED while idle");
	for (size_t i = 0; i < sizeof(bad_events) / sizeof(bad_events[0]); i++) {
		const char *ev = P.events;
		int32_t err;

		P.events = bad_events[i];
		send_start();
		P.events = ev;
		m = expect(VMT_MSG_STARTED, "bad START");
		err = (int32_t)get_le32(m.payload);
		say("<- STARTED error=%d '%.*s'", err, (int)(m.len - 8), m.payload + 8);
		if (err >= 0)
			fail("START with events '%s' was accepted", bad_events[i]);
	}
}

static void usage(void)
{
	fprintf(stderr, "usage: agentpeer -r RUNDIR -o OUTDIR [-t pipe|socket] [-s SECS] [-f SECS]\n"
			"                 [-e EVENTS] [-k] [-b KB] [-c CLOCK] [-n SESSIONS] [-R] [-q] [-x]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct vmt_msg m;
	double deadline, next_hello = 0;
	int o;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((o = getopt(argc, argv, "r:o:t:s:f:e:kb:c:n:Rqx")) != -1) {
		switch (o) {
		case 'r': P.run = optarg; break;
		case 'o': P.out = optarg; break;
		case 't': P.transport = optarg; break;
		case 's': P.secs = atof(optarg); break;
		case 'f': P.every = atof(optarg); break;
		case 'e': P.events = optarg; break;
		case 'k': P.flags |= VMT_START_KEEP_EVENTS; break;
		case 'b': P.buffer_kb = (uint32_t)atoi(optarg); break;
		case 'c': P.clock = optarg; break;
		case 'n': P.sessions = atoi(optarg); break;
		case 'q': P.quiet = 1; break;
		case 'x': P.abuse = 1; break;
		case 'R': P.restart = 1; break;
		default: usage();
		}
	}
	if (!P.run || !P.out || P.sessions < 1)
		usage();
	P.t0 = now();
	P.nonce = (uint32_t)(now_realtime_ns() >> 10) | 1;	/* never 0 */
	mkdir(P.out, 0755);
	proto_rx_init(&P.rx);
	channel_open("agent-ctl-path", &P.ctl_rd, &P.ctl_wr);

	/* the agent drops nothing once it holds the port, but bytes sent
	 * before it opened it are lost: repeat HOST_HELLO until HELLO */
	deadline = now() + 120;
	for (;;) {
		uint8_t hh[8] = { 0 };
		if (now() >= next_hello) {
			put_le32(hh, VMT_PROTO_VERSION);
			put_le32(hh + 4, P.nonce);
			send_msg(VMT_MSG_HOST_HELLO, hh, 8);
			next_hello = now() + 1;
		}
		if (now() > deadline)
			die("no HELLO within 120 s");
		if (!wait_msg(&m, VMT_MIN(next_hello, deadline)) || m.type != VMT_MSG_HELLO)
			continue;
		if (proto_get_hello(m.payload, m.len, &P.hello) < 0)
			die("bad HELLO");
		/* the unasked HELLO of a starting agent, or the answer to ours;
		 * not an answer to some earlier peer's HOST_HELLO */
		if (!P.hello.echo || P.hello.echo == P.nonce)
			break;
		say("<- HELLO echoing %#x, not ours: ignored", P.hello.echo);
	}
	say("<- HELLO v%u ncpus=%u page=%u flags=%#x echo=%#x release=%s clock=%s boot_id=%s agent='%s'",
	    P.hello.version, P.hello.ncpus, P.hello.page_size, P.hello.flags, P.hello.echo,
	    P.hello.release, P.hello.clock, P.hello.boot_id, P.hello.agent);
	P.ncpus = P.hello.ncpus;
	for (unsigned i = 0; i < P.ncpus; i++) {
		char name[64], path[1024];

		snprintf(name, sizeof(name), "trace-path-cpu%u", i);
		channel_open(name, &P.cpu[i].fd, NULL);
		snprintf(path, sizeof(path), "%s/cpu%u.stream", P.out, i);
		P.cpu[i].out = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (P.cpu[i].out < 0)
			die("%s: %s", path, strerror(errno));
	}
	if (P.abuse)
		abuse();
	send_start();
	for (P.session = 1; P.session <= P.sessions; P.session++) {
		expect_started();
		stream();
		run_session(now() + P.secs, P.session == P.sessions);
	}
	say("%s: %d failure(s)", P.failures ? "FAILED" : "OK", P.failures);
	return P.failures ? 1 : 0;
}
