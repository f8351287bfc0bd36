/* SPDX-License-Identifier: MIT */
/*
 * mkseeds: writes the seed corpora of the fuzz targets from real data, with
 * the project's own encoders: `mkseeds CORPUS OUT` reads the guest capture
 * CORPUS (/work/shared/corpus/guest-6.1: meta/ and pages/cpuN.raw) and
 * writes OUT/<target>/<seed>. The config seeds are plain copies of YAML
 * files and are made by fuzz.mk, not here. Deterministic: the same capture
 * gives the same files.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "aux.h"
#include "corpus.h"
#include "clocksync.h"
#include "ctlproto.h"
#include "frame.h"
#include "meta.h"
#include "page.h"
#include "proto.h"
#include "sample.h"
#include "util.h"
#include "vfile.h"

#define PAGE 4096

static const char *out_dir;

static void die(const char *what, int r)
{
	fprintf(stderr, "mkseeds: %s: %s\n", what, strerror(r < 0 ? -r : r));
	exit(1);
}

static void put(const char *target, const char *name, const void *data, size_t len)
{
	char path[4096];
	int r;

	snprintf(path, sizeof(path), "%s/%s", out_dir, target);
	if (mkdir(path, 0755) < 0 && errno != EEXIST)
		die(path, -errno);
	snprintf(path, sizeof(path), "%s/%s/%s", out_dir, target, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		die(path, -errno);
	r = write_full(fd, data, len);
	if (r < 0)
		die(path, r);
	close(fd);
}

/* The bytes a writer left in a memfd. */
static void put_fd(const char *target, const char *name, int fd)
{
	struct stat st;
	void *m;

	if (fstat(fd, &st) < 0)
		die(name, -errno);
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (m == MAP_FAILED)
		die(name, -errno);
	put(target, name, m, (size_t)st.st_size);
	munmap(m, (size_t)st.st_size);
}

static int fresh_memfd(void)
{
	int fd = memfd_create("mkseeds", MFD_CLOEXEC);

	if (fd < 0)
		die("memfd_create", -errno);
	return fd;
}

/* ---- the capture ----------------------------------------------------- */

static struct vmt_buf full_meta;	/* every file of meta/ */
static struct vmt_buf small_meta;	/* the few a seed can afford */
static uint8_t *pages[2];
static size_t npages[2];
static const char *header_page;
static uint32_t header_page_len;

static void small_bundle(void)
{
	static const char *const keep[] = {
		"events/header_page", "events/header_event", "trace_clock",
		"events/sched/sched_switch/format", "events/sched/sched_wakeup/format",
		"events/irq/irq_handler_entry/format", "events/timer/hrtimer_start/format",
	};
	struct vmt_meta_entry e;

	for (size_t i = 0; i < ARRAY_SIZE(keep); i++) {
		int r = meta_find(full_meta.data, full_meta.len, keep[i], &e);
		if (r < 0)
			die(keep[i], r);
		r = meta_add(&small_meta, keep[i], e.data, e.data_len);
		if (r < 0)
			die("meta_add", r);
	}
	if (meta_find(full_meta.data, full_meta.len, "events/header_page", &e) < 0)
		die("events/header_page", -ENOENT);
	header_page = (const char *)e.data;
	header_page_len = e.data_len;
}

static void load(const char *corpus)
{
	char path[4096];
	int r;

	snprintf(path, sizeof(path), "%s/meta", corpus);
	r = corpus_load_meta(path, &full_meta);
	if (r < 0)
		die(path, r);
	for (int c = 0; c < 2; c++) {
		snprintf(path, sizeof(path), "%s/pages/cpu%d.raw", corpus, c);
		r = corpus_load_pages(path, PAGE, &pages[c], &npages[c]);
		if (r < 0)
			die(path, r);
	}
	small_bundle();
}

/* ---- proto ----------------------------------------------------------- */

