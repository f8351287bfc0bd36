/* SPDX-License-Identifier: MIT */
/*
 * manager-ctl: what the manager answers on the control socket (control.c
 * checks who asks and parses the packet): STATUS and GUESTS from the
 * guests' and the daemon's counters, DUMP as a dump request answered when
 * its files are written, SAMPLES from the sample index, RELOAD.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"
#include "ctlproto.h"
#include "guest.h"
#include "log.h"
#include "manager.h"
#include "probe.h"
#include "sindex.h"
#include "vfile.h"

#define MAX_DUMP_GUESTS 64

static void put_guest(struct vmt_buf *b, const struct vmt_guest *g)
{
	uint64_t now = now_monotonic_ns();
	uint64_t pages = 0, cap = 0, in = 0, ow = 0, lost = 0, rej = 0, bytes = 0, ev = 0, prej = 0;
	uint64_t elost = 0, back = 0;

	for (uint32_t i = 0; i < g->nrings; i++) {
		const struct vmt_ring *r = &g->rings[i];
		pages += r->count;
		cap += r->nr_pages;
		in += r->c.pages_in;
		ow += r->c.pages_overwritten;
		lost += r->c.pages_guest_lost;
		elost += r->c.events_guest_lost;
		rej += r->c.bytes_rejected;
		prej += r->c.pages_rejected;
		bytes += r->c.bytes_in;
		ev += r->c.events_in;
		back += r->c.ts_backwards;
	}
	tlv_put_str(b, VMT_CTAG_GUEST, g->conf.name);
	tlv_put_str(b, VMT_CTAG_STATE, guest_state_name(g->state));
	tlv_put_u64(b, VMT_CTAG_UPTIME_NS, now - g->state_since_ns);
	tlv_put_u32(b, VMT_CTAG_NCPUS, g->nrings);
	if (g->have_hello)
		tlv_put_str(b, VMT_CTAG_RELEASE, g->hello.release);
	if (g->have_aux)
		tlv_put_u32(b, VMT_CTAG_AUX_VERSION, g->aux.version);
	tlv_put_u64(b, VMT_CTAG_PAGES, pages);
	tlv_put_u64(b, VMT_CTAG_CAPACITY, cap);
	tlv_put_u64(b, VMT_CTAG_MEM_USED, guest_mem(g));
	tlv_put_u64(b, VMT_CTAG_BYTES_IN, bytes);
	tlv_put_u64(b, VMT_CTAG_PAGES_IN, in);
	tlv_put_u64(b, VMT_CTAG_EVENTS_IN, ev);
	tlv_put_u64(b, VMT_CTAG_PAGES_OVERWRITTEN, ow);
	tlv_put_u64(b, VMT_CTAG_PAGES_GUEST_LOST, lost);
	tlv_put_u64(b, VMT_CTAG_EVENTS_GUEST_LOST, elost);
	tlv_put_u64(b, VMT_CTAG_PAGES_REJECTED, prej);
	tlv_put_u64(b, VMT_CTAG_BYTES_REJECTED, rej + g->c.stale_bytes);
	tlv_put_u64(b, VMT_CTAG_CTL_REJECTED, guest_ctl_rejected_bytes(g));
	tlv_put_u64(b, VMT_CTAG_TS_BACKWARDS, back);
	/* the window: from the oldest page held to the newest, over all CPUs */
	if (pages) {
		uint64_t first = UINT64_MAX, last = 0;
		for (uint32_t i = 0; i < g->nrings; i++) {
			const struct vmt_ring *r = &g->rings[i];
			if (!r->count)
				continue;
			first = VMT_MIN(first, ring_slot(r, 0)->first_ts);
			last = VMT_MAX(last, ring_slot(r, r->count - 1)->last_ts);
		}
		tlv_put_u64(b, VMT_CTAG_FIRST_TS, first);
		tlv_put_u64(b, VMT_CTAG_LAST_TS, last);
	}
	if (g->last_dump[0])
		tlv_put_str(b, VMT_CTAG_LAST_DUMP, g->last_dump);
	tlv_put_u64(b, VMT_CTAG_STALE_BYTES, g->c.stale_bytes);
	tlv_put_u64(b, VMT_CTAG_FLUSH_TIMEOUTS, g->c.flush_timeouts);
	tlv_put_u64(b, VMT_CTAG_SESSIONS, g->c.sessions);
	tlv_put_u64(b, VMT_CTAG_META_REJECTED, g->c.meta_rejected);
	tlv_put_u64(b, VMT_CTAG_TRIGGERS_SUPPRESSED, g->c.triggers_suppressed);
	tlv_put_u64(b, VMT_CTAG_MSGS_UNEXPECTED, g->c.msgs_unexpected);
	tlv_put_u64(b, VMT_CTAG_FLUSH_BAD, g->c.flush_bad);
	tlv_put_u64(b, VMT_CTAG_AGENT_ERRORS, g->c.errors_from_agent);
	tlv_put_u64(b, VMT_CTAG_READ_PAUSES, g->c.read_pauses);
	tlv_put_u64(b, VMT_CTAG_PATHS_REFUSED, g->c.paths_refused);
	tlv_put_u64(b, VMT_CTAG_PAGES_DISCARDED, g->c.pages_discarded);
	tlv_put_u64(b, VMT_CTAG_HELLOS_DEFERRED, g->c.hellos_deferred);
	tlv_put_u32(b, VMT_CTAG_FLAGS, g->discovered ? 1 : 0);
}

