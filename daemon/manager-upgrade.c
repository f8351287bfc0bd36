/* SPDX-License-Identifier: MIT */
/*
 * manager-upgrade: vmtracectl upgrade and SIGUSR2 (the old process), and
 * the sessions handed over taken at start-up (the successor). upgrade.h
 * says how the hand-over is made; this is when it may be, and in what
 * order: refused (EBUSY, with why) while a dump or a writer job is under
 * way or a guest is between two control messages, which keeps the state
 * small; the compressor stopped (its batches back in the rings), every
 * ring published, then execve. If execve fails, the daemon goes on.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "control.h"
#include "hostpriv.h"
#include "log.h"
#include "manager-int.h"
#include "persist.h"
#include "upgrade.h"

/* The installed binary: its path at start-up (after a package upgrade the
 * running inode is gone, the path names the new one). */
void manager_upgrade_init(struct vmt_manager *m, char **argv)
{
	ssize_t n = readlink("/proc/self/exe", m->exe, sizeof(m->exe) - 1);

	m->exe[n > 0 ? n : 0] = 0;
	m->argv = argv;
}

int manager_upgrade_check(struct vmt_manager *m, char *why, size_t n)
{
	if (!m->exe[0] || !m->argv) {
		snprintf(why, n, "the daemon's own path is unknown");
		return -ENOENT;
	}
	if (m->conf.sandbox) {
		snprintf(why, n, "the system call filter (sandbox: true) does not allow execve");
		return -EPERM;
	}
	/* user: dropped root and every capability after setting up: a
	 * successor could not set up again (tracefs, BPF); under the unit the
	 * ambient capabilities go through execve */
	if (m->conf.user[0] && getuid() != 0) {
		snprintf(why, n, "vmtraced dropped to user %s itself: its successor could not set up "
			 "again; restart it instead", m->conf.user);
		return -EPERM;
	}
	if (access(m->exe, X_OK) < 0) {
		int r = -errno;
		snprintf(why, n, "%s: %s", m->exe, strerror(errno));
		return r;
	}
	if (m->dumps.cur) {
		snprintf(why, n, "a dump is in progress");
		return -EBUSY;
	}
	if (m->dumps.npending) {
		snprintf(why, n, "%u dump(s) pending, the next due in %.0f s", m->dumps.npending,
			 dump_next_ns(&m->dumps) / 1e9);
		return -EBUSY;
	}
	if (m->writer.pending) {
		snprintf(why, n, "the writer has jobs");
		return -EBUSY;
	}
	for (uint32_t i = 0; i < m->guests.n; i++)
		if (!guest_can_hand_over(m->guests.v[i], why, n))
			return -EBUSY;
	return 0;
}

static void restart_compressor(struct vmt_manager *m)
{
	int r = compressor_init(&m->comp, m->event, VMT_COMPRESS_JOBS, m->compress_threads,
				VMT_RING_BATCH_MAX_BYTES);

	if (r >= 0)
		r = compressor_run(&m->comp);
	if (r < 0)
		log_error_errno(r, "upgrade: cannot restart the compressor: %m");
}

int manager_upgrade(struct vmt_manager *m)
{
	struct vmt_upgrade_out *o = malloc(sizeof(*o));
	uint64_t stopped = now_monotonic_ns();	/* nothing is read from here on */
	char why[512];
	int r;

	r = manager_upgrade_check(m, why, sizeof(why));
	if (r < 0 || !o) {
		log_error("upgrade refused: %s", o ? why : "no memory");
		free(o);
		return r < 0 ? r : -ENOMEM;
	}
	compressor_stop(&m->comp);	/* its batches back in the rings */
	upgrade_out_init(o);
	o->upgrades = m->upgrade.upgrades;
	for (uint32_t i = 0; r >= 0 && i < m->guests.n; i++)
		r = guest_hand_over(m->guests.v[i], o);
	if (r >= 0)
		r = upgrade_add_fd(o, control_fd(m->control), "control");
	/* the successor has no privilege to make a helper of its own */
	if (r >= 0 && hostpriv_fd(m->hostpriv) >= 0)
		r = upgrade_add_fd(o, hostpriv_fd(m->hostpriv), VMT_UPGRADE_HOSTPRIV);
	if (r >= 0 && m->mem.reserve.fd >= 0) {
		/* no page is in it (no dump runs, the compressor's batches are
		 * back): handed over only for the successor to drop it from the
		 * fd store, as after a crash (recover.h) */
		char name[VMT_PERSIST_FDNAME_MAX];

		pagepool_name(&m->mem.reserve, name, sizeof(name));
		r = upgrade_add_fd(o, m->mem.reserve.fd, "%s", name);
	}
	if (r < 0) {
		snprintf(why, sizeof(why), "cannot list what to hand over: %s", strerror(-r));
	} else {
		log_notice("upgrade: handing over to %s (%u guest session(s), %u fds; reading stopped "
			   "at %llu ns monotonic, %.3f ms ago)", m->exe, o->nguests, o->nfds + 1,
			   (unsigned long long)stopped, (double)(now_monotonic_ns() - stopped) / 1e6);
		r = upgrade_exec(o, m->exe, m->argv, why, sizeof(why));
	}
	log_error("upgrade failed, going on: %s", why);
	upgrade_out_free(o);
	free(o);
	restart_compressor(m);
	return r;
}

