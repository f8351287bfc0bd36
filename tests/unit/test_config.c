/* SPDX-License-Identifier: MIT */
/*
 * config: golden files the way bgpd -nv is tested, plus what a golden file
 * cannot say (I/O errors, limits on counts, the error buffer, idempotence).
 *
 * tests/config/NAME.yaml is loaded with config_load() and must be matched by
 * exactly one of
 *   NAME.ok   the config_print() output, byte for byte;
 *   NAME.err  the one error line, with the directory of the file taken off
 *             so that it starts "NAME.yaml:LINE:COL: ".
 * Every .ok case is also printed, re-parsed and printed again: the two
 * printouts must match. To add a case, write NAME.yaml and check the
 * output of `vmtraced -n -v -c NAME.yaml` (or the message) by eye before
 * saving it as NAME.ok (NAME.err).
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "log.h"
#include "testutil.h"
#include "util.h"

#define MAX_CASES 512

/* The golden case list, filled in main() before the suite forks. */
static char *cases[MAX_CASES];
static int ncases;

static char *golden_dir(void)
{
	char *d;

	ck_assert_int_ge(asprintf(&d, "%s/tests/config", test_srcdir()), 0);
	return d;
}

/* NULL if absent */
static char *slurp(const char *path)
{
	char *text;
	size_t len;

	if (read_file(path, 16 << 20, &text, &len) < 0)
		return NULL;
	return text;
}

static char *print_to_string(const struct vmt_config *c)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	ck_assert_ptr_nonnull(f);
	config_print(c, f);
	ck_assert_int_eq(fclose(f), 0);
	return out;
}

/* Print, parse the printout, print again: the same text both times. */
static void check_idempotent(const struct vmt_config *c, const char *what)
{
	_cleanup_free_ char *first = print_to_string(c), *second = NULL;
	struct vmt_config again;
	char err[512];
	int r;

	r = config_load_string(&again, "printed", first, strlen(first), err, sizeof(err));
	ck_assert_msg(r == 0, "%s: printed config does not parse: %s\n%s", what, err, first);
	second = print_to_string(&again);
	ck_assert_msg(!strcmp(first, second), "%s: not idempotent:\n%s---\n%s", what, first, second);
	config_free(&again);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void cases_scan(void)
{
	_cleanup_free_ char *dir = NULL;
	struct dirent *de;
	DIR *d;

	if (asprintf(&dir, "%s/tests/config", test_srcdir()) < 0)
		return;
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d)) && ncases < MAX_CASES) {
		size_t n = strlen(de->d_name);

		if (n > 5 && !strcmp(de->d_name + n - 5, ".yaml"))
			cases[ncases++] = strndup(de->d_name, n - 5);
	}
	closedir(d);
	qsort(cases, (size_t)ncases, sizeof(cases[0]), cmp_str);
}

START_TEST(test_golden)
{
	_cleanup_free_ char *dir = golden_dir(), *yaml = NULL, *ok = NULL, *errf = NULL;
	_cleanup_free_ char *want_ok = NULL, *want_err = NULL, *got = NULL;
	const char *name = cases[_i];
	struct vmt_config c;
	char err[1024], line[1100];
	size_t dl = strlen(dir);
	int r;

	ck_assert_int_ge(asprintf(&yaml, "%s/%s.yaml", dir, name), 0);
	ck_assert_int_ge(asprintf(&ok, "%s/%s.ok", dir, name), 0);
	ck_assert_int_ge(asprintf(&errf, "%s/%s.err", dir, name), 0);
	want_ok = slurp(ok);
	want_err = slurp(errf);
	ck_assert_msg(!want_ok != !want_err, "%s: needs exactly one of %s.ok and %s.err", name, name,
		      name);

	r = config_load(&c, yaml, err, sizeof(err));
	if (want_ok) {
		ck_assert_msg(r == 0, "%s: expected to parse, got %d: %s", name, r, err);
		got = print_to_string(&c);
		ck_assert_msg(!strcmp(got, want_ok), "%s: config_print differs from %s.ok:\n%s", name,
			      name, got);
		check_idempotent(&c, name);
	} else {
		ck_assert_msg(r == -EINVAL, "%s: expected -EINVAL, got %d", name, r);
		ck_assert_msg(!strncmp(err, dir, dl) && err[dl] == '/', "%s: message does not start with the path: %s",
			      name, err);
		snprintf(line, sizeof(line), "%s\n", err + dl + 1);
		ck_assert_msg(!strcmp(line, want_err), "%s: message differs from %s.err:\n got: %s want: %s",
			      name, name, line, want_err);
		ck_assert_ptr_null(strchr(err, '\n'));
		/* a failed load leaves nothing to free and the defaults in place */
		ck_assert_uint_eq(c.nguests, 0);
		ck_assert_ptr_null(c.guests);
		ck_assert_uint_eq(c.ndiscovery, 0);
		ck_assert_ptr_null(c.discovery);
	}
	config_free(&c);
}
END_TEST

