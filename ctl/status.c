/* SPDX-License-Identifier: MIT */
/* vmtracectl status and dump: ask, then print tables or JSON. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "commands.h"
#include "ctlproto.h"
#include "status.h"
#include "tlv.h"
#include "vfile.h"

/* Tags this vmtracectl knows (the schema, ctlproto.h): a newer daemon's
 * others are skipped. */
#define REC_TAGS VMT_CTAG_LIMIT

/* The record's values, looked up by tag. */
struct rec {
	uint64_t num[REC_TAGS];
	char str[REC_TAGS][512];
	bool have[REC_TAGS];
};

static void rec_parse(const struct vmt_ctl_record *r, struct rec *out)
{
	struct vmt_tlv t;
	size_t pos = 0;

	memset(out->have, 0, sizeof(out->have));
	while (tlv_next(r->payload, r->len, &pos, &t) > 0) {
		uint32_t u32;

		switch (ctl_tag_kind(t.tag)) {
		case VMT_CTK_NONE:
			continue;	/* newer daemon: skip what we do not know */
		case VMT_CTK_U32:
		case VMT_CTK_I32:
			if (tlv_u32(&t, &u32) < 0)
				continue;
			out->num[t.tag] = u32;
			break;
		case VMT_CTK_U64:
			if (tlv_u64(&t, &out->num[t.tag]) < 0)
				continue;
			break;
		case VMT_CTK_STR:
			if (tlv_str(&t, out->str[t.tag], sizeof(out->str[t.tag])) < 0)
				continue;
			break;
		}
		out->have[t.tag] = true;
	}
}

static void json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

static void rec_json(const struct rec *r)
{
	bool first = true;

	putchar('{');
	for (unsigned t = 0; t < REC_TAGS; t++) {
		if (!r->have[t])
			continue;
		printf("%s\"", first ? "" : ", ");
		for (const char *n = ctl_tag_name(t); *n; n++)
			putchar(*n >= 'A' && *n <= 'Z' ? *n - 'A' + 'a' : *n);
		printf("\": ");
		if (ctl_tag_kind(t) == VMT_CTK_STR)
			json_string(r->str[t]);
		else
			printf("%" PRIu64, r->num[t]);
		first = false;
	}
	putchar('}');
}