static void proto_seeds(void)
{
	struct vmt_hello h = { .version = VMT_PROTO_VERSION, .ncpus = 2, .page_size = PAGE,
			       .mono_ns = 123456789012ull, .release = "6.1.0-56-cloud-amd64",
			       .clock = "local", .boot_id = "2f0c5e64-3c1a-4b7e-9d51-0a6e8c1f2b3d",
			       .agent = "vmtrace-agent 0.1.0", .echo = 0x1234 };
	static const char events[] = "sched:*,irq:*,timer:*";
	struct vmt_start s = { .buffer_kb = 4096, .clock = "local",
			       .events_len = sizeof(events) - 1, .events = events };
	struct vmt_cpu_stats st[2] = {
		{ .bytes_sent = 546 * PAGE, .entries = 58959, .overrun = 0, .bytes = 3000000,
		  .oldest_ts = 1000, .now_ts = 99999999, .read = 58959 },
		{ .bytes_sent = 761 * PAGE, .entries = 80552, .overrun = 12, .bytes = 4000000,
		  .oldest_ts = 2000, .now_ts = 99999999, .dropped = 3, .read = 80552 },
	};
	struct vmt_buf all = { 0 }, one = { 0 };
	uint8_t p[64];
	size_t meta_len = VMT_MIN(small_meta.len, (size_t)3000);

	/* chunk sizes in front of each stream: whole reads, odd small reads */
	static const uint8_t whole[4] = { 0, 0, 0, 0 }, odd[4] = { 1, 7, 16, 255 };

#define ONE(name, stmt)                                         \
	do {                                                    \
		one.len = 0;                                    \
		buf_append(&one, odd, 4);                       \
		if ((stmt) < 0)                                 \
			die(name, -EINVAL);                     \
		put("proto", name, one.data, one.len);          \
	} while (0)

	ONE("hello", proto_put_hello(&one, &h));
	ONE("start", proto_put_start(&one, &s));
	ONE("flushed", proto_put_flushed(&one, 7, 2, st));
	put_le32(p, VMT_PROTO_VERSION);
	put_le32(p + 4, 0x1234);
	ONE("host-hello", proto_put(&one, VMT_MSG_HOST_HELLO, p, 8));
	put_le32(p, 0);
	put_le32(p + 4, 2);
	memcpy(p + 8, "ok", 2);
	ONE("started", proto_put(&one, VMT_MSG_STARTED, p, 10));
	put_le32(p, (uint32_t)-ENOENT);
	memcpy(p + 4, "no such event: foo:bar", 22);
	ONE("error", proto_put(&one, VMT_MSG_ERROR, p, 26));
	ONE("trigger", proto_put(&one, VMT_MSG_TRIGGER, "oom in guest", 12));
	put_le64(p, 42);
	ONE("flush", proto_put(&one, VMT_MSG_FLUSH, p, 8));
	ONE("sync", proto_put_sync(&one, &(struct vmt_sync){ .id = 5, .flags = VMT_SYNC_F_MARKER }));
	ONE("synced", proto_put_synced(&one, &(struct vmt_synced){ .id = 5, .t2 = 5447468902ull,
								    .t3 = 5447470000ull }));
	ONE("prev-begin", proto_put_prev_begin(&one, &(struct vmt_prev_begin){
						   .ncpus = 2, .flags = VMT_PREV_FLAGS, .pages = 35,
						   .cpus_lost = 2, .top_gap_kib = 14208 }));

	/* a whole session, as the host sees both directions */
	buf_append(&all, whole, 4);
	put_le32(p, VMT_PROTO_VERSION);
	put_le32(p + 4, 0x1234);
	proto_put(&all, VMT_MSG_HOST_HELLO, p, 8);
	proto_put_hello(&all, &h);
	proto_put_start(&all, &s);
	put_le32(p, 0);
	put_le32(p + 4, 2);
	proto_put(&all, VMT_MSG_STARTED, p, 8);
	put_le64(p, meta_len);
	put_le32(p + 8, 7);
	put_le32(p + 12, 0);
	proto_put(&all, VMT_MSG_META_BEGIN, p, 16);
	proto_put(&all, VMT_MSG_META_DATA, small_meta.data, (uint32_t)meta_len);
	put_le32(p, crc32c(0, small_meta.data, meta_len));
	put_le32(p + 4, 0);
	proto_put(&all, VMT_MSG_META_END, p, 8);
	proto_put(&all, VMT_MSG_STREAM, NULL, 0);
	proto_put_sync(&all, &(struct vmt_sync){ .id = 1 });
	proto_put_synced(&all, &(struct vmt_synced){ .id = 1, .t2 = 5447468902ull,
						     .t3 = 5447469100ull });
	put_le64(p, 1);
	proto_put(&all, VMT_MSG_FLUSH, p, 8);
	proto_put_flushed(&all, 1, 2, st);
	proto_put(&all, VMT_MSG_STOP, NULL, 0);
	proto_put(&all, VMT_MSG_STOPPED, NULL, 0);
	put("proto", "session", all.data, all.len);

	/* the same after garbage, a bad version and a truncated header: resync */
	one.len = 0;
	buf_append(&one, odd, 4);
	buf_append(&one, "\0\1VMT", 5);
	put_le32(p, VMT_PROTO_MAGIC);
	put_le16(p + 4, 2);
	put_le16(p + 6, VMT_MSG_STOP);
	put_le32(p + 8, 0);
	put_le32(p + 12, 0);
	buf_append(&one, p, 16);
	buf_append(&one, p, 7);
	buf_append(&one, all.data + 4, all.len - 4);
	put("proto", "resync", one.data, one.len);
	buf_free(&all);
	buf_free(&one);
#undef ONE
}

