/* SPDX-License-Identifier: MIT */
/*
 * probe: see probe.h. One skeleton, one program (or pair) per detector;
 * autoload is switched off for what is disabled or cannot load, so the
 * maps stay shared and one ring buffer serves all.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "guest.h"
#include "log.h"
#include "probe.h"
#include "util.h"

#define RESYNC_USEC (2 * 1000000ull)	/* new vCPU threads, pidfiles that appear */

#ifdef VMT_HAVE_BPF

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "../bpf/detect.h"
#include "detect.skel.h"
#include "probe-int.h"

struct vmt_probe {
	struct vmt_probe_env env;
	struct detect_bpf *skel;
	struct ring_buffer *rb;
	sd_event_source *io, *timer, *defer;
	struct bpf_link *links[8];
	unsigned nlinks;
	bool loaded[VMT_DET_COUNT];
	char reason[VMT_DET_COUNT][160];
	uint64_t fired[VMT_DET_COUNT], mgr_suppressed[VMT_DET_COUNT], filtered[VMT_DET_COUNT];
	struct vmt_probe_maps maps;	/* whom they watch (probe-maps.c) */
	uint32_t kvm_reason_off;	/* in kvm_exit's record (its tracefs format) */
};

/* libbpf's messages, kept so a failed load can say why. */
static char libbpf_last[256];

static int libbpf_print_cb(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char buf[512];
	size_t n;

	if (level == LIBBPF_DEBUG)
		return 0;
	vsnprintf(buf, sizeof(buf), fmt, ap);
	n = strlen(buf);
	while (n && buf[n - 1] == '\n')
		buf[--n] = 0;
	snprintf(libbpf_last, sizeof(libbpf_last), "%.255s", buf);
	log_debug("libbpf: %s", buf);
	return 0;
}

static struct bpf_program *det_progs(struct detect_bpf *s, unsigned det, unsigned i)
{
	struct bpf_program *t[VMT_DET_COUNT][2] = {
		[VMT_DET_PROCESS_DEATH] = { s->progs.vmt_process_exit, NULL },
		[VMT_DET_VCPU_STARVATION] = { s->progs.vmt_wakeup, s->progs.vmt_switch },
		[VMT_DET_KVM_EXIT] = { s->progs.vmt_kvm_exit, s->progs.vmt_kvm_entry },
		[VMT_DET_OOM] = { s->progs.vmt_oom, NULL },
	};

	return i < 2 ? t[det][i] : NULL;
}

static const char *why(int err, unsigned det)
{
	switch (-err) {
	case EPERM:
	case EACCES:
		return "not permitted (needs CAP_BPF and CAP_PERFMON, or root)";
	case ENOENT:
	case ESRCH:
	case ENOTSUP:
		if (det == VMT_DET_KVM_EXIT)
			return "kvm tracepoints not found (kvm module not loaded?)";
		return "tracepoint or kernel type not found";
	default:
		return NULL;
	}
}

static void set_reason(struct vmt_probe *p, unsigned det, int err)
{
	const char *w = why(err, det);

	if (w)
		snprintf(p->reason[det], sizeof(p->reason[det]), "%s", w);
	else
		snprintf(p->reason[det], sizeof(p->reason[det]), "%.60s%s%.90s", strerror(-err),
			 libbpf_last[0] ? ": " : "", libbpf_last);
}

/* kernel.perf_event_paranoid, or INT_MIN */
static int perf_paranoid(void)
{
	FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "re");
	int v = INT_MIN;

	if (f) {
		if (fscanf(f, "%d", &v) != 1)
			v = INT_MIN;
		fclose(f);
	}
	return v;
}

/* An attach refused: a classic tracepoint's is a perf_event_open(2), which
 * Debian's kernels (kernel.perf_event_paranoid=3, their default) allow
 * only with CAP_SYS_ADMIN, not with the CAP_PERFMON the service has. */
static void attach_reason(struct vmt_probe *p, unsigned det, struct bpf_program *prog, int err)
{
	int level;

	if ((err == -EACCES || err == -EPERM) &&
	    bpf_program__type(prog) == BPF_PROG_TYPE_TRACEPOINT && (level = perf_paranoid()) >= 3) {
		snprintf(p->reason[det], sizeof(p->reason[det]),
			 "perf_event_open(2) refused: kernel.perf_event_paranoid=%d lets only CAP_SYS_ADMIN open tracepoints (2 lets CAP_PERFMON)",
			 level);
		return;
	}
	set_reason(p, det, err);
}