static void handle_status(struct vmt_manager *m, struct vmt_client *cl, uint32_t id, bool with_daemon)
{
	struct vmt_buf b = { 0 };

	if (with_daemon) {
		ctl_msg_begin(&b, VMT_CTL_DAEMON, id);
		tlv_put_str(&b, VMT_CTAG_VERSION, VMT_VERSION);
		tlv_put_u64(&b, VMT_CTAG_UPTIME_NS, now_monotonic_ns() - m->start_ns);
		tlv_put_u64(&b, VMT_CTAG_MEM_USED, mem_used(&m->mem));
		tlv_put_u64(&b, VMT_CTAG_DUMPS, m->dumps.dumps);
		tlv_put_u64(&b, VMT_CTAG_DUMP_ERRORS, m->dumps.dump_errors);
		tlv_put_str(&b, VMT_CTAG_PATH, m->conf.state_dir);
		tlv_put_u64(&b, VMT_CTAG_MEM_CAP, m->conf.memory_max);
		tlv_put_u64(&b, VMT_CTAG_RESERVE, m->mem.reserve.bytes);
		tlv_put_u64(&b, VMT_CTAG_RESERVE_USED, m->mem.reserve.in_use);
		tlv_put_u64(&b, VMT_CTAG_RESERVE_PEAK, m->mem.reserve.peak);
		tlv_put_u64(&b, VMT_CTAG_TRIGGERS, m->dumps.triggers_total);
		tlv_put_u64(&b, VMT_CTAG_TRIGGERS_SUPPRESSED, m->dumps.triggers_suppressed);
		tlv_put_u64(&b, VMT_CTAG_REFUSED, control_refused(m->control));
		tlv_put_u64(&b, VMT_CTAG_GUESTS_REFUSED, m->mem.rings_refused);
		control_send(cl, &b);
	}
	for (uint32_t i = 0; i < m->guests.n; i++) {
		ctl_msg_begin(&b, VMT_CTL_GUEST, id);
		put_guest(&b, m->guests.v[i]);
		control_send(cl, &b);
	}
	if (with_daemon) {
		struct vmt_probe_status st;

		probe_status(m->probe, &st);
		for (int k = 0; k < VMT_DET_COUNT; k++) {
			const struct vmt_probe_detector *d = &st.det[k];

			ctl_msg_begin(&b, VMT_CTL_DETECTOR, id);
			tlv_put_str(&b, VMT_CTAG_NAME, d->name);
			tlv_put_u32(&b, VMT_CTAG_ENABLED, d->enabled);
			tlv_put_u32(&b, VMT_CTAG_LOADED, d->loaded);
			if (!d->loaded)
				tlv_put_str(&b, VMT_CTAG_MESSAGE, !st.built ? "built without BPF" :
						  !d->enabled ? "disabled in the configuration" : d->reason);
			tlv_put_u64(&b, VMT_CTAG_EVENTS, d->events);
			tlv_put_u64(&b, VMT_CTAG_SEEN, d->seen);
			tlv_put_u64(&b, VMT_CTAG_FIRED, d->fired);
			tlv_put_u64(&b, VMT_CTAG_TRIGGERS_SUPPRESSED, d->suppressed);
			tlv_put_u64(&b, VMT_CTAG_DROPPED, d->dropped);
			control_send(cl, &b);
		}
	}
	buf_free(&b);
	control_end(cl, id);
}

