/* SPDX-License-Identifier: MIT */
/*
 * fleet: the module (fleet.h says who owns what; fleet-int.h which file
 * does what). Here: the labels and the subjects they ask for, start and
 * stop, status.
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet-int.h"
#include "log.h"
#include "natsconn.h"
#include "util.h"

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

/* ---- the worker: the uploader's thread, the requests' hand-back ------- */

static void fleet_job(struct vmt_worker_job *j, unsigned thread, void *userdata)
{
	fleet_uploader(userdata);	/* upjob, the only one: until stop */
}

static void fleet_job_done(struct vmt_worker_job *j, void *userdata)
{
	struct vmt_fleet *f = userdata;

	if (j != &f->upjob)
		fleet_req_handle(f, (struct fleet_req *)((char *)j - offsetof(struct fleet_req, wj)));
}

static void fleet_job_drop(struct vmt_worker_job *j, void *userdata)
{
	struct vmt_fleet *f = userdata;

	if (j != &f->upjob)
		free((char *)j - offsetof(struct fleet_req, wj));
}

static const struct vmt_worker_ops fleet_worker_ops = {
	.run = fleet_job,
	.done = fleet_job_done,
	.drop = fleet_job_drop,
	.batch = 16,	/* a flood takes its turn with the loop's other inputs */
};

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
	r = worker_init(&f->worker, e, &fleet_worker_ops, 1, f);
	if (r < 0)
		goto fail;
	r = worker_run(&f->worker);
	if (r < 0)
		goto fail;
	worker_submit(&f->worker, &f->upjob);
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
	/* the uploader's job ends at stop, and libnats' threads hand nothing
	 * back from then on: the requests still waiting are freed */
	pthread_mutex_lock(&f->lock);
	f->stop = true;
	pthread_cond_signal(&f->cond);
	pthread_mutex_unlock(&f->lock);
	worker_stop(&f->worker);
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
