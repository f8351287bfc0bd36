/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <sched.h>
#include <sys/sysinfo.h>
#include <sys/statvfs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "control.h"
#include "fleet.h"
#include "priv.h"
#include "sandbox.h"
#include "discovery.h"
#include "fdstore.h"
#include "guest.h"
#include "hostpriv.h"
#include "hostsrc.h"
#include "log.h"
#include "lvmeta.h"
#include "manager.h"
#include "manager-int.h"
#include "probe.h"

/* ---- what guests tell the manager ----------------------------------------- */

static bool on_guest_window_replaced(void *owner, struct vmt_guest *g, const char *why)
{
	return dump_guest_window_replaced(&((struct vmt_manager *)owner)->dumps, g, why);
}

static void on_guest_prev_boot(void *owner, struct vmt_guest *g, struct vmt_prev_set *set)
{
	dump_guest_prev(&((struct vmt_manager *)owner)->dumps, g, set);
}

static int on_guest_trigger(void *owner, struct vmt_guest *g, const struct vmt_trigger *t)
{
	char *names[1] = { (char *)guest_name(g) };
	struct vmt_dump_req rq = { .names = names, .n = 1, .trigger = t };

	return dump_request(&((struct vmt_manager *)owner)->dumps, &rq);
}

static void on_guest_qemu_changed(void *owner, struct vmt_guest *g)
{
	struct vmt_manager *m = owner;

	probe_sync_guests(m->probe);
}

static void on_host_mark(void *owner, const char *text)
{
	struct vmt_manager *m = owner;

	for (uint32_t i = 0; i < m->guests.n; i++)
		if (hostsrc_is(m->guests.v[i]))
			hostsrc_mark(m->guests.v[i], text);
}

static struct vmt_guest *on_discovered(void *owner, const struct vmt_guest_conf *gc)
{
	struct vmt_guest *g;

	return manager_add_guest(owner, gc, &g) < 0 ? NULL : g;
}

static void on_rescanned(void *owner)
{
	manager_fleet_sync(owner);
}

const struct vmt_discovery_ops manager_discovery_ops = {
	.add = on_discovered,
	.rescanned = on_rescanned,
};

static int on_detector(void *owner, const char *guest, const struct vmt_trigger *t, bool last_word)
{
	struct vmt_manager *m = owner;
	char *names[1] = { (char *)guest };
	struct vmt_dump_req rq = { .names = names, .n = guest ? 1 : 0, .trigger = t,
				   .no_cooldown = last_word };
	struct vmt_guest *g = guest && last_word ? guest_list_find(&m->guests, guest) : NULL;

	/* its QEMU is gone: no agent left to answer a FLUSH, and what it sent
	 * is read in the coalescing window */
	if (g)
		guest_crashed(g);
	return dump_request(&m->dumps, &rq);
}

static bool on_exit_unclean(void *owner, const char *guest)
{
	struct vmt_guest *g = guest_list_find(&((struct vmt_manager *)owner)->guests, guest);

	return g && guest_exit_unclean(g);
}

/* The detectors, for the configuration in force. */
int manager_probe_new(struct vmt_manager *m)
{
	struct vmt_probe_env env = { .event = m->event, .conf = &m->conf, .guests = &m->guests,
				     .fire = on_detector, .exit_unclean = on_exit_unclean,
				     .owner = m };

	return probe_new(&m->probe, &env);
}

static void on_dump_answer(void *owner, struct vmt_client *cl, uint32_t id, char *const *files,
			   uint32_t nfiles, int error)
{
	struct vmt_manager *m = owner;

	fleet_kick(m->fleet);	/* new files to upload */
	if (fleet_answer(m->fleet, cl, files, nfiles, error))
		return;	/* a fleet request's token, not a control client */
	manager_answer_dump(cl, id, files, nfiles, error);
}

static const struct vmt_control_ops manager_ctl_ops = {
	.request = manager_ctl_request,
	.gone = manager_ctl_gone,
};

static const struct vmt_guest_events guest_events = {
	.window_replaced = on_guest_window_replaced,
	.prev_boot = on_guest_prev_boot,
	.trigger = on_guest_trigger,
	.qemu_changed = on_guest_qemu_changed,
	.host_mark = on_host_mark,
};

struct vmt_guest *manager_find_guest(struct vmt_manager *m, const char *name)
{
	for (uint32_t i = 0; i < m->guests.n; i++)
		if (!strcmp(guest_name(m->guests.v[i]), name))
			return m->guests.v[i];
	return NULL;
}