/* ---- page ------------------------------------------------------------ */

static void page_seed(const char *name, uint8_t flags, const char *text, size_t tl,
		      const uint8_t *page, size_t len, const uint64_t *t_raw)
{
	struct vmt_buf b = { 0 };

	buf_append(&b, &flags, 1);
	buf_put_le16(&b, (uint16_t)tl);
	buf_append(&b, text, tl);
	if (t_raw)
		buf_put_le64(&b, *t_raw);
	buf_append(&b, page, len);
	put("page", name, b.data, b.len);
	buf_free(&b);
}

struct last_fit {
	uint32_t limit, end;
};

static int fit_cb(uint64_t ts, uint32_t offset, uint32_t size, void *data)
{
	struct last_fit *f = data;

	(void)ts;
	if (offset + size > f->limit)
		return 1;
	f->end = offset + size;
	return 0;
}

static void page_seeds(void)
{
	struct vmt_page_layout l;
	struct vmt_page_info info;
	uint8_t small[256];
	const uint8_t *pg;
	struct last_fit f = { .limit = sizeof(small) };
	char text32[512];
	uint64_t t;
	int n;

	page_layout_default(&l, PAGE);
	page_seed("first", 0, header_page, header_page_len, pages[0], PAGE, NULL);
	page_seed("cpu1-mid", 2 << 1, header_page, header_page_len,
		  pages[1] + npages[1] / 2 * PAGE, PAGE, NULL);
	/* the last page of a CPU: a partial page flushed at the end */
	page_seed("last-partial", 1 << 1, header_page, header_page_len,
		  pages[0] + (npages[0] - 1) * PAGE, PAGE, NULL);
	pg = pages[0] + 100 * PAGE;
	if (page_scan(&l, pg, &info) == 0) {
		t = info.first_ts + (info.last_ts - info.first_ts) / 2;
		page_seed("cut-mid", 1, header_page, header_page_len, pg, PAGE, &t);
	}
	/* a page that fits 256 bytes: the first events, commit cut to them */
	memcpy(small, pages[1], sizeof(small));
	page_walk(&l, pages[1], fit_cb, &f);
	put_le64(small + 8, f.end - l.data_offset);
	page_seed("small", 3 << 1, header_page, header_page_len, small, sizeof(small), NULL);
	/* a 32-bit guest's header_page: commit of 4 bytes, data at 12 */
	n = snprintf(text32, sizeof(text32),
		     "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n"
		     "\tfield: local_t commit;\toffset:8;\tsize:4;\tsigned:1;\n"
		     "\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n"
		     "\tfield: char data;\toffset:12;\tsize:4084;\tsigned:1;\n");
	memcpy(small, pages[0], 8);
	put_le32(small + 8, (uint32_t)(f.end - l.data_offset));
	memcpy(small + 12, pages[1] + 16, sizeof(small) - 12);
	page_seed("layout32", 0, text32, (size_t)n, small, sizeof(small), NULL);
}

