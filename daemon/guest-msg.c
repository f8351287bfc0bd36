/* SPDX-License-Identifier: MIT */
/*
 * guest-msg: what a guest's agent says on the control channel, checked and
 * acted on: HELLO starts a session, STARTED and the metadata bundle settle
 * the aux version, FLUSHED marks where a dump's window ends, TRIGGER asks
 * for a dump. Everything here is untrusted input.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guest-int.h"
#include "log.h"
#include "guest-sync.h"
#include "meta.h"
#include "page.h"

/* ---- messages --------------------------------------------------------- */

/*
 * The rings hold pages that decode only with what the guest is replacing
 * (its boot, its events, its shape): write them out first. The guest caused
 * this dump, so its cooldown and budgets decide; a dump held back drops the
 * pages, counted and said.
 */
static void guest_save_window(struct vmt_guest *g, const char *why)
{
	struct vmt_trigger t = { .kind = VMT_TRIGGER_GUEST, .time_ns = now_realtime_ns() };
	uint64_t pages = 0;

	if (g->env->ev->may_dump(g->env->owner, g)) {
		snprintf(t.reason, sizeof(t.reason), "%s", why);
		g->env->ev->dump_now(g->env->owner, g, &t);
		return;
	}
	for (uint32_t i = 0; i < g->nrings; i++)
		pages += g->rings[i].count;
	g->c.pages_discarded += pages;
	guest_complain(g, 0, "%s: its dump held back by the cooldown or the trigger budget, "
		       "%llu pages of the old window dropped", why, (unsigned long long)pages);
}

/*
 * Sessions are the guest's to spend: sessions_per_minute of them at most
 * (a burst of that many, refilled evenly). Past that its HELLOs wait: the
 * session it had is over (an agent that says HELLO afresh has restarted),
 * the host goes on asking with HOST_HELLO every RETRY_USEC, and the first
 * HELLO once a session is free again starts one. A storm of HELLOs costs a
 * parse each, never a ring allocation, and one log line.
 */
static bool guest_session_allowed(struct vmt_guest *g)
{
	uint32_t per_min = g->conf.rec.sessions_per_minute;
	uint64_t now = now_monotonic_ns();

	if (bucket_take(&g->sessions, per_min, now)) {
		if (g->hellos_waiting) {
			guest_log(g, VMT_LOG_NOTICE, 0, "a session again, after %llu HELLOs held back",
				  (unsigned long long)g->hellos_waiting);
			g->hellos_waiting = 0;
		}
		return true;
	}
	g->c.hellos_deferred++;
	if (!g->hellos_waiting++)
		guest_complain(g, 0, "%u sessions in a minute: its HELLOs wait (a session again "
			       "in %.0f s)", per_min, bucket_wait_s(&g->sessions, per_min));
	if (g->state != GUEST_WAIT_HELLO) {
		g->meta_open = false;
		buf_free(&g->meta);
		guest_set_state(g, GUEST_WAIT_HELLO);
		guest_end_flush(g);
		guest_arm(g, RETRY_USEC);
	}
	return false;
}

