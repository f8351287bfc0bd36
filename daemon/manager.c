/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "control.h"
#include "guest.h"
#include "log.h"
#include "manager.h"

struct vmt_guest *manager_find_guest(struct vmt_manager *m, const char *name)
{
	for (uint32_t i = 0; i < m->nguests; i++)
		if (!strcmp(m->guests[i]->conf.name, name))
			return m->guests[i];
	return NULL;
}

/* ---- freezing ----------------------------------------------------------- */

/* Sample names carry microseconds and must not collide. */
static uint64_t manager_sample_time(struct vmt_manager *m)
{
	uint64_t t = now_realtime_ns();

	if (t / 1000 <= m->last_sample_ns / 1000)
		t = (m->last_sample_ns / 1000 + 1) * 1000;
	m->last_sample_ns = t;
	return t;
}

/*
 * Copy one guest's window out of its rings. With a flush target, the window
 * ends exactly where the agent's FLUSHED said; pages that came after belong
 * to the next window (and stay in the ring).
 */
static struct vmt_job *freeze_guest(struct vmt_manager *m, struct vmt_guest *g,
				    const struct vmt_trigger *t, uint32_t nt, uint64_t dump_id)
{
	struct vmt_job *job;
	uint32_t ps = g->layout.page_size;
	uint64_t total = 0;
	uint32_t *take;
	uint8_t *dst;

	if (!g->nrings || !g->have_aux) {
		log_guest(VMT_LOG_NOTICE, 0, g->conf.name, "nothing recorded yet: no sample written");
		return NULL;
	}
	take = calloc(g->nrings, sizeof(*take));
	job = calloc(1, sizeof(*job));
	if (!job || !take)
		goto oom;
	for (uint32_t c = 0; c < g->nrings; c++) {
		const struct vmt_ring *r = &g->rings[c];
		uint32_t n = r->count;

		if (g->flushed && g->have_target)
			while (n && ring_slot(r, n - 1)->seq >= g->target_seq[c])
				n--;
		take[c] = n;
		total += n;
	}
	job->kind = VMT_JOB_SAMPLE;
	job->dump_id = dump_id;
	job->zstd_level = m->conf.zstd_level;
	job->zstd_workers = 2;
	snprintf(job->dir, sizeof(job->dir), "%s/%s", m->conf.state_dir, g->conf.name);
	job->frozen = malloc(total ? total * ps : 1);
	job->iovs = calloc(g->nrings, sizeof(*job->iovs));
	job->sample.cpus = calloc(g->nrings, sizeof(*job->sample.cpus));
	if (!job->frozen || !job->iovs || !job->sample.cpus)
		goto oom;

	struct vmt_sample *s = &job->sample;
	snprintf(s->guest, sizeof(s->guest), "%s", g->conf.name);
	snprintf(s->host, sizeof(s->host), "%s", m->hostname);
	s->aux_version = g->aux.version;
	s->aux_id = g->aux.id;
	s->created_ns = manager_sample_time(m);
	s->dump_id = dump_id;
	s->page_size = ps;
	s->ncpus = g->nrings;
	s->ntriggers = VMT_MIN(nt, VMT_SAMPLE_MAX_TRIGGERS);
	memcpy(s->triggers, t, s->ntriggers * sizeof(*t));
	s->ctl_rejected_bytes = guest_ctl_rejected_bytes(g);
	s->ctl_rejected_msgs = guest_ctl_rejected_msgs(g);
	s->flush_timeouts = g->c.flush_timeouts;
	sample_file_name(job->name, sizeof(job->name), g->conf.name, s->created_ns);

	dst = job->frozen;
	for (uint32_t c = 0; c < g->nrings; c++) {
		const struct vmt_ring *r = &g->rings[c];
		struct vmt_sample_cpu *sc = &s->cpus[c];

		sc->cpu = c;
		sc->npages = take[c];
		sc->counters = r->c;
		sc->have_guest_stats = g->have_stats;
		if (g->have_stats)
			sc->guest = g->stats[c];
		job->iovs[c] = (struct vmt_iovec){ dst, (size_t)take[c] * ps };
		sc->iov = &job->iovs[c];
		sc->niov = 1;
		for (uint32_t i = 0; i < take[c]; i++) {
			const struct vmt_ring_slot *sl = ring_slot(r, i);
			memcpy(dst, ring_page(r, i), ps);
			dst += ps;
			if (!i) {
				sc->first_seq = sl->seq;
				sc->first_ts = sl->first_ts;
			}
			sc->last_ts = sl->last_ts;
			sc->events += sl->events;
		}
	}
	free(take);
	return job;
oom:
	log_guest(VMT_LOG_ERR, -ENOMEM, g->conf.name, "cannot freeze the window: %m");
	free(take);
	job_free(job);
	m->dump_errors++;
	return NULL;
}