/* ---- meta ------------------------------------------------------------ */

static void meta_seeds(void)
{
	struct vmt_buf b = { 0 };
	struct vmt_meta_entry e;

	put("meta", "small", small_meta.data, small_meta.len);
	/* header_page alone, the least a bundle may be */
	meta_find(small_meta.data, small_meta.len, "events/header_page", &e);
	meta_add(&b, "events/header_page", e.data, e.data_len);
	put("meta", "header-only", b.data, b.len);
	/* saved_cmdlines, printk_formats: long text entries, cut */
	if (meta_find(full_meta.data, full_meta.len, "saved_cmdlines", &e) == 0)
		meta_add(&b, "saved_cmdlines", e.data, VMT_MIN(e.data_len, 2000u));
	if (meta_find(full_meta.data, full_meta.len, "kallsyms", &e) == 0)
		meta_add(&b, "kallsyms", e.data, VMT_MIN(e.data_len, 2000u));
	put("meta", "texts", b.data, b.len);
	buf_free(&b);
}

/* ---- ctlproto -------------------------------------------------------- */

static struct vmt_buf cb;

static void ctl_done(const char *name)
{
	if (ctl_msg_end(&cb) < 0)
		die(name, -EMSGSIZE);
	put("ctlproto", name, cb.data, cb.len);
}

static void ctl_seeds(void)
{
	ctl_msg_begin(&cb, VMT_CTL_STATUS, 1);
	ctl_done("status");
	ctl_msg_begin(&cb, VMT_CTL_RELOAD, 2);
	ctl_done("reload");
	ctl_msg_begin(&cb, VMT_CTL_SAMPLES, 3);
	ctl_put_GUEST(&cb, "web1");
	ctl_done("samples");
	ctl_msg_begin(&cb, VMT_CTL_DUMP, 4);
	ctl_put_GUEST(&cb, "web1");
	ctl_put_GUEST(&cb, "db-2");
	ctl_put_REASON(&cb, "latency spike on checkout");
	ctl_put_WINDOW_NS(&cb, 5000000000ull);
	ctl_put_POST_NS(&cb, 1000000000ull);
	ctl_done("dump");

	ctl_msg_begin(&cb, VMT_CTL_END, 4);
	ctl_done("end");
	ctl_msg_begin(&cb, VMT_CTL_ERROR, 4);
	ctl_put_ERRNO(&cb, EBUSY);
	ctl_put_MESSAGE(&cb, "suppressed by the cooldown or the rate limit");
	ctl_done("error");
	ctl_msg_begin(&cb, VMT_CTL_DAEMON, 1);
	ctl_put_VERSION(&cb, "0.1.0");
	ctl_put_UPTIME_NS(&cb, 3600000000000ull);
	ctl_put_MEM_USED(&cb, 64 << 20);
	ctl_put_MEM_CAP(&cb, 1ull << 30);
	ctl_put_DUMPS(&cb, 3);
	ctl_put_DUMP_ERRORS(&cb, 0);
	ctl_put_CTL_REJECTED(&cb, 1);
	ctl_put_REFUSED(&cb, 0);
	ctl_put_GUESTS_REFUSED(&cb, 0);
	ctl_done("daemon");
	ctl_msg_begin(&cb, VMT_CTL_GUEST, 1);
	ctl_put_GUEST(&cb, "web1");
	ctl_put_STATE(&cb, "streaming");
	ctl_put_NCPUS(&cb, 2);
	ctl_put_RELEASE(&cb, "6.1.0-56-cloud-amd64");
	ctl_put_AUX_VERSION(&cb, 1);
	ctl_put_LAST_DUMP(&cb, "/var/lib/vmtraced/web1/web1-20261122T121314.123456Z.vmts");
	ctl_put_BYTES_REJECTED(&cb, 0);
	ctl_put_META_REJECTED(&cb, 0);
	ctl_put_TRIGGERS(&cb, 2);
	ctl_put_SESSIONS(&cb, 1);
	ctl_done("guest");
	ctl_msg_begin(&cb, VMT_CTL_CPU, 1);
	ctl_put_CPU(&cb, 1);
	ctl_put_PAGES(&cb, 761);
	ctl_put_CAPACITY(&cb, 1024);
	ctl_put_BYTES_IN(&cb, 761 * PAGE);
	ctl_put_PAGES_IN(&cb, 761);
	ctl_put_FIRST_TS(&cb, 1000);
	ctl_put_LAST_TS(&cb, 99999999);
	ctl_put_EVENTS_IN(&cb, 80552);
	ctl_done("cpu");
	ctl_msg_begin(&cb, VMT_CTL_FILE, 4);
	ctl_put_PATH(&cb, "/var/lib/vmtraced/web1/web1-20261122T121314.123456Z.vmts");
	ctl_put_BYTES(&cb, 123456);
	ctl_put_CREATED_NS(&cb, 1795000000000000000ull);
	ctl_done("file");
	ctl_msg_begin(&cb, VMT_CTL_DETECTOR, 1);
	ctl_put_NAME(&cb, "vcpu_starvation");
	ctl_put_LOADED(&cb, 1);
	ctl_put_ENABLED(&cb, 1);
	ctl_put_SEEN(&cb, 100);
	ctl_put_FIRED(&cb, 2);
	ctl_put_DROPPED(&cb, 0);
	ctl_done("detector");
	buf_free(&cb);
}

