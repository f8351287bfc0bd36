/* SPDX-License-Identifier: MIT */
/*
 * Integration: hostile guests beside honest ones. Each case runs vmtraced
 * with an honest stand-in guest streaming real ftrace pages while other
 * guests misbehave: garbage and torn pages on the data channels, metadata
 * far over its bound, slow, endless and half-sent control messages, a
 * storm of new sessions, a flood of TRIGGERs. Every case then checks that
 * the daemon is up, that its memory stayed under memory_max and near the
 * rings it holds, that the misbehaviour shows in the counters (exactly
 * where the daemon's behaviour is deterministic), and that the honest
 * guest's rings kept filling and a dump of it holds every page it sent,
 * byte for byte, and decodes. Each case prints one line per guest with
 * what was tried and what the counters said.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <linux/sockios.h>
#include <unistd.h>

#include "ctlproto.h"
#include "fakeguest.h"
#include "itest.h"
#include "meta.h"
#include "page.h"
#include "pagegen.h"
#include "proto.h"
#include "ring.h"
#include "sample.h"
#include "testd.h"
#include "testutil.h"

#define PS ITEST_PS
#define HONEST 1		/* the honest guest is g2, itest slot 1 */
#define HONEST_SECS 4		/* it streams this long */
#define META_MAX (16u << 20)
#define MEM_MAX (64u << 20)
#define RSS_MARGIN_KIB (8u << 10)	/* over an idle daemon, the rings, the metadata */

/* rings of 8 MiB per CPU: three guests of two CPUs fit under memory_max */
#define TOP                                                                   \
	"memory_max: 64MiB\n"                                                 \
	"record:\n  ring_size: 8MiB\n  flush_timeout: 5000ms\n  metadata_max: 16MiB\n"

static struct itest_input in;
/* in's bundle without kallsyms, for every stand-in guest: a session holds
 * its bundle about three times over (received, copied for the writer,
 * compressed), which the RSS limit must allow and should not drown in */
static struct vmt_buf bundle;
static uint64_t idle_rss_kib;	/* a daemon with no guest, measured in main() */
static uint64_t san_kib;	/* more margin under AddressSanitizer: its shadow and caches grow */

#define NEED_INPUT() ITEST_NEED_INPUT(in)

#define say(...)                                                            \
	do {                                                                \
		printf("hostile: " __VA_ARGS__);                            \
		printf("\n");                                               \
		fflush(stdout);                                             \
	} while (0)

/* ---- memory: the daemon's RSS, sampled while the hostile guests act ------------ */

static uint64_t proc_kib(pid_t pid, const char *field)
{
	char path[64], line[256];
	uint64_t v = 0;
	size_t fl = strlen(field);
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, fl) && line[fl] == ':')
			v = strtoull(line + fl + 1, NULL, 10);
	fclose(f);
	return v;
}

struct memwatch {
	pthread_t th;
	pid_t pid;
	volatile bool stop;
	uint64_t max_kib;
	unsigned samples;
};

static void *memwatch_main(void *arg)
{
	struct memwatch *w = arg;

	while (!w->stop) {
		uint64_t v = proc_kib(w->pid, "VmRSS");
		if (v > w->max_kib)
			w->max_kib = v;
		w->samples++;
		usleep(10000);
	}
	return NULL;
}

static void memwatch_start(struct memwatch *w, pid_t pid)
{
	memset(w, 0, sizeof(*w));
	w->pid = pid;
	ck_assert_int_eq(pthread_create(&w->th, NULL, memwatch_main, w), 0);
}

/* Stop sampling (before a dump: its snapshot is memory of its own), then
 * check: the rings under memory_max, the RSS seen under an idle daemon's
 * plus the rings (rings_peak if they took more at some point) plus the
 * metadata plus a small margin. */
static void memwatch_check(struct memwatch *w, struct testd *d, uint64_t rings_peak, char *line,
			   size_t n)
{
	uint64_t used, cap, limit_kib;

	w->stop = true;
	pthread_join(w->th, NULL);
	ck_assert_msg(kill(d->pid, 0) == 0, "vmtraced is gone (log: %s)", d->log);
	used = itest_num(d, NULL, "mem_used");
	cap = itest_num(d, NULL, "mem_cap");
	ck_assert_uint_eq(cap, MEM_MAX);
	ck_assert_msg(used <= cap, "rings of %llu bytes over memory_max %llu", (unsigned long long)used,
		      (unsigned long long)cap);
	/* rings_peak: what the rings took at most, if more than they take now */
	used = VMT_MAX(used, rings_peak);
	limit_kib = idle_rss_kib + (used >> 10) + 3 * (bundle.len >> 10) + RSS_MARGIN_KIB + san_kib;
	ck_assert_msg(w->max_kib <= limit_kib,
		      "vmtraced's RSS reached %llu KiB: idle %llu + rings %llu + 3 x metadata %zu + "
		      "margin %llu KiB",
		      (unsigned long long)w->max_kib, (unsigned long long)idle_rss_kib,
		      (unsigned long long)(used >> 10), bundle.len >> 10,
		      (unsigned long long)(RSS_MARGIN_KIB + san_kib));
	snprintf(line, n, "memory: RSS at most %.1f MiB in %u samples (limit %.1f: idle %.1f + rings %.1f "
		 "+ 3 x metadata %.1f + %llu), memory_max %llu MiB",
		 w->max_kib / 1024.0, w->samples, limit_kib / 1024.0, idle_rss_kib / 1024.0,
		 used / 1048576.0, bundle.len / 1048576.0,
		 (unsigned long long)((RSS_MARGIN_KIB + san_kib) >> 10), (unsigned long long)(cap >> 20));
}

/* ---- what the ring must make of a page sequence ----------------------------- */

struct ring_expect {
	uint64_t in, rejected, backwards, last_ts;
};

/* Feed n pages as ring_complete() judges them, after what e has seen. */
static void expect_pages(struct ring_expect *e, const uint8_t *pages, size_t n)
{
	struct vmt_page_layout l;

	page_layout_default(&l, PS);
	for (size_t i = 0; i < n; i++) {
		struct vmt_page_info info;

		if (page_scan(&l, pages + i * PS, &info) < 0) {
			e->rejected++;
			continue;
		}
		if (e->in && info.first_ts < e->last_ts)
			e->backwards++;
		e->last_ts = info.last_ts;
		e->in++;
	}
}

static bool page_ok(const uint8_t *p)
{
	struct vmt_page_layout l;
	struct vmt_page_info info;

	page_layout_default(&l, PS);
	return page_scan(&l, p, &info) == 0;
}

static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return rnd_state;
}

static void fill_random(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)rnd();
}

/* ---- the honest guest ---------------------------------------------------------- */

static void run_init(struct itest_run *r, const char *tag)
{
	itest_run_init(r, &in, tag);
	for (int i = 0; i < ITEST_GUESTS; i++) {
		r->fc[i].bundle = bundle.data;
		r->fc[i].bundle_len = bundle.len;
	}
}

static uint64_t fed_pages(const struct fakeguest_conf *fc)
{
	uint64_t n = 0;

	for (unsigned c = 0; c < fc->ncpus; c++)
		n += fc->npages[c];
	return n;
}

/*
 * in's pages once each (merge keeps a replayed page once: the decoded
 * count would not tell), paced to stream for about HONEST_SECS. It sends
 * the first half and waits at the gate until honest_before() has seen
 * exactly those arrive and lets it go on, as the hostile phase begins: so
 * that it streams through that phase however slow the machine is.
 */
static void honest_conf(struct itest_run *r)
{
	size_t most = 0, least = SIZE_MAX;

	for (unsigned c = 0; c < in.ncpus; c++) {
		most = VMT_MAX(most, in.npages[c]);
		least = VMT_MIN(least, in.npages[c]);
	}
	r->fc[HONEST].pages_per_sec = (unsigned)VMT_MAX(most / HONEST_SECS, 1);
	r->fc[HONEST].hold_after = VMT_MAX(least / 2, 1);
}

/* The honest guest's first half is in; it goes on: its pages_in. */
static uint64_t honest_before(struct itest_run *r)
{
	uint64_t held = 0;

	for (unsigned c = 0; c < in.ncpus; c++)
		held += VMT_MIN(r->fc[HONEST].hold_after, r->fc[HONEST].npages[c]);
	itest_expect_streaming(&r->d, "g2", 5000);
	itest_expect_pages_in(&r->d, "g2", held);
	ck_assert_msg(held < fed_pages(&r->fc[HONEST]), "g2 has nothing to send past its gate");
	ck_assert_int_eq(fakeguest_release(&r->fg[HONEST]), 0);
	return held;
}

/* Its rings go on filling through the hostile phase. */
static void honest_after(struct itest_run *r, uint64_t before)
{
	ck_assert_msg(itest_wait_num_ge(&r->d, "g2", "pages_in", before + 1, 10000),
		      "g2's rings stood still through the hostile phase (%llu pages in before, %llu after)",
		      (unsigned long long)before,
		      (unsigned long long)itest_num(&r->d, "g2", "pages_in"));
}

/*
 * Once it has sent all: every page in, nothing refused, and a dump of it
 * alone holds exactly the pages it sent on each CPU and decodes to their
 * events.
 */
