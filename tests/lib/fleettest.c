/* SPDX-License-Identifier: MIT */
/* fleettest: the fleet suites' NATS servers, hosts and bucket reader (fleettest.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fleettest.h"
#include "testd.h"
#include "testutil.h"

int ftest_free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t l = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

static bool healthz(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				 .sin_port = htons((uint16_t)port) };
	const char rq[] = "GET /healthz HTTP/1.0\r\n\r\n";
	char buf[2048] = "";
	size_t o = 0;
	ssize_t k;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return false;
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || write(fd, rq, sizeof(rq) - 1) < 0) {
		close(fd);
		return false;
	}
	while (o < sizeof(buf) - 1 && (k = read(fd, buf + o, sizeof(buf) - 1 - o)) > 0)
		o += (size_t)k;
	buf[o] = 0;
	close(fd);
	return strstr(buf, " 200 ") && strstr(buf, "\"ok\"");
}

void ftest_node_start(struct ftest_cluster *c, int i)
{
	struct ftest_node *n = &c->n[i];
	pid_t pid;

	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open(n->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execlp("nats-server", "nats-server", "-c", n->conf, (char *)NULL);
		_exit(127);
	}
	n->pid = pid;
}

void ftest_node_wait(struct ftest_cluster *c, int i)
{
	uint64_t end = test_now_ms() + (uint64_t)test_deadline_ms(30000);

	while (!healthz(c->n[i].mport)) {
		ck_assert_msg(test_now_ms() < end, "nats-server n%d not healthy (log %s)", i + 1,
			      c->n[i].log);
		ck_assert_msg(waitpid(c->n[i].pid, NULL, WNOHANG) == 0, "nats-server n%d died (log %s)",
			      i + 1, c->n[i].log);
		usleep(20000);	/* polling its health endpoint, not waiting for time */
	}
}

void ftest_node_signal(struct ftest_cluster *c, int i, int sig)
{
	if (c->n[i].pid > 0) {
		kill(c->n[i].pid, sig);
		waitpid(c->n[i].pid, NULL, 0);
		c->n[i].pid = 0;
	}
}

void ftest_node_kill(struct ftest_cluster *c, int i)
{
	if (c->n[i].pid > 0) {
		kill(c->n[i].pid, SIGKILL);
		waitpid(c->n[i].pid, NULL, 0);
		c->n[i].pid = 0;
	}
}

/* nnodes servers, clustered when more than one, user vmt / password good;
 * with TLS when certdir names srv.pem and srv.key */
static void cluster_start(struct ftest_cluster *c, const char *tag, int nnodes, const char *certdir,
			  const char *auth, const char *reader_user, const char *reader_pass)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->user, sizeof(c->user), "%s", reader_user ? reader_user : "vmt");
	snprintf(c->pass, sizeof(c->pass), "%s", reader_pass ? reader_pass : "good");
	c->dir = test_mkdtemp(tag);
	c->nnodes = nnodes;
	for (int i = 0; i < nnodes; i++) {
		c->n[i].port = ftest_free_port();
		c->n[i].cport = ftest_free_port();
		c->n[i].mport = ftest_free_port();
	}
	for (int i = 0; i < nnodes; i++) {
		struct ftest_node *n = &c->n[i];
		char text[8192], routes[512] = "", tls[1024] = "";
		size_t o = 0;

		for (int k = 0; k < nnodes; k++)
			if (k != i)
				o += (size_t)snprintf(routes + o, sizeof(routes) - o,
						      "%snats-route://127.0.0.1:%d", o ? ", " : "",
						      c->n[k].cport);
		snprintf(n->conf, sizeof(n->conf), "%s/n%d.conf", c->dir, i + 1);
		snprintf(n->log, sizeof(n->log), "%s/n%d.log", c->dir, i + 1);
		if (certdir)
			snprintf(tls, sizeof(tls),
				 "tls { cert_file: \"%s/srv.pem\", key_file: \"%s/srv.key\" }\n",
				 certdir, certdir);
		o = (size_t)snprintf(text, sizeof(text),
				     "server_name: n%d\nlisten: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\n"
				     "jetstream { store_dir: \"%s/js%d\" }\n"
				     "%s%s\n", i + 1, n->port, n->mport, c->dir, i + 1, tls,
				     auth ? auth : "authorization { user: vmt, password: good }");
		if (nnodes > 1)
			snprintf(text + o, sizeof(text) - o,
				 "cluster { name: vt, listen: 127.0.0.1:%d, routes: [%s] }\n", n->cport,
				 routes);
		ck_assert_int_eq(itest_write_file(n->conf, text), 0);
	}
	for (int i = 0; i < nnodes; i++)
		ftest_node_start(c, i);
	for (int i = 0; i < nnodes; i++)
		ftest_node_wait(c, i);
}

