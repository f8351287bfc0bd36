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
#include "fleet.h"
#include "ctlproto.h"
#include "guest.h"
#include "discovery.h"
#include "log.h"
#include "lvmeta.h"
#include "manager.h"
#include "probe.h"
#include "sindex.h"
#include "tlv.h"
#include "vfile.h"

#define MAX_DUMP_GUESTS 64

/* guest_silence: no BPF, the guests' agents watched over their channels
 * (guest-alive.c); FILTERED counts the agents that said they stop. */
static void put_silence(struct vmt_buf *b, const struct vmt_manager *m, uint32_t id)
{
	struct vmt_alive_counters s = { 0 };

	for (uint32_t i = 0; i < m->guests.n; i++) {
		const struct vmt_alive_counters *c = guest_alive_counters(m->guests.v[i]);
		s.pings += c->pings;
		s.silences += c->silences;
		s.fired += c->fired;
		s.suppressed += c->suppressed;
		s.byes += c->byes;
	}
	ctl_msg_begin(b, VMT_CTL_DETECTOR, id);
	ctl_put_NAME(b, "guest_silence");
	ctl_put_ENABLED(b, (uint32_t)m->conf.silence.enabled);
	ctl_put_LOADED(b, (uint32_t)m->conf.silence.enabled);
	if (!m->conf.silence.enabled)
		ctl_put_MESSAGE(b, "disabled in the configuration");
	ctl_put_EVENTS(b, s.pings);
	ctl_put_SEEN(b, s.silences);
	ctl_put_FIRED(b, s.fired);
	ctl_put_TRIGGERS_SUPPRESSED(b, s.suppressed);
	ctl_put_DROPPED(b, 0);
	ctl_put_FILTERED(b, s.byes);
}

/* libvirt_events: no BPF, libvirt's lifecycle and watchdog events of the
 * guests discovery found in its folders (lvmeta-events.c). LOADED: its
 * connection is up; EVENTS: libvirt's events of our guests; SEEN: crashes
 * and watchdogs; DROPPED: too many waiting; FILTERED: a STOPPED after the
 * CRASHED already said (the same crash). */
static void put_lvevents(struct vmt_buf *b, const struct vmt_manager *m, uint32_t id)
{
	struct vmt_lvmeta_status st;
	bool on = m->conf.libvirt_events.enabled;
	char msg[600];

	lvmeta_status(m->lvmeta, &st);
	ctl_msg_begin(b, VMT_CTL_DETECTOR, id);
	ctl_put_NAME(b, "libvirt_events");
	ctl_put_ENABLED(b, (uint32_t)on);
	ctl_put_LOADED(b, (uint32_t)(on && m->lvmeta && !strcmp(st.state, "connected")));
	if (!on)
		ctl_put_MESSAGE(b, "disabled in the configuration");
	else if (!m->lvmeta || !strcmp(st.state, "idle"))
		ctl_put_MESSAGE(b, "no libvirt guest: not connected");
	else if (strcmp(st.state, "connected")) {
		snprintf(msg, sizeof(msg), "%s: %s", st.state, st.error[0] ? st.error : "no error yet");
		ctl_put_MESSAGE(b, msg);
	}
	ctl_put_EVENTS(b, st.events);
	ctl_put_SEEN(b, st.incidents);
	ctl_put_FIRED(b, st.fired);
	ctl_put_TRIGGERS_SUPPRESSED(b, st.suppressed);
	ctl_put_DROPPED(b, st.dropped);
	ctl_put_FILTERED(b, st.folded);
}

static void put_guest(struct vmt_buf *b, const struct vmt_guest *g, const struct vmt_dumps *ds,
		      struct vmt_fleet *fleet)
{
	const char *last_dump = dump_guest_last(ds, g);
	const char *labels = fleet_labels(fleet, guest_name(g));
	struct vmt_guest_status st;