static void human_bytes(char *out, size_t n, uint64_t b)
{
	static const char *u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)b;
	int i = 0;

	while (v >= 1024 && i < 4) {
		v /= 1024;
		i++;
	}
	snprintf(out, n, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

static int connect_or_explain(struct vmt_ctl_client *c, const char *path)
{
	int r = client_connect(c, path);

	if (r == -ENOENT || r == -ECONNREFUSED)
		fprintf(stderr, "vmtracectl: vmtraced is not running (no listener on %s)\n", path);
	else if (r == -EACCES || r == -EPERM)
		fprintf(stderr, "vmtracectl: not allowed to talk to vmtraced on %s (try as root)\n", path);
	else if (r < 0)
		fprintf(stderr, "vmtracectl: cannot connect to %s: %s\n", path, strerror(-r));
	return r;
}

static int finish(struct vmt_ctl_client *c, int r)
{
	if (r < 0)
		fprintf(stderr, "vmtracectl: %s\n",
			r == -ETIMEDOUT ? "no answer from vmtraced" : c->error[0] ? c->error : strerror(-r));
	client_close(c);
	return r < 0 ? 1 : 0;
}

static void guests_header(void)
{
	printf("%-16s %-11s %4s %15s %9s %10s %11s %10s %9s %s\n", "GUEST", "STATE", "CPUS",
	       "PAGES/CAPACITY", "WINDOW", "PAGES-IN", "OVERWRITTEN", "GUEST-LOST", "REJECTED",
	       "LAST DUMP");
}

/* Under a guest's row, what compression holds: "  zstd: 41,230 pages in
 * 21.9 MiB of frames (7.36:1); 128 stored uncompressed (compressor behind)". */
static void guest_frames(const struct rec *v)
{
	uint64_t pages = v->num[VMT_CTAG_FRAME_PAGES], bytes = v->num[VMT_CTAG_FRAME_BYTES];
	char b[32];

	if (!v->have[VMT_CTAG_COMPRESSION] || !strcmp(v->str[VMT_CTAG_COMPRESSION], "off"))
		return;
	human_bytes(b, sizeof(b), bytes);
	printf("  %s: %" PRIu64 " pages in %s of frames", v->str[VMT_CTAG_COMPRESSION], pages, b);
	if (bytes && v->num[VMT_CTAG_PAGE_SIZE])
		printf(" (%.2f:1)", (double)pages * (double)v->num[VMT_CTAG_PAGE_SIZE] / (double)bytes);
	if (v->num[VMT_CTAG_PAGES_STORED_RAW])
		printf("; %" PRIu64 " pages stored uncompressed (the compressor was behind)",
		       v->num[VMT_CTAG_PAGES_STORED_RAW]);
	printf("\n");
}

/* Under a guest's row, when its window outlived a daemon: "  window held
 * 1h 02m, across 3 daemon lifetimes". */
static void guest_held(const struct rec *v)
{
	uint64_t since = v->num[VMT_CTAG_WINDOW_SINCE_NS], now = (uint64_t)time(NULL) * 1000000000ull;

	if (!v->have[VMT_CTAG_LIFETIMES] || v->num[VMT_CTAG_LIFETIMES] < 2)
		return;
	printf("  window held %.0f s, across %" PRIu64 " daemon lifetimes\n",
	       now > since ? (double)(now - since) / 1e9 : 0.0, v->num[VMT_CTAG_LIFETIMES]);
}

/*
 * Under a guest's row, what it sent that was refused or went wrong, the
 * non-zero counters only: "  ! 32 pages rejected, 9.8 KiB stale data, ...".
 */
static void guest_problems(const struct rec *v)
{
	static const struct {
		unsigned tag;
		const char *what;
		bool bytes;
	} c[] = {
		{ VMT_CTAG_PAGES_REJECTED, "pages rejected", false },
		{ VMT_CTAG_STALE_BYTES, "stale data", true },
		{ VMT_CTAG_TS_BACKWARDS, "pages back in time", false },
		{ VMT_CTAG_CTL_REJECTED, "control bytes rejected", true },
		{ VMT_CTAG_MSGS_UNEXPECTED, "messages out of place", false },
		{ VMT_CTAG_META_REJECTED, "metadata refused", false },
		{ VMT_CTAG_FLUSH_TIMEOUTS, "flush timeouts", false },
		{ VMT_CTAG_FLUSH_BAD, "flush answers refused", false },
		{ VMT_CTAG_AGENT_ERRORS, "agent errors", false },
		{ VMT_CTAG_READ_PAUSES, "reading pauses (dump_reserve used up)", false },
		{ VMT_CTAG_PATHS_REFUSED, "channel opens refused (symlink or wrong type)", false },
		{ VMT_CTAG_PAGES_DISCARDED, "pages of an old window dropped (its dump held back)", false },
		{ VMT_CTAG_HELLOS_DEFERRED, "HELLOs held back (too many sessions)", false },
		{ VMT_CTAG_SILENCES, "times it stopped answering (guest_silence)", false },
		{ VMT_CTAG_LATE_ANSWERS, "pings answered late (slow, not silent)", false },
		{ VMT_CTAG_EVENTS_GUEST_LOST, "events lost in the guest", false },
		{ VMT_CTAG_TRIGGERS_SUPPRESSED, "triggers held back", false },
	};
	bool any = false;

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		uint64_t n = v->num[c[i].tag];
		char b[32];

		if (!v->have[c[i].tag] || !n)
			continue;
		printf("%s", any ? ", " : "  ! ");
		if (c[i].bytes) {
			human_bytes(b, sizeof(b), n);
			printf("%s %s", b, c[i].what);
		} else {
			printf("%" PRIu64 " %s", n, c[i].what);
		}
		any = true;
	}
	if (any)
		putchar('\n');
}

