/* SPDX-License-Identifier: MIT */
/*
 * Integration: the operator's side. Help and exit codes of vmtraced and of
 * every vmtracectl command; `vmtracectl metrics` against a daemon with two
 * stand-in guests, checked by promtool and against `--json status`; the
 * metrics unit's command writing its file; reload refused, as the
 * service's ExecReload= runs it; the warning when a guest's pages say
 * events were lost in it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "itest.h"
#include "page.h"
#include "testd.h"
#include "testutil.h"
#include "util.h"

#define PS ITEST_PS

static struct itest_input in;

#define NEED_INPUT() ITEST_NEED_INPUT(in)

static uint64_t fed_pages_of(const struct fakeguest_conf *fc)
{
	uint64_t n = 0;

	for (unsigned c = 0; c < fc->ncpus; c++)
		n += fc->npages[c];
	return n;
}

/* A program of the build, by name. */
static const char *prog(const char *name)
{
	static char p[2][600];
	static int k;

	k ^= 1;
	snprintf(p[k], sizeof(p[k]), "%s/%s/%s", test_srcdir(), test_builddir(), name);
	return p[k];
}

/*
 * Run a shell command line; its stdout into out and its stderr into err
 * (either may be NULL); the exit code.
 */
__attribute__((format(printf, 5, 6)))
static int run(char *out, size_t n, char *err, size_t en, const char *fmt, ...)
{
	char cmd[2048], tmpl[600];
	const char *tmp = getenv("TMPDIR");
	va_list ap;
	FILE *p, *e;
	size_t got;
	int fd, st;

	snprintf(tmpl, sizeof(tmpl), "%s/ctl-err.XXXXXX", tmp ? tmp : "/tmp");
	fd = mkstemp(tmpl);
	ck_assert_int_ge(fd, 0);
	close(fd);
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd) - 700, fmt, ap);
	va_end(ap);
	snprintf(cmd + strlen(cmd), 700, " 2>'%s'", tmpl);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	st = testd_ctl_end(p, out, n);	/* reads stdout, closes, the exit code */
	e = fopen(tmpl, "r");
	if (err && en && e) {
		got = fread(err, 1, en - 1, e);
		err[got] = 0;
	}
	if (e)
		fclose(e);
	unlink(tmpl);
	return st;
}

/* ---- help and usage --------------------------------------------------------- */

static void expect_help(const char *what)
{
	char out[8192], err[2048];
	int rc = run(out, sizeof(out), err, sizeof(err), "%s", what);

	ck_assert_msg(rc == 0, "'%s' exited %d: %s", what, rc, err);
	ck_assert_msg(!strncmp(out, "usage: ", 7), "'%s' printed '%s'", what, out);
	ck_assert_msg(err[0] == 0, "'%s' wrote to stderr: '%s'", what, err);
}

static void expect_usage_error(const char *what)
{
	char out[8192], err[2048];
	int rc = run(out, sizeof(out), err, sizeof(err), "%s", what);

	ck_assert_msg(rc == 2, "'%s' exited %d, not 2", what, rc);
	ck_assert_msg(out[0] == 0, "'%s' printed to stdout: '%s'", what, out);
	ck_assert_msg(strstr(err, "usage: ") != NULL, "'%s' said '%s'", what, err);
}