/* The offset of exit_reason in kvm_exit's record, from its format file
 * ("field:unsigned int exit_reason;\toffset:8;\tsize:4;..."): 0 or -errno
 * (-ENOENT: no kvm tracepoints; -EPROTO: no 4-byte exit_reason in it). */
static int kvm_exit_reason_off(uint32_t *off)
{
	static const char *const paths[] = {
		"/sys/kernel/tracing/events/kvm/kvm_exit/format",
		"/sys/kernel/debug/tracing/events/kvm/kvm_exit/format",
	};
	char line[256];
	int r = -ENOENT;

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]) && r == -ENOENT; i++) {
		FILE *f = fopen(paths[i], "re");
		unsigned o, sz;

		if (!f) {
			if (errno != ENOENT)
				r = -errno;
			continue;
		}
		r = -EPROTO;
		while (fgets(line, sizeof(line), f))
			if (strstr(line, " exit_reason;") &&
			    sscanf(strstr(line, "offset:") ?: "", "offset:%u;\tsize:%u;", &o, &sz) == 2 &&
			    sz == sizeof(uint32_t) && o <= 4096 - sz) {
				*off = o;
				r = 0;
				break;
			}
		fclose(f);
	}
	return r;
}

/* Open a skeleton with only want[] autoloaded and the settings of conf. */
static int skel_open_load(struct vmt_probe *p, const bool *want, struct detect_bpf **out)
{
	const struct vmt_detector_conf *dc = p->env.conf->detectors;
	struct detect_bpf *s;
	int r;

	s = detect_bpf__open();
	if (!s)
		return -errno ?: -ENOMEM;
	for (unsigned d = 0; d < VMT_DET_COUNT; d++)
		for (unsigned i = 0; i < 2; i++)
			if (det_progs(s, d, i))
				bpf_program__set_autoload(det_progs(s, d, i), want[d]);
	s->rodata->starve_threshold_ns = dc[VMT_DET_VCPU_STARVATION].threshold_ms * 1000000ull;
	s->rodata->kvm_threshold_ns = dc[VMT_DET_KVM_EXIT].threshold_ms * 1000000ull;
	for (unsigned d = 0; d < VMT_DET_COUNT; d++)
		s->rodata->min_interval_ns[d] = dc[d].min_interval_ms * 1000000ull;
	s->rodata->any_oom = dc[VMT_DET_OOM].any_process;
	s->rodata->kvm_exit_reason_off = p->kvm_reason_off;
	libbpf_last[0] = 0;
	r = detect_bpf__load(s);
	if (r < 0) {
		detect_bpf__destroy(s);
		return r;
	}
	*out = s;
	return 0;
}

static int probe_load(struct vmt_probe *p)
{
	bool want[VMT_DET_COUNT] = { 0 }, any = false;
	int r;

	for (unsigned d = 0; d < VMT_DET_COUNT; d++) {
		want[d] = p->env.conf->detectors[d].enabled;
		any |= want[d];
	}
	if (!any)
		return 0;
	if (access("/sys/kernel/btf/vmlinux", R_OK) < 0) {
		for (unsigned d = 0; d < VMT_DET_COUNT; d++)
			snprintf(p->reason[d], sizeof(p->reason[d]),
				 "the kernel has no BTF (/sys/kernel/btf/vmlinux)");
		return 0;
	}
	if (want[VMT_DET_KVM_EXIT]) {
		r = kvm_exit_reason_off(&p->kvm_reason_off);
		if (r < 0) {
			want[VMT_DET_KVM_EXIT] = false;
			char *w = p->reason[VMT_DET_KVM_EXIT];
			size_t n = sizeof(p->reason[VMT_DET_KVM_EXIT]);

			if (r == -ENOENT)
				snprintf(w, n, "kvm tracepoints not found (kvm module not loaded?)");
			else if (r == -EPROTO)
				snprintf(w, n, "kvm_exit's tracefs format has no 4-byte exit_reason");
			else if (r == -EACCES || r == -EPERM)
				snprintf(w, n, "not permitted to read kvm_exit's format in tracefs (needs CAP_DAC_OVERRIDE, or root)");
			else
				snprintf(w, n, "cannot read kvm_exit's format in tracefs: %s", strerror(-r));
		}
	}
	r = skel_open_load(p, want, &p->skel);
	if (r < 0) {
		/* find out which detectors cannot load, alone */
		for (unsigned d = 0; d < VMT_DET_COUNT; d++) {
			bool one[VMT_DET_COUNT] = { 0 };
			struct detect_bpf *s = NULL;

			if (!want[d])
				continue;
			one[d] = true;
			r = skel_open_load(p, one, &s);
			if (r < 0) {
				want[d] = false;
				set_reason(p, d, r);
			}
			detect_bpf__destroy(s);
		}
		any = false;
		for (unsigned d = 0; d < VMT_DET_COUNT; d++)
			any |= want[d];
		if (!any)
			return 0;
		r = skel_open_load(p, want, &p->skel);
		if (r < 0) {
			for (unsigned d = 0; d < VMT_DET_COUNT; d++)
				if (want[d])
					set_reason(p, d, r);
			return 0;
		}
	}
	for (unsigned d = 0; d < VMT_DET_COUNT; d++) {
		unsigned first = p->nlinks;

		if (!want[d])
			continue;
		for (unsigned i = 0; i < 2; i++) {
			struct bpf_program *prog = det_progs(p->skel, d, i);
			struct bpf_link *l;

			if (!prog)
				continue;
			libbpf_last[0] = 0;
			l = bpf_program__attach(prog);
			if (!l) {
				attach_reason(p, d, prog, -errno);
				break;
			}
			p->links[p->nlinks++] = l;
		}
		if (p->reason[d][0]) {
			while (p->nlinks > first)
				bpf_link__destroy(p->links[--p->nlinks]);
			continue;
		}
		p->loaded[d] = true;
	}
	return 0;
}

