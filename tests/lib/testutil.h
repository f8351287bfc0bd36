/* SPDX-License-Identifier: MIT */
/*
 * testutil: what the Check suites share. Skips: a test that cannot run here
 * calls VMT_SKIP("reason"), which prints "SKIP: <test>: <reason>" and
 * returns; tests/run-tests.sh counts those lines as skipped, not passed.
 */
#ifndef VMT_TESTUTIL_H
#define VMT_TESTUTIL_H

#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Add fn to tc, unless VMT_TEST is set and fn's name does not hold it
 * (VMT_TEST=name runs only the tests whose name holds it). */
#define TEST_ADD(tc, fn)                                          \
	do {                                                      \
		const char *_only = getenv("VMT_TEST");           \
		if (!_only || strstr(#fn, _only))                 \
			tcase_add_test(tc, fn);                   \
	} while (0)

#define VMT_SKIP(...)                                                  \
	do {                                                           \
		printf("SKIP: %s: ", __func__);                        \
		printf(__VA_ARGS__);                                   \
		printf("\n");                                          \
		fflush(stdout);                                        \
		return;                                                \
	} while (0)

/*
 * Deadlines are for hangs only: every bound a test waits under (for a
 * status counter, a state, a pipe, a file) goes through here, so that one
 * variable, VMT_TEST_TIMEOUT_SCALE (a factor, default 1), stretches them
 * all on a loaded or slow machine. The values tests pass are already ten
 * times or more what the wait takes on an idle machine.
 */
int test_deadline_ms(int ms);
/* CLOCK_MONOTONIC in milliseconds. */
uint64_t test_now_ms(void);

/* Top of the source tree (VMT_SRCDIR, else found from the cwd). */
const char *test_srcdir(void);
/*
 * The host source's ftrace instance of this test's daemons: its own, so
 * that suites run side by side on one machine (two checkouts, a helper's
 * run) never clear each other's. Fixed at the first call (inherited by the
 * forks after it): "vmt-test-PID".
 */
const char *test_host_instance(void);
/* A copy of a configuration with "  instance: test_host_instance()" under
 * its top-level "host:" line (none: a plain copy); free() it. */
char *test_conf_instance(const char *body);
/* Build directory holding the programs (VMT_BUILD, else "build"). */
const char *test_builddir(void);
/* The fault shim (tests/tools/faultshim.c) to LD_PRELOAD: $VMT_FAULTSHIM, or
 * the build folder's. */
const char *test_shim_path(void);
/* VMT_CORPUS, or BUILD/corpus/guest-6.1 (make unpacks tests/corpus/ there), or
 * ../shared/corpus/guest-6.1 beside the source tree; NULL if none is there. */
const char *test_corpus_dir(void);
/* BUILD/corpus/NAME (e.g. "guest-6.1-busy", tests/corpus/README.md), or
 * ../shared/corpus/NAME beside the source tree; NULL if neither is there
 * (or a fifth name is asked for). */
const char *test_corpus_dir_named(const char *name);
/* A fresh directory under $TMPDIR, removed by test_rmtree(). */
char *test_mkdtemp(const char *tag);
void test_rmtree(const char *path);
/* Root, and a tracefs we can use (mounting it if needed). */
int test_have_root(void);
const char *test_tracefs(void);	/* NULL if none */
/* An anonymous file (memfd) for writers under test, and its whole content
 * read back (malloc'd, one spare byte). Both ck_assert on failure. */
int test_memfd(const char *name);
uint8_t *test_slurp(int fd, size_t *len);
/* Run a Check suite the way every suite does; returns main()'s exit code. */
int test_run_suite(Suite *s);

#endif