static void guest_on_hello(struct vmt_guest *g, const struct vmt_msg *msg)
{
	struct vmt_hello h;
	int r;

	if (proto_get_hello(msg->payload, msg->len, &h) < 0) {
		g->c.msgs_unexpected++;
		guest_complain(g, 0, "malformed HELLO ignored");
		return;
	}
	/*
	 * In a session, a HELLO that answers a HOST_HELLO (ours, late, or an
	 * older one left in a FIFO) changes nothing; only an agent that
	 * started afresh (echo 0) begins a new session. A failed session
	 * waits for its retry.
	 */
	if (g->state == GUEST_FAILED || g->state == GUEST_OFFLINE ||
	    ((g->state == GUEST_STARTING || g->state == GUEST_STREAMING) && h.echo))
		return;
	if (h.version != VMT_PROTO_VERSION) {
		guest_fail(g, "agent speaks another protocol version");
		return;
	}
	if (h.ncpus > g->nchan) {
		char why[160];
		snprintf(why, sizeof(why), "agent has %u CPUs but only %u trace-path-cpuN channels exist",
			 h.ncpus, g->nchan);
		/* the ports may still be appearing (QEMU starting, channels
		 * hot-plugged): reconnecting counts them again */
		guest_complain(g, 0, "%s; counting them again in %llu s", why,
			       (unsigned long long)(RETRY_USEC / 1000000));
		guest_disconnect(g, why);
		return;
	}
	if (!guest_session_allowed(g))
		return;
	if (g->nrings && (g->nrings != h.ncpus || g->layout.page_size != h.page_size)) {
		/* another machine shape: keep what the old rings hold, then start over */
		if (!guest_rings_empty(g) && g->have_aux) {
			char why[VMT_REASON_MAX];
			snprintf(why, sizeof(why), "guest changed shape (%u -> %u CPUs)", g->nrings,
				 h.ncpus);
			guest_save_window(g, why);
		}
		mem_give_rings(g->env->mem, guest_mem(g));
		guest_free_rings(g);
		guest_drop_aux(g);
	}
	if (!g->nrings) {
		r = guest_setup_rings(g, h.ncpus, h.page_size);
		if (r == -ENOSPC) {
			guest_fail(g, "the rings do not fit under memory_max");
			return;
		}
		if (r < 0) {
			guest_log(g, VMT_LOG_ERR, r, "cannot allocate rings");
			guest_fail(g, "no memory for the rings");
			return;
		}
	}
	g->hello = h;
	g->have_hello = true;
	g->c.sessions++;
	guest_log(g, VMT_LOG_INFO, 0, "agent %s, kernel %s, %u CPUs, clock %s",
		  h.agent, h.release, h.ncpus, h.clock);
	g->meta_open = false;
	buf_free(&g->meta);
	guest_set_state(g, GUEST_STARTING);
	guest_send_start(g);
	if (g->state == GUEST_STARTING)	/* else START failed: the reconnect stays armed */
		guest_arm(g, STARTING_TIMEOUT_USEC);
}

static void guest_on_started(struct vmt_guest *g, const struct vmt_msg *msg)
{
	int32_t err = (int32_t)get_le32(msg->payload);
	char text[513] = "";
	uint32_t tl = msg->len - 8;

	if (g->state != GUEST_STARTING) {
		g->c.msgs_unexpected++;
		return;
	}
	for (uint32_t i = 0; i < tl; i++)
		text[i] = (msg->payload[8 + i] >= 0x20 && msg->payload[8 + i] < 0x7f) ? (char)msg->payload[8 + i] : '?';
	text[tl] = 0;
	if (err) {
		char why[600];
		g->c.errors_from_agent++;
		snprintf(why, sizeof(why), "agent could not start tracing: %s (%s)",
			 strerror(err < 0 ? -err : err), text);
		guest_fail(g, why);
	}
}

static void guest_on_meta_begin(struct vmt_guest *g, const struct vmt_msg *msg)
{
	uint64_t total = get_le64(msg->payload);

	if (g->state != GUEST_STARTING) {
		g->c.msgs_unexpected++;
		return;
	}
	if (total > g->conf.rec.meta_max || total == 0) {
		char why[160];
		g->c.meta_rejected++;
		snprintf(why, sizeof(why), "metadata of %llu bytes refused (metadata_max %llu)",
			 (unsigned long long)total, (unsigned long long)g->conf.rec.meta_max);
		guest_fail(g, why);
		return;
	}
	{
		/* metadata is held in memory too, until its aux file is written */
		struct vmt_mem *mem = g->env->mem;

		if (!mem_meta_fits(mem, total)) {
			char why[256];
			g->c.meta_rejected++;
			snprintf(why, sizeof(why),
				 "metadata of %llu KiB does not fit under memory_max now (rings %llu KiB, "
				 "dump_reserve %llu KiB, metadata held %llu KiB, memory_max %llu KiB)",
				 (unsigned long long)(total >> 10), (unsigned long long)(mem->rings >> 10),
				 (unsigned long long)(mem->reserve.bytes >> 10),
				 (unsigned long long)(mem->meta >> 10), (unsigned long long)(mem->max >> 10));
			guest_fail(g, why);
			return;
		}
	}
	buf_free(&g->meta);
	g->meta_total = total;
	g->meta_open = true;
}

static void guest_on_meta_data(struct vmt_guest *g, const struct vmt_msg *msg)
{
	if (!g->meta_open) {
		g->c.msgs_unexpected++;
		return;
	}
	if (msg->len > g->meta_total - g->meta.len) {
		g->c.meta_rejected++;
		guest_fail(g, "metadata larger than announced");
		return;
	}
	if (buf_append(&g->meta, msg->payload, msg->len) < 0)
		guest_fail(g, "no memory for metadata");
}

