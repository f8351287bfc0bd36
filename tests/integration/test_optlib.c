/* SPDX-License-Identifier: MIT */
/*
 * The optional libraries (lib/dlopen.h): libnats and libcrypto are mapped
 * only with fleet:, libvirt and libxml2 only once there is a libvirt guest
 * to follow; without one, `vmtraced -n` names the key and the library and
 * a daemon started anyway records and says "no-library" in status. A
 * library is made missing by a bind mount of /dev/null over it in a mount
 * namespace of the test's own (root only).
 */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fleettest.h"
#include "itest.h"
#include "testd.h"
#include "testutil.h"

/* The libraries vmtraced no longer links, by a piece of their file name. */
static const char *const optional[] = { "libnats.so", "libcrypto.so", "libvirt.so", "libxml2.so" };

static bool mapped(pid_t pid, const char *name)
{
	char path[64], line[PATH_MAX + 128];
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	ck_assert_msg(f, "%s: %s", path, strerror(errno));
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, name) != NULL;
	fclose(f);
	return found;
}

/* The file soname resolves to here (the dynamic linker's search). */
static void lib_path(const char *soname, char *out, size_t n)
{
	struct link_map *lm = NULL;
	void *h = dlopen(soname, RTLD_LAZY | RTLD_LOCAL);
	char real[PATH_MAX];

	ck_assert_msg(h, "%s: %s", soname, dlerror());
	ck_assert_int_eq(dlinfo(h, RTLD_DI_LINKMAP, &lm), 0);
	ck_assert_msg(realpath(lm->l_name, real), "%s: %s", lm->l_name, strerror(errno));
	snprintf(out, n, "%s", real);
}

/* This process (a test's own, forked by Check) and what it starts from now
 * on see /dev/null where soname's file was; false (and why) where that
 * cannot be done. */
static bool hide(const char *soname, char *why, size_t n)
{
	char path[PATH_MAX];

	lib_path(soname, path, sizeof(path));
	if (!test_have_root()) {
		snprintf(why, n, "not root: cannot hide %s", soname);
		return false;
	}
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("/dev/null", path, NULL, MS_BIND, NULL) < 0) {
		snprintf(why, n, "cannot hide %s in a mount namespace: %s", path, strerror(errno));
		return false;
	}
	return true;
}

/* `vmtraced -n -c DIR/c.yaml` with body: its exit code, its output in out. */
static int check_conf(const char *dir, const char *body, char *out, size_t n)
{
	char conf[PATH_MAX], cmd[2 * PATH_MAX];
	size_t len = 0;
	FILE *p;

	snprintf(conf, sizeof(conf), "%s/c.yaml", dir);
	ck_assert_int_eq(itest_write_file(conf, body), 0);
	snprintf(cmd, sizeof(cmd), "%s/vmtraced -n -c %s 2>&1", test_builddir(), conf);
	p = popen(cmd, "r");
	ck_assert(p);
	len = fread(out, 1, n - 1, p);
	out[len] = 0;
	return WEXITSTATUS(pclose(p));
}

/* The shipped configuration's libvirt_events on, no fleet, no guest. */
START_TEST(idle_maps_no_optional_library)
{
	char *dir = test_mkdtemp("optlib");
	struct testd d;

	ck_assert_int_eq(testd_start(&d, dir, "detectors:\n  libvirt_events:\n    enabled: true\n"), 0);
	for (size_t i = 0; i < sizeof(optional) / sizeof(optional[0]); i++)
		ck_assert_msg(!mapped(d.pid, optional[i]), "%s mapped by an idle daemon", optional[i]);
	ck_assert_int_eq(testd_stop(&d), 0);
	test_rmtree(dir);
	free(dir);
}
END_TEST

/* fleet: with libvirt_labels maps libnats, not libvirt while no libvirt
 * guest is there. */
START_TEST(fleet_maps_nats_not_libvirt)
{
	char *dir = test_mkdtemp("optlib");
	char body[400];
	struct testd d;

	snprintf(body, sizeof(body), "fleet:\n  servers: [nats://127.0.0.1:%d]\n  host_id: h1\n"
		 "  libvirt_labels: true\n", ftest_free_port());
	ck_assert_int_eq(testd_start(&d, dir, body), 0);
	ftest_wait_fleet_state(&d, "connecting");
	ck_assert(mapped(d.pid, "libnats.so"));
	ck_assert(mapped(d.pid, "libcrypto.so"));
	ck_assert(!mapped(d.pid, "libvirt.so"));
	ck_assert(!mapped(d.pid, "libxml2.so"));
	ck_assert_int_eq(testd_stop(&d), 0);
	test_rmtree(dir);
	free(dir);
}
END_TEST

START_TEST(check_names_missing_library)
{
	char *dir = test_mkdtemp("optlib");
	char why[PATH_MAX + 100], out[2048];
	int rc;

	if (!hide("libnats.so.3.4", why, sizeof(why)) || !hide("libvirt.so.0", why, sizeof(why))) {
		test_rmtree(dir);
		free(dir);
		VMT_SKIP("%s", why);
	}
	rc = check_conf(dir, "fleet:\n  servers: [nats://127.0.0.1:4222]\n", out, sizeof(out));
	ck_assert_msg(rc == 1 && strstr(out, "fleet: needs libnats") && strstr(out, "libnats.so.3.4"),
		      "exit %d: %s", rc, out);
	rc = check_conf(dir, "detectors:\n  libvirt_events:\n    enabled: true\n", out, sizeof(out));
	ck_assert_msg(rc == 1 && strstr(out, "detectors.libvirt_events: needs libvirt") &&
		      strstr(out, "libvirt.so.0"), "exit %d: %s", rc, out);
	/* what needs neither checks out as before */
	rc = check_conf(dir, "detectors:\n  libvirt_events:\n    enabled: false\n", out, sizeof(out));
	ck_assert_msg(rc == 0 && strstr(out, "configuration OK"), "exit %d: %s", rc, out);
	test_rmtree(dir);
	free(dir);
}
END_TEST

/* Started anyway, the daemon records and says why its fleet is off. */
START_TEST(start_without_libnats_says_so)
{
	char *dir = test_mkdtemp("optlib");
	char why[PATH_MAX + 100], err[300];
	struct testd d;

	if (!hide("libnats.so.3.4", why, sizeof(why))) {
		test_rmtree(dir);
		free(dir);
		VMT_SKIP("%s", why);
	}
	ck_assert_int_eq(testd_start(&d, dir, "fleet:\n  servers: [nats://127.0.0.1:4222]\n"), 0);
	ftest_wait_fleet_state(&d, "no-library");
	ftest_fleet_str(&d, "fleet_error", err, sizeof(err));
	ck_assert_msg(strstr(err, "libnats.so.3.4"), "fleet_error: %s", err);
	ck_assert_int_eq(testd_log_count(&d, "fleet: off: libnats.so.3.4"), 1);
	ck_assert(!mapped(d.pid, "libnats.so"));
	ck_assert_int_eq(testd_stop(&d), 0);
	test_rmtree(dir);
	free(dir);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("optlib");
	TCase *t = tcase_create("optlib");

	TEST_ADD(t, idle_maps_no_optional_library);
	TEST_ADD(t, fleet_maps_nats_not_libvirt);
	TEST_ADD(t, check_names_missing_library);
	TEST_ADD(t, start_without_libnats_says_so);
	tcase_set_timeout(t, 300);
	suite_add_tcase(s, t);
	return test_run_suite(s);
}