START_TEST(test_golden_count)
{
	ck_assert_msg(ncases >= 120, "only %d golden cases found under tests/config", ncases);
}
END_TEST

START_TEST(test_defaults)
{
	struct vmt_config c;

	config_init(&c);
	ck_assert_str_eq(c.state_dir, "/var/lib/vmtraced");
	ck_assert_str_eq(c.control_socket, "/run/vmtraced/control.sock");
	ck_assert_int_eq(c.log_level, VMT_LOG_INFO);
	ck_assert_int_eq(c.zstd_level, 3);
	ck_assert_uint_eq(c.rec.ring_size, 4 << 20);
	ck_assert_uint_eq(c.rec.guest_buffer_kb, 4096);
	ck_assert_str_eq(c.rec.clock, "mono");
	ck_assert_str_eq(c.rec.events, "sched:*,irq:*,timer:*");
	ck_assert_uint_eq(c.rec.meta_max, 64 << 20);
	ck_assert_uint_eq(c.rec.flush_timeout_ms, 1000);
	ck_assert_uint_eq(c.memory_max, VMT_AUTO);
	ck_assert_uint_eq(c.forget_after_s, 3600);
	ck_assert_str_eq(c.control.group, "");
	ck_assert_str_eq(c.control.read_group, "");
	ck_assert_uint_eq(c.triggers.coalesce_ms, 500);
	ck_assert_uint_eq(c.triggers.cooldown_ms, 10000);
	ck_assert_uint_eq(c.triggers.max_per_minute, 12);
	ck_assert_uint_eq(c.retention.max_bytes, VMT_AUTO);
	ck_assert_uint_eq(c.retention.max_samples, 0);
	ck_assert_uint_eq(c.retention.max_aux, 8);
	ck_assert_uint_eq(c.retention.max_age_s, 0);
	ck_assert_int_eq(c.host.enabled, 0);
	ck_assert_str_eq(c.host.events, "kvm:*,sched:sched_switch,sched:sched_wakeup,sched:sched_waking");
	ck_assert_str_eq(c.host.clock, "mono");
	ck_assert_uint_eq(c.host.ring_size, 4 << 20);
	ck_assert_uint_eq(c.host.buffer_kb, 4096);
	ck_assert_int_eq(c.host.qemu_only, 1);
	ck_assert_uint_eq(c.ndiscovery, 0);
	ck_assert_ptr_null(c.discovery);
	ck_assert_uint_eq(c.nguests, 0);
	ck_assert_ptr_null(c.guests);
	check_idempotent(&c, "defaults");
	config_free(&c);
	config_free(&c);	/* twice is harmless */
}
END_TEST