void probe_sync_guests_now(struct vmt_probe *p)
{
	if (p && p->skel)
		probe_maps_sync(&p->maps, p->env.guests);
}

/* ---- records -> triggers ------------------------------------------------ */

static void fmt_ms(char *buf, size_t n, uint64_t ns)
{
	if (ns >= 10000000ull || ns % 1000000ull == 0)
		snprintf(buf, n, "%" PRIu64 " ms", (uint64_t)(ns / 1000000ull));
	else
		snprintf(buf, n, "%.1f ms", (double)ns / 1e6);
}

/* A QEMU's exit with status 0: an incident with on_clean_exit, or when its
 * guest's agent (one that says BYE) had not said it: the guest did not
 * shut down (a panic with panic=N under -no-reboot, libvirt's on_crash
 * destroy, virsh destroy). *unclean says which. */
static bool death_counts(struct vmt_probe *p, const struct vmt_detect_event *e, const char *guest,
			 bool *unclean)
{
	*unclean = false;
	if (e->detector != VMT_DET_PROCESS_DEATH || e->value || e->extra)
		return true;
	if (guest && p->env.exit_unclean && p->env.exit_unclean(p->env.owner, guest)) {
		*unclean = true;
		return true;
	}
	return p->env.conf->detectors[VMT_DET_PROCESS_DEATH].on_clean_exit;
}

static void event_reason(const struct vmt_detect_event *e, char *out, size_t n)
{
	char v[32], t[32];

	fmt_ms(v, sizeof(v), e->value);
	fmt_ms(t, sizeof(t), e->threshold);
	switch (e->detector) {
	case VMT_DET_PROCESS_DEATH: {
		uint32_t sig = e->extra & 0x7f;
		const char *abbrev = sig ? sigabbrev_np((int)sig) : NULL;

		if (sig && abbrev)
			snprintf(out, n, "guest process %" PRIu32 " died (SIG%s%s)", e->pid, abbrev,
				 e->value & 0x80 ? ", core dumped" : "");
		else if (sig)
			snprintf(out, n, "guest process %" PRIu32 " died (signal %" PRIu32 ")", e->pid,
				 sig);
		else
			snprintf(out, n, "guest process %" PRIu32 " exited (status %" PRIu64 ")",
				 e->pid, (uint64_t)((e->value >> 8) & 0xff));
		break;
	}
	case VMT_DET_VCPU_STARVATION:
		if (e->vcpu != VMT_DETECT_NO_VCPU)
			snprintf(out, n, "vCPU %" PRIu32 " (tid %" PRIu32 ") runnable %s off-CPU (threshold %s)",
				 e->vcpu, e->tid, v, t);
		else
			snprintf(out, n, "QEMU thread %" PRIu32 " runnable %s off-CPU (threshold %s)",
				 e->tid, v, t);
		break;
	case VMT_DET_KVM_EXIT:
		snprintf(out, n, "KVM exit reason %" PRIu32 " lasted %s on vCPU %d (tid %" PRIu32 ", threshold %s)",
			 e->extra, v, e->vcpu == VMT_DETECT_NO_VCPU ? -1 : (int)e->vcpu, e->tid, t);
		break;
	case VMT_DET_OOM:
		snprintf(out, n, "OOM killer picked pid %" PRIu32 "%s", e->pid,
			 e->guest == VMT_DETECT_NO_GUEST ? " (not a guest's)" : "");
		break;
	default:
		snprintf(out, n, "detector %" PRIu32, e->detector);
	}
}