/* The bracketed entry of the bundle's trace_clock, else the HELLO's. */
static void bundle_clock(const struct vmt_guest *g, char *out, size_t n)
{
	struct vmt_meta_entry e;

	snprintf(out, n, "%s", g->hello.clock);
	if (meta_find(g->meta.data, g->meta.len, "trace_clock", &e) < 0)
		return;
	for (uint32_t i = 0; i < e.data_len; i++) {
		if (e.data[i] != '[')
			continue;
		uint32_t j = i + 1;
		while (j < e.data_len && e.data[j] != ']' && j - i < n)
			j++;
		if (j < e.data_len && e.data[j] == ']' && j - i - 1 < n) {
			bool ok = true;
			for (uint32_t k = i + 1; k < j; k++)
				ok &= (e.data[k] >= 'a' && e.data[k] <= 'z') || e.data[k] == '-' ||
				      (e.data[k] >= '0' && e.data[k] <= '9');
			if (ok && j > i + 1) {
				memcpy(out, e.data + i + 1, j - i - 1);
				out[j - i - 1] = 0;
			}
		}
		return;
	}
}

/*
 * What decoding the pages depends on: the machine, the boot and every
 * metadata file but the task-name tables, which move on with every session
 * while the pages already held still decode the same.
 */
static uint64_t bundle_decode_id(const struct vmt_aux *a)
{
	uint64_t h = 0xcbf29ce484222325ull;
	struct vmt_meta_entry e;
	size_t pos = 0;

#define FNV(p, n)                                                       \
	for (size_t k_ = 0; k_ < (n); k_++)                             \
		h = (h ^ ((const uint8_t *)(p))[k_]) * 0x100000001b3ull
	FNV(&a->ncpus, sizeof(a->ncpus));
	FNV(&a->page_size, sizeof(a->page_size));
	FNV(a->release, strlen(a->release));
	FNV(a->clock, strlen(a->clock));
	FNV(a->boot_id, strlen(a->boot_id));
	while (meta_next(a->meta, a->meta_len, &pos, &e) > 0) {
		if ((e.name_len == 14 && !memcmp(e.name, "saved_cmdlines", 14)) ||
		    (e.name_len == 11 && !memcmp(e.name, "saved_tgids", 11)))
			continue;
		FNV(&e.name_len, sizeof(e.name_len));
		FNV(e.name, e.name_len);
		FNV(&e.data_len, sizeof(e.data_len));
		FNV(e.data, e.data_len);
	}
#undef FNV
	return h;
}

/*
 * The aux files of the guest's folder, by content id: read once, the first
 * time a session needs them (each file is checked whole: its id must be
 * what its content hashes to), then kept up to date as versions are given
 * out. A session no longer reads the folder: a guest that comes back again
 * and again costs a look-up in memory.
 */
static void aux_index_build(struct vmt_guest *g)
{
	char dir[PATH_MAX + 80];
	struct dirent *de;
	DIR *d;

	g->aux_index_built = true;
	snprintf(dir, sizeof(dir), "%s/%s", g->env->conf->state_dir, g->conf.name);
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d))) {
		char path[PATH_MAX + 400], why[128];
		struct vmt_aux_entry *e;
		struct vmt_aux a;
		uint32_t v;

		if (!aux_file_version(de->d_name, strlen(de->d_name), &v))
			continue;
		g->aux_max_version = VMT_MAX(g->aux_max_version, v);
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (aux_read(path, g->conf.rec.meta_max, &a, why, sizeof(why)) < 0)
			continue;
		e = realloc(g->aux_index, (g->aux_nindex + 1) * sizeof(*e));
		if (e) {
			g->aux_index = e;
			g->aux_index[g->aux_nindex++] = (struct vmt_aux_entry){ .version = v, .id = a.id };
		}
		aux_free(&a);
	}
	closedir(d);
}

/* The aux files a guest's index remembers at most (guest-msg.c). */
#define AUX_INDEX_MAX 1024

/*
 * The version this content id was given (its file on disk, or not written
 * yet: a version is given out at META_END, the file written only when a
 * sample needs it), or the next free one. *exists says whether its file is
 * on disk now: the index itself never claims that.
 */
