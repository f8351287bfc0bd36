/* SPDX-License-Identifier: MIT */
/*
 * lvmeta: the libvirt side of the fleet's labels (lvmeta.h says who owns
 * what). The thread runs libvirt's default event loop (the only one in the
 * process): the connection's socket, its keepalive, the metadata-change
 * events, a timer for the reconnect backoff and an eventfd the sd-event
 * loop writes to when it hands over a new set of guests or stops us are all
 * in it. Between its iterations the thread (re)connects and reads what is
 * marked to read. The thread is a worker's (worker.h), and results go
 * back through its hand-back, at most one waiting per guest (a newer read
 * replaces it).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "lvmeta-dl.h"	/* libvirt, libxml2: loaded when a guest needs them */

#include "log.h"
#include "lvmeta-int.h"
#include "util.h"

#define GUESTS_MAX 1024		/* guests read at once; more are left out, said */
#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 10000
#define KEEPALIVE_S 5		/* libvirtd gone quiet: closed after 5 s x 3 */
#define KEEPALIVE_COUNT 3
#define LOG_EVERY_NS LV_LOG_EVERY_NS
#define SHORT_NAME 20		/* libvirt's channel folder keeps this much of a name */

static pthread_once_t lv_once = PTHREAD_ONCE_INIT;
static int lv_init_r;

static void lv_quiet(void *opaque, virErrorPtr e)
{
	/* errors are read with virGetLastError() where they happen, and said
	 * once a minute; libvirt's default prints every one on stderr */
}

static void lv_init(void)
{
	lv_init_r = virInitialize();
	virSetErrorFunc(NULL, lv_quiet);
	/* libvirt's own event loop: before any connection is opened */
	if (lv_init_r == 0)
		lv_init_r = virEventRegisterDefaultImpl();
}

static const char *lv_error(void)
{
	const char *m = virGetLastErrorMessage();

	return m && *m ? m : "unknown error";
}

/* Is domain full the guest whose channel folder gave name? */
bool lv_name_matches(const char *full, const char *name)
{
	size_t n = strlen(name);

	if (!full)
		return false;
	return !strcmp(full, name) || (n >= SHORT_NAME && !strncmp(full, name, n));
}

/* ---- the thread: libvirt ------------------------------------------------ */

void lv_wake_loop(struct vmt_lvmeta *l)
{
	/* one wake waits at a time; the loop clears the flag before it takes
	 * the lists, so what comes after is woken for again */
	if (!atomic_exchange(&l->wake_pending, true))
		worker_hand_back(&l->worker, &l->wake);
}

/* A result for the loop; one per guest waits, the newest. Under the lock. */
static void push_result(struct vmt_lvmeta *l, const char *name, int id, const char *labels)
{
	struct lv_result *r;

	for (r = l->r_head; r; r = r->next)
		if (!strcmp(r->name, name))
			break;
	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r)
			return;	/* read again at the next change or reconnection */
		snprintf(r->name, sizeof(r->name), "%s", name);
		r->next = l->r_head;
		l->r_head = r;
	}
	r->id = id;
	snprintf(r->labels, sizeof(r->labels), "%s", labels);
}

static struct lv_guest *find(struct vmt_lvmeta *l, const char *name)
{
	for (uint32_t i = 0; i < l->n; i++)
		if (!strcmp(l->g[i].name, name))
			return &l->g[i];
	return NULL;
}

struct lv_guest *lv_guest_of(struct vmt_lvmeta *l, virDomainPtr dom)
{
	const char *full = virDomainGetName(dom);
	int id = (int)virDomainGetID(dom);

	for (uint32_t i = 0; i < l->n; i++)
		if (id > 0 && l->g[i].id == id)
			return &l->g[i];
	/* a domain that stopped has no id any more */
	for (uint32_t i = 0; i < l->n; i++)
		if (lv_name_matches(full, l->g[i].name))
			return &l->g[i];
	return NULL;
}