static void honest_check(struct itest_run *r, char *line, size_t n)
{
	const struct fakeguest_conf *fc = &r->fc[HONEST];
	uint64_t fed = fed_pages(fc), per_cpu[ITEST_MAX_CPUS], total, want_total = 0;
	char sample[4400], dat[400];
	struct ijson root;
	const struct ijson *g;
	struct vmt_sample *s;

	ck_assert_int_eq(fakeguest_wait_sent(&r->fg[HONEST], 30000), 0);
	itest_expect_pages_in(&r->d, "g2", fed);
	ck_assert_int_eq(itest_status(&r->d, &root), 0);
	g = itest_guest(&root, "g2");
	ck_assert_str_eq(ijson_str(g, "state"), "streaming");
	ck_assert_uint_eq(ijson_u64(g, "pages_rejected"), 0);
	ck_assert_uint_eq(ijson_u64(g, "bytes_rejected"), 0);
	ck_assert_uint_eq(ijson_u64(g, "ctl_rejected"), 0);
	ck_assert_uint_eq(ijson_u64(g, "meta_rejected"), 0);
	ck_assert_uint_eq(ijson_u64(g, "sessions"), 1);
	ck_assert_uint_eq(ijson_u64(g, "pages"), fed);
	ijson_free(&root);

	itest_dump_one(&r->d, "g2", sample, sizeof(sample));
	s = itest_read_sample(sample);
	ck_assert_str_eq(s->guest, "g2");
	ck_assert_uint_eq(s->ncpus, fc->ncpus);
	for (unsigned c = 0; c < fc->ncpus; c++) {
		ck_assert_msg(s->cpus[c].npages == fc->npages[c], "g2 cpu%u: %u pages dumped, %zu sent", c,
			      s->cpus[c].npages, fc->npages[c]);
		ck_assert_msg(!memcmp(s->cpus[c].pages, fc->pages[c], fc->npages[c] * PS),
			      "g2 cpu%u: the dumped pages are not the pages sent", c);
	}
	sample_free(s);
	snprintf(dat, sizeof(dat), "%s/g2.dat", r->dir);
	ck_assert_int_eq(itest_merge(&r->d, sample, dat), 0);
	ck_assert_int_eq(tdread_counts(dat, per_cpu, ITEST_MAX_CPUS, &total), 0);
	for (unsigned c = 0; c < fc->ncpus; c++) {
		uint64_t want = itest_events_of(fc->pages[c], fc->npages[c]);
		ck_assert_msg(per_cpu[c] == want, "g2 cpu%u: %llu events decoded, %llu sent", c,
			      (unsigned long long)per_cpu[c], (unsigned long long)want);
		want_total += want;
	}
	ck_assert_uint_eq(total, want_total);
	snprintf(line, n, "honest g2: %llu/%llu pages dumped exactly (%u CPUs), %llu events decoded",
		 (unsigned long long)fed, (unsigned long long)fed, fc->ncpus,
		 (unsigned long long)total);
}

/* ---- a daemon for a case ------------------------------------------------------- */

/* vmtraced with TOP, then more top-level keys, then these itest guests (a
 * mask of slots) and extra `guests:` entries. */
static void daemon_start(struct itest_run *r, const char *more, unsigned slots, const char *extra)
{
	char g[600];
	int rc;

	snprintf(r->body, sizeof(r->body), "%s%sguests:\n", TOP, more ? more : "");
	for (int i = 0; i < ITEST_GUESTS; i++) {
		if (!(slots & (1u << i)))
			continue;
		itest_guest_yaml(g, sizeof(g), r, i);
		strncat(r->body, g, sizeof(r->body) - strlen(r->body) - 1);
	}
	if (extra)
		strncat(r->body, extra, sizeof(r->body) - strlen(r->body) - 1);
	rc = testd_start(&r->d, r->dir, r->body);
	ck_assert_msg(rc == 0, "vmtraced did not start (%d, log: %s)", rc, r->d.log);
}

static void extra_yaml(char *out, size_t n, const char *name, const char *dir,
		       const char *transport)
{
	size_t l = strlen(out);

	snprintf(out + l, n - l, "  - name: %s\n    path: %s\n    transport: %s\n", name, dir, transport);
}

/* ---- raw guests: the test itself is QEMU and the agent ------------------------- */

/* FIFO pairs, held open: the guest writes P.out, the host P.in. */
struct rawfifo {
	char dir[300];
	unsigned ncpus;
	int ctl_out, ctl_in;
	int data_out[2];
};

static int fifo_pair(const char *dir, const char *name, int *out, int *infd)
{
	char p[400];

	snprintf(p, sizeof(p), "%s/%s.in", dir, name);
	if (mkfifo(p, 0600) < 0)
		return -errno;
	*infd = open(p, O_RDWR | O_CLOEXEC);
	snprintf(p, sizeof(p), "%s/%s.out", dir, name);
	if (mkfifo(p, 0600) < 0)
		return -errno;
	*out = open(p, O_RDWR | O_CLOEXEC);
	return *out < 0 || *infd < 0 ? -errno : 0;
}

static void rawfifo_make(struct rawfifo *g, const char *parent, const char *name, unsigned ncpus)
{
	int unused;

	snprintf(g->dir, sizeof(g->dir), "%s/%s", parent, name);
	g->ncpus = ncpus;
	ck_assert_int_eq(mkdir(g->dir, 0700), 0);
	ck_assert_int_eq(fifo_pair(g->dir, "agent-ctl-path", &g->ctl_out, &g->ctl_in), 0);
	for (unsigned c = 0; c < ncpus; c++) {
		char port[32];
		snprintf(port, sizeof(port), "trace-path-cpu%u", c);
		ck_assert_int_eq(fifo_pair(g->dir, port, &g->data_out[c], &unused), 0);
		close(unused);
	}
	/* the host's HOST_HELLOs and STARTs must never fill the FIFO */
	fcntl(g->ctl_in, F_SETFL, O_NONBLOCK);
}

static void rawfifo_close(struct rawfifo *g)
{
	close(g->ctl_out);
	close(g->ctl_in);
	for (unsigned c = 0; c < g->ncpus; c++)
		close(g->data_out[c]);
}

static void drain_fd(int fd)
{
	uint8_t b[4096];

	while (read(fd, b, sizeof(b)) > 0)
		;
}

/* Listening sockets, as QEMU's server=on chardevs, and the host's
 * connections to them. */
struct rawsock {
	unsigned ncpus;
	int lctl, ldata[ITEST_MAX_CPUS];
	int ctl, data[ITEST_MAX_CPUS];
};

static int listen_at(const char *dir, const char *name)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, name);
	unlink(sa.sun_path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 1) < 0)
		return -errno;
	return fd;
}

static void rawsock_listen(struct rawsock *s, const char *dir, unsigned ncpus)
{
	mkdir(dir, 0700);
	s->ncpus = ncpus;
	s->ctl = -1;
	s->lctl = listen_at(dir, "agent-ctl-path");
	ck_assert_int_ge(s->lctl, 0);
	for (unsigned c = 0; c < ncpus; c++) {
		char port[32];
		snprintf(port, sizeof(port), "trace-path-cpu%u", c);
		s->ldata[c] = listen_at(dir, port);
		ck_assert_int_ge(s->ldata[c], 0);
		s->data[c] = -1;
	}
}

static int accept_within(int lfd, int ms)
{
	struct pollfd p = { .fd = lfd, .events = POLLIN };

	if (poll(&p, 1, ms) <= 0)
		return -ETIMEDOUT;
	return accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
}

/* The host's connections to every port (it makes them all at once): the
 * control connection, or -ETIMEDOUT. */
static int rawsock_accept(struct rawsock *s, int ms)
{
	s->ctl = accept_within(s->lctl, ms);
	if (s->ctl < 0)
		return s->ctl;
	for (unsigned c = 0; c < s->ncpus; c++)
		s->data[c] = accept_within(s->ldata[c], 1000);
	return s->ctl;
}

/* Once the host has read what was sent, close its connections (the
 * control connection may be closed already). */
static void rawsock_hangup(struct rawsock *s)
{
	int unread = 0;

	for (int i = 0; s->ctl >= 0 && i < 100; i++) {
		if (ioctl(s->ctl, SIOCOUTQ, &unread) < 0 || !unread)
			break;
		usleep(10000);
	}
	if (s->ctl >= 0)
		close(s->ctl);
	s->ctl = -1;
	for (unsigned c = 0; c < s->ncpus; c++) {
		if (s->data[c] >= 0)
			close(s->data[c]);
		s->data[c] = -1;
	}
}

static void rawsock_close(struct rawsock *s)
{
	close(s->lctl);
	for (unsigned c = 0; c < s->ncpus; c++)
		close(s->ldata[c]);
}

static void hello_msg(struct vmt_buf *b, uint32_t ncpus, uint32_t page_size, uint32_t echo)
{
	struct vmt_hello h = { .version = VMT_PROTO_VERSION, .ncpus = ncpus,
			       .page_size = page_size, .mono_ns = now_monotonic_ns(), .echo = echo };

	snprintf(h.release, sizeof(h.release), "6.1.0-hostile");
	snprintf(h.clock, sizeof(h.clock), "local");
	snprintf(h.boot_id, sizeof(h.boot_id), "hostile-boot");
	snprintf(h.agent, sizeof(h.agent), "hostile");
	b->len = 0;
	ck_assert_int_ge(proto_put_hello(b, &h), 0);
}

/* ================================================================================ */
/* 1. garbage on the data channels                                                  */
/* ================================================================================ */

#define G_GOOD 8		/* good pages between the bad runs */
#define G_BAD 16		/* pages in a bad run */
#define G_BACK 32		/* pages whose time goes backwards */
#define G_STALE 10000		/* junk bytes in a data FIFO before any session */
#define CUT_PAGES 40
#define CUT_AFTER 20