	guest_status(g, &st);
	ctl_put_GUEST(b, st.name);
	ctl_put_STATE(b, st.state);
	ctl_put_UPTIME_NS(b, st.uptime_ns);
	ctl_put_NCPUS(b, st.ncpus);
	if (st.release)
		ctl_put_RELEASE(b, st.release);
	if (st.have_aux)
		ctl_put_AUX_VERSION(b, st.aux_version);
	ctl_put_PAGES(b, st.pages);
	ctl_put_CAPACITY(b, st.capacity);
	ctl_put_MEM_USED(b, st.mem_used);
	ctl_put_BYTES_IN(b, st.bytes_in);
	ctl_put_PAGES_IN(b, st.pages_in);
	ctl_put_EVENTS_IN(b, st.events_in);
	ctl_put_PAGES_OVERWRITTEN(b, st.pages_overwritten);
	ctl_put_PAGES_GUEST_LOST(b, st.pages_guest_lost);
	ctl_put_EVENTS_GUEST_LOST(b, st.events_guest_lost);
	ctl_put_PAGES_REJECTED(b, st.pages_rejected);
	ctl_put_BYTES_REJECTED(b, st.bytes_rejected + st.c.stale_bytes);
	ctl_put_CTL_REJECTED(b, guest_ctl_rejected_bytes(g));
	ctl_put_TS_BACKWARDS(b, st.ts_backwards);
	if (st.pages && st.first_ts != UINT64_MAX) {
		ctl_put_FIRST_TS(b, st.first_ts);
		ctl_put_LAST_TS(b, st.last_ts);
	}
	ctl_put_COMPRESSION(b, st.compression);
	ctl_put_PAGE_SIZE(b, st.page_size);
	ctl_put_FRAME_PAGES(b, st.frame_pages);
	ctl_put_FRAME_BYTES(b, st.frame_bytes);
	ctl_put_FRAMES_MADE(b, st.frames_made);
	ctl_put_PAGES_STORED_RAW(b, st.pages_stored_raw);
	ctl_put_FRAMES_OVERWRITTEN(b, st.frames_overwritten);
	if (last_dump[0])
		ctl_put_LAST_DUMP(b, last_dump);
	ctl_put_STALE_BYTES(b, st.c.stale_bytes);
	ctl_put_FLUSH_TIMEOUTS(b, st.c.flush_timeouts);
	ctl_put_SESSIONS(b, st.c.sessions);
	ctl_put_META_REJECTED(b, st.c.meta_rejected);
	ctl_put_TRIGGERS_SUPPRESSED(b, dump_guest_suppressed(ds, g));
	ctl_put_MSGS_UNEXPECTED(b, st.c.msgs_unexpected);
	ctl_put_FLUSH_BAD(b, st.c.flush_bad);
	ctl_put_AGENT_ERRORS(b, st.c.errors_from_agent);
	ctl_put_READ_PAUSES(b, st.c.read_pauses);
	ctl_put_PATHS_REFUSED(b, st.c.paths_refused);
	ctl_put_PAGES_DISCARDED(b, st.c.pages_discarded);
	ctl_put_HELLOS_DEFERRED(b, st.c.hellos_deferred);
	ctl_put_LATE_ANSWERS(b, st.late_answers);
	ctl_put_SILENCES(b, st.silences);
	ctl_put_FLAGS(b, st.discovered ? 1 : 0);
	if (!labels)
		labels = st.labels;
	if (labels[0])
		ctl_put_LABELS(b, labels);
	if (st.ncpus) {
		ctl_put_WINDOW_SINCE_NS(b, st.window_since_ns);
		ctl_put_LIFETIMES(b, st.lifetimes);
	}
}

