/* SPDX-License-Identifier: MIT */
/*
 * The host source, set up and taken down: its helper (hostpriv.h) makes
 * its ftrace instance (host: instance, "vmtraced") with the configured events and filters, and
 * hands back its descriptors and metadata (built once, like the agent's:
 * it becomes the "host" guest's aux); the guest that stands for it is made
 * here; hostsrc-read.c reads the pages.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "hostpriv.h"
#include "hostsrc-int.h"
#include "log.h"
#include "meta.h"
#include "page.h"

#define AGENT_NAME "vmtraced host source"
#define META_MAX (256u << 20)	/* kallsyms alone is several MiB */

/* The host's task tables now, for the dump's sample, as an agent sends them;
 * the last ones stay if they cannot be read. */
void hostsrc_tasks(struct vmt_hostsrc *h)
{
	struct vmt_buf t = { 0 };
	const char *why;

	if (hostpriv_tasks(h->hp, &t) < 0 || meta_tasks_validate(t.data, t.len, &why) < 0) {
		buf_free(&t);
		return;
	}
	guest_set_tasks(h->g, &t);
}

/* ---- the "host" guest -------------------------------------------------------- */

static void read_line(const char *path, char *out, size_t n)
{
	_cleanup_free_ char *s = NULL;
	size_t len;

	out[0] = 0;
	if (read_file(path, 4096, &s, &len) < 0)
		return;
	s[strcspn(s, "\n")] = 0;
	snprintf(out, n, "%s", s);
}

/* Rings, hello and aux of the guest that stands for the host. */
static int hostsrc_guest(struct vmt_hostsrc *h, struct vmt_buf *bundle,
			 const struct vmt_page_layout *layout)
{
	const struct vmt_config *conf = h->env->conf;
	struct vmt_guest_conf gc = { .line = 0 };
	struct vmt_guest *g;
	struct vmt_hello hello = { 0 }, *hl = &hello;
	struct vmt_aux aux = { 0 }, *a = &aux;
	struct utsname u;
	uint32_t version;
	bool exists;
	int r;

	snprintf(gc.name, sizeof(gc.name), HOST_GUEST);
	gc.rec = conf->rec;
	gc.rec.ring_size = conf->host.ring_size;
	gc.rec.meta_max = META_MAX;
	snprintf(gc.rec.clock, sizeof(gc.rec.clock), "%s", conf->host.clock);
	snprintf(gc.rec.events, sizeof(gc.rec.events), "%s", conf->host.events);
	r = guest_new(h->env, &gc, &g);
	if (r < 0)
		return log_guest(VMT_LOG_ERR, r, HOST_GUEST, "%m");
	h->g = g;
	r = guest_setup_rings(g, h->ncpus, h->page_size);
	if (r < 0)
		return r == -ENOSPC ? r : log_guest(VMT_LOG_ERR, r, HOST_GUEST, "cannot allocate rings: %m");

	hl->version = VMT_PROTO_VERSION;
	hl->ncpus = h->ncpus;
	hl->page_size = h->page_size;
	hl->mono_ns = now_monotonic_ns();
	if (uname(&u) == 0)
		snprintf(hl->release, sizeof(hl->release), "%s", u.release);
	snprintf(hl->clock, sizeof(hl->clock), "%s", h->in.clock);
	read_line("/proc/sys/kernel/random/boot_id", hl->boot_id, sizeof(hl->boot_id));
	snprintf(hl->agent, sizeof(hl->agent), AGENT_NAME);

	snprintf(a->guest, sizeof(a->guest), HOST_GUEST);
	a->ncpus = hl->ncpus;
	a->page_size = hl->page_size;
	snprintf(a->release, sizeof(a->release), "%.*s", (int)sizeof(a->release) - 1, hl->release);
	snprintf(a->clock, sizeof(a->clock), "%.*s", (int)sizeof(a->clock) - 1, hl->clock);
	snprintf(a->boot_id, sizeof(a->boot_id), "%.*s", (int)sizeof(a->boot_id) - 1, hl->boot_id);
	snprintf(a->agent, sizeof(a->agent), "%.*s", (int)sizeof(a->agent) - 1, hl->agent);
	a->meta = bundle->data;
	a->meta_len = bundle->len;
	*bundle = (struct vmt_buf){ 0 };
	a->id = aux_compute_id(a);
	a->created_ns = now_realtime_ns();
	/* the bundle stays: the aux file is written ahead of the first sample */
	version = guest_start_local(g, hl, a, layout, &exists);
	log_guest(VMT_LOG_INFO, 0, HOST_GUEST, "aux version %u (%s)", version,
		  exists ? "already on disk" : "new");
	return 0;
}