/* ---- sample and aux -------------------------------------------------- */

/* The first nframes pages of cpu as frames of one page each, zstd and lz4 in turn. */
static void seed_frames(struct vmt_sample_cpu *c, struct vmt_sample_frame *fr, uint8_t **payload,
			uint32_t nframes)
{
	for (uint32_t k = 0; k < nframes; k++) {
		uint32_t codec = k % 2 ? VMT_FRAME_LZ4 : VMT_FRAME_ZSTD;
		struct vmt_frame_ctx *ctx = frame_ctx_new(codec, 1, PAGE);
		struct vmt_iovec in = { c->pages + (size_t)k * PAGE, PAGE };
		ssize_t len;

		payload[k] = malloc(frame_bound(codec, PAGE));
		if (!ctx || !payload[k])
			die("frame", -ENOMEM);
		len = frame_compress(ctx, &in, 1, payload[k], frame_bound(codec, PAGE));
		if (len < 0)
			die("frame_compress", (int)len);
		frame_ctx_free(ctx);
		fr[k] = (struct vmt_sample_frame){
			.h = { .codec = codec, .npages = 1, .first_seq = c->first_seq + k,
			       .first_ts = c->first_ts, .last_ts = c->last_ts, .events = 1 },
			.payload = payload[k], .len = (uint32_t)len };
	}
	c->frames = fr;
	c->nframes = nframes;
	c->frame_pages = nframes;
	c->pages += (size_t)nframes * PAGE;	/* the pages after the frames */
	c->counters.frames_made = nframes;
	c->counters.frame_bytes_in = (uint64_t)nframes * PAGE;
	c->counters.frame_bytes_out = fr[0].len + (nframes > 1 ? fr[1].len : 0);
}