static void on_meta(virConnectPtr conn, virDomainPtr dom, int type, const char *nsuri, void *opaque)
{
	struct vmt_lvmeta *l = opaque;
	struct lv_guest *g;

	if (type != VIR_DOMAIN_METADATA_ELEMENT || !nsuri || strcmp(nsuri, VMT_LVMETA_NS))
		return;
	pthread_mutex_lock(&l->lock);
	g = lv_guest_of(l, dom);
	if (g)
		g->dirty = true;
	pthread_mutex_unlock(&l->lock);
}

static void on_close(virConnectPtr conn, int reason, void *opaque)
{
	((struct vmt_lvmeta *)opaque)->lost = true;	/* the thread's: we run in it */
}

static void on_wake(int watch, int fd, int events, void *opaque)
{
	uint64_t v;

	if (read(fd, &v, sizeof(v)) < 0) {
		/* EAGAIN: someone read it first */
	}
}

static void on_timer(int timer, void *opaque)
{
	/* only ends virEventRunDefaultImpl(): the loop around it reconnects */
}

static void set_state(struct vmt_lvmeta *l, const char *state, const char *error)
{
	pthread_mutex_lock(&l->lock);
	l->state = state;
	if (error)
		snprintf(l->error, sizeof(l->error), "%s", error);
	pthread_mutex_unlock(&l->lock);
}

static void drop_conn(struct vmt_lvmeta *l)
{
	if (!l->conn)
		return;
	if (l->meta_cb >= 0)
		virConnectDomainEventDeregisterAny(l->conn, l->meta_cb);
	l->meta_cb = -1;
	lv_events_deregister(l);
	virConnectUnregisterCloseCallback(l->conn, on_close);
	virConnectClose(l->conn);
	l->conn = NULL;
	l->lost = false;
}

static void connect_once(struct vmt_lvmeta *l)
{
	uint64_t now = now_monotonic_ns();
	char why[512];

	l->conn = virConnectOpenReadOnly(l->uri);
	if (l->conn) {
		virConnectRegisterCloseCallback(l->conn, on_close, l, NULL);
		if (virConnectSetKeepAlive(l->conn, KEEPALIVE_S, KEEPALIVE_COUNT) < 0)
			log_debug("libvirt: no keepalive on %s: %s", l->uri, lv_error());
		if (l->labels)
			l->meta_cb = virConnectDomainEventRegisterAny(
				l->conn, NULL, VIR_DOMAIN_EVENT_ID_METADATA_CHANGE,
				VIR_DOMAIN_EVENT_CALLBACK(on_meta), l, NULL);
		if ((!l->labels || l->meta_cb >= 0) && (!l->events || lv_events_register(l) == 0)) {
			l->backoff_ms = 0;
			pthread_mutex_lock(&l->lock);
			for (uint32_t i = 0; i < l->n; i++)
				l->g[i].dirty = true;	/* what changed while away */
			l->state = "connected";
			l->error[0] = 0;
			pthread_mutex_unlock(&l->lock);
			log_info("libvirt: connected to %s (read-only)%s%s", l->uri,
				 l->labels ? ", reading the guests' labels" : "",
				 l->events ? ", following their crashes and watchdogs" : "");
			return;
		}
		snprintf(why, sizeof(why), "no domain events from %.200s: %.200s", l->uri,
			 lv_error());
		drop_conn(l);
	} else {
		snprintf(why, sizeof(why), "cannot connect to %.200s: %.200s", l->uri, lv_error());
	}
	l->backoff_ms = l->backoff_ms ? VMT_MIN(l->backoff_ms * 2, BACKOFF_MAX_MS) : BACKOFF_MIN_MS;
	l->next_try_ns = now + l->backoff_ms * 1000000ull;
	pthread_mutex_lock(&l->lock);
	l->connect_failures++;
	l->state = "connecting";
	snprintf(l->error, sizeof(l->error), "%s", why);
	pthread_mutex_unlock(&l->lock);
	if (!l->log_ns || now - l->log_ns > LOG_EVERY_NS) {
		l->log_ns = now;
		log_warning("libvirt: %s (retrying; logged once a minute; guests keep the labels "
			    "read last, recording goes on)", why);
	}
}