static void manager_put_fleet(struct vmt_manager *m, struct vmt_buf *b)
{
	struct vmt_fleet_status st;
	struct vmt_lvmeta_status lv;

	fleet_status(m->fleet, &st);
	ctl_put_FLEET_STATE(b, !st.enabled ? "off" : st.state);
	if (!st.enabled)
		return;
	ctl_put_FLEET_SERVER(b, st.server);
	ctl_put_FLEET_ERROR(b, st.error);
	ctl_put_FLEET_QUEUE(b, st.queue);
	ctl_put_FLEET_UPLOADED(b, st.uploaded);
	ctl_put_FLEET_UPLOADED_BYTES(b, st.uploaded_bytes);
	ctl_put_FLEET_UPLOAD_FAILURES(b, st.upload_failures);
	ctl_put_FLEET_TRIGGERS(b, st.triggers);
	ctl_put_FLEET_REFUSED(b, st.refused);
	ctl_put_FLEET_REPLIES_REFUSED(b, st.replies_refused);
	ctl_put_FLEET_AUTH_FAILURES(b, st.auth_failures);
	ctl_put_FLEET_SUBJECTS(b, st.subjects);
	lvmeta_status(m->lvmeta, &lv);
	/* the connection may serve libvirt_events alone */
	if (!m->conf.fleet.libvirt_labels || !(m->conf.fleet.accept & VMT_FLEET_ACCEPT_LABEL))
		lv.state = "off";
	ctl_put_LIBVIRT_STATE(b, lv.state);
	if (!m->lvmeta || !strcmp(lv.state, "off"))
		return;
	ctl_put_LIBVIRT_ERROR(b, lv.error);
	ctl_put_LIBVIRT_READS(b, lv.reads);
	ctl_put_LIBVIRT_REFUSED(b, lv.refused);
	ctl_put_LIBVIRT_CONNECT_FAILURES(b, lv.connect_failures);
}

/* What discovery could not enter or probe, and the last such path. */
static void manager_put_unreadable(struct vmt_manager *m, struct vmt_buf *b)
{
	char path[PATH_MAX];
	int err = 0;
	uint64_t n = discovery_unreadable(m->discovery, path, sizeof(path), &err);

	ctl_put_DISCOVERY_UNREADABLE(b, n);
	if (n) {
		ctl_put_DISCOVERY_UNREADABLE_PATH(b, path);
		ctl_put_DISCOVERY_UNREADABLE_ERRNO(b, (uint32_t)err);
	}
}

