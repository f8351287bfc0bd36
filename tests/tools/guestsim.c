/* SPDX-License-Identifier: MIT */
/*
 * guestsim: a stand-in guest as a program of its own, for a machine with no
 * QEMU and no compiler (tests/e2e/test_systemd_host.sh copies it into
 * tests/systemd/vm.sh's machine). It plays QEMU's FIFO channels and the
 * agent, as tests/lib/fakeguest.c does for the integration suites (it is
 * that code), streaming the corpus pages it is given:
 *
 *   guestsim -d DIR -m METADIR -s STATEFILE CPU0PAGES [CPU1PAGES]...
 *
 * DIR is the guest's channel folder, e.g. /run/vmtraced/guests/NAME: it is
 * made as DIR's parent/.NAME.tmp (discovery passes dot folders over), the
 * FIFOs agent-ctl-path.{in,out} and trace-path-cpuN.{in,out} made there
 * mode 0660 (the group is the parent's, set-group-id: vmtraced), and then
 * renamed to DIR, so that the daemon finds it whole. METADIR is a corpus'
 * meta/ (tests/corpus/README.md), sent as the metadata bundle after each
 * START; each page file (whole 4096-byte pages) is one CPU's stream, sent
 * whole after each STREAM (each new session sends it again). FLUSH is
 * answered with exactly what was sent.
 *
 * STATEFILE says what the host asked and what was sent, rewritten (renamed
 * over) at each change, one line:
 *   hellos H starts S meta M sent D
 * H: HOST_HELLOs answered, S: STARTs, M: metadata bundles written whole,
 * D: sessions whose pages were all written. SIGTERM or SIGINT: the stand-in
 * ends and removes DIR. Exit 0 then; 1 on a set-up error (said on stderr).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "corpus.h"
#include "fakeguest.h"
#include "meta.h"
#include "testutil.h"
#include "util.h"

#define PAGE_SIZE 4096u

/* fakeguest.c's waits (unused here) take these from testutil.c, which
 * needs Check: the same, without it. */
int test_deadline_ms(int ms)
{
	return ms;
}

uint64_t test_now_ms(void)
{
	return now_monotonic_ns() / 1000000;
}

static int state_write(const char *path, const struct fakeguest *fg)
{
	char tmp[PATH_MAX], line[128];
	int fd, n;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	n = snprintf(line, sizeof(line), "hellos %u starts %u meta %u sent %u\n", fg->host_hellos,
		     fg->starts, fg->sent_meta, fg->sent_pages);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (write_full(fd, line, (size_t)n) < 0 || close(fd) < 0 || rename(tmp, path) < 0)
		return -errno;
	return 0;
}

/* A FIFO's path: CPU c's data channel, or the control channel for c == ncpus. */
static int channel_path(char *p, size_t n, const char *dir, unsigned c, unsigned ncpus, int out)
{
	int len;

	if (c == ncpus)
		len = snprintf(p, n, "%s/agent-ctl-path.%s", dir, out ? "out" : "in");
	else
		len = snprintf(p, n, "%s/trace-path-cpu%u.%s", dir, c, out ? "out" : "in");
	return len < 0 || (size_t)len >= n ? -ENAMETOOLONG : 0;
}

/* The FIFOs, mode 0660 whatever the umask, before fakeguest opens them. */
static int channels_make(const char *dir, unsigned ncpus)
{
	char p[PATH_MAX];

	for (unsigned c = 0; c <= ncpus; c++) {
		for (int out = 0; out < 2; out++) {
			int r = channel_path(p, sizeof(p), dir, c, ncpus, out);

			if (r < 0)
				return r;
			if ((mkfifo(p, 0660) < 0 && errno != EEXIST) || chmod(p, 0660) < 0)
				return -errno;
		}
	}
	return 0;
}

static void channels_remove(const char *dir, unsigned ncpus)
{
	char p[PATH_MAX];

	for (unsigned c = 0; c <= ncpus; c++)
		for (int out = 0; out < 2; out++)
			if (channel_path(p, sizeof(p), dir, c, ncpus, out) == 0)
				unlink(p);
	rmdir(dir);
}

static int usage(void)
{
	fprintf(stderr, "usage: guestsim -d DIR -m METADIR -s STATEFILE CPU0PAGES [CPU1PAGES]...\n");
	return 2;
}