int manager_add_guest(struct vmt_manager *m, const struct vmt_guest_conf *gc, struct vmt_guest **out)
{
	struct vmt_guest **t = realloc(m->guests.v, (m->guests.n + 1) * sizeof(*t));
	int r;

	if (!t)
		return -ENOMEM;
	m->guests.v = t;
	r = guest_new(&m->genv, gc, &m->guests.v[m->guests.n]);
	if (r < 0)
		return r;
	*out = m->guests.v[m->guests.n++];
	probe_sync_guests(m->probe);
	return 0;
}

/* The dump reserve into systemd's fd store, under a name of its own: the
 * pages rings fill while a dump holds their own outlive a crash too. */
static void manager_store_reserve(struct vmt_manager *m)
{
	char name[VMT_PERSIST_FDNAME_MAX];
	int r;

	if (m->mem.reserve.fd < 0)
		return;
	pagepool_name(&m->mem.reserve, name, sizeof(name));
	r = fdstore_push(m->mem.reserve.fd, name);
	if (r < 0)
		log_warning_errno(r, "the dump reserve is not in systemd's fd store (a crash during a "
				  "dump would lose the pages that came in meanwhile): %m");
}

static bool known_guest(void *arg, const char *name)
{
	return manager_find_guest(arg, name) != NULL;
}

/*
 * Rings handed back after a crash wait for their guests: those of guests
 * not in the list (gone from the configuration) go at the first
 * housekeeping, after the first discovery scan; the rest, whose guests
 * never settled a session, after forget_after, as an offline guest's.
 */
static void manager_drop_unclaimed(struct vmt_manager *m, uint64_t after_ns)
{
	/* reserves handed back with no ring, or whose rings went otherwise */
	recover_release_reserves(&m->recover);
	if (!m->recover.n)
		return;
	if (m->housekeeping_runs == 1)
		recover_drop(&m->recover, known_guest, m, "no such guest in the configuration");
	if (now_monotonic_ns() - m->start_ns >= after_ns) {
		recover_drop(&m->recover, NULL, NULL, "its guest did not come back within forget_after");
		recover_free(&m->recover);
		upgrade_in_free(&m->upgrade);
		manager_keeper_say(m);
	}
}

/* Every 5 s: forget guests offline too long; drop discovered ones gone;
 * reconnect to FIFOs made anew. */
static void manager_housekeeping(struct vmt_manager *m)
{
	uint64_t after = m->conf.forget_after_s * 1000000000ull;

	/* max_age needs time to pass, not only dumps: look once a minute */
	if (m->housekeeping_runs++ % 12 == 0)
		dump_submit_retention(&m->dumps);

	for (uint32_t i = 0; i < m->guests.n;) {
		struct vmt_guest *g = m->guests.v[i];

		guest_check_channels(g);
		guest_check_partial(g);
		if (guest_forget(g, after) && guest_discovered(g) && !guest_present(g)) {
			log_guest(VMT_LOG_NOTICE, 0, guest_name(g), "forgotten");
			dump_guest_gone(&m->dumps, g);
			guest_free(g);
			memmove(&m->guests.v[i], &m->guests.v[i + 1], (m->guests.n - i - 1) * sizeof(*m->guests.v));
			m->guests.n--;
			probe_sync_guests(m->probe);
			continue;
		}
		i++;
	}
	manager_drop_unclaimed(m, after);
	upgrade_reap(&m->upgrade);
	manager_keeper_say(m);
}

/* The host's own source, with host.enabled, as the guest named "host". */
void manager_start_host(struct vmt_manager *m)
{
	struct vmt_guest **t, *g = NULL;

	if (!m->conf.host.enabled)
		return;
	if (manager_find_guest(m, "host")) {
		log_guest(VMT_LOG_ERR, -EEXIST, "host",
			  "a guest is already named \"host\": no host recording");
		return;
	}
	if (hostsrc_new(&m->genv, m->hostpriv, &g) < 0 || !g)
		return;
	t = realloc(m->guests.v, (m->guests.n + 1) * sizeof(*t));
	if (!t) {
		log_guest(VMT_LOG_ERR, -ENOMEM, "host", "%m");
		guest_free(g);
		return;
	}
	m->guests.v = t;
	m->guests.v[m->guests.n++] = g;
	probe_sync_guests(m->probe);
}

/*
 * The host source's helper: the predecessor's, handed over, or one forked
 * now, while this process still has what tracefs takes and runs no thread.
 * Made whatever host: says, so that a reload can turn the host source on.
 */
