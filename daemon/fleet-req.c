/* SPDX-License-Identifier: MIT */
/*
 * fleet's requests: libnats' threads check a dump request's reply subject,
 * queue it (bounded) and wake the loop; on the loop it is checked (subject,
 * strict JSON, the fleet's budget), handed to the owner's dump callback,
 * and answered on its reply subject (fleet_answer()).
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet-int.h"
#include "log.h"
#include "util.h"

/* ---- libnats' threads: check and hand back, nothing else -------------- */

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

void fleet_on_msg(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
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
	if (f->stop) {
		free(rq);	/* fleet_free() is under way: the loop takes no more */
	} else {
		f->q_len++;
		worker_hand_back(&f->worker, &rq->wj);
	}
	pthread_mutex_unlock(&f->lock);
	natsMsg_Destroy(msg);
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

void fleet_req_handle(struct vmt_fleet *f, struct fleet_req *rq)
{
	bool stop;

	pthread_mutex_lock(&f->lock);
	f->q_len--;
	stop = f->stop;
	pthread_mutex_unlock(&f->lock);
	if (!stop)
		handle_req(f, rq);
	free(rq);
}
