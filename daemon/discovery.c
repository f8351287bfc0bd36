/* SPDX-License-Identifier: MIT */
/*
 * discovery: guests that come and go by themselves. Each discovery folder
 * holds one folder per guest with its ports:
 *   vmtraced layout: DIR/<name>/agent-ctl-path{,.in,.out}, trace-path-cpuN...
 *   libvirt layout:  DIR/domain-<id>-<name>/agent-ctl-path, ...
 * inotify on the folders (and a slow periodic pass, for what inotify cannot
 * see, such as a folder created after the daemon started) schedules a
 * rescan; a rescan adds guests whose control port is there and marks the
 * others absent. An absent guest goes offline; its rings stay until
 * forget_after, when an absent discovered guest is dropped. A guest folder
 * (one with a control port) whose name is no guest name is passed over,
 * counted and logged, a few times a minute at most. So is a discovery
 * folder, guest folder or control port that cannot be entered or probed
 * (libvirt's are QEMU's user's, 0750: vmtraced, as its own user, reaches
 * them through the group the package makes it a member of): by its path
 * and errno, never skipped without a word.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "discovery.h"
#include "guest.h"
#include "log.h"
#include "util.h"

#define RESCAN_DELAY_USEC 200000ull
#define RESCAN_PERIOD_USEC (10 * 1000000ull)
#define NAME_LOG_BURST 4
#define NAME_LOG_WINDOW_NS (60 * 1000000000ull)
#define WATCH_MASK (IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE_SELF | IN_ATTRIB)

struct vmt_discovery {
	const struct vmt_config *conf;	/* the daemon's, as reloads change it */
	struct vmt_guest_list *guests;
	const struct vmt_discovery_ops *ops;
	void *owner;
	int ifd;
	sd_event_source *io;
	sd_event_source *timer;
	uint64_t rescans;
	uint64_t names_refused;
	bool no_connect;	/* discovery_find(): guests made, not connected */
	struct vmt_log_budget name_log;	/* the name log's rate limit */
	uint64_t unreadable;	/* folders and ports that could not be entered or probed */
	char unreadable_path[PATH_MAX];	/* the last of them */
	int unreadable_err;	/* and why, an errno */
	struct vmt_log_budget unread_log;	/* their log's rate limit */
};

int discovery_guest_name(enum vmt_layout layout, const char *entry, char *name, size_t n)
{
	const char *p = entry;

	if (layout == VMT_LAYOUT_LIBVIRT) {
		/* domain-<id>-<name>: the id changes with every start */
		if (strncmp(p, "domain-", 7))
			return 0;
		p += 7;
		if (*p < '0' || *p > '9')
			return 0;
		while (*p >= '0' && *p <= '9')
			p++;
		if (*p++ != '-')
			return 0;
	} else if (entry[0] == '.') {
		return 0;
	}
	if (strlen(p) >= n || !name_is_valid(p))
		return -EINVAL;
	snprintf(name, n, "%s", p);
	return 1;
}

/* NAME_LOG_BURST lines a window may be said; how many more were held back
 * (what) is said when the next window opens. */
static bool discovery_log_take(struct vmt_log_budget *b, const char *what)
{
	uint64_t now = now_monotonic_ns();

	if (now > b->until_ns) {
		if (b->used > NAME_LOG_BURST)
			log_warning("discovery: %u more %s", b->used - NAME_LOG_BURST, what);
		b->until_ns = now + NAME_LOG_WINDOW_NS;
		b->used = 0;
	}
	return ++b->used <= NAME_LOG_BURST;
}

/* A guest folder we will not record: say why (why NULL: its name), but not
 * every rescan. */
static void discovery_refuse_name(struct vmt_discovery *d, const char *root, const char *entry,
				  const char *why)
{
	d->names_refused++;
	if (!discovery_log_take(&d->name_log, "guest folders passed over for their names"))
		return;
	if (why)
		log_warning("discovery: %s/%.*s%s not recorded: %s", root, 80, entry,
			    strlen(entry) > 80 ? "..." : "", why);
	else
		log_warning("discovery: %s/%.*s%s not recorded: a guest name is 1 to %d letters, digits, "
			    "_ . - (and does not start with .)", root, 80, entry,
			    strlen(entry) > 80 ? "..." : "", VMT_NAME_MAX - 1);
}

