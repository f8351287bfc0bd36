/* SPDX-License-Identifier: MIT */
/*
 * guest-prev: the previous boot's pages a guest kept in a persistent ring
 * buffer (Linux >= 6.12: reserve_mem= and trace_instance=) and its agent
 * sends after a reboot (PREV_BEGIN, PREV_PAGES..., PREV_END). They become a
 * sample of that boot: under the aux of the boot this daemon held before
 * the guest's aux changed for a new boot id (so that merge puts them in the
 * same trace.dat), else under the aux in force (same kernel, same formats).
 *
 * Untrusted like everything from the guest: one set per session, at most
 * a ring's worth of pages per CPU (ring_size), counted against memory_max
 * as metadata, every page checked (page_scan); a set that breaks a rule is
 * dropped whole, counted (msgs_unexpected) and logged within the guest's
 * budget; a page that fails page_scan is left out and counted in the
 * sample (pages_rejected of its CPU).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "guest-int.h"
#include "log.h"
#include "page.h"

/* a region ending closer than this to the top of RAM is said in the reason */
#define VMT_PREV_GAP_WARN (16ull << 20)

struct vmt_guest_prev {
	/* the boot this daemon held last, before the aux changed boot id */
	bool have_last;
	uint32_t last_version;
	uint64_t last_id;
	char last_boot[VMT_STR_BOOTID];

	/* the set being received in this session */
	bool open, done;	/* done: a set came (or was refused) this session */
	struct vmt_prev_begin b;
	uint32_t max_per_cpu;
	uint32_t *npages;	/* per CPU */
	uint64_t *bad;		/* per CPU: pages that failed page_scan */
	struct vmt_buf *cpu;	/* per CPU: its pages, in order */
	uint64_t pages, rejected;
	uint64_t charged;	/* told to env->mem: the set being received */
	uint64_t job_charged;	/* and those handed to samples not yet written */
};

static struct vmt_guest_prev *prev_get(struct vmt_guest *g)
{
	if (!g->prev)
		g->prev = calloc(1, sizeof(*g->prev));
	return g->prev;
}

static void prev_drop(struct vmt_guest *g)
{
	struct vmt_guest_prev *p = g->prev;

	if (!p)
		return;
	for (uint32_t c = 0; p->cpu && c < p->b.ncpus; c++)
		buf_free(&p->cpu[c]);
	free(p->cpu);
	free(p->npages);
	free(p->bad);
	p->cpu = NULL;
	p->npages = NULL;
	p->bad = NULL;
	p->open = false;
	p->pages = p->rejected = 0;
	mem_charge_meta(g->env->mem, &p->charged, 0);
}

void guest_prev_free(struct vmt_guest *g)
{
	prev_drop(g);
	if (g->prev)
		mem_charge_meta(g->env->mem, &g->prev->job_charged, 0);
	free(g->prev);
	g->prev = NULL;
}

void guest_prev_written(struct vmt_guest *g, uint64_t bytes)
{
	struct vmt_guest_prev *p = g->prev;

	if (p)
		mem_charge_meta(g->env->mem, &p->job_charged, p->job_charged - VMT_MIN(bytes, p->job_charged));
}

void guest_prev_session(struct vmt_guest *g)
{
	prev_drop(g);
	if (g->prev)
		g->prev->done = false;
}

void guest_prev_note_boot(struct vmt_guest *g, const char *new_boot_id)
{
	struct vmt_guest_prev *p;

	if (!g->have_aux || !strcmp(g->aux.boot_id, new_boot_id) || !(p = prev_get(g)))
		return;
	/* its aux file must be on disk or queued: a bundle still held and not
	 * queued never will be (its window's dump was held back) */
	p->have_last = !g->aux.meta || g->aux_pending;
	if (!p->have_last)
		return;
	p->last_version = g->aux.version;
	p->last_id = g->aux.id;
	snprintf(p->last_boot, sizeof(p->last_boot), "%s", g->aux.boot_id);
}

static void prev_refuse(struct vmt_guest *g, const char *why)
{
	g->c.msgs_unexpected++;
	guest_complain(g, 0, "previous boot's pages refused: %s", why);
	prev_drop(g);
	if (g->prev)
		g->prev->done = true;
}

void guest_on_prev_begin(struct vmt_guest *g, const struct vmt_msg *msg)
{
	struct vmt_guest_prev *p = prev_get(g);
	struct vmt_prev_begin b;

	if (!p)
		return;
	if (g->state != GUEST_STREAMING || p->open || p->done) {
		prev_refuse(g, "PREV_BEGIN outside a streaming session, or a second set");
		return;
	}
	if (proto_get_prev_begin(msg->payload, msg->len, &b) < 0 || b.ncpus > g->nrings) {
		prev_refuse(g, "malformed PREV_BEGIN");
		return;
	}
	p->b = b;
	p->max_per_cpu = (uint32_t)VMT_MIN(g->conf.rec.ring_size / g->layout.page_size, UINT32_MAX);
	p->cpu = calloc(b.ncpus, sizeof(*p->cpu));
	p->npages = calloc(b.ncpus, sizeof(*p->npages));
	p->bad = calloc(b.ncpus, sizeof(*p->bad));
	if (!p->cpu || !p->npages || !p->bad) {
		prev_refuse(g, "no memory");
		return;
	}
	p->open = true;
}

