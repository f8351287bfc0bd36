/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <trace-cmd/trace-cmd.h>
#include <unistd.h>

#include "corpus.h"
#include "ctlproto.h"
#include "meta.h"
#include "itest.h"
#include "page.h"
#include "sample.h"
#include "testutil.h"
#include "tlv.h"
#include "vfile.h"

/* ---- input ----------------------------------------------------------------- */

uint64_t itest_events_of(const uint8_t *p, size_t n)
{
	struct vmt_page_layout l;
	uint64_t e = 0;

	page_layout_default(&l, ITEST_PS);
	for (size_t i = 0; i < n; i++) {
		struct vmt_page_info info;
		if (page_scan(&l, p + i * ITEST_PS, &info) == 0)
			e += info.events;
	}
	return e;
}

static void input_clear(struct itest_input *in)
{
	buf_free(&in->bundle);
	for (unsigned c = 0; c < ITEST_MAX_CPUS; c++) {
		free(in->pages[c]);
		in->pages[c] = NULL;
		in->npages[c] = 0;
	}
	in->ncpus = 0;
}

static int input_load(struct itest_input *in, const char *dir)
{
	char path[4200];

	input_clear(in);
	snprintf(path, sizeof(path), "%s/meta", dir);
	if (corpus_load_meta(path, &in->bundle) < 0)
		return -1;
	for (in->ncpus = 0; in->ncpus < ITEST_MAX_CPUS; in->ncpus++) {
		unsigned c = in->ncpus;
		snprintf(path, sizeof(path), "%s/pages/cpu%u.raw", dir, c);
		if (access(path, R_OK))
			break;
		if (corpus_load_pages(path, ITEST_PS, &in->pages[c], &in->npages[c]) < 0)
			return -1;
	}
	return in->ncpus ? 0 : -1;
}

/* A busy machine gives thousands of pages a second: keep the first of them,
 * so that every CPU's pages fit the tests' rings (4 MiB and up). */
static void input_trim(struct itest_input *in)
{
	for (unsigned c = 0; c < in->ncpus; c++)
		if (in->npages[c] > ITEST_MAX_PAGES)
			in->npages[c] = ITEST_MAX_PAGES;
}

void itest_input_prepare(struct itest_input *in)
{
	const char *want = getenv("VMT_TEST_INPUT");
	const char *tfs = test_tracefs();
	char *tmp;

	memset(in, 0, sizeof(*in));
	in->source = "none";
	/*
	 * The fixed corpus by default: what a capture of this machine holds
	 * depends on how busy the machine is (a few pages idle, thousands
	 * loaded), and the suites size their inputs by count. Live pages on
	 * request (VMT_TEST_INPUT=tracefs); test_ingest takes them always.
	 */
	if (want && !strcmp(want, "tracefs") && test_have_root() && tfs &&
	    (tmp = test_mkdtemp("capture"))) {
		int ok = capture_host(tfs, 2, tmp) == 0 && input_load(in, tmp) == 0;

		/* a quiet machine may give one CPU nothing: the corpus is better then */
		for (unsigned c = 0; ok && c < in->ncpus; c++)
			ok = in->npages[c] >= 8;
		test_rmtree(tmp);
		free(tmp);
		if (ok) {
			in->source = "this machine's tracefs";
			input_trim(in);
			return;
		}
	}
	if (test_corpus_dir() && input_load(in, test_corpus_dir()) == 0)
		in->source = "the fixed corpus";
	else
		input_clear(in);
	input_trim(in);
}

void itest_input_free(struct itest_input *in)
{
	input_clear(in);
}

void itest_fg_conf(struct fakeguest_conf *fc, const struct itest_input *in, const char *dir,
		   int sockets)
{
	*fc = (struct fakeguest_conf){ .dir = dir, .sockets = sockets, .ncpus = in->ncpus,
				       .page_size = ITEST_PS, .bundle = in->bundle.data,
				       .bundle_len = in->bundle.len };
	for (unsigned c = 0; c < in->ncpus; c++) {
		fc->pages[c] = in->pages[c];
		fc->npages[c] = in->npages[c];
	}
}