uint64_t discovery_names_refused(const struct vmt_discovery *d)
{
	return d ? d->names_refused : 0;
}

/* A folder or port we cannot enter or probe: counted, kept for status,
 * logged with its errno a few times a minute at most. */
static void discovery_unreadable_one(struct vmt_discovery *d, const char *path, int err)
{
	d->unreadable++;
	snprintf(d->unreadable_path, sizeof(d->unreadable_path), "%s", path);
	d->unreadable_err = -err;
	if (!discovery_log_take(&d->unread_log, "folders or ports could not be entered or probed"))
		return;
	log_full(VMT_LOG_WARNING, err, NULL, "discovery: cannot look into %s: %m (errno %d)%s",
		 path, -err, err == -EACCES || err == -EPERM ?
		 ": its guests are not recorded; is vmtraced in the folder's group?" : "");
}

uint64_t discovery_unreadable(const struct vmt_discovery *d, char *path, size_t n, int *err)
{
	if (!d || !d->unreadable)
		return 0;
	snprintf(path, n, "%s", d->unreadable_path);
	*err = d->unreadable_err;
	return d->unreadable;
}

static void discovery_scan_root(struct vmt_discovery *d, const struct vmt_discovery_conf *dc)
{
	struct dirent *de;
	DIR *dir;

	inotify_add_watch(d->ifd, dc->path, WATCH_MASK | IN_ONLYDIR);
	dir = opendir(dc->path);
	if (!dir) {
		/* one that is not there (no libvirt on this host) is no fault */
		if (errno != ENOENT)
			discovery_unreadable_one(d, dc->path, -errno);
		return;
	}
	while ((de = readdir(dir))) {
		char name[VMT_NAME_MAX], path[PATH_MAX];
		enum vmt_transport t;
		struct vmt_guest *g;
		struct stat st;
		int r, r2;

		if (de->d_name[0] == '.')
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dc->path, de->d_name) >= (int)sizeof(path))
			continue;
		if (lstat(path, &st) < 0) {
			if (errno != ENOENT)	/* gone since readdir: no fault */
				discovery_unreadable_one(d, path, -errno);
			continue;
		}
		if (!S_ISDIR(st.st_mode))
			continue;
		inotify_add_watch(d->ifd, path, WATCH_MASK | IN_ONLYDIR);
		r = discovery_guest_name(dc->layout, de->d_name, name, sizeof(name));
		if (r == 0)
			continue;
		r2 = channel_probe(path, "agent-ctl-path", &t);
		if (r2 == -ENOENT)
			continue;	/* no control port (yet): no guest of ours */
		if (r2 < 0) {
			discovery_unreadable_one(d, path, r2);
			continue;
		}
		if (r < 0 || !strcmp(name, "host")) {	/* the host's own trace has that name */
			discovery_refuse_name(d, dc->path, de->d_name, NULL);
			continue;
		}
		g = guest_list_find(d->guests, name);
		if (g && !guest_discovered(g)) {
			/* a configured guest of that name wins, said and counted */
			discovery_refuse_name(d, dc->path, de->d_name,
					      "a configured guest has its name");
			continue;
		}
		if (g && strcmp(guest_conf(g)->path, path) && guest_state(g) != GUEST_OFFLINE) {
			/* two live folders, one name (libvirt keeps 20 characters of
			 * a domain's name; anyone in group vmtraced can make a folder
			 * in guests/): the one recording keeps it, the other is not
			 * mixed into its samples */
			discovery_refuse_name(d, dc->path, de->d_name,
					      "another folder of that name is being recorded");
			continue;
		}
		if (g) {
			guest_set_present(g, true);
			/* libvirt restarted it under a new id: same guest */
			guest_set_path(g, path);
			continue;
		}
		struct vmt_guest_conf gc = { .transport = dc->transport, .rec = d->conf->rec };
		snprintf(gc.name, sizeof(gc.name), "%s", name);
		snprintf(gc.path, sizeof(gc.path), "%s", path);
		g = d->ops->add(d->owner, &gc);
		if (!g)
			continue;
		guest_set_discovered(g);
		log_guest(VMT_LOG_NOTICE, 0, name, "discovered in %s", dc->path);
		if (!d->no_connect)
			guest_connect(g);
	}
	closedir(dir);
}

