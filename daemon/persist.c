/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "persist.h"
#include "util.h"

#define SEALS_NEEDED (F_SEAL_SHRINK | F_SEAL_GROW)

/* Map the whole memfd, once its size cannot change under the mapping. */
static int map_fd(int fd, uint8_t **base, size_t *size, int prot, const char *what, char *why, size_t n)
{
	struct stat st;
	int seals;
	void *m;

	if (fstat(fd, &st) < 0) {
		snprintf(why, n, "fstat: %s", strerror(errno));
		return -errno;
	}
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || (seals & SEALS_NEEDED) != SEALS_NEEDED) {
		snprintf(why, n, "not a sealed memfd (seals %#x)", seals < 0 ? 0 : seals);
		return -EBADMSG;
	}
	if (st.st_size < VMT_RINGMEM_HDR_BYTES) {
		snprintf(why, n, "%lld bytes: too small for %s", (long long)st.st_size, what);
		return -EBADMSG;
	}
	/* not pre-faulted: the memfd's pages are all there (the predecessor
	 * populated them); a page table for the whole ring before the first
	 * read was most of an upgrade's take-over (bench upgrade) */
	m = mmap(NULL, (size_t)st.st_size, prot, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		snprintf(why, n, "mmap: %s", strerror(errno));
		return -errno;
	}
	*base = m;
	*size = (size_t)st.st_size;
	return 0;
}

/* The geometry the successor's own ring_size makes (ring.c, guest-data.c). */
static void expected_geom(const struct vmt_persist_expect *w, struct vmt_ringmem_geom *g, uint32_t *batch)
{
	uint32_t ps = w->layout.page_size;
	struct vmt_ring_plan p;

	*g = (struct vmt_ringmem_geom){ .page_size = ps, .nslots = w->ring_pages + 1 };
	*batch = 0;
	if (w->compressed && ring_plan_compressed(w->ring_pages, ps, &p)) {
		*g = (struct vmt_ringmem_geom){ .page_size = ps, .nslots = p.raw_pages + 1,
						.desc_cap = p.cap,
						.arena = p.arena };
		*batch = p.batch;
	}
}

#define DIFFER(what, have, want)                                                                  \
	do {                                                                                       \
		if ((uint64_t)(have) != (uint64_t)(want)) {                                        \
			snprintf(why, n, "%s %llu, not %llu", what, (unsigned long long)(have),    \
				 (unsigned long long)(want));                                      \
			return -EPROTO;                                                            \
		}                                                                                  \
	} while (0)

/* Whose ring, and the shape this daemon would give it: -EPROTO if not ours. */
static int check_geometry(const struct vmt_ringmem_hdr *h, const struct vmt_persist_expect *w,
			  size_t size, char *why, size_t n)
{
	const struct vmt_page_layout *pl = &w->layout;
	struct vmt_ringmem_layout l;
	struct vmt_ringmem_geom g;
	uint32_t batch;

	if (strncmp(h->guest, w->guest, sizeof(h->guest)) || !memchr(h->guest, 0, sizeof(h->guest))) {
		snprintf(why, n, "the ring of another guest (%.*s)", (int)sizeof(h->guest), h->guest);
		return -EPROTO;
	}
	DIFFER("aux version", h->aux_version, w->aux_version);
	DIFFER("aux content id", h->aux_id, w->aux_id);
	DIFFER("CPU", h->cpu, w->cpu);
	DIFFER("CPU count", h->ncpus, w->ncpus);
	DIFFER("page size", h->page_size, pl->page_size);
	if (h->ts_offset != pl->ts_offset || h->commit_offset != pl->commit_offset ||
	    h->commit_size != pl->commit_size || h->data_offset != pl->data_offset) {
		snprintf(why, n, "another page layout");
		return -EPROTO;
	}
	expected_geom(w, &g, &batch);
	ringmem_layout(&g, &l);
	DIFFER("raw pages", h->nr_pages + 1ull, g.nslots);
	DIFFER("pages per frame", h->batch, batch);
	DIFFER("frame descriptors", h->desc_cap, g.desc_cap);
	DIFFER("arena bytes", h->arena_bytes, g.arena);
	DIFFER("memfd size", size, l.size);
	DIFFER("header's size", h->size, l.size);
	if (h->pages_off != l.pages_off || h->slots_off != l.slots_off || h->desc_off != l.desc_off ||
	    h->arena_off != l.arena_off) {
		snprintf(why, n, "another placement of slots and frames");
		return -EPROTO;
	}
	return 0;
}

/* The state is within the geometry (the CRC passed: this is the writer's own). */
static int check_state(const struct vmt_ringmem_hdr *h, char *why, size_t n)
{
	if (h->head > h->nr_pages || h->count > h->nr_pages || h->fill >= h->page_size ||
	    (h->desc_cap && (h->fr_first >= h->desc_cap || h->fr_dead > h->desc_cap ||
			     h->fr_count > h->desc_cap - h->fr_dead || h->fr_head > h->arena_bytes)) ||
	    (!h->desc_cap && (h->fr_dead || h->fr_count))) {
		snprintf(why, n, "state out of the ring's bounds (head %u, count %u, frames %u+%u)",
			 h->head, h->count, h->fr_dead, h->fr_count);
		return -EBADMSG;
	}
	return 0;
}

