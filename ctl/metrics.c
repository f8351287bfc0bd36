/* SPDX-License-Identifier: MIT */
/*
 * vmtracectl metrics: every counter of STATUS in Prometheus' text
 * exposition format (version 0.0.4), for node_exporter's textfile collector
 * (units/vmtraced-metrics.timer). The answer is read whole first: a
 * family's samples must stand together, and a failed request must print
 * nothing but vmtraced_up 0.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "ctlproto.h"
#include "status.h"

#define MAX_TAG 256	/* above any tag ctlproto.h defines */

enum mkind { COUNTER, GAUGE };

/* One record of the answer, copied out of the walk. */
struct mrec {
	unsigned type;
	char label[256];	/* GUEST or NAME */
	char s1[256], s2[256];	/* DAEMON: VERSION, PATH; GUEST: STATE, RELEASE */
	bool have[MAX_TAG];
	uint64_t num[MAX_TAG];
};

struct mset {
	struct mrec *v;
	size_t n, cap;
};

/*
 * What each numeric tag of each record is called here. A tag not listed is
 * still printed (an untyped family named after the tag: a newer daemon's
 * counter is not lost); tags read otherwise are listed with a NULL name.
 */
static const struct metric {
	unsigned type, tag;
	const char *name;
	enum mkind kind;
	bool ns;	/* nanoseconds, printed as seconds */
	const char *help;
} metrics[] = {
	{ VMT_CTL_DAEMON, VMT_CTAG_UPTIME_NS, "vmtraced_uptime_seconds", GAUGE, true, "Time since vmtraced started." },
	{ VMT_CTL_DAEMON, VMT_CTAG_MEM_USED, "vmtraced_memory_bytes", GAUGE, false, "Memory of the guests' rings and the metadata they hold (the dump reserve apart)." },
	{ VMT_CTL_DAEMON, VMT_CTAG_MEM_CAP, "vmtraced_memory_max_bytes", GAUGE, false, "memory_max: what that memory may reach." },
	{ VMT_CTL_DAEMON, VMT_CTAG_RESERVE, "vmtraced_dump_reserve_bytes", GAUGE, false, "Size of the dump reserve." },
	{ VMT_CTL_DAEMON, VMT_CTAG_RESERVE_USED, "vmtraced_dump_reserve_used_bytes", GAUGE, false, "Dump reserve borrowed now." },
	{ VMT_CTL_DAEMON, VMT_CTAG_RESERVE_PEAK, "vmtraced_dump_reserve_peak_bytes", GAUGE, false, "Most of the dump reserve ever borrowed." },
	{ VMT_CTL_DAEMON, VMT_CTAG_DUMPS, "vmtraced_dumps_total", COUNTER, false, "Dumps written." },
	{ VMT_CTL_DAEMON, VMT_CTAG_DUMP_ERRORS, "vmtraced_dump_failures_total", COUNTER, false, "Dumps that failed." },
	{ VMT_CTL_DAEMON, VMT_CTAG_DUMPS_PENDING, "vmtraced_dumps_pending", GAUGE, false, "Dumps waiting to fire (their coalescing window or --post)." },
	{ VMT_CTL_DAEMON, VMT_CTAG_DUMP_NEXT_NS, "vmtraced_dump_next_seconds", GAUGE, true, "Time until the soonest pending dump fires (0: due, after the one under way)." },
	{ VMT_CTL_DAEMON, VMT_CTAG_DUMPS_REFUSED, "vmtraced_dumps_refused_total", COUNTER, false, "Dump requests with a --post refused: as many such dumps were waiting as may." },
	{ VMT_CTL_DAEMON, VMT_CTAG_TRIGGERS, "vmtraced_triggers_total", COUNTER, false, "Dump triggers of every kind." },
	{ VMT_CTL_DAEMON, VMT_CTAG_TRIGGERS_SUPPRESSED, "vmtraced_triggers_suppressed_total", COUNTER, false, "Triggers held back by the cooldown or the rate limit." },
	{ VMT_CTL_DAEMON, VMT_CTAG_REFUSED, "vmtraced_control_refused_total", COUNTER, false, "Control-socket connections refused." },
	{ VMT_CTL_DAEMON, VMT_CTAG_GUESTS_REFUSED, "vmtraced_guests_refused_total", COUNTER, false, "Guest rings refused under memory_max." },
	{ VMT_CTL_DAEMON, VMT_CTAG_COMPRESS_CPU_NS, "vmtraced_compress_cpu_seconds_total", COUNTER, true, "CPU time the compressor thread spent." },
	{ VMT_CTL_DAEMON, VMT_CTAG_COMPRESS_BUSY, "vmtraced_compress_busy_total", COUNTER, false, "Batches due that found every compression job taken." },
	{ VMT_CTL_DAEMON, VMT_CTAG_COMPRESS_OVER_SHARE, "vmtraced_compress_over_share_total", COUNTER, false, "Batches due that waited because their guest held its share of the compression jobs." },
	{ VMT_CTL_DAEMON, VMT_CTAG_COMPRESS_TCODE_FALLBACK, "vmtraced_compress_tcode_fallback_total", COUNTER, false, "Batches of a tcode ring made zstd frames: the guest's formats not in yet, or pages the transcoder could not shrink." },
	{ VMT_CTL_DAEMON, VMT_CTAG_COMPRESS_BYTES_IN, "vmtraced_compress_input_bytes_total", COUNTER, false, "Page bytes compressed into frames." },
	{ VMT_CTL_DAEMON, VMT_CTAG_COMPRESS_BYTES_OUT, "vmtraced_compress_output_bytes_total", COUNTER, false, "Bytes of the frames made." },
	{ VMT_CTL_DAEMON, VMT_CTAG_RINGS_ADOPTED, "vmtraced_rings_adopted_total", COUNTER, false, "Rings a crashed predecessor left in systemd's fd store, taken over." },
	{ VMT_CTL_DAEMON, VMT_CTAG_RINGS_REFUSED, "vmtraced_rings_refused_total", COUNTER, false, "Rings handed back that did not validate; their guest started afresh." },
	{ VMT_CTL_DAEMON, VMT_CTAG_RESERVES_REFUSED, "vmtraced_reserves_refused_total", COUNTER, false, "Dump reserves handed back that did not validate; the pages a dump had sent there were dropped." },
	{ VMT_CTL_DAEMON, VMT_CTAG_RINGS_UNCLAIMED, "vmtraced_rings_unclaimed_total", COUNTER, false, "Rings handed back that no guest claimed, closed." },
	{ VMT_CTL_DAEMON, VMT_CTAG_UPGRADES, "vmtraced_upgrades_total", COUNTER, false, "Upgrade hand-overs (execve of the installed binary, same pid) this process went through." },
	{ VMT_CTL_DAEMON, VMT_CTAG_SESSIONS_ADOPTED, "vmtraced_upgrade_sessions_adopted_total", COUNTER, false, "Guest sessions taken over at the last upgrade hand-over." },
	{ VMT_CTL_DAEMON, VMT_CTAG_SESSIONS_REFUSED, "vmtraced_upgrade_sessions_refused_total", COUNTER, false, "Guest sessions started afresh at the last upgrade hand-over: their state did not validate." },
	{ VMT_CTL_DAEMON, VMT_CTAG_FLEET_QUEUE, "vmtraced_fleet_queue", GAUGE, false, "Samples and aux files on disk not yet uploaded to the fleet's object store." },
	{ VMT_CTL_DAEMON, VMT_CTAG_FLEET_UPLOADED, "vmtraced_fleet_uploaded_total", COUNTER, false, "Files uploaded to the fleet's object store by this process." },
	{ VMT_CTL_DAEMON, VMT_CTAG_FLEET_UPLOADED_BYTES, "vmtraced_fleet_uploaded_bytes_total", COUNTER, false, "Bytes uploaded to the fleet's object store by this process." },
	{ VMT_CTL_DAEMON, VMT_CTAG_FLEET_UPLOAD_FAILURES, "vmtraced_fleet_upload_failures_total", COUNTER, false, "Upload passes that failed (retried with backoff)." },
	{ VMT_CTL_DAEMON, VMT_CTAG_FLEET_TRIGGERS, "vmtraced_fleet_triggers_total", COUNTER, false, "Dumps asked for over NATS and taken." },
	{ VMT_CTL_DAEMON, VMT_CTAG_FLEET_REFUSED, "vmtraced_fleet_refused_total", COUNTER, false, "Dump requests over NATS refused: malformed, over budget, unknown guest, or a flood." },
	{ VMT_CTL_DAEMON, VMT_CTAG_FLEET_REPLIES_REFUSED, "vmtraced_fleet_replies_refused_total", COUNTER, false, "Dump requests over NATS dropped unanswered: their reply subject was not under the inbox prefix." },
	{ VMT_CTL_DAEMON, VMT_CTAG_FLEET_AUTH_FAILURES, "vmtraced_fleet_auth_failures_total", COUNTER, false, "Connections to NATS refused for their credentials." },
	{ VMT_CTL_DAEMON, VMT_CTAG_FLEET_SUBJECTS, "vmtraced_fleet_subjects", GAUGE, false, "NATS subjects this host is subscribed to (its host subject and one per label)." },
	{ VMT_CTL_DAEMON, VMT_CTAG_LIBVIRT_READS, "vmtraced_fleet_libvirt_reads_total", COUNTER, false, "Guests' labels metadata read from libvirt." },
	{ VMT_CTL_DAEMON, VMT_CTAG_LIBVIRT_REFUSED, "vmtraced_fleet_libvirt_refused_total", COUNTER, false, "Guests' labels metadata from libvirt refused (size, XML, a key or value)." },
	{ VMT_CTL_DAEMON, VMT_CTAG_LIBVIRT_CONNECT_FAILURES, "vmtraced_fleet_libvirt_connect_failures_total", COUNTER, false, "Failed connections to libvirt for the guests' labels." },
	{ VMT_CTL_DAEMON, VMT_CTAG_DISCOVERY_REFUSED, "vmtraced_discovery_refused_total", COUNTER, false, "Guest folders found by discovery whose name cannot be a guest's." },
	{ VMT_CTL_DAEMON, VMT_CTAG_DISCOVERY_UNREADABLE, "vmtraced_discovery_unreadable_total", COUNTER, false, "Discovery folders, guest folders and control ports the daemon could not enter or probe (each rescan counts again)." },

	{ VMT_CTL_GUEST, VMT_CTAG_UPTIME_NS, "vmtraced_guest_state_seconds", GAUGE, true, "Time the guest has been in its state." },
	{ VMT_CTL_GUEST, VMT_CTAG_NCPUS, "vmtraced_guest_cpus", GAUGE, false, "Guest CPUs, one ring each." },
	{ VMT_CTL_GUEST, VMT_CTAG_AUX_VERSION, "vmtraced_guest_aux_version", GAUGE, false, "Version of the aux file in force (one per guest boot)." },
	{ VMT_CTL_GUEST, VMT_CTAG_PAGES, "vmtraced_guest_ring_pages", GAUGE, false, "Pages held in the rings." },
	{ VMT_CTL_GUEST, VMT_CTAG_CAPACITY, "vmtraced_guest_ring_capacity_pages", GAUGE, false, "Pages the rings hold when full." },
	{ VMT_CTL_GUEST, VMT_CTAG_MEM_USED, "vmtraced_guest_memory_bytes", GAUGE, false, "Memory of the guest's rings." },
	{ VMT_CTL_GUEST, VMT_CTAG_BYTES_IN, "vmtraced_guest_received_bytes_total", COUNTER, false, "Data bytes received into the rings." },
	{ VMT_CTL_GUEST, VMT_CTAG_PAGES_IN, "vmtraced_guest_pages_total", COUNTER, false, "Pages received." },
	{ VMT_CTL_GUEST, VMT_CTAG_EVENTS_IN, "vmtraced_guest_events_total", COUNTER, false, "Events in the pages received." },
	{ VMT_CTL_GUEST, VMT_CTAG_PAGES_OVERWRITTEN, "vmtraced_guest_pages_overwritten_total", COUNTER, false, "Pages the rings overwrote." },
	{ VMT_CTL_GUEST, VMT_CTAG_PAGES_GUEST_LOST, "vmtraced_guest_pages_lost_events_total", COUNTER, false, "Pages the guest flagged as following lost events." },
	{ VMT_CTL_GUEST, VMT_CTAG_EVENTS_GUEST_LOST, "vmtraced_guest_events_lost_total", COUNTER, false, "Events the guest kernel says it lost (as far as its pages count them)." },
	{ VMT_CTL_GUEST, VMT_CTAG_PAGES_REJECTED, "vmtraced_guest_pages_rejected_total", COUNTER, false, "Pages refused as malformed." },
	{ VMT_CTL_GUEST, VMT_CTAG_BYTES_REJECTED, "vmtraced_guest_rejected_bytes_total", COUNTER, false, "Data bytes refused (malformed pages, stale data)." },
	{ VMT_CTL_GUEST, VMT_CTAG_CTL_REJECTED, "vmtraced_guest_control_rejected_bytes_total", COUNTER, false, "Control-channel bytes refused." },
	{ VMT_CTL_GUEST, VMT_CTAG_TS_BACKWARDS, "vmtraced_guest_pages_back_in_time_total", COUNTER, false, "Pages older than the page before them." },
	{ VMT_CTL_GUEST, VMT_CTAG_STALE_BYTES, "vmtraced_guest_stale_bytes_total", COUNTER, false, "Data bytes dropped outside a session." },
	{ VMT_CTL_GUEST, VMT_CTAG_FLUSH_TIMEOUTS, "vmtraced_guest_flush_timeouts_total", COUNTER, false, "Flushes the agent did not answer in time." },
	{ VMT_CTL_GUEST, VMT_CTAG_FLUSH_BAD, "vmtraced_guest_flush_answers_refused_total", COUNTER, false, "Flush answers that did not fit the stream." },
	{ VMT_CTL_GUEST, VMT_CTAG_SESSIONS, "vmtraced_guest_sessions_total", COUNTER, false, "Agent sessions started." },
	{ VMT_CTL_GUEST, VMT_CTAG_META_REJECTED, "vmtraced_guest_metadata_refused_total", COUNTER, false, "Metadata bundles refused." },
	{ VMT_CTL_GUEST, VMT_CTAG_TRIGGERS_SUPPRESSED, "vmtraced_guest_triggers_suppressed_total", COUNTER, false, "Triggers of this guest held back by its cooldown or budget." },
	{ VMT_CTL_GUEST, VMT_CTAG_MSGS_UNEXPECTED, "vmtraced_guest_messages_unexpected_total", COUNTER, false, "Well-formed messages out of place." },
	{ VMT_CTL_GUEST, VMT_CTAG_AGENT_ERRORS, "vmtraced_guest_agent_errors_total", COUNTER, false, "Errors the agent reported." },
	{ VMT_CTL_GUEST, VMT_CTAG_READ_PAUSES, "vmtraced_guest_read_pauses_total", COUNTER, false, "Reading paused: the next page held by a dump and the dump reserve used up." },
	{ VMT_CTL_GUEST, VMT_CTAG_PATHS_REFUSED, "vmtraced_guest_channel_opens_refused_total", COUNTER, false, "Channel opens refused (a symlink or the wrong file type)." },
	{ VMT_CTL_GUEST, VMT_CTAG_PAGES_DISCARDED, "vmtraced_guest_pages_discarded_total", COUNTER, false, "Pages of an old window dropped (its dump held back)." },
	{ VMT_CTL_GUEST, VMT_CTAG_HELLOS_DEFERRED, "vmtraced_guest_hellos_deferred_total", COUNTER, false, "HELLOs held back by sessions_per_minute." },
	{ VMT_CTL_GUEST, VMT_CTAG_SILENCES, "vmtraced_guest_silences_total", COUNTER, false, "Times the guest stopped answering with its QEMU alive (guest_silence)." },
	{ VMT_CTL_GUEST, VMT_CTAG_LATE_ANSWERS, "vmtraced_guest_late_answers_total", COUNTER, false, "Liveness pings answered later than half the guest_silence timeout: slow, not silent." },
	{ VMT_CTL_GUEST, VMT_CTAG_FLAGS, "vmtraced_guest_discovered", GAUGE, false, "1 if the guest was found by discovery, 0 if configured." },
	{ VMT_CTL_GUEST, VMT_CTAG_FRAME_PAGES, "vmtraced_guest_frame_pages", GAUGE, false, "Pages of the window held in compressed frames." },
	{ VMT_CTL_GUEST, VMT_CTAG_FRAME_BYTES, "vmtraced_guest_frame_bytes", GAUGE, false, "Memory the compressed frames take." },
	{ VMT_CTL_GUEST, VMT_CTAG_FRAMES_MADE, "vmtraced_guest_frames_total", COUNTER, false, "Frames made of the rings' older pages." },
	{ VMT_CTL_GUEST, VMT_CTAG_PAGES_STORED_RAW, "vmtraced_guest_pages_stored_uncompressed_total", COUNTER, false, "Pages put into the frame store uncompressed: the compressor was behind." },
	{ VMT_CTL_GUEST, VMT_CTAG_FRAMES_OVERWRITTEN, "vmtraced_guest_frames_overwritten_total", COUNTER, false, "Frames pushed out by newer ones." },
	{ VMT_CTL_GUEST, VMT_CTAG_WINDOW_SINCE_NS, "vmtraced_guest_window_created_timestamp_seconds", GAUGE, true, "When the oldest of the guest's rings was made (Unix time): its window may outlive a daemon." },
	{ VMT_CTL_GUEST, VMT_CTAG_LIFETIMES, "vmtraced_guest_window_lifetimes", GAUGE, false, "Daemons that have held the guest's window, this one included." },
	{ VMT_CTL_GUEST, VMT_CTAG_PAGE_SIZE, "vmtraced_guest_page_size_bytes", GAUGE, false, "The guest's trace page size." },
	{ VMT_CTL_GUEST, VMT_CTAG_FIRST_TS, NULL, GAUGE, false, NULL },	/* the window */
	{ VMT_CTL_GUEST, VMT_CTAG_LAST_TS, NULL, GAUGE, false, NULL },

	{ VMT_CTL_DETECTOR, VMT_CTAG_ENABLED, "vmtraced_detector_enabled", GAUGE, false, "1 if the configuration enables the detector." },
	{ VMT_CTL_DETECTOR, VMT_CTAG_LOADED, "vmtraced_detector_loaded", GAUGE, false, "1 if it runs: its BPF programs loaded (guest_silence: enabled, no BPF)." },
	{ VMT_CTL_DETECTOR, VMT_CTAG_EVENTS, "vmtraced_detector_events_total", COUNTER, false, "Events seen on watched threads." },
	{ VMT_CTL_DETECTOR, VMT_CTAG_SEEN, "vmtraced_detector_anomalies_total", COUNTER, false, "Anomalies seen." },
	{ VMT_CTL_DETECTOR, VMT_CTAG_FIRED, "vmtraced_detector_triggers_total", COUNTER, false, "Dumps it triggered." },
	{ VMT_CTL_DETECTOR, VMT_CTAG_TRIGGERS_SUPPRESSED, "vmtraced_detector_triggers_suppressed_total", COUNTER, false, "Its triggers held back by the cooldown or the rate limit." },
	{ VMT_CTL_DETECTOR, VMT_CTAG_DROPPED, "vmtraced_detector_events_dropped_total", COUNTER, false, "Records its BPF ring buffer dropped." },
	{ VMT_CTL_DETECTOR, VMT_CTAG_FILTERED, "vmtraced_detector_filtered_total", COUNTER, false, "Events its policy leaves out (process_death: clean exits without on_clean_exit)." },
};