START_TEST(garbage_pages)
{
	struct itest_run r;
	struct memwatch w;
	struct ring_expect ex[2] = { 0 }, exc = { 0 };
	uint8_t *hp[2], *cp, *junk;
	size_t hn[2] = { 0, G_BACK };
	uint64_t ts = 1000000000ull, before, want_in, want_rej;
	struct ijson root;
	const struct ijson *g1, *g3;
	char path[400], mem[512], honest[512];
	int fd;

	NEED_INPUT();
	run_init(&r, "hostile-garbage");

	/* g1 cpu0: good pages with runs of random bytes and of commits past the page */
	hp[0] = calloc(3 * G_GOOD + 2 * G_BAD, PS);
	for (int run = 0; run < 5; run++) {
		for (int i = 0; i < (run % 2 ? G_BAD : G_GOOD); i++) {
			uint8_t *p = hp[0] + hn[0]++ * PS;

			if (run == 1) {
				do
					fill_random(p, PS);
				while (page_ok(p));
			} else {
				pagegen_simple(p, PS, ts += 1000000, 20);
				if (run == 3)	/* commit past the data area, or as large as it goes */
					put_le64(p + 8, i % 2 ? VMT_PAGE_COMMIT_MASK : PS - 16 + 4u * (uint32_t)(i + 1));
				ck_assert(page_ok(p) == (run != 3));
			}
		}
	}
	/* g1 cpu1: every page older than the one before */
	hp[1] = calloc(G_BACK, PS);
	for (int i = 0; i < G_BACK; i++)
		pagegen_simple(hp[1] + (size_t)i * PS, PS, 50000000000ull - (uint64_t)i * 1000000, 20);
	for (int c = 0; c < 2; c++)
		expect_pages(&ex[c], hp[c], hn[c]);
	ck_assert_uint_eq(ex[0].rejected, 2 * G_BAD);
	ck_assert_uint_eq(ex[1].backwards, G_BACK - 1);
	r.fc[0].ncpus = 2;
	for (int c = 0; c < 2; c++) {
		r.fc[0].pages[c] = hp[c];
		r.fc[0].npages[c] = hn[c];
	}

	/* g3: one CPU on a socket that dies half-way through a page, then comes back
	 * and sends all its pages again */
	cp = calloc(CUT_PAGES, PS);
	for (int i = 0; i < CUT_PAGES; i++)
		pagegen_simple(cp + (size_t)i * PS, PS, 1000000000ull + (uint64_t)i * 1000000, 20);
	expect_pages(&exc, cp, CUT_AFTER);
	expect_pages(&exc, cp, CUT_PAGES);
	r.fc[2].sockets = 1;
	r.fc[2].ncpus = 1;
	r.fc[2].pages[0] = cp;
	r.fc[2].npages[0] = CUT_PAGES;
	r.fc[2].cut_after = CUT_AFTER;

	honest_conf(&r);
	for (int i = 0; i < 3; i++)
		itest_run_guest(&r, i);
	/* junk in g1's cpu1 port before the daemon looks: no session owns it */
	junk = malloc(G_STALE);
	fill_random(junk, G_STALE);
	snprintf(path, sizeof(path), "%s/trace-path-cpu1.out", r.chan[0]);
	fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write_full(fd, junk, G_STALE), 0);
	close(fd);
	free(junk);

	daemon_start(&r, "triggers:\n  coalesce: 0ms\n", 7, NULL);
	memwatch_start(&w, r.d.pid);
	before = honest_before(&r);
	itest_expect_streaming(&r.d, "g1", 5000);
	want_in = ex[0].in + ex[1].in;
	itest_expect_pages_in(&r.d, "g1", want_in);
	/* g3: the torn page, the 2 s reconnect, the second stream */
	ck_assert_msg(itest_wait_num_ge(&r.d, "g3", "pages_in", exc.in, 15000),
		      "g3 did not come back after the cut: %llu pages in (log: %s)",
		      (unsigned long long)itest_num(&r.d, "g3", "pages_in"), r.d.log);
	honest_after(&r, before);

	ck_assert_int_eq(itest_status(&r.d, &root), 0);
	g1 = itest_guest(&root, "g1");
	g3 = itest_guest(&root, "g3");
	want_rej = (ex[0].rejected + ex[1].rejected) * PS;
	ck_assert_str_eq(ijson_str(g1, "state"), "streaming");
	ck_assert_uint_eq(ijson_u64(g1, "pages_in"), want_in);
	ck_assert_uint_eq(ijson_u64(g1, "pages"), want_in);
	ck_assert_uint_eq(ijson_u64(g1, "pages_rejected"), ex[0].rejected + ex[1].rejected);
	ck_assert_uint_eq(ijson_u64(g1, "stale_bytes"), G_STALE);
	ck_assert_uint_eq(ijson_u64(g1, "bytes_rejected"), want_rej + G_STALE);
	ck_assert_uint_eq(ijson_u64(g1, "ts_backwards"), ex[0].backwards + ex[1].backwards);
	ck_assert_uint_eq(ijson_u64(g1, "ctl_rejected"), 0);
	ck_assert_uint_eq(ijson_u64(g1, "sessions"), 1);
	ck_assert_str_eq(ijson_str(g3, "state"), "streaming");
	ck_assert_uint_eq(ijson_u64(g3, "pages_in"), exc.in);
	ck_assert_uint_eq(ijson_u64(g3, "pages_rejected"), 0);
	ck_assert_uint_eq(ijson_u64(g3, "bytes_rejected"), PS / 2);	/* the torn half page */
	ck_assert_uint_eq(ijson_u64(g3, "ts_backwards"), exc.backwards);	/* the replay */
	ck_assert_uint_eq(ijson_u64(g3, "sessions"), 2);
	{
		/* the text status says it under g1's line, and nothing under g2's */
		char out[8192], want[256], *l1, *l2;

		ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "status"), 0);
		snprintf(want, sizeof(want), "  ! %llu pages rejected, ",
			 (unsigned long long)(ex[0].rejected + ex[1].rejected));
		l1 = strstr(out, "\ng1 ");
		l2 = strstr(out, "\ng2 ");
		ck_assert_msg(l1 && l2, "status: %s", out);
		l1 = strchr(l1 + 1, '\n');
		ck_assert_msg(l1 && !strncmp(l1 + 1, want, strlen(want)) &&
				      strstr(l1, "pages back in time") && strstr(l1, "stale data"),
			      "no '%s...' under g1: %s", want, out);
		l2 = strchr(l2 + 1, '\n');
		ck_assert_msg(l2 && strncmp(l2 + 1, "  !", 3), "a problem line under g2: %s", out);
	}
	say("garbage pages: g1 sent %zu pages with %llu of random bytes or a commit past the page: "
	    "%llu pages rejected (%llu bytes), %llu accepted; %llu pages going back in time: "
	    "ts_backwards %llu; %u junk bytes before the session: stale_bytes %llu, bytes_rejected %llu",
	    hn[0] + hn[1], (unsigned long long)ex[0].rejected,
	    (unsigned long long)ijson_u64(g1, "pages_rejected"), (unsigned long long)want_rej,
	    (unsigned long long)ijson_u64(g1, "pages_in"), (unsigned long long)G_BACK,
	    (unsigned long long)ijson_u64(g1, "ts_backwards"), G_STALE,
	    (unsigned long long)ijson_u64(g1, "stale_bytes"),
	    (unsigned long long)ijson_u64(g1, "bytes_rejected"));
	say("garbage pages: g3 closed its socket %u.5 pages into its stream and came back: "
	    "sessions %llu, bytes_rejected %llu (the torn half page), pages_in %llu (%u + %u again), "
	    "ts_backwards %llu (the replay)",
	    CUT_AFTER, (unsigned long long)ijson_u64(g3, "sessions"),
	    (unsigned long long)ijson_u64(g3, "bytes_rejected"),
	    (unsigned long long)ijson_u64(g3, "pages_in"), CUT_AFTER, CUT_PAGES,
	    (unsigned long long)ijson_u64(g3, "ts_backwards"));
	ijson_free(&root);
	ck_assert_int_ge(testd_log_count(&r.d, "guest g1: cpu0: page"), 1);

	memwatch_check(&w, &r.d, 0, mem, sizeof(mem));
	honest_check(&r, honest, sizeof(honest));
	say("garbage pages: %s; %s", honest, mem);
	itest_run_end(&r);
	free(hp[0]);
	free(hp[1]);
	free(cp);
}
END_TEST

/* ================================================================================ */
/* 2. metadata far over its bound                                                   */
/* ================================================================================ */

#define META_JUNK (2 * META_MAX)	/* what each of them sends */