/* The header page says how big a sub-buffer is: data offset plus data size. */
static int hostsrc_layout(struct vmt_hostsrc *h, const struct vmt_buf *bundle,
			  struct vmt_page_layout *l)
{
	struct vmt_meta_entry e;
	char text[2048];
	const char *f;
	unsigned off, size;

	if (meta_find(bundle->data, bundle->len, "events/header_page", &e) < 0 ||
	    e.data_len >= sizeof(text))
		return -EBADMSG;
	memcpy(text, e.data, e.data_len);
	text[e.data_len] = 0;
	f = strstr(text, " data;");
	h->page_size = (uint32_t)getpagesize();
	if (f && sscanf(f, " data;\toffset:%u;\tsize:%u;", &off, &size) == 2 && off + size >= 64 &&
	    off + size <= (1u << 20))
		h->page_size = off + size;
	if (page_layout_parse(l, text, e.data_len, h->page_size) < 0)
		return log_guest(VMT_LOG_ERR, -EBADMSG, HOST_GUEST,
				 "events/header_page does not describe a page we can read");
	return 0;
}

static void src_start(void *h)
{
	(void)h;	/* reading since hostsrc_new */
}

static bool src_flush(void *h, uint64_t id)
{
	(void)id;
	hostsrc_flush(h);
	return false;	/* the pages are in the rings now */
}

static void src_resume(void *h)
{
	hostsrc_resume(h);
}

static void src_describe(const void *h, struct vmt_source_desc *d)
{
	(void)h;
	/* no QEMU; its pages in the host's clock; nothing of it outlives the
	 * daemon (it starts afresh after an upgrade) */
	*d = (struct vmt_source_desc){ .host_clock = true };
}

static void src_free(void *h)
{
	hostsrc_free(h);
}

/* What the "host" guest asks of its source instead of an agent. */
static const struct vmt_source_ops hostsrc_ops = {
	.start = src_start,
	.flush = src_flush,
	.describe = src_describe,
	.resume = src_resume,
	.free = src_free,
};

int hostsrc_new(const struct vmt_guest_env *env, struct vmt_hostpriv *hp, struct vmt_guest **out)
{
	const struct vmt_config *conf = env->conf;
	struct vmt_hostsrc *h;
	struct vmt_page_layout layout;
	int r;

	*out = NULL;
	if (!conf->host.enabled)
		return 0;
	h = calloc(1, sizeof(*h));
	if (!h)
		return log_guest(VMT_LOG_ERR, -ENOMEM, HOST_GUEST, "%m");
	h->env = env;
	h->hp = hp;
	/* the helper logs what it could not do */
	r = hostpriv_setup(hp, &conf->host, &h->in);
	if (r < 0) {
		free(h);
		return r;
	}
	h->set_up = true;
	h->ncpus = h->in.ncpus;
	r = hostsrc_layout(h, &h->in.meta, &layout);
	if (r >= 0)
		r = hostsrc_open(h);
	if (r >= 0)
		r = hostsrc_guest(h, &h->in.meta, &layout);
	if (r >= 0)
		r = hostsrc_watch(h);
	if (r >= 0)
		r = hostpriv_trace_on(hp);
	if (r < 0)
		goto fail;
	guest_set_source(h->g, &hostsrc_ops, h);
	*out = h->g;
	log_guest(VMT_LOG_INFO, 0, HOST_GUEST, "recording %s in ftrace instance %s (%u CPUs, clock "
		  "%s%s)", conf->host.events, h->in.dir, h->ncpus, h->in.clock,
		  conf->host.qemu_only ? ", sched events of QEMU threads only" : "");
	return 0;
fail:
	if (h->g) {
		guest_free(h->g);
		h->g = NULL;
	}
	hostsrc_free(h);
	return r;
}

bool hostsrc_is(const struct vmt_guest *g)
{
	return g && guest_source(g, &hostsrc_ops);
}

void hostsrc_mark(struct vmt_guest *g, const char *text)
{
	struct vmt_hostsrc *h = g ? guest_source(g, &hostsrc_ops) : NULL;

	if (!h || h->in.marker_fd < 0)
		return;
	if (write(h->in.marker_fd, text, strlen(text)) < 0)
		log_debug("host trace_marker: %m");
}

void hostsrc_free(struct vmt_hostsrc *h)
{
	if (!h)
		return;
	hostsrc_close(h);
	/* an open trace_pipe_raw would keep the instance busy: all closed first */
	hostpriv_inst_close(&h->in);
	if (h->set_up)
		hostpriv_destroy(h->hp);
	free(h);
}