static void manager_start_hostpriv(struct vmt_manager *m)
{
	int fd = upgrade_take_fd(&m->upgrade, VMT_UPGRADE_HOSTPRIV);
	int r;

	if (fd >= 0) {
		r = hostpriv_adopt(fd, &m->hostpriv);
		if (r >= 0)
			return;
		log_warning("upgrade: the host source's helper handed over does not answer as this "
			    "version asks: a new one is made");
	}
	r = hostpriv_start(&m->hostpriv);
	if (r < 0)
		log_error_errno(r, "cannot start the host source's helper: no host recording: %m");
}

/* ---- systemd ------------------------------------------------------------- */

void manager_notify_status(struct vmt_manager *m)
{
	unsigned streaming = 0;

	for (uint32_t i = 0; i < m->guests.n; i++)
		streaming += guest_state(m->guests.v[i]) == GUEST_STREAMING;
	sd_notifyf(0, "STATUS=%u guest(s), %u streaming, rings %.1f MiB, %llu dump(s), %llu failed",
		   m->guests.n, streaming, (double)m->mem.rings / (1 << 20),
		   (unsigned long long)m->dumps.dumps, (unsigned long long)m->dumps.dump_errors);
}

static int status_timer_cb(sd_event_source *s, uint64_t usec, void *userdata)
{
	struct vmt_manager *m = userdata;

	manager_housekeeping(m);
	manager_notify_status(m);
	sd_event_source_set_time_relative(s, 5 * 1000000ull);
	sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
	return 0;
}

/* The machine's RAM, and the size of the file system that holds path (or
 * of its nearest folder that exists): 0 where unknown. */
static uint64_t fs_size_of(const char *path)
{
	char p[4096];
	struct statvfs sv;

	snprintf(p, sizeof(p), "%s", path);
	for (;;) {
		char *slash;

		if (statvfs(p, &sv) == 0)
			return (uint64_t)sv.f_blocks * sv.f_frsize;
		slash = strrchr(p, '/');
		if (!slash || slash == p)
			return statvfs("/", &sv) == 0 ? (uint64_t)sv.f_blocks * sv.f_frsize : 0;
		*slash = 0;
	}
}

int manager_resolve_config(struct vmt_config *c, char *err, size_t err_len)
{
	bool mem_auto = c->memory_max == VMT_AUTO, disk_auto = c->retention.max_bytes == VMT_AUTO;
	struct sysinfo si;
	uint64_t ram = sysinfo(&si) == 0 ? (uint64_t)si.totalram * si.mem_unit : 0;
	int r = config_resolve(c, ram, disk_auto ? fs_size_of(c->state_dir) : 0, err, err_len);

	if (r < 0)
		return r;
	if (mem_auto)
		log_info("memory_max: auto, %llu MiB (a sixteenth of %llu MiB of RAM, 256 MiB to 4 GiB)",
			 (unsigned long long)(c->memory_max >> 20), (unsigned long long)(ram >> 20));
	if (disk_auto)
		log_info("retention.max_bytes: auto, %llu MiB (a tenth of %s's file system, 64 MiB "
			 "to 20 GiB)", (unsigned long long)(c->retention.max_bytes >> 20), c->state_dir);
	return 0;
}

/*
 * Reload the configuration: one that fails to parse or validate is logged
 * and the running one stays. Guests whose settings did not change keep
 * their sessions and rings; changed ones start over; removed ones go.
 */
/* ---- signals and life cycle ---------------------------------------------- */

static int on_sighup(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata)
{
	struct vmt_manager *m = userdata;
	char err[1024];

	log_notice("SIGHUP: reloading %s", m->config_path);
	manager_reload(m, err, sizeof(err));
	return 0;
}


static int on_sigusr1(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata)
{
	struct vmt_manager *m = userdata;
	struct vmt_trigger t = { .kind = VMT_TRIGGER_SIGNAL, .pid = si->ssi_pid,
				 .time_ns = now_realtime_ns() };
	struct vmt_dump_req rq = { .trigger = &t };
	int r;

	snprintf(t.reason, sizeof(t.reason), "SIGUSR1 from pid %u", si->ssi_pid);
	r = dump_request(&m->dumps, &rq);
	if (r < 0)
		log_error_errno(r, "cannot start a dump: %m");
	return 0;
}

static int on_sigusr2(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata)
{
	log_notice("SIGUSR2 from pid %u: upgrade", si->ssi_pid);
	manager_upgrade(userdata);	/* back only if it failed or was refused (logged) */
	return 0;
}

