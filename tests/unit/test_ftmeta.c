/* SPDX-License-Identifier: MIT */
/*
 * ftmeta, shared by the agent and the host source: the event-list matcher
 * (what record.events and host.events enable), applying a list to an
 * instance, the metadata bundle and the task tables, built from a fake
 * tracefs made in a temporary folder (no root, no kernel).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ftmeta.h"
#include "meta.h"
#include "testutil.h"
#include "util.h"

/* ---- matching ------------------------------------------------------------- */

static char *avail[] = {
	"irq:irq_handler_entry", "irq:irq_handler_exit", "kvm:kvm_entry", "kvm:kvm_exit",
	"sched:sched_switch", "sched:sched_wakeup", "sched:sched_waking", "timer:hrtimer_start",
	"timer:sched_switch",	/* an event named like another system's */
};

struct m {
	char **out;
	size_t n;
	int r;
	char missing[256];
};

static void match(struct m *m, const char *list)
{
	free(m->out);
	m->out = NULL;
	m->n = 0;
	m->r = ftmeta_match(list, strlen(list), avail, ARRAY_SIZE(avail), &m->out, &m->n,
			    m->missing, sizeof(m->missing));
}

/* The matched events joined with ','. */
static const char *got(const struct m *m)
{
	static char s[1024];

	s[0] = 0;
	for (size_t i = 0; i < m->n; i++) {
		size_t o = strlen(s);
		snprintf(s + o, sizeof(s) - o, "%s%s", i ? "," : "", m->out[i]);
	}
	return s;
}

START_TEST(match_globs)
{
	struct m m = { 0 };

	match(&m, "sched:*, irq:irq_handler_entry");
	ck_assert_int_eq(m.r, 0);
	ck_assert_str_eq(got(&m), "irq:irq_handler_entry,sched:sched_switch,sched:sched_wakeup,"
				  "sched:sched_waking");
	match(&m, "sched:sched_wak*");
	ck_assert_str_eq(got(&m), "sched:sched_wakeup,sched:sched_waking");
	match(&m, "irq:*_exit,k*:*");
	ck_assert_str_eq(got(&m), "irq:irq_handler_exit,kvm:kvm_entry,kvm:kvm_exit");
	match(&m, "*:sched_switch");
	ck_assert_str_eq(got(&m), "sched:sched_switch,timer:sched_switch");
	match(&m, "*:*");
	ck_assert_uint_eq(m.n, ARRAY_SIZE(avail));
	match(&m, "*");
	ck_assert_uint_eq(m.n, ARRAY_SIZE(avail));
	/* overlapping patterns give each event once, sorted */
	match(&m, "sched:*,sched:sched_switch,*:sched_switch");
	ck_assert_int_eq(m.r, 0);
	ck_assert_str_eq(got(&m), "sched:sched_switch,sched:sched_wakeup,sched:sched_waking,"
				  "timer:sched_switch");
	free(m.out);
}
END_TEST

/* A name alone is a system or an event of that name, as set_event reads it. */
START_TEST(match_one_name)
{
	struct m m = { 0 };

	match(&m, "kvm");
	ck_assert_int_eq(m.r, 0);
	ck_assert_str_eq(got(&m), "kvm:kvm_entry,kvm:kvm_exit");
	match(&m, "sched_switch");
	ck_assert_str_eq(got(&m), "sched:sched_switch,timer:sched_switch");
	match(&m, "timer");
	ck_assert_str_eq(got(&m), "timer:hrtimer_start,timer:sched_switch");
	match(&m, "kvm_e*");
	ck_assert_str_eq(got(&m), "kvm:kvm_entry,kvm:kvm_exit");
	free(m.out);
}
END_TEST