int main(int argc, char **argv)
{
	const char *dir = NULL, *metadir = NULL, *state = NULL;
	struct fakeguest_conf c = { .page_size = PAGE_SIZE, .release = "6.1.0-guestsim" };
	struct fakeguest fg = { .pid = 0, .done_fd = -1, .gate_fd = -1 };
	struct vmt_buf bundle = { 0 };
	char tmpdir[PATH_MAX], *slash;
	sigset_t mask;
	int opt, r, sfd;

	while ((opt = getopt(argc, argv, "d:m:s:")) != -1) {
		switch (opt) {
		case 'd': dir = optarg; break;
		case 'm': metadir = optarg; break;
		case 's': state = optarg; break;
		default: return usage();
		}
	}
	c.ncpus = (uint32_t)(argc - optind);
	if (!dir || !metadir || !state || c.ncpus == 0 || c.ncpus > FAKEGUEST_MAX_CPUS)
		return usage();
	r = corpus_load_meta(metadir, &bundle);
	if (r < 0 || bundle.len == 0) {
		fprintf(stderr, "guestsim: %s: %s\n", metadir, r < 0 ? strerror(-r) : "no metadata");
		return 1;
	}
	c.bundle = bundle.data;
	c.bundle_len = bundle.len;
	for (unsigned i = 0; i < c.ncpus; i++) {
		uint8_t *pages;

		r = corpus_load_pages(argv[optind + i], PAGE_SIZE, &pages, &c.npages[i]);
		if (r < 0) {
			fprintf(stderr, "guestsim: %s: %s\n", argv[optind + i], strerror(-r));
			return 1;
		}
		c.pages[i] = pages;
	}

	/* made beside DIR under a dot name, renamed once whole */
	slash = strrchr(dir, '/');
	if (!slash || !slash[1] ||
	    snprintf(tmpdir, sizeof(tmpdir), "%.*s/.%s.tmp", (int)(slash - dir), dir, slash + 1) >=
		    (int)sizeof(tmpdir)) {
		fprintf(stderr, "guestsim: -d %s: a folder with a parent\n", dir);
		return 2;
	}
	if ((mkdir(tmpdir, 0770) < 0 && errno != EEXIST) || chmod(tmpdir, 02770) < 0)
		r = -errno;
	else
		r = channels_make(tmpdir, c.ncpus);
	if (r < 0) {
		fprintf(stderr, "guestsim: %s: %s\n", tmpdir, strerror(-r));
		return 1;
	}
	c.dir = tmpdir;
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	/* blocked before the fork: the stand-in's child dies with us (PDEATHSIG) */
	sigprocmask(SIG_BLOCK, &mask, NULL);
	sfd = signalfd(-1, &mask, SFD_CLOEXEC);
	r = fakeguest_start(&fg, &c);
	if (sfd < 0 || r < 0) {
		fprintf(stderr, "guestsim: cannot start the stand-in: %s\n",
			strerror(sfd < 0 ? errno : -r));
		channels_remove(tmpdir, c.ncpus);
		return 1;
	}
	if (state_write(state, &fg) < 0 || rename(tmpdir, dir) < 0) {
		fprintf(stderr, "guestsim: %s or %s: %m\n", state, dir);
		fakeguest_stop(&fg);
		channels_remove(tmpdir, c.ncpus);
		return 1;
	}
	printf("guestsim: %s: %u CPUs,", dir, c.ncpus);
	for (unsigned i = 0; i < c.ncpus; i++)
		printf(" %zu", c.npages[i]);
	printf(" pages, metadata %zu bytes\n", bundle.len);
	fflush(stdout);

	for (;;) {
		struct pollfd p[2] = { { .fd = fg.done_fd, .events = POLLIN },
				       { .fd = sfd, .events = POLLIN } };
		char ch;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[1].revents)
			break;
		if (p[0].revents) {
			if (read(fg.done_fd, &ch, 1) != 1) {
				fprintf(stderr, "guestsim: the stand-in ended\n");
				break;
			}
			fakeguest_count(&fg, ch);
			state_write(state, &fg);
		}
	}
	fakeguest_stop(&fg);
	channels_remove(dir, c.ncpus);
	printf("guestsim: %s: ended; hellos %u starts %u sent %u\n", dir, fg.host_hellos, fg.starts,
	       fg.sent_pages);
	return 0;
}