#define SOON_TRIES 50
#define SOON_EVERY_USEC (100 * 1000)

static int soon_cb(sd_event_source *s, uint64_t usec, void *userdata)
{
	struct vmt_manager *m = userdata;
	char why[512];
	int r = manager_upgrade_check(m, why, sizeof(why));

	if (r == -EBUSY && ++m->soon_tries < SOON_TRIES) {
		sd_event_source_set_time_relative(s, SOON_EVERY_USEC);
		sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
		return 0;
	}
	m->soon = sd_event_source_disable_unref(s);
	manager_upgrade(m);	/* back only if refused or failed (logged) */
	return 0;
}

void manager_upgrade_soon(struct vmt_manager *m)
{
	int r;

	m->soon_tries = 0;
	if (m->soon) {
		sd_event_source_set_time_relative(m->soon, 0);
		sd_event_source_set_enabled(m->soon, SD_EVENT_ONESHOT);
		return;
	}
	r = sd_event_add_time_relative(m->event, &m->soon, CLOCK_MONOTONIC, 0, 1000, soon_cb, m);
	if (r < 0)
		log_error_errno(r, "cannot hand over: %m");
}

static bool ends_with(const char *s, const char *tail)
{
	size_t a = strlen(s), b = strlen(tail);

	return a >= b && !strcmp(s + a - b, tail);
}

/* The successor: each guest takes its session handed over, if any. */
void manager_upgrade_adopt(struct vmt_manager *m)
{
	struct vmt_upgrade_in *in = &m->upgrade;
	uint64_t t0 = now_monotonic_ns();

	if (!in->handed_over)
		return;
	if (!in->state) {
		/* each session handed over (its control channel came) is refused */
		for (unsigned i = 0; i < in->nfds; i++)
			if (!strncmp(in->fds[i].name, VMT_UPGRADE_CHAN_PREFIX, 5) &&
			    (ends_with(in->fds[i].name, "/ctl") || ends_with(in->fds[i].name, "/ctl/r")))
				in->refused++;
		log_warning("upgrade: the state handed over is refused (%s): every guest starts "
			    "afresh", in->why);
	}
	for (uint32_t i = 0; in->state && i < m->guests.n; i++)
		guest_adopt_session(m->guests.v[i], in);
	upgrade_close_rest(in);
	recover_release_reserves(&m->recover);
	log_notice("upgrade: %llu guest session(s) taken over, %llu started afresh (process start "
		   "at %llu ns monotonic, sessions taken from %llu to %llu ns)",
		   (unsigned long long)in->adopted, (unsigned long long)in->refused,
		   (unsigned long long)m->start_ns, (unsigned long long)t0,
		   (unsigned long long)now_monotonic_ns());
}

/* ---- the successor, once reading again --------------------------------- */

bool manager_upgrade_later(const struct vmt_manager *m)
{
	/* under sandbox: true the filter comes before the loop runs */
	return m->upgrade.handed_over && !m->conf.sandbox;
}

/*
 * A QEMU that died while no detector watched (from the old process's
 * execve to the successor's detectors loading) left no record: its pid,
 * as the old process knew it, is gone. Its exit status is not ours to
 * read, so a clean shutdown in that gap dumps too: a sample too many
 * rather than a crash missed.
 */