/* One guest's labels, read and checked; false when the connection failed
 * under it (read again once it is back). */
static bool read_one(struct vmt_lvmeta *l, const char *name, int id)
{
	char labels[VMT_LABELS_MAX] = "", why[200];
	virDomainPtr dom = NULL;
	char *xml;
	int r;

	if (id > 0) {
		dom = virDomainLookupByID(l->conn, id);
		if (dom && !lv_name_matches(virDomainGetName(dom), name)) {
			virDomainFree(dom);	/* the id went to another domain */
			dom = NULL;
		}
	}
	if (!dom)
		dom = virDomainLookupByName(l->conn, name);
	xml = dom ? virDomainGetMetadata(dom, VIR_DOMAIN_METADATA_ELEMENT, VMT_LVMETA_NS,
					 VIR_DOMAIN_AFFECT_LIVE) : NULL;
	if (!xml) {
		virErrorPtr e = virGetLastError();

		if (virConnectIsAlive(l->conn) != 1) {
			l->lost = true;
			return false;
		}
		/* no such element, or no such domain (gone; discovery will say): none */
		if (e && e->code != VIR_ERR_NO_DOMAIN_METADATA && e->code != VIR_ERR_NO_DOMAIN)
			log_debug("libvirt: guest %s: metadata not read: %s", name, lv_error());
	} else {
		r = lvmeta_parse(xml, strlen(xml), labels, sizeof(labels), why, sizeof(why));
		if (r < 0) {
			struct lv_guest *g;
			uint64_t now = now_monotonic_ns();
			bool say = false;

			pthread_mutex_lock(&l->lock);
			l->refused++;
			g = find(l, name);
			if (g && (!g->log_ns || now - g->log_ns > LOG_EVERY_NS)) {
				g->log_ns = now;
				say = true;
			}
			pthread_mutex_unlock(&l->lock);
			if (say)
				log_warning("libvirt: guest %s: labels metadata refused: %s (it has no "
					    "labels from libvirt until it is right; said once a minute a "
					    "guest)", name, why);
			labels[0] = 0;
		}
		free(xml);
	}
	if (dom)
		virDomainFree(dom);
	pthread_mutex_lock(&l->lock);
	l->reads++;
	push_result(l, name, id, labels);
	pthread_mutex_unlock(&l->lock);
	lv_wake_loop(l);
	return true;
}

static void read_dirty(struct vmt_lvmeta *l)
{
	while (l->labels) {
		char name[VMT_NAME_MAX] = "";
		int id = 0;

		pthread_mutex_lock(&l->lock);
		for (uint32_t i = 0; i < l->n && !name[0]; i++)
			if (l->g[i].dirty && !l->stop) {
				l->g[i].dirty = false;
				snprintf(name, sizeof(name), "%s", l->g[i].name);
				id = l->g[i].id;
			}
		pthread_mutex_unlock(&l->lock);
		if (!name[0])
			return;
		if (!read_one(l, name, id)) {
			struct lv_guest *g;

			pthread_mutex_lock(&l->lock);
			g = find(l, name);
			if (g)
				g->dirty = true;	/* read again once connected */
			pthread_mutex_unlock(&l->lock);
			return;
		}
	}
}