/* "auto" from the machine's figures: bounded both ways; 0 stays 0. */
START_TEST(test_resolve_auto)
{
	struct vmt_config c;
	char why[256];

	config_init(&c);
	ck_assert_int_eq(config_resolve(&c, 24ull << 30, 252ull << 30, why, sizeof(why)), 0);
	ck_assert_uint_eq(c.memory_max, (24ull << 30) / 16);
	ck_assert_uint_eq(c.retention.max_bytes, VMT_AUTO_DISK_MAX);
	ck_assert_uint_eq(c.dump_reserve, 32 << 20);
	config_init(&c);
	ck_assert_int_eq(config_resolve(&c, 512ull << 30, 100ull << 20, why, sizeof(why)), 0);
	ck_assert_uint_eq(c.memory_max, VMT_AUTO_MEM_MAX);
	ck_assert_uint_eq(c.retention.max_bytes, VMT_AUTO_DISK_MIN);
	config_init(&c);
	ck_assert_int_eq(config_resolve(&c, 1ull << 30, 0, why, sizeof(why)), 0);
	ck_assert_uint_eq(c.memory_max, VMT_AUTO_MEM_MIN);
	ck_assert_uint_eq(c.retention.max_bytes, VMT_AUTO_DISK_MAX);
	/* the default reserve shrinks under a small auto cap, a written one is refused */
	ck_assert_uint_eq(c.dump_reserve, VMT_AUTO_MEM_MIN / 8);
	config_init(&c);
	c.dump_reserve = 512ull << 20;
	c.dump_reserve_set = true;
	ck_assert_int_eq(config_resolve(&c, 1ull << 30, 0, why, sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "dump_reserve"));
	/* written 0: no limit, whatever the machine */
	config_init(&c);
	c.memory_max = 0;
	c.retention.max_bytes = 0;
	ck_assert_int_eq(config_resolve(&c, 24ull << 30, 252ull << 30, why, sizeof(why)), 0);
	ck_assert_uint_eq(c.memory_max, 0);
	ck_assert_uint_eq(c.retention.max_bytes, 0);
}
END_TEST

/* The shipped file parses, and says nothing but the defaults, except the
 * discovery folders of libvirt and of vmtraced's own layout. */
START_TEST(test_shipped)
{
	_cleanup_free_ char *path = NULL, *got = NULL, *want = NULL;
	struct vmt_config c, d;
	char err[512];
	int r;

	ck_assert_int_ge(asprintf(&path, "%s/conf/vmtraced.yaml", test_srcdir()), 0);
	r = config_load(&c, path, err, sizeof(err));
	ck_assert_msg(r == 0, "shipped config: %s", err);
	ck_assert_uint_eq(c.nguests, 0);
	ck_assert_uint_eq(c.ndiscovery, 3);
	ck_assert_str_eq(c.discovery[0].path, "/run/libvirt/qemu/channel");
	ck_assert_int_eq(c.discovery[0].layout, VMT_LAYOUT_LIBVIRT);
	ck_assert_str_eq(c.discovery[1].path, "/var/lib/libvirt/qemu/channel/target");
	ck_assert_int_eq(c.discovery[1].layout, VMT_LAYOUT_LIBVIRT);
	ck_assert_str_eq(c.discovery[2].path, "/run/vmtraced/guests");
	ck_assert_int_eq(c.discovery[2].layout, VMT_LAYOUT_VMTRACED);
	ck_assert_int_eq(c.discovery[2].transport, VMT_TRANSPORT_AUTO);
	/* bounded without a word from the operator: auto sizes, forget_after */
	ck_assert_uint_eq(c.memory_max, VMT_AUTO);
	ck_assert_uint_eq(c.retention.max_bytes, VMT_AUTO);
	ck_assert_uint_gt(c.forget_after_s, 0);
	free(c.discovery);
	c.discovery = NULL;
	c.ndiscovery = 0;
	config_init(&d);
	got = print_to_string(&c);
	want = print_to_string(&d);
	ck_assert_msg(!strcmp(got, want), "shipped config is not the defaults:\n%s", got);
	config_free(&c);
}
END_TEST

/*
 * Its commented-out guest parses once uncommented.
 * The convention in the file: from `discovery:` on, "#  " starts
 * commented-out YAML, "# " prose.
 */