START_TEST(help_everywhere)
{
	static const char *const cmds[] = { "status", "guests", "metrics", "dump", "samples",
					    "reload", "info", "merge", "report" };
	char line[1024];

	/* no daemon: help must not need one */
	snprintf(line, sizeof(line), "%s --help", prog("vmtraced"));
	expect_help(line);
	snprintf(line, sizeof(line), "%s -h", prog("vmtraced"));
	expect_help(line);
	snprintf(line, sizeof(line), "%s --help", prog("vmtracectl"));
	expect_help(line);
	snprintf(line, sizeof(line), "%s -h", prog("vmtracectl"));
	expect_help(line);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		char out[8192];

		snprintf(line, sizeof(line), "%s -s /nonexistent/sock %s --help", prog("vmtracectl"), cmds[i]);
		expect_help(line);
		snprintf(line, sizeof(line), "%s -s /nonexistent/sock %s -h", prog("vmtracectl"), cmds[i]);
		expect_help(line);
		/* and the general help names it */
		ck_assert_int_eq(run(out, sizeof(out), NULL, 0, "%s --help", prog("vmtracectl")), 0);
		snprintf(line, sizeof(line), "\n  %s", cmds[i]);
		ck_assert_msg(strstr(out, line) != NULL, "--help does not list %s", cmds[i]);
	}
	/* after other arguments too */
	snprintf(line, sizeof(line), "%s -s /nonexistent/sock dump g1 --window 2 --help", prog("vmtracectl"));
	expect_help(line);
	snprintf(line, sizeof(line), "%s merge -o x.dat a.vmts --help", prog("vmtracectl"));
	expect_help(line);

	snprintf(line, sizeof(line), "%s --bogus", prog("vmtraced"));
	expect_usage_error(line);
	snprintf(line, sizeof(line), "%s extra", prog("vmtraced"));
	expect_usage_error(line);
	snprintf(line, sizeof(line), "%s", prog("vmtracectl"));
	expect_usage_error(line);
	snprintf(line, sizeof(line), "%s nosuch", prog("vmtracectl"));
	expect_usage_error(line);
	snprintf(line, sizeof(line), "%s -s /nonexistent/sock status extra", prog("vmtracectl"));
	expect_usage_error(line);
	snprintf(line, sizeof(line), "%s -s /nonexistent/sock metrics extra", prog("vmtracectl"));
	expect_usage_error(line);
	snprintf(line, sizeof(line), "%s -s /nonexistent/sock reload extra", prog("vmtracectl"));
	expect_usage_error(line);
	snprintf(line, sizeof(line), "%s -s /nonexistent/sock dump --bogus", prog("vmtracectl"));
	expect_usage_error(line);
	snprintf(line, sizeof(line), "%s info", prog("vmtracectl"));
	expect_usage_error(line);
	snprintf(line, sizeof(line), "%s merge", prog("vmtracectl"));
	expect_usage_error(line);
	snprintf(line, sizeof(line), "%s report", prog("vmtracectl"));
	expect_usage_error(line);
}
END_TEST

/* ---- exit codes against a daemon ---------------------------------------------- */

START_TEST(dump_of_nothing_fails)
{
	struct itest_run r;
	char out[4096], err[2048];
	int rc;

	NEED_INPUT();
	itest_run_init(&r, &in, "nothing");
	/* g1 is configured, its agent never comes: no page to write */
	itest_run_daemon(&r, "record:\n  ring_size: 4MiB\n", 1);
	rc = run(out, sizeof(out), err, sizeof(err), "%s -s '%s' dump", prog("vmtracectl"), r.d.sock);
	ck_assert_msg(rc == 1, "dump of nothing exited %d: '%s' '%s'", rc, out, err);
	ck_assert_msg(out[0] == 0, "dump of nothing printed '%s'", out);
	ck_assert_msg(strstr(err, "vmtracectl: ") != NULL, "dump of nothing said '%s'", err);
	rc = run(out, sizeof(out), err, sizeof(err), "%s -s '%s' --json dump g1", prog("vmtracectl"), r.d.sock);
	ck_assert_msg(rc == 1, "dump g1 of nothing exited %d: '%s' '%s'", rc, out, err);
	itest_run_end(&r);
}
END_TEST

/* The unit's ExecReload= as it stands, with this build's vmtracectl. */
static int unit_reload(struct testd *d, char *err, size_t en)
{
	char path[600], line[512], cmd[512] = "";
	FILE *f;

	snprintf(path, sizeof(path), "%s/units/vmtraced.service", test_srcdir());
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "ExecReload=", 11))
			snprintf(cmd, sizeof(cmd), "%s", line + 11);
	fclose(f);
	ck_assert_str_eq(cmd, "/usr/local/bin/vmtracectl reload\n");
	return run(NULL, 0, err, en, "%s -s '%s' reload", prog("vmtracectl"), d->sock);
}

