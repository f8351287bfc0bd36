/* SPDX-License-Identifier: MIT */
/*
 * guest-persist: a guest's rings in systemd's fd store, and the rings a
 * crashed predecessor left there, adopted when this guest's session
 * settles the aux version their pages decode with (recover.h, persist.h).
 *
 * A ring's fd goes into the store when the ring is made and out when it
 * goes. While a ring handed back for the same name waits for its guest,
 * the new ring stays out of the store: the old one keeps its place, so a
 * second crash before the session settles still finds the old window.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "compress.h"
#include "fdstore.h"
#include "guest-int.h"
#include "log.h"
#include "persist.h"
#include "recover.h"

/* The host's own source has no session to settle against: its rings stay
 * private. */
static bool guest_persists(const struct vmt_guest *g)
{
	return guest_has_session(g);
}

static void ring_name(const struct vmt_guest *g, uint32_t cpu, char *buf, size_t n)
{
	if (persist_ring_name(buf, n, g->conf.name, cpu) < 0)
		buf[0] = 0;
}

/* Whose pages each ring holds, in its header: a successor checks it. */
void guest_describe_rings(struct vmt_guest *g)
{
	for (uint32_t i = 0; i < g->nrings; i++)
		ring_describe(&g->rings[i], g->conf.name, i, g->nrings,
			      g->have_aux ? g->aux.version : 0, g->have_aux ? g->aux.id : 0);
}

static void store_one(struct vmt_guest *g, uint32_t cpu)
{
	char name[VMT_PERSIST_FDNAME_MAX];
	int r;

	ring_name(g, cpu, name, sizeof(name));
	r = name[0] ? fdstore_push(persist_ring_fd(&g->rings[cpu]), name) : -EINVAL;
	if (r < 0)
		guest_log(g, VMT_LOG_WARNING, r, "cpu%u: the ring is not in systemd's fd store "
			  "(a crash would lose it): %m", cpu);
}

void guest_store_rings(struct vmt_guest *g)
{
	if (!guest_persists(g))
		return;
	guest_describe_rings(g);
	for (uint32_t i = 0; i < g->nrings; i++)
		if (!recover_pending_cpu(g->env->recover, g->conf.name, i))
			store_one(g, i);
}

void guest_unstore_rings(struct vmt_guest *g)
{
	char name[VMT_PERSIST_FDNAME_MAX];

	if (!guest_persists(g))
		return;
	for (uint32_t i = 0; i < g->nrings; i++) {
		/* a ring handed back still waiting holds the name: not ours */
		if (recover_pending_cpu(g->env->recover, g->conf.name, i))
			continue;
		ring_name(g, i, name, sizeof(name));
		if (name[0])
			fdstore_remove(name);
	}
}

/* What this daemon would make for cpu itself, for persist to compare. */
static void expect_of(const struct vmt_guest *g, uint32_t cpu, struct vmt_persist_expect *w)
{
	*w = (struct vmt_persist_expect){
		.guest = g->conf.name, .cpu = cpu, .ncpus = g->nrings,
		.aux_version = g->aux.version, .aux_id = g->aux.id, .layout = g->layout,
		.ring_pages = (uint32_t)VMT_MIN(VMT_MAX(g->conf.rec.ring_size / g->layout.page_size, 1),
						UINT32_MAX),
		.compressed = g->conf.rec.compression != VMT_FRAME_NONE,
	};
}

/* Counted and said, once a ring: the daemon's own event, outside the
 * guest's log budget. */
static void adopted_note(struct vmt_guest *g, uint32_t cpu, const struct vmt_ring *r,
			 const struct vmt_persist_adopted *res)
{
	char lost[96] = "";

	g->env->recover->adopted++;
	g->recovered_lifetimes = VMT_MAX(g->recovered_lifetimes, res->lifetimes);
	/* said apart from the pages that failed their checks: a reason of its own */
	if (res->pages_no_reserve)
		snprintf(lost, sizeof(lost), ", %u pages lost with a dump reserve not handed back "
			 "or refused", res->pages_no_reserve);
	log_guest(VMT_LOG_NOTICE, 0, g->conf.name, "cpu%u: window adopted from a previous daemon: %llu pages "
		  "(%u in frames, %u brought home from the dump reserve), %u pages and %u frames "
		  "dropped%s, held %.1f s across %u lifetimes",
		  cpu, (unsigned long long)ring_window_pages(r), (unsigned)r->fr.pages, res->pages_home,
		  res->pages_dropped - res->pages_no_reserve, res->frames_dropped, lost,
		  (double)(now_realtime_ns() - res->created_ns) / 1e9, res->lifetimes);
}