static void lv_thread(struct vmt_worker_job *j, unsigned thread, void *arg)
{
	struct vmt_lvmeta *l = arg;

	pthread_once(&lv_once, lv_init);
	if (lv_init_r < 0) {
		set_state(l, "connecting", "libvirt's event loop could not be set up");
		log_error("libvirt: cannot set up libvirt's event loop: %s", lv_error());
		return;
	}
	l->watch = virEventAddHandle(l->thread_efd, VIR_EVENT_HANDLE_READABLE, on_wake, l, NULL);
	l->timer = virEventAddTimeout(-1, on_timer, l, NULL);
	if (l->watch < 0 || l->timer < 0) {
		set_state(l, "connecting", "libvirt's event loop could not watch our eventfd");
		log_error("libvirt: cannot watch our eventfd in libvirt's event loop");
		return;
	}
	for (;;) {
		bool want;
		int ms = -1;

		pthread_mutex_lock(&l->lock);
		want = l->n > 0;
		if (l->stop) {
			pthread_mutex_unlock(&l->lock);
			break;
		}
		pthread_mutex_unlock(&l->lock);
		if (l->conn && l->lost) {
			uint64_t now = now_monotonic_ns();

			drop_conn(l);
			set_state(l, "connecting", "the connection was closed (libvirtd stopped?)");
			if (!l->log_ns || now - l->log_ns > LOG_EVERY_NS) {
				l->log_ns = now;
				log_warning("libvirt: the connection to %s was closed; reconnecting", l->uri);
			}
			l->next_try_ns = now;
		}
		/* only with a guest to read: a host without libvirt never tries */
		if (!l->conn && want && now_monotonic_ns() >= l->next_try_ns)
			connect_once(l);
		if (l->conn)
			read_dirty(l);
		if (!l->conn && want) {
			uint64_t now = now_monotonic_ns();

			ms = l->next_try_ns > now ? (int)((l->next_try_ns - now) / 1000000) + 1 : 0;
		}
		virEventUpdateTimeout(l->timer, ms);
		if (!l->conn)
			set_state(l, want ? "connecting" : "idle", NULL);
		if (virEventRunDefaultImpl() < 0)
			log_debug("libvirt: event loop: %s", lv_error());
	}
	drop_conn(l);
	virEventRemoveHandle(l->watch);
	virEventRemoveTimeout(l->timer);
	return;
}

/* ---- the loop ----------------------------------------------------------- */

static void on_results(struct vmt_worker_job *j, void *userdata)
{
	struct vmt_lvmeta *l = userdata;
	struct lv_result *r, *next;
	bool stop;

	if (j != &l->wake)
		return;	/* the thread's job, ended */
	atomic_store(&l->wake_pending, false);
	pthread_mutex_lock(&l->lock);
	stop = l->stop;
	pthread_mutex_unlock(&l->lock);
	if (stop)
		return;	/* lvmeta_free() under way: it frees what waits */
	lv_events_deliver(l);
	pthread_mutex_lock(&l->lock);
	r = l->r_head;
	l->r_head = NULL;
	pthread_mutex_unlock(&l->lock);
	for (; r; r = next) {
		struct lv_guest *g;
		bool current;

		next = r->next;
		/* the set may have changed since: only a guest still read, at that id */
		pthread_mutex_lock(&l->lock);
		g = find(l, r->name);
		current = g && g->id == r->id;
		pthread_mutex_unlock(&l->lock);
		if (current)
			l->ops->labels(l->owner, r->name, r->labels);
		free(r);
	}
}

static const struct vmt_worker_ops lv_worker_ops = {
	.run = lv_thread,
	.done = on_results,
};

