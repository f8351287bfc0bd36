/* SPDX-License-Identifier: MIT */
/*
 * libcap rather than capset(2) by hand: it knows the kernel's capability
 * count and the bounding-set calls, and the Debian package is small.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <string.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "priv.h"
#include "util.h"

#define BIT(c) (1ull << (c))

uint64_t priv_needed(const struct vmt_config *conf)
{
	/*
	 * Channel folders belong to QEMU's user (libvirt's to libvirt-qemu,
	 * mode 0750 or tighter), and so may discovery folders: root, which
	 * has no group of theirs, opens them only with DAC_OVERRIDE
	 * (DAC_READ_SEARCH to look in). It keeps both: a process of uid 0
	 * owns most of the system's files anyway, and gains little containment
	 * from losing them; user: (or the unit's User=) is what contains it.
	 */
	uint64_t keep = BIT(CAP_DAC_OVERRIDE) | BIT(CAP_DAC_READ_SEARCH);

	/*
	 * As its own user (user:, or started as one by the service manager),
	 * vmtraced reaches the channels through its groups (QEMU's, libvirt's:
	 * the package makes it a member) and owns its state folder. tracefs and
	 * kallsyms, which the host source needs, are its helper's (hostpriv.h),
	 * which keeps what they take: the daemon keeps none of it.
	 */
	if (conf->user[0] || geteuid() != 0)
		keep = 0;

	/* a reload that changes the detectors loads their programs again;
	 * the maps and ring buffer they use meanwhile need nothing */
	for (unsigned i = 0; i < VMT_DET_COUNT; i++)
		if (conf->detectors[i].enabled)
			keep |= BIT(CAP_BPF) | BIT(CAP_PERFMON);
	return keep;
}

/*
 * The state folder and what is in it (guest folders, their samples, aux
 * files and temporaries: two levels, as the writer makes them) become the
 * user's, so that it can write and prune them without CAP_DAC_OVERRIDE.
 * Nothing is followed: the folders are opened O_NOFOLLOW, the files changed
 * with AT_SYMLINK_NOFOLLOW, and only folders and regular files are touched.
 * A file is opened O_PATH|O_NOFOLLOW and changed through that descriptor
 * only if it is a regular file with one link, owned by root or the user
 * already: a hard link the user made to a file of root's (say /etc/shadow)
 * in a folder of its own is left alone, and said.
 */