int itest_repeat_pages(const struct itest_input *in, size_t npages, uint8_t *out[ITEST_MAX_CPUS])
{
	for (unsigned c = 0; c < in->ncpus; c++) {
		out[c] = malloc(npages * ITEST_PS);
		if (!out[c] || !in->npages[c])
			return -ENOMEM;
		for (size_t i = 0; i < npages; i++)
			memcpy(out[c] + i * ITEST_PS, in->pages[c] + (i % in->npages[c]) * ITEST_PS,
			       ITEST_PS);
	}
	return 0;
}

/* ---- JSON ------------------------------------------------------------------ */

struct jp {
	const char *p;
	const char *start;
	char *err;
	size_t err_len;
	int depth;
};

static int jp_fail(struct jp *j, const char *what)
{
	if (j->err && j->err_len)
		snprintf(j->err, j->err_len, "offset %td: %s", j->p - j->start, what);
	return -EBADMSG;
}

static void jp_ws(struct jp *j)
{
	while (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')
		j->p++;
}

static int jp_value(struct jp *j, struct ijson *v);

static int jp_string(struct jp *j, char **out)
{
	struct vmt_buf b = { 0 };

	if (*j->p != '"')
		return jp_fail(j, "string expected");
	j->p++;
	for (;;) {
		unsigned char c = (unsigned char)*j->p;

		if (!c || c < 0x20) {
			buf_free(&b);
			return jp_fail(j, "unterminated string or control character in it");
		}
		j->p++;
		if (c == '"')
			break;
		if (c == '\\') {
			char e = *j->p++;
			const char *map = strchr("\"\\/bfnrt", e);
			static const char rep[] = "\"\\/\b\f\n\r\t";

			if (e == 'u') {
				unsigned v = 0;
				for (int i = 0; i < 4; i++) {
					char h = *j->p++;
					v <<= 4;
					if (h >= '0' && h <= '9')
						v |= (unsigned)(h - '0');
					else if (h >= 'a' && h <= 'f')
						v |= (unsigned)(h - 'a' + 10);
					else if (h >= 'A' && h <= 'F')
						v |= (unsigned)(h - 'A' + 10);
					else {
						buf_free(&b);
						return jp_fail(j, "bad \\u escape");
					}
				}
				c = v < 0x80 ? (unsigned char)v : '?';
			} else if (e && map) {
				c = (unsigned char)rep[map - "\"\\/bfnrt"];
			} else {
				buf_free(&b);
				return jp_fail(j, "bad escape");
			}
		}
		buf_append(&b, &c, 1);
	}
	buf_append(&b, "", 1);
	*out = (char *)b.data;
	return 0;
}

static int jp_number(struct jp *j, struct ijson *v)
{
	const char *s = j->p;
	char *end;

	if (*j->p == '-')
		j->p++;
	if (*j->p == '0')
		j->p++;
	else if (*j->p >= '1' && *j->p <= '9')
		while (*j->p >= '0' && *j->p <= '9')
			j->p++;
	else
		return jp_fail(j, "bad number");
	v->is_uint = *s != '-';
	if (*j->p == '.') {
		j->p++;
		v->is_uint = false;
		if (*j->p < '0' || *j->p > '9')
			return jp_fail(j, "bad fraction");
		while (*j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	if (*j->p == 'e' || *j->p == 'E') {
		j->p++;
		v->is_uint = false;
		if (*j->p == '+' || *j->p == '-')
			j->p++;
		if (*j->p < '0' || *j->p > '9')
			return jp_fail(j, "bad exponent");
		while (*j->p >= '0' && *j->p <= '9')
			j->p++;
	}
	v->type = IJ_NUM;
	v->d = strtod(s, NULL);
	if (v->is_uint) {
		errno = 0;
		v->u = strtoull(s, &end, 10);
		if (errno)
			return jp_fail(j, "integer out of range");
	}
	return 0;
}

static int jp_container(struct jp *j, struct ijson *v, bool obj)
{
	char close = obj ? '}' : ']';

	v->type = obj ? IJ_OBJ : IJ_ARR;
	j->p++;
	jp_ws(j);
	if (*j->p == close) {
		j->p++;
		return 0;
	}
	for (;;) {
		struct ijson *items;
		char *key = NULL;
		int r;

		jp_ws(j);
		if (obj) {
			r = jp_string(j, &key);
			if (r < 0)
				return r;
			for (size_t i = 0; i < v->n; i++)
				if (!strcmp(v->keys[i], key)) {
					free(key);
					return jp_fail(j, "duplicate key");
				}
			jp_ws(j);
			if (*j->p != ':') {
				free(key);
				return jp_fail(j, "':' expected");
			}
			j->p++;
			char **keys = realloc(v->keys, (v->n + 1) * sizeof(*keys));
			if (!keys) {
				free(key);
				return -ENOMEM;
			}
			v->keys = keys;
			v->keys[v->n] = key;
		}
		items = realloc(v->items, (v->n + 1) * sizeof(*items));
		if (!items) {
			if (obj)
				free(key);
			return -ENOMEM;
		}
		v->items = items;
		memset(&v->items[v->n], 0, sizeof(*items));
		v->n++;
		r = jp_value(j, &v->items[v->n - 1]);
		if (r < 0)
			return r;
		jp_ws(j);
		if (*j->p == ',') {
			j->p++;
			continue;
		}
		if (*j->p == close) {
			j->p++;
			return 0;
		}
		return jp_fail(j, obj ? "',' or '}' expected" : "',' or ']' expected");
	}
}

static int jp_value(struct jp *j, struct ijson *v)
{
	int r;

	if (++j->depth > 64)
		return jp_fail(j, "nested too deep");
	jp_ws(j);
	switch (*j->p) {
	case '{':
	case '[':
		r = jp_container(j, v, *j->p == '{');
		break;
	case '"':
		v->type = IJ_STR;
		r = jp_string(j, &v->s);
		break;
	case 't':
	case 'f':
	case 'n': {
		static const char *const words[] = { "true", "false", "null" };
		r = jp_fail(j, "unknown word");
		for (int i = 0; i < 3; i++)
			if (!strncmp(j->p, words[i], strlen(words[i]))) {
				j->p += strlen(words[i]);
				v->type = i == 2 ? IJ_NULL : IJ_BOOL;
				v->u = i == 0;
				r = 0;
			}
		break;
	}
	default:
		r = jp_number(j, v);
		break;
	}
	j->depth--;
	return r;
}

int ijson_parse(const char *text, struct ijson *out, char *err, size_t err_len)
{
	struct jp j = { .p = text, .start = text, .err = err, .err_len = err_len };
	int r;

	memset(out, 0, sizeof(*out));
	r = jp_value(&j, out);
	if (r == 0) {
		jp_ws(&j);
		if (*j.p)
			r = jp_fail(&j, "text after the value");
	}
	if (r < 0) {
		ijson_free(out);
		memset(out, 0, sizeof(*out));
	}
	return r;
}

void ijson_free(struct ijson *v)
{
	if (!v)
		return;
	for (size_t i = 0; i < v->n; i++) {
		if (v->keys)
			free(v->keys[i]);
		if (v->items)
			ijson_free(&v->items[i]);
	}
	free(v->keys);
	free(v->items);
	free(v->s);
	memset(v, 0, sizeof(*v));
}

const struct ijson *ijson_get(const struct ijson *obj, const char *key)
{
	if (!obj || obj->type != IJ_OBJ)
		return NULL;
	for (size_t i = 0; i < obj->n; i++)
		if (!strcmp(obj->keys[i], key))
			return &obj->items[i];
	return NULL;
}

uint64_t ijson_u64(const struct ijson *obj, const char *key)
{
	const struct ijson *v = ijson_get(obj, key);

	return v && v->type == IJ_NUM && v->is_uint ? v->u : UINT64_MAX;
}

const char *ijson_str(const struct ijson *obj, const char *key)
{
	const struct ijson *v = ijson_get(obj, key);

	return v && v->type == IJ_STR ? v->s : NULL;
}

/* ---- status ---------------------------------------------------------------- */

uint64_t itest_now_ms(void)
{
	return test_now_ms();
}

int itest_status(struct testd *d, struct ijson *root)
{
	static char out[1 << 20];
	char err[256];
	int rc;

	memset(root, 0, sizeof(*root));
	rc = testd_ctl(d, out, sizeof(out), "--json status 2>/dev/null");
	if (rc)
		return rc;
	if (ijson_parse(out, root, err, sizeof(err)) < 0) {
		fprintf(stderr, "status --json is not JSON (%s): %s\n", err, out);
		return -EBADMSG;
	}
	return 0;
}

const struct ijson *itest_guest(const struct ijson *root, const char *name)
{
	const struct ijson *g = ijson_get(root, "guests");

	if (!g || g->type != IJ_ARR)
		return NULL;
	for (size_t i = 0; i < g->n; i++) {
		const char *n = ijson_str(&g->items[i], "guest");
		if (n && !strcmp(n, name))
			return &g->items[i];
	}
	return NULL;
}

uint64_t itest_num(struct testd *d, const char *name, const char *key)
{
	struct ijson root;
	uint64_t v = UINT64_MAX;

	if (itest_status(d, &root) == 0)
		v = ijson_u64(name ? itest_guest(&root, name) : ijson_get(&root, "daemon"), key);
	ijson_free(&root);
	return v;
}

void itest_state(struct testd *d, const char *name, char *out, size_t n)
{
	struct ijson root;

	snprintf(out, n, "?");
	if (itest_status(d, &root) == 0) {
		const char *s = ijson_str(itest_guest(&root, name), "state");
		snprintf(out, n, "%s", s ? s : "");
	}
	ijson_free(&root);
}

int itest_nguests(struct testd *d)
{
	struct ijson root;
	const struct ijson *g;
	int n = -1;

	if (itest_status(d, &root) == 0 && (g = ijson_get(&root, "guests")) && g->type == IJ_ARR)
		n = (int)g->n;
	ijson_free(&root);
	return n;
}

bool itest_state_is(struct testd *d, const char *name, const char *state)
{
	char s[64];

	itest_state(d, name, s, sizeof(s));
	return !strcmp(s, state);
}

/* a loaded machine (a daemon setting up 128 MiB of rings beside other
 * suites) overran 5 s; every wait here is for what must come */
#define HANG_MS 30000

int itest_hang_ms(int timeout_ms)
{
	return timeout_ms > HANG_MS ? timeout_ms : HANG_MS;
}

bool itest_wait_state(struct testd *d, const char *name, const char *state, int timeout_ms,
		      char *last, size_t n)
{
	uint64_t end = itest_now_ms() + (uint64_t)test_deadline_ms(itest_hang_ms(timeout_ms));
	char s[64] = "";

	for (;;) {
		itest_state(d, name, s, sizeof(s));
		if (!strcmp(s, state) || itest_now_ms() >= end)
			break;
		usleep(50000);
	}
	if (last)
		snprintf(last, n, "%s", s);
	return !strcmp(s, state);
}

bool itest_wait_num_ge(struct testd *d, const char *name, const char *key, uint64_t min,
		       int timeout_ms)
{
	return ITEST_WAIT(({
				  uint64_t _v = itest_num(d, name, key);
				  _v != UINT64_MAX && _v >= min;
			  }),
			  timeout_ms);
}

void itest_expect_triggers_counted(struct testd *d, uint64_t sent, int timeout_ms)
{
	ck_assert_msg(ITEST_WAIT(itest_num(d, NULL, "triggers") +
					 itest_num(d, NULL, "triggers_suppressed") == sent,
				 timeout_ms),
		      "triggers %llu + suppressed %llu != %llu sent",
		      (unsigned long long)itest_num(d, NULL, "triggers"),
		      (unsigned long long)itest_num(d, NULL, "triggers_suppressed"),
		      (unsigned long long)sent);
}

int itest_ctl(struct testd *d, char *out, size_t n, const char *fmt, ...)
{
	char args[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	return testd_ctl(d, out, n, args);
}

int itest_write_file(const char *path, const char *text)
{
	char tmp[4200];
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.new", path);
	f = fopen(tmp, "w");
	if (!f)
		return -errno;
	fputs(text, f);
	if (fclose(f) != 0)
		return -errno;
	return rename(tmp, path) < 0 ? -errno : 0;
}

int itest_write_conf(const struct testd *d, const char *body)
{
	char *text;
	int r;

	if (asprintf(&text, "state_dir: %s\ncontrol_socket: %s/control.sock\nlog_level: debug\n%s",
		     d->state, d->dir, body) < 0)
		return -ENOMEM;
	r = itest_write_file(d->conf, text);
	free(text);
	return r;
}

/* ---- a daemon and its guests -------------------------------------------------- */

void itest_run_init_in(struct itest_run *r, const struct itest_input *in, const char *dir)
{
	memset(r, 0, sizeof(*r));
	r->dir = strdup(dir);
	r->keep_dir = true;
	ck_assert_ptr_nonnull(r->dir);
	for (int i = 0; i < ITEST_GUESTS; i++) {
		snprintf(r->chan[i], sizeof(r->chan[i]), "%s/g%d", r->dir, i + 1);
		itest_fg_conf(&r->fc[i], in, r->chan[i], 0);
	}
}

void itest_run_init(struct itest_run *r, const struct itest_input *in, const char *tag)
{
	char *dir = test_mkdtemp(tag);

	ck_assert_ptr_nonnull(dir);
	itest_run_init_in(r, in, dir);
	r->keep_dir = false;
	free(dir);
}

void itest_run_pages(struct itest_run *r, const struct itest_input *in, int i, size_t npages)
{
	ck_assert_int_eq(itest_repeat_pages(in, npages, r->own[i]), 0);
	for (unsigned c = 0; c < in->ncpus; c++) {
		r->fc[i].pages[c] = r->own[i][c];
		r->fc[i].npages[c] = npages;
	}
}

void itest_run_guest(struct itest_run *r, int i)
{
	ck_assert_int_eq(fakeguest_start(&r->fg[i], &r->fc[i]), 0);
	r->fg_on[i] = true;
}

void itest_run_guest_stop(struct itest_run *r, int i)
{
	if (r->fg_on[i])
		fakeguest_stop(&r->fg[i]);
	r->fg_on[i] = false;
}

void itest_guest_yaml(char *out, size_t n, const struct itest_run *r, int i)
{
	snprintf(out, n, "  - name: g%d\n    path: %s\n    transport: %s\n", i + 1, r->chan[i],
		 r->fc[i].sockets ? "socket" : "fifo");
}

void itest_run_daemon_opts(struct itest_run *r, const char *top, int nguests,
			   const struct testd_opts *o)
{
	char g[600];
	int rc;

	snprintf(r->body, sizeof(r->body), "%sguests:\n", top ? top : "");
	for (int i = 0; i < nguests; i++) {
		itest_guest_yaml(g, sizeof(g), r, i);
		strncat(r->body, g, sizeof(r->body) - strlen(r->body) - 1);
	}
	rc = testd_start_opts(&r->d, r->dir, r->body, o);
	ck_assert_msg(rc == 0, "vmtraced did not start (%d, log: %s)", rc, r->d.log);
}

void itest_run_daemon(struct itest_run *r, const char *top, int nguests)
{
	itest_run_daemon_opts(r, top, nguests, NULL);
}

void itest_run_end(struct itest_run *r)
{
	int rc = r->d.pid > 0 ? testd_stop(&r->d) : 0;

	for (int i = 0; i < ITEST_GUESTS; i++) {
		itest_run_guest_stop(r, i);
		for (unsigned c = 0; c < ITEST_MAX_CPUS; c++)
			free(r->own[i][c]);
	}
	ck_assert_msg(rc == 0, "vmtraced exited with %d (log: %s)", rc, r->d.log);
	if (!r->keep_dir)
		test_rmtree(r->dir);
	free(r->dir);
	r->dir = NULL;
}

void itest_expect_streaming(struct testd *d, const char *name, int timeout_ms)
{
	char st[64];

	ck_assert_msg(itest_wait_state(d, name, "streaming", timeout_ms, st, sizeof(st)),
		      "guest %s is '%s', not streaming, after %d ms (log: %s)", name, st,
		      test_deadline_ms(itest_hang_ms(timeout_ms)), d->log);
}

void itest_expect_pages_in(struct testd *d, const char *name, uint64_t want)
{
	ck_assert_msg(itest_wait_num_ge(d, name, "pages_in", want, 20000),
		      "guest %s: pages_in %llu, want %llu (log: %s)", name,
		      (unsigned long long)itest_num(d, name, "pages_in"), (unsigned long long)want,
		      d->log);
	ck_assert_msg(itest_num(d, name, "pages_in") == want, "guest %s: pages_in %llu, want %llu",
		      name, (unsigned long long)itest_num(d, name, "pages_in"),
		      (unsigned long long)want);
}

void itest_dump_one(struct testd *d, const char *args, char *sample, size_t n)
{
	char out[8192];
	int rc = itest_ctl(d, out, sizeof(out), "dump %s", args);

	ck_assert_msg(rc == 0, "vmtracectl dump %s failed (%d): %s (log: %s)", args, rc, out, d->log);
	ck_assert_msg(strstr(out, ".vmts\n") != NULL, "no sample in '%s'", out);
	*strchr(out, '\n') = 0;
	ck_assert_uint_lt(strlen(out), n);
	memcpy(sample, out, strlen(out) + 1);
}

struct vmt_sample *itest_read_sample(const char *path)
{
	struct vmt_sample *s = NULL;
	char why[256] = "";
	int r = sample_read(path, &s, why, sizeof(why));

	ck_assert_msg(r == 0, "%s: %s (%d)", path, why, r);
	return s;
}

/* ---- raw control socket ------------------------------------------------------ */

int ictl_connect(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

int ictl_send(int fd, const void *p, size_t n)
{
	return send(fd, p, n, MSG_NOSIGNAL) < 0 ? -errno : 0;
}

int ictl_request(int fd, unsigned type, uint32_t id, const struct vmt_buf *tlv)
{
	struct vmt_buf b = { 0 };
	int r;

	ctl_msg_begin(&b, type, id);
	if (tlv && tlv->len)
		buf_append(&b, tlv->data, tlv->len);
	r = ctl_msg_end(&b);
	if (r == 0)
		r = ictl_send(fd, b.data, b.len);
	buf_free(&b);
	return r;
}

int ictl_recv(int fd, struct ictl_msg *m, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	unsigned type;
	ssize_t n;

	m->err = 0;
	m->message[0] = 0;
	if (poll(&p, 1, test_deadline_ms(timeout_ms)) <= 0)
		return -ETIMEDOUT;
	n = recv(fd, m->buf, sizeof(m->buf), 0);
	if (n < 0)
		return errno == ECONNRESET ? 0 : -errno;
	if (n == 0)
		return 0;
	if (ctl_msg_parse(m->buf, (size_t)n, &type, &m->id, &m->payload, &m->plen) < 0)
		return -EBADMSG;
	m->type = type;
	if (type == VMT_CTL_ERROR) {
		struct vmt_tlv t;
		size_t pos = 0;

		while (tlv_next(m->payload, m->plen, &pos, &t) > 0) {
			if (t.tag == VMT_CTAG_ERRNO)
				tlv_u32(&t, &m->err);
			else if (t.tag == VMT_CTAG_MESSAGE)
				tlv_str(&t, m->message, sizeof(m->message));
		}
	}
	return 1;
}

int ictl_collect(int fd, struct ictl_msg *m, unsigned count_type, unsigned *count,
		 int timeout_ms)
{
	*count = 0;
	for (;;) {
		int r = ictl_recv(fd, m, timeout_ms);

		if (r < 0)
			return r;
		if (r == 0)
			return -ECONNRESET;
		if (m->type == count_type)
			(*count)++;
		if (m->type == VMT_CTL_END || m->type == VMT_CTL_ERROR)
			return (int)m->type;
	}
}

/* ---- files ------------------------------------------------------------------ */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int itest_samples(const char *dir, char ***paths)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char **list = NULL;
	int n = 0;

	*paths = NULL;
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		char **t;

		if (de->d_name[0] == '.' || l < 6 || strcmp(de->d_name + l - 5, ".vmts"))
			continue;
		t = realloc(list, (size_t)(n + 1) * sizeof(*t));
		if (!t)
			break;
		list = t;
		if (asprintf(&list[n], "%s/%s", dir, de->d_name) < 0)
			break;
		n++;
	}
	closedir(d);
	if (n)
		qsort(list, (size_t)n, sizeof(*list), cmp_str);
	*paths = list;
	return n;
}

void itest_free_list(char **list, int n)
{
	for (int i = 0; i < n; i++)
		free(list[i]);
	free(list);
}

int itest_guest_samples(const struct testd *d, const char *guest, char ***paths)
{
	char dir[400];

	snprintf(dir, sizeof(dir), "%s/%s", d->state, guest);
	return itest_samples(dir, paths);
}

int itest_count_samples(const struct testd *d, const char *guest)
{
	char **list;
	int n = itest_guest_samples(d, guest, &list);

	itest_free_list(list, n);
	return n;
}

int itest_samples_check(const char *dir)
{
	char **list, why[256];
	int n = itest_samples(dir, &list);

	for (int i = 0; i < n; i++) {
		struct vmt_sample *s;
		int r = sample_read(list[i], &s, why, sizeof(why));

		ck_assert_msg(r == 0, "%s: %s (%d)", list[i], why, r);
		sample_free(s);
	}
	itest_free_list(list, n);
	return n;
}

int itest_count_tmp(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return 0;
	while ((de = readdir(d)))
		n += de->d_name[0] == '.' && strstr(de->d_name, ".tmp-") != NULL;
	closedir(d);
	return n;
}

int itest_merge(struct testd *d, const char *sample, const char *dat)
{
	return itest_ctl(d, NULL, 0, "merge -q -o %s %s >/dev/null 2>&1", dat, sample);
}

struct recs {
	struct itest_rec *v;
	size_t n, cap;
};

static int rec_cb(struct tracecmd_input *h, struct tep_record *rec, int cpu, void *data)
{
	struct recs *r = data;

	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 4096;
		struct itest_rec *v = realloc(r->v, cap * sizeof(*v));
		if (!v)
			return -1;
		r->v = v;
		r->cap = cap;
	}
	r->v[r->n++] = (struct itest_rec){ rec->ts, cpu };
	return 0;
}

int itest_trace_records(const char *dat, struct itest_rec **recs, size_t *n)
{
	struct tracecmd_input *h = tracecmd_open(dat, 0);
	struct recs r = { 0 };

	if (!h)
		return -EBADMSG;
	tracecmd_iterate_events(h, NULL, 0, rec_cb, &r);
	tracecmd_close(h);
	*recs = r.v;
	*n = r.n;
	return 0;
}

/* ---- processes -------------------------------------------------------------- */

int itest_as_nobody(int (*fn)(void *arg, char *out), void *arg, char *out)
{
	char *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pid;
	int st;

	if (shared == MAP_FAILED)
		return -errno;
	shared[0] = 0;
	pid = fork();
	if (pid < 0) {
		munmap(shared, 4096);
		return -errno;
	}
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0) {
			snprintf(shared, 4096, "cannot become nobody: %s", strerror(errno));
			_exit(125);
		}
		int r = fn(arg, shared);
		shared[4095] = 0;
		_exit(r);
	}
	if (waitpid(pid, &st, 0) < 0)
		st = -1;
	memcpy(out, shared, 4096);
	out[4095] = 0;
	munmap(shared, 4096);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -EINTR;
}