static void handle_dump(struct vmt_manager *m, struct vmt_client *cl, uint32_t id, const uint8_t *p,
			uint32_t len)
{
	struct vmt_trigger t = { .kind = VMT_TRIGGER_CONTROL, .pid = (uint32_t)control_client_pid(cl),
				 .time_ns = now_realtime_ns() };
	char names[MAX_DUMP_GUESTS][VMT_NAME_MAX];
	char *ptrs[MAX_DUMP_GUESTS];
	struct vmt_dump_req rq = { 0 };
	uint32_t n = 0;
	struct vmt_tlv tv;
	size_t pos = 0;
	int r;

	snprintf(t.reason, sizeof(t.reason), "vmtracectl dump (pid %d)", (int)control_client_pid(cl));
	while (tlv_next(p, len, &pos, &tv) > 0) {
		if (tv.tag == VMT_CTAG_GUEST) {
			if (n == MAX_DUMP_GUESTS) {
				control_error(cl, id, E2BIG, "too many guests in one request");
				return;
			}
			if (tlv_str(&tv, names[n], sizeof(names[n])) < 0 || !name_is_valid(names[n])) {
				control_error(cl, id, EINVAL, "invalid guest name");
				return;
			}
			ptrs[n] = names[n];
			n++;
		} else if (tv.tag == VMT_CTAG_WINDOW_NS) {
			if (tlv_u64(&tv, &rq.window_ns) < 0) {
				control_error(cl, id, EINVAL, "invalid window");
				return;
			}
		} else if (tv.tag == VMT_CTAG_POST_NS) {
			if (tlv_u64(&tv, &rq.post_ns) < 0 || rq.post_ns > 3600 * 1000000000ull) {
				control_error(cl, id, EINVAL, "invalid --post (at most an hour)");
				return;
			}
		} else if (tv.tag == VMT_CTAG_REASON) {
			char reason[VMT_REASON_MAX - 40];
			if (tlv_str(&tv, reason, sizeof(reason)) < 0) {
				control_error(cl, id, EINVAL, "invalid reason");
				return;
			}
			snprintf(t.reason, sizeof(t.reason), "%s (vmtracectl, pid %d)", reason,
				 (int)control_client_pid(cl));
		}
	}
	rq.names = ptrs;
	rq.n = n;
	rq.trigger = &t;
	rq.client = cl;
	rq.request_id = id;
	r = dump_request(&m->dumps, &rq);
	if (r == 0)
		control_client_waits(cl, 1);
	if (r == -ENOENT)
		control_error(cl, id, ENOENT, "no such guest");
	else if (r == -EBUSY)
		control_error(cl, id, EBUSY, "suppressed by the cooldown or the rate limit");
	else if (r < 0)
		control_error(cl, id, -r, strerror(-r));
}