int lvmeta_set(struct vmt_lvmeta *l, const struct vmt_lvmeta_guest *g, uint32_t n)
{
	struct lv_guest *v, *old;
	bool wake = false;
	uint64_t now = now_monotonic_ns();

	if (!l)
		return 0;
	if (n > GUESTS_MAX) {
		if (!l->left_out_ns || now - l->left_out_ns > LOG_EVERY_NS) {
			l->left_out_ns = now;
			log_warning("libvirt: %u guests to read labels of, the first %d read (logged "
				    "once a minute)", n, GUESTS_MAX);
		}
		n = GUESTS_MAX;
	}
	v = calloc(n ? n : 1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	pthread_mutex_lock(&l->lock);
	for (uint32_t i = 0; i < n; i++) {
		snprintf(v[i].name, sizeof(v[i].name), "%s", g[i].name);
		v[i].id = g[i].id;
		old = find(l, g[i].name);
		if (old)
			v[i].crashed_id = old->crashed_id;
		if (old && old->id == g[i].id) {
			v[i].dirty = old->dirty;
			v[i].log_ns = old->log_ns;
		} else {
			v[i].dirty = true;	/* new, or the domain started again */
			wake = true;
		}
	}
	if (n != l->n)
		wake = true;
	free(l->g);
	l->g = v;
	l->n = n;
	pthread_mutex_unlock(&l->lock);
	/* the thread, and libvirt in it, only once there is a libvirt guest */
	if (n && !l->started && !l->no_library) {
		char why[sizeof(l->error)];
		int r = lvmeta_dl_open(true, why, sizeof(why));

		if (r < 0) {
			/* said once, and in status; the rest of the daemon goes on
			 * (`vmtraced -n` refuses such a configuration) */
			log_error("libvirt: %s: no labels nor events from libvirt (install libvirt0)", why);
			pthread_mutex_lock(&l->lock);
			l->state = "no-library";
			snprintf(l->error, sizeof(l->error), "%s", why);
			pthread_mutex_unlock(&l->lock);
			l->no_library = true;
			return 0;
		}
		r = worker_run(&l->worker);
		if (r < 0) {
			log_error_errno(r, "libvirt: cannot start its thread: %m");
			return r;
		}
		worker_submit(&l->worker, &l->job);
		l->started = true;
	}
	if (wake)
		(void)eventfd_write(l->thread_efd, 1);
	return 0;
}

int lvmeta_new(struct vmt_lvmeta **out, sd_event *e, const char *uri, bool labels, bool events,
	       const struct vmt_lvmeta_ops *ops, void *owner)
{
	struct vmt_lvmeta *l = calloc(1, sizeof(*l));
	int r;

	*out = NULL;
	if (!l)
		return -ENOMEM;
	l->event = e;
	snprintf(l->uri, sizeof(l->uri), "%s", uri);
	l->labels = labels;
	l->events = events;
	l->ops = ops;
	l->owner = owner;
	l->meta_cb = l->life_cb = l->dog_cb = -1;
	l->e_tail = &l->e_head;
	l->state = "idle";
	pthread_mutex_init(&l->lock, NULL);
	l->thread_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (l->thread_efd < 0) {
		r = -errno;
		goto fail;
	}
	r = worker_init(&l->worker, e, &lv_worker_ops, 1, l);
	if (r < 0)
		goto fail;
	*out = l;
	return 0;
fail:
	lvmeta_free(l);
	return r;
}

void lvmeta_free(struct vmt_lvmeta *l)
{
	if (!l)
		return;
	pthread_mutex_lock(&l->lock);
	l->stop = true;
	pthread_mutex_unlock(&l->lock);
	if (l->started)
		(void)eventfd_write(l->thread_efd, 1);
	/* a read under way ends with libvirt's RPC time-out at worst */
	worker_stop(&l->worker);
	if (l->thread_efd >= 0)
		close(l->thread_efd);
	while (l->r_head) {
		struct lv_result *n = l->r_head->next;

		free(l->r_head);
		l->r_head = n;
	}
	lv_events_free(l);
	free(l->g);
	pthread_mutex_destroy(&l->lock);
	free(l);
}

void lvmeta_status(struct vmt_lvmeta *l, struct vmt_lvmeta_status *st)
{
	memset(st, 0, sizeof(*st));
	if (!l) {
		st->state = "off";
		return;
	}
	pthread_mutex_lock(&l->lock);
	st->state = l->state;
	snprintf(st->error, sizeof(st->error), "%s", l->error);
	st->reads = l->reads;
	st->refused = l->refused;
	st->connect_failures = l->connect_failures;
	st->events = l->ev_seen;
	st->incidents = l->ev_incidents;
	st->dropped = l->ev_dropped;
	st->folded = l->ev_folded;
	st->fired = l->ev_fired;
	st->suppressed = l->ev_suppressed;
	pthread_mutex_unlock(&l->lock);
}