void guest_on_prev_pages(struct vmt_guest *g, const struct vmt_msg *msg)
{
	struct vmt_guest_prev *p = g->prev;
	uint32_t ps = g->layout.page_size, cpu, n;

	if (!p || !p->open) {
		g->c.msgs_unexpected++;
		guest_complain(g, 0, "PREV_PAGES outside a set ignored");
		return;
	}
	cpu = get_le32(msg->payload);
	n = get_le32(msg->payload + 4);
	if (cpu >= p->b.ncpus || !n || n > VMT_PREV_PAGES_MAX || msg->len != 8 + (uint64_t)n * ps) {
		prev_refuse(g, "malformed PREV_PAGES");
		return;
	}
	if (p->npages[cpu] + n > p->max_per_cpu || p->pages + n > p->b.pages) {
		prev_refuse(g, "more pages than a ring holds, or than announced");
		return;
	}
	if (!mem_meta_fits(g->env->mem, (uint64_t)n * ps)) {
		prev_refuse(g, "memory_max reached");
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *page = msg->payload + 8 + (size_t)i * ps;
		struct vmt_page_info info;

		if (page_scan(&g->layout, page, &info) < 0) {
			p->rejected++;
			p->bad[cpu]++;
			continue;
		}
		if (buf_append(&p->cpu[cpu], page, ps) < 0) {
			prev_refuse(g, "no memory");
			return;
		}
		p->npages[cpu]++;
	}
	p->pages += n;
	mem_charge_meta(g->env->mem, &p->charged, p->charged + (uint64_t)n * ps);
}

/* What the sample says of itself: the guest's words, numbers only. */
static void prev_reason(const struct vmt_guest *g, const struct vmt_guest_prev *p, uint64_t kept,
			int32_t status, char *out, size_t n)
{
	const struct vmt_prev_begin *b = &p->b;
	size_t o;

	(void)g;
	o = (size_t)snprintf(out, n, VMT_PREV_BOOT_REASON ": %" PRIu64 " pages%s%s, text delta ", kept,
			     p->rejected ? ", some refused" : "", status < 0 ? ", read cut short" : "");
	if (o < n)
		o += (size_t)snprintf(out + o, n - o, b->flags & VMT_PREV_DELTA ? "%" PRId64 : "unknown",
				      b->text_delta);
	if (o < n && (b->flags & VMT_PREV_KMSG) && (b->cpus_lost & ((1ull << VMT_MIN(b->ncpus, 32u)) - 1)))
		o += (size_t)snprintf(out + o, n - o, "; CPUs 0x%x lost (the kernel found their buffers "
				      "invalid)", b->cpus_lost & (uint32_t)((1ull << VMT_MIN(b->ncpus, 32u)) - 1));
	if (o < n && (b->flags & VMT_PREV_GAP) && (uint64_t)b->top_gap_kib << 10 < VMT_PREV_GAP_WARN)
		o += (size_t)snprintf(out + o, n - o, "; region %u MiB below the top of RAM: firmware "
				      "may overwrite it", b->top_gap_kib >> 10);
	if (o < n && !p->have_last)
		snprintf(out + o, n - o, "; boot not held by this daemon");
}

void guest_on_prev_end(struct vmt_guest *g, const struct vmt_msg *msg)
{
	struct vmt_guest_prev *p = g->prev;
	struct vmt_prev_set set = { 0 };
	int32_t status = (int32_t)get_le32(msg->payload);
	uint32_t sent = get_le32(msg->payload + 4);
	uint64_t kept = 0;

	if (!p || !p->open) {
		g->c.msgs_unexpected++;
		guest_complain(g, 0, "PREV_END outside a set ignored");
		return;
	}
	if (sent != p->pages || p->pages != p->b.pages) {
		prev_refuse(g, "PREV_END does not count the pages that came");
		return;
	}
	for (uint32_t c = 0; c < p->b.ncpus; c++)
		kept += p->npages[c];
	set.ncpus = p->b.ncpus;
	set.npages = p->npages;
	set.cpu = p->cpu;
	set.rejected = p->bad;
	set.aux_version = p->have_last ? p->last_version : g->aux.version;
	set.aux_id = p->have_last ? p->last_id : g->aux.id;
	set.queue_aux = !p->have_last && g->aux.meta && !g->aux_pending;
	set.guest = g->conf.name;
	set.nrings = g->nrings;
	set.layout = &g->layout;
	set.trigger = (struct vmt_trigger){ .kind = VMT_TRIGGER_GUEST, .time_ns = now_realtime_ns(),
					    .value = kept };
	prev_reason(g, p, kept, status, set.trigger.reason, sizeof(set.trigger.reason));
	guest_log(g, VMT_LOG_NOTICE, 0, "%s", set.trigger.reason);
	if (kept && g->env->ev->prev_boot) {
		/* the sample takes the pages: counted until it is written */
		uint64_t bytes = kept * g->layout.page_size;

		mem_charge_meta(g->env->mem, &p->job_charged, p->job_charged + bytes);
		g->env->ev->prev_boot(g->env->owner, g, &set);
	}
	prev_drop(g);
	p->done = true;
}

uint64_t guest_prev_held(const struct vmt_guest *g)
{
	return g->prev ? g->prev->charged : 0;
}