/* From the index the writer keeps (sindex.h): no file is opened here, in
 * the loop, whatever a read-only client asks and however many samples. */
static void handle_samples(struct vmt_manager *m, struct vmt_client *cl, uint32_t id, const uint8_t *p,
			   uint32_t len)
{
	const struct vmt_sindex *ix = &m->samples;
	char guest[VMT_NAME_MAX] = "";
	struct vmt_buf b = { 0 };
	struct vmt_tlv tv;
	size_t pos = 0;

	while (tlv_next(p, len, &pos, &tv) > 0)
		if (tv.tag == VMT_CTAG_GUEST && (tlv_str(&tv, guest, sizeof(guest)) < 0 || !name_is_valid(guest))) {
			control_error(cl, id, EINVAL, "invalid guest name");
			return;
		}
	if (!ix->built && ix->error < 0) {
		control_error(cl, id, -ix->error, strerror(-ix->error));
		return;
	}
	/* newest first */
	for (size_t i = ix->n; i-- > 0;) {
		const struct vmt_sindex_entry *sm = &ix->v[i];

		if (guest[0] && strcmp(guest, sm->guest))
			continue;
		ctl_msg_begin(&b, VMT_CTL_FILE, id);
		tlv_put_str(&b, VMT_CTAG_PATH, sm->path);
		tlv_put_str(&b, VMT_CTAG_GUEST, sm->guest);
		tlv_put_u64(&b, VMT_CTAG_CREATED_NS, sm->created_ns);
		tlv_put_u64(&b, VMT_CTAG_BYTES, sm->bytes);
		if (!sm->info_error) {
			tlv_put_u32(&b, VMT_CTAG_AUX_VERSION, sm->aux_version);
			if (sm->text)
				tlv_put_str(&b, VMT_CTAG_REASON, sm->text);
		} else {
			tlv_put_str(&b, VMT_CTAG_MESSAGE, sm->text ? sm->text : "");
		}
		if (b.len > VMT_CTL_MAX_MSG - 64)
			continue;
		control_send(cl, &b);
	}
	buf_free(&b);
	control_end(cl, id);
}

void manager_answer_dump(struct vmt_client *cl, uint32_t id, char *const *files, uint32_t nfiles,
			 int error)
{
	struct vmt_buf b = { 0 };

	control_client_waits(cl, -1);
	if (!nfiles && error < 0) {
		control_error(cl, id, error, strerror(-error));
		return;
	}
	for (uint32_t i = 0; i < nfiles; i++) {
		ctl_msg_begin(&b, VMT_CTL_FILE, id);
		tlv_put_str(&b, VMT_CTAG_PATH, files[i]);
		control_send(cl, &b);
	}
	buf_free(&b);
	if (error < 0)
		control_error(cl, id, error, "some samples could not be written");
	else
		control_end(cl, id);
}


void manager_ctl_request(void *owner, struct vmt_client *cl, unsigned type, uint32_t id,
			 const uint8_t *p, uint32_t len)
{
	struct vmt_manager *m = owner;

	switch (type) {
	case VMT_CTL_STATUS:
		handle_status(m, cl, id, true);
		break;
	case VMT_CTL_GUESTS:
		handle_status(m, cl, id, false);
		break;
	case VMT_CTL_DUMP:
		handle_dump(m, cl, id, p, len);
		break;
	case VMT_CTL_SAMPLES:
		handle_samples(m, cl, id, p, len);
		break;
	case VMT_CTL_RELOAD: {
		char err[1024];
		if (manager_reload(m, err, sizeof(err)) < 0)
			control_error(cl, id, EINVAL, err);
		else
			control_end(cl, id);
		break;
	}
	default:
		control_bad_request(cl);
		control_error(cl, id, EOPNOTSUPP, "not a request");
		break;
	}
}

void manager_ctl_gone(void *owner, struct vmt_client *cl)
{
	dump_forget_client(&((struct vmt_manager *)owner)->dumps, cl);
}