/* A sample of 2 CPUs of per_cpu pages, the first nframes of each in frames. */
static void sample_seed(const char *name, uint32_t per_cpu, int zstd, bool clock, uint32_t nframes)
{
	struct vmt_sample_frame fr[2][4];
	uint8_t *payload[2][4] = { { 0 } };
	struct vmt_sync_point pts[2] = {
		{ .guest_ts = 5447468902ull, .offset = 1000000, .rtt = 40000, .cpu = VMT_SYNC_ALL_CPUS,
		  .probes = 8 },
		{ .guest_ts = 5503089957ull, .offset = 1000250, .rtt = 38000, .cpu = VMT_SYNC_ALL_CPUS,
		  .probes = 8 },
	};
	struct vmt_sample *s = calloc(1, sizeof(*s));
	struct vmt_sample_cpu cpus[2] = { 0 };
	struct vmt_buf tasks = { 0 };
	struct vmt_page_layout l;
	int fd = fresh_memfd(), r;

	if (!s)
		die("calloc", -ENOMEM);
	page_layout_default(&l, PAGE);
	snprintf(s->guest, sizeof(s->guest), "web1");
	snprintf(s->host, sizeof(s->host), "hv-07");
	s->aux_version = 1;
	s->aux_id = 0x1122334455667788ull;
	s->created_ns = 1795000000000000000ull;
	s->dump_id = 9;
	s->page_size = PAGE;
	s->ncpus = 2;
	s->ntriggers = 2;
	s->triggers[0] = (struct vmt_trigger){ .kind = VMT_TRIGGER_CONTROL, .pid = 4242,
					       .time_ns = s->created_ns, .reason = "vmtracectl dump" };
	s->triggers[1] = (struct vmt_trigger){ .kind = VMT_TRIGGER_BPF, .pid = 777,
					       .time_ns = s->created_ns + 5, .value = 150000000,
					       .threshold = 100000000, .reason = "vcpu_starvation" };
	s->ctl_rejected_bytes = 17;
	s->ctl_rejected_msgs = 1;
	s->cpus = cpus;
	for (uint32_t c = 0; c < 2; c++) {
		struct vmt_page_info a, b;
		const uint8_t *first = pages[c] + 10 * PAGE;

		cpus[c].cpu = c;
		cpus[c].npages = per_cpu;
		cpus[c].first_seq = 10;
		cpus[c].pages = (uint8_t *)first;
		page_scan(&l, first, &a);
		page_scan(&l, first + (per_cpu - 1) * PAGE, &b);
		cpus[c].first_ts = a.first_ts;
		cpus[c].last_ts = b.last_ts;
		cpus[c].events = a.events;
		cpus[c].counters.pages_in = per_cpu + 10;
		cpus[c].counters.bytes_in = (per_cpu + 10) * PAGE;
		cpus[c].counters.pages_overwritten = 10;
		cpus[c].have_guest_stats = c == 1;
		cpus[c].guest.entries = 80552;
		cpus[c].guest.now_ts = 99999999;
		if (nframes)
			seed_frames(&cpus[c], fr[c], payload[c], VMT_MIN(nframes, 4u));
	}
	if (clock) {
		s->clock.method = VMT_SYNC_PTP;
		snprintf(s->clock.guest_clock, sizeof(s->clock.guest_clock), "local");
		snprintf(s->clock.host_clock, sizeof(s->clock.host_clock), "mono");
		s->clock.qemu_pid = 4100;
		s->clock.nvcpus = 2;
		s->clock.vcpu_tid[0] = 4111;
		s->clock.vcpu_tid[1] = 4112;
		s->clock.npoints = 2;
		s->clock.points = pts;
	}
	if (clock) {
		/* and the task tables of the dump */
		meta_add(&tasks, "saved_cmdlines", "1 init\n431 forkloop\n4242 true\n", 30);
		meta_add(&tasks, "saved_tgids", "4242 4242\n", 10);
		s->tasks = tasks.data;
		s->tasks_len = (uint32_t)tasks.len;
	}
	r = sample_write(fd, s, zstd, 0);
	if (r < 0)
		die("sample_write", r);
	buf_free(&tasks);
	put_fd("sample", name, fd);
	close(fd);
	free(s);
	for (uint32_t c = 0; c < 2; c++)
		for (uint32_t k = 0; k < 4; k++)
			free(payload[c][k]);
}

/*
 * Bombs: tiny samples that claim or produce far more than a reader may
 * decode (docs/FORMAT.md 1.4): one CPU whose nframes frames are each zstd
 * frames of VMT_FRAME_MAX_PAGES zero pages, or (nframes 0) whose PAGES
 * section is as many zero pages, zstd-compressed; with lie, a frame header
 * claiming its pages over a payload of a few bytes.
 */