START_TEST(reload_refused_fails)
{
	struct itest_run r;
	char err[2048], out[256];

	NEED_INPUT();
	itest_run_init(&r, &in, "reload");
	itest_run_daemon(&r, "record:\n  ring_size: 4MiB\n", 1);
	ck_assert_int_eq(unit_reload(&r.d, err, sizeof(err)), 0);
	ck_assert_int_eq(itest_write_conf(&r.d, "record:\n  ring_size: 0\n"), 0);
	ck_assert_int_eq(unit_reload(&r.d, err, sizeof(err)), 1);
	ck_assert_msg(strstr(err, "ring_size") != NULL, "refused reload said '%s'", err);
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "reload 2>/dev/null"), 1);
	/* the running configuration stays */
	ck_assert_int_eq(itest_nguests(&r.d), 1);
	itest_run_end(&r);
}
END_TEST

/* ---- metrics ---------------------------------------------------------------- */

/* The value of the sample "name{labels} v" or "name v" (labels NULL). */
static bool metric(const char *text, const char *name, const char *labels, double *v)
{
	char head[256];
	const char *p;

	snprintf(head, sizeof(head), "\n%s%s%s%s ", name, labels ? "{" : "", labels ? labels : "",
		 labels ? "}" : "");
	p = strstr(text, head);
	if (!p)
		return false;
	*v = strtod(p + strlen(head), NULL);
	return true;
}

static void expect_metric(const char *text, const char *name, const char *labels, uint64_t want)
{
	double v;

	ck_assert_msg(metric(text, name, labels, &v), "no %s{%s} in:\n%s", name, labels ? labels : "",
		      text);
	ck_assert_msg(v == (double)want, "%s{%s} is %.0f, status says %llu", name, labels ? labels : "",
		      v, (unsigned long long)want);
}

static bool have_promtool(void)
{
	return itest_sh("command -v promtool >/dev/null 2>&1") == 0;
}

