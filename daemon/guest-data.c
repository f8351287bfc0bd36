/* SPDX-License-Identifier: MIT */
/*
 * guest-data: a guest's pages, from its data channels (trace-path-cpuN)
 * into its per-CPU rings: read in big pieces within a budget, cut into
 * pages, reading paused while the next page is held by a dump and the dump
 * reserve is used up, resumed when the dump is written; bytes outside a
 * session drained and counted. And the rings themselves, within memory_max.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compress.h"
#include "guest-int.h"
#include "log.h"
#include "page.h"

/* Read of the control channel when a data channel closed: more than a
 * socket buffers, less than a flood could make it loop for long. */
#define CTL_DRAIN_MAX (4 * 1024 * 1024)

/* a compressed ring's raw slots take a callback's reading in (ring.h): the
 * budget and one more read of the bounce buffer (64 KiB) */
_Static_assert((READ_BUDGET_BYTES + 65536) / 4096 <= VMT_RING_BURST_PAGES,
	       "a data callback reads more than a compressed ring's slots take in");

/* ---- rings ------------------------------------------------------------ */

uint64_t guest_mem(const struct vmt_guest *g)
{
	uint64_t t = 0;

	for (uint32_t i = 0; i < g->nrings; i++)
		t += ring_bytes(&g->rings[i]);
	return t;
}

void guest_free_rings(struct vmt_guest *g)
{
	guest_unstore_rings(g);
	for (uint32_t i = 0; i < g->nrings; i++) {
		compressor_forget(g->env->comp, &g->rings[i]);
		ring_free(&g->rings[i]);
	}
	free(g->rings);
	free(g->stream_base);
	free(g->target_seq);
	free(g->stats);
	g->rings = NULL;
	g->stream_base = g->target_seq = NULL;
	g->stats = NULL;
	g->nrings = 0;
}

bool guest_rings_empty(const struct vmt_guest *g)
{
	for (uint32_t i = 0; i < g->nrings; i++)
		if (g->rings[i].count)
			return false;
	return true;
}

/* How a CPU's ring comes to be: made, or (an upgrade) handed over. */
struct ring_source {
	bool handed;		/* take the predecessor's where it checks out */
	bool bad;		/* one did not: made fresh instead */
	char *why;
	size_t why_len;
};

static int make_ring(struct vmt_guest *g, uint32_t cpu, uint32_t ncpus, uint64_t pages,
		     struct ring_source *src)
{
	char why[256];
	bool fill_lost;

	if (src && src->handed) {
		if (guest_take_ring(g, cpu, ncpus, &g->rings[cpu], &fill_lost, why, sizeof(why)) == 0) {
			if (fill_lost && !src->bad)
				snprintf(src->why, src->why_len, "%s", why);
			src->bad |= fill_lost;
			return 0;
		}
		if (!src->bad)
			snprintf(src->why, src->why_len, "%s", why);
		src->bad = true;
	}
	return g->conf.rec.compression != VMT_FRAME_NONE
		       ? ring_init_compressed(&g->rings[cpu], (uint32_t)pages, &g->layout)
		       : ring_init(&g->rings[cpu], (uint32_t)pages, &g->layout);
}

static int guest_alloc_rings(struct vmt_guest *g, uint32_t ncpus, uint32_t page_size,
			     struct ring_source *src)
{
	uint64_t pages = g->conf.rec.ring_size / page_size;
	int r = 0;

	if (pages < 1)
		pages = 1;
	if (pages > UINT32_MAX)
		pages = UINT32_MAX;
	if (!src || !src->handed)	/* handed over: the predecessor's, set by the caller */
		page_layout_default(&g->layout, page_size);
	g->rings = calloc(ncpus, sizeof(*g->rings));
	g->stream_base = calloc(ncpus, sizeof(*g->stream_base));
	g->target_seq = calloc(ncpus, sizeof(*g->target_seq));
	g->stats = calloc(ncpus, sizeof(*g->stats));
	if (!g->rings || !g->stream_base || !g->target_seq || !g->stats) {
		guest_free_rings(g);	/* no ring yet: the arrays */
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < ncpus; i++) {
		r = make_ring(g, i, ncpus, pages, src);
		if (r < 0)
			break;
		ring_set_pool(&g->rings[i], &g->env->mem->reserve);
		g->nrings = i + 1;
	}
	if (r < 0) {
		guest_free_rings(g);
		return r;
	}
	guest_log(g, VMT_LOG_INFO, 0, "rings: %u CPUs x %llu pages of %u bytes (%llu KiB)",
		  ncpus, (unsigned long long)pages, page_size,
		  (unsigned long long)(guest_mem(g) >> 10));
	return 0;
}

static int setup_rings(struct vmt_guest *g, uint32_t ncpus, uint32_t page_size, struct ring_source *src)
{
	uint64_t pages = VMT_MAX(g->conf.rec.ring_size / page_size, 1);
	uint64_t need = ring_bytes_planned((uint32_t)VMT_MIN(pages, UINT32_MAX), page_size,
					   g->conf.rec.compression != VMT_FRAME_NONE) * ncpus;
	struct vmt_mem *mem = g->env->mem;
	int r;

	if (mem_take_rings(mem, need) < 0) {
		log_guest(VMT_LOG_ERR, 0, g->conf.name,
			  "refused: rings of %llu KiB do not fit under memory_max (%llu KiB used by rings, "
			  "dump_reserve %llu KiB, memory_max %llu KiB)",
			  (unsigned long long)(need >> 10), (unsigned long long)(mem->rings >> 10),
			  (unsigned long long)(mem->reserve.bytes >> 10),
			  (unsigned long long)(mem->max >> 10));
		return -ENOSPC;
	}
	r = guest_alloc_rings(g, ncpus, page_size, src);
	mem_give_rings(mem, need);	/* what was allocated counts, not the estimate */
	if (r < 0)
		return r;
	mem->rings += guest_mem(g);
	/* handed over: the predecessor's memfds are in the fd store already */
	if (!src || !src->handed)
		guest_store_rings(g);
	return 0;
}