static int on_exit_signal(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata)
{
	struct vmt_manager *m = userdata;

	log_notice("%s received, shutting down", strsignal((int)si->ssi_signo));
	sd_event_exit(m->event, 0);
	return 0;
}

/* record.compress_threads, or one from the CPUs this process may run on. */
uint32_t manager_compress_threads(const struct vmt_manager *m)
{
	cpu_set_t set;
	long n;

	if (m->conf.rec.compress_threads)
		return m->conf.rec.compress_threads;
	n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
	return compressor_threads_auto(n);
}

/* The loop, its signals, the watchdog and the status timer. */
static int manager_loop_new(struct vmt_manager *m)
{
	sigset_t ss;
	int r;

	/* signals are read from the loop: block them before any thread starts */
	sigemptyset(&ss);
	sigaddset(&ss, SIGUSR1);
	sigaddset(&ss, SIGUSR2);
	sigaddset(&ss, SIGTERM);
	sigaddset(&ss, SIGINT);
	sigaddset(&ss, SIGHUP);
	sigprocmask(SIG_BLOCK, &ss, NULL);
	signal(SIGPIPE, SIG_IGN);

	r = sd_event_default(&m->event);
	if (r < 0)
		return r;
	m->genv.event = m->event;
	r = sd_event_add_signal(m->event, NULL, SIGUSR1, on_sigusr1, m);
	if (r >= 0)
		r = sd_event_add_signal(m->event, NULL, SIGUSR2, on_sigusr2, m);
	if (r >= 0)
		r = sd_event_add_signal(m->event, NULL, SIGTERM, on_exit_signal, m);
	if (r >= 0)
		r = sd_event_add_signal(m->event, NULL, SIGINT, on_exit_signal, m);
	if (r >= 0)
		r = sd_event_add_signal(m->event, NULL, SIGHUP, on_sighup, m);
	if (r >= 0)
		r = sd_event_set_watchdog(m->event, true);	/* WATCHDOG=1 when WatchdogSec= is set */
	if (r >= 0)
		r = sd_event_add_time_relative(m->event, NULL, CLOCK_MONOTONIC, 5 * 1000000ull, 1000000,
					       status_timer_cb, m);
	return r;
}