/* The FIFO of a port, as its reader sees it: bytes not yet read. */
static int fifo_pending(const char *dir, const char *port)
{
	char p[400];
	int fd, n = -1;

	snprintf(p, sizeof(p), "%s/%s.out", dir, port);
	fd = open(p, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (ioctl(fd, FIONREAD, &n) < 0)
		n = -1;
	close(fd);
	return n;
}

START_TEST(metadata_over_bound)
{
	struct itest_run r;
	struct memwatch w;
	uint8_t *junk = malloc(META_JUNK);
	uint64_t before, claim_big = 1ull << 30, claim_small = 64 << 10;
	struct ijson root;
	char needle[200], mem[512], honest[512], st[64];
	int lines_big, lines_small;

	NEED_INPUT();
	ck_assert_ptr_nonnull(junk);
	memset(junk, 0x6b, META_JUNK);
	run_init(&r, "hostile-meta");
	/* g1 announces 1 GiB, g3 64 KiB; both send 32 MiB */
	for (int i = 0; i < 3; i += 2) {
		r.fc[i].bundle = junk;
		r.fc[i].bundle_len = META_JUNK;
	}
	r.fc[0].meta_claim = claim_big;
	r.fc[2].meta_claim = claim_small;
	honest_conf(&r);
	for (int i = 0; i < 3; i++)
		itest_run_guest(&r, i);
	daemon_start(&r, "triggers:\n  coalesce: 0ms\n", 7, NULL);
	memwatch_start(&w, r.d.pid);
	before = honest_before(&r);
	ck_assert_msg(itest_wait_state(&r.d, "g1", "failed", 5000, st, sizeof(st)),
		      "g1 is '%s', not failed (log: %s)", st, r.d.log);
	ck_assert_msg(itest_wait_state(&r.d, "g3", "failed", 5000, st, sizeof(st)),
		      "g3 is '%s', not failed (log: %s)", st, r.d.log);
	/* the daemon reads (and drops) all they send: once every byte is
	 * written, the FIFOs run dry (an empty FIFO alone may be a writer
	 * that has not been scheduled yet) */
	ck_assert_int_eq(fakeguest_wait_meta_sent(&r.fg[0], 20000), 0);
	ck_assert_int_eq(fakeguest_wait_meta_sent(&r.fg[2], 20000), 0);
	ck_assert_msg(ITEST_WAIT(fifo_pending(r.chan[0], "agent-ctl-path") == 0 &&
				 fifo_pending(r.chan[2], "agent-ctl-path") == 0, 10000),
		      "the metadata junk is not read");
	honest_after(&r, before);

	snprintf(needle, sizeof(needle), "guest g1: metadata of %llu bytes refused (metadata_max %u)",
		 (unsigned long long)claim_big, META_MAX);
	lines_big = testd_log_count(&r.d, needle);
	lines_small = testd_log_count(&r.d, "guest g3: metadata larger than announced");
	ck_assert_msg(lines_big == 1, "%d lines '%s' (log: %s)", lines_big, needle, r.d.log);
	ck_assert_msg(lines_small == 1, "%d lines 'metadata larger than announced' (log: %s)",
		      lines_small, r.d.log);
	ck_assert_int_eq(itest_status(&r.d, &root), 0);
	for (int i = 0; i < 3; i += 2) {
		const char *name = i ? "g3" : "g1";
		const struct ijson *g = itest_guest(&root, name);

		ck_assert_str_eq(ijson_str(g, "state"), "failed");
		ck_assert_uint_eq(ijson_u64(g, "meta_rejected"), 1);
		ck_assert_uint_eq(ijson_u64(g, "sessions"), 1);
		ck_assert_uint_eq(ijson_u64(g, "ctl_rejected"), 0);
		ck_assert_uint_eq(ijson_u64(g, "pages_in"), 0);
		ck_assert_ptr_null(ijson_get(g, "aux_version"));
	}
	say("metadata: g1 announced %llu bytes (metadata_max %u) and sent %u: refused at META_BEGIN, "
	    "meta_rejected %llu, state %s, %d log line '%s'",
	    (unsigned long long)claim_big, META_MAX, META_JUNK,
	    (unsigned long long)ijson_u64(itest_guest(&root, "g1"), "meta_rejected"),
	    ijson_str(itest_guest(&root, "g1"), "state"), lines_big, needle + 10);
	say("metadata: g3 announced %llu bytes and sent %u: refused at the first byte past it, "
	    "meta_rejected %llu, state %s, %d log line 'metadata larger than announced'",
	    (unsigned long long)claim_small, META_JUNK,
	    (unsigned long long)ijson_u64(itest_guest(&root, "g3"), "meta_rejected"),
	    ijson_str(itest_guest(&root, "g3"), "state"), lines_small);
	ijson_free(&root);

	memwatch_check(&w, &r.d, 0, mem, sizeof(mem));
	honest_check(&r, honest, sizeof(honest));
	say("metadata: %s; %s", honest, mem);
	itest_run_end(&r);
	free(junk);
}
END_TEST

/* ================================================================================ */
/* 3. the control channel: slowloris, endless garbage, a half-sent message          */
/* ================================================================================ */

#define SLOW_PAYLOAD 10		/* of a HELLO's 200 bytes */

struct slow_job {
	int fd;
};

/* A HELLO header one byte per 100 ms, then a few bytes of its payload, then
 * nothing more. */
static void *slow_main(void *arg)
{
	struct slow_job *j = arg;
	struct vmt_buf b = { 0 };

	hello_msg(&b, 1, PS, 0);
	for (size_t i = 0; i < VMT_PROTO_HDR_SIZE + SLOW_PAYLOAD; i++) {
		write_full(j->fd, b.data + i, 1);
		usleep(100000);
	}
	buf_free(&b);
	return NULL;
}

struct noise_job {
	int fd;
	volatile int stop;
	volatile uint64_t sent;
};

/* Garbage as fast as the daemon takes it until told to stop. No byte of it
 * is 'V', so no run of it can look like the start of a magic: every byte is
 * skipped, none held back. */
static void *noise_main(void *arg)
{
	struct noise_job *j = arg;
	static uint8_t b[65536];

	fill_random(b, sizeof(b));
	for (size_t i = 0; i < sizeof(b); i++)
		if (b[i] == 'V')
			b[i] = 'v';
	while (!j->stop) {
		if (write_full(j->fd, b, sizeof(b)) < 0)
			break;
		j->sent += sizeof(b);
	}
	return NULL;
}

START_TEST(control_channel)
{
	struct itest_run r;
	struct memwatch w;
	struct rawfifo slow, noise;
	struct rawsock half;
	struct slow_job sj;
	struct noise_job nj = { 0 };
	pthread_t sth, nth;
	char extra[1024] = "", mem[512], honest[512];
	uint8_t hdr[VMT_PROTO_HDR_SIZE + 10] = { 0 };
	uint64_t before, t0, lat, lat_max = 0, polls = 0, flood_ms, t_half, t_back;
	struct ijson root;
	const struct ijson *g;
	int ctl, complaints;

	NEED_INPUT();
	run_init(&r, "hostile-ctl");
	rawfifo_make(&slow, r.dir, "slow", 1);
	rawfifo_make(&noise, r.dir, "noise", 1);
	extra_yaml(extra, sizeof(extra), "slow", slow.dir, "fifo");
	extra_yaml(extra, sizeof(extra), "noise", noise.dir, "fifo");
	/* g3: sockets, first a half-sent message and a close, then an honest agent */
	r.fc[2].sockets = 1;
	rawsock_listen(&half, r.chan[2], in.ncpus);
	honest_conf(&r);
	itest_run_guest(&r, HONEST);
	daemon_start(&r, "triggers:\n  coalesce: 0ms\n", 6, extra);
	memwatch_start(&w, r.d.pid);
	before = honest_before(&r);

	/* a META_DATA of 64 KiB, 10 bytes of it, and the connection ends */
	ctl = rawsock_accept(&half, 5000);
	ck_assert_msg(ctl >= 0, "vmtraced did not connect to g3's sockets");
	put_le32(hdr, VMT_PROTO_MAGIC);
	put_le16(hdr + 4, VMT_PROTO_VERSION);
	put_le16(hdr + 6, VMT_MSG_META_DATA);
	put_le32(hdr + 8, VMT_PROTO_MAX_PAYLOAD);
	ck_assert_int_eq(write_full(ctl, hdr, sizeof(hdr)), 0);
	rawsock_hangup(&half);
	rawsock_close(&half);
	t_half = itest_now_ms();

	sj.fd = slow.ctl_out;
	nj.fd = noise.ctl_out;
	/* A page of pipe: the daemon reads it dry at each turn and the flood
	 * fills it again at once, so it is ready at every turn of the loop. */
	ck_assert_int_ge(fcntl(noise.ctl_out, F_SETPIPE_SZ, 4096), 0);
	/*
	 * The same guest, its agent started again on the same sockets. Its
	 * stand-in is forked before the flood's threads start: a fork while
	 * another thread is being born copies the sanitizer's thread registry
	 * locked, and the child's threads then wait on it for ever (seen: g3
	 * "starting", the stand-in's three threads in futex_wait, its data
	 * connections never accepted). The daemon comes back to g3 at its next
	 * retry, seconds later, with the flood going on.
	 */
	itest_run_guest(&r, 2);
	ck_assert_int_eq(pthread_create(&sth, NULL, slow_main, &sj), 0);
	ck_assert_int_eq(pthread_create(&nth, NULL, noise_main, &nj), 0);
	/*
	 * While they go on: status answers, g2 streams to its last page, g3
	 * comes back and sends all of its pages. The flood lasts until then,
	 * however long that takes; the deadline only catches a starved guest.
	 */
	t0 = itest_now_ms();
	for (;;) {
		uint64_t t1 = itest_now_ms();
		uint64_t p = itest_num(&r.d, "g2", "pages_in");

		lat = itest_now_ms() - t1;
		lat_max = VMT_MAX(lat_max, lat);
		polls++;
		ck_assert_msg(p != UINT64_MAX, "no status during the control-channel flood");
		if (p == fed_pages(&r.fc[HONEST]) &&
		    itest_num(&r.d, "g3", "pages_in") == fed_pages(&r.fc[2]))
			break;
		if (itest_now_ms() >= t0 + (uint64_t)test_deadline_ms(30000)) {
			char st[64];

			itest_state(&r.d, "g3", st, sizeof(st));
			{
				char cmd[1200];
				snprintf(cmd, sizeof(cmd),
					 "echo '--- g3 sockets:'; ss -xap | grep '%s' >&2; "
					 "echo '--- g3 stand-in %d threads:' >&2; "
					 "for t in /proc/%d/task/*; do echo \"$t $(cat $t/wchan) $(cat $t/stat | cut -d' ' -f3)\" >&2; done",
					 r.chan[2], (int)r.fg[2].pid, (int)r.fg[2].pid);
				if (system(cmd) < 0)
					fprintf(stderr, "no diagnostics\n");
			}
			ck_abort_msg("after 30 s of flood: g2 %llu of %llu pages in, g3 %llu of %llu "
				     "(state %s, sessions %llu, noise: ctl_rejected %llu) (log: %s)",
				     (unsigned long long)p, (unsigned long long)fed_pages(&r.fc[HONEST]),
				     (unsigned long long)itest_num(&r.d, "g3", "pages_in"),
				     (unsigned long long)fed_pages(&r.fc[2]), st,
				     (unsigned long long)itest_num(&r.d, "g3", "sessions"),
				     (unsigned long long)itest_num(&r.d, "noise", "ctl_rejected"), r.d.log);
		}
		usleep(100000);
	}
	flood_ms = itest_now_ms() - t0;
	honest_after(&r, before);
	ck_assert_msg(nj.sent > 0 && !nj.stop, "the flood was over before the guests were done");
	nj.stop = 1;
	pthread_join(nth, NULL);
	pthread_join(sth, NULL);
	itest_expect_streaming(&r.d, "g3", 8000);
	t_back = itest_now_ms();
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg[2], 10000), 0);
	itest_expect_pages_in(&r.d, "g3", fed_pages(&r.fc[2]));
	ck_assert_msg(ITEST_WAIT(itest_num(&r.d, "noise", "ctl_rejected") == nj.sent, 5000),
		      "noise: ctl_rejected %llu, %llu bytes sent",
		      (unsigned long long)itest_num(&r.d, "noise", "ctl_rejected"),
		      (unsigned long long)nj.sent);

	/* the slow HELLO is held until nothing whole has come for 5 s, then
	 * given up */
	ck_assert_msg(ITEST_WAIT(itest_num(&r.d, "slow", "ctl_rejected") ==
					 VMT_PROTO_HDR_SIZE + SLOW_PAYLOAD,
				 15000),
		      "slow: ctl_rejected %llu, not the %d bytes of its unfinished HELLO (log: %s)",
		      (unsigned long long)itest_num(&r.d, "slow", "ctl_rejected"),
		      VMT_PROTO_HDR_SIZE + SLOW_PAYLOAD, r.d.log);
	ck_assert_int_ge(testd_log_count(&r.d, "guest slow: control channel: a message unfinished"), 1);
	ck_assert_int_eq(itest_status(&r.d, &root), 0);
	g = itest_guest(&root, "slow");
	ck_assert_str_eq(ijson_str(g, "state"), "connecting");
	ck_assert_uint_eq(ijson_u64(g, "sessions"), 0);
	say("control channel: 'slow' sent a HELLO header one byte per 100 ms and %d bytes of its "
	    "payload, never the rest: held, then given up 5 s after its first byte: state %s, "
	    "sessions %llu, ctl_rejected %llu",
	    SLOW_PAYLOAD, ijson_str(g, "state"), (unsigned long long)ijson_u64(g, "sessions"),
	    (unsigned long long)ijson_u64(g, "ctl_rejected"));
	g = itest_guest(&root, "noise");
	ck_assert_str_eq(ijson_str(g, "state"), "connecting");
	ck_assert_uint_eq(ijson_u64(g, "ctl_rejected"), nj.sent);
	ck_assert_uint_eq(ijson_u64(g, "sessions"), 0);
	complaints = testd_log_count(&r.d, "guest noise: control channel:");
	/* complaints are rate-limited: 10 in 10 s */
	ck_assert_msg(complaints >= 1 && (uint64_t)complaints <= 10 * (1 + flood_ms / 10000),
		      "%d complaints about noise's garbage in %.1f s", complaints, flood_ms / 1000.0);
	say("control channel: 'noise' sent %llu bytes of garbage in %.1f s: ctl_rejected %llu, state %s, "
	    "sessions %llu, %d log lines; status answered %llu times meanwhile, in at most %llu ms",
	    (unsigned long long)nj.sent, flood_ms / 1000.0, (unsigned long long)ijson_u64(g, "ctl_rejected"),
	    ijson_str(g, "state"), (unsigned long long)ijson_u64(g, "sessions"), complaints,
	    (unsigned long long)polls, (unsigned long long)lat_max);
	g = itest_guest(&root, "g3");
	ck_assert_str_eq(ijson_str(g, "state"), "streaming");
	ck_assert_uint_eq(ijson_u64(g, "sessions"), 1);
	ck_assert_uint_eq(ijson_u64(g, "ctl_rejected"), sizeof(hdr));
	ck_assert_uint_eq(ijson_u64(g, "pages_in"), fed_pages(&r.fc[2]));
	say("control channel: g3 sent %zu bytes of a 64 KiB META_DATA and closed its socket; its "
	    "agent back on the same sockets streamed %.1f s later: state %s, sessions %llu, "
	    "ctl_rejected %llu (the half message), pages_in %llu/%llu",
	    sizeof(hdr), (double)(t_back - t_half) / 1000, ijson_str(g, "state"),
	    (unsigned long long)ijson_u64(g, "sessions"), (unsigned long long)ijson_u64(g, "ctl_rejected"),
	    (unsigned long long)ijson_u64(g, "pages_in"), (unsigned long long)fed_pages(&r.fc[2]));
	ijson_free(&root);

	memwatch_check(&w, &r.d, 0, mem, sizeof(mem));
	honest_check(&r, honest, sizeof(honest));
	say("control channel: %s; %s", honest, mem);
	itest_run_end(&r);
	rawfifo_close(&slow);
	rawfifo_close(&noise);
}
END_TEST