/* A page the header covers is the one its record describes (scanned
 * unless handed over, persist.h). */
static bool page_agrees(const struct vmt_page_layout *l, const uint8_t *p, const struct vmt_ring_slot *rec,
			bool scan)
{
	struct vmt_page_info info;

	if (rec->flags & ~(uint32_t)(VMT_SLOT_MISSED | VMT_SLOT_AWAY))	/* unknown */
		return false;
	if (!scan)
		return true;
	if (page_scan(l, p, &info) < 0)
		return false;
	return info.first_ts == rec->first_ts && info.last_ts == rec->last_ts &&
	       info.events == rec->events && info.missed_flag == !!(rec->flags & VMT_SLOT_MISSED);
}

/* A stored frame's pages: each scans, and together they are its header. */
static bool stored_agrees(const struct vmt_page_layout *l, const uint8_t *p, const struct vmt_frame_hdr *h)
{
	uint64_t first = UINT64_MAX, last = 0, events = 0;
	bool missed = false;

	for (uint32_t i = 0; i < h->npages; i++) {
		struct vmt_page_info info;

		if (page_scan(l, p + (size_t)i * l->page_size, &info) < 0)
			return false;
		first = VMT_MIN(first, info.first_ts);
		last = VMT_MAX(last, info.last_ts);
		events += info.events;
		missed |= info.missed_flag;
	}
	return first == h->first_ts && last == h->last_ts && events == h->events &&
	       missed == !!(h->flags & VMT_FRAME_MISSED);
}

static bool frame_agrees(const struct vmt_frames *f, const struct vmt_frame_desc *d,
			 const struct vmt_page_layout *l, bool scan)
{
	uint8_t raw[VMT_FRAME_HDR_SIZE];
	struct vmt_frame_hdr h;
	char why[8];

	frame_hdr_put(raw, &d->h);
	if (frame_hdr_get(raw, sizeof(raw), &h, why, sizeof(why)) < 0)
		return false;
	if (!d->len || d->off > f->fm->bytes || d->len > f->fm->bytes - d->off)
		return false;
	if (h.codec == VMT_FRAME_NONE)
		return d->len == (uint64_t)h.npages * l->page_size &&
		       (!scan || stored_agrees(l, frames_payload(f, d), &h));
	return !scan || crc32c(0, frames_payload(f, d), d->len) == d->crc;
}

/* The reserve the ring's header names, if it was handed back and checked. */
static const struct vmt_persist_reserve *reserve_of(const struct vmt_ringmem_hdr *h,
						    const struct vmt_persist_expect *w)
{
	for (unsigned i = 0; h->reserve_id && i < w->nreserves; i++)
		if (w->reserves[i].id == h->reserve_id)
			return &w->reserves[i];
	return NULL;
}

/* Where a slot's page is: its own, or (AWAY) the reserve's page it names,
 * NULL when that reserve is not here or the page would be out of it. */
static const uint8_t *page_of(const struct vmt_ring *r, uint32_t s, const struct vmt_ring_slot *rec,
			      const struct vmt_persist_reserve *rv)
{
	uint32_t ps = r->layout.page_size;

	if (!(rec->flags & VMT_SLOT_AWAY))
		return r->pages[s];
	if (!rv || rec->away % VMT_POOL_UNIT || rec->away > rv->bytes || ps > rv->bytes - rec->away)
		return NULL;
	return rv->pages + rec->away;
}

/* How persist_adopt_ring checks what ring_adopt keeps. */
struct adopt_check {
	bool scan;	/* not handed over: every page and frame scanned */
	const struct vmt_persist_reserve *rv;
};

static bool check_frame(void *arg, const struct vmt_ring *r, const struct vmt_frame_desc *d)
{
	const struct adopt_check *k = arg;

	return frame_agrees(&r->fr, d, &r->layout, k->scan);
}

static const uint8_t *check_page_at(void *arg, const struct vmt_ring *r, uint32_t s,
				    const struct vmt_ring_slot *rec)
{
	const struct adopt_check *k = arg;

	return page_of(r, s, rec, k->rv);
}

static bool check_page(void *arg, const struct vmt_ring *r, const uint8_t *p,
		       const struct vmt_ring_slot *rec)
{
	const struct adopt_check *k = arg;

	/* a reserve page is scanned even when handed over: it is another
	 * memfd, outside what the ring's header vouches for */
	return page_agrees(&r->layout, p, rec, k->scan || (rec->flags & VMT_SLOT_AWAY));
}