static int rb_event(void *ctx, void *data, size_t len)
{
	struct vmt_probe *p = ctx;
	const struct vmt_detect_event *e = data;
	struct vmt_trigger t = { .kind = VMT_TRIGGER_BPF };
	const char *guest = NULL;
	uint64_t mono = now_monotonic_ns();
	bool unclean;
	int r;

	if (len < sizeof(*e) || e->detector >= VMT_DET_COUNT)
		return 0;
	t.pid = e->pid;
	t.value = e->value;
	t.threshold = e->threshold;
	t.time_ns = now_realtime_ns() - (mono > e->time_ns ? mono - e->time_ns : 0);
	/* the sample names its detector: "vcpu_starvation: vCPU 1 (tid ...) ..." */
	snprintf(t.reason, sizeof(t.reason), "%s: ", detector_name(e->detector));
	event_reason(e, t.reason + strlen(t.reason), sizeof(t.reason) - strlen(t.reason));
	if (e->guest != VMT_DETECT_NO_GUEST) {
		guest = probe_maps_guest(&p->maps, e->guest);
		if (!guest) {
			log_debug("detector %s: its guest is gone", t.reason);
			return 0;
		}
	}
	if (!death_counts(p, e, guest, &unclean)) {
		p->filtered[e->detector]++;
		log_debug("detector %s: a clean exit, no incident", t.reason);
		return 0;
	}
	if (unclean) {
		size_t l = strlen(t.reason);

		snprintf(t.reason + l, sizeof(t.reason) - l,
			 " without its agent's BYE: the guest did not shut down cleanly");
	}
	r = p->env.fire(p->env.owner, guest, &t, e->detector == VMT_DET_PROCESS_DEATH);
	if (r == -EBUSY) {
		p->mgr_suppressed[e->detector]++;
		log_debug("detector %s (suppressed)", t.reason);
	} else if (r < 0) {
		log_warning_errno(r, "detector %s: cannot start a dump: %m", detector_name(e->detector));
	} else {
		p->fired[e->detector]++;
		if (guest)
			log_guest(VMT_LOG_NOTICE, 0, guest, "detector %s", t.reason);
		else
			log_notice("detector %s", t.reason);
	}
	return 0;
}

static int rb_io_cb(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
	struct vmt_probe *p = userdata;

	ring_buffer__consume(p->rb);
	return 0;
}

static int defer_cb(sd_event_source *s, void *userdata)
{
	probe_sync_guests_now(userdata);
	return 0;
}

/* From the loop's next turn: callers may be half-way through changing
 * the guest list (a reload, a guest being freed). */
void probe_sync_guests(struct vmt_probe *p)
{
	if (!p || !p->skel || !p->rb)
		return;
	if (p->defer)
		sd_event_source_set_enabled(p->defer, SD_EVENT_ONESHOT);
	else if (sd_event_add_defer(p->env.event, &p->defer, defer_cb, p) < 0)
		p->defer = NULL;	/* the resync timer will do it */
}

static int resync_cb(sd_event_source *s, uint64_t usec, void *userdata)
{
	struct vmt_probe *p = userdata;

	probe_sync_guests_now(p);
	sd_event_source_set_time(s, usec + RESYNC_USEC);
	return 0;
}

int probe_new(struct vmt_probe **out, const struct vmt_probe_env *env)
{
	struct vmt_probe *p;
	uint64_t now;
	int r;

	*out = NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->env = *env;
	if (probe_maps_init(&p->maps) < 0) {
		free(p);
		return -ENOMEM;
	}
	libbpf_set_print(libbpf_print_cb);
	probe_load(p);
	if (p->skel) {
		p->maps.pids_fd = bpf_map__fd(p->skel->maps.pids);
		p->maps.tids_fd = bpf_map__fd(p->skel->maps.tids);
		p->maps.subjects_fd = bpf_map__fd(p->skel->maps.subjects);
	}
	for (unsigned d = 0; d < VMT_DET_COUNT; d++)
		if (env->conf->detectors[d].enabled && !p->loaded[d])
			log_warning("detector %s not loaded: %s", detector_name(d), p->reason[d]);
	if (p->skel && p->nlinks) {
		p->rb = ring_buffer__new(bpf_map__fd(p->skel->maps.events), rb_event, p, NULL);
		if (!p->rb) {
			r = -errno;
			log_error_errno(r, "detectors: cannot open the ring buffer: %m");
			goto fail;
		}
		r = sd_event_add_io(env->event, &p->io, ring_buffer__epoll_fd(p->rb), EPOLLIN,
				    rb_io_cb, p);
		/* before everything else: a dying QEMU closes its channels at the
		 * same moment, and the record must be read while its guest is
		 * still the one the maps name */
		if (r >= 0)
			r = sd_event_source_set_priority(p->io, SD_EVENT_PRIORITY_IMPORTANT - 10);
		if (r < 0)
			goto fail;
		sd_event_now(env->event, CLOCK_MONOTONIC, &now);
		r = sd_event_add_time(env->event, &p->timer, CLOCK_MONOTONIC, now + RESYNC_USEC,
				      100000, resync_cb, p);
		if (r < 0)
			goto fail;
		sd_event_source_set_enabled(p->timer, SD_EVENT_ON);
		probe_sync_guests_now(p);
		for (unsigned d = 0; d < VMT_DET_COUNT; d++)
			if (p->loaded[d])
				log_info("detector %s loaded", detector_name(d));
	}
	*out = p;
	return 0;
fail:
	log_error_errno(r, "detectors disabled: %m");
	probe_free(p);
	return 0;
}