/*
 * A crash's ring replaces the fresh one, which nobody has written to yet.
 * The partial page the predecessor was filling is torn: its bytes count as
 * rejected; a new session follows anyway.
 */
static void adopt_one(struct vmt_guest *g, uint32_t cpu, struct vmt_ring *nr)
{
	compressor_forget(g->env->comp, &g->rings[cpu]);
	ring_free(&g->rings[cpu]);
	ring_take_torn(&g->rings[cpu], nr);
}


/* A ring handed back that does not fit: said, counted, and ours takes its place. */
static void refuse_one(struct vmt_guest *g, uint32_t cpu, const char *why)
{
	char name[VMT_PERSIST_FDNAME_MAX];

	g->env->recover->refused++;
	log_guest(VMT_LOG_WARNING, 0, g->conf.name, "cpu%u: ring handed back refused, starting afresh: %s",
		  cpu, why);
	ring_name(g, cpu, name, sizeof(name));
	if (name[0])
		fdstore_remove(name);
	if (cpu < g->nrings)
		store_one(g, cpu);
}

/*
 * cpu's ring (of ncpus) handed back, checked and adopted into *r: the
 * predecessor's window. handed_over: an upgrade's (persist.h). -errno and
 * why when there is none or it does not check out (refused, counted).
 */
static int take_ring(struct vmt_guest *g, uint32_t cpu, uint32_t ncpus, bool handed_over,
		     struct vmt_ring *r, struct vmt_persist_adopted *res, char *why, size_t n)
{
	struct vmt_persist_expect want;
	int fd, err;

	fd = recover_take(g->env->recover, g->conf.name, cpu, NULL);
	if (fd < 0) {
		snprintf(why, n, "cpu%u: no ring handed over", cpu);
		return -ENOENT;
	}
	expect_of(g, cpu, &want);
	want.ncpus = ncpus;	/* while rings are made, g->nrings counts those so far */
	want.handed_over = handed_over;
	want.reserves = g->env->recover->reserves;
	want.nreserves = g->env->recover->nreserves;
	err = persist_adopt_ring(fd, &want, r, res, why, n);
	close(fd);
	if (err < 0) {
		refuse_one(g, cpu, why);
		return err;
	}
	ring_set_pool(r, &g->env->mem->reserve);
	adopted_note(g, cpu, r, res);
	return 0;
}

int guest_take_ring(struct vmt_guest *g, uint32_t cpu, uint32_t ncpus, struct vmt_ring *r,
		    bool *fill_lost, char *why, size_t n)
{
	struct vmt_persist_adopted res;
	int err = take_ring(g, cpu, ncpus, true, r, &res, why, n);

	*fill_lost = err == 0 && res.fill_dropped;
	if (*fill_lost)	/* the stream's place is lost */
		snprintf(why, n, "cpu%u: the page being filled was not in the memfd", cpu);
	return err;
}

/*
 * The aux version is settled: adopt what a crashed predecessor left for
 * this guest, ring by ring; rings of CPUs it no longer has are refused.
 */
void guest_recover_rings(struct vmt_guest *g)
{
	struct vmt_recover *rc = g->env->recover;
	uint32_t cpu;
	int fd;

	if (!guest_persists(g) || !recover_pending(rc, g->conf.name))
		return;
	for (uint32_t i = 0; i < g->nrings; i++) {
		struct vmt_persist_adopted res;
		struct vmt_ring nr;
		char why[256];

		if (take_ring(g, i, g->nrings, false, &nr, &res, why, sizeof(why)) == 0)
			adopt_one(g, i, &nr);
	}
	while ((fd = recover_take(rc, g->conf.name, UINT32_MAX, &cpu)) >= 0) {
		char why[96];

		close(fd);
		snprintf(why, sizeof(why), "CPU %u, and the guest has %u CPUs now", cpu, g->nrings);
		refuse_one(g, cpu, why);
	}
	recover_release_reserves(rc);
}


/* The window's age and the daemons that held it, from the rings' headers. */
void guest_window_held(const struct vmt_guest *g, uint64_t *since_ns, uint32_t *lifetimes)
{
	*since_ns = 0;
	*lifetimes = 0;
	for (uint32_t i = 0; i < g->nrings; i++) {
		const struct vmt_ringmem_hdr *h = &g->rings[i].rm->shadow;

		if (!*since_ns || h->created_ns < *since_ns)
			*since_ns = h->created_ns;
		*lifetimes = VMT_MAX(*lifetimes, h->lifetimes);
	}
}
