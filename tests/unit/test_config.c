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
	}
	config_free(&c);
}
END_TEST

START_TEST(test_golden_count)
{
	ck_assert_msg(ncases >= 40, "only %d golden cases found under tests/config", ncases);
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
	ck_assert_uint_eq(c.nguests, 0);
	ck_assert_ptr_null(c.guests);
	check_idempotent(&c, "defaults");
	config_free(&c);
	config_free(&c);	/* twice is harmless */
}
END_TEST

/* The shipped file parses, and says nothing but the defaults. */
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
	config_init(&d);
	got = print_to_string(&c);
	want = print_to_string(&d);
	ck_assert_msg(!strcmp(got, want), "shipped config is not the defaults:\n%s", got);
	config_free(&c);
}
END_TEST

/*
 * Its commented-out guest parses once uncommented. The convention in the
 * file: after `guests:`, "#  " starts commented-out YAML, "# " prose.
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
	g = strstr(text, "\nguests:\n");
	ck_assert_ptr_nonnull(g);
	for (char *q = g + 1; (q = strstr(q, "\n#  ")); q++)
		q[1] = ' ';
	r = config_load_string(&c, "example", text, strlen(text), err, sizeof(err));
	ck_assert_msg(r == 0, "shipped example guest: %s", err);
	ck_assert_uint_eq(c.nguests, 1);
	ck_assert_str_eq(c.guests[0].name, "web1");
	ck_assert_uint_eq(c.guests[0].rec.ring_size, 16 << 20);
	check_idempotent(&c, "example");
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
	tcase_add_test(tc, test_shipped);
	tcase_add_test(tc, test_shipped_example);
	tcase_add_test(tc, test_inherit);
	tcase_add_test(tc, test_missing_file);
	tcase_add_test(tc, test_err_buffer);
	tcase_add_test(tc, test_guest_limit);
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