START_TEST(metrics_two_guests)
{
	struct itest_run r;
	struct ijson root;
	const struct ijson *dm;
	char *text = malloc(1 << 20), sample[4400], path[700], err[4096], lab[64];
	int rc;

	NEED_INPUT();
	ck_assert_ptr_nonnull(text);
	itest_run_init(&r, &in, "metrics");
	itest_run_guest(&r, 0);
	itest_run_guest(&r, 1);
	itest_run_daemon(&r, "record:\n  ring_size: 16MiB\n  flush_timeout: 5000ms\n", 2);
	itest_expect_streaming(&r.d, "g1", 10000);
	itest_expect_streaming(&r.d, "g2", 10000);
	itest_expect_pages_in(&r.d, "g1", fed_pages_of(&r.fc[0]));
	itest_expect_pages_in(&r.d, "g2", fed_pages_of(&r.fc[1]));
	itest_dump_one(&r.d, "g1", sample, sizeof(sample));

	rc = itest_ctl(&r.d, text + 1, (1 << 20) - 1, "metrics");
	text[0] = '\n';	/* every sample line then starts after a \n */
	ck_assert_msg(rc == 0, "metrics exited %d", rc);
	snprintf(path, sizeof(path), "%s/metrics.prom", r.dir);
	ck_assert_int_eq(itest_write_file(path, text + 1), 0);

	ck_assert_int_eq(itest_status(&r.d, &root), 0);
	dm = ijson_get(&root, "daemon");
	ck_assert_ptr_nonnull(dm);
	expect_metric(text, "vmtraced_up", NULL, 1);
	expect_metric(text, "vmtraced_dumps_total", NULL, ijson_u64(dm, "dumps"));
	ck_assert_uint_eq(ijson_u64(dm, "dumps"), 1);
	expect_metric(text, "vmtraced_dump_failures_total", NULL, ijson_u64(dm, "dump_errors"));
	expect_metric(text, "vmtraced_dump_reserve_bytes", NULL, ijson_u64(dm, "reserve"));
	expect_metric(text, "vmtraced_memory_max_bytes", NULL, ijson_u64(dm, "mem_cap"));
	for (int i = 0; i < 2; i++) {
		const char *name = i ? "g2" : "g1";
		const struct ijson *g = itest_guest(&root, name);

		ck_assert_ptr_nonnull(g);
		snprintf(lab, sizeof(lab), "guest=\"%s\"", name);
		expect_metric(text, "vmtraced_guest_pages_total", lab, fed_pages_of(&r.fc[i]));
		expect_metric(text, "vmtraced_guest_pages_total", lab, ijson_u64(g, "pages_in"));
		expect_metric(text, "vmtraced_guest_events_total", lab, ijson_u64(g, "events_in"));
		expect_metric(text, "vmtraced_guest_ring_capacity_pages", lab, ijson_u64(g, "capacity"));
		expect_metric(text, "vmtraced_guest_pages_overwritten_total", lab,
			      ijson_u64(g, "pages_overwritten"));
		expect_metric(text, "vmtraced_guest_pages_lost_events_total", lab,
			      ijson_u64(g, "pages_guest_lost"));
		expect_metric(text, "vmtraced_guest_cpus", lab, ijson_u64(g, "ncpus"));
		expect_metric(text, "vmtraced_guest_sessions_total", lab, 1);
		snprintf(lab, sizeof(lab), "guest=\"%s\",state=\"streaming\"", name);
		expect_metric(text, "vmtraced_guest_state", lab, 1);
	}
	/* the detectors, by name */
	ck_assert_msg(strstr(text, "\nvmtraced_detector_loaded{detector=\"") != NULL, "%s", text);
	/* every tag has a name here: nothing left untyped */
	ck_assert_msg(strstr(text, " untyped\n") == NULL, "an unnamed status field:\n%s", text);
	/* counters end in _total, one TYPE a family */
	for (const char *p = strstr(text, "\n# TYPE "); p; p = strstr(p + 1, "\n# TYPE ")) {
		char name[128], type[32], again[160];

		ck_assert_int_eq(sscanf(p, "\n# TYPE %127s %31s", name, type), 2);
		if (!strcmp(type, "counter"))
			ck_assert_msg(strlen(name) > 6 && !strcmp(name + strlen(name) - 6, "_total"),
				      "counter %s", name);
		snprintf(again, sizeof(again), "\n# TYPE %s ", name);
		ck_assert_msg(strstr(p + 1, again) == NULL, "two TYPE lines for %s", name);
	}
	ijson_free(&root);

	if (have_promtool()) {
		rc = run(NULL, 0, err, sizeof(err), "promtool check metrics <'%s'", path);
		ck_assert_msg(rc == 0, "promtool check metrics: %s\n%s", err, text + 1);
	} else {
		printf("SKIP: %s: promtool is not installed (package prometheus): the format is not "
		       "checked by it\n", __func__);
	}
	free(text);
	itest_run_end(&r);
}
END_TEST

/*
 * units/vmtraced-metrics.service's command, with this build's vmtracectl
 * and a folder of the test's: "$$" as systemd gives it to the shell.
 */
static int unit_metrics(const struct testd *d, const char *sock, const char *prom)
{
	char unit[600];

	snprintf(unit, sizeof(unit), "%s/units/vmtraced-metrics.service", test_srcdir());
	return itest_sh("cmd=$(sed -n \"s/^ExecStart=\\/bin\\/sh -c '\\(.*\\)'$/\\1/p\" '%s' | "
			"sed -e 's/\\$\\$/$/g' -e 's#/usr/local/bin/vmtracectl#%s -s %s#') && "
			"[ -n \"$cmd\" ] && VMTRACED_METRICS='%s' sh -c \"$cmd\" 2>/dev/null",
			unit, prog("vmtracectl"), sock, prom);
}

