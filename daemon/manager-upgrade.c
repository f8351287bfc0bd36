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
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "control.h"
#include "log.h"
#include "manager-int.h"
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
	if (m->dumps.cur || m->dumps.next) {
		snprintf(why, n, "a dump is in progress");
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
	int r = compressor_init(&m->comp, m->event, VMT_COMPRESS_JOBS, VMT_RING_BATCH_MAX_BYTES,
				manager_batch_released, m);

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
	log_notice("upgrade: %llu guest session(s) taken over, %llu started afresh (process start "
		   "at %llu ns monotonic, sessions taken from %llu to %llu ns)",
		   (unsigned long long)in->adopted, (unsigned long long)in->refused,
		   (unsigned long long)m->start_ns, (unsigned long long)t0,
		   (unsigned long long)now_monotonic_ns());
}