/* The daemon's lines of status: rings, dumps, the reserve; hand-overs of
 * rings and sessions when there were any. */
static void daemon_text(const struct rec *v)
{
	char mem[32], res[32], used[32], peak[32];

	human_bytes(mem, sizeof(mem), v->num[VMT_CTAG_MEM_USED]);
	human_bytes(res, sizeof(res), v->num[VMT_CTAG_RESERVE]);
	human_bytes(used, sizeof(used), v->num[VMT_CTAG_RESERVE_USED]);
	human_bytes(peak, sizeof(peak), v->num[VMT_CTAG_RESERVE_PEAK]);
	printf("vmtraced %s, up %" PRIu64 " s, rings %s, dumps %" PRIu64 " (%" PRIu64
	       " failed), samples in %s\n",
	       v->str[VMT_CTAG_VERSION], v->num[VMT_CTAG_UPTIME_NS] / 1000000000,
	       mem, v->num[VMT_CTAG_DUMPS], v->num[VMT_CTAG_DUMP_ERRORS],
	       v->str[VMT_CTAG_PATH]);
	printf("dump reserve %s: %s in use, at most %s so far\n", res, used, peak);
	if (v->num[VMT_CTAG_DUMPS_PENDING] || v->num[VMT_CTAG_DUMPS_REFUSED]) {
		printf("dumps pending: %" PRIu64, v->num[VMT_CTAG_DUMPS_PENDING]);
		if (v->have[VMT_CTAG_DUMP_NEXT_NS])
			printf(", next in %.1f s", (double)v->num[VMT_CTAG_DUMP_NEXT_NS] / 1e9);
		if (v->num[VMT_CTAG_DUMPS_REFUSED])
			printf("; %" PRIu64 " refused (too many waiting for their --post)",
			       v->num[VMT_CTAG_DUMPS_REFUSED]);
		printf("\n");
	}
	if (v->num[VMT_CTAG_RINGS_ADOPTED] || v->num[VMT_CTAG_RINGS_REFUSED] ||
	    v->num[VMT_CTAG_RINGS_UNCLAIMED] || v->num[VMT_CTAG_RESERVES_REFUSED])
		printf("rings handed back after a crash: %" PRIu64 " adopted, %" PRIu64
		       " refused, %" PRIu64 " unclaimed; dump reserves refused: %" PRIu64 "\n",
		       v->num[VMT_CTAG_RINGS_ADOPTED], v->num[VMT_CTAG_RINGS_REFUSED],
		       v->num[VMT_CTAG_RINGS_UNCLAIMED], v->num[VMT_CTAG_RESERVES_REFUSED]);
	if (v->num[VMT_CTAG_DISCOVERY_UNREADABLE])
		printf("! discovery: %" PRIu64 " time(s) a folder or port could not be entered or "
		       "probed, the last %s: %s (errno %" PRIu64 ")\n",
		       v->num[VMT_CTAG_DISCOVERY_UNREADABLE], v->str[VMT_CTAG_DISCOVERY_UNREADABLE_PATH],
		       strerror((int)v->num[VMT_CTAG_DISCOVERY_UNREADABLE_ERRNO]),
		       v->num[VMT_CTAG_DISCOVERY_UNREADABLE_ERRNO]);
	if (v->num[VMT_CTAG_UPGRADES])
		printf("upgrades: %" PRIu64 " hand-over(s) of this process; at the last, %"
		       PRIu64 " guest session(s) taken over, %" PRIu64 " started afresh\n",
		       v->num[VMT_CTAG_UPGRADES], v->num[VMT_CTAG_SESSIONS_ADOPTED],
		       v->num[VMT_CTAG_SESSIONS_REFUSED]);
	if (v->str[VMT_CTAG_FLEET_STATE][0] && strcmp(v->str[VMT_CTAG_FLEET_STATE], "off")) {
		printf("fleet: %s%s%s, %" PRIu64 " file(s) waiting, %" PRIu64 " uploaded (%" PRIu64
		       " bytes), %" PRIu64 " upload failure(s), dumps asked %" PRIu64 " taken, %"
		       PRIu64 " refused\n", v->str[VMT_CTAG_FLEET_STATE],
		       v->str[VMT_CTAG_FLEET_SERVER][0] ? " to " : "", v->str[VMT_CTAG_FLEET_SERVER],
		       v->num[VMT_CTAG_FLEET_QUEUE], v->num[VMT_CTAG_FLEET_UPLOADED],
		       v->num[VMT_CTAG_FLEET_UPLOADED_BYTES], v->num[VMT_CTAG_FLEET_UPLOAD_FAILURES],
		       v->num[VMT_CTAG_FLEET_TRIGGERS], v->num[VMT_CTAG_FLEET_REFUSED]);
		if (v->num[VMT_CTAG_FLEET_REPLIES_REFUSED])
			printf("! fleet: %" PRIu64 " request(s) dropped for a reply subject not "
			       "under the inbox prefix\n", v->num[VMT_CTAG_FLEET_REPLIES_REFUSED]);
		if (v->str[VMT_CTAG_FLEET_ERROR][0])
			printf("! fleet: %s\n", v->str[VMT_CTAG_FLEET_ERROR]);
		printf("fleet subjects subscribed: %" PRIu64 "; labels from libvirt: %s",
		       v->num[VMT_CTAG_FLEET_SUBJECTS],
		       v->str[VMT_CTAG_LIBVIRT_STATE][0] ? v->str[VMT_CTAG_LIBVIRT_STATE] : "off");
		if (v->have[VMT_CTAG_LIBVIRT_READS])
			printf(", %" PRIu64 " read, %" PRIu64 " refused, %" PRIu64
			       " failed connection(s)", v->num[VMT_CTAG_LIBVIRT_READS],
			       v->num[VMT_CTAG_LIBVIRT_REFUSED], v->num[VMT_CTAG_LIBVIRT_CONNECT_FAILURES]);
		printf("\n");
		if (v->str[VMT_CTAG_LIBVIRT_ERROR][0])
			printf("! libvirt: %s\n", v->str[VMT_CTAG_LIBVIRT_ERROR]);
	} else {
		printf("fleet: off\n");
	}
}