int guest_setup_rings(struct vmt_guest *g, uint32_t ncpus, uint32_t page_size)
{
	return setup_rings(g, ncpus, page_size, NULL);
}

int guest_setup_rings_handed(struct vmt_guest *g, uint32_t ncpus, uint32_t page_size, char *why,
			     size_t n)
{
	struct ring_source src = { .handed = true, .why = why, .why_len = n };
	int r;

	why[0] = 0;
	r = setup_rings(g, ncpus, page_size, &src);
	if (r < 0)
		return r;
	return src.bad ? -EPROTO : 0;
}

/* ---- reading --------------------------------------------------------- */

/*
 * The next page to fill is held by a dump being written and the dump
 * reserve is used up: stop reading this channel until a dump is written
 * (guest_resume). The guest's own ring buffer holds the trace meanwhile;
 * what it has to drop, it counts, and the pages say so.
 */
static void guest_pause(struct vmt_guest *g, uint32_t cpu)
{
	if (!g->data_src[cpu] || sd_event_source_set_enabled(g->data_src[cpu], SD_EVENT_OFF) < 0)
		return;
	g->c.read_pauses++;
	g->npaused++;
	guest_complain(g, 0, "cpu%u: reading paused: its next page is held by a dump being written "
		       "and dump_reserve is used up", cpu);
}

void guest_resume(struct vmt_guest *g)
{
	for (uint32_t i = 0; i < g->nrings; i++)
		ring_settle(&g->rings[i]);
	g->src_ops->resume(g->src);
}

void guest_compress(struct vmt_guest *g, uint32_t cpu)
{
	if (cpu < g->nrings)
		compressor_poke(g->env->comp, g, &g->rings[cpu], g->conf.rec.compression,
				(int)g->conf.rec.compression_level);
}

void guest_drain_data(struct vmt_guest *g)
{
	for (uint32_t i = 0; i < g->nchan; i++)
		if (channel_is_open(&g->data[i]))
			g->c.stale_bytes += channel_drain(&g->data[i]);
}

int guest_data_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct vmt_guest *g = userdata;
	uint8_t *buf = g->env->bounce;
	uint32_t cpu = 0;

	while (cpu < g->nchan && g->data_src[cpu] != s)
		cpu++;
	if (cpu == g->nchan)
		return 0;

	/*
	 * Big reads, then page-sized pieces into the ring: one read() per page
	 * would wake the writer on the other side of the pipe for every page.
	 * The budget keeps one busy guest from starving the others.
	 */
	for (uint32_t done = 0; done < READ_BUDGET_BYTES;) {
		bool stream = g->state == GUEST_STREAMING && cpu < g->nrings;
		uint64_t lost_pages, lost_events;
		size_t want = stream ? ring_room(&g->rings[cpu], g->env->bounce_size) : g->env->bounce_size;
		ssize_t n;

		if (!want) {
			guest_pause(g, cpu);
			break;
		}
		if (stream)
			compressor_collect(g->env->comp);
		n = read(fd, buf, want);

		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0) {
			/* what the agent said before it hung up still counts (its
			 * metadata, say): at most what the socket still holds, for
			 * its writer is gone */
			guest_ctl_read(g, CTL_DRAIN_MAX);
			if (channel_is_open(&g->data[cpu]))
				guest_disconnect(g, "data channel closed");
			return 0;
		}
		if (n < 0) {
			if (errno != EAGAIN) {
				guest_disconnect(g, strerror(errno));
				return 0;
			}
			break;
		}
		done += (uint32_t)n;
		if (g->taken_over_ns && stream)
			guest_first_read_taken_over(g);
		if (!stream) {
			/* no session: these bytes have no place in any stream */
			g->c.stale_bytes += (uint64_t)n;
			continue;
		}
		alive_heard(g, "pages");
		lost_pages = g->rings[cpu].c.pages_guest_lost;
		lost_events = g->rings[cpu].c.events_guest_lost;
		for (size_t off = 0; off < (size_t)n;) {
			struct vmt_ring *r = &g->rings[cpu];
			uint32_t room, k;
			uint8_t *p = ring_fill_space(r, &room);

			if (!p) {
				/* cannot happen after ring_room(); never loop on it */
				ring_reject_bytes(r, (uint64_t)n - off);
				guest_complain(g, 0, "cpu%u: %zu bytes without room dropped", cpu,
					       (size_t)n - off);
				break;
			}
			k = (uint32_t)VMT_MIN((size_t)room, (size_t)n - off);
			memcpy(p, buf + off, k);
			off += k;
			switch (ring_fill_commit(r, k)) {
			case 1:
				/* the oldest batch, as soon as it is due: a read
				 * budget is more pages than the raw slots keep spare */
				guest_compress(g, cpu);
				break;
			case -EBADMSG:
				guest_complain(g, 0, "cpu%u: page %llu rejected (bad commit or event length)",
					       cpu, (unsigned long long)(r->next_seq - 1));
				break;
			}
		}
		if (g->rings[cpu].c.pages_guest_lost != lost_pages)
			guest_warn_lost(g, cpu, g->rings[cpu].c.pages_guest_lost - lost_pages,
					g->rings[cpu].c.events_guest_lost - lost_events);
		if ((size_t)n < want)
			break;	/* drained for now */
	}
	guest_check_flushed(g);
	return 0;
}