#define NMETRICS (sizeof(metrics) / sizeof(metrics[0]))

static int collect(void *arg, unsigned type, const struct ctl_values *v)
{
	struct mset *set = arg;
	struct mrec *m;
	const char *s;

	if (type != VMT_CTL_DAEMON && type != VMT_CTL_GUEST && type != VMT_CTL_DETECTOR)
		return 0;
	if (set->n == set->cap) {
		size_t cap = set->cap ? 2 * set->cap : 16;
		struct mrec *nv = realloc(set->v, cap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		set->v = nv;
		set->cap = cap;
	}
	m = &set->v[set->n++];
	memset(m, 0, sizeof(*m));
	m->type = type;
	for (unsigned t = 0; t < MAX_TAG; t++)
		m->have[t] = ctl_value_num(v, t, &m->num[t]);
#define COPY(dst, tag) snprintf(dst, sizeof(dst), "%s", (s = ctl_value_str(v, tag)) ? s : "")
	if (type == VMT_CTL_DAEMON) {
		COPY(m->s1, VMT_CTAG_VERSION);
		COPY(m->s2, VMT_CTAG_PATH);
	} else if (type == VMT_CTL_GUEST) {
		COPY(m->label, VMT_CTAG_GUEST);
		COPY(m->s1, VMT_CTAG_STATE);
		COPY(m->s2, VMT_CTAG_RELEASE);
	} else {
		COPY(m->label, VMT_CTAG_NAME);
	}
#undef COPY
	return 0;
}

/* A label value: backslash, double quote and line feed escaped. */
static void put_label(const char *key, const char *v, bool first)
{
	printf("%s%s=\"", first ? "" : ",", key);
	for (; *v; v++) {
		if (*v == '\\' || *v == '"')
			printf("\\%c", *v);
		else if (*v == '\n')
			printf("\\n");
		else
			putchar(*v);
	}
	putchar('"');
}

static void family(const char *name, const char *type, const char *help)
{
	printf("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample_start(const char *name, const struct mrec *m)
{
	printf("%s", name);
	if (m->type == VMT_CTL_GUEST || m->type == VMT_CTL_DETECTOR) {
		putchar('{');
		put_label(m->type == VMT_CTL_GUEST ? "guest" : "detector", m->label, true);
		putchar('}');
	}
	putchar(' ');
}

static void print_value(uint64_t v, bool ns)
{
	if (ns)
		printf("%" PRIu64 ".%09" PRIu64 "\n", v / 1000000000, v % 1000000000);
	else
		printf("%" PRIu64 "\n", v);
}

static bool any_of(const struct mset *set, unsigned type, unsigned tag)
{
	for (size_t i = 0; i < set->n; i++)
		if (set->v[i].type == type && (tag >= MAX_TAG || set->v[i].have[tag]))
			return true;
	return false;
}

static void print_family(const struct mset *set, const struct metric *mt)
{
	if (!mt->name || !any_of(set, mt->type, mt->tag))
		return;
	family(mt->name, mt->kind == COUNTER ? "counter" : "gauge", mt->help);
	for (size_t i = 0; i < set->n; i++) {
		const struct mrec *m = &set->v[i];

		if (m->type != mt->type || !m->have[mt->tag])
			continue;
		sample_start(mt->name, m);
		print_value(mt->tag == VMT_CTAG_FLAGS ? m->num[mt->tag] & 1 : m->num[mt->tag], mt->ns);
	}
}

static bool listed(unsigned type, unsigned tag)
{
	for (size_t i = 0; i < NMETRICS; i++)
		if (metrics[i].type == type && metrics[i].tag == tag)
			return true;
	return false;
}

/* A number this vmtracectl has no name for: vmtraced_[guest_|detector_]tag. */
static void print_unlisted(const struct mset *set, unsigned type, const char *prefix)
{
	for (unsigned t = 0; t < MAX_TAG; t++) {
		const char *tn = ctl_tag_name(t);
		char name[128];
		size_t k;

		if (!tn || listed(type, t) || !any_of(set, type, t))
			continue;
		k = (size_t)snprintf(name, sizeof(name), "%s", prefix);
		for (; *tn && k + 1 < sizeof(name); tn++)
			name[k++] = *tn >= 'A' && *tn <= 'Z' ? (char)(*tn - 'A' + 'a') : *tn;
		name[k] = 0;
		printf("# HELP %s The status field %s.\n# TYPE %s untyped\n", name, ctl_tag_name(t), name);
		for (size_t i = 0; i < set->n; i++)
			if (set->v[i].type == type && set->v[i].have[t]) {
				sample_start(name, &set->v[i]);
				print_value(set->v[i].num[t], false);
			}
	}
}

static void print_all(const struct mset *set)
{
	family("vmtraced_up", "gauge", "1 if vmtraced answered vmtracectl metrics.");
	printf("vmtraced_up 1\n");
	for (size_t i = 0; i < set->n; i++) {
		const struct mrec *m = &set->v[i];

		if (m->type != VMT_CTL_DAEMON)
			continue;
		family("vmtraced_info", "gauge", "The daemon's version and state folder.");
		printf("vmtraced_info{");
		put_label("version", m->s1, true);
		put_label("state_dir", m->s2, false);
		printf("} 1\n");
		break;
	}
	for (size_t i = 0; i < NMETRICS; i++)
		if (metrics[i].type == VMT_CTL_DAEMON)
			print_family(set, &metrics[i]);
	print_unlisted(set, VMT_CTL_DAEMON, "vmtraced_");

	if (any_of(set, VMT_CTL_GUEST, MAX_TAG)) {
		family("vmtraced_guest_state", "gauge", "The guest's state, in the label (1).");
		for (size_t i = 0; i < set->n; i++)
			if (set->v[i].type == VMT_CTL_GUEST) {
				printf("vmtraced_guest_state{");
				put_label("guest", set->v[i].label, true);
				put_label("state", set->v[i].s1, false);
				printf("} 1\n");
			}
		family("vmtraced_guest_info", "gauge", "The guest kernel's release, if its agent said (1).");
		for (size_t i = 0; i < set->n; i++)
			if (set->v[i].type == VMT_CTL_GUEST) {
				printf("vmtraced_guest_info{");
				put_label("guest", set->v[i].label, true);
				put_label("release", set->v[i].s2, false);
				printf("} 1\n");
			}
		family("vmtraced_guest_window_seconds", "gauge",
		       "Time from the oldest event held to the newest, over all CPUs.");
		for (size_t i = 0; i < set->n; i++) {
			const struct mrec *m = &set->v[i];
			bool win = m->have[VMT_CTAG_FIRST_TS] && m->have[VMT_CTAG_LAST_TS] &&
				   m->num[VMT_CTAG_LAST_TS] >= m->num[VMT_CTAG_FIRST_TS];

			if (m->type != VMT_CTL_GUEST)
				continue;
			sample_start("vmtraced_guest_window_seconds", m);
			print_value(win ? m->num[VMT_CTAG_LAST_TS] - m->num[VMT_CTAG_FIRST_TS] : 0, true);
		}
	}
	for (size_t i = 0; i < NMETRICS; i++)
		if (metrics[i].type == VMT_CTL_GUEST)
			print_family(set, &metrics[i]);
	print_unlisted(set, VMT_CTL_GUEST, "vmtraced_guest_");

	for (size_t i = 0; i < NMETRICS; i++)
		if (metrics[i].type == VMT_CTL_DETECTOR)
			print_family(set, &metrics[i]);
	print_unlisted(set, VMT_CTL_DETECTOR, "vmtraced_detector_");
}

int cmd_metrics(const struct vmt_ctl_opts *o, int argc, char **argv)
{
	struct mset set = { 0 };
	int rc;

	if (argc > 1) {
		ctl_command_usage(stderr, "metrics");
		return 2;
	}
	rc = ctl_status_walk(o, collect, &set);
	if (rc == 0) {
		print_all(&set);
	} else {
		/* the collector keeps the last file it read: say the daemon is gone
		 * rather than leave its last counters standing */
		family("vmtraced_up", "gauge", "1 if vmtraced answered vmtracectl metrics.");
		printf("vmtraced_up 0\n");
	}
	free(set.v);
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "vmtracectl: writing the metrics: %s\n", strerror(errno));
		return 1;
	}
	return rc;
}