START_TEST(match_nothing)
{
	struct m m = { 0 };
	char longname[301];

	match(&m, "nosuch:*");
	ck_assert_int_eq(m.r, 1);
	ck_assert_uint_eq(m.n, 0);
	ck_assert_str_eq(m.missing, "nosuch:*");
	/* the others are still matched; every miss is named */
	match(&m, "nosuch:*, sched:sched_switch,kvm:nope");
	ck_assert_int_eq(m.r, 2);
	ck_assert_str_eq(got(&m), "sched:sched_switch");
	ck_assert_str_eq(m.missing, "nosuch:*, kvm:nope");
	/* whole names only, and case matters */
	match(&m, "sched:sched,sch,SCHED:*,Sched_switch");
	ck_assert_int_eq(m.r, 4);
	ck_assert_uint_eq(m.n, 0);
	/* long is not malformed: it just matches nothing */
	memset(longname, 'a', 300);
	longname[300] = 0;
	match(&m, longname);
	ck_assert_int_eq(m.r, 1);
	/* nothing asked, nothing matched, nothing missing */
	match(&m, ",, ,");
	ck_assert_int_eq(m.r, 0);
	ck_assert_uint_eq(m.n, 0);
	match(&m, "");
	ck_assert_int_eq(m.r, 0);
	ck_assert_uint_eq(m.n, 0);
	/* against no events at all */
	free(m.out);
	m.out = NULL;
	m.r = ftmeta_match("sched:*", 7, NULL, 0, &m.out, &m.n, m.missing, sizeof(m.missing));
	ck_assert_int_eq(m.r, 1);
	ck_assert_uint_eq(m.n, 0);
	free(m.out);
}
END_TEST

START_TEST(match_malformed)
{
	static const char *const bad[] = {
		"sched:a:b", ":sched_switch", "sched:", ":", "sched:sched-switch", "sched:sw?tch",
		"sched:[s]witch", "sched:sched switch", "sched/sched_switch", "sched:é",
	};
	struct m m = { 0 };

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		char list[64];

		snprintf(list, sizeof(list), "sched:*,%s", bad[i]);
		match(&m, list);
		ck_assert_msg(m.r == -EINVAL, "'%s' gave %d", bad[i], m.r);
		ck_assert_msg(strstr(m.missing, bad[i]) != NULL, "'%s' not named in '%s'", bad[i],
			      m.missing);
		ck_assert_msg(!ftmeta_pattern_valid(bad[i], strlen(bad[i])), "'%s' valid", bad[i]);
	}
	ck_assert(ftmeta_pattern_valid("sched:*", 7));
	ck_assert(ftmeta_pattern_valid("*", 1));
	ck_assert(ftmeta_pattern_valid("i915", 4));
	ck_assert(!ftmeta_pattern_valid("", 0));
	/* len bounds the pattern: what follows is not read */
	ck_assert(ftmeta_pattern_valid("sched:x,y", 7));
	ck_assert_ptr_null(m.out);
}
END_TEST

/* ---- a fake tracefs ------------------------------------------------------- */

struct fake {
	char *root;
	char top[512], inst[600], kallsyms[512];
};