bool itest_group_exists(const char *name)
{
	return getgrnam(name) != NULL;
}

int itest_sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	st = system(cmd);
	return st < 0 ? -errno : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

uint64_t itest_unique_step(const struct itest_input *in)
{
	struct vmt_page_layout l;
	uint64_t span = 0;

	if (!in->ncpus)
		return 0;
	page_layout_default(&l, ITEST_PS);
	for (unsigned c = 0; c < in->ncpus; c++)
		for (size_t i = 0; i < in->npages[c]; i++) {
			const uint8_t *p = in->pages[c] + i * ITEST_PS;
			struct vmt_page_info info;

			if (page_scan(&l, p, &info) == 0 && info.last_ts - get_le64(p) > span)
				span = info.last_ts - get_le64(p);
		}
	return span + 1000;
}

void itest_unique_page(const struct itest_input *in, uint64_t step, unsigned cpu, uint64_t k,
		       uint8_t *out)
{
	memcpy(out, in->pages[cpu] + (k % in->npages[cpu]) * ITEST_PS, ITEST_PS);
	put_le64(out, ITEST_UNIQUE_BASE + k * step);
}

void itest_bundle_with_clock(const struct itest_input *in, struct vmt_buf *b, const char *clock_file)
{
	struct vmt_meta_entry e;
	size_t pos = 0;

	while (meta_next(in->bundle.data, in->bundle.len, &pos, &e) > 0) {
		char name[256];

		snprintf(name, sizeof(name), "%.*s", (int)e.name_len, e.name);
		if (!strcmp(name, "trace_clock"))
			ck_assert_int_eq(meta_add(b, name, clock_file, (uint32_t)strlen(clock_file)), 0);
		else
			ck_assert_int_eq(meta_add(b, name, e.data, e.data_len), 0);
	}
}