void discovery_rescan(struct vmt_discovery *d)
{
	struct vmt_guest_list *l;

	if (!d)
		return;
	l = d->guests;
	d->rescans++;
	for (uint32_t i = 0; i < l->n; i++)
		if (guest_discovered(l->v[i]))
			guest_set_present(l->v[i], false);
	for (uint32_t i = 0; i < d->conf->ndiscovery; i++)
		discovery_scan_root(d, &d->conf->discovery[i]);
	for (uint32_t i = 0; i < l->n; i++) {
		struct vmt_guest *g = l->v[i];
		if (guest_discovered(g) && !guest_present(g) && guest_state(g) != GUEST_OFFLINE)
			guest_vanished(g);
	}
	if (d->ops->rescanned)
		d->ops->rescanned(d->owner);
}

void discovery_find(struct vmt_discovery *d)
{
	if (!d)
		return;
	d->no_connect = true;
	discovery_rescan(d);
	d->no_connect = false;
}

int discovery_libvirt_id(const struct vmt_discovery *d, const struct vmt_guest *g)
{
	const char *path = guest_conf(g)->path;
	const char *slash = strrchr(path, '/');
	char name[VMT_NAME_MAX];
	long id;

	if (!d || !guest_discovered(g) || !slash)
		return 0;
	for (uint32_t i = 0; i < d->conf->ndiscovery; i++) {
		const struct vmt_discovery_conf *dc = &d->conf->discovery[i];
		size_t n = strlen(dc->path);

		if (dc->layout != VMT_LAYOUT_LIBVIRT || (size_t)(slash - path) != n ||
		    strncmp(path, dc->path, n))
			continue;
		/* domain-<id>-<name>, as discovery_guest_name() took it */
		if (discovery_guest_name(dc->layout, slash + 1, name, sizeof(name)) != 1)
			return 0;
		id = strtol(slash + 1 + 7, NULL, 10);
		return id > 0 && id <= INT32_MAX ? (int)id : 0;
	}
	return 0;
}

static int discovery_timer_cb(sd_event_source *s, uint64_t usec, void *userdata)
{
	struct vmt_discovery *d = userdata;

	discovery_rescan(d);
	sd_event_source_set_time_relative(s, RESCAN_PERIOD_USEC);
	sd_event_source_set_enabled(s, SD_EVENT_ONESHOT);
	return 0;
}

static int discovery_io_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct vmt_discovery *d = userdata;
	char buf[16384];

	/* the events only say "look again": drain them, rescan soon */
	while (read(fd, buf, sizeof(buf)) > 0)
		;
	sd_event_source_set_time_relative(d->timer, RESCAN_DELAY_USEC);
	sd_event_source_set_enabled(d->timer, SD_EVENT_ONESHOT);
	return 0;
}

int discovery_new(struct vmt_discovery **out, sd_event *e, const struct vmt_config *conf,
		  struct vmt_guest_list *guests, const struct vmt_discovery_ops *ops, void *owner)
{
	struct vmt_discovery *d = calloc(1, sizeof(*d));
	int r;

	if (!d)
		return -ENOMEM;
	d->conf = conf;
	d->guests = guests;
	d->ops = ops;
	d->owner = owner;
	d->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (d->ifd < 0) {
		r = -errno;
		free(d);
		return r;
	}
	r = sd_event_add_io(e, &d->io, d->ifd, EPOLLIN, discovery_io_cb, d);
	if (r >= 0)
		r = sd_event_add_time_relative(e, &d->timer, CLOCK_MONOTONIC, RESCAN_PERIOD_USEC,
					       100000, discovery_timer_cb, d);
	if (r < 0) {
		discovery_free(d);
		return r;
	}
	*out = d;
	return 0;
}

void discovery_free(struct vmt_discovery *d)
{
	if (!d)
		return;
	sd_event_source_disable_unref(d->io);
	sd_event_source_disable_unref(d->timer);
	close(d->ifd);
	free(d);
}