void manager_dump_guest_now(struct vmt_manager *m, struct vmt_guest *g, const struct vmt_trigger *t)
{
	struct vmt_job *job;
	bool flushed = g->flushed;

	g->flushed = false;	/* no flush target: take every page */
	job = freeze_guest(m, g, t, 1, 0);
	g->flushed = flushed;
	if (job) {
		m->dumps++;
		writer_submit(&m->writer, job);
	}
}

void manager_submit_aux(struct vmt_manager *m, struct vmt_guest *g)
{
	struct vmt_job *job = calloc(1, sizeof(*job));

	if (!job) {
		log_guest(VMT_LOG_ERR, -ENOMEM, g->conf.name, "cannot queue the aux file: %m");
		free(g->aux.meta);
		return;
	}
	job->kind = VMT_JOB_AUX;
	snprintf(job->dir, sizeof(job->dir), "%s/%s", m->conf.state_dir, g->conf.name);
	aux_file_name(job->name, sizeof(job->name), g->aux.version);
	job->aux = g->aux;	/* takes the bundle */
	writer_submit(&m->writer, job);
}

/* ---- dump requests ------------------------------------------------------ */

static bool dump_wants(const struct vmt_dump *d, const struct vmt_guest *g)
{
	if (d->all_guests)
		return true;
	for (uint32_t i = 0; i < d->nguests; i++)
		if (!strcmp(d->guests[i], g->conf.name))
			return true;
	return false;
}

static void dump_free(struct vmt_dump *d)
{
	struct vmt_waiter *w;

	if (!d)
		return;
	while ((w = d->waiters)) {
		d->waiters = w->next;
		free(w);
	}
	for (uint32_t i = 0; i < d->nguests; i++)
		free(d->guests[i]);
	free(d->guests);
	for (uint32_t i = 0; i < d->nfiles; i++)
		free(d->files[i]);
	free(d->files);
	sd_event_source_disable_unref(d->timeout);
	free(d);
}

static void dump_start(struct vmt_manager *m);

static void dump_finish(struct vmt_manager *m)
{
	struct vmt_dump *d = m->cur;

	for (struct vmt_waiter *w = d->waiters; w; w = w->next)
		control_answer_dump(m->control, w->client, w->request_id, d->files, d->nfiles,
				    d->error);
	log_info("dump %llu: done, %u file(s)", (unsigned long long)d->id, d->nfiles);
	dump_free(d);
	m->cur = m->next;
	m->next = NULL;
	if (m->cur)
		dump_start(m);
}

static void dump_freeze(struct vmt_manager *m)
{
	struct vmt_dump *d = m->cur;

	d->timeout = sd_event_source_disable_unref(d->timeout);
	d->writing = true;
	for (uint32_t i = 0; i < m->nguests; i++) {
		struct vmt_guest *g = m->guests[i];
		struct vmt_job *job;

		if (!dump_wants(d, g))
			continue;
		job = freeze_guest(m, g, d->triggers, d->ntriggers, d->id);
		g->flushed = false;
		g->have_target = false;
		if (!job)
			continue;
		d->jobs_left++;
		writer_submit(&m->writer, job);
	}
	m->dumps++;
	if (!d->jobs_left)
		dump_finish(m);
}

static int dump_timeout_cb(sd_event_source *s, uint64_t usec, void *userdata)
{
	struct vmt_manager *m = userdata;

	for (uint32_t i = 0; i < m->nguests; i++) {
		struct vmt_guest *g = m->guests[i];
		if (g->flush_wait && dump_wants(m->cur, g)) {
			g->flush_wait = false;
			g->c.flush_timeouts++;
			log_guest(VMT_LOG_WARNING, 0, g->conf.name,
				  "no FLUSHED within %u ms: dumping what has arrived",
				  m->conf.rec.flush_timeout_ms);
		}
	}
	dump_freeze(m);
	return 0;
}

static void dump_start(struct vmt_manager *m)
{
	struct vmt_dump *d = m->cur;
	unsigned waiting = 0;
	uint32_t timeout_ms = 0;
	int r;

	d->id = ++m->next_dump_id;
	for (uint32_t i = 0; i < m->nguests; i++) {
		struct vmt_guest *g = m->guests[i];
		if (!dump_wants(d, g))
			continue;
		if (guest_flush(g, d->id)) {
			waiting++;
			timeout_ms = VMT_MAX(timeout_ms, g->conf.rec.flush_timeout_ms);
		}
	}
	log_info("dump %llu: %s (%s), waiting for %u agent(s) to flush", (unsigned long long)d->id,
		 trigger_kind_name(d->triggers[0].kind), d->triggers[0].reason, waiting);
	if (!waiting) {
		dump_freeze(m);
		return;
	}
	r = sd_event_add_time_relative(m->event, &d->timeout, CLOCK_MONOTONIC,
				       (uint64_t)timeout_ms * 1000, 1000, dump_timeout_cb, m);
	if (r < 0) {
		log_error_errno(r, "cannot arm the flush timeout: %m");
		dump_freeze(m);
	}
}