void ftest_cluster_start_auth(struct ftest_cluster *c, const char *tag, int nnodes,
			      const char *auth, const char *reader_user, const char *reader_pass)
{
	cluster_start(c, tag, nnodes, NULL, auth, reader_user, reader_pass);
}

void ftest_cluster_start(struct ftest_cluster *c, const char *tag, int nnodes)
{
	cluster_start(c, tag, nnodes, NULL, NULL, NULL, NULL);
}

void ftest_server_start_tls(struct ftest_cluster *c, const char *tag, const char *certdir)
{
	cluster_start(c, tag, 1, certdir, NULL, NULL, NULL);
}

void ftest_cluster_stop(struct ftest_cluster *c)
{
	for (int i = 0; i < c->nnodes; i++)
		ftest_node_kill(c, i);
	test_rmtree(c->dir);
	free(c->dir);
}

void ftest_servers_yaml(char *out, size_t n, const struct ftest_cluster *c)
{
	size_t o = (size_t)snprintf(out, n, "[");

	for (int i = 0; i < c->nnodes; i++)
		o += (size_t)snprintf(out + o, n - o, "%snats://127.0.0.1:%d", i ? ", " : "",
				      c->n[i].port);
	snprintf(out + o, n - o, "]");
}

void ftest_host_start(struct itest_run *r, const struct itest_input *in, const char *tag,
		      const char *fleet, const char *labels)
{
	itest_run_init(r, in, tag);
	ftest_host_run(r, fleet, labels, NULL);
}

/* guest g1 (labels) and fleet (may be NULL: none) */
void ftest_host_run(struct itest_run *r, const char *fleet, const char *labels,
		    const struct testd_opts *o)
{
	char g[600];
	int rc;

	itest_run_guest(r, 0);
	itest_guest_yaml(g, sizeof(g), r, 0);
	snprintf(r->body, sizeof(r->body),
		 "record:\n  ring_size: 16MiB\n  flush_timeout: 5000ms\ntriggers:\n  cooldown: 0s\n"
		 "%sguests:\n%s%s%s%s", fleet ? fleet : "", g, labels ? "    labels: " : "",
		 labels ? labels : "", labels ? "\n" : "");
	rc = testd_start_opts(&r->d, r->dir, r->body, o);
	ck_assert_msg(rc == 0, "vmtraced did not start (%d, log: %s)", rc, r->d.log);
	itest_expect_streaming(&r->d, "g1", 5000);
}

void ftest_fleet_str(struct testd *d, const char *key, char *out, size_t n)
{
	struct ijson root;
	const char *s;

	out[0] = 0;
	if (itest_status(d, &root) < 0)
		return;
	s = ijson_str(ijson_get(&root, "daemon"), key);
	snprintf(out, n, "%s", s ? s : "");
	ijson_free(&root);
}

void ftest_wait_fleet_state(struct testd *d, const char *want)
{
	uint64_t end = test_now_ms() + (uint64_t)test_deadline_ms(30000);
	char st[64];

	for (;;) {
		ftest_fleet_str(d, "fleet_state", st, sizeof(st));
		if (!strcmp(st, want))
			return;
		ck_assert_msg(test_now_ms() < end, "fleet_state %s, not %s (log %s)", st, want, d->log);
		usleep(20000);
	}
}