START_TEST(test_shipped_example)
{
	_cleanup_free_ char *path = NULL, *text = NULL;
	struct vmt_config c;
	char err[512], *g;
	int r;

	ck_assert_int_ge(asprintf(&path, "%s/conf/vmtraced.yaml", test_srcdir()), 0);
	text = slurp(path);
	ck_assert_ptr_nonnull(text);
	ck_assert_ptr_nonnull(strstr(text, "\nguests:\n"));
	g = strstr(text, "\ndiscovery:\n");
	ck_assert_ptr_nonnull(g);
	for (char *q = g + 1; (q = strstr(q, "\n#  ")); q++)
		q[1] = ' ';
	r = config_load_string(&c, "example", text, strlen(text), err, sizeof(err));
	ck_assert_msg(r == 0, "shipped examples: %s", err);
	ck_assert_uint_eq(c.ndiscovery, 3);
	ck_assert_uint_eq(c.nguests, 1);
	ck_assert_str_eq(c.guests[0].name, "web1");
	ck_assert_uint_eq(c.guests[0].rec.ring_size, 16 << 20);
	check_idempotent(&c, "example");
	config_free(&c);
}
END_TEST

/* Its host block, enabled, records the default host events. */
START_TEST(test_shipped_host)
{
	_cleanup_free_ char *path = NULL, *text = NULL;
	struct vmt_config c;
	char err[512], *e;
	int r;

	ck_assert_int_ge(asprintf(&path, "%s/conf/vmtraced.yaml", test_srcdir()), 0);
	text = slurp(path);
	ck_assert_ptr_nonnull(text);
	e = strstr(text, "\nhost:\n  enabled: false\n");
	ck_assert_ptr_nonnull(e);
	memcpy(e + strlen("\nhost:\n  enabled: "), "true ", 5);
	r = config_load_string(&c, "host", text, strlen(text), err, sizeof(err));
	ck_assert_msg(r == 0, "shipped host block enabled: %s", err);
	ck_assert_int_eq(c.host.enabled, 1);
	ck_assert_str_eq(c.host.events, "kvm:*,sched:sched_switch,sched:sched_wakeup,sched:sched_waking");
	config_free(&c);
}
END_TEST

/* Guests start from the defaults and override only what they give. */
START_TEST(test_inherit)
{
	static const char text[] =
		"guests:\n"
		"  - {name: a, path: /a, record: {clock: boot}}\n"
		"  - {name: b, path: /b}\n"
		"record: {ring_size: 8M, events: 'x:y'}\n";
	struct vmt_config c;
	char err[256];

	ck_assert_int_eq(config_load_string(&c, "t", text, strlen(text), err, sizeof(err)), 0);
	ck_assert_uint_eq(c.nguests, 2);
	ck_assert_uint_eq(c.guests[0].rec.ring_size, 8 << 20);
	ck_assert_str_eq(c.guests[0].rec.clock, "boot");
	ck_assert_str_eq(c.guests[0].rec.events, "x:y");
	ck_assert_str_eq(c.guests[1].rec.clock, "mono");
	ck_assert_int_eq(c.guests[0].line, 2);
	ck_assert_int_eq(c.guests[1].line, 3);
	ck_assert_int_eq(c.guests[1].transport, VMT_TRANSPORT_AUTO);
	config_free(&c);
}
END_TEST