void manager_guest_flushed(struct vmt_manager *m, struct vmt_guest *g)
{
	if (!m->cur || m->cur->writing || !dump_wants(m->cur, g))
		return;
	for (uint32_t i = 0; i < m->nguests; i++)
		if (m->guests[i]->flush_wait && dump_wants(m->cur, m->guests[i]))
			return;
	dump_freeze(m);
}

static int dump_add_guest(struct vmt_dump *d, const char *name)
{
	char **t;

	for (uint32_t i = 0; i < d->nguests; i++)
		if (!strcmp(d->guests[i], name))
			return 0;
	t = realloc(d->guests, (d->nguests + 1) * sizeof(*t));
	if (!t)
		return -ENOMEM;
	d->guests = t;
	d->guests[d->nguests] = strdup(name);
	if (!d->guests[d->nguests])
		return -ENOMEM;
	d->nguests++;
	return 0;
}

int manager_request_dump(struct vmt_manager *m, char *const *names, uint32_t n,
			 const struct vmt_trigger *t, struct vmt_client *client, uint32_t request_id)
{
	struct vmt_dump *d;
	bool fresh = false;

	for (uint32_t i = 0; i < n; i++)
		if (!manager_find_guest(m, names[i]))
			return -ENOENT;

	/* a dump still flushing takes the new trigger; one being written does not */
	if (m->cur && !m->cur->writing)
		d = m->cur;
	else if (m->cur && m->next)
		d = m->next;
	else {
		d = calloc(1, sizeof(*d));
		if (!d)
			return -ENOMEM;
		fresh = true;
	}
	if (!n)
		d->all_guests = true;
	for (uint32_t i = 0; i < n; i++)
		if (dump_add_guest(d, names[i]) < 0)
			goto oom;
	if (d->ntriggers < VMT_SAMPLE_MAX_TRIGGERS)
		d->triggers[d->ntriggers++] = *t;
	else
		d->triggers_dropped++;
	if (client) {
		struct vmt_waiter *w = calloc(1, sizeof(*w));
		if (!w)
			goto oom;
		w->client = client;
		w->request_id = request_id;
		w->next = d->waiters;
		d->waiters = w;
	}
	if (fresh) {
		if (!m->cur) {
			m->cur = d;
			dump_start(m);
		} else {
			m->next = d;
		}
	}
	return 0;
oom:
	if (fresh)
		dump_free(d);
	return -ENOMEM;
}

void manager_forget_client(struct vmt_manager *m, struct vmt_client *client)
{
	struct vmt_dump *ds[2] = { m->cur, m->next };

	for (int k = 0; k < 2; k++) {
		struct vmt_waiter **pp;
		if (!ds[k])
			continue;
		for (pp = &ds[k]->waiters; *pp;) {
			if ((*pp)->client == client) {
				struct vmt_waiter *w = *pp;
				*pp = w->next;
				free(w);
			} else {
				pp = &(*pp)->next;
			}
		}
	}
}

static void writer_done(struct vmt_job *job, void *userdata)
{
	struct vmt_manager *m = userdata;
	char path[PATH_MAX + 400];
	char field[PATH_MAX + 420];
	const char *fields[2] = { field, NULL };

	snprintf(path, sizeof(path), "%s/%s", job->dir, job->name);
	if (job->kind == VMT_JOB_AUX) {
		if (job->error < 0)
			log_full(VMT_LOG_ERR, job->error, NULL, "cannot write aux file %s: %m", path);
		else
			log_info("wrote %s (%llu bytes)", path, (unsigned long long)job->bytes);
		job_free(job);
		return;
	}
	snprintf(field, sizeof(field), "SAMPLE=%s", path);
	if (job->error < 0) {
		m->dump_errors++;
		log_full(VMT_LOG_ERR, job->error, fields, "cannot write sample %s: %m", path);
	} else {
		uint64_t pages = 0;
		struct vmt_guest *g = manager_find_guest(m, job->sample.guest);

		for (uint32_t c = 0; c < job->sample.ncpus; c++)
			pages += job->sample.cpus[c].npages;
		m->samples_written++;
		if (g)
			snprintf(g->last_dump, sizeof(g->last_dump), "%s", path);
		log_full(VMT_LOG_NOTICE, 0, fields, "wrote %s: %llu pages, %llu bytes, %llu ms", path,
			 (unsigned long long)pages, (unsigned long long)job->bytes,
			 (unsigned long long)(job->duration_ns / 1000000));
	}
	if (m->cur && m->cur->writing && job->dump_id == m->cur->id) {
		struct vmt_dump *d = m->cur;
		if (job->error < 0) {
			d->error = job->error;
		} else {
			char **f = realloc(d->files, (d->nfiles + 1) * sizeof(*f));
			if (f) {
				d->files = f;
				d->files[d->nfiles] = strdup(path);
				if (d->files[d->nfiles])
					d->nfiles++;
			}
		}
		if (!--d->jobs_left)
			dump_finish(m);
	}
	job_free(job);
}

