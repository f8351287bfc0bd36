/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

const char *test_srcdir(void)
{
	static char dir[PATH_MAX];
	const char *e = getenv("VMT_SRCDIR");

	if (e)
		return e;
	if (!dir[0]) {
		char cwd[PATH_MAX];
		if (!getcwd(cwd, sizeof(cwd)))
			return ".";
		/* walk up until the Makefile beside lib/proto.h */
		for (;;) {
			char probe[PATH_MAX + 32];
			snprintf(probe, sizeof(probe), "%s/lib/proto.h", cwd);
			if (!access(probe, R_OK)) {
				snprintf(dir, sizeof(dir), "%s", cwd);
				break;
			}
			char *s = strrchr(cwd, '/');
			if (!s || s == cwd) {
				snprintf(dir, sizeof(dir), ".");
				break;
			}
			*s = 0;
		}
	}
	return dir;
}

uint64_t test_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int test_deadline_ms(int ms)
{
	static double scale;

	if (!scale) {
		const char *e = getenv("VMT_TEST_TIMEOUT_SCALE");
		double v = e ? strtod(e, NULL) : 1;

		scale = v >= 1 && v <= 1000 ? v : 1;
	}
	if (ms <= 0)
		return ms;
	return ms * scale < 86400000.0 ? (int)(ms * scale) : 86400000;
}

const char *test_builddir(void)
{
	const char *e = getenv("VMT_BUILD");

	return e ? e : "build";
}

const char *test_corpus_dir_named(const char *name)
{
	/* one slot per corpus, so that two names' paths stay valid together */
	static struct {
		char name[64];
		char dir[PATH_MAX + 128];
	} slot[4];
	const char *b = test_builddir();
	struct stat st;
	size_t i;

	for (i = 0; i < sizeof(slot) / sizeof(slot[0]) && slot[i].name[0]; i++)
		if (!strcmp(slot[i].name, name))
			break;
	if (i == sizeof(slot) / sizeof(slot[0]) || strlen(name) >= sizeof(slot[i].name))
		return NULL;
	snprintf(slot[i].name, sizeof(slot[i].name), "%s", name);
	/* unpacked by make from tests/corpus/ */
	snprintf(slot[i].dir, sizeof(slot[i].dir), "%s%s%s/corpus/%s",
		 b[0] == '/' ? "" : test_srcdir(), b[0] == '/' ? "" : "/", b, name);
	if (stat(slot[i].dir, &st) == 0)
		return slot[i].dir;
	snprintf(slot[i].dir, sizeof(slot[i].dir), "%s/../shared/corpus/%s", test_srcdir(), name);
	return stat(slot[i].dir, &st) ? NULL : slot[i].dir;
}

const char *test_corpus_dir(void)
{
	const char *e = getenv("VMT_CORPUS");
	struct stat st;

	if (e)
		return stat(e, &st) ? NULL : e;
	return test_corpus_dir_named("guest-6.1");
}

char *test_mkdtemp(const char *tag)
{
	const char *t = getenv("TMPDIR");
	char *p;

	if (asprintf(&p, "%s/vmt-%s-XXXXXX", t ? t : "/tmp", tag) < 0)
		return NULL;
	if (!mkdtemp(p)) {
		free(p);
		return NULL;
	}
	return p;
}

static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void test_rmtree(const char *path)
{
	if (path && !getenv("VMT_KEEP"))
		nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

int test_have_root(void)
{
	return geteuid() == 0;
}

const char *test_tracefs(void)
{
	static const char *dirs[] = { "/sys/kernel/tracing", "/sys/kernel/debug/tracing" };

	for (size_t i = 0; i < 2; i++) {
		char p[128];
		snprintf(p, sizeof(p), "%s/trace_clock", dirs[i]);
		if (!access(p, R_OK))
			return dirs[i];
	}
	if (test_have_root() && !mount("nodev", "/sys/kernel/tracing", "tracefs", 0, NULL))
		return dirs[0];
	return NULL;
}

int test_run_suite(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}

int test_memfd(const char *name)
{
	int fd = memfd_create(name, MFD_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	return fd;
}

uint8_t *test_slurp(int fd, size_t *len)
{
	off_t n = lseek(fd, 0, SEEK_END);
	uint8_t *b;

	ck_assert_int_ge(n, 0);
	b = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(b);
	ck_assert_int_eq(pread(fd, b, (size_t)n, 0), n);
	*len = (size_t)n;
	return b;
}

const char *test_shim_path(void)
{
	static char p[PATH_MAX];
	const char *e = getenv("VMT_FAULTSHIM"), *b = test_builddir();

	if (e)
		return e;
	if (b[0] == '/')
		snprintf(p, sizeof(p), "%s/tests/tools/faultshim.so", b);
	else
		snprintf(p, sizeof(p), "%s/%s/tests/tools/faultshim.so", test_srcdir(), b);
	return p;
}

const char *test_host_instance(void)
{
	static char name[64];
	const char *e = getenv("VMT_TEST_HOST_INSTANCE");

	if (!e) {
		snprintf(name, sizeof(name), "vmt-test-%d", (int)getpid());
		setenv("VMT_TEST_HOST_INSTANCE", name, 1);
		return name;
	}
	snprintf(name, sizeof(name), "%s", e);
	return name;
}

char *test_conf_instance(const char *body)
{
	const char *at = !strncmp(body, "host:\n", 6) ? body : strstr(body, "\nhost:\n");
	char *out;

	if (!at)
		return strdup(body);
	if (at != body)
		at++;
	at += 6;
	if (asprintf(&out, "%.*s  instance: %s\n%s", (int)(at - body), body, test_host_instance(),
		     at) < 0)
		return NULL;
	return out;
}