/* The ring's state from the header, what checks out of its pages and frames. */
static void adopt_state(struct vmt_ring *r, const struct vmt_ringmem_hdr *h,
			const struct vmt_persist_expect *want, struct vmt_persist_adopted *res)
{
	struct adopt_check k = { .scan = !want->handed_over, .rv = reserve_of(h, want) };
	struct vmt_ring_adopt a = { .frame_ok = check_frame, .page_at = check_page_at,
				    .page_ok = check_page, .arg = &k,
				    /* ring_size's, as a fresh ring of it */
				    .mem_pages = want->ring_pages };
	struct vmt_ring_adopted got;

	ring_adopt(r, h, &a, &got);
	res->pages = got.pages;
	res->pages_dropped = got.pages_dropped;
	res->frames = got.frames;
	res->frames_dropped = got.frames_dropped;
	res->pages_home = got.pages_home;
	res->pages_no_reserve = got.pages_no_reserve;
	res->fill_dropped = got.fill_dropped;
	res->created_ns = h->created_ns;
	res->lifetimes = h->lifetimes + 1;
}

int persist_adopt_ring(int memfd, const struct vmt_persist_expect *want, struct vmt_ring *r,
		       struct vmt_persist_adopted *res, char *why, size_t n)
{
	struct vmt_persist_adopted none;
	struct vmt_ringmem_hdr h;
	struct vmt_ringmem *rm;
	uint8_t *base = NULL;
	size_t size = 0;
	int err, fd;

	res = res ? res : &none;
	memset(res, 0, sizeof(*res));
	err = map_fd(memfd, &base, &size, PROT_READ | PROT_WRITE, "a ring's memory", why, n);
	if (err < 0)
		return err;
	err = ringmem_read_hdr(base, size, &h, why, n);
	if (err == 0)
		err = check_geometry(&h, want, size, why, n);
	if (err == 0)
		err = check_state(&h, why, n);
	fd = err == 0 ? fcntl(memfd, F_DUPFD_CLOEXEC, 3) : -1;
	if (err == 0 && fd < 0) {
		err = -errno;
		snprintf(why, n, "dup: %s", strerror(errno));
	}
	if (err == 0 && (err = ringmem_wrap(&rm, fd, base, size, &h)) < 0)
		snprintf(why, n, "out of memory");
	if (err < 0) {
		munmap(base, size);
		if (fd >= 0)
			close(fd);
		return err;
	}
	err = ring_attach(r, rm, &want->layout);
	if (err < 0) {
		ringmem_unref(rm);
		snprintf(why, n, "out of memory");
		return err;
	}
	adopt_state(r, &h, want, res);
	rm->shadow.lifetimes = res->lifetimes;
	ringmem_fixed_changed(rm);
	ring_publish(r);
	return 0;
}

int persist_reserve_open(int memfd, struct vmt_persist_reserve *v, char *why, size_t n)
{
	struct vmt_reserve_hdr h;
	uint8_t *base = NULL;
	size_t size = 0;
	int err;

	memset(v, 0, sizeof(*v));
	/* read-only: its pages are copied home, never written here */
	err = map_fd(memfd, &base, &size, PROT_READ, "a dump reserve", why, n);
	if (err < 0)
		return err;
	err = pagepool_read_hdr(base, size, &h, why, n);
	if (err < 0) {
		munmap(base, size);
		return err;
	}
	*v = (struct vmt_persist_reserve){ .base = base, .size = size,
					   .pages = base + VMT_RESERVE_HDR_BYTES, .bytes = h.bytes,
					   .id = h.id };
	return 0;
}

void persist_reserve_close(struct vmt_persist_reserve *v)
{
	if (v->base)
		munmap(v->base, v->size);
	memset(v, 0, sizeof(*v));
}

int persist_ring_fd(const struct vmt_ring *r)
{
	return r->rm ? r->rm->fd : -EBADF;
}

static bool guest_name_ok(const char *s, size_t len)
{
	if (!len || len > 64 || s[0] == '.')
		return false;
	for (size_t i = 0; i < len; i++)
		if (!(s[i] >= 'a' && s[i] <= 'z') && !(s[i] >= 'A' && s[i] <= 'Z') &&
		    !(s[i] >= '0' && s[i] <= '9') && !strchr("_.-", s[i]))
			return false;
	return true;
}

int persist_ring_name(char *buf, size_t n, const char *guest, uint32_t cpu)
{
	int k;

	if (!guest_name_ok(guest, strlen(guest)))
		return -EINVAL;
	k = snprintf(buf, n, "ring/%s/%u", guest, cpu);
	return k < 0 || (size_t)k >= n || k >= VMT_PERSIST_FDNAME_MAX ? -EINVAL : 0;
}

int persist_ring_name_parse(const char *name, char *guest, size_t n, uint32_t *cpu)
{
	const char *g, *slash;
	char *end;
	unsigned long v;

	if (strncmp(name, "ring/", 5))
		return -EINVAL;
	g = name + 5;
	slash = strchr(g, '/');
	if (!slash || !guest_name_ok(g, (size_t)(slash - g)) || (size_t)(slash - g) >= n)
		return -EINVAL;
	if (slash[1] < '0' || slash[1] > '9')
		return -EINVAL;
	errno = 0;
	v = strtoul(slash + 1, &end, 10);
	if (errno || *end || v > UINT32_MAX)
		return -EINVAL;
	memcpy(guest, g, (size_t)(slash - g));
	guest[slash - g] = 0;
	*cpu = (uint32_t)v;
	return 0;
}
