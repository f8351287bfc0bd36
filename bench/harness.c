/* SPDX-License-Identifier: MIT */
/* harness: vmtraced under test, its counters, /proc, and the result lines. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

uint64_t bench_now_ns(void)
{
	return now_monotonic_ns();
}

void bench_sleep(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

bool bench_quick(void)
{
	const char *q = getenv("BENCH_QUICK");

	return q && *q && strcmp(q, "0");
}

const char *bench_build(void)
{
	const char *b = getenv("VMT_BUILD");

	return b && *b ? b : "build";
}

char *bench_mkdtemp(const char *tag)
{
	const char *t = getenv("TMPDIR");
	char *p;

	if (asprintf(&p, "%s/vmtbench-%s.XXXXXX", t && *t ? t : "/tmp", tag) < 0)
		return NULL;
	if (!mkdtemp(p)) {
		free(p);
		return NULL;
	}
	return p;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	remove(path);
	return 0;
}

void bench_rmtree(const char *path)
{
	if (path && *path)
		nftw(path, rm_one, 64, FTW_DEPTH | FTW_PHYS);
}

/* ---- the daemon -------------------------------------------------------------- */

static bool sock_answers(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), r;

	if (fd < 0 || strlen(path) >= sizeof(sa.sun_path)) {
		if (fd >= 0)
			close(fd);
		return false;
	}
	memcpy(sa.sun_path, path, strlen(path) + 1);
	r = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
	close(fd);
	return r == 0;
}

int daemon_start(struct bench_daemon *d, const char *dir, const char *body)
{
	char bin[600];
	FILE *f;

	memset(d, 0, sizeof(*d));
	snprintf(d->dir, sizeof(d->dir), "%s", dir);
	snprintf(d->state, sizeof(d->state), "%s/state", dir);
	snprintf(d->sock, sizeof(d->sock), "%s/control.sock", dir);
	snprintf(d->conf, sizeof(d->conf), "%s/vmtraced.yaml", dir);
	snprintf(d->log, sizeof(d->log), "%s/vmtraced.log", dir);
	f = fopen(d->conf, "w");
	if (!f)
		return -errno;
	fprintf(f, "state_dir: %s\ncontrol_socket: %s\n%s", d->state, d->sock, body);
	fclose(f);
	snprintf(bin, sizeof(bin), "%s/vmtraced", bench_build());
	d->pid = fork();
	if (d->pid < 0)
		return -errno;
	if (d->pid == 0) {
		int fd = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		dup2(fd, 2);
		dup2(fd, 1);
		execl(bin, "vmtraced", "-c", d->conf, (char *)NULL);
		_exit(127);
	}
	for (int i = 0; i < 400; i++) {
		int st;
		if (sock_answers(d->sock))
			return 0;
		if (waitpid(d->pid, &st, WNOHANG) == d->pid) {
			d->pid = 0;
			fprintf(stderr, "vmtraced exited at start; log: %s\n", d->log);
			return -ECHILD;
		}
		bench_sleep(0.025);
	}
	return -ETIMEDOUT;
}

int daemon_stop(struct bench_daemon *d)
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

static uint64_t json_num(const char *s, const char *end, const char *key)
{
	char k[64];
	size_t kl = (size_t)snprintf(k, sizeof(k), "\"%s\": ", key);

	for (const char *p = s; p && p + kl < end; p++) {
		p = memmem(p, (size_t)(end - p), k, kl);
		if (!p)
			break;
		return strtoull(p + kl, NULL, 10);
	}
	return 0;
}

/* Run a command, its stdout into a malloc'd string. */
static char *run_capture(const char *cmd)
{
	struct vmt_buf b = { 0 };
	char chunk[4096];
	size_t n;
	FILE *p = popen(cmd, "r");

	if (!p)
		return NULL;
	while ((n = fread(chunk, 1, sizeof(chunk), p)) > 0)
		buf_append(&b, chunk, n);
	buf_append(&b, "", 1);
	pclose(p);
	return (char *)b.data;
}

int daemon_stop_run(struct bench_daemon *d, int r)
{
	int rc = daemon_stop(d);

	if (rc != 0) {
		fprintf(stderr, "vmtraced exited with %d; log: %s\n", rc, d->log);
		r = r ? r : -EIO;
	}
	return r;
}

int daemon_status(struct bench_daemon *d, struct bench_status *st)
{
	char cmd[1400];
	char *out, *p, *q, *end;
	uint64_t ow;

	memset(st, 0, sizeof(*st));
	snprintf(cmd, sizeof(cmd), "%s/vmtracectl -s %s --json status", bench_build(), d->sock);
	out = run_capture(cmd);
	if (!out)
		return -EIO;
	end = out + strlen(out);
	p = strstr(out, "\"guests\": [");
	if (!p) {
		free(out);
		return -EBADMSG;
	}
	/* the detectors' objects follow the guests' */
	if ((q = strstr(p, "\"detectors\": [")))
		end = q;
	st->dumps = json_num(out, p, "dumps");
	st->mem_used = json_num(out, p, "mem_used");
	st->reserve = json_num(out, p, "reserve");
	st->reserve_used = json_num(out, p, "reserve_used");
	st->reserve_peak = json_num(out, p, "reserve_peak");
	st->compress_cpu_ns = json_num(out, p, "compress_cpu_ns");
	st->compress_busy = json_num(out, p, "compress_busy");
	st->compress_bytes_in = json_num(out, p, "compress_bytes_in");
	st->compress_bytes_out = json_num(out, p, "compress_bytes_out");
	st->compress_tcode_fallback = json_num(out, p, "compress_tcode_fallback");
	st->uptime_ns = json_num(out, p, "uptime_ns");
	st->upgrades = json_num(out, p, "upgrades");
	st->sessions_adopted = json_num(out, p, "sessions_adopted");
	st->sessions_refused = json_num(out, p, "sessions_refused");
	/* each guest is one flat object */
	while ((p = strchr(p, '{')) && p < end) {
		q = strchr(p, '}');
		if (!q || q > end)
			break;
		st->guests++;
		st->streaming += memmem(p, (size_t)(q - p), "\"state\": \"streaming\"", 20) != NULL;
		st->bytes_in += json_num(p, q, "bytes_in");
		st->pages_in += json_num(p, q, "pages_in");
		st->pages += json_num(p, q, "pages");
		st->capacity += json_num(p, q, "capacity");
		st->pages_rejected += json_num(p, q, "pages_rejected");
		st->read_pauses += json_num(p, q, "read_pauses");
		ow = json_num(p, q, "pages_overwritten");
		st->pages_overwritten += ow;
		st->guests_overwriting += ow > 0;
		st->frame_pages += json_num(p, q, "frame_pages");
		st->frame_bytes += json_num(p, q, "frame_bytes");
		st->frames_made += json_num(p, q, "frames_made");
		st->pages_stored_raw += json_num(p, q, "pages_stored_raw");
		st->frames_overwritten += json_num(p, q, "frames_overwritten");
		st->page_size = VMT_MAX(st->page_size, (uint32_t)json_num(p, q, "page_size"));
		p = q + 1;
	}
	free(out);
	return 0;
}