/* Every field but line counts; bytes after a string's NUL do not. */
START_TEST(test_guest_equal)
{
	static const char text[] =
		"guests:\n"
		"  - {name: a, path: /a, cpus: 2, record: {clock: boot}}\n"
		"  - {name: b, path: /b}\n";
	struct vmt_config c;
	struct vmt_guest_conf a, b;
	char err[256];

	ck_assert_int_eq(config_load_string(&c, "t", text, strlen(text), err, sizeof(err)), 0);
	a = c.guests[0];
	b = c.guests[0];
	ck_assert(config_guest_equal(&a, &b));
	b.line = 99;
	ck_assert(config_guest_equal(&a, &b));
	memset(b.name + 2, 'x', sizeof(b.name) - 3);	/* after the NUL */
	memset(b.rec.events + strlen(b.rec.events) + 1, 'y', 8);
	ck_assert(config_guest_equal(&a, &b));
	ck_assert(!config_guest_equal(&a, &c.guests[1]));

#define DIFFERS(stmt) do { b = a; stmt; ck_assert_msg(!config_guest_equal(&a, &b), #stmt); } while (0)
	DIFFERS(strcpy(b.name, "a2"));
	DIFFERS(strcpy(b.path, "/a2"));
	DIFFERS(b.transport = VMT_TRANSPORT_SOCKET);
	DIFFERS(b.cpus = 3);
	DIFFERS(b.rec.ring_size += 4096);
	DIFFERS(b.rec.guest_buffer_kb = 0);
	DIFFERS(strcpy(b.rec.clock, "mono"));
	DIFFERS(strcpy(b.rec.events, "sched:*"));
	DIFFERS(b.rec.meta_max *= 2);
	DIFFERS(b.rec.flush_timeout_ms = 5);
#undef DIFFERS
	config_free(&c);
}
END_TEST

START_TEST(test_parse_duration)
{
	static const struct {
		const char *s;
		int r;
		uint64_t ms;
	} durations[] = {
		{ "0", 0, 0 },
		{ "10", 0, 10000 },
		{ "500ms", 0, 500 },
		{ "10s", 0, 10000 },
		{ "5m", 0, 300000 },
		{ "1h", 0, 3600000 },
		{ "30d", 0, 2592000000ull },
		{ "2 s", 0, 2000 },
		{ "18446744073709551615ms", 0, UINT64_MAX },
		{ "18446744073709551616ms", -ERANGE, 0 },
		{ "18446744073709552s", -ERANGE, 0 },
		{ "213503982335d", -ERANGE, 0 },
		{ "99999999999999999999999x", -EINVAL, 0 },
		{ "", -EINVAL, 0 },
		{ "s", -EINVAL, 0 },
		{ "-1s", -EINVAL, 0 },
		{ "+1s", -EINVAL, 0 },
		{ " 1s", -EINVAL, 0 },
		{ "1.5s", -EINVAL, 0 },
		{ "1S", -EINVAL, 0 },
		{ "1min", -EINVAL, 0 },
		{ "1h30m", -EINVAL, 0 },
		{ "1s ", -EINVAL, 0 },
		{ "0x10", -EINVAL, 0 },
	};

	for (size_t i = 0; i < ARRAY_SIZE(durations); i++) {
		uint64_t ms = 12345;
		int r = parse_duration_ms(durations[i].s, &ms);

		ck_assert_msg(r == durations[i].r, "\"%s\": got %d, want %d", durations[i].s, r, durations[i].r);
		ck_assert_msg(ms == (r ? 12345 : durations[i].ms), "\"%s\": got %" PRIu64, durations[i].s, ms);
	}
	ck_assert_int_eq(parse_duration_ms(NULL, &(uint64_t){ 0 }), -EINVAL);
}
END_TEST

START_TEST(test_missing_file)
{
	struct vmt_config c;
	char err[256];

	ck_assert_int_eq(config_load(&c, "/nonexistent/vmtraced.yaml", err, sizeof(err)), -ENOENT);
	ck_assert_str_eq(err, "/nonexistent/vmtraced.yaml: No such file or directory");
	ck_assert_uint_eq(c.nguests, 0);
	config_free(&c);
	ck_assert_int_eq(config_load(&c, "/", err, sizeof(err)), -EISDIR);
	config_free(&c);
}
END_TEST

