/* SPDX-License-Identifier: MIT */
/*
 * config_print: a struct vmt_config as the normalized YAML `vmtraced -n -v`
 * shows: every field, defaults filled in, sizes in bytes, durations in ms
 * or s, and strings quoted only where a YAML reader would take them for
 * something else. The output reads back as the same configuration.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "config-int.h"
#include "frame.h"
#include "util.h"

static bool word_is_reserved(const char *s)
{
	static const char *const words[] = {
		"~", "null", "true", "false", "yes", "no", "y", "n", "on", "off",
	};
	bool digits = true;

	for (size_t i = 0; i < ARRAY_SIZE(words); i++)
		if (!strcasecmp(s, words[i]))
			return true;
	for (const char *q = s; *q; q++)
		if (!isdigit((unsigned char)*q) && *q != '.')
			digits = false;
	return digits;	/* would read back as a number elsewhere */
}

/* Plain when it reads back as the same string in block and flow context. */
static void print_str(FILE *f, const char *s)
{
	size_t len = strlen(s);
	bool plain = len && (isalnum((unsigned char)s[0]) || s[0] == '/' || s[0] == '_' ||
			     s[0] == '.') && s[len - 1] != ':' && !word_is_reserved(s);

	for (const char *q = s; plain && *q; q++)
		plain = isalnum((unsigned char)*q) || strchr("/_.-:*", *q);
	if (plain) {
		fputs(s, f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20 || ch == 0x7f)
			fprintf(f, "\\x%02x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

/* "a:b,c:d" as a flow list */
static void print_events(FILE *f, const char *s)
{
	fputc('[', f);
	while (*s) {
		char one[VMT_CONFIG_MAX_EVENTS];
		size_t len = strcspn(s, ",");

		snprintf(one, sizeof(one), "%.*s", (int)len, s);
		print_str(f, one);
		s += len;
		if (*s) {
			fputs(", ", f);
			s++;
		}
	}
	fputc(']', f);
}

static void print_bool(FILE *f, int b)
{
	fputs(b ? "true" : "false", f);
}

static void print_record(FILE *f, const struct vmt_record_conf *r, const char *ind)
{
	fprintf(f, "%sring_size: %" PRIu64 "\n", ind, r->ring_size);
	fprintf(f, "%sguest_buffer_size: %" PRIu64 "\n", ind, (uint64_t)r->guest_buffer_kb * KiB);
	fprintf(f, "%sclock: ", ind);
	print_str(f, r->clock);
	fprintf(f, "\n%sevents: ", ind);
	print_events(f, r->events);
	fprintf(f, "\n%smetadata_max: %" PRIu64 "\n", ind, r->meta_max);
	fprintf(f, "%sflush_timeout: %" PRIu32 "ms\n", ind, r->flush_timeout_ms);
	fprintf(f, "%ssessions_per_minute: %" PRIu32 "\n", ind, r->sessions_per_minute);
	fprintf(f, "%scompression: %s\n", ind, frame_codec_name(r->compression));
	fprintf(f, "%scompression_level: %" PRIu32 "\n", ind, r->compression_level);
}

void config_print(const struct vmt_config *c, FILE *f)
{
	fputs("state_dir: ", f);
	print_str(f, c->state_dir);
	fputs("\ncontrol_socket: ", f);
	print_str(f, c->control_socket);
	fprintf(f, "\nlog_level: %s\n", config_log_level_name(c->log_level));
	fprintf(f, "compression_level: %d\n", c->zstd_level);
	fprintf(f, "sandbox: %s\n", c->sandbox ? "true" : "false");
	fputs("user: ", f);
	print_str(f, c->user);
	fputc('\n', f);
	if (c->memory_max == VMT_AUTO)
		fputs("memory_max: auto\n", f);
	else
		fprintf(f, "memory_max: %" PRIu64 "\n", c->memory_max);
	fprintf(f, "dump_reserve: %" PRIu64 "\n", c->dump_reserve);
	fprintf(f, "forget_after: %" PRIu64 "s\n", c->forget_after_s);
	fputs("control:\n  group: ", f);
	print_str(f, c->control.group);
	fputs("\n  read_only_group: ", f);
	print_str(f, c->control.read_group);
	fprintf(f, "\n  idle_timeout: %" PRIu32 "ms", c->control.idle_timeout_ms);
	fputs("\ntriggers:\n", f);
	fprintf(f, "  coalesce: %" PRIu32 "ms\n", c->triggers.coalesce_ms);
	fprintf(f, "  cooldown: %" PRIu32 "ms\n", c->triggers.cooldown_ms);
	fprintf(f, "  max_per_minute: %" PRIu32 "\n", c->triggers.max_per_minute);
	fprintf(f, "  per_guest_per_minute: %" PRIu32 "\n", c->triggers.per_guest_per_minute);
	fputs("retention:\n", f);
	if (c->retention.max_bytes == VMT_AUTO)
		fputs("  max_bytes: auto\n", f);
	else
		fprintf(f, "  max_bytes: %" PRIu64 "\n", c->retention.max_bytes);
	fprintf(f, "  max_samples: %" PRIu32 "\n", c->retention.max_samples);
	fprintf(f, "  max_aux: %" PRIu32 "\n", c->retention.max_aux);
	fprintf(f, "  max_age: %" PRIu64 "s\n", c->retention.max_age_s);
	fputs("record:\n", f);
	print_record(f, &c->rec, "  ");
	if (c->rec.compress_threads)
		fprintf(f, "  compress_threads: %" PRIu32 "\n", c->rec.compress_threads);
	else
		fputs("  compress_threads: auto\n", f);
	fputs("host:\n  enabled: ", f);
	print_bool(f, c->host.enabled);
	fputs("\n  events: ", f);
	print_events(f, c->host.events);
	fputs("\n  clock: ", f);
	print_str(f, c->host.clock);
	fprintf(f, "\n  ring_size: %" PRIu64 "\n", c->host.ring_size);
	fprintf(f, "  buffer_size: %" PRIu64 "\n", (uint64_t)c->host.buffer_kb * KiB);
	fputs("  qemu_only: ", f);
	print_bool(f, c->host.qemu_only);
	fprintf(f, "\nclock_sync:\n  interval: %" PRIu32 "ms\n", c->sync.interval_ms);
	fprintf(f, "  probes: %" PRIu32 "\n", c->sync.probes);
	fprintf(f, "  timeout: %" PRIu32 "ms\n", c->sync.timeout_ms);
	fputs("  markers: ", f);
	print_bool(f, c->sync.markers);
	fputs("\n  kvm_debugfs: ", f);
	print_str(f, c->sync.kvm_debugfs);
	fputs("\ndetectors:\n", f);
	for (unsigned i = 0; i < VMT_DET_COUNT; i++) {
		const struct vmt_detector_conf *d = &c->detectors[i];

		fprintf(f, "  %s:\n    enabled: ", detector_name(i));
		print_bool(f, d->enabled);
		fputc('\n', f);
		if (detector_settings(i) & VMT_DETS_THRESHOLD)
			fprintf(f, "    threshold: %" PRIu32 "ms\n", d->threshold_ms);
		fprintf(f, "    min_interval: %" PRIu32 "ms\n", d->min_interval_ms);
		if (detector_settings(i) & VMT_DETS_ANY_PROCESS) {
			fputs("    any_process: ", f);
			print_bool(f, d->any_process);
			fputc('\n', f);
		}
		if (detector_settings(i) & VMT_DETS_CLEAN_EXIT) {
			fputs("    on_clean_exit: ", f);
			print_bool(f, d->on_clean_exit);
			fputc('\n', f);
		}
	}
	fputs("  guest_silence:\n    enabled: ", f);
	print_bool(f, c->silence.enabled);
	fprintf(f, "\n    timeout: %" PRIu32 "ms\n", c->silence.timeout_ms);
	fputs("  libvirt_events:\n    enabled: ", f);
	print_bool(f, c->libvirt_events.enabled);
	fputs("\n    uri: ", f);
	print_str(f, c->libvirt_events.uri);
	fputc('\n', f);
	config_fleet_print(c, f);
	if (!c->ndiscovery)
		fputs("discovery: []\n", f);
	else
		fputs("discovery:\n", f);
	for (uint32_t i = 0; i < c->ndiscovery; i++) {
		const struct vmt_discovery_conf *d = &c->discovery[i];

		fputs("  - path: ", f);
		print_str(f, d->path);
		fprintf(f, "\n    layout: %s\n", layout_name(d->layout));
		fprintf(f, "    transport: %s\n", transport_name(d->transport));
	}
	if (!c->nguests) {
		fputs("guests: []\n", f);
		return;
	}
	fputs("guests:\n", f);
	for (uint32_t i = 0; i < c->nguests; i++) {
		const struct vmt_guest_conf *g = &c->guests[i];

		fputs("  - name: ", f);
		print_str(f, g->name);
		fputs("\n    path: ", f);
		print_str(f, g->path);
		fprintf(f, "\n    transport: %s\n", transport_name(g->transport));
		fprintf(f, "    cpus: %" PRIu32 "\n", g->cpus);
		fputs("    pidfile: ", f);
		print_str(f, g->pidfile);
		fputc('\n', f);
		fputs("    record:\n", f);
		print_record(f, &g->rec, "      ");
		if (g->labels[0]) {
			/* "k=v,k=v": tokens only, plain in YAML */
			fputs("    labels: {", f);
			for (const char *q = g->labels; *q; q++)
				fputs(*q == '=' ? ": " : *q == ',' ? ", " : (char[2]){ *q, 0 }, f);
			fputs("}\n", f);
		}
	}
}