/*
 * On FIFOs the host never sees the agent go: QEMU keeps the port open. An
 * agent killed in the middle of a message leaves its first bytes in the
 * FIFO, and the next agent's HELLO would be read as the rest of it and
 * never answered. The daemon gives up a message unfinished for 5 s and
 * finds the HELLO in what came after.
 */
START_TEST(fifo_agent_dies_mid_message)
{
	struct itest_run r;
	struct memwatch w;
	uint8_t hdr[VMT_PROTO_HDR_SIZE + 10] = { 0 };
	char path[400], honest[512], mem[512];
	uint64_t before, fed, t_torn, t_back;
	struct ijson root;
	const struct ijson *g;
	int fd;

	NEED_INPUT();
	run_init(&r, "hostile-torn");
	honest_conf(&r);
	fed = fed_pages(&r.fc[0]);
	itest_run_guest(&r, 0);
	itest_run_guest(&r, HONEST);
	daemon_start(&r, NULL, 1u << 0 | 1u << HONEST, NULL);
	memwatch_start(&w, r.d.pid);
	before = honest_before(&r);
	itest_expect_streaming(&r.d, "g1", 5000);
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg[0], 10000), 0);
	itest_expect_pages_in(&r.d, "g1", fed);

	/* g1's agent dies 10 bytes into a 64 KiB META_DATA; a new one starts */
	itest_run_guest_stop(&r, 0);
	snprintf(path, sizeof(path), "%s/agent-ctl-path.out", r.chan[0]);
	fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
	put_le32(hdr, VMT_PROTO_MAGIC);
	put_le16(hdr + 4, VMT_PROTO_VERSION);
	put_le16(hdr + 6, VMT_MSG_META_DATA);
	put_le32(hdr + 8, VMT_PROTO_MAX_PAYLOAD);
	ck_assert_int_eq(write_full(fd, hdr, sizeof(hdr)), 0);
	close(fd);
	t_torn = itest_now_ms();
	itest_run_guest(&r, 0);

	ck_assert_msg(ITEST_WAIT(itest_num(&r.d, "g1", "sessions") == 2, 15000),
		      "g1's new agent not answered: sessions %llu (log: %s)",
		      (unsigned long long)itest_num(&r.d, "g1", "sessions"), r.d.log);
	t_back = itest_now_ms();
	itest_expect_streaming(&r.d, "g1", 5000);
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg[0], 10000), 0);
	ck_assert_msg(ITEST_WAIT(itest_num(&r.d, "g1", "pages_in") == 2 * fed, 10000),
		      "g1: %llu pages in, %llu sent by its two agents",
		      (unsigned long long)itest_num(&r.d, "g1", "pages_in"),
		      (unsigned long long)(2 * fed));
	ck_assert_int_eq(itest_status(&r.d, &root), 0);
	g = itest_guest(&root, "g1");
	ck_assert_uint_eq(ijson_u64(g, "ctl_rejected"), sizeof(hdr));
	ck_assert_uint_eq(ijson_u64(g, "pages_rejected"), 0);
	ck_assert_int_eq(testd_log_count(&r.d, "guest g1: control channel: a message unfinished"), 1);
	say("FIFO agent dies mid-message: %zu bytes of a 64 KiB META_DATA left in the FIFO, a new agent's "
	    "HELLO behind them: given up and answered %.1f s later (limit 5 s), sessions %llu, "
	    "ctl_rejected %llu, pages_in %llu (both agents' %llu)",
	    sizeof(hdr), (double)(t_back - t_torn) / 1000, (unsigned long long)ijson_u64(g, "sessions"),
	    (unsigned long long)ijson_u64(g, "ctl_rejected"), (unsigned long long)ijson_u64(g, "pages_in"),
	    (unsigned long long)(2 * fed));
	ijson_free(&root);
	honest_after(&r, before);
	memwatch_check(&w, &r.d, 0, mem, sizeof(mem));
	honest_check(&r, honest, sizeof(honest));
	say("FIFO agent dies mid-message: %s; %s", honest, mem);
	itest_run_end(&r);
}
END_TEST

/* ================================================================================ */
/* 4. a storm of new sessions                                                       */
/* ================================================================================ */

#define STORM 2000
#define STORM_SHAPE 20		/* HELLOs between changes of the machine's shape */