START_TEST(metrics_unit_writes_atomically)
{
	struct itest_run r;
	char prom[700], dir[600], err[4096];
	uint64_t t0;

	NEED_INPUT();
	itest_run_init(&r, &in, "metricsunit");
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "record:\n  ring_size: 4MiB\n", 1);
	itest_expect_streaming(&r.d, "g1", 10000);
	snprintf(dir, sizeof(dir), "%s/textfile", r.dir);
	ck_assert_int_eq(itest_sh("mkdir '%s'", dir), 0);
	snprintf(prom, sizeof(prom), "%s/vmtraced.prom", dir);

	ck_assert_int_eq(unit_metrics(&r.d, r.d.sock, prom), 0);
	ck_assert_int_eq(itest_sh("grep -qx 'vmtraced_up 1' '%s'", prom), 0);
	ck_assert_int_eq(itest_sh("grep -q '^vmtraced_guest_pages_total{guest=\"g1\"} ' '%s'", prom), 0);
	/* node_exporter runs as its own user */
	ck_assert_int_eq(itest_sh("[ \"$(stat -c %%a '%s')\" = 644 ] || [ \"$(umask)\" != 0022 ]", prom), 0);
	/* nothing but the file is left, however often it runs */
	t0 = itest_now_ms();
	for (int i = 0; i < 20; i++)
		ck_assert_int_eq(unit_metrics(&r.d, r.d.sock, prom), 0);
	ck_assert_int_eq(itest_sh("[ \"$(ls -A '%s')\" = vmtraced.prom ]", dir), 0);
	printf("metrics unit: %.1f ms a run\n", (double)(itest_now_ms() - t0) / 20);
	if (have_promtool())
		ck_assert_msg(run(NULL, 0, err, sizeof(err), "promtool check metrics <'%s'", prom) == 0,
			      "promtool: %s", err);

	/* the daemon does not answer: the file says so, the unit fails */
	ck_assert_int_eq(unit_metrics(&r.d, "/nonexistent/sock", prom), 1);
	ck_assert_int_eq(itest_sh("grep -qx 'vmtraced_up 0' '%s'", prom), 0);
	ck_assert_int_eq(itest_sh("! grep -q vmtraced_guest '%s'", prom), 0);
	ck_assert_int_eq(itest_sh("[ \"$(ls -A '%s')\" = vmtraced.prom ]", dir), 0);
	itest_run_end(&r);
}
END_TEST

/* ---- bash completion ---------------------------------------------------------- */

/* Complete "vmtracectl WORDS..." (the last word the one under the cursor)
 * with tools/vmtracectl.bash and this build's vmtracectl first in PATH. */
static int complete_words(char *out, size_t n, const char *words)
{
	return run(out, n, NULL, 0,
		   "PATH='%s/%s':$PATH bash -c '. \"%s/tools/vmtracectl.bash\"; "
		   "COMP_WORDS=(vmtracectl %s); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); "
		   "_vmtracectl; echo \"${COMPREPLY[*]}\"'",
		   test_srcdir(), test_builddir(), test_srcdir(), words);
}