static void recheck_qemu(struct vmt_manager *m)
{
	bool watch = m->conf.detectors[VMT_DET_PROCESS_DEATH].enabled;

	for (uint32_t i = 0; i < m->guests.n; i++) {
		struct vmt_guest *g = m->guests.v[i];
		pid_t pid = guest_take_qemu_handed(g);
		struct vmt_trigger t = { .kind = VMT_TRIGGER_BPF, .pid = (uint32_t)pid,
					 .time_ns = now_realtime_ns() };
		char *names[1] = { (char *)guest_name(g) };
		struct vmt_dump_req rq = { .names = names, .n = 1, .trigger = &t, .no_cooldown = true };
		int r;

		if (!watch || pid <= 0 || kill(pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(t.reason, sizeof(t.reason), "%s: guest process %d exited during the "
			 "hand-over (status unknown)", detector_name(VMT_DET_PROCESS_DEATH), (int)pid);
		log_guest(VMT_LOG_NOTICE, 0, guest_name(g), "detector %s", t.reason);
		r = dump_request(&m->dumps, &rq);
		if (r < 0)
			log_guest(VMT_LOG_WARNING, r, guest_name(g), "cannot start a dump: %m");
	}
}

/* What a start sets up before the guests, a successor after: the loop
 * has read what the channels held by then (or 100 ms went by). */
static void setup_rest(struct vmt_manager *m)
{
	uint64_t t0 = now_monotonic_ns();

	for (unsigned i = 0; i < 2; i++)
		m->setup_rest[i] = sd_event_source_disable_unref(m->setup_rest[i]);
	if (!m->probe && manager_probe_new(m) < 0)
		log_error("upgrade: the detectors could not be set up");
	if (!manager_find_guest(m, "host")) {
		/* the keeper holds a copy of the old fd table until it exits:
		 * the old ftrace instance stays busy (EBUSY on its removal)
		 * until then; without a pidfd to wait on, try now */
		if (m->keeper_src)
			m->host_after_keeper = true;
		else
			manager_start_host(m);
	}
	recheck_qemu(m);
	log_notice("upgrade: detectors and host source set up after the take-over (%.3f ms)",
		   (double)(now_monotonic_ns() - t0) / 1e6);
}

static int rest_idle_cb(sd_event_source *s, void *userdata)
{
	setup_rest(userdata);
	return 0;
}

static int rest_timer_cb(sd_event_source *s, uint64_t usec, void *userdata)
{
	setup_rest(userdata);
	return 0;
}

/* The keeper (upgrade.c) exits once the old address space is torn down:
 * said once it is reaped, wherever that was (bench/upgrade.c reads it). */
void manager_keeper_say(struct vmt_manager *m)
{
	uint64_t ns;
	pid_t pid = upgrade_keeper_reaped(&m->upgrade, &ns);

	if (pid > 0)
		log_notice("upgrade: the old address space is let go (keeper %d reaped at %llu ns "
			   "monotonic)", (int)pid, (unsigned long long)ns);
}

static int keeper_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct vmt_manager *m = userdata;

	upgrade_reap(&m->upgrade);
	manager_keeper_say(m);
	m->keeper_src = sd_event_source_disable_unref(s);
	if (m->host_after_keeper) {
		m->host_after_keeper = false;
		manager_start_host(m);
	}
	return 0;
}

static void watch_keeper(struct vmt_manager *m)
{
	int fd, r;

	manager_keeper_say(m);	/* reaped at the start already: it was quick */
	if (m->upgrade.keeper <= 0)
		return;
	fd = (int)syscall(SYS_pidfd_open, m->upgrade.keeper, 0);
	if (fd < 0) {
		log_debug("upgrade: no pidfd for the keeper (%m): reaped at housekeeping");
		return;
	}
	r = sd_event_add_io(m->event, &m->keeper_src, fd, EPOLLIN, keeper_cb, m);
	if (r < 0) {
		close(fd);
		return;
	}
	sd_event_source_set_io_fd_own(m->keeper_src, true);
}

/* Below the channels' priority: it waits for the reads pending; the
 * timer, at theirs, keeps a loop that is never idle from waiting long. */
void manager_upgrade_schedule_rest(struct vmt_manager *m)
{
	int r;

	watch_keeper(m);
	r = sd_event_add_defer(m->event, &m->setup_rest[0], rest_idle_cb, m);

	if (r >= 0)
		r = sd_event_source_set_priority(m->setup_rest[0], SD_EVENT_PRIORITY_NORMAL + 1);
	if (r >= 0)
		r = sd_event_add_time_relative(m->event, &m->setup_rest[1], CLOCK_MONOTONIC,
					       100 * 1000, 1000, rest_timer_cb, m);
	if (r < 0) {
		log_error_errno(r, "upgrade: cannot wait for the loop, setting up now: %m");
		setup_rest(m);
	}
}