#define FLAP 3			/* connections of the socket guest */
#define FLAP_WAIT_MS 8000

struct flap_job {
	struct rawsock s;
	unsigned conns;
	uint64_t at_ms[FLAP];	/* when the host connected */
};

/* The next message of type from fd, within ms; 0 or -ETIMEDOUT. */
static int read_until(int fd, struct vmt_proto_rx *rx, unsigned type, int ms)
{
	uint64_t end = itest_now_ms() + (uint64_t)ms;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		struct vmt_msg m;
		size_t room;
		uint8_t *at;
		ssize_t n;

		while (proto_rx_next(rx, &m) > 0)
			if (m.type == type)
				return 0;
		if (itest_now_ms() >= end || poll(&p, 1, 100) < 0)
			return -ETIMEDOUT;
		if (!(p.revents & POLLIN))
			continue;
		at = proto_rx_space(rx, &room);
		n = read(fd, at, room);
		if (n <= 0)
			return -ETIMEDOUT;
		proto_rx_wrote(rx, (size_t)n);
	}
}

/*
 * A socket guest that says HELLO and hangs up at once, so that the host's
 * START finds no one; the next time it answers START with its metadata and
 * hangs up, so that the host's STREAM finds no one; then HELLO again. The
 * host must come back each time after its 2 s retry, no sooner, no later.
 */
static void *flap_main(void *arg)
{
	struct flap_job *j = arg;
	struct vmt_proto_rx *rx = malloc(sizeof(*rx));
	struct vmt_buf b = { 0 };
	uint64_t end = itest_now_ms() + (uint64_t)test_deadline_ms(FLAP_WAIT_MS);

	while (j->conns < FLAP && itest_now_ms() < end) {
		int ctl = rawsock_accept(&j->s, 100);

		if (ctl < 0)
			continue;
		j->at_ms[j->conns++] = itest_now_ms();
		hello_msg(&b, 1, PS, 0);
		if (j->conns == 2) {
			uint8_t p[16] = { 0 };

			proto_rx_init(rx);
			if (write_full(ctl, b.data, b.len) < 0 ||
			    read_until(ctl, rx, VMT_MSG_START, test_deadline_ms(2000)) < 0) {
				rawsock_hangup(&j->s);
				break;
			}
			b.len = 0;
			proto_put(&b, VMT_MSG_STARTED, p, 8);
			put_le64(p, bundle.len);
			proto_put(&b, VMT_MSG_META_BEGIN, p, 16);
			for (size_t off = 0; off < bundle.len; off += VMT_PROTO_MAX_PAYLOAD)
				proto_put(&b, VMT_MSG_META_DATA, bundle.data + off,
					  (uint32_t)VMT_MIN(VMT_PROTO_MAX_PAYLOAD, bundle.len - off));
			put_le32(p, crc32c(0, bundle.data, bundle.len));
			put_le32(p + 4, 0);
			proto_put(&b, VMT_MSG_META_END, p, 8);
		}
		write_full(ctl, b.data, b.len);
		close(ctl);
		j->s.ctl = -1;
		rawsock_hangup(&j->s);
	}
	buf_free(&b);
	free(rx);
	return NULL;
}

/*
 * A guest announces a metadata bundle (META_BEGIN, half of metadata_max) and
 * hangs up. What it announced counts under memory_max while it is being
 * received; once the session is over it must count no more, at once, not
 * at the guest's next message (which may never come): otherwise a few
 * guests that do this leave no room for the others' metadata.
 */
START_TEST(announced_metadata_released)
{
	struct itest_run r;
	struct rawsock s;
	struct vmt_proto_rx *rx = malloc(sizeof(*rx));
	struct vmt_buf b = { 0 };
	char extra[1024] = "", dir[300], st[64];
	uint8_t p[16] = { 0 };
	uint64_t announced = 8ull << 20;	/* half of TOP's metadata_max */
	int ctl;

	NEED_INPUT();
	ck_assert_ptr_nonnull(rx);
	run_init(&r, "hostile-meta");
	snprintf(dir, sizeof(dir), "%s/quitter", r.dir);
	rawsock_listen(&s, dir, 1);
	extra_yaml(extra, sizeof(extra), "quitter", dir, "socket");
	daemon_start(&r, NULL, 0, extra);

	ctl = rawsock_accept(&s, test_deadline_ms(5000));
	ck_assert_msg(ctl >= 0, "vmtraced did not connect to the guest's sockets");
	proto_rx_init(rx);
	hello_msg(&b, 1, PS, 0);
	ck_assert_int_eq(write_full(ctl, b.data, b.len), 0);
	ck_assert_int_eq(read_until(ctl, rx, VMT_MSG_START, test_deadline_ms(5000)), 0);
	b.len = 0;
	proto_put(&b, VMT_MSG_STARTED, p, 8);
	put_le64(p, announced);
	proto_put(&b, VMT_MSG_META_BEGIN, p, 16);
	ck_assert_int_eq(write_full(ctl, b.data, b.len), 0);
	/* the announcement is counted while the bundle is awaited */
	ck_assert_msg(itest_wait_num_ge(&r.d, NULL, "mem_used", announced, 10000),
		      "mem_used %llu, the announced %llu not counted",
		      (unsigned long long)itest_num(&r.d, NULL, "mem_used"),
		      (unsigned long long)announced);
	rawsock_hangup(&s);
	ck_assert_msg(itest_wait_state(&r.d, "quitter", "offline", 10000, st, sizeof(st)),
		      "quitter is '%s', not offline", st);
	/* gone: only its rings are left */
	ck_assert_uint_eq(itest_num(&r.d, NULL, "mem_used"), itest_num(&r.d, "quitter", "mem_used"));
	rawsock_close(&s);
	buf_free(&b);
	free(rx);
	itest_run_end(&r);
}
END_TEST

/* Control-socket STATUS round trips, in process (no vmtracectl to start),
 * until told to stop: the daemon's own latency while a guest storms. */
struct poller {
	const char *sock;
	volatile int stop;
	uint64_t lat_us[4096];
	unsigned n, failed;
};

