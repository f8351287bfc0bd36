/* SPDX-License-Identifier: MIT */
/*
 * fleet: the NATS side of the daemon (fleet.h says who owns what). The
 * object store layout is the one NATS clients share (ADR-20, checked
 * against nats.js 2.29 lib/jetstream/objectstore.js): stream OBJ_<bucket>
 * on $O.<bucket>.C.> and $O.<bucket>.M.>, rollup headers and direct get
 * allowed, discard new; an object's chunks (128 KiB) on $O.<bucket>.C.<nuid>,
 * then its meta JSON on $O.<bucket>.M.<base64url, padded, of the name>
 * with Nats-Rollup: sub; digest "SHA-256=" + base64url (padded) of the
 * SHA-256 of the content. libnats 3.4.1 has no object store API of its
 * own: the messages are published with its JetStream calls.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dlnats.h"

#include "b64url.h"
#include "fleet.h"
#include "log.h"
#include "natsconn.h"
#include "sample.h"
#include "util.h"

#define CHUNK (128 * 1024)
#define REQ_MAX 1024		/* bytes of a dump request */
#define REQ_QUEUE_MAX 64	/* requests waiting for the loop */
#define MAX_SUBS 256		/* subjects this host subscribes to */
#define DYN_MAX VMT_CONFIG_MAX_GUESTS	/* guests with labels from libvirt */
#define SCAN_MS 1000		/* the state folder is scanned at least this often */
#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 10000
#define PENDING_MAX 64		/* fleet dumps waiting for their files */
#define LOG_EVERY_NS (60ull * 1000000000ull)

struct fleet_req {
	struct fleet_req *next;
	char subject[256];
	char reply[VMT_FLEET_REPLY_MAX + 1];	/* checked: an inbox */
	size_t len;
	char data[REQ_MAX];
};

struct fleet_labeled {
	char name[VMT_NAME_MAX];
	char labels[VMT_LABELS_MAX];
};

struct fleet_pending {
	struct fleet_pending *next;
	char reply[VMT_FLEET_REPLY_MAX + 1];
};

struct vmt_fleet {
	sd_event *event;
	struct vmt_fleet_conf conf;	/* a copy: the uploader reads it */
	char state_dir[4096];
	char host[VMT_FLEET_TOKEN_MAX + 1];
	const struct vmt_fleet_ops *ops;
	void *owner;
	/* the guests with labels, the configuration's first (nconf), then
	 * those libvirt's metadata gives (fleet_set_labels): the loop's */
	uint32_t nlabeled, nconf, room;
	struct fleet_labeled *labeled;
	uint64_t over_log_ns;
	/* the subjects the loop wants subscribed, bumped want_gen (the lock) */
	uint32_t nwant;
	char (*want)[256];
	char (*want_next)[256];	/* the loop's scratch */
	uint64_t want_gen;
	/* the uploader's own: what it is subscribed to, as of have_gen */
	uint32_t nhave;
	struct { char subject[256]; natsSubscription *sub; } *have;
	uint64_t have_gen;
	char (*want_copy)[256];

	int efd;
	sd_event_source *src;
	pthread_t thread;
	bool started;

	pthread_mutex_t lock;	/* what follows, to the counters */
	pthread_cond_t cond;
	bool stop, kick;
	struct fleet_req *q_head, *q_tail;
	uint32_t q_len;
	uint64_t q_dropped;
	natsConnection *nc;	/* for replies from the loop; NULL when none */
	uint64_t disc_log_ns;	/* a disconnection, logged once a minute */
	uint64_t disconnects;
	struct vmt_fleet_status st;
	uint64_t reply_log_ns;	/* the last line about a reply subject refused */

	/* the loop's own */
	struct fleet_pending *pending;
	uint32_t npending;
	uint64_t budget_start_ns;
	uint32_t budget_used;
	uint64_t last_log_ns;
};

/* ---- libnats' threads: queue and wake, nothing else ------------------- */

/* What the network sent, fit for a log line: printable ASCII, cut short. */
static const char *printable(char *out, size_t n, const char *s)
{
	size_t o = 0;

	for (; *s && o + 4 < n; s++)
		out[o++] = (unsigned char)*s >= 0x20 && (unsigned char)*s < 0x7f ? *s : '?';
	if (*s)
		out[o++] = '.', out[o++] = '.', out[o++] = '.';
	out[o] = 0;
	return out;
}

/*
 * A reply subject answers may not go to: dropped before it is queued (no
 * answer, no dump, no budget), counted, and said at most once a minute
 * with what it named; NATS does not tell who sent it.
 */
static void reply_refused(struct vmt_fleet *f, const char *subj, const char *reply)
{
	uint64_t now = now_monotonic_ns(), before = 0;
	bool say;

	pthread_mutex_lock(&f->lock);
	f->st.replies_refused++;
	say = !f->reply_log_ns || now - f->reply_log_ns > LOG_EVERY_NS;
	if (say) {
		before = f->st.replies_refused - 1;
		f->reply_log_ns = now;
	}
	pthread_mutex_unlock(&f->lock);
	if (say) {
		char s[100], r[100];

		log_warning("fleet: dropped a request on %s: its reply subject \"%s\" is not under "
			    "%s. (answers go to inboxes only; %" PRIu64 " dropped so far; logged once "
			    "a minute)", printable(s, sizeof(s), subj), printable(r, sizeof(r), reply),
			    f->conf.inbox_prefix, before + 1);
	}
}

static void on_msg(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
	struct vmt_fleet *f = closure;
	const char *reply = natsMsg_GetReply(msg), *subj = natsMsg_GetSubject(msg);
	int len = natsMsg_GetDataLength(msg);
	struct fleet_req *rq = NULL;

	if (reply && fleet_reply_check(reply, f->conf.inbox_prefix, f->conf.subject_prefix) < 0) {
		reply_refused(f, subj, reply);
		natsMsg_Destroy(msg);
		return;
	}
	if (len >= 0 && len <= REQ_MAX && reply && strlen(subj) < 256)
		rq = calloc(1, sizeof(*rq));
	pthread_mutex_lock(&f->lock);
	if (!rq || f->q_len >= REQ_QUEUE_MAX) {
		f->st.refused++;	/* too big, no reply subject, or a flood */
		f->q_dropped++;
		pthread_mutex_unlock(&f->lock);
		free(rq);
		natsMsg_Destroy(msg);
		return;
	}
	snprintf(rq->subject, sizeof(rq->subject), "%s", subj);
	snprintf(rq->reply, sizeof(rq->reply), "%s", reply);
	rq->len = (size_t)len;
	memcpy(rq->data, natsMsg_GetData(msg), (size_t)len);
	if (f->q_tail)
		f->q_tail->next = rq;
	else
		f->q_head = rq;
	f->q_tail = rq;
	f->q_len++;
	pthread_mutex_unlock(&f->lock);
	natsMsg_Destroy(msg);
	(void)eventfd_write(f->efd, 1);	/* the counter does not overflow */
}