void ftest_wait_fleet_drained(struct testd *d, uint64_t min_uploaded)
{
	uint64_t end = test_now_ms() + (uint64_t)test_deadline_ms(60000);

	for (;;) {
		uint64_t up = itest_num(d, NULL, "fleet_uploaded"), q = itest_num(d, NULL, "fleet_queue");

		if (up != UINT64_MAX && up >= min_uploaded && q == 0)
			return;
		ck_assert_msg(test_now_ms() < end, "uploaded %llu (want %llu), queue %llu (log %s)",
			      (unsigned long long)up, (unsigned long long)min_uploaded,
			      (unsigned long long)q, d->log);
		usleep(20000);
	}
}

const char *ftest_npm_dir(void)
{
	static char dir[600];

	snprintf(dir, sizeof(dir), "%s/npm", test_builddir());
	if (dir[0] != '/') {
		char cwd[400];

		snprintf(dir, sizeof(dir), "%s/%s/npm", getcwd(cwd, sizeof(cwd)) ? cwd : ".",
			 test_builddir());
	}
	return dir;
}

void ftest_need_server(void)
{
	if (itest_sh("command -v nats-server >/dev/null") != 0)
		VMT_SKIP("nats-server missing (make deps installs it)");
}

/* The npm client pinned to the release whose object store (lib/jetstream/
 * objectstore.js) the layout was checked against. */
void ftest_need_tools(void)
{
	if (itest_sh("command -v nats-server >/dev/null && command -v node >/dev/null") != 0)
		VMT_SKIP("nats-server or node missing (make deps installs them)");
	if (itest_sh("grep -qs '\"version\": \"2.29.3\"' %s/node_modules/nats/package.json", ftest_npm_dir()) != 0 &&
	    itest_sh("npm install --prefix %s nats@2.29.3 --no-audit --no-fund >/dev/null 2>&1",
		     ftest_npm_dir()) != 0)
		VMT_SKIP("the npm package nats could not be installed");
}

int ftest_npm_get(const struct ftest_cluster *c, int node, const char *name, const char *out)
{
	return itest_sh("VMT_NPM=%s node %s/tests/tools/fleet-reader.mjs nats://127.0.0.1:%d %s %s "
			"vmtrace get '%s' '%s' >%s.node 2>&1", ftest_npm_dir(), test_srcdir(),
			c->n[node].port, c->user, c->pass, name, out, out);
}

int ftest_npm_list(const struct ftest_cluster *c, int node, const char *out)
{
	return itest_sh("VMT_NPM=%s node %s/tests/tools/fleet-reader.mjs nats://127.0.0.1:%d %s %s "
			"vmtrace list >%s 2>&1", ftest_npm_dir(), test_srcdir(), c->n[node].port, c->user,
			c->pass, out);
}

const char *ftest_ctl(void)
{
	static char p[600];

	snprintf(p, sizeof(p), "%s/vmtracectl", test_builddir());
	return p;
}

/* First "object":"..." of an answer naming host */
bool ftest_answer_object(const char *text, const char *host, char *out, size_t n)
{
	char needle[128];
	const char *p, *q;

	snprintf(needle, sizeof(needle), "{\"host\":\"%s\",\"samples\":[", host);
	p = strstr(text, needle);
	if (!p || !(p = strstr(p, "\"object\":\"")))
		return false;
	p += 10;
	q = strchr(p, '"');
	if (!q || (size_t)(q - p) >= n)
		return false;
	snprintf(out, n, "%.*s", (int)(q - p), p);
	return true;
}

int ftest_run_out(char *out, size_t n, const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	FILE *p;
	size_t o = 0;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	while (o < n - 1 && fgets(out + o, (int)(n - o), p))
		o = strlen(out);
	out[o] = 0;
	return pclose(p);
}
