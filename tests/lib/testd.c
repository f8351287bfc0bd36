/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <trace-cmd/trace-cmd.h>
#include <unistd.h>

#include "testd.h"
#include "testutil.h"
#include "util.h"

static int sock_answers(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0), r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return 0;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	return r == 0;
}

/* In the child before exec, as systemd does: the fds at 3.., inherited,
 * and named in the environment (sd_listen_fds(3)). */
static void pass_listen_fds(const struct testd_opts *o)
{
	int tmp[64];
	char v[32];

	/* out of the way first: a passed fd may sit where another must go */
	for (unsigned i = 0; i < o->npass && i < 64; i++)
		tmp[i] = fcntl(o->pass_fds[i], F_DUPFD_CLOEXEC, 3 + 64);
	for (unsigned i = 0; i < o->npass && i < 64; i++)
		dup2(tmp[i], 3 + (int)i);	/* dup2 leaves close-on-exec off */
	snprintf(v, sizeof(v), "%d", (int)getpid());
	setenv("LISTEN_PID", v, 1);
	snprintf(v, sizeof(v), "%u", o->npass);
	setenv("LISTEN_FDS", v, 1);
	setenv("LISTEN_FDNAMES", o->pass_names ? o->pass_names : "", 1);
}

int testd_start(struct testd *d, const char *dir, const char *body)
{
	return testd_start_opts(d, dir, body, NULL);
}

int testd_start_opts(struct testd *d, const char *dir, const char *body,
		     const struct testd_opts *o)
{
	static const struct testd_opts none = { 0 };
	char bin[512], *conf;
	FILE *f;

	if (!o)
		o = &none;

	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "%s", dir);
	snprintf(d->state, sizeof(d->state), "%s/state", dir);
	snprintf(d->sock, sizeof(d->sock), "%s/control.sock", dir);
	if (o->connect)
		snprintf(d->sock, sizeof(d->sock), "%s", o->connect);
	snprintf(d->conf, sizeof(d->conf), "%s/vmtraced.yaml", dir);
	snprintf(d->log, sizeof(d->log), "%s/vmtraced.log", dir);
	conf = test_conf_instance(body);
	f = conf ? fopen(d->conf, "w") : NULL;
	if (!f) {
		free(conf);
		return conf ? -errno : -ENOMEM;
	}
	/* VMT_TEST_SANDBOX=1: every daemon under its system call filter */
	fprintf(f, "state_dir: %s\ncontrol_socket: %s/control.sock\nlog_level: debug\n%s%s", d->state,
		dir, getenv("VMT_TEST_SANDBOX") && !strcmp(getenv("VMT_TEST_SANDBOX"), "1") ?
			     "sandbox: true\n" : "", conf);
	fclose(f);
	free(conf);
	if (o->bin)
		snprintf(bin, sizeof(bin), "%s", o->bin);
	else
		snprintf(bin, sizeof(bin), "%s/%s/vmtraced", test_srcdir(), test_builddir());
	d->pid = fork();
	if (d->pid < 0)
		return -errno;
	if (d->pid == 0) {
		int fd = open(d->log, O_WRONLY | O_CREAT | (o->append_log ? O_APPEND : O_TRUNC), 0644);
		const char *argv[64];
		int n = 0;

		/* a daemon left behind by a failed check would hold the test's files */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(fd, 2);
		dup2(fd, 1);
		for (const char *const *e = o->env; e && *e; e++)
			putenv((char *)*e);
		if (o->npass)
			pass_listen_fds(o);
		for (const char *const *w = o->wrapper; w && *w && n < 58; w++)
			argv[n++] = *w;
		argv[n++] = o->wrapper ? bin : "vmtraced";
		argv[n++] = "-c";
		argv[n++] = d->conf;
		argv[n] = NULL;
		if (o->wrapper)
			execvp(argv[0], (char *const *)argv);
		else
			execv(bin, (char *const *)argv);
		_exit(127);
	}
	for (uint64_t end = test_now_ms() + test_deadline_ms(20000);;) {
		int st;
		if (sock_answers(d->sock))
			return 0;
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			return -ECHILD;
		}
		if (test_now_ms() >= end)
			return -ETIMEDOUT;
		usleep(20000);
	}
}