/* No buffer, or a small one: still a clean return and a terminated string. */
START_TEST(test_err_buffer)
{
	static const char text[] = "log_level: loud\n";
	struct vmt_config c;
	char err[16];

	ck_assert_int_eq(config_load_string(&c, "t", text, strlen(text), NULL, 0), -EINVAL);
	memset(err, 'x', sizeof(err));
	ck_assert_int_eq(config_load_string(&c, "t.yaml", text, strlen(text), err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "t.yaml:1:12: lo");
	memset(err, 'x', sizeof(err));
	ck_assert_int_eq(config_load_string(&c, "a-long-file-name.yaml", text, strlen(text), err,
					    sizeof(err)), -EINVAL);
	ck_assert_uint_lt(strlen(err), sizeof(err));
	/* text need not be NUL-terminated: len bounds it */
	ck_assert_int_eq(config_load_string(&c, "t", "log_level: debugXXX", 16, err, sizeof(err)), 0);
	ck_assert_int_eq(c.log_level, VMT_LOG_DEBUG);
}
END_TEST

static char *guests_text(int n)
{
	struct vmt_buf b = { 0 };
	char line[128];

	ck_assert_int_eq(buf_append(&b, "guests:\n", 8), 0);
	for (int i = 0; i < n; i++) {
		int len = snprintf(line, sizeof(line), "  - {name: g%d, path: /vm/g%d}\n", i, i);
		ck_assert_int_eq(buf_append(&b, line, (size_t)len), 0);
	}
	ck_assert_int_eq(buf_append(&b, "", 1), 0);
	return (char *)b.data;
}

static char *discovery_text(int n)
{
	struct vmt_buf b = { 0 };
	char line[128];

	ck_assert_int_eq(buf_append(&b, "discovery:\n", 11), 0);
	for (int i = 0; i < n; i++) {
		int len = snprintf(line, sizeof(line), "  - {path: /vm/d%d}\n", i);
		ck_assert_int_eq(buf_append(&b, line, (size_t)len), 0);
	}
	ck_assert_int_eq(buf_append(&b, "", 1), 0);
	return (char *)b.data;
}

START_TEST(test_discovery_limit)
{
	_cleanup_free_ char *most = discovery_text(VMT_CONFIG_MAX_DISCOVERY);
	_cleanup_free_ char *over = discovery_text(VMT_CONFIG_MAX_DISCOVERY + 1);
	struct vmt_config c;
	char err[256];

	ck_assert_int_eq(config_load_string(&c, "t", most, strlen(most), err, sizeof(err)), 0);
	ck_assert_uint_eq(c.ndiscovery, VMT_CONFIG_MAX_DISCOVERY);
	ck_assert_str_eq(c.discovery[VMT_CONFIG_MAX_DISCOVERY - 1].path, "/vm/d63");
	check_idempotent(&c, "most discovery folders");
	config_free(&c);
	ck_assert_int_eq(config_load_string(&c, "t", over, strlen(over), err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "t:66:5: discovery[64]: more than 64 discovery folders");
	ck_assert_ptr_null(c.discovery);
}
END_TEST

/* A failed load after a good one frees what the good one had. */
START_TEST(test_reload_fails)
{
	static const char good[] =
		"discovery: [{path: /d}]\nguests: [{name: a, path: /a}]\n";
	static const char bad[] =
		"discovery: [{path: /d}, {path: /e}, {path: /d/x}]\nguests: [{name: a, path: /a}]\n";
	struct vmt_config c;
	char err[256];

	ck_assert_int_eq(config_load_string(&c, "t", good, strlen(good), err, sizeof(err)), 0);
	ck_assert_uint_eq(c.ndiscovery, 1);
	config_free(&c);
	ck_assert_int_eq(config_load_string(&c, "t", bad, strlen(bad), err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "t:1:44: discovery[2].path: \"/d/x\" is inside \"/d\", the path of discovery[0] (line 1)");
	ck_assert_uint_eq(c.ndiscovery, 0);
	ck_assert_ptr_null(c.discovery);
	ck_assert_uint_eq(c.nguests, 0);
}
END_TEST

START_TEST(test_guest_limit)
{
	_cleanup_free_ char *most = guests_text(VMT_CONFIG_MAX_GUESTS);
	_cleanup_free_ char *over = guests_text(VMT_CONFIG_MAX_GUESTS + 1);
	struct vmt_config c;
	char err[256];

	ck_assert_int_eq(config_load_string(&c, "t", most, strlen(most), err, sizeof(err)), 0);
	ck_assert_uint_eq(c.nguests, VMT_CONFIG_MAX_GUESTS);
	ck_assert_str_eq(c.guests[VMT_CONFIG_MAX_GUESTS - 1].name, "g1023");
	config_free(&c);
	ck_assert_int_eq(config_load_string(&c, "t", over, strlen(over), err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "t:1026:5: guests[1024]: more than 1024 guests");
}
END_TEST

/* The longest event list that fits, and one byte more. */
START_TEST(test_events_limit)
{
	char text[VMT_CONFIG_MAX_EVENTS + 64], ev[VMT_CONFIG_MAX_EVENTS];
	struct vmt_config c;
	char err[256];

	/* "a:" then 4093 x's: 4095 bytes, the most the NUL leaves room for */
	memset(ev, 'x', sizeof(ev));
	memcpy(ev, "a:", 2);
	ev[VMT_CONFIG_MAX_EVENTS - 1] = 0;
	snprintf(text, sizeof(text), "record: {events: '%s'}\n", ev);
	ck_assert_int_eq(config_load_string(&c, "t", text, strlen(text), err, sizeof(err)), 0);
	ck_assert_uint_eq(strlen(c.rec.events), VMT_CONFIG_MAX_EVENTS - 1);
	check_idempotent(&c, "longest events");
	snprintf(text, sizeof(text), "record: {events: '%sx'}\n", ev);
	ck_assert_int_eq(config_load_string(&c, "t", text, strlen(text), err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "t:1:18: record.events: the events joined with commas are longer than 4095 bytes");
}
END_TEST

/* libyaml is quadratic in flow nesting: the depth check must cut it short. */
START_TEST(test_deep_nesting)
{
	size_t n = 1 << 20;
	_cleanup_free_ char *text = malloc(2 * n + 16);
	struct vmt_config c;
	char err[256];

	ck_assert_ptr_nonnull(text);
	memcpy(text, "guests: ", 8);
	memset(text + 8, '[', n);
	memset(text + 8 + n, ']', n);
	ck_assert_int_eq(config_load_string(&c, "t", text, 8 + 2 * n, err, sizeof(err)), -EINVAL);
	ck_assert_str_eq(err, "t:1:72: nested more than 64 levels deep");
}
END_TEST

START_TEST(test_transport_name)
{
	ck_assert_str_eq(transport_name(VMT_TRANSPORT_AUTO), "auto");
	ck_assert_str_eq(transport_name(VMT_TRANSPORT_FIFO), "fifo");
	ck_assert_str_eq(transport_name(VMT_TRANSPORT_SOCKET), "socket");
	ck_assert_str_eq(transport_name((enum vmt_transport)42), "unknown");
	ck_assert_str_eq(layout_name(VMT_LAYOUT_VMTRACED), "vmtraced");
	ck_assert_str_eq(layout_name(VMT_LAYOUT_LIBVIRT), "libvirt");
	ck_assert_str_eq(layout_name((enum vmt_layout)42), "unknown");
}
END_TEST

static Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc = tcase_create("config");

	tcase_set_timeout(tc, 30);
	tcase_add_loop_test(tc, test_golden, 0, ncases);
	tcase_add_test(tc, test_golden_count);
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_resolve_auto);
	tcase_add_test(tc, test_shipped);
	tcase_add_test(tc, test_shipped_example);
	tcase_add_test(tc, test_shipped_host);
	tcase_add_test(tc, test_inherit);
	tcase_add_test(tc, test_guest_equal);
	tcase_add_test(tc, test_parse_duration);
	tcase_add_test(tc, test_missing_file);
	tcase_add_test(tc, test_err_buffer);
	tcase_add_test(tc, test_guest_limit);
	tcase_add_test(tc, test_discovery_limit);
	tcase_add_test(tc, test_reload_fails);
	tcase_add_test(tc, test_events_limit);
	tcase_add_test(tc, test_deep_nesting);
	tcase_add_test(tc, test_transport_name);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	cases_scan();
	return test_run_suite(config_suite());
}