START_TEST(completion_names_guests)
{
	struct itest_run r;
	char out[4096], words[600];

	NEED_INPUT();
	if (itest_sh("command -v bash >/dev/null"))
		VMT_SKIP("no bash");
	ck_assert_int_eq(complete_words(out, sizeof(out), "\"\""), 0);
	ck_assert_str_eq(out, "status guests metrics dump samples reload upgrade info merge report\n");
	ck_assert_int_eq(complete_words(out, sizeof(out), "dump --w"), 0);
	ck_assert_str_eq(out, "--window\n");
	/* no daemon: nothing, and nothing said */
	ck_assert_int_eq(complete_words(out, sizeof(out), "-s /nonexistent/sock dump \"\""), 0);
	ck_assert_str_eq(out, "\n");

	itest_run_init(&r, &in, "complete");
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "record:\n  ring_size: 4MiB\n", 2);	/* g2 never comes */
	itest_expect_streaming(&r.d, "g1", 10000);
	snprintf(words, sizeof(words), "-s '\\''%s'\\'' dump \"\"", r.d.sock);
	ck_assert_int_eq(complete_words(out, sizeof(out), words), 0);
	ck_assert_str_eq(out, "g1 g2\n");
	snprintf(words, sizeof(words), "--socket '\\''%s'\\'' samples g", r.d.sock);
	ck_assert_int_eq(complete_words(out, sizeof(out), words), 0);
	ck_assert_str_eq(out, "g1 g2\n");
	itest_run_end(&r);
}
END_TEST

/* ---- events lost in the guest: one warning ------------------------------------ */

static bool page_flagged(const uint8_t *p)
{
	return get_le64(p + 8) & VMT_PAGE_MISSED_EVENTS;
}

START_TEST(lost_events_warned_once)
{
	struct itest_run r;
	uint64_t flagged[2] = { 0 };
	size_t npages = 64;

	NEED_INPUT();
	itest_run_init(&r, &in, "lost");
	itest_run_pages(&r, &in, 0, npages);
	itest_run_pages(&r, &in, 1, npages);
	/* g1: pages flagged on every CPU, spread over the stream */
	for (unsigned c = 0; c < in.ncpus; c++)
		for (size_t i = 3; i < npages; i += 7)
			r.own[0][c][i * PS + 11] |= 0x80;	/* bit 31 of the commit word */
	for (int g = 0; g < 2; g++)
		for (unsigned c = 0; c < in.ncpus; c++)
			for (size_t i = 0; i < npages; i++)
				flagged[g] += page_flagged(r.own[g][c] + i * PS);
	ck_assert_uint_gt(flagged[0], 1);
	itest_run_guest(&r, 0);
	itest_run_guest(&r, 1);
	itest_run_daemon(&r, "record:\n  ring_size: 4MiB\n", 2);
	itest_expect_streaming(&r.d, "g1", 10000);
	itest_expect_streaming(&r.d, "g2", 10000);
	itest_expect_pages_in(&r.d, "g1", npages * in.ncpus);
	itest_expect_pages_in(&r.d, "g2", npages * in.ncpus);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "pages_guest_lost"), flagged[0]);
	ck_assert_uint_eq(itest_num(&r.d, "g2", "pages_guest_lost"), flagged[1]);

	/* one warning for g1 (GUEST= in the journal, the name in the line),
	 * however many reads its pages took; g2 only if the input has some */
	ck_assert_msg(itest_sh("[ $(grep -c 'guest g1: cpu[0-9]*: events lost in the guest before "
			       "[0-9]* page(s).*once a minute' '%s') = 1 ]", r.d.log) == 0,
		      "not one warning for g1 (%llu pages flagged; log: %s)",
		      (unsigned long long)flagged[0], r.d.log);
	ck_assert_int_eq(testd_log_count(&r.d, "events lost in the guest"), flagged[1] ? 2 : 1);
	itest_run_end(&r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ctl");
	TCase *t = tcase_create("ctl");
	int rc;

	itest_input_prepare(&in);
	TEST_ADD(t, help_everywhere);
	TEST_ADD(t, dump_of_nothing_fails);
	TEST_ADD(t, reload_refused_fails);
	TEST_ADD(t, metrics_two_guests);
	TEST_ADD(t, metrics_unit_writes_atomically);
	TEST_ADD(t, lost_events_warned_once);
	TEST_ADD(t, completion_names_guests);
	tcase_set_timeout(t, 120);
	suite_add_tcase(s, t);
	rc = test_run_suite(s);
	itest_input_free(&in);
	return rc;
}