static void *poller_main(void *arg)
{
	struct poller *p = arg;
	struct ictl_msg *m = malloc(sizeof(*m));

	while (!p->stop && p->n < 4096) {
		uint64_t t0 = now_monotonic_ns();
		unsigned count = 0;
		int fd = ictl_connect(p->sock), r = -1;

		if (fd >= 0) {
			ictl_request(fd, VMT_CTL_STATUS, 1, NULL);
			r = ictl_collect(fd, m, VMT_CTL_GUEST, &count, 10000);
			close(fd);
		}
		if (r != VMT_CTL_END)
			p->failed++;
		else
			p->lat_us[p->n++] = (now_monotonic_ns() - t0) / 1000;
		usleep(5000);
	}
	free(m);
	return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * A HELLO storm: an agent that starts, says HELLO and dies, 2000 times, the
 * machine's shape flipping every 20th time. The guest's sessions are its
 * own budget (record.sessions_per_minute, 6 here): past them its HELLOs
 * wait, counted, with one log line; the rings are allocated only for the
 * sessions it got. Meanwhile the control socket answers at once, an honest
 * guest whose agent restarts mid-storm streams again at once, and another
 * that streams never stops.
 */
START_TEST(reconnect_storm)
{
	struct itest_run r;
	struct memwatch w;
	struct rawfifo storm;
	struct flap_job fj = { 0 };
	struct poller pl = { 0 };
	pthread_t fth, pth;
	struct vmt_buf b = { 0 };
	char extra[1024] = "", path[400], mem[512], honest[512], flapdir[300];
	uint64_t before, t0, flap_ms, storm_ms, want_mem, peak, back_ms = UINT64_MAX, p99;
	unsigned shapes = 1;
	int lines, rings;
	struct ijson root;
	const struct ijson *g;

	NEED_INPUT();
	run_init(&r, "hostile-storm");
	rawfifo_make(&storm, r.dir, "storm", 2);
	snprintf(flapdir, sizeof(flapdir), "%s/flap", r.dir);
	rawsock_listen(&fj.s, flapdir, 1);
	extra_yaml(extra, sizeof(extra), "storm", storm.dir, "fifo");
	extra_yaml(extra, sizeof(extra), "flap", flapdir, "socket");
	honest_conf(&r);
	itest_run_guest(&r, HONEST);
	/* g3: an honest agent that will restart in the middle of the storm
	 * (one CPU, small rings: the memory checks are about the others) */
	r.fc[2].ncpus = 1;
	r.fc[2].npages[0] = VMT_MIN(in.npages[0], 16);
	itest_run_guest(&r, 2);
	t0 = itest_now_ms();
	ck_assert_int_eq(pthread_create(&fth, NULL, flap_main, &fj), 0);
	extra_yaml(extra, sizeof(extra), "g3", r.chan[2], "fifo");
	strncat(extra, "    record:\n      ring_size: 1MiB\n", sizeof(extra) - strlen(extra) - 1);
	daemon_start(&r, "triggers:\n  coalesce: 0ms\n", 1u << HONEST, extra);
	memwatch_start(&w, r.d.pid);
	before = honest_before(&r);
	itest_expect_streaming(&r.d, "g3", 5000);
	itest_expect_pages_in(&r.d, "g3", fed_pages(&r.fc[2]));
	ck_assert(itest_wait_state(&r.d, "storm", "connecting", 5000, NULL, 0));

	pl.sock = r.d.sock;
	ck_assert_int_eq(pthread_create(&pth, NULL, poller_main, &pl), 0);
	snprintf(path, sizeof(path), "%s/agent-ctl-path.out", storm.dir);
	storm_ms = itest_now_ms();
	for (unsigned i = 0; i < STORM; i++) {
		unsigned shape = (i / STORM_SHAPE) % 2;
		int fd = open(path, O_WRONLY | O_CLOEXEC);

		ck_assert_int_ge(fd, 0);
		if (i && i % STORM_SHAPE == 0)
			shapes++;
		hello_msg(&b, shape ? 1 : 2, shape ? 2 * PS : PS, 0);
		ck_assert_int_eq(write_full(fd, b.data, b.len), 0);
		close(fd);
		drain_fd(storm.ctl_in);
		if (i == STORM / 2) {
			/* g3's agent restarts: a new session at once, storm or not */
			uint64_t t1;

			itest_run_guest_stop(&r, 2);
			t1 = itest_now_ms();
			itest_run_guest(&r, 2);
			ck_assert(itest_wait_num_ge(&r.d, "g3", "sessions", 2, 10000));
			itest_expect_streaming(&r.d, "g3", 5000);
			back_ms = itest_now_ms() - t1;
		}
	}
	buf_free(&b);
	/* every HELLO either started a session or waits, counted */
	ck_assert_msg(ITEST_WAIT(itest_num(&r.d, "storm", "sessions") +
					 itest_num(&r.d, "storm", "hellos_deferred") == STORM,
				 10000),
		      "storm: %llu sessions + %llu HELLOs held back for %u HELLOs (log: %s)",
		      (unsigned long long)itest_num(&r.d, "storm", "sessions"),
		      (unsigned long long)itest_num(&r.d, "storm", "hellos_deferred"), STORM, r.d.log);
	storm_ms = itest_now_ms() - storm_ms;
	pl.stop = 1;
	pthread_join(pth, NULL);
	honest_after(&r, before);
	pthread_join(fth, NULL);
	flap_ms = itest_now_ms() - t0;
	drain_fd(storm.ctl_in);

	ck_assert_int_eq(itest_status(&r.d, &root), 0);
	g = itest_guest(&root, "storm");
	/* its sessions: the burst of 6, and one per 10 s of storm after it */
	ck_assert_uint_ge(ijson_u64(g, "sessions"), 1);
	ck_assert_msg(ijson_u64(g, "sessions") <= 6 + storm_ms / 10000 + 1,
		      "storm: %llu sessions in %llu ms", (unsigned long long)ijson_u64(g, "sessions"),
		      (unsigned long long)storm_ms);
	ck_assert_uint_ge(ijson_u64(g, "hellos_deferred"), STORM - 6 - storm_ms / 10000 - 1);
	ck_assert_uint_eq(ijson_u64(g, "ctl_rejected"), 0);
	rings = testd_log_count(&r.d, "guest storm: rings:");
	ck_assert_msg(rings >= 1 && (uint64_t)rings <= ijson_u64(g, "sessions"),
		      "storm: rings allocated %d times for %llu sessions", rings,
		      (unsigned long long)ijson_u64(g, "sessions"));
	lines = testd_log_count(&r.d, "guest storm:");
	ck_assert_msg(lines <= 40, "%d log lines about storm's %u HELLOs", lines, STORM);
	/* the daemon answered throughout */
	ck_assert_uint_ge(pl.n, 1);
	ck_assert_uint_eq(pl.failed, 0);
	qsort(pl.lat_us, pl.n, sizeof(pl.lat_us[0]), cmp_u64);
	p99 = pl.lat_us[(pl.n - 1) * 99 / 100];
	ck_assert_msg(p99 <= (uint64_t)test_deadline_ms(100) * 1000,
		      "status p99 %llu us during the storm (%u answers)", (unsigned long long)p99, pl.n);
	ck_assert_msg(back_ms <= (uint64_t)test_deadline_ms(2000),
		      "g3's restarted agent streamed %llu ms after its HELLO", (unsigned long long)back_ms);
	want_mem = ijson_u64(g, "mem_used");
	say("reconnect storm: 'storm' started %u agents that said HELLO and died, in %u machine shapes, "
	    "in %llu ms: sessions %llu, HELLOs held back %llu, rings allocated %d times, %d log lines; "
	    "status answered %u times, p50 %llu us, p99 %llu us, max %llu us; g3's agent restarted "
	    "mid-storm streamed after %llu ms",
	    STORM, shapes, (unsigned long long)storm_ms, (unsigned long long)ijson_u64(g, "sessions"),
	    (unsigned long long)ijson_u64(g, "hellos_deferred"), rings, lines, pl.n,
	    (unsigned long long)pl.lat_us[pl.n / 2], (unsigned long long)p99,
	    (unsigned long long)pl.lat_us[pl.n - 1], (unsigned long long)back_ms);
	g = itest_guest(&root, "flap");
	/* the daemon comes back to a socket guest every 2 s, however it hung up */
	ck_assert_msg(fj.conns == FLAP, "flap: %u connections in %llu ms (log: %s)", fj.conns,
		      (unsigned long long)flap_ms, r.d.log);
	for (int i = 1; i < FLAP; i++) {
		uint64_t gap = fj.at_ms[i] - fj.at_ms[i - 1];
		ck_assert_msg(gap >= 1900 && gap <= 2000 + (uint64_t)test_deadline_ms(1500),
			      "flap: connection %d came %llu ms after the one before", i + 1,
			      (unsigned long long)gap);
	}
	/* the second is a session for sure; the others, if the HELLO was read
	 * before the hang-up was seen */
	ck_assert_uint_ge(ijson_u64(g, "sessions"), 1);
	ck_assert_uint_le(ijson_u64(g, "sessions"), FLAP);
	ck_assert_uint_eq(ijson_u64(g, "aux_version"), 1);	/* the metadata it sent */
	say("reconnect storm: 'flap' hung up after its HELLO, then after its metadata, then after its "
	    "HELLO: the daemon connected %u times, %.1f s and %.1f s apart, sessions %llu, state %s",
	    fj.conns, (double)(fj.at_ms[1] - fj.at_ms[0]) / 1000,
	    (double)(fj.at_ms[2] - fj.at_ms[1]) / 1000, (unsigned long long)ijson_u64(g, "sessions"),
	    ijson_str(g, "state"));
	ijson_free(&root);

	/* the rings took most while storm had its first shape: two CPUs of 4 KiB pages */
	peak = itest_num(&r.d, NULL, "mem_used") - want_mem + 2 * ring_mem_size((8u << 20) / PS, PS);
	memwatch_check(&w, &r.d, peak, mem, sizeof(mem));
	honest_check(&r, honest, sizeof(honest));
	say("reconnect storm: %s; %s", honest, mem);
	itest_run_end(&r);
	rawfifo_close(&storm);
	rawsock_close(&fj.s);
}
END_TEST

/* ================================================================================ */
/* 5. a flood of TRIGGERs                                                           */
/* ================================================================================ */

#define FLOOD 3000
#define FLOOD_GAP_MS 1		/* longer than a dump: most find none open to join */

static int guest_samples(struct itest_run *r, const char *guest, char ***list)
{
	char dir[400];

	snprintf(dir, sizeof(dir), "%s/%s", r->d.state, guest);
	return itest_samples(dir, list);
}

START_TEST(trigger_flood)
{
	struct itest_run r;
	struct memwatch w;
	char **list, mem[512], honest[512];
	uint64_t before, t0, flood_ms, taken, suppressed, g1_supp, dumps, served = 0;
	int n;

	NEED_INPUT();
	run_init(&r, "hostile-flood");
	/* g1 sends a few pages, then asks for thousands of dumps of itself */
	for (unsigned c = 0; c < in.ncpus; c++)
		r.fc[0].npages[c] = VMT_MIN(in.npages[c], 16);
	r.fc[0].triggers = FLOOD;
	r.fc[0].trigger_gap_ms = FLOOD_GAP_MS;
	honest_conf(&r);
	itest_run_guest(&r, 0);
	itest_run_guest(&r, HONEST);
	t0 = itest_now_ms();
	daemon_start(&r, "triggers:\n  coalesce: 100ms\n  cooldown: 2s\n  max_per_minute: 6\n", 3, NULL);
	memwatch_start(&w, r.d.pid);
	before = honest_before(&r);
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg[0], 30000), 0);
	itest_expect_triggers_counted(&r.d, FLOOD, 15000);
	flood_ms = itest_now_ms() - t0;
	honest_after(&r, before);
	/* the dumps it got are written */
	ck_assert(ITEST_WAIT((n = guest_samples(&r, "g1", &list), itest_free_list(list, n),
			      n == (int)itest_num(&r.d, NULL, "dumps")), 10000));
	taken = itest_num(&r.d, NULL, "triggers");
	suppressed = itest_num(&r.d, NULL, "triggers_suppressed");
	g1_supp = itest_num(&r.d, "g1", "triggers_suppressed");
	dumps = itest_num(&r.d, NULL, "dumps");
	n = guest_samples(&r, "g1", &list);
	ck_assert_uint_eq(taken + suppressed, FLOOD);
	ck_assert_uint_ge(suppressed, 1);
	ck_assert_uint_ge(g1_supp, 1);
	ck_assert_uint_le(g1_supp, suppressed);
	/* a 2 s cooldown and 6 a minute: a handful */
	ck_assert_msg(n >= 1 && (uint64_t)n <= VMT_MIN(6, flood_ms / 2000 + 1),
		      "%d samples of g1 for %u triggers in %llu ms", n, FLOOD, (unsigned long long)flood_ms);
	ck_assert_uint_eq(dumps, (uint64_t)n);
	for (int i = 0; i < n; i++) {
		struct vmt_sample *s = itest_read_sample(list[i]);
		served += s->ntriggers + s->triggers_omitted;
		sample_free(s);
	}
	itest_free_list(list, n);
	ck_assert_uint_eq(served, taken);
	ck_assert_uint_eq(itest_num(&r.d, "g2", "triggers_suppressed"), 0);
	n = guest_samples(&r, "g2", &list);
	itest_free_list(list, n);
	ck_assert_int_eq(n, 0);
	say("trigger flood: g1 sent %u TRIGGERs in %.1f s (cooldown 2 s, max_per_minute 6): %llu "
	    "samples of g1, %llu triggers taken into them, %llu suppressed (triggers_suppressed of "
	    "g1, by its cooldown: %llu), g2 triggers_suppressed 0",
	    FLOOD, (double)flood_ms / 1000, (unsigned long long)dumps, (unsigned long long)taken,
	    (unsigned long long)suppressed, (unsigned long long)g1_supp);

	memwatch_check(&w, &r.d, 0, mem, sizeof(mem));
	/* an operator's dump of g2 always happens, flood or not */
	honest_check(&r, honest, sizeof(honest));
	n = guest_samples(&r, "g2", &list);
	itest_free_list(list, n);
	ck_assert_int_eq(n, 1);
	say("trigger flood: %s; %s", honest, mem);
	itest_run_end(&r);
}
END_TEST