int daemon_start_guests(struct bench_daemon *d, const char *dir, const char *top,
			const struct producer *p, unsigned n, double timeout)
{
	struct vmt_buf body = { 0 };
	char line[512];
	int r;

	buf_append(&body, top, strlen(top));
	for (unsigned g = 0; g < n; g++) {
		snprintf(line, sizeof(line), "  - name: g%u\n    path: %s\n    transport: fifo\n    cpus: %u\n",
			 g, producer_guest_dir(p, g), BENCH_CPUS);
		buf_append(&body, line, strlen(line));
	}
	buf_append(&body, "", 1);
	r = daemon_start(d, dir, (const char *)body.data);
	buf_free(&body);
	if (r < 0)
		return r;
	return daemon_wait_streaming(d, n, timeout);
}

int daemon_wait_streaming(struct bench_daemon *d, unsigned n, double timeout)
{
	uint64_t until = bench_now_ns() + (uint64_t)(timeout * 1e9);
	struct bench_status st;

	do {
		if (daemon_status(d, &st) == 0 && st.streaming >= n)
			return 0;
		bench_sleep(0.05);
	} while (bench_now_ns() < until);
	fprintf(stderr, "only %u of %u guests streaming after %.0f s; log: %s\n", st.streaming, n,
		timeout, d->log);
	return -ETIMEDOUT;
}

int daemon_dump(struct bench_daemon *d, uint64_t *ns)
{
	char bin[600];
	uint64_t t0 = bench_now_ns();
	pid_t pid;
	int st;

	snprintf(bin, sizeof(bin), "%s/vmtracectl", bench_build());
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);
		dup2(fd, 1);
		execl(bin, "vmtracectl", "-s", d->sock, "dump", "--reason", "bench", (char *)NULL);
		_exit(127);
	}
	if (waitpid(pid, &st, 0) < 0)
		return -errno;
	*ns = bench_now_ns() - t0;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

long daemon_last_write_ms(struct bench_daemon *d)
{
	char line[8192];
	long ms = -1;
	FILE *f = fopen(d->log, "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		char *w = strstr(line, "wrote "), *e = strstr(line, " ms");
		if (w && e && strstr(line, ".vmts")) {
			char *s = e;
			while (s > w && s[-1] >= '0' && s[-1] <= '9')
				s--;
			ms = strtol(s, NULL, 10);
		}
	}
	fclose(f);
	return ms;
}

/* ---- /proc --------------------------------------------------------------------- */

int proc_read(pid_t pid, const char *file, char **buf)
{
	char path[64];
	size_t len;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	return read_file(path, 1 << 20, buf, &len);
}

int proc_cpu(pid_t pid, uint64_t *user_ns, uint64_t *sys_ns)
{
	unsigned long long ut, st;
	long hz = sysconf(_SC_CLK_TCK);
	char *buf, *p;
	int r;

	*user_ns = *sys_ns = 0;
	r = proc_read(pid, "stat", &buf);
	if (r < 0)
		return r;
	/* after "(comm)": state is field 3, utime 14, stime 15 */
	p = strrchr(buf, ')');
	r = p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
			&st) == 2 ? 0 : -EBADMSG;
	free(buf);
	if (r < 0)
		return r;
	*user_ns = ut * (1000000000ull / (uint64_t)hz);
	*sys_ns = st * (1000000000ull / (uint64_t)hz);
	return 0;
}

uint64_t proc_kib(const char *status, const char *key)
{
	size_t kl = strlen(key);

	for (const char *p = status; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (!strncmp(p, key, kl))
			return strtoull(p + kl, NULL, 10);
	return 0;
}

uint64_t proc_status_kib(pid_t pid, const char *key)
{
	uint64_t v;
	char *buf;

	if (proc_read(pid, "status", &buf) < 0)
		return 0;
	v = proc_kib(buf, key);
	free(buf);
	return v;
}

/* ---- results ------------------------------------------------------------------- */

void bench_result(const char *name, double value, const char *unit, double target,
		  bool higher_is_better, const char *detail)
{
	bool pass = higher_is_better ? value >= target : value <= target;

	printf("RESULT %-24s %10.3f %-6s target %s %-8.3g %s  %s\n", name, value, unit,
	       higher_is_better ? ">=" : "<=", target, pass ? "PASS" : "MISS", detail ? detail : "");
	fflush(stdout);
}
