/* SPDX-License-Identifier: MIT */
/*
 * guest-aux: a guest's metadata bundle (META_BEGIN, META_DATA, META_END:
 * bounded by metadata_max and memory_max, CRC-checked, validated) and the
 * aux it becomes: the version each content gets, the index of the aux
 * files in its folder, the metadata held in memory. Untrusted input, as in
 * guest-msg.c.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "guest-int.h"
#include "log.h"
#include "guest-sync.h"
#include "meta.h"
#include "page.h"

void guest_on_meta_begin(struct vmt_guest *g, const struct vmt_msg *msg)
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

void guest_on_meta_data(struct vmt_guest *g, const struct vmt_msg *msg)
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

/* The aux files a guest's index remembers at most. */
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

/* The bundle received whole, with crc: NULL if it checks out (*layout its
 * pages'), else why not. */
static const char *meta_check(struct vmt_guest *g, uint32_t crc, struct vmt_page_layout *layout)
{
	struct vmt_meta_entry hp;
	const char *why = NULL;

	if (g->meta.len != g->meta_total)
		return "metadata shorter than announced";
	if (crc32c(0, g->meta.data, g->meta.len) != crc)
		return "metadata CRC mismatch";
	if (meta_validate(g->meta.data, g->meta.len, &why) < 0)
		return why ? why : "out of memory checking it";	/* -ENOMEM says no why */
	if (meta_find(g->meta.data, g->meta.len, "events/header_page", &hp) < 0 ||
	    page_layout_parse(layout, (const char *)hp.data, hp.data_len, g->hello.page_size) < 0)
		return "events/header_page does not describe a page we can read";
	return NULL;
}

/* The aux of the bundle received (not taken: a.meta is still g->meta's). */
static void meta_aux(const struct vmt_guest *g, struct vmt_aux *a)
{
	snprintf(a->guest, sizeof(a->guest), "%s", g->conf.name);
	a->ncpus = g->hello.ncpus;
	a->page_size = g->hello.page_size;
	snprintf(a->release, sizeof(a->release), "%s", g->hello.release);
	bundle_clock(g, a->clock, sizeof(a->clock));
	snprintf(a->boot_id, sizeof(a->boot_id), "%s", g->hello.boot_id);
	snprintf(a->agent, sizeof(a->agent), "%s", g->hello.agent);
	a->meta = g->meta.data;
	a->meta_len = g->meta.len;
	a->id = aux_compute_id(a);
	a->created_ns = now_realtime_ns();
}

void guest_on_meta_end(struct vmt_guest *g, const struct vmt_msg *msg)
{
	struct vmt_page_layout layout;
	struct vmt_aux a = { 0 };
	const char *why;
	uint64_t decode_id;
	struct vmt_schema *schema = NULL;
	bool exists;

	if (!g->meta_open) {
		g->c.msgs_unexpected++;
		return;
	}
	g->meta_open = false;
	why = meta_check(g, get_le32(msg->payload), &layout);
	if (why) {
		char m[200];
		g->c.meta_rejected++;
		snprintf(m, sizeof(m), "metadata refused: %s", why);
		guest_fail(g, m);
		return;
	}
	meta_aux(g, &a);

	decode_id = bundle_decode_id(&a);
	/* the formats TCODE frames are made with from now on (a hash of them
	 * in each frame says which decode it); none: zstd frames, counted */
	if ((!g->have_aux || a.id != g->aux.id) && g->conf.rec.compression == VMT_FRAME_TCODE)
		schema = schema_new(a.meta, a.meta_len, a.page_size);
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
			guest_prev_note_boot(g, a.boot_id);
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
		/* what a crashed predecessor left decodes with this aux, or not */
		guest_recover_rings(g);
		guest_describe_rings(g);
	} else {
		buf_free(&g->meta);
	}
	g->aux_decode_id = decode_id;
	g->layout = layout;
	for (uint32_t i = 0; i < g->nrings; i++) {
		if (schema)
			ring_set_schema(&g->rings[i], schema);
		ring_set_layout(&g->rings[i], &layout);
		g->stream_base[i] = g->rings[i].next_seq;
	}
	/* whatever the data ports hold now predates this stream: the agent
	 * starts writing pages only when it gets STREAM */
	schema_unref(schema);
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

/* ---- metadata held ------------------------------------------------------ */

/*
 * The aux in force goes with the rings whose pages it decodes. Its bundle,
 * if no sample needed its file, goes too: what a job queued has is a copy.
 */
void guest_drop_aux(struct vmt_guest *g)
{
	g->have_aux = false;
	g->aux_pending = false;
	free(g->aux.meta);
	g->aux.meta = NULL;
	g->aux.meta_len = 0;
	guest_settle_meta(g);
}

uint64_t guest_meta_held(const struct vmt_guest *g)
{
	uint64_t n = g->tasks.len + g->tasks_rx.len;

	if (g->meta_open)
		n += g->meta_total;
	if (g->aux.meta)
		n += g->aux.meta_len * (g->aux_pending ? 2 : 1);
	return n;
}

void guest_settle_meta(struct vmt_guest *g)
{
	mem_charge_meta(g->env->mem, &g->meta_charged, guest_meta_held(g));
}

bool guest_aux_due(const struct vmt_guest *g)
{
	return g->have_aux && g->aux.meta && !g->aux_pending;
}

int guest_aux_copy(struct vmt_guest *g, struct vmt_aux *out)
{
	if (!g->have_aux || !g->aux.meta)
		return -ENOENT;
	*out = g->aux;
	out->meta = malloc(g->aux.meta_len);
	if (!out->meta)
		return -ENOMEM;
	memcpy(out->meta, g->aux.meta, g->aux.meta_len);
	/* the clocks and the method as they are now; the points are in samples */
	out->have_clock = sync_clock_info(g, 0, 0, &out->sync) == 0;
	g->aux_pending = true;
	guest_settle_meta(g);	/* the job's copy counts too */
	return 0;
}

bool guest_aux_holds(const struct vmt_guest *g, uint64_t aux_id)
{
	return g->have_aux && g->aux.id == aux_id && g->aux.meta;
}

bool guest_aux_in_force(const struct vmt_guest *g, uint32_t *version)
{
	if (!g->have_aux)
		return false;
	*version = g->aux.version;
	return true;
}

void guest_aux_done(struct vmt_guest *g, uint64_t aux_id, bool ok)
{
	if (!g->have_aux || g->aux.id != aux_id)
		return;	/* an aux replaced since: its own job is its own */
	g->aux_pending = false;
	if (ok) {
		free(g->aux.meta);
		g->aux.meta = NULL;
		g->aux.meta_len = 0;
	}
	guest_settle_meta(g);
}