uint32_t guest_aux_version(struct vmt_guest *g, uint64_t id, bool *exists)
{
	struct vmt_aux_entry *e;

	*exists = false;
	if (!g->aux_index_built)
		aux_index_build(g);
	if (g->have_aux)
		g->aux_max_version = VMT_MAX(g->aux_max_version, g->aux.version);
	for (size_t i = 0; i < g->aux_nindex; i++) {
		char dir[PATH_MAX + 80], name[64];
		int dfd;

		if (g->aux_index[i].id != id)
			continue;
		/* retention may have deleted it since: then it is written again,
		 * under the same version */
		snprintf(dir, sizeof(dir), "%s/%s", g->env->conf->state_dir, g->conf.name);
		aux_file_name(name, sizeof(name), g->aux_index[i].version);
		dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
		*exists = dfd >= 0 && faccessat(dfd, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
		if (dfd >= 0)
			close(dfd);
		return g->aux_index[i].version;
	}
	/*
	 * A version given out is never given to other content, written or
	 * not, so forgetting an entry is always safe: that content would get
	 * a new version. A guest that boots again and again would grow the
	 * index a little each time; past AUX_INDEX_MAX the oldest goes.
	 */
	if (g->aux_nindex >= AUX_INDEX_MAX) {
		memmove(g->aux_index, g->aux_index + 1, (g->aux_nindex - 1) * sizeof(*g->aux_index));
		g->aux_nindex--;
	}
	e = realloc(g->aux_index, (g->aux_nindex + 1) * sizeof(*e));
	if (!e)
		return ++g->aux_max_version;	/* only its look-up later is lost */
	g->aux_index = e;
	g->aux_index[g->aux_nindex++] = (struct vmt_aux_entry){ .version = ++g->aux_max_version,
							       .id = id };
	return g->aux_max_version;
}

static void guest_on_meta_end(struct vmt_guest *g, const struct vmt_msg *msg)
{
	uint32_t crc = get_le32(msg->payload);
	struct vmt_meta_entry hp;
	struct vmt_page_layout layout;
	struct vmt_aux a = { 0 };
	const char *why = NULL;
	uint64_t decode_id;
	bool exists;

	if (!g->meta_open) {
		g->c.msgs_unexpected++;
		return;
	}
	g->meta_open = false;
	if (g->meta.len != g->meta_total)
		why = "metadata shorter than announced";
	else if (crc32c(0, g->meta.data, g->meta.len) != crc)
		why = "metadata CRC mismatch";
	else if (meta_validate(g->meta.data, g->meta.len, &why) < 0)
		;
	else if (meta_find(g->meta.data, g->meta.len, "events/header_page", &hp) < 0 ||
		 page_layout_parse(&layout, (const char *)hp.data, hp.data_len, g->hello.page_size) < 0)
		why = "events/header_page does not describe a page we can read";
	if (why) {
		char m[200];
		g->c.meta_rejected++;
		snprintf(m, sizeof(m), "metadata refused: %s", why);
		guest_fail(g, m);
		return;
	}

	snprintf(a.guest, sizeof(a.guest), "%s", g->conf.name);
	a.ncpus = g->hello.ncpus;
	a.page_size = g->hello.page_size;
	snprintf(a.release, sizeof(a.release), "%s", g->hello.release);
	bundle_clock(g, a.clock, sizeof(a.clock));
	snprintf(a.boot_id, sizeof(a.boot_id), "%s", g->hello.boot_id);
	snprintf(a.agent, sizeof(a.agent), "%s", g->hello.agent);
	a.meta = g->meta.data;
	a.meta_len = g->meta.len;
	a.id = aux_compute_id(&a);
	a.created_ns = now_realtime_ns();

	decode_id = bundle_decode_id(&a);
	if (!g->have_aux || a.id != g->aux.id) {
		/* same boot, same formats (only the task names moved on): the
		 * pages held decode with the new aux as well as with the old */
		bool compatible = g->have_aux && decode_id == g->aux_decode_id;

		/* otherwise the pages in the rings decode only with the old aux:
		 * write them out before they go */
		if (g->have_aux && !compatible && !guest_rings_empty(g)) {
			char reason[VMT_REASON_MAX];
			snprintf(reason, sizeof(reason), "guest rebooted or changed its events (aux %u replaced)",
				 g->aux.version);
			guest_save_window(g, reason);
		}
		if (!compatible) {
			for (uint32_t i = 0; i < g->nrings; i++)
				ring_clear(&g->rings[i]);
			sync_forget(g);	/* a new boot: its clock started over */
			buf_free(&g->tasks);	/* and its pids name other tasks */
		}
		a.version = guest_aux_version(g, a.id, &exists);
		aux_free(&g->aux);
		g->aux = a;
		g->have_aux = true;
		/* a job queued for the aux replaced has its own copy */
		g->aux_pending = false;
		/*
		 * Nothing is written yet: a guest that says HELLO again and
		 * again must not leave an aux file each time. The bundle stays
		 * here (within metadata_max and memory_max) and freeze_guest()
		 * queues the file ahead of the first sample that names it; the
		 * writer leaves a file that is there as it is. Even one on
		 * disk now is not trusted to be there then: a retention pass
		 * queued before this session may delete it.
		 */
		g->meta = (struct vmt_buf){ 0 };
		guest_log(g, VMT_LOG_INFO, 0, "aux version %u (%s)", g->aux.version,
			  exists ? "already on disk" : "new");
	} else {
		buf_free(&g->meta);
	}
	g->aux_decode_id = decode_id;
	g->layout = layout;
	for (uint32_t i = 0; i < g->nrings; i++) {
		g->rings[i].layout = layout;
		ring_reset_stream(&g->rings[i], 0);
		g->stream_base[i] = g->rings[i].next_seq;
	}
	/* whatever the data ports hold now predates this stream: the agent
	 * starts writing pages only when it gets STREAM */
	guest_drain_data(g);
	guest_set_state(g, GUEST_STREAMING);
	guest_send(g, VMT_MSG_STREAM, NULL, 0);
	if (g->state != GUEST_STREAMING)
		return;	/* STREAM could not be sent: the reconnect is armed */
	if (g->timer)
		sd_event_source_set_enabled(g->timer, SD_EVENT_OFF);
	guest_log(g, VMT_LOG_INFO, 0, "streaming");
	sync_session_start(g);
}

/* Are the bytes the agent sent before its FLUSHED all here? */
void guest_check_flushed(struct vmt_guest *g)
{
	if (!g->flush_wait || !g->have_target)
		return;
	for (uint32_t i = 0; i < g->nrings; i++)
		if (g->rings[i].next_seq < g->target_seq[i])
			return;
	g->flush_wait = false;
	g->flushed = true;
	g->env->ev->flush_done(g->env->owner, g);
}

static void guest_on_flushed(struct vmt_guest *g, const struct vmt_msg *msg)
{
	_cleanup_free_ struct vmt_cpu_stats *st = calloc(VMT_MAX_CPUS, sizeof(*st));
	uint64_t id;
	uint32_t n;

	if (!st)
		return;
	if (proto_get_flushed(msg->payload, msg->len, &id, &n, st) < 0) {
		g->c.flush_bad++;
		guest_complain(g, 0, "malformed FLUSHED ignored");
		return;
	}
	if (!g->flush_wait && id == g->flush_id)
		return;	/* came after the dump stopped waiting: already counted as a timeout */
	if (!g->flush_wait || id != g->flush_id || n != g->nrings) {
		g->c.flush_bad++;
		guest_complain(g, 0, "FLUSHED that answers no FLUSH ignored");
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (st[i].bytes_sent % g->layout.page_size) {
			g->c.flush_bad++;
			guest_complain(g, 0, "FLUSHED: cpu%u sent %llu bytes, not whole pages", i,
				       (unsigned long long)st[i].bytes_sent);
			guest_end_flush(g);
			return;
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		g->target_seq[i] = g->stream_base[i] + st[i].bytes_sent / g->layout.page_size;
		g->stats[i] = st[i];
	}
	g->have_target = true;
	g->have_stats = true;
	guest_check_flushed(g);
}

static void guest_on_text(struct vmt_guest *g, const struct vmt_msg *msg, uint32_t skip, const char *what)
{
	char text[600];
	uint32_t n = VMT_MIN(msg->len - skip, sizeof(text) - 1);

	for (uint32_t i = 0; i < n; i++) {
		uint8_t c = msg->payload[skip + i];
		text[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	text[n] = 0;
	guest_complain(g, 0, "%s: %s", what, text);
}

/* The guest asks for its own dump: untrusted, so the cooldown and the rate
 * limit apply (the owner's trigger policy), and complaints are rate-limited. */
static void guest_on_trigger(struct vmt_guest *g, const struct vmt_msg *msg)
{
	struct vmt_trigger t = { .kind = VMT_TRIGGER_GUEST, .time_ns = now_realtime_ns() };
	char text[VMT_REASON_MAX - 16];
	uint32_t n = VMT_MIN(msg->len, sizeof(text) - 1);
	int r;

	g->c.triggers_from_agent++;
	if (g->state != GUEST_STREAMING) {
		g->c.msgs_unexpected++;
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint8_t c = msg->payload[i];
		text[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	text[n] = 0;
	snprintf(t.reason, sizeof(t.reason), "guest: %s", n ? text : "(no reason given)");
	r = g->env->ev->trigger(g->env->owner, g, &t);
	if (r == -EBUSY)
		guest_log(g, VMT_LOG_DEBUG, 0, "trigger suppressed: %s", t.reason);
	else if (r < 0)
		log_guest(VMT_LOG_ERR, r, g->conf.name, "cannot start a dump: %m");
	else
		guest_log(g, VMT_LOG_NOTICE, 0, "asked for a dump: %s", text);
}

/*
 * TASKS: the agent's task tables, in pieces ahead of a FLUSHED, so that the
 * dump's sample names the tasks that ran since START. Pieces come in order;
 * anything else drops what was gathered (the last whole tables stay).
 */
static void guest_on_tasks(struct vmt_guest *g, const struct vmt_msg *msg)
{
	uint32_t off = get_le32(msg->payload), total = get_le32(msg->payload + 4);
	uint32_t n = msg->len - 8;
	const char *why = NULL;

	if (g->state != GUEST_STREAMING) {
		g->c.msgs_unexpected++;
		return;
	}
	if (off == 0)
		g->tasks_rx.len = 0;	/* a new set: one cut short is forgotten */
	if (!total || total > VMT_TASKS_MAX || off != g->tasks_rx.len || n > total - off ||
	    (off && total != g->tasks_total)) {
		g->c.msgs_unexpected++;
		guest_complain(g, 0, "task tables: a piece at %u of %u out of place (%zu bytes held); "
				     "dropped", off, total, g->tasks_rx.len);
		buf_free(&g->tasks_rx);
		return;
	}
	g->tasks_total = total;
	if (buf_append(&g->tasks_rx, msg->payload + 8, n) < 0) {
		log_guest(VMT_LOG_ERR, -ENOMEM, g->conf.name, "task tables dropped: %m");
		buf_free(&g->tasks_rx);
		return;
	}
	if (g->tasks_rx.len < total)
		return;
	if (meta_tasks_validate(g->tasks_rx.data, g->tasks_rx.len, &why) < 0) {
		g->c.msgs_unexpected++;
		guest_complain(g, 0, "%s; dropped", why);
		buf_free(&g->tasks_rx);
		return;
	}
	buf_free(&g->tasks);
	g->tasks = g->tasks_rx;
	g->tasks_rx = (struct vmt_buf){ 0 };
}

void guest_dispatch(struct vmt_guest *g, const struct vmt_msg *msg)
{
	switch (msg->type) {
	case VMT_MSG_HELLO:
		guest_on_hello(g, msg);
		break;
	case VMT_MSG_STARTED:
		guest_on_started(g, msg);
		break;
	case VMT_MSG_META_BEGIN:
		guest_on_meta_begin(g, msg);
		break;
	case VMT_MSG_META_DATA:
		guest_on_meta_data(g, msg);
		break;
	case VMT_MSG_META_END:
		guest_on_meta_end(g, msg);
		break;
	case VMT_MSG_FLUSHED:
		guest_on_flushed(g, msg);
		break;
	case VMT_MSG_STOPPED:
		break;
	case VMT_MSG_ERROR:
		g->c.errors_from_agent++;
		guest_on_text(g, msg, 4, "agent error");
		break;
	case VMT_MSG_TRIGGER:
		guest_on_trigger(g, msg);
		break;
	case VMT_MSG_SYNCED:
		sync_on_synced(g, msg);
		break;
	case VMT_MSG_TASKS:
		guest_on_tasks(g, msg);
		break;
	default:
		/* host->guest types coming from the guest */
		g->c.msgs_unexpected++;
		guest_complain(g, 0, "unexpected %s message ignored", proto_msg_name(msg->type));
		break;
	}
	/* what it holds in metadata may have changed with any of them */
	guest_settle_meta(g);
}