static void handle_status(struct vmt_manager *m, struct vmt_client *cl, uint32_t id, bool with_daemon)
{
	struct vmt_buf b = { 0 };

	if (with_daemon) {
		ctl_msg_begin(&b, VMT_CTL_DAEMON, id);
		ctl_put_VERSION(&b, VMT_VERSION);
		ctl_put_UPTIME_NS(&b, now_monotonic_ns() - m->start_ns);
		ctl_put_MEM_USED(&b, mem_used(&m->mem));
		ctl_put_DUMPS(&b, m->dumps.dumps);
		ctl_put_DUMP_ERRORS(&b, m->dumps.dump_errors);
		ctl_put_DUMPS_PENDING(&b, m->dumps.npending);
		if (m->dumps.npending)
			ctl_put_DUMP_NEXT_NS(&b, dump_next_ns(&m->dumps));
		ctl_put_DUMPS_REFUSED(&b, m->dumps.dumps_refused);
		ctl_put_PATH(&b, m->conf.state_dir);
		ctl_put_MEM_CAP(&b, m->conf.memory_max);
		ctl_put_RESERVE(&b, m->mem.reserve.bytes);
		ctl_put_RESERVE_USED(&b, m->mem.reserve.in_use);
		ctl_put_RESERVE_PEAK(&b, m->mem.reserve.peak);
		ctl_put_TRIGGERS(&b, m->dumps.triggers_total);
		ctl_put_TRIGGERS_SUPPRESSED(&b, m->dumps.triggers_suppressed);
		ctl_put_REFUSED(&b, control_refused(m->control));
		ctl_put_GUESTS_REFUSED(&b, m->mem.rings_refused);
		ctl_put_DISCOVERY_REFUSED(&b, discovery_names_refused(m->discovery));
		manager_put_unreadable(m, &b);
		ctl_put_COMPRESS_CPU_NS(&b, m->comp.st.cpu_ns);
		ctl_put_COMPRESS_BUSY(&b, m->comp.st.busy);
		ctl_put_COMPRESS_OVER_SHARE(&b, m->comp.st.over_share);
		ctl_put_COMPRESS_TCODE_FALLBACK(&b, m->comp.st.tcode_fallback);
		ctl_put_COMPRESS_BYTES_IN(&b, m->comp.st.bytes_in);
		ctl_put_COMPRESS_BYTES_OUT(&b, m->comp.st.bytes_out);
		ctl_put_RINGS_ADOPTED(&b, m->recover.adopted);
		ctl_put_RINGS_REFUSED(&b, m->recover.refused);
		ctl_put_RINGS_UNCLAIMED(&b, m->recover.unclaimed);
		ctl_put_RESERVES_REFUSED(&b, m->recover.reserves_refused);
		ctl_put_UPGRADES(&b, m->upgrade.upgrades);
		ctl_put_SESSIONS_ADOPTED(&b, m->upgrade.adopted);
		ctl_put_SESSIONS_REFUSED(&b, m->upgrade.refused);
		manager_put_fleet(m, &b);
		control_send(cl, &b);
	}
	for (uint32_t i = 0; i < m->guests.n; i++) {
		ctl_msg_begin(&b, VMT_CTL_GUEST, id);
		put_guest(&b, m->guests.v[i], &m->dumps, m->fleet);
		control_send(cl, &b);
	}
	if (with_daemon) {
		struct vmt_probe_status st;

		probe_status(m->probe, &st);
		for (int k = 0; k < VMT_DET_COUNT; k++) {
			const struct vmt_probe_detector *d = &st.det[k];

			ctl_msg_begin(&b, VMT_CTL_DETECTOR, id);
			ctl_put_NAME(&b, d->name);
			ctl_put_ENABLED(&b, d->enabled);
			ctl_put_LOADED(&b, d->loaded);
			if (!d->loaded)
				ctl_put_MESSAGE(&b, !st.built ? "built without BPF" :
						  !d->enabled ? "disabled in the configuration" : d->reason);
			ctl_put_EVENTS(&b, d->events);
			ctl_put_SEEN(&b, d->seen);
			ctl_put_FIRED(&b, d->fired);
			ctl_put_TRIGGERS_SUPPRESSED(&b, d->suppressed);
			ctl_put_DROPPED(&b, d->dropped);
			ctl_put_FILTERED(&b, d->filtered);
			control_send(cl, &b);
		}
		put_silence(&b, m, id);
		control_send(cl, &b);
		put_lvevents(&b, m, id);
		control_send(cl, &b);
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
	/* counted first: a dump with nothing to wait for is answered (and
	 * the count taken back) before dump_request() returns */
	control_client_waits(cl, 1);
	r = dump_request(&m->dumps, &rq);
	if (r < 0)
		control_client_waits(cl, -1);
	if (r == -ENOENT)
		control_error(cl, id, ENOENT, "no such guest");
	else if (r == -EBUSY)
		control_error(cl, id, EBUSY, "suppressed by the cooldown or the rate limit");
	else if (r == -EAGAIN) {
		char why[160];

		snprintf(why, sizeof(why), "refused: %d dumps are waiting for their --post already, "
			 "as many as may; try again when one is done", VMT_DUMP_POSTED_MAX);
		control_error(cl, id, EAGAIN, why);
	} else if (r < 0) {
		control_error(cl, id, -r, strerror(-r));
	}
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
		ctl_put_PATH(&b, sm->path);
		ctl_put_GUEST(&b, sm->guest);
		ctl_put_CREATED_NS(&b, sm->created_ns);
		ctl_put_BYTES(&b, sm->bytes);
		if (!sm->info_error) {
			ctl_put_AUX_VERSION(&b, sm->aux_version);
			if (sm->text)
				ctl_put_REASON(&b, sm->text);
		} else {
			ctl_put_MESSAGE(&b, sm->text ? sm->text : "");
		}
		if (m->fleet)	/* as of the last retention pass */
			ctl_put_UPLOADED(&b, sm->uploaded);
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
		control_error(cl, id, error, error == -ECANCELED ?
			      "vmtraced stopped before the dump was taken" : strerror(-error));
		return;
	}
	for (uint32_t i = 0; i < nfiles; i++) {
		ctl_msg_begin(&b, VMT_CTL_FILE, id);
		ctl_put_PATH(&b, files[i]);
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
	case VMT_CTL_UPGRADE: {
		char why[512];
		int r = manager_upgrade_check(m, why, sizeof(why));

		if (r < 0) {
			control_error(cl, id, -r, why);
			break;
		}
		/* the answer goes before the execve: the successor has no client */
		control_end(cl, id);
		manager_upgrade(m);
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