/* ================================================================================ */
/* 7. symlinks where ports should be                                                */
/* ================================================================================ */

#define BAIT "a file root must not write into\n"

/* A file's whole content, or "" (the caller frees). */
static char *slurp_text(const char *path)
{
	FILE *f = fopen(path, "r");
	char *t = calloc(1, 4096);

	if (f && t)
		t[fread(t, 1, 4095, f)] = 0;
	if (f)
		fclose(f);
	return t;
}

/*
 * Whoever can make entries in a channel folder (QEMU's user, in libvirt's)
 * puts symlinks where ports should be: 'in' has agent-ctl-path.in pointing
 * at a file outside, 'out' agent-ctl-path.out at a FIFO outside, 'sock' its
 * agent-ctl-path at a listening socket outside, 'file' a regular file for a
 * port. None is opened, nothing is written to the targets, each is counted
 * and named in the log; the honest guest beside them streams.
 */
START_TEST(symlinked_ports)
{
	struct itest_run r;
	struct rawfifo fin, fout, ffile;
	char extra[2048] = "", bait[400], outside[400], p[400], sockdir[400], honest[512], mem[512];
	char *after;
	struct memwatch w;
	int lsock, fd;
	uint64_t before;

	NEED_INPUT();
	run_init(&r, "hostile-symlink");
	snprintf(bait, sizeof(bait), "%s/bait", r.dir);
	ck_assert_int_eq(itest_write_file(bait, BAIT), 0);
	snprintf(outside, sizeof(outside), "%s/outside.fifo", r.dir);
	ck_assert_int_eq(mkfifo(outside, 0600), 0);

	rawfifo_make(&fin, r.dir, "in", 1);
	snprintf(p, sizeof(p), "%s/agent-ctl-path.in", fin.dir);
	ck_assert_int_eq(unlink(p), 0);
	ck_assert_int_eq(symlink(bait, p), 0);

	rawfifo_make(&fout, r.dir, "out", 1);
	snprintf(p, sizeof(p), "%s/agent-ctl-path.out", fout.dir);
	ck_assert_int_eq(unlink(p), 0);
	ck_assert_int_eq(symlink(outside, p), 0);

	rawfifo_make(&ffile, r.dir, "file", 1);
	snprintf(p, sizeof(p), "%s/trace-path-cpu0.in", ffile.dir);
	ck_assert_int_eq(unlink(p), 0);
	ck_assert_int_eq(itest_write_file(p, BAIT), 0);

	snprintf(sockdir, sizeof(sockdir), "%s/sock", r.dir);
	ck_assert_int_eq(mkdir(sockdir, 0700), 0);
	lsock = listen_at(r.dir, "outside.sock");
	ck_assert_int_ge(lsock, 0);
	fcntl(lsock, F_SETFL, O_NONBLOCK);
	snprintf(p, sizeof(p), "%s/outside.sock", r.dir);
	{
		char link[500];
		snprintf(link, sizeof(link), "%s/agent-ctl-path", sockdir);
		ck_assert_int_eq(symlink(p, link), 0);
		snprintf(link, sizeof(link), "%s/trace-path-cpu0", sockdir);
		ck_assert_int_eq(symlink(p, link), 0);
	}

	extra_yaml(extra, sizeof(extra), "in", fin.dir, "fifo");
	extra_yaml(extra, sizeof(extra), "out", fout.dir, "fifo");
	extra_yaml(extra, sizeof(extra), "file", ffile.dir, "fifo");
	extra_yaml(extra, sizeof(extra), "sock", sockdir, "socket");
	honest_conf(&r);
	itest_run_guest(&r, HONEST);
	daemon_start(&r, NULL, 1u << HONEST, extra);
	memwatch_start(&w, r.d.pid);
	before = honest_before(&r);

	/* refused at the first try and at the retries after it */
	for (int i = 0; i < 4; i++) {
		const char *name = (const char *[]){ "in", "out", "file", "sock" }[i];

		ck_assert_msg(itest_wait_num_ge(&r.d, name, "paths_refused", 2, 15000),
			      "%s: paths_refused %llu (log: %s)", name,
			      (unsigned long long)itest_num(&r.d, name, "paths_refused"), r.d.log);
		ck_assert_msg(itest_state_is(&r.d, name, "connecting") ||
				      itest_state_is(&r.d, name, "offline"),
			      "%s is not waiting for its channels", name);
		snprintf(p, sizeof(p), "guest %s: channel folder ", name);
		ck_assert_msg(testd_log_count(&r.d, p) >= 1, "no log line '%s' (log: %s)", p, r.d.log);
	}
	honest_after(&r, before);

	/* the targets: untouched, unopened, never connected to */
	after = slurp_text(bait);
	ck_assert_str_eq(after, BAIT);
	free(after);
	snprintf(p, sizeof(p), "%s/trace-path-cpu0.in", ffile.dir);
	after = slurp_text(p);
	ck_assert_str_eq(after, BAIT);
	free(after);
	fd = open(outside, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	ck_assert_msg(fd < 0 && errno == ENXIO, "the FIFO outside the folder has a reader");
	fd = accept(lsock, NULL, NULL);
	ck_assert_msg(fd < 0 && errno == EAGAIN, "the daemon connected to the socket outside");
	close(lsock);
	say("symlinks: .in -> a file outside, .out -> a FIFO outside, a port that is a regular "
	    "file, a socket -> a socket outside: refused (paths_refused %llu, %llu, %llu, %llu), "
	    "the file unchanged, the FIFO without a reader, the socket never connected to",
	    (unsigned long long)itest_num(&r.d, "in", "paths_refused"),
	    (unsigned long long)itest_num(&r.d, "out", "paths_refused"),
	    (unsigned long long)itest_num(&r.d, "file", "paths_refused"),
	    (unsigned long long)itest_num(&r.d, "sock", "paths_refused"));

	memwatch_check(&w, &r.d, 0, mem, sizeof(mem));
	honest_check(&r, honest, sizeof(honest));
	say("symlinks: %s; %s", honest, mem);
	itest_run_end(&r);
	rawfifo_close(&fin);
	rawfifo_close(&fout);
	rawfifo_close(&ffile);
}
END_TEST

/* An idle daemon's RSS, what the cases' limits start from. */
static void measure_idle_rss(void)
{
	struct testd d;
	char *dir = test_mkdtemp("hostile-idle"), maps[64];

	if (!dir || testd_start(&d, dir, "guests: []\n") < 0)
		return;
	usleep(200000);
	idle_rss_kib = proc_kib(d.pid, "VmRSS");
	snprintf(maps, sizeof(maps), "grep -q libasan /proc/%d/maps", (int)d.pid);
	if (itest_sh("%s", maps) == 0)
		san_kib = 16u << 10;
	testd_stop(&d);
	test_rmtree(dir);
	free(dir);
}

int main(void)
{
	Suite *s = suite_create("hostile");
	TCase *t = tcase_create("hostile");
	int rc;

	itest_input_prepare(&in);
	if (in.ncpus) {
		struct vmt_meta_entry e;
		size_t pos = 0;

		while (meta_next(in.bundle.data, in.bundle.len, &pos, &e) > 0) {
			char name[VMT_META_NAME_MAX + 1];

			snprintf(name, sizeof(name), "%.*s", (int)e.name_len, e.name);
			if (strcmp(name, "kallsyms"))
				meta_add(&bundle, name, e.data, e.data_len);
		}
	}
	measure_idle_rss();
	printf("input: %s, %u CPUs", in.source, in.ncpus);
	for (unsigned c = 0; c < in.ncpus; c++)
		printf(", cpu%u %zu pages", c, in.npages[c]);
	printf("; metadata without kallsyms %zu KiB; an idle vmtraced takes %llu KiB%s\n",
	       bundle.len >> 10, (unsigned long long)idle_rss_kib,
	       san_kib ? " (AddressSanitizer: 16 MiB more margin)" : "");
	fflush(stdout);
	TEST_ADD(t, garbage_pages);
	TEST_ADD(t, metadata_over_bound);
	TEST_ADD(t, control_channel);
	TEST_ADD(t, fifo_agent_dies_mid_message);
	TEST_ADD(t, reconnect_storm);
	TEST_ADD(t, announced_metadata_released);
	TEST_ADD(t, trigger_flood);
	TEST_ADD(t, symlinked_ports);
	tcase_set_timeout(t, 60);
	suite_add_tcase(s, t);
	rc = test_run_suite(s);
	buf_free(&bundle);
	itest_input_free(&in);
	return rc;
}
