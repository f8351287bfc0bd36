/* SPDX-License-Identifier: MIT */
/*
 * guest-status: what other modules may know of a guest and the few things
 * they may change, as functions (struct vmt_guest is the guest module's):
 * its configuration and state, discovery's presence, a reload's changes in
 * place, the status snapshot, and the local source's start (hostsrc).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "frame.h"
#include "guest-int.h"
#include "log.h"

const struct vmt_guest_conf *guest_conf(const struct vmt_guest *g)
{
	return &g->conf;
}

enum vmt_guest_state guest_state(const struct vmt_guest *g)
{
	return g->state;
}

void guest_reconf(struct vmt_guest *g, const struct vmt_guest_conf *nc)
{
	memcpy(g->conf.pidfile, nc->pidfile, sizeof(g->conf.pidfile));
	g->conf.rec.compression = nc->rec.compression;
	g->conf.rec.compression_level = nc->rec.compression_level;
}

bool guest_discovered(const struct vmt_guest *g)
{
	return g->discovered;
}

bool guest_present(const struct vmt_guest *g)
{
	return g->present;
}

void guest_set_discovered(struct vmt_guest *g)
{
	g->discovered = true;
	g->present = true;
}

void guest_set_present(struct vmt_guest *g, bool present)
{
	g->present = present;
}

void guest_set_path(struct vmt_guest *g, const char *path)
{
	if (!strcmp(g->conf.path, path))
		return;
	log_guest(VMT_LOG_INFO, 0, g->conf.name, "now at %s", path);
	snprintf(g->conf.path, sizeof(g->conf.path), "%s", path);
}

pid_t guest_take_qemu_handed(struct vmt_guest *g)
{
	pid_t pid = g->qemu_handed;

	g->qemu_handed = 0;
	return pid;
}

void guest_describe(const struct vmt_guest *g, struct vmt_source_desc *d)
{
	g->src_ops->describe(g->src, d);
}

bool guest_has_session(const struct vmt_guest *g)
{
	struct vmt_source_desc d;

	guest_describe(g, &d);
	return d.session;
}

pid_t guest_qemu_pid(const struct vmt_guest *g)
{
	struct vmt_source_desc d;

	guest_describe(g, &d);
	return d.qemu_pid;
}

/* ---- the status snapshot ---------------------------------------------------- */

static void status_ring(struct vmt_guest_status *st, const struct vmt_ring *r)
{
	st->pages += ring_window_pages(r);
	/* what the memory holds raw: a compressed window goes past it */
	st->capacity += r->mem_pages;
	st->pages_in += r->c.pages_in;
	st->pages_overwritten += r->c.pages_overwritten;
	st->pages_guest_lost += r->c.pages_guest_lost;
	st->events_guest_lost += r->c.events_guest_lost;
	st->bytes_rejected += r->c.bytes_rejected;
	st->pages_rejected += r->c.pages_rejected;
	st->bytes_in += r->c.bytes_in;
	st->events_in += r->c.events_in;
	st->ts_backwards += r->c.ts_backwards;
	/* the window: from the oldest page held (in a frame or raw) to the newest */
	if (r->fr.count)
		st->first_ts = VMT_MIN(st->first_ts, frames_at(&r->fr, 0)->h.first_ts);
	else if (r->count)
		st->first_ts = VMT_MIN(st->first_ts, ring_slot(r, 0)->first_ts);
	if (r->count)
		st->last_ts = VMT_MAX(st->last_ts, ring_slot(r, r->count - 1)->last_ts);
	else if (r->fr.count)
		st->last_ts = VMT_MAX(st->last_ts, frames_at(&r->fr, r->fr.count - 1)->h.last_ts);
	/* how the rings keep older pages, and what it achieved */
	st->frame_pages += r->fr.pages;
	st->frame_bytes += r->fr.stored;
	st->frames_made += r->c.frames_made;
	st->pages_stored_raw += r->c.pages_stored_raw;
	st->frames_overwritten += r->c.frames_overwritten;
}

void guest_status(const struct vmt_guest *g, struct vmt_guest_status *st)
{
	*st = (struct vmt_guest_status){ .first_ts = UINT64_MAX };
	st->name = g->conf.name;
	/* still streaming as far as the session goes, but nothing comes */
	st->state = g->alive.silent ? "silent" : guest_state_name(g->state);
	st->uptime_ns = now_monotonic_ns() - g->state_since_ns;
	st->ncpus = g->nrings;
	st->release = g->have_hello ? g->hello.release : NULL;
	st->have_aux = g->have_aux;
	st->aux_version = g->aux.version;
	st->mem_used = guest_mem(g);
	st->compression = frame_codec_name(g->conf.rec.compression);
	st->page_size = g->layout.page_size;
	st->labels = g->conf.labels;
	st->discovered = g->discovered;
	for (uint32_t i = 0; i < g->nrings; i++)
		status_ring(st, &g->rings[i]);
	st->c = g->c;
	st->late_answers = g->alive.c.late;
	st->silences = g->alive.c.silences;
	if (g->nrings)
		guest_window_held(g, &st->window_since_ns, &st->lifetimes);
}

/* ---- a local source ------------------------------------------------------------ */

uint32_t guest_start_local(struct vmt_guest *g, const struct vmt_hello *hl, struct vmt_aux *a,
			   const struct vmt_page_layout *l, bool *exists)
{
	g->hello = *hl;
	g->have_hello = true;
	g->c.sessions = 1;
	g->aux = *a;
	a->meta = NULL;	/* taken */
	g->aux.version = guest_aux_version(g, g->aux.id, exists);
	g->have_aux = true;
	guest_settle_meta(g);	/* the bundle counts under memory_max until it is written */
	g->layout = *l;
	for (uint32_t i = 0; i < g->nrings; i++) {
		ring_set_layout(&g->rings[i], l);
		g->stream_base[i] = g->rings[i].next_seq;
	}
	g->state = GUEST_STREAMING;
	g->state_since_ns = now_monotonic_ns();
	return g->aux.version;
}

void guest_set_source(struct vmt_guest *g, const struct vmt_source_ops *ops, void *src)
{
	g->src = src;
	g->src_ops = ops;
}

void *guest_source(const struct vmt_guest *g, const struct vmt_source_ops *ops)
{
	return g && g->src_ops == ops ? g->src : NULL;
}

struct vmt_ring *guest_ring(struct vmt_guest *g, uint32_t cpu)
{
	return cpu < g->nrings ? &g->rings[cpu] : NULL;
}

void guest_set_tasks(struct vmt_guest *g, struct vmt_buf *t)
{
	buf_free(&g->tasks);
	g->tasks = *t;
	*t = (struct vmt_buf){ 0 };
	guest_settle_meta(g);
}

const struct vmt_alive_counters *guest_alive_counters(const struct vmt_guest *g)
{
	return &g->alive.c;
}

void guest_count_read_pause(struct vmt_guest *g)
{
	g->c.read_pauses++;
}