/* status: the daemon, then its guests; guests: the guests only. */
static int show_status(const struct vmt_ctl_opts *o, int argc, unsigned type, const char *name)
{
	struct vmt_ctl_client c;
	struct vmt_ctl_record rec;
	struct vmt_buf b = { 0 };
	struct rec *v = malloc(sizeof(*v));
	bool first_guest = true, first_detector = true, started = false;
	int r;

	if (!v)
		return 1;
	if (argc > 1) {
		ctl_command_usage(stderr, name);
		free(v);
		return 2;
	}
	if (connect_or_explain(&c, o->socket) < 0) {
		free(v);
		return 1;
	}
	ctl_msg_begin(&b, type, 1);
	r = client_request(&c, &b);
	buf_free(&b);
	while (r >= 0 && (r = client_next(&c, &rec, 10000)) > 0) {
		rec_parse(&rec, v);
		if (rec.type == VMT_CTL_DAEMON) {
			started = true;
			if (o->json) {
				printf("{\"daemon\": ");
				rec_json(v);
				printf(", \"guests\": [");
				continue;
			}
			daemon_text(v);
			printf("\n");
			guests_header();
		} else if (rec.type == VMT_CTL_DETECTOR) {
			if (o->json) {
				/* detectors follow the guests: close that list first */
				printf("%s", first_detector ? "], \"detectors\": [" : ", ");
				rec_json(v);
				first_detector = false;
				continue;
			}
			if (first_detector)
				printf("\n%-16s %-8s %10s %8s %8s %10s  %s\n", "DETECTOR", "LOADED", "EVENTS",
				       "SEEN", "FIRED", "SUPPRESSED", "WHY NOT");
			first_detector = false;
			printf("%-16s %-8s %10" PRIu64 " %8" PRIu64 " %8" PRIu64 " %10" PRIu64 "  %s\n",
			       v->str[VMT_CTAG_NAME], v->num[VMT_CTAG_LOADED] ? "yes" : "no",
			       v->num[VMT_CTAG_EVENTS], v->num[VMT_CTAG_SEEN], v->num[VMT_CTAG_FIRED],
			       v->num[VMT_CTAG_TRIGGERS_SUPPRESSED],
			       v->have[VMT_CTAG_MESSAGE] ? v->str[VMT_CTAG_MESSAGE] : "");
		} else if (rec.type == VMT_CTL_GUEST) {
			char fill[40], win[24], rej[24];
			if (!started) {	/* guests: no daemon record comes first */
				started = true;
				if (o->json)
					printf("{\"guests\": [");
				else
					guests_header();
			}
			if (o->json) {
				printf("%s", first_guest ? "" : ", ");
				rec_json(v);
				first_guest = false;
				continue;
			}
			snprintf(fill, sizeof(fill), "%" PRIu64 "/%" PRIu64, v->num[VMT_CTAG_PAGES],
				 v->num[VMT_CTAG_CAPACITY]);
			if (v->have[VMT_CTAG_FIRST_TS])
				snprintf(win, sizeof(win), "%.3fs",
					 (double)(v->num[VMT_CTAG_LAST_TS] - v->num[VMT_CTAG_FIRST_TS]) / 1e9);
			else
				snprintf(win, sizeof(win), "-");
			human_bytes(rej, sizeof(rej),
				    v->num[VMT_CTAG_BYTES_REJECTED] + v->num[VMT_CTAG_CTL_REJECTED]);
			printf("%-16s %-11s %4" PRIu64 " %15s %9s %10" PRIu64 " %11" PRIu64 " %10" PRIu64
			       " %9s %s\n",
			       v->str[VMT_CTAG_GUEST], v->str[VMT_CTAG_STATE], v->num[VMT_CTAG_NCPUS],
			       fill, win, v->num[VMT_CTAG_PAGES_IN], v->num[VMT_CTAG_PAGES_OVERWRITTEN],
			       v->num[VMT_CTAG_PAGES_GUEST_LOST], rej,
			       v->have[VMT_CTAG_LAST_DUMP] ? v->str[VMT_CTAG_LAST_DUMP] : "-");
			guest_problems(v);
			guest_frames(v);
			guest_held(v);
			if (v->have[VMT_CTAG_LABELS])
				printf("  labels %s\n", v->str[VMT_CTAG_LABELS]);
		}
	}
	if (r == 0 && !started)
		printf(o->json ? "{\"guests\": [" : "no guests\n");
	if (o->json && r == 0)
		printf("]}\n");
	free(v);
	return finish(&c, r);
}