static void put(const char *dir, const char *name, const char *text)
{
	char path[1024], *slash;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	for (slash = strchr(path + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = 0;
		mkdir(path, 0755);
		*slash = '/';
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	ck_assert_msg(fd >= 0, "%s: %s", path, strerror(errno));
	ck_assert_int_eq(write_full(fd, text, strlen(text)), 0);
	close(fd);
}

static char *get(const char *dir, const char *name)
{
	char path[1024], *s;
	size_t len;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	ck_assert_msg(read_file(path, 1 << 20, &s, &len) == 0, "%s unreadable", path);
	return s;
}

static void format(const char *top, const char *sysev)
{
	char name[256], text[256];
	const char *c = strchr(sysev, ':');

	snprintf(name, sizeof(name), "events/%.*s/%s/format", (int)(c - sysev), sysev, c + 1);
	snprintf(text, sizeof(text), "name: %s\nID: 1\nformat:\n", c + 1);
	put(top, name, text);
	snprintf(name, sizeof(name), "events/%.*s/%s/enable", (int)(c - sysev), sysev, c + 1);
	put(top, name, "0\n");
}

/* A top-level tracefs with four systems and an instance "x" in it. */
static void fake_make(struct fake *f)
{
	static const char *const events[] = {
		"ftrace:function", "ftrace:print", "irq:irq_handler_entry",
		"sched:sched_switch", "sched:sched_wakeup", "timer:hrtimer_start",
	};
	char list[512] = "";

	f->root = test_mkdtemp("ftmeta");
	ck_assert_ptr_nonnull(f->root);
	snprintf(f->top, sizeof(f->top), "%s/tracing", f->root);
	snprintf(f->inst, sizeof(f->inst), "%s/instances/x", f->top);
	snprintf(f->kallsyms, sizeof(f->kallsyms), "%s/kallsyms", f->root);
	for (size_t i = 0; i < ARRAY_SIZE(events); i++) {
		size_t o = strlen(list);
		format(f->top, events[i]);
		if (strncmp(events[i], "ftrace:", 7))
			snprintf(list + o, sizeof(list) - o, "%s\n", events[i]);
	}
	/* files beside the event folders are not events */
	put(f->top, "events/sched/enable", "0\n");
	put(f->top, "events/sched/filter", "none\n");
	put(f->top, "available_events", list);
	put(f->top, "events/header_page", "top header_page\n");
	put(f->top, "events/header_event", "top header_event\n");
	put(f->top, "set_event", "timer:hrtimer_start\n");
	put(f->top, "trace_clock", "[local] global\n");
	put(f->top, "printk_formats", "0xffff : \"hello\"\n");
	put(f->top, "saved_cmdlines", "1 init\n42 qemu-system-x86\n");
	put(f->top, "saved_tgids", "1 1\n42 42\n");
	put(f->inst, "events/header_page", "inst header_page\n");
	put(f->inst, "events/header_event", "inst header_event\n");
	put(f->inst, "set_event", "sched:sched_switch\nirq:irq_handler_entry\nsched:sched_wakeup\n");
	put(f->inst, "trace_clock", "local [mono]\n");
	for (size_t i = 2; i < ARRAY_SIZE(events); i++)
		format(f->inst, events[i]);
	put(f->root, "kallsyms", "ffffffff81000000 T _stext\n");
}

static void fake_free(struct fake *f)
{
	test_rmtree(f->root);
	free(f->root);
}

/*
 * The bundle's names joined with ','. Within a system the order is the
 * folder's (readdir, as libtracefs lists them): sorted here per system so
 * that the test does not depend on the file system.
 */
static const char *names(const struct vmt_buf *b)
{
	static char s[4096];
	char *v[64];
	size_t n = 0, pos = 0;
	struct vmt_meta_entry e;

	while (meta_next(b->data, b->len, &pos, &e) > 0 && n < ARRAY_SIZE(v))
		v[n++] = strndup(e.name, e.name_len);
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++) {
			const char *a = strchr(v[i] + 7, '/'), *c = strchr(v[j] + 7, '/');

			if (!strncmp(v[i], "events/", 7) && !strncmp(v[j], "events/", 7) && a && c &&
			    a - v[i] == c - v[j] && !strncmp(v[i], v[j], (size_t)(a - v[i])) &&
			    strcmp(v[j], v[i]) < 0) {
				char *t = v[i];
				v[i] = v[j];
				v[j] = t;
			}
		}
	s[0] = 0;
	for (size_t i = 0; i < n; i++) {
		size_t o = strlen(s);
		snprintf(s + o, sizeof(s) - o, "%s%s", i ? "," : "", v[i]);
		free(v[i]);
	}
	return s;
}

static void entry_is(const struct vmt_buf *b, const char *name, const char *text)
{
	struct vmt_meta_entry e;

	ck_assert_msg(meta_find(b->data, b->len, name, &e) == 0, "%s missing", name);
	ck_assert_uint_eq(e.data_len, strlen(text));
	ck_assert(!memcmp(e.data, text, e.data_len));
}

/* ---- the bundle ------------------------------------------------------------ */

START_TEST(bundle_of_an_instance)
{
	struct fake f;
	struct vmt_buf b = { 0 };
	struct vmt_ftmeta_count n;
	const char *why;
	char err[256];

	fake_make(&f);
	struct vmt_ftmeta ft = { .top = f.top, .inst = f.inst, .kallsyms = f.kallsyms };
	ck_assert_int_eq(ftmeta_bundle(&ft, &b, &n, err, sizeof(err)), 0);
	ck_assert_str_eq(names(&b),
			 "events/header_page,events/header_event,"
			 "events/ftrace/function/format,events/ftrace/print/format,"
			 "events/irq/irq_handler_entry/format,"
			 "events/sched/sched_switch/format,events/sched/sched_wakeup/format,"
			 "printk_formats,saved_cmdlines,saved_tgids,trace_clock,kallsyms");
	ck_assert_uint_eq(n.files, 12);
	ck_assert_uint_eq(n.systems, 2);
	ck_assert_int_eq(meta_validate(b.data, b.len, &why), 0);
	/* headers and clock from the instance, the rest from the top */
	entry_is(&b, "events/header_page", "inst header_page\n");
	entry_is(&b, "trace_clock", "local [mono]\n");
	entry_is(&b, "events/sched/sched_switch/format", "name: sched_switch\nID: 1\nformat:\n");
	entry_is(&b, "saved_cmdlines", "1 init\n42 qemu-system-x86\n");
	entry_is(&b, "kallsyms", "ffffffff81000000 T _stext\n");
	buf_free(&b);
	fake_free(&f);
}
END_TEST

/* The agent's case: the top instance, optional files missing. */
START_TEST(bundle_of_the_top_without_optional_files)
{
	struct fake f;
	struct vmt_buf b = { 0 };
	struct vmt_ftmeta_count n;
	char err[256], path[1024];

	fake_make(&f);
	snprintf(path, sizeof(path), "%s/saved_tgids", f.top);
	unlink(path);
	snprintf(path, sizeof(path), "%s/printk_formats", f.top);
	unlink(path);
	snprintf(path, sizeof(path), "%s/events/timer/hrtimer_start/format", f.top);
	unlink(path);	/* a format that cannot be read is left out */
	struct vmt_ftmeta ft = { .top = f.top, .inst = f.top, .kallsyms = NULL };
	ck_assert_int_eq(ftmeta_bundle(&ft, &b, &n, err, sizeof(err)), 0);
	ck_assert_str_eq(names(&b), "events/header_page,events/header_event,"
				    "events/ftrace/function/format,events/ftrace/print/format,"
				    "saved_cmdlines,trace_clock");
	ck_assert_uint_eq(n.systems, 1);
	entry_is(&b, "events/header_page", "top header_page\n");
	/* nothing enabled: no system but ftrace */
	put(f.top, "set_event", "");
	b.len = 0;
	ck_assert_int_eq(ftmeta_bundle(&ft, &b, &n, err, sizeof(err)), 0);
	ck_assert_uint_eq(n.systems, 0);
	ck_assert_uint_eq(n.files, 6);
	buf_free(&b);
	fake_free(&f);
}
END_TEST

START_TEST(bundle_failures)
{
	struct fake f;
	struct vmt_buf b = { 0 };
	struct vmt_ftmeta_count n;
	char err[256], path[1024];

	fake_make(&f);
	struct vmt_ftmeta ft = { .top = f.top, .inst = f.inst, .kallsyms = f.kallsyms };

	/* an enabled system whose events cannot be listed */
	put(f.inst, "set_event", "ghost:boo\n");
	ck_assert_int_eq(ftmeta_bundle(&ft, &b, &n, err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, "no events in system ghost"), "err '%s'", err);
	/* a bound the bundle passes */
	put(f.inst, "set_event", "sched:sched_switch\n");
	b.len = 0;
	ft.max = 200;
	ck_assert_int_eq(ftmeta_bundle(&ft, &b, &n, err, sizeof(err)), -EFBIG);
	ck_assert_msg(strstr(err, "over") != NULL, "err '%s'", err);
	ft.max = 0;
	/* the header page is required */
	snprintf(path, sizeof(path), "%s/events/header_page", f.inst);
	unlink(path);
	b.len = 0;
	ck_assert_int_eq(ftmeta_bundle(&ft, &b, &n, err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, path) != NULL, "err '%s'", err);
	buf_free(&b);
	fake_free(&f);
}
END_TEST

/* ---- task tables ---------------------------------------------------------- */

START_TEST(tasks)
{
	struct fake f;
	struct vmt_buf b = { 0 };
	char err[256], path[1024], *big;
	const char *why;

	fake_make(&f);
	struct vmt_ftmeta ft = { .top = f.top, .inst = f.inst };
	ck_assert_int_eq(ftmeta_tasks(&ft, &b, err, sizeof(err)), 0);
	ck_assert_str_eq(names(&b), "saved_cmdlines,saved_tgids");
	ck_assert_int_eq(meta_tasks_validate(b.data, b.len, &why), 0);
	entry_is(&b, "saved_tgids", "1 1\n42 42\n");

	/* saved_tgids too large for both to fit: left out */
	big = malloc(VMT_TASKS_MAX + 1);
	memset(big, '7', VMT_TASKS_MAX);
	big[VMT_TASKS_MAX] = 0;
	put(f.top, "saved_tgids", big);
	ck_assert_int_eq(ftmeta_tasks(&ft, &b, err, sizeof(err)), 0);
	ck_assert_str_eq(names(&b), "saved_cmdlines");
	ck_assert_int_eq(meta_tasks_validate(b.data, b.len, &why), 0);
	/* and missing: left out */
	snprintf(path, sizeof(path), "%s/saved_tgids", f.top);
	unlink(path);
	ck_assert_int_eq(ftmeta_tasks(&ft, &b, err, sizeof(err)), 0);
	ck_assert_str_eq(names(&b), "saved_cmdlines");
	/* saved_cmdlines alone too large */
	put(f.top, "saved_cmdlines", big);
	ck_assert_int_eq(ftmeta_tasks(&ft, &b, err, sizeof(err)), -EFBIG);
	ck_assert_uint_eq(b.len, 0);
	/* saved_cmdlines is required */
	snprintf(path, sizeof(path), "%s/saved_cmdlines", f.top);
	unlink(path);
	ck_assert_int_eq(ftmeta_tasks(&ft, &b, err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, "saved_cmdlines") != NULL, "err '%s'", err);
	free(big);
	buf_free(&b);
	fake_free(&f);
}
END_TEST

/* ---- applying a list ------------------------------------------------------ */

START_TEST(events_plan_and_apply)
{
	struct fake f;
	struct vmt_ftmeta_events ev;
	unsigned written;
	char err[256], *s;

	fake_make(&f);
	struct vmt_ftmeta ft = { .top = f.top, .inst = f.inst };
	put(f.inst, "events/timer/hrtimer_start/enable", "untouched\n");
	put(f.inst, "events/sched/sched_switch/enable", "untouched\n");
	/* on now: sched_switch, irq_handler_entry, sched_wakeup; wanted:
	 * sched:*, timer:hrtimer_start */
	ck_assert_int_eq(ftmeta_events_plan(&ft, "sched:*, timer", 14, &ev, err, sizeof(err)), 0);
	ck_assert_uint_eq(ev.nwant, 3);
	ck_assert_uint_eq(ev.ncur, 3);
	ck_assert_int_eq(ftmeta_events_apply(&ft, &ev, &written, err, sizeof(err)), 0);
	ck_assert_uint_eq(written, 2);
	ftmeta_events_free(&ev);
	ck_assert_str_eq(s = get(f.inst, "events/timer/hrtimer_start/enable"), "1");
	free(s);
	ck_assert_str_eq(s = get(f.inst, "events/irq/irq_handler_entry/enable"), "0");
	free(s);
	/* already on: not written */
	ck_assert_str_eq(s = get(f.inst, "events/sched/sched_switch/enable"), "untouched\n");
	free(s);

	/* ftrace events are not in available_events; a miss is counted, not fatal */
	ck_assert_int_eq(ftmeta_events_plan(&ft, "ftrace:*,sched:sched_switch,nosuch", 34, &ev, err,
					    sizeof(err)), 2);
	ck_assert_uint_eq(ev.unmatched, 2);
	ck_assert_str_eq(ev.missing, "ftrace:*, nosuch");
	ck_assert_uint_eq(ev.nwant, 1);
	ftmeta_events_free(&ev);

	ck_assert_int_eq(ftmeta_events_plan(&ft, "sched:a:b", 9, &ev, err, sizeof(err)), -EINVAL);
	ck_assert_msg(strstr(err, "sched:a:b") != NULL, "err '%s'", err);
	ftmeta_events_free(&ev);

	/* an enable file that is not there: named, and the error returned */
	unlink(strcat(strcpy(err, f.inst), "/events/timer/hrtimer_start/enable"));
	put(f.inst, "set_event", "");
	ck_assert_int_eq(ftmeta_events_plan(&ft, "timer:*", 7, &ev, err, sizeof(err)), 0);
	ck_assert_int_eq(ftmeta_events_apply(&ft, &ev, &written, err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, "cannot enable timer:hrtimer_start") != NULL, "err '%s'", err);
	ftmeta_events_free(&ev);

	/* no available_events: why */
	unlink(strcat(strcpy(err, f.top), "/available_events"));
	ck_assert_int_eq(ftmeta_events_plan(&ft, "timer:*", 7, &ev, err, sizeof(err)), -ENOENT);
	ck_assert_msg(strstr(err, "available_events") != NULL, "err '%s'", err);
	ftmeta_events_free(&ev);
	fake_free(&f);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ftmeta");
	TCase *t = tcase_create("core");

	TEST_ADD(t, match_globs);
	TEST_ADD(t, match_one_name);
	TEST_ADD(t, match_nothing);
	TEST_ADD(t, match_malformed);
	TEST_ADD(t, bundle_of_an_instance);
	TEST_ADD(t, bundle_of_the_top_without_optional_files);
	TEST_ADD(t, bundle_failures);
	TEST_ADD(t, tasks);
	TEST_ADD(t, events_plan_and_apply);
	suite_add_tcase(s, t);
	return test_run_suite(s);
}