static void own_file(int dfd, const char *state_dir, const char *guest, const char *name,
		     uid_t uid, gid_t gid)
{
	_cleanup_close_ int fd = openat(dfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;

	if (fd < 0 || fstat(fd, &st) < 0)
		return;
	if (!S_ISREG(st.st_mode) || st.st_nlink != 1 || (st.st_uid != 0 && st.st_uid != uid)) {
		log_warning("%s/%s/%s is not given to the user: not a file of the state folder's "
			    "own (links %lu, owner %u)", state_dir, guest, name,
			    (unsigned long)st.st_nlink, (unsigned)st.st_uid);
		return;
	}
	if (fchownat(fd, "", uid, gid, AT_EMPTY_PATH) < 0)
		log_warning("cannot give %s/%s/%s to its user: %m", state_dir, guest, name);
}

static int own_state(const char *state_dir, uid_t uid, gid_t gid)
{
	_cleanup_close_ int top = -1;
	DIR *d;
	struct dirent *de;

	if (mkdir(state_dir, 0750) < 0 && errno != EEXIST)
		return log_error_errno(-errno, "cannot make %s: %m", state_dir);
	top = open(state_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (top < 0 || fchown(top, uid, gid) < 0)
		return log_error_errno(-errno, "cannot give %s to its user: %m", state_dir);
	d = fdopendir(dup(top));
	if (!d)
		return log_error_errno(-errno, "cannot read %s: %m", state_dir);
	while ((de = readdir(d))) {
		int gfd;
		DIR *gd;
		struct dirent *fe;

		if (de->d_name[0] == '.' || (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN))
			continue;
		gfd = openat(top, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (gfd < 0)
			continue;
		if (fchown(gfd, uid, gid) < 0 || !(gd = fdopendir(gfd))) {
			log_warning("cannot give %s/%s to its user: %m", state_dir, de->d_name);
			close(gfd);
			continue;
		}
		while ((fe = readdir(gd)))
			if (strcmp(fe->d_name, ".") && strcmp(fe->d_name, ".."))
				own_file(dirfd(gd), state_dir, de->d_name, fe->d_name, uid, gid);
		closedir(gd);
	}
	closedir(d);
	return 0;
}

/* Become pw (its groups from the group database), keeping the permitted
 * capabilities across the change; the caller then sets them. */
static int become(const struct passwd *pw)
{
	if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0 ||
	    initgroups(pw->pw_name, pw->pw_gid) < 0 ||
	    setresgid(pw->pw_gid, pw->pw_gid, pw->pw_gid) < 0 ||
	    setresuid(pw->pw_uid, pw->pw_uid, pw->pw_uid) < 0)
		return log_error_errno(-errno, "cannot become user %s: %m", pw->pw_name);
	prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);
	return 0;
}

/* The bounding set first: dropping from it needs CAP_SETPCAP, which goes
 * with the rest after. Started as a user with capabilities from the
 * service manager (AmbientCapabilities=), vmtraced has no CAP_SETPCAP: the
 * manager's CapabilityBoundingSet= is the bound. */
static int drop_bound(cap_t now, uint64_t keep)
{
	cap_value_t last = (cap_value_t)cap_max_bits() - 1;
	cap_flag_value_t have;
	bool bound = cap_get_flag(now, CAP_SETPCAP, CAP_EFFECTIVE, &have) == 0 && have == CAP_SET;

	for (cap_value_t c = 0; bound && c <= last; c++) {
		if (keep & BIT(c) || CAP_IS_SUPPORTED(c) == 0)
			continue;
		if (cap_drop_bound(c) < 0 && errno != EINVAL)
			return log_error_errno(-errno, "cannot drop capability %s from the bounding "
					       "set: %m", cap_to_name(c));
	}
	return 0;
}

/* Permitted and effective: keep, of what now permits; no ambient, and none
 * to regain through execve (no_new_privs). */
static int set_kept(cap_t now, uint64_t keep, cap_t want)
{
	cap_value_t last = (cap_value_t)cap_max_bits() - 1;
	cap_flag_value_t have;

	for (cap_value_t c = 0; c <= last; c++) {
		if (!(keep & BIT(c)) ||
		    cap_get_flag(now, c, CAP_PERMITTED, &have) < 0 || have != CAP_SET)
			continue;
		cap_set_flag(want, CAP_PERMITTED, 1, &c, CAP_SET);
		cap_set_flag(want, CAP_EFFECTIVE, 1, &c, CAP_SET);
	}
	if (cap_set_proc(want) < 0)
		return log_error_errno(-errno, "cannot drop capabilities: %m");
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return log_error_errno(-errno, "cannot clear the ambient capabilities: %m");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return log_error_errno(-errno, "cannot set no_new_privs: %m");
	return 0;
}

int priv_drop(const struct vmt_config *conf)
{
	uint64_t keep = priv_needed(conf);
	struct passwd *pw = NULL;
	cap_value_t last = (cap_value_t)cap_max_bits() - 1;
	cap_t now = cap_get_proc(), want = cap_init();
	cap_flag_value_t have;
	bool any = false;
	int r = 0;

	if (!now || !want) {
		r = -ENOMEM;
		goto out;
	}
	for (cap_value_t c = 0; c <= last; c++)
		if (cap_get_flag(now, c, CAP_PERMITTED, &have) == 0 && have == CAP_SET)
			any = true;
	if (conf->user[0]) {
		if (!any || geteuid() != 0) {
			r = -EPERM;
			log_error("user: %s needs vmtraced to start as root", conf->user);
			goto out;
		}
		/* at start-up, as the manual says: NSS may block */
		errno = 0;
		pw = getpwnam(conf->user);
		if (!pw) {
			r = errno ? -errno : -ENOENT;
			log_error_errno(r, "user: %s: no such user%s", conf->user, errno ? ": %m" : "");
			goto out;
		}
		if (pw->pw_uid == 0) {
			r = -EINVAL;
			log_error("user: %s is root: name a user of its own", conf->user);
			goto out;
		}
		r = own_state(conf->state_dir, pw->pw_uid, pw->pw_gid);
		if (r < 0)
			goto out;
	}
	if (!any)
		goto out;	/* nothing to give up */
	r = drop_bound(now, keep);
	/* CAP_SETUID and CAP_SETGID are still in the effective set here */
	if (r >= 0 && pw)
		r = become(pw);
	if (r >= 0)
		r = set_kept(now, keep, want);
	if (r < 0)
		goto out;
	{
		char *text = keep ? cap_to_text(want, NULL) : NULL;
		const char *say = keep ? (text ? text : "(?)") : "no capability";
		if (pw)
			log_info("privilege: running as %s (uid %u) with %s from now on", pw->pw_name,
				 (unsigned)pw->pw_uid, say);
		else
			log_info("privilege: running with %s from now on", say);
		if (text)
			cap_free(text);
	}
out:
	cap_free(now);
	cap_free(want);
	return r;
}

bool priv_can_change_user(void)
{
	static const cap_value_t need[] = { CAP_SETUID, CAP_SETGID, CAP_CHOWN };
	cap_t now = cap_get_proc();
	bool ok = now != NULL;

	for (size_t i = 0; ok && i < ARRAY_SIZE(need); i++) {
		cap_flag_value_t have;

		ok = cap_get_flag(now, need[i], CAP_PERMITTED, &have) == 0 && have == CAP_SET;
	}
	cap_free(now);
	return ok;
}

int priv_helper(void)
{
	/* tracefs (root's, 0700 at the top, 0640 files) and kallsyms' addresses */
	uint64_t keep = BIT(CAP_DAC_OVERRIDE) | BIT(CAP_DAC_READ_SEARCH) | BIT(CAP_SYSLOG);
	cap_t now = cap_get_proc(), want = cap_init();
	int r = now && want ? 0 : -ENOMEM;

	prctl(PR_SET_NAME, "vmtraced-priv", 0, 0, 0);
	if (r >= 0)
		r = drop_bound(now, keep);
	if (r >= 0)
		r = set_kept(now, keep, want);
	/* neither ptrace nor /proc/PID/mem from the daemon's user, nor a core */
	if (r >= 0 && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		r = log_error_errno(-errno, "cannot make the helper undumpable: %m");
	cap_free(now);
	cap_free(want);
	return r;
}