static void on_disconnected(natsConnection *nc, void *closure)
{
	struct vmt_fleet *f = closure;
	const char *last = NULL;
	natsStatus s = natsConnection_GetLastError(nc, &last);

	pthread_mutex_lock(&f->lock);
	f->st.connected = false;
	/* libnats 3.4.1 keeps no error for a server that broke the protocol
	 * (a garbage or oversized line): the disconnection, counted, is what
	 * status and the log can say while it reconnects */
	f->disconnects++;
	snprintf(f->st.state, sizeof(f->st.state), "%s", natsconn_state(s, last));
	snprintf(f->st.error, sizeof(f->st.error),
		 "disconnected from %.80s (%" PRIu64 " time(s))%s%s%s%.80s", f->st.server,
		 f->disconnects, s != NATS_OK ? ": " : "", s != NATS_OK ? natsStatus_GetText(s) : "",
		 last && *last ? ": " : "", last ? last : "");
	if (!f->disc_log_ns || now_monotonic_ns() - f->disc_log_ns > LOG_EVERY_NS) {
		f->disc_log_ns = now_monotonic_ns();
		log_warning("fleet: %s; reconnecting (logged once a minute)", f->st.error);
	}
	pthread_mutex_unlock(&f->lock);
}

static void on_reconnected(natsConnection *nc, void *closure)
{
	struct vmt_fleet *f = closure;

	pthread_mutex_lock(&f->lock);
	f->st.connected = true;
	snprintf(f->st.state, sizeof(f->st.state), "connected");
	natsConnection_GetConnectedUrl(nc, f->st.server, sizeof(f->st.server));
	f->st.error[0] = 0;
	f->kick = true;
	pthread_cond_signal(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

/* ---- answers (the loop) ------------------------------------------------ */

static void publish_reply(struct vmt_fleet *f, const char *reply, const char *json)
{
	/* on_msg let only inboxes through; no answer goes anywhere else */
	if (fleet_reply_check(reply, f->conf.inbox_prefix, f->conf.subject_prefix) < 0)
		return;
	pthread_mutex_lock(&f->lock);
	/* libnats buffers it while reconnecting; a closed connection drops it */
	if (f->nc)
		natsConnection_PublishString(f->nc, reply, json);
	pthread_mutex_unlock(&f->lock);
}

static void refuse(struct vmt_fleet *f, const char *reply, const char *why)
{
	char buf[512], esc[256];

	fleet_json_escape(esc, sizeof(esc), why);
	snprintf(buf, sizeof(buf), "{\"host\":\"%s\",\"refused\":\"%s\"}", f->host, esc);
	publish_reply(f, reply, buf);
	pthread_mutex_lock(&f->lock);
	f->st.refused++;
	pthread_mutex_unlock(&f->lock);
	if (now_monotonic_ns() - f->last_log_ns > LOG_EVERY_NS || !f->last_log_ns) {
		f->last_log_ns = now_monotonic_ns();
		log_warning("fleet: refused a dump request: %s (logged once a minute)", why);
	}
}

/* "<guest dir>/<file>" from a path under the state folder */
static const char *path_tail(const char *p, const char **guest, size_t *glen)
{
	const char *b = strrchr(p, '/'), *g;

	if (!b)
		return *guest = "", *glen = 0, p;
	for (g = b; g > p && g[-1] != '/'; g--)
		;
	*guest = g;
	*glen = (size_t)(b - g);
	return b + 1;
}

bool fleet_answer(struct vmt_fleet *f, const void *token, char *const *files, uint32_t nfiles,
		  int error)
{
	struct fleet_pending **pp;
	char *buf;
	size_t n = 256 + (size_t)nfiles * 600, o;

	if (!f)
		return false;
	for (pp = &f->pending; *pp && (const void *)*pp != token; pp = &(*pp)->next)
		;
	if (!*pp)
		return false;
	struct fleet_pending *p = *pp;
	*pp = p->next;
	f->npending--;
	buf = malloc(n);
	if (buf) {
		o = (size_t)snprintf(buf, n, "{\"host\":\"%s\",\"samples\":[", f->host);
		for (uint32_t i = 0; i < nfiles; i++) {
			const char *g, *file = path_tail(files[i], &g, &(size_t){ 0 });
			size_t glen;

			path_tail(files[i], &g, &glen);
			o += (size_t)snprintf(buf + o, n - o, "%s{\"guest\":\"%.*s\",\"file\":\"%s\","
					      "\"object\":\"%s/%.*s/%s\"}", i ? "," : "", (int)glen, g,
					      file, f->host, (int)glen, g, file);
		}
		if (error < 0)
			snprintf(buf + o, n - o, "],\"error\":\"%s\"}", strerror(-error));
		else
			snprintf(buf + o, n - o, "]}");
		publish_reply(f, p->reply, buf);
		free(buf);
	}
	free(p);
	return true;
}

/* The fleet's own budget: max_per_minute requests (answered, whatever the
 * answer) in any minute-long window. */
static bool budget_take(struct vmt_fleet *f)
{
	uint64_t now = now_monotonic_ns();

	if (!f->conf.max_per_minute)
		return true;
	if (now - f->budget_start_ns >= 60ull * 1000000000ull || !f->budget_start_ns) {
		f->budget_start_ns = now;
		f->budget_used = 0;
	}
	if (f->budget_used >= f->conf.max_per_minute)
		return false;
	f->budget_used++;
	return true;
}

static void handle_req(struct vmt_fleet *f, struct fleet_req *rq)
{
	char pfx[VMT_FLEET_TOKEN_MAX * 2 + 16];
	char gname[VMT_NAME_MAX];
	char *names[PENDING_MAX] = { gname };
	struct vmt_fleet_req req;
	struct vmt_fleet_dump d = { 0 };
	struct fleet_pending *p;
	const char *rest;
	char reason[200];
	int r;

	/* every request takes its turn of the budget, malformed ones too:
	 * a refusal costs a publish, and a flood of them is a flood */
	if (!budget_take(f))
		return refuse(f, rq->reply, "fleet.max_per_minute reached");
	r = fleet_req_parse(rq->data, rq->len, &req);
	if (r == -ERANGE)
		return refuse(f, rq->reply, "window and post are at most 3600 s");
	if (r < 0)
		return refuse(f, rq->reply, "not a dump request ({\"reason\": S, \"window\": N, \"post\": N})");
	if (req.post_s > f->conf.max_post_s) {
		/* a dump held open for long keeps its guests' rings waiting */
		snprintf(reason, sizeof(reason), "post %" PRIu64 " s is over fleet.max_post (%" PRIu32
			 " s)", req.post_s, f->conf.max_post_s);
		return refuse(f, rq->reply, reason);
	}
	snprintf(pfx, sizeof(pfx), "%s.dump.%s.", f->conf.subject_prefix, f->host);
	if (!strncmp(rq->subject, pfx, strlen(pfx))) {
		rest = rq->subject + strlen(pfx);
		if (strcmp(rest, "_all")) {
			if (!name_is_valid(rest) || strlen(rest) >= sizeof(gname))
				return refuse(f, rq->reply, "no such guest");
			strcpy(gname, rest);
			d.names = names;
			d.n = 1;
		}
	} else {
		/* a label: its guests, as the configuration or libvirt gives them */
		char kv[2 * VMT_FLEET_TOKEN_MAX + 2], *dot;
		size_t kl;

		snprintf(pfx, sizeof(pfx), "%s.dump.label.", f->conf.subject_prefix);
		if (strncmp(rq->subject, pfx, strlen(pfx)) ||
		    snprintf(kv, sizeof(kv), "%s", rq->subject + strlen(pfx)) >= (int)sizeof(kv) ||
		    !(dot = strchr(kv, '.')))
			return refuse(f, rq->reply, "not a subject of this host");
		*dot = '=';
		kl = strlen(kv);
		for (uint32_t i = 0; i < f->nlabeled && d.n < PENDING_MAX; i++) {
			const char *l = f->labeled[i].labels, *q = l;

			while ((q = strstr(q, kv))) {
				if ((q == l || q[-1] == ',') && (q[kl] == ',' || !q[kl])) {
					names[d.n++] = f->labeled[i].name;
					break;
				}
				q += kl;
			}
		}
		if (!d.n)
			return refuse(f, rq->reply, "no guest with this label");
		d.names = names;
	}
	if (f->npending >= PENDING_MAX)
		return refuse(f, rq->reply, "too many fleet dumps waiting");
	p = calloc(1, sizeof(*p));
	if (!p)
		return refuse(f, rq->reply, "out of memory");
	snprintf(p->reply, sizeof(p->reply), "%s", rq->reply);
	snprintf(reason, sizeof(reason), "fleet: %s", req.reason[0] ? req.reason : "dump");
	d.reason = reason;
	d.window_ns = req.window_s * 1000000000ull;
	d.post_ns = req.post_s * 1000000000ull;
	d.token = p;
	p->next = f->pending;
	f->pending = p;
	f->npending++;
	r = f->ops->dump(f->owner, &d);
	if (r < 0) {
		f->pending = p->next;
		f->npending--;
		free(p);
		return refuse(f, rq->reply, r == -ENOENT ? "no such guest" :
			      r == -EBUSY ? "suppressed by the cooldown or the rate limit" : strerror(-r));
	}
	pthread_mutex_lock(&f->lock);
	f->st.triggers++;
	pthread_mutex_unlock(&f->lock);
}

static int on_wake(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct vmt_fleet *f = userdata;
	uint64_t v;

	if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		return 0;
	/* a few at a time: a flood takes its turn with the loop's other inputs */
	for (int i = 0; i < 16; i++) {
		struct fleet_req *rq;

		pthread_mutex_lock(&f->lock);
		rq = f->q_head;
		if (rq) {
			f->q_head = rq->next;
			if (!f->q_head)
				f->q_tail = NULL;
			f->q_len--;
		}
		pthread_mutex_unlock(&f->lock);
		if (!rq)
			return 0;
		handle_req(f, rq);
		free(rq);
	}
	v = 1;
	if (write(f->efd, &v, sizeof(v)) < 0) {
		/* already signalled */
	}
	return 0;
}

/* ---- the uploader thread ---------------------------------------------- */

/* Every subscription gone (the connection closed, or we stop). */
static void subs_drop(struct vmt_fleet *f)
{
	for (uint32_t i = 0; i < f->nhave; i++)
		natsSubscription_Destroy(f->have[i].sub);
	f->nhave = 0;
	f->have_gen = 0;	/* all to make again */
	pthread_mutex_lock(&f->lock);
	f->st.subjects = 0;
	pthread_mutex_unlock(&f->lock);
}

static bool in_want(char (*want)[256], uint32_t n, const char *s)
{
	for (uint32_t i = 0; i < n; i++)
		if (!strcmp(want[i], s))
			return true;
	return false;
}

/*
 * What the loop wants subscribed, made so: subjects it no longer wants
 * are unsubscribed, new ones subscribed. Between upload passes and files,
 * so a label that changes is followed within one file's upload.
 */
static void subs_apply(struct vmt_fleet *f, natsConnection *nc)
{
	char (*want)[256] = f->want_copy;
	uint32_t nwant, k = 0;
	uint64_t gen;

	if (natsConnection_Status(nc) == NATS_CONN_STATUS_CLOSED)
		return;
	pthread_mutex_lock(&f->lock);
	gen = f->want_gen;
	if (gen == f->have_gen) {
		pthread_mutex_unlock(&f->lock);
		return;
	}
	nwant = f->nwant;
	memcpy(want, f->want, nwant * sizeof(want[0]));
	pthread_mutex_unlock(&f->lock);
	for (uint32_t i = 0; i < f->nhave; i++) {
		if (in_want(want, nwant, f->have[i].subject)) {
			f->have[k++] = f->have[i];
			continue;
		}
		natsSubscription_Unsubscribe(f->have[i].sub);
		natsSubscription_Destroy(f->have[i].sub);
	}
	f->nhave = k;
	for (uint32_t i = 0; i < nwant; i++) {
		bool have = false;
		natsSubscription *sub = NULL;

		for (uint32_t j = 0; j < f->nhave && !have; j++)
			have = !strcmp(f->have[j].subject, want[i]);
		if (have || f->nhave >= MAX_SUBS)
			continue;
		if (natsConnection_Subscribe(&sub, nc, want[i], on_msg, f) != NATS_OK) {
			gen = 0;	/* tried again at the next pass */
			continue;
		}
		natsSubscription_SetPendingLimits(sub, REQ_QUEUE_MAX, REQ_QUEUE_MAX * REQ_MAX);
		snprintf(f->have[f->nhave].subject, sizeof(f->have[0].subject), "%s", want[i]);
		f->have[f->nhave++].sub = sub;
	}
	/* the server has them before status says so */
	if (natsConnection_Status(nc) == NATS_CONN_STATUS_CONNECTED)
		natsConnection_FlushTimeout(nc, 2000);
	f->have_gen = gen;
	pthread_mutex_lock(&f->lock);
	f->st.subjects = f->nhave;
	pthread_mutex_unlock(&f->lock);
}

static void nuid(char out[23])
{
	static const char d[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
	uint8_t r[22];

	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		for (size_t i = 0; i < sizeof(r); i++)
			r[i] = (uint8_t)rand();
	for (int i = 0; i < 22; i++)
		out[i] = d[r[i] % 62];
	out[22] = 0;
}

/* What a failed connect is called in status and the log, by its state. */
static const char *connect_what(const char *state)
{
	if (!strcmp(state, "refused"))
		return "authentication refused";
	if (!strcmp(state, "insecure"))
		return "TLS is configured but the server does not require it: refused, "
		       "nothing sent";
	if (!strcmp(state, "tls-failed"))
		return "TLS handshake failed";
	if (!strcmp(state, "bad-server"))
		return "the server does not speak NATS";
	return "connecting";
}

static void set_error(struct vmt_fleet *f, const char *what, natsStatus s)
{
	const char *last = nats_GetLastError(NULL);

	pthread_mutex_lock(&f->lock);
	snprintf(f->st.error, sizeof(f->st.error), "%s: %s%s%s", what, natsStatus_GetText(s),
		 last && *last ? ": " : "", last ? last : "");
	pthread_mutex_unlock(&f->lock);
}

static bool is_sample(const char *g, const char *n)
{
	size_t gl = strlen(g), l = strlen(n);

	return n[0] != '.' && l > gl + 6 && !strncmp(n, g, gl) && n[gl] == '-' &&
	       !strcmp(n + l - 5, ".vmts");
}

static bool is_aux(const char *n)
{
	size_t l = strlen(n);

	return !strncmp(n, "aux-", 4) && l > 11 && !strcmp(n + l - 7, ".vmtaux");
}

/* The headers of a sample's object: its reasons and window, from INFO. */
static void sample_headers(int fd, char *out, size_t n)
{
	struct vmt_sample s;
	char why[128], esc[VMT_REASON_MAX * 6 + 1], reasons[2048] = "";
	size_t o = 0;

	out[0] = 0;
	if (sample_read_info_fd(fd, &s, why, sizeof(why)) < 0)
		return;
	/* reasons may be a guest's words: escaped whole, or left out whole,
	 * so the meta stays JSON */
	for (uint32_t i = 0; i < s.ntriggers; i++) {
		if (fleet_json_escape(esc, sizeof(esc), s.triggers[i].reason) < 0)
			continue;
		if (o + strlen(esc) + 4 >= sizeof(reasons))
			break;
		o += (size_t)snprintf(reasons + o, sizeof(reasons) - o, "%s\"%s\"", o ? "," : "",
				      esc);
	}
	snprintf(out, n, ",\"Vmt-Reasons\":[%s],\"Vmt-Created-Ns\":[\"%" PRIu64 "\"],"
		 "\"Vmt-Window-Since-Ns\":[\"%" PRIu64 "\"]", reasons, s.created_ns, s.window_since_ns);
}

/* Best effort: the chunks of an attempt that failed, gone (ADR-20 says a
 * writer purges them); while disconnected it would only wait for the
 * request's timeout, so it is left to a later purge of the bucket. */
static void upload_purge(struct vmt_fleet *f, natsConnection *nc, jsCtx *js, const char *csubj)
{
	char stream[80];
	jsOptions o;
	jsErrCode jerr = 0;

	if (natsConnection_Status(nc) != NATS_CONN_STATUS_CONNECTED)
		return;
	snprintf(stream, sizeof(stream), "OBJ_%s", f->conf.bucket);
	jsOptions_Init(&o);
	o.Stream.Purge.Subject = csubj;
	js_PurgeStream(js, stream, &o, &jerr);
}

/*
 * Whether the stream holds the object whole, asked of the stream's leader
 * before the marker says so: its chunk subject holds exactly the chunks
 * whose publishes were acknowledged. An acknowledged publish is stored,
 * but after servers are killed a publish that timed out may still be
 * stored later, and a reader (nats.js) reads every message on the chunk
 * subject, not `chunks` of them. Only stream info is asked: a host's
 * permissions (docs/FLEET.md) allow it, and not reading messages (which
 * would let a host read every other host's samples). -EIO: it does not
 * hold it whole; -EAGAIN: it could not be asked.
 */
static int upload_verify(struct vmt_fleet *f, jsCtx *js, const char *name, const char *csubj,
			 uint64_t chunks)
{
	static uint64_t last_log;	/* the uploader thread's only */
	char stream[80];
	jsOptions o;
	jsStreamInfo *si = NULL;
	jsErrCode jerr = 0;
	uint64_t held = 0;
	natsStatus s;

	snprintf(stream, sizeof(stream), "OBJ_%s", f->conf.bucket);
	jsOptions_Init(&o);
	o.Stream.Info.SubjectsFilter = csubj;
	s = js_GetStreamInfo(&si, js, stream, &o, &jerr);
	if (s == NATS_OK && si->State.Subjects)
		for (int i = 0; i < si->State.Subjects->Count; i++)
			if (!strcmp(si->State.Subjects->List[i].Subject, csubj))
				held = si->State.Subjects->List[i].Msgs;
	jsStreamInfo_Destroy(si);
	if (s != NATS_OK) {
		set_error(f, "upload: asking the stream what it holds", s);
		return -EAGAIN;	/* not known: nothing purged */
	}
	if (held == chunks)
		return 0;
	pthread_mutex_lock(&f->lock);
	snprintf(f->st.error, sizeof(f->st.error), "upload: %s: the stream holds %" PRIu64 " messages "
		 "on its chunk subject, %" PRIu64 " written (uploaded again)", name, held, chunks);
	if (!last_log || now_monotonic_ns() - last_log > LOG_EVERY_NS) {
		last_log = now_monotonic_ns();
		log_warning("fleet: %s (logged once a minute)", f->st.error);
	}
	pthread_mutex_unlock(&f->lock);
	return -EIO;
}

static int upload(struct vmt_fleet *f, natsConnection *nc, jsCtx *js, int gfd, const char *guest,
		  const char *file, bool sample)
{
	char subj[512], csubj[512], id[23], name[300], ename[420], digest[64], meta[8192], hdrs[2400];
	char mt[40];
	uint8_t *buf = NULL, sha[32];
	unsigned shalen = 0;
	uint64_t size = 0, chunks = 0;
	EVP_MD_CTX *md = NULL;
	natsMsg *msg = NULL;
	natsStatus s = NATS_OK;
	jsErrCode jerr = 0;
	struct tm tm;
	time_t t;
	int fd, r = 0;

	fd = openat(gfd, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;	/* retention took it */
	buf = malloc(CHUNK);
	md = EVP_MD_CTX_new();
	if (!buf || !md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL)) {
		r = -ENOMEM;
		goto out;
	}
	nuid(id);
	snprintf(csubj, sizeof(csubj), "$O.%s.C.%s", f->conf.bucket, id);
	for (;;) {
		ssize_t got = 0, k;

		while (got < CHUNK && (k = read(fd, buf + got, (size_t)(CHUNK - got))) > 0)
			got += k;
		if (got < 0 || (got < CHUNK && k < 0)) {
			r = -errno;
			if (chunks)
				upload_purge(f, nc, js, csubj);
			goto out;
		}
		if (!got)
			break;
		EVP_DigestUpdate(md, buf, (size_t)got);
		s = js_Publish(NULL, js, csubj, buf, (int)got, NULL, &jerr);
		if (s != NATS_OK) {
			set_error(f, "upload", s);
			upload_purge(f, nc, js, csubj);
			r = -EIO;
			goto out;
		}
		size += (uint64_t)got;
		chunks++;
		if (got < CHUNK)
			break;
	}
	EVP_DigestFinal_ex(md, sha, &shalen);
	b64url(digest, sizeof(digest), sha, shalen);
	snprintf(name, sizeof(name), "%s/%s/%s", f->host, guest, file);
	b64url(ename, sizeof(ename), (const uint8_t *)name, strlen(name));
	hdrs[0] = 0;
	if (sample)
		sample_headers(fd, hdrs, sizeof(hdrs));
	t = time(NULL);
	gmtime_r(&t, &tm);
	strftime(mt, sizeof(mt), "%Y-%m-%dT%H:%M:%SZ", &tm);
	snprintf(meta, sizeof(meta),
		 "{\"name\":\"%s\",\"description\":\"\",\"headers\":{\"Vmt-Host\":[\"%s\"],"
		 "\"Vmt-Guest\":[\"%s\"]%s},\"options\":{\"max_chunk_size\":%d},\"bucket\":\"%s\","
		 "\"nuid\":\"%s\",\"size\":%" PRIu64 ",\"mtime\":\"%s\",\"chunks\":%" PRIu64 ","
		 "\"digest\":\"SHA-256=%s\",\"deleted\":false}",
		 name, f->host, guest, hdrs, CHUNK, f->conf.bucket, id, size, mt, chunks, digest);
	snprintf(subj, sizeof(subj), "$O.%s.M.%s", f->conf.bucket, ename);
	s = natsMsg_Create(&msg, subj, NULL, meta, (int)strlen(meta));
	if (s == NATS_OK)
		s = natsMsgHeader_Set(msg, "Nats-Rollup", "sub");
	if (s == NATS_OK)
		s = js_PublishMsg(NULL, js, msg, NULL, &jerr);
	if (s != NATS_OK) {
		/* its chunks stay: a meta that timed out may still be stored */
		set_error(f, "upload", s);
		r = -EIO;
		goto out;
	}
	r = upload_verify(f, js, name, csubj, chunks);
	if (r < 0) {
		if (r == -EIO)
			upload_purge(f, nc, js, csubj);	/* not whole */
		goto out;
	}
	/* the marker: the backlog is what has none */
	snprintf(subj, sizeof(subj), "%s.uploaded", file);
	r = openat(gfd, subj, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
	if (r < 0) {
		r = -errno;
		goto out;
	}
	close(r);
	r = 0;
	pthread_mutex_lock(&f->lock);
	f->st.uploaded++;
	f->st.uploaded_bytes += size;
	pthread_mutex_unlock(&f->lock);
	if (sample) {
		char tok[VMT_NAME_MAX];

		snprintf(tok, sizeof(tok), "%s", guest);
		for (char *q = tok; *q; q++)
			if (*q == '.')
				*q = '_';	/* one token: docs/FLEET.md */
		snprintf(subj, sizeof(subj), "%s.sample.%s.%s", f->conf.subject_prefix, f->host, tok);
		snprintf(meta, sizeof(meta), "{\"host\":\"%s\",\"guest\":\"%s\",\"object\":\"%s\","
			 "\"size\":%" PRIu64 ",\"headers\":{%s}}", f->host, guest, name, size,
			 hdrs[0] ? hdrs + 1 : "");
		natsConnection_PublishString(nc, subj, meta);
	}
out:
	natsMsg_Destroy(msg);
	EVP_MD_CTX_free(md);
	free(buf);
	close(fd);
	return r;
}

static int names_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Another name into *v (grown as needed, up to cap names): false when full. */
static bool names_add(char ***v, size_t *nv, size_t *room, size_t cap, const char *name)
{
	if (*nv >= cap)
		return false;
	if (*nv == *room) {
		size_t more = *room ? *room * 2 : 64;
		char **nvv = realloc(*v, more * sizeof(**v));

		if (!nvv)
			return false;
		*v = nvv;
		*room = more;
	}
	(*v)[*nv] = strdup(name);
	*nv += (*v)[*nv] != NULL;
	return true;
}

/*
 * One guest folder: aux files first, so a sample's aux is there before its
 * announcement; then samples, oldest first. Every file not uploaded counts
 * in *waiting; a pass takes every aux file (retention.max_aux bounds them)
 * and up to queue_max samples in the order the folder lists them (oldest
 * first among those), the rest wait on disk for the next pass.
 */
static int scan_guest(struct vmt_fleet *f, natsConnection *nc, jsCtx *js, int sfd,
		      const char *guest, uint64_t *waiting, bool upload_now)
{
	char **v = NULL;
	size_t nv = 0, room = 0, over = 0;
	DIR *d;
	int gfd, r = 0;
	struct dirent *de;

	gfd = openat(sfd, guest, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (gfd < 0)
		return 0;
	d = fdopendir(gfd);
	if (!d) {
		close(gfd);
		return 0;
	}
	while ((de = readdir(d))) {
		char mk[300];
		struct stat st;
		size_t l = strlen(de->d_name);

		if (l > 8 && !strcmp(de->d_name + l - 9, ".uploaded")) {
			/* a marker whose file retention took: gone with it */
			snprintf(mk, sizeof(mk), "%.*s", (int)(l - 9), de->d_name);
			if (fstatat(gfd, mk, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT)
				unlinkat(gfd, de->d_name, 0);
			continue;
		}
		if (!is_aux(de->d_name) && !is_sample(guest, de->d_name))
			continue;
		if (fstatat(gfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
			continue;
		snprintf(mk, sizeof(mk), "%s.uploaded", de->d_name);
		if (faccessat(gfd, mk, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
			continue;
		if (!names_add(&v, &nv, &room, is_aux(de->d_name) ? nv + 1 : f->conf.queue_max,
			       de->d_name))
			over++;	/* waits on disk: a later pass takes it */
	}
	if (nv)
		qsort(v, nv, sizeof(*v), names_cmp);	/* "aux-" sorts apart; samples by time */
	*waiting += nv + over;
	if (over && upload_now)
		log_debug("fleet: guest %s: %zu files this pass, %zu wait for the next (queue_max %u)",
			  guest, nv, over, f->conf.queue_max);
	for (int pass = 0; pass < 2 && upload_now && r == 0; pass++)
		for (size_t i = 0; i < nv && r == 0; i++) {
			bool aux = is_aux(v[i]);

			if (aux != (pass == 0))
				continue;
			r = upload(f, nc, js, gfd, guest, v[i], !aux);
			subs_apply(f, nc);	/* a label that changed meanwhile */
			if (r == 0) {
				pthread_mutex_lock(&f->lock);
				if (f->st.queue)
					f->st.queue--;
				pthread_mutex_unlock(&f->lock);
			}
		}
	for (size_t i = 0; i < nv; i++)
		free(v[i]);
	free(v);
	closedir(d);
	return r;
}

/* Count what waits, then upload it; <0 at the first failure. */
static int scan(struct vmt_fleet *f, natsConnection *nc, jsCtx *js)
{
	uint64_t waiting = 0;
	int sfd, r = 0;
	DIR *d;
	struct dirent *de;

	for (int round = 0; round < 2 && r == 0; round++) {
		sfd = open(f->state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (sfd < 0)
			return -errno;
		d = fdopendir(sfd);
		if (!d) {
			close(sfd);
			return -ENOMEM;
		}
		waiting = 0;
		while ((de = readdir(d)) && r == 0)
			if (name_is_valid(de->d_name) && de->d_type == DT_DIR)
				r = scan_guest(f, nc, js, sfd, de->d_name, &waiting, round == 1);
		closedir(d);
		if (round == 0) {
			pthread_mutex_lock(&f->lock);
			f->st.queue = waiting;
			pthread_mutex_unlock(&f->lock);
			if (!waiting || !js)
				break;
		}
	}
	return r;
}

static int ensure_stream(struct vmt_fleet *f, jsCtx *js)
{
	char name[80], c[80], m[80];
	const char *subjects[2] = { c, m };
	jsStreamConfig cfg;
	jsStreamInfo *si = NULL;
	jsErrCode jerr = 0;
	natsStatus s;

	snprintf(name, sizeof(name), "OBJ_%s", f->conf.bucket);
	s = js_GetStreamInfo(&si, js, name, NULL, &jerr);
	if (s == NATS_OK) {
		jsStreamInfo_Destroy(si);
		return 0;
	}
	snprintf(c, sizeof(c), "$O.%s.C.>", f->conf.bucket);
	snprintf(m, sizeof(m), "$O.%s.M.>", f->conf.bucket);
	jsStreamConfig_Init(&cfg);
	cfg.Name = name;
	cfg.Subjects = subjects;
	cfg.SubjectsLen = 2;
	cfg.Storage = js_FileStorage;
	cfg.Replicas = (int64_t)f->conf.replicas;
	cfg.Discard = js_DiscardNew;
	cfg.AllowRollup = true;
	cfg.AllowDirect = true;
	s = js_AddStream(&si, js, &cfg, NULL, &jerr);
	if (s != NATS_OK) {
		set_error(f, "creating the bucket's stream", s);
		return -EIO;
	}
	jsStreamInfo_Destroy(si);
	return 0;
}

static void *uploader(void *arg)
{
	struct vmt_fleet *f = arg;
	natsConnection *nc = NULL;
	jsCtx *js = NULL;
	bool ensured = false;
	uint32_t backoff = 0;
	uint64_t last_log = 0;

	for (;;) {
		struct timespec until;
		uint32_t wait_ms = SCAN_MS;

		pthread_mutex_lock(&f->lock);
		if (f->stop) {
			pthread_mutex_unlock(&f->lock);
			break;
		}
		pthread_mutex_unlock(&f->lock);
		if (nc && natsConnection_Status(nc) == NATS_CONN_STATUS_CLOSED) {
			pthread_mutex_lock(&f->lock);
			f->nc = NULL;
			f->st.connected = false;
			snprintf(f->st.state, sizeof(f->st.state), "connecting");
			pthread_mutex_unlock(&f->lock);
			subs_drop(f);
			jsCtx_Destroy(js);
			js = NULL;
			natsConnection_Destroy(nc);
			nc = NULL;
			ensured = false;
		}
		if (!nc) {
			natsOptions *o = NULL;
			char why[300];
			natsStatus s = NATS_ERR;

			if (natsconn_options(&o, &f->conf, f->host, 2000, why, sizeof(why)) == 0) {
				s = natsOptions_SetMaxReconnect(o, -1);	/* forever */
				if (s == NATS_OK)
					s = natsOptions_SetReconnectWait(o, 250);
				if (s == NATS_OK)
					s = natsOptions_SetDisconnectedCB(o, on_disconnected, f);
				if (s == NATS_OK)
					s = natsOptions_SetReconnectedCB(o, on_reconnected, f);
				if (s == NATS_OK)
					s = natsConnection_Connect(&nc, o);
				natsOptions_Destroy(o);
			}
			if (s != NATS_OK) {
				const char *last = nats_GetLastError(NULL);
				const char *state = o ? natsconn_state(s, last) : "bad-config";

				nc = NULL;
				if (o)
					set_error(f, connect_what(state), s);
				pthread_mutex_lock(&f->lock);
				if (!o)
					snprintf(f->st.error, sizeof(f->st.error), "%.199s", why);
				snprintf(f->st.state, sizeof(f->st.state), "%s", state);
				if (!strcmp(state, "refused"))
					f->st.auth_failures++;
				if (!last_log || now_monotonic_ns() - last_log > LOG_EVERY_NS) {
					last_log = now_monotonic_ns();
					log_error("fleet: %s (retrying; logged once a minute; local "
						  "recording goes on)", f->st.error);
				}
				pthread_mutex_unlock(&f->lock);
				backoff = backoff ? VMT_MIN(backoff * 2, BACKOFF_MAX_MS) : BACKOFF_MIN_MS;
				wait_ms = backoff;
				scan(f, NULL, NULL);	/* the queue's length, while down */
				goto wait;
			}
			backoff = 0;
			subs_apply(f, nc);
			natsConnection_JetStream(&js, nc, NULL);
			pthread_mutex_lock(&f->lock);
			f->nc = nc;
			/* libnats' callbacks may have told of a disconnection already */
			if (natsConnection_Status(nc) == NATS_CONN_STATUS_CONNECTED) {
				f->st.connected = true;
				snprintf(f->st.state, sizeof(f->st.state), "connected");
				f->st.error[0] = 0;
			}
			natsConnection_GetConnectedUrl(nc, f->st.server, sizeof(f->st.server));
			pthread_mutex_unlock(&f->lock);
			log_info("fleet: connected to %s as %s", f->st.server, f->host);
		}
		subs_apply(f, nc);
		if (natsConnection_Status(nc) == NATS_CONN_STATUS_CONNECTED && js) {
			if (!ensured)
				ensured = ensure_stream(f, js) == 0;
			if (ensured && scan(f, nc, js) < 0) {
				pthread_mutex_lock(&f->lock);
				f->st.upload_failures++;
				pthread_mutex_unlock(&f->lock);
				backoff = backoff ? VMT_MIN(backoff * 2, BACKOFF_MAX_MS) : BACKOFF_MIN_MS;
				wait_ms = backoff;
			} else if (ensured) {
				backoff = 0;
				pthread_mutex_lock(&f->lock);
				if (f->st.queue)
					wait_ms = 0;	/* a pass took queue_max: the next at once */
				pthread_mutex_unlock(&f->lock);
			}
		} else {
			scan(f, NULL, NULL);	/* the queue's length, while down */
		}
wait:
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += wait_ms / 1000;
		until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
		if (until.tv_nsec >= 1000000000L)
			until.tv_sec++, until.tv_nsec -= 1000000000L;
		pthread_mutex_lock(&f->lock);
		while (!f->stop && !f->kick)
			if (pthread_cond_timedwait(&f->cond, &f->lock, &until) == ETIMEDOUT)
				break;
		f->kick = false;
		pthread_mutex_unlock(&f->lock);
	}
	pthread_mutex_lock(&f->lock);
	f->nc = NULL;
	pthread_mutex_unlock(&f->lock);
	subs_drop(f);
	jsCtx_Destroy(js);
	natsConnection_Destroy(nc);
	return NULL;
}

/* ---- the module -------------------------------------------------------- */

static void add_subject(char (*v)[256], uint32_t *n, const char *s, uint32_t *over)
{
	for (uint32_t i = 0; i < *n; i++)
		if (!strcmp(v[i], s))
			return;
	if (*n < MAX_SUBS)
		snprintf(v[(*n)++], sizeof(v[0]), "%s", s);
	else
		(*over)++;
}

/* The subjects the labels in force ask for, handed to the uploader. */
static void subjects_update(struct vmt_fleet *f)
{
	char (*v)[256] = f->want_next;
	char subj[256];
	uint32_t n = 0, over = 0;

	if (f->conf.accept & VMT_FLEET_ACCEPT_HOST) {
		snprintf(subj, sizeof(subj), "%s.dump.%s.*", f->conf.subject_prefix, f->host);
		add_subject(v, &n, subj, &over);
	}
	for (uint32_t i = 0; i < f->nlabeled && (f->conf.accept & VMT_FLEET_ACCEPT_LABEL); i++) {
		char l[VMT_LABELS_MAX], *save = NULL;

		snprintf(l, sizeof(l), "%s", f->labeled[i].labels);
		for (char *kv = strtok_r(l, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
			char *eq = strchr(kv, '=');

			if (!eq)
				continue;
			*eq = 0;
			snprintf(subj, sizeof(subj), "%s.dump.label.%s.%s", f->conf.subject_prefix, kv,
				 eq + 1);
			add_subject(v, &n, subj, &over);
		}
	}
	if (over && (!f->over_log_ns || now_monotonic_ns() - f->over_log_ns > LOG_EVERY_NS)) {
		f->over_log_ns = now_monotonic_ns();
		log_warning("fleet: %u label subject(s) past the %d this host subscribes to are not "
			    "subscribed (logged once a minute)", over, MAX_SUBS);
	}
	pthread_mutex_lock(&f->lock);
	if (n != f->nwant || memcmp(v, f->want, n * sizeof(v[0]))) {
		memcpy(f->want, v, n * sizeof(v[0]));
		f->nwant = n;
		f->want_gen++;
		f->kick = true;
		pthread_cond_signal(&f->cond);
	}
	pthread_mutex_unlock(&f->lock);
}

static struct fleet_labeled *labeled_find(struct vmt_fleet *f, const char *guest)
{
	for (uint32_t i = 0; i < f->nlabeled; i++)
		if (!strcmp(f->labeled[i].name, guest))
			return &f->labeled[i];
	return NULL;
}

void fleet_set_labels(struct vmt_fleet *f, const char *guest, const char *labels)
{
	struct fleet_labeled *e;
	uint32_t i;

	if (!f)
		return;
	for (i = 0; i < f->nconf; i++)
		if (!strcmp(f->labeled[i].name, guest))
			return;	/* the configuration's labels win */
	e = labeled_find(f, guest);
	if (!labels || !*labels) {
		if (!e)
			return;
		*e = f->labeled[--f->nlabeled];
	} else if (e) {
		if (!strcmp(e->labels, labels))
			return;
		snprintf(e->labels, sizeof(e->labels), "%s", labels);
	} else {
		if (f->nlabeled - f->nconf >= DYN_MAX)
			return;	/* lvmeta reads at most as many */
		if (f->nlabeled == f->room) {
			uint32_t more = f->room ? f->room * 2 : 16;
			struct fleet_labeled *v = realloc(f->labeled, more * sizeof(*v));

			if (!v)
				return;
			f->labeled = v;
			f->room = more;
		}
		e = &f->labeled[f->nlabeled++];
		snprintf(e->name, sizeof(e->name), "%s", guest);
		snprintf(e->labels, sizeof(e->labels), "%s", labels);
	}
	log_info("fleet: guest %s: labels %s (from libvirt)", guest, labels && *labels ? labels : "none");
	subjects_update(f);
}

const char *fleet_labels(struct vmt_fleet *f, const char *guest)
{
	struct fleet_labeled *e = f ? labeled_find(f, guest) : NULL;

	return e ? e->labels : NULL;
}

/*
 * A fleet without credentials: anyone who reaches the server may then
 * publish dump requests to this host, and read or write the bucket as it
 * can. Said once, at start (the TLS side of it is said apart).
 */
static void warn_no_credentials(const struct vmt_fleet_conf *c)
{
	if (!c->user[0] && !c->nkey_seed[0] && !c->creds[0])
		log_warning("fleet: no credentials (user/password, nkey_seed or creds): the server "
			    "must let anyone connect, and whoever does can ask this host for dumps; "
			    "docs/FLEET.md has a permission block");
}

/* Said once at start: a fleet without TLS is a choice to make knowingly. */
static void fleet_warn_insecure(const struct vmt_fleet_conf *c)
{
	const char *why = natsconn_insecure(c);

	if (why)
		log_warning("fleet: %s", why);
}

int fleet_new(struct vmt_fleet **out, sd_event *e, const struct vmt_config *c,
	      const char *hostname, const struct vmt_fleet_ops *ops, void *owner)
{
	struct vmt_fleet *f;
	int r;

	*out = NULL;
	if (!c->fleet.enabled)
		return 0;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->event = e;
	f->conf = c->fleet;
	f->ops = ops;
	f->owner = owner;
	f->efd = -1;
	snprintf(f->state_dir, sizeof(f->state_dir), "%s", c->state_dir);
	snprintf(f->host, sizeof(f->host), "%s", c->fleet.host_id[0] ? c->fleet.host_id : hostname);
	for (char *q = f->host; *q; q++)
		if (*q == '.' || *q == '*' || *q == '>' || *q == ' ')
			*q = '_';	/* a hostname's domain: one token */
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	if (!config_label_token_valid(f->host)) {
		/* the configuration's was checked; a hostname may be "label" */
		log_error("fleet: host id \"%s\" is not one subject token or is reserved "
			  "(label, _all): set fleet.host_id", f->host);
		r = -EINVAL;
		goto fail;
	}
	f->st.enabled = true;
	snprintf(f->st.state, sizeof(f->st.state), "connecting");
	f->want = calloc(MAX_SUBS, sizeof(*f->want));
	f->want_next = calloc(MAX_SUBS, sizeof(*f->want_next));
	f->want_copy = calloc(MAX_SUBS, sizeof(*f->want_copy));
	f->have = calloc(MAX_SUBS, sizeof(*f->have));
	f->room = c->nguests + 16;
	f->labeled = calloc(f->room, sizeof(*f->labeled));
	if (!f->want || !f->want_next || !f->want_copy || !f->have || !f->labeled) {
		r = -ENOMEM;
		goto fail;
	}
	for (uint32_t i = 0; i < c->nguests; i++) {
		const struct vmt_guest_conf *g = &c->guests[i];

		if (!g->labels[0])
			continue;
		snprintf(f->labeled[f->nlabeled].name, VMT_NAME_MAX, "%s", g->name);
		snprintf(f->labeled[f->nlabeled++].labels, VMT_LABELS_MAX, "%s", g->labels);
	}
	f->nconf = f->nlabeled;
	subjects_update(f);
	/* without libnats no thread: the fleet says why in status and local
	 * recording goes on (`vmtraced -n` refuses such a configuration) */
	if (dlnats_open(f->st.error, sizeof(f->st.error)) < 0) {
		snprintf(f->st.state, sizeof(f->st.state), "no-library");
		log_error("fleet: off: %s (install libnats3.4; local recording goes on)", f->st.error);
		*out = f;
		return 0;
	}
	if (natsconn_init() < 0)
		log_warning("fleet: OpenSSL could not be initialized without its exit handler");
	warn_no_credentials(&f->conf);
	f->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (f->efd < 0) {
		r = -errno;
		goto fail;
	}
	r = sd_event_add_io(e, &f->src, f->efd, EPOLLIN, on_wake, f);
	if (r < 0)
		goto fail;
	r = -pthread_create(&f->thread, NULL, uploader, f);
	if (r < 0)
		goto fail;
	f->started = true;
	log_info("fleet: host %s, %u subjects, bucket %s", f->host, f->nwant, f->conf.bucket);
	fleet_warn_insecure(&f->conf);
	*out = f;
	return 0;
fail:
	fleet_free(f);
	return r;
}

void fleet_free(struct vmt_fleet *f)
{
	if (!f)
		return;
	if (f->started) {
		pthread_mutex_lock(&f->lock);
		f->stop = true;
		pthread_cond_signal(&f->cond);
		pthread_mutex_unlock(&f->lock);
		pthread_join(f->thread, NULL);
	}
	sd_event_source_disable_unref(f->src);
	if (f->efd >= 0)
		close(f->efd);
	while (f->q_head) {
		struct fleet_req *n = f->q_head->next;

		free(f->q_head);
		f->q_head = n;
	}
	while (f->pending) {
		struct fleet_pending *n = f->pending->next;

		free(f->pending);
		f->pending = n;
	}
	free(f->labeled);
	free(f->want);
	free(f->want_next);
	free(f->want_copy);
	free(f->have);
	/* Every NATS object is gone with the uploader: wait for libnats' own
	 * threads too. nats_Close() alone returned while one of them could
	 * still free the connection's SSL objects, which then raced exit()'s
	 * OpenSSL cleanup (a SIGSEGV in libcrypto, about one stop in a dozen). */
	if (f->started && natsconn_close(10000) < 0)
		log_warning("fleet: libnats' threads did not finish within 10 s");
	pthread_cond_destroy(&f->cond);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

void fleet_kick(struct vmt_fleet *f)
{
	if (!f)
		return;
	pthread_mutex_lock(&f->lock);
	f->kick = true;
	pthread_cond_signal(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

void fleet_status(struct vmt_fleet *f, struct vmt_fleet_status *st)
{
	if (!f) {
		memset(st, 0, sizeof(*st));
		return;
	}
	pthread_mutex_lock(&f->lock);
	*st = f->st;
	pthread_mutex_unlock(&f->lock);
}