int manager_new(struct vmt_manager **out, struct vmt_config *conf, const char *config_path)
{
	struct vmt_manager *m = calloc(1, sizeof(*m));
	int r;

	if (!m)
		return -ENOMEM;
	m->conf = *conf;
	*conf = (struct vmt_config){ 0 };	/* the manager owns it now */
	m->config_path = config_path;
	m->start_ns = now_monotonic_ns();
	m->genv = (struct vmt_guest_env){ .conf = &m->conf, .mem = &m->mem, .bounce = m->bounce,
					  .bounce_size = sizeof(m->bounce), .ev = &guest_events,
					  .owner = m };
	if (gethostname(m->hostname, sizeof(m->hostname) - 1) < 0)
		snprintf(m->hostname, sizeof(m->hostname), "localhost");

	r = manager_loop_new(m);
	if (r < 0)
		goto fail;
	r = mem_init(&m->mem, m->conf.memory_max, m->conf.dump_reserve);
	if (r < 0) {
		log_error_errno(r, "cannot reserve dump_reserve (%llu KiB): %m",
				(unsigned long long)(m->conf.dump_reserve >> 10));
		goto fail;
	}
	manager_store_reserve(m);
	m->dumps = (struct vmt_dumps){ .event = m->event, .conf = &m->conf, .guests = &m->guests,
				       .writer = &m->writer, .samples = &m->samples,
				       .hostname = m->hostname, .answer = on_dump_answer, .owner = m };
	dump_init(&m->dumps);
	r = writer_init(&m->writer, m->event, dump_writer_done, &m->dumps);
	if (r < 0)
		goto fail;
	m->compress_threads = manager_compress_threads(m);	/* before the sandbox */
	r = compressor_init(&m->comp, m->event, VMT_COMPRESS_JOBS, m->compress_threads,
			    VMT_RING_BATCH_MAX_BYTES);
	if (r < 0)
		goto fail;
	m->genv.comp = &m->comp;
	/* before control_new(), which clears LISTEN_FDS */
	r = recover_init(&m->recover);
	if (r < 0)
		log_error_errno(r, "cannot take the rings systemd handed back: %m");
	m->genv.recover = &m->recover;
	r = upgrade_take(&m->upgrade);	/* also before control_new() */
	if (r < 0)
		goto fail;
	manager_start_hostpriv(m);
	r = control_new(&m->control, m->event, &m->conf, &manager_ctl_ops, m);
	if (r < 0)
		goto fail;
	if (m->conf.ndiscovery) {
		r = discovery_new(&m->discovery, m->event, &m->conf, &m->guests,
				  &manager_discovery_ops, m);
		if (r < 0) {
			log_error_errno(r, "cannot watch the discovery folders: %m");
			goto fail;
		}
	}

	m->guests.v = calloc(m->conf.nguests ? m->conf.nguests : 1, sizeof(*m->guests.v));
	if (!m->guests.v) {
		r = -ENOMEM;
		goto fail;
	}
	for (uint32_t i = 0; i < m->conf.nguests; i++) {
		r = guest_new(&m->genv, &m->conf.guests[i], &m->guests.v[i]);
		if (r < 0)
			goto fail;
		m->guests.n++;
	}
	/* a successor takes the sessions over first (manager_run), these after */
	if (!manager_upgrade_later(m)) {
		manager_start_host(m);	/* a host that cannot be traced is logged, not fatal */
		r = manager_probe_new(m);	/* detectors that cannot load are logged, not fatal */
		if (r < 0)
			goto fail;
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

	/* set up: from here on only what the configuration needs, in every
	 * thread (the writer's starts after this) */
	/* a process handed over to keeps the identity it was given: the old
	 * one gave up what becoming another user takes (priv.h) */
	if (m->upgrade.handed_over && m->conf.user[0] && !priv_can_change_user()) {
		log_warning("user: %s takes effect at the next start (this process, handed over "
			    "to, cannot change user): running as uid %u", m->conf.user,
			    (unsigned)geteuid());
		m->conf.user[0] = 0;
	}
	r = priv_drop(&m->conf);
	if (r < 0)
		return 1;
	if (m->conf.sandbox && sandbox_apply() < 0)
		return 1;
	r = writer_run(&m->writer);
	if (r < 0) {
		log_error_errno(r, "cannot start the writer thread: %m");
		return 1;
	}
	r = compressor_run(&m->comp);
	if (r < 0) {
		log_error_errno(r, "cannot start the compressor thread: %m");
		return 1;
	}
	r = manager_fleet_start(m);
	if (r < 0) {
		log_error_errno(r, "cannot start the fleet: %m");
		return 1;
	}
	dump_retention_now(&m->dumps);
	/* the guests discovery finds are made first (not connected), so that
	 * an upgrade's successor takes their sessions over too; then every
	 * guest without a session taken over connects */
	discovery_find(m->discovery);
	manager_upgrade_adopt(m);
	for (uint32_t i = 0; i < m->guests.n; i++)
		guest_connect(m->guests.v[i]);
	if (manager_upgrade_later(m))
		manager_upgrade_schedule_rest(m);
	log_notice("vmtraced %s running: %u guest(s), state in %s, control socket %s", VMT_VERSION,
		   m->guests.n, m->conf.state_dir, m->conf.control_socket);
	sd_notify(0, "READY=1");
	manager_notify_status(m);
	r = sd_event_loop(m->event);
	sd_notify(0, "STOPPING=1");
	/* while the clients and the fleet can still be told */
	dump_cancel(&m->dumps);
	for (uint32_t i = 0; i < m->guests.n; i++)
		guest_stop(m->guests.v[i]);
	return r < 0 ? 1 : 0;
}

void manager_free(struct vmt_manager *m)
{
	if (!m)
		return;
	lvmeta_free(m->lvmeta);	/* before the fleet its labels go to */
	m->lvmeta = NULL;
	fleet_free(m->fleet);	/* its uploads end; the markers tell the next start */
	m->fleet = NULL;
	/* samples being written are finished, not abandoned */
	writer_stop(&m->writer);
	compressor_stop(&m->comp);
	discovery_free(m->discovery);
	control_free(m->control);
	for (unsigned i = 0; i < 2; i++)
		sd_event_source_disable_unref(m->setup_rest[i]);
	sd_event_source_disable_unref(m->keeper_src);
	sd_event_source_disable_unref(m->soon);
	probe_free(m->probe);
	for (uint32_t i = 0; i < m->guests.n; i++)
		guest_free(m->guests.v[i]);
	free(m->guests.v);
	hostpriv_free(m->hostpriv);	/* after the host source it removed the instance of */
	dump_free_all(&m->dumps);
	sindex_free(&m->samples);
	mem_free(&m->mem);
	recover_free(&m->recover);
	upgrade_in_free(&m->upgrade);
	config_free(&m->conf);
	sd_event_unref(m->event);
	free(m);
}