int cmd_status(const struct vmt_ctl_opts *o, int argc, char **argv)
{
	return show_status(o, argc, VMT_CTL_STATUS, "status");
}

int cmd_guests(const struct vmt_ctl_opts *o, int argc, char **argv)
{
	return show_status(o, argc, VMT_CTL_GUESTS, "guests");
}

/* "2", "0.5", "1.25s": seconds, more than 0, at most a day. */
static int parse_seconds(const char *s, uint64_t *ns)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || (*end && strcmp(end, "s")) || !(v > 0) || v > 86400)
		return -EINVAL;
	*ns = (uint64_t)(v * 1e9);
	return 0;
}

static int simple_request(const struct vmt_ctl_opts *o, unsigned type, const char *done)
{
	struct vmt_ctl_client c;
	struct vmt_ctl_record rec;
	struct vmt_buf b = { 0 };
	int r;

	if (connect_or_explain(&c, o->socket) < 0)
		return 1;
	ctl_msg_begin(&b, type, 1);
	r = client_request(&c, &b);
	buf_free(&b);
	while (r >= 0 && (r = client_next(&c, &rec, 30000)) > 0)
		;
	if (r == 0 && done)
		printf("%s\n", done);
	return finish(&c, r);
}

int cmd_samples(const struct vmt_ctl_opts *o, int argc, char **argv)
{
	struct vmt_ctl_client c;
	struct vmt_ctl_record rec;
	struct vmt_buf b = { 0 };
	struct rec *v = malloc(sizeof(*v));
	int r, n = 0;

	if (!v)
		return 1;
	if (argc > 2) {
		ctl_command_usage(stderr, "samples");
		free(v);
		return 2;
	}
	if (connect_or_explain(&c, o->socket) < 0) {
		free(v);
		return 1;
	}
	ctl_msg_begin(&b, VMT_CTL_SAMPLES, 1);
	if (argc == 2)
		ctl_put_GUEST(&b, argv[1]);
	r = client_request(&c, &b);
	buf_free(&b);
	if (!o->json)
		printf("%-16s %-27s %10s %4s  %s\n", "GUEST", "CREATED (UTC)", "SIZE", "AUX", "PATH / TRIGGER");
	while (r >= 0 && (r = client_next(&c, &rec, 30000)) > 0) {
		char when[40], size[24];
		time_t sec;
		struct tm tm;

		rec_parse(&rec, v);
		if (o->json) {
			printf("%s", n++ ? ", " : "{\"samples\": [");
			rec_json(v);
			continue;
		}
		sec = (time_t)(v->num[VMT_CTAG_CREATED_NS] / 1000000000);
		gmtime_r(&sec, &tm);
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
		human_bytes(size, sizeof(size), v->num[VMT_CTAG_BYTES]);
		char aux[16] = "?";
		if (v->have[VMT_CTAG_AUX_VERSION])
			snprintf(aux, sizeof(aux), "%" PRIu64, v->num[VMT_CTAG_AUX_VERSION]);
		printf("%-16s %-27s %10s %4s  %s\n", v->str[VMT_CTAG_GUEST], when, size, aux,
		       v->str[VMT_CTAG_PATH]);
		if (v->have[VMT_CTAG_REASON])
			printf("%-60s  %s\n", "", v->str[VMT_CTAG_REASON]);
		else if (v->have[VMT_CTAG_MESSAGE])
			printf("%-60s  unreadable: %s\n", "", v->str[VMT_CTAG_MESSAGE]);
		if (v->have[VMT_CTAG_UPLOADED])
			printf("%-60s  %s\n", "", v->num[VMT_CTAG_UPLOADED] ? "uploaded to the fleet" :
			       "not uploaded yet");
		n++;
	}
	if (o->json && r == 0)
		printf("%s]}\n", n ? "" : "{\"samples\": [");
	free(v);
	return finish(&c, r);
}