static void bomb_seed(const char *name, uint32_t nframes, bool lie)
{
	static uint8_t zero[VMT_FRAME_MAX_PAGES * PAGE];
	struct vmt_sample s = { .aux_version = 1, .aux_id = 0x1122334455667788ull,
				.created_ns = 1795000000000000000ull, .page_size = PAGE, .ncpus = 1 };
	struct vmt_sample_cpu cpu = { 0 };
	struct vmt_sample_frame fr[2];
	struct vmt_iovec all = { zero, sizeof(zero) };
	struct vmt_frame_ctx *ctx = frame_ctx_new(VMT_FRAME_ZSTD, 19, sizeof(zero));
	size_t cap = frame_bound(VMT_FRAME_ZSTD, sizeof(zero));
	uint8_t *payload = malloc(cap);
	ssize_t len;
	int fd = fresh_memfd(), r;

	if (!ctx || !payload)
		die("bomb", -ENOMEM);
	len = frame_compress(ctx, &all, 1, payload, cap);
	if (len < 0)
		die("frame_compress", (int)len);
	frame_ctx_free(ctx);
	snprintf(s.guest, sizeof(s.guest), "web1");
	s.cpus = &cpu;
	for (uint32_t k = 0; k < nframes && k < 2; k++)
		fr[k] = (struct vmt_sample_frame){
			.h = { .codec = VMT_FRAME_ZSTD, .npages = VMT_FRAME_MAX_PAGES,
			       .first_seq = (uint64_t)k * VMT_FRAME_MAX_PAGES },
			.payload = lie ? zero : payload, .len = lie ? 8 : (uint32_t)len };
	cpu.npages = nframes ? nframes * VMT_FRAME_MAX_PAGES : VMT_FRAME_MAX_PAGES;
	cpu.frame_pages = nframes * VMT_FRAME_MAX_PAGES;
	cpu.frames = fr;
	cpu.nframes = nframes;
	if (!nframes) {
		cpu.iov = &all;
		cpu.niov = 1;
	}
	r = sample_write(fd, &s, 19, 0);
	if (r < 0)
		die("sample_write", r);
	put_fd("sample", name, fd);
	close(fd);
	free(payload);
}

static void aux_seed(const char *name, const struct vmt_buf *bundle)
{
	struct vmt_aux a = { .version = 3, .created_ns = 1795000000000000000ull, .ncpus = 2,
			     .page_size = PAGE, .release = "6.1.0-56-cloud-amd64", .clock = "local",
			     .boot_id = "2f0c5e64-3c1a-4b7e-9d51-0a6e8c1f2b3d",
			     .agent = "vmtrace-agent 0.1.0" };
	int fd = fresh_memfd(), r;

	snprintf(a.guest, sizeof(a.guest), "web1");
	a.meta = bundle->data;
	a.meta_len = bundle->len;
	a.id = aux_compute_id(&a);
	r = aux_write(fd, &a);
	if (r < 0)
		die("aux_write", r);
	put_fd("aux", name, fd);
	close(fd);
}

int main(int argc, char **argv)
{
	struct vmt_buf hp = { 0 };
	struct vmt_meta_entry e;

	if (argc != 3) {
		fprintf(stderr, "usage: mkseeds CORPUS OUTDIR\n");
		return 2;
	}
	out_dir = argv[2];
	if (mkdir(out_dir, 0755) < 0 && errno != EEXIST)
		die(out_dir, -errno);
	load(argv[1]);
	proto_seeds();
	page_seeds();
	meta_seeds();
	ctl_seeds();
	sample_seed("zstd-2x2", 2, 3, false, 0);
	sample_seed("plain-2x1", 1, 0, false, 0);
	sample_seed("zstd-clock-2x1", 1, 3, true, 0);
	sample_seed("frames-zstd-lz4-2x4", 4, 3, false, 2);	/* version 2: 2 frames and 2 pages raw */
	bomb_seed("bomb-frames", 2, false);	/* 2 x 16 MiB of zeros in frames */
	bomb_seed("bomb-pages", 0, false);	/* 16 MiB of zeros in PAGES */
	bomb_seed("bomb-frame-claims", 2, true);	/* headers claiming 16 MiB over 8 bytes */
	aux_seed("small", &small_meta);
	meta_find(small_meta.data, small_meta.len, "events/header_page", &e);
	meta_add(&hp, "events/header_page", e.data, e.data_len);
	aux_seed("header-only", &hp);
	buf_free(&hp);
	buf_free(&small_meta);
	buf_free(&full_meta);
	free(pages[0]);
	free(pages[1]);
	return 0;
}