void probe_free(struct vmt_probe *p)
{
	if (!p)
		return;
	sd_event_source_disable_unref(p->io);
	sd_event_source_disable_unref(p->timer);
	sd_event_source_disable_unref(p->defer);
	ring_buffer__free(p->rb);
	while (p->nlinks)
		bpf_link__destroy(p->links[--p->nlinks]);
	detect_bpf__destroy(p->skel);
	probe_maps_free(&p->maps);
	free(p);
}

void probe_status(struct vmt_probe *p, struct vmt_probe_status *st)
{
	int ncpu = libbpf_num_possible_cpus();
	struct vmt_detect_counters *c = NULL;

	memset(st, 0, sizeof(*st));
	st->built = true;
	for (unsigned d = 0; d < VMT_DET_COUNT; d++) {
		struct vmt_probe_detector *o = &st->det[d];

		o->name = detector_name(d);
		if (!p) {
			snprintf(o->reason, sizeof(o->reason), "detectors not started");
			continue;
		}
		o->enabled = p->env.conf->detectors[d].enabled;
		o->loaded = p->loaded[d];
		if (!o->enabled)
			snprintf(o->reason, sizeof(o->reason), "disabled in the config");
		else if (!o->loaded)
			snprintf(o->reason, sizeof(o->reason), "%s", p->reason[d]);
		o->fired = p->fired[d];
		o->suppressed = p->mgr_suppressed[d];
		o->filtered = p->filtered[d];
	}
	if (!p || !p->skel || ncpu <= 0)
		return;
	st->pids = p->maps.npids;
	st->tids = p->maps.ntids;
	c = calloc((size_t)ncpu, sizeof(*c));
	if (!c)
		return;
	for (uint32_t d = 0; d < VMT_DET_COUNT; d++) {
		struct vmt_probe_detector *o = &st->det[d];

		if (bpf_map_lookup_elem(bpf_map__fd(p->skel->maps.stats), &d, c) < 0)
			continue;
		for (int i = 0; i < ncpu; i++) {
			o->events += c[i].events;
			o->seen += c[i].anomalies;
			o->suppressed += c[i].suppressed;
			o->dropped += c[i].dropped;
			o->filtered += c[i].filtered;
		}
	}
	free(c);
}

#else /* !VMT_HAVE_BPF */

struct vmt_probe {
	struct vmt_probe_env env;
};

int probe_new(struct vmt_probe **out, const struct vmt_probe_env *env)
{
	struct vmt_probe *p = calloc(1, sizeof(*p));

	*out = NULL;
	if (!p)
		return -ENOMEM;
	p->env = *env;
	for (unsigned d = 0; d < VMT_DET_COUNT; d++)
		if (env->conf->detectors[d].enabled) {
			log_warning("detectors not loaded: vmtraced was built without BPF");
			break;
		}
	*out = p;
	return 0;
}

void probe_free(struct vmt_probe *p)
{
	free(p);
}

void probe_sync_guests(struct vmt_probe *p)
{
}

void probe_sync_guests_now(struct vmt_probe *p)
{
}

void probe_status(struct vmt_probe *p, struct vmt_probe_status *st)
{
	memset(st, 0, sizeof(*st));
	for (unsigned d = 0; d < VMT_DET_COUNT; d++) {
		st->det[d].name = detector_name(d);
		st->det[d].enabled = p && p->env.conf->detectors[d].enabled;
		snprintf(st->det[d].reason, sizeof(st->det[d].reason), "built without BPF");
	}
}

#endif