int cmd_reload(const struct vmt_ctl_opts *o, int argc, char **argv)
{
	if (argc > 1) {
		ctl_command_usage(stderr, "reload");
		return 2;
	}
	return simple_request(o, VMT_CTL_RELOAD, "configuration reloaded");
}

int cmd_upgrade(const struct vmt_ctl_opts *o, int argc, char **argv)
{
	if (argc > 1) {
		ctl_command_usage(stderr, "upgrade");
		return 2;
	}
	return simple_request(o, VMT_CTL_UPGRADE, "handing over to the installed vmtraced");
}

static void dump_usage(FILE *f)
{
	ctl_command_usage(f, "dump");
	fprintf(f, "\nGUEST...         the guests to dump (default: every guest)\n"
		   "--window SEC     only the last SEC seconds before the request\n"
		   "--post SEC       record SEC seconds more, then dump\n"
		   "--reason TEXT    the trigger's reason, kept in the sample\n"
		   "--timeout SEC    wait at most this long for the answer (300)\n"
		   "-h, --help       this help\n");
}

int cmd_dump(const struct vmt_ctl_opts *o, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "reason", required_argument, NULL, 'r' },
		{ "timeout", required_argument, NULL, 't' },
		{ "window", required_argument, NULL, 'w' },
		{ "post", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	uint64_t window_ns = 0, post_ns = 0;
	struct vmt_ctl_client c;
	struct vmt_ctl_record rec;
	struct vmt_buf b = { 0 };
	const char *reason = NULL;
	int timeout_s = 300, opt, r, files = 0;

	optind = 0;	/* 0: glibc forgets the permutation state of the last parse */
	while ((opt = getopt_long(argc, argv, "r:t:w:p:h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'h':
			dump_usage(stdout);
			return 0;
		case 'r': reason = optarg; break;
		case 't': timeout_s = atoi(optarg); break;
		case 'w':
		case 'p':
			if (parse_seconds(optarg, opt == 'w' ? &window_ns : &post_ns) < 0) {
				fprintf(stderr, "vmtracectl: --%s: '%s' is not a number of seconds\n",
					opt == 'w' ? "window" : "post", optarg);
				return 2;
			}
			break;
		default:
			dump_usage(stderr);
			return 2;
		}
	}
	if (post_ns)
		timeout_s += (int)(post_ns / 1000000000);
	if (connect_or_explain(&c, o->socket) < 0)
		return 1;
	ctl_msg_begin(&b, VMT_CTL_DUMP, 1);
	for (int i = optind; i < argc; i++)
		ctl_put_GUEST(&b, argv[i]);
	if (reason)
		ctl_put_REASON(&b, reason);
	if (window_ns)
		ctl_put_WINDOW_NS(&b, window_ns);
	if (post_ns)
		ctl_put_POST_NS(&b, post_ns);
	r = client_request(&c, &b);
	buf_free(&b);
	while (r >= 0 && (r = client_next(&c, &rec, timeout_s * 1000)) > 0) {
		struct vmt_tlv t;
		size_t pos = 0;
		char path[4400];

		if (rec.type != VMT_CTL_FILE)
			continue;
		while (tlv_next(rec.payload, rec.len, &pos, &t) > 0)
			if (t.tag == VMT_CTAG_PATH && tlv_str(&t, path, sizeof(path)) == 0) {
				if (o->json) {
					/* nothing on stdout until the daemon has said yes */
					printf("%s", files ? ", " : "{\"files\": [");
					json_string(path);
				} else {
					printf("%s\n", path);
				}
				files++;
			}
	}
	if (o->json && r == 0)
		printf("%s]}\n", files ? "" : "{\"files\": [");
	if (r == 0 && !files) {
		/* the daemon said yes but no guest had a page to write */
		fprintf(stderr, "vmtracectl: nothing recorded yet: no sample written\n");
		finish(&c, r);
		return 1;
	}
	return finish(&c, r);
}

/* ---- the STATUS answer, record by record, for metrics.c (status.h) ---- */

struct ctl_values {
	struct rec r;
};

bool ctl_value_num(const struct ctl_values *v, unsigned tag, uint64_t *out)
{
	if (tag >= REC_TAGS || !v->r.have[tag] || ctl_tag_kind(tag) == VMT_CTK_STR)
		return false;
	*out = v->r.num[tag];
	return true;
}

const char *ctl_value_str(const struct ctl_values *v, unsigned tag)
{
	if (tag >= REC_TAGS || !v->r.have[tag] || ctl_tag_kind(tag) != VMT_CTK_STR)
		return NULL;
	return v->r.str[tag];
}

int ctl_status_walk(const struct vmt_ctl_opts *o,
		    int (*fn)(void *arg, unsigned type, const struct ctl_values *v), void *arg)
{
	struct vmt_ctl_client c;
	struct vmt_ctl_record rec;
	struct vmt_buf b = { 0 };
	struct ctl_values *v = malloc(sizeof(*v));
	int r;

	if (!v)
		return 1;
	if (connect_or_explain(&c, o->socket) < 0) {
		free(v);
		return 1;
	}
	ctl_msg_begin(&b, VMT_CTL_STATUS, 1);
	r = client_request(&c, &b);
	buf_free(&b);
	while (r >= 0 && (r = client_next(&c, &rec, 10000)) > 0) {
		rec_parse(&rec, &v->r);
		if (fn(arg, rec.type, v) < 0) {
			snprintf(c.error, sizeof(c.error), "out of memory");
			r = -ENOMEM;
		}
	}
	free(v);
	return finish(&c, r);
}