/* ---- signals and life cycle ---------------------------------------------- */

static int on_sigusr1(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata)
{
	struct vmt_manager *m = userdata;
	struct vmt_trigger t = { .kind = VMT_TRIGGER_SIGNAL, .pid = si->ssi_pid,
				 .time_ns = now_realtime_ns() };
	int r;

	snprintf(t.reason, sizeof(t.reason), "SIGUSR1 from pid %u", si->ssi_pid);
	r = manager_request_dump(m, NULL, 0, &t, NULL, 0);
	if (r < 0)
		log_error_errno(r, "cannot start a dump: %m");
	return 0;
}

static int on_exit_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata)
{
	struct vmt_manager *m = userdata;

	log_notice("%s received, shutting down", strsignal((int)si->ssi_signo));
	sd_event_exit(m->event, 0);
	return 0;
}

int manager_new(struct vmt_manager **out, struct vmt_config *conf, const char *config_path)
{
	struct vmt_manager *m = calloc(1, sizeof(*m));
	sigset_t ss;
	int r;

	if (!m)
		return -ENOMEM;
	m->conf = *conf;
	*conf = (struct vmt_config){ 0 };	/* the manager owns it now */
	m->config_path = config_path;
	m->start_ns = now_monotonic_ns();
	if (gethostname(m->hostname, sizeof(m->hostname) - 1) < 0)
		snprintf(m->hostname, sizeof(m->hostname), "localhost");

	/* signals are read from the loop: block them before any thread starts */
	sigemptyset(&ss);
	sigaddset(&ss, SIGUSR1);
	sigaddset(&ss, SIGTERM);
	sigaddset(&ss, SIGINT);
	sigaddset(&ss, SIGHUP);
	sigprocmask(SIG_BLOCK, &ss, NULL);
	signal(SIGPIPE, SIG_IGN);

	r = sd_event_default(&m->event);
	if (r < 0)
		goto fail;
	r = sd_event_add_signal(m->event, NULL, SIGUSR1, on_sigusr1, m);
	if (r >= 0)
		r = sd_event_add_signal(m->event, NULL, SIGTERM, on_exit_signal, m);
	if (r >= 0)
		r = sd_event_add_signal(m->event, NULL, SIGINT, on_exit_signal, m);
	if (r < 0)
		goto fail;
	r = writer_start(&m->writer, m->event, writer_done, m);
	if (r < 0)
		goto fail;
	r = control_new(&m->control, m, m->conf.control_socket);
	if (r < 0)
		goto fail;

	m->guests = calloc(m->conf.nguests ? m->conf.nguests : 1, sizeof(*m->guests));
	if (!m->guests) {
		r = -ENOMEM;
		goto fail;
	}
	for (uint32_t i = 0; i < m->conf.nguests; i++) {
		r = guest_new(m, &m->conf.guests[i], &m->guests[i]);
		if (r < 0)
			goto fail;
		m->nguests++;
	}
	*out = m;
	return 0;
fail:
	manager_free(m);
	return r;
}

int manager_run(struct vmt_manager *m)
{
	int r;

	for (uint32_t i = 0; i < m->nguests; i++)
		guest_connect(m->guests[i]);
	log_notice("vmtraced %s running: %u guest(s), state in %s, control socket %s", VMT_VERSION,
		   m->nguests, m->conf.state_dir, m->conf.control_socket);
	r = sd_event_loop(m->event);
	for (uint32_t i = 0; i < m->nguests; i++)
		guest_stop(m->guests[i]);
	return r < 0 ? 1 : 0;
}

void manager_free(struct vmt_manager *m)
{
	if (!m)
		return;
	/* samples being written are finished, not abandoned */
	writer_stop(&m->writer);
	control_free(m->control);
	for (uint32_t i = 0; i < m->nguests; i++)
		guest_free(m->guests[i]);
	free(m->guests);
	dump_free(m->cur);
	dump_free(m->next);
	config_free(&m->conf);
	sd_event_unref(m->event);
	free(m);
}