FILE *testd_ctl_begin(struct testd *d, const char *args)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd), "%s/%s/vmtracectl -s %s %s", test_srcdir(), test_builddir(),
		 d->sock, args);
	return popen(cmd, "r");
}

int testd_ctl_end(FILE *p, char *out, size_t n)
{
	size_t got = 0;
	int st;

	char sink[4096];

	if (out && n) {
		got = fread(out, 1, n - 1, p);
		out[got] = 0;
	}
	/* the rest read too: a buffer too small for the output must not end
	 * vmtracectl with SIGPIPE (the caller then sees the text cut short) */
	while (fread(sink, 1, sizeof(sink), p) > 0)
		;
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int testd_ctl(struct testd *d, char *out, size_t n, const char *args)
{
	FILE *p = testd_ctl_begin(d, args);

	return p ? testd_ctl_end(p, out, n) : -errno;
}

int testd_stop(struct testd *d)
{
	int st;

	if (d->pid <= 0)
		return -ECHILD;
	kill(d->pid, SIGTERM);
	if (waitpid(d->pid, &st, 0) < 0)
		return -errno;
	d->pid = 0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int testd_log_count(const struct testd *d, const char *needle)
{
	char line[4096];
	int n = 0;
	FILE *f = fopen(d->log, "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, needle))
			n++;
	fclose(f);
	return n;
}

struct counts {
	uint64_t *per_cpu;
	unsigned max;
	uint64_t total;
	uint32_t *crc;		/* tdread_digest's, or NULL */
};

static int count_cb(struct tracecmd_input *h, struct tep_record *rec, int cpu, void *data)
{
	struct counts *c = data;

	if (cpu >= 0 && (unsigned)cpu < c->max) {
		c->per_cpu[cpu]++;
		if (c->crc) {
			uint64_t head[3] = { rec->ts, (uint64_t)rec->size,
					     (uint64_t)(uint32_t)rec->missed_events };

			c->crc[cpu] = crc32c(c->crc[cpu], head, sizeof(head));
			c->crc[cpu] = crc32c(c->crc[cpu], rec->data, (size_t)rec->size);
		}
	}
	c->total++;
	return 0;
}

int tdread_counts(const char *file, uint64_t *per_cpu, unsigned max_cpus, uint64_t *total)
{
	struct counts c = { per_cpu, max_cpus, 0, NULL };
	struct tracecmd_input *h = tracecmd_open(file, 0);

	if (!h)
		return -EBADMSG;
	memset(per_cpu, 0, max_cpus * sizeof(*per_cpu));
	tracecmd_iterate_events(h, NULL, 0, count_cb, &c);
	tracecmd_close(h);
	*total = c.total;
	return 0;
}

int tdread_digest(const char *file, uint32_t *crc, uint64_t *per_cpu, unsigned max_cpus)
{
	struct counts c = { per_cpu, max_cpus, 0, crc };
	struct tracecmd_input *h = tracecmd_open(file, 0);

	if (!h)
		return -EBADMSG;
	memset(per_cpu, 0, max_cpus * sizeof(*per_cpu));
	memset(crc, 0, max_cpus * sizeof(*crc));
	/* in time order per CPU, as trace-cmd report reads them */
	tracecmd_iterate_events(h, NULL, 0, count_cb, &c);
	tracecmd_close(h);
	return 0;
}

void tally_name(struct tally_names *t, const char *name)
{
	unsigned i;

	if (!name)
		name = "(unknown)";
	for (i = 0; i < t->nev; i++)
		if (!strcmp(t->ev[i].name, name))
			break;
	if (i == t->nev) {
		if (t->nev == sizeof(t->ev) / sizeof(t->ev[0]))
			return;
		snprintf(t->ev[t->nev++].name, sizeof(t->ev[0].name), "%s", name);
	}
	t->ev[i].n++;
}

uint64_t tally_of(const struct tally_names *t, const char *name)
{
	for (unsigned i = 0; i < t->nev; i++)
		if (!strcmp(t->ev[i].name, name))
			return t->ev[i].n;
	return 0;
}
