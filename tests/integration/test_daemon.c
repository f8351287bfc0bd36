/* SPDX-License-Identifier: MIT */
/*
 * Integration: the running daemon as an operator and a guest see it.
 * Real ftrace pages (this machine's tracefs, or the shared corpus) are fed
 * by stand-in guests; vmtraced is driven through vmtracectl, raw control
 * packets, signals, a changed configuration, systemd's notify socket and
 * socket activation, a full disk and SIGKILL in the middle of a dump. Each
 * check looks at values (status fields, sample contents, decoded events),
 * not only exit codes.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ctlproto.h"
#include "fakeguest.h"
#include "itest.h"
#include "page.h"
#include "retention.h"
#include "ring.h"
#include "meta.h"
#include "sample.h"
#include "testd.h"
#include "testutil.h"
#include "tlv.h"
#include "vfile.h"

#define PS ITEST_PS

static struct itest_input in;

static uint64_t fed_pages(void)
{
	uint64_t n = 0;

	for (unsigned c = 0; c < in.ncpus; c++)
		n += in.npages[c];
	return n;
}

static uint64_t fed_pages_of(const struct fakeguest_conf *fc)
{
	uint64_t n = 0;

	for (unsigned c = 0; c < fc->ncpus; c++)
		n += fc->npages[c];
	return n;
}

static uint64_t fed_events(void)
{
	uint64_t n = 0;

	for (unsigned c = 0; c < in.ncpus; c++)
		n += itest_events_of(in.pages[c], in.npages[c]);
	return n;
}

#define NEED_INPUT() ITEST_NEED_INPUT(in)

static uint64_t sample_pages(const struct vmt_sample *s)
{
	uint64_t n = 0;

	for (uint32_t c = 0; c < s->ncpus; c++)
		n += s->cpus[c].npages;
	return n;
}

static int guest_samples(struct itest_run *r, const char *guest, char ***list)
{
	char dir[400];

	snprintf(dir, sizeof(dir), "%s/%s", r->d.state, guest);
	return itest_samples(dir, list);
}

static bool file_exists(const char *fmt_dir, const char *name)
{
	char p[800];

	snprintf(p, sizeof(p), "%s/%s", fmt_dir, name);
	return access(p, F_OK) == 0;
}

/* Aux files (aux-NNNNNN.vmtaux) in a guest folder. */
static int aux_files(const char *gdir)
{
	DIR *d = opendir(gdir);
	struct dirent *de;
	unsigned v;
	int n = 0;

	while (d && (de = readdir(d))) {
		size_t l = strlen(de->d_name);

		n += sscanf(de->d_name, "aux-%u.vmtaux", &v) == 1 && l > 7 &&
		     !strcmp(de->d_name + l - 7, ".vmtaux");
	}
	if (d)
		closedir(d);
	return n;
}

/* ---- 2. a guest reboot gives a new aux version ----------------------------------- */

START_TEST(reboot_new_aux_version)
{
	struct itest_run r;
	char gdir[400], sample[4400], dat[400], st[64];
	char **list;
	int n;
	struct vmt_sample *old = NULL, *s;
	uint64_t per_cpu[ITEST_MAX_CPUS], total, half_pages = 0, half_events = 0;
	size_t half[ITEST_MAX_CPUS];

	NEED_INPUT();
	itest_run_init(&r, &in, "reboot");
	r.fc[0].boot_id = "boot-aaaa";
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "record:\n  ring_size: 64MiB\n  flush_timeout: 5000ms\n", 1);
	itest_expect_streaming(&r.d, "g1", 5000);
	itest_expect_pages_in(&r.d, "g1", fed_pages());
	snprintf(gdir, sizeof(gdir), "%s/g1", r.d.state);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "aux_version"), 1);
	ck_assert_int_eq(guest_samples(&r, "g1", &list), 0);
	/* no sample needs it yet: not written (aux_on_demand waits for the
	 * writer to be sure; here the sample after the reboot shows it) */
	ck_assert(!file_exists(gdir, "aux-000001.vmtaux"));

	/* the guest reboots: the same channels, another boot id, half the pages */
	itest_run_guest_stop(&r, 0);
	r.fc[0].boot_id = "boot-bbbb";
	for (unsigned c = 0; c < in.ncpus; c++) {
		half[c] = in.npages[c] / 2;
		r.fc[0].pages[c] = in.pages[c] + (in.npages[c] - half[c]) * PS;
		r.fc[0].npages[c] = half[c];
		half_pages += half[c];
		half_events += itest_events_of(r.fc[0].pages[c], half[c]);
	}
	itest_run_guest(&r, 0);
	ck_assert_msg(ITEST_WAIT((n = guest_samples(&r, "g1", &list), itest_free_list(list, n), n == 1),
				 8000),
		      "no sample of the old window (log: %s)", r.d.log);
	/* the old window's sample brought aux 1 with it */
	ck_assert_msg(file_exists(gdir, "aux-000001.vmtaux"), "no aux-000001.vmtaux beside the old "
		      "window's sample (log: %s)", r.d.log);
	ck_assert_msg(ITEST_WAIT(itest_num(&r.d, "g1", "aux_version") == 2, 5000),
		      "aux_version %llu after the reboot (log: %s)",
		      (unsigned long long)itest_num(&r.d, "g1", "aux_version"), r.d.log);

	/* the old window, written on its own with the old aux */
	n = guest_samples(&r, "g1", &list);
	ck_assert_int_eq(n, 1);
	old = itest_read_sample(list[0]);
	ck_assert_uint_eq(old->aux_version, 1);
	ck_assert_uint_eq(old->ntriggers, 1);
	ck_assert_uint_eq(old->triggers[0].kind, VMT_TRIGGER_GUEST);
	ck_assert_msg(strstr(old->triggers[0].reason, "rebooted") != NULL, "reason '%s'",
		      old->triggers[0].reason);
	for (unsigned c = 0; c < in.ncpus; c++) {
		ck_assert_uint_eq(old->cpus[c].npages, in.npages[c]);
		ck_assert_uint_eq(old->cpus[c].events, itest_events_of(in.pages[c], in.npages[c]));
	}
	snprintf(dat, sizeof(dat), "%s/old.dat", r.dir);
	ck_assert_int_eq(itest_merge(&r.d, list[0], dat), 0);
	ck_assert_int_eq(tdread_counts(dat, per_cpu, ITEST_MAX_CPUS, &total), 0);
	ck_assert_uint_eq(total, fed_events());
	itest_free_list(list, n);

	/* the new session streams with aux 2 and holds only its own pages */
	ck_assert_msg(itest_wait_state(&r.d, "g1", "streaming", 5000, st, sizeof(st)), "state %s", st);
	itest_expect_pages_in(&r.d, "g1", fed_pages() + half_pages);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "aux_version"), 2);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "sessions"), 2);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "pages"), half_pages);
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg[0], 10000), 0);
	/* aux 2 waits for a sample that needs it */
	ck_assert(!file_exists(gdir, "aux-000002.vmtaux"));
	itest_dump_one(&r.d, "g1", sample, sizeof(sample));
	s = itest_read_sample(sample);
	ck_assert_uint_eq(s->aux_version, 2);
	ck_assert_uint_ne(s->aux_id, old->aux_id);
	ck_assert_msg(file_exists(gdir, "aux-000002.vmtaux"), "the dump did not write aux 2 (log: %s)",
		      r.d.log);
	for (unsigned c = 0; c < in.ncpus; c++)
		ck_assert_uint_eq(s->cpus[c].npages, half[c]);
	snprintf(dat, sizeof(dat), "%s/new.dat", r.dir);
	ck_assert_int_eq(itest_merge(&r.d, sample, dat), 0);
	ck_assert_int_eq(tdread_counts(dat, per_cpu, ITEST_MAX_CPUS, &total), 0);
	ck_assert_uint_eq(total, half_events);
	ck_assert_int_ge(testd_log_count(&r.d, "aux version 2 (new)"), 1);
	sample_free(s);
	sample_free(old);
	itest_run_end(&r);
}
END_TEST

/*
 * Aux files are written for samples only: a session that is never dumped
 * leaves none, a dump brings the aux its sample names; and retention's
 * max_aux keeps a guest's aux files (with the samples that need them) to
 * its limit. A dump of g2 is the barrier: the writer is FIFO, so an aux
 * file of g1 queued when its session began would be written before g2's
 * sample.
 */
START_TEST(aux_on_demand)
{
	struct itest_run r;
	char gdir[400], g2dir[400], sample[4400], aux[64], **list;
	struct vmt_sample *s;
	int n;

	NEED_INPUT();
	itest_run_init(&r, &in, "auxdemand");
	r.fc[0].boot_id = "boot-1111";
	itest_run_guest(&r, 0);
	itest_run_guest(&r, 1);
	itest_run_daemon(&r, "record:\n  ring_size: 16MiB\n  flush_timeout: 5000ms\n"
			 "triggers:\n  cooldown: 60s\nretention:\n  max_aux: 1\n", 2);
	itest_expect_streaming(&r.d, "g1", 5000);
	itest_expect_streaming(&r.d, "g2", 5000);
	itest_expect_pages_in(&r.d, "g1", fed_pages());
	snprintf(gdir, sizeof(gdir), "%s/g1", r.d.state);
	snprintf(g2dir, sizeof(g2dir), "%s/g2", r.d.state);

	itest_dump_one(&r.d, "g2", sample, sizeof(sample));
	s = itest_read_sample(sample);
	snprintf(aux, sizeof(aux), "aux-%06u.vmtaux", s->aux_version);
	sample_free(s);
	ck_assert_msg(file_exists(g2dir, aux), "%s names %s, not on disk", sample, aux);
	ck_assert_int_eq(aux_files(g2dir), 1);
	/* g1: a session, no dump: no aux file */
	ck_assert_msg(aux_files(gdir) == 0, "%d aux files of g1 before any dump of it (log: %s)",
		      aux_files(gdir), r.d.log);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "aux_version"), 1);

	itest_dump_one(&r.d, "g1", sample, sizeof(sample));
	s = itest_read_sample(sample);
	ck_assert_uint_eq(s->aux_version, 1);
	sample_free(s);
	ck_assert_msg(file_exists(gdir, "aux-000001.vmtaux"), "the dump of g1 wrote no aux file "
		      "(log: %s)", r.d.log);
	ck_assert_int_eq(aux_files(gdir), 1);

	/* g1 boots again: aux 2, not written (its old window's dump waits
	 * for the cooldown, so nothing needs aux 2 yet) */
	itest_run_guest_stop(&r, 0);
	r.fc[0].boot_id = "boot-2222";
	itest_run_guest(&r, 0);
	ck_assert_msg(ITEST_WAIT(itest_num(&r.d, "g1", "aux_version") == 2, 8000),
		      "aux_version %llu after the reboot (log: %s)",
		      (unsigned long long)itest_num(&r.d, "g1", "aux_version"), r.d.log);
	itest_expect_streaming(&r.d, "g1", 5000);
	itest_expect_pages_in(&r.d, "g1", 2 * fed_pages());
	itest_dump_one(&r.d, "g2", sample, sizeof(sample));
	ck_assert(!file_exists(gdir, "aux-000002.vmtaux"));
	ck_assert_int_eq(aux_files(gdir), 1);

	/* its dump writes aux 2; max_aux 1: the older sample goes, and aux 1
	 * with it, after the new sample is written */
	itest_dump_one(&r.d, "g1", sample, sizeof(sample));
	s = itest_read_sample(sample);
	ck_assert_uint_eq(s->aux_version, 2);
	sample_free(s);
	ck_assert(file_exists(gdir, "aux-000002.vmtaux"));
	ck_assert_msg(!file_exists(gdir, "aux-000001.vmtaux") && aux_files(gdir) == 1,
		      "max_aux 1: %d aux files of g1 (log: %s)", aux_files(gdir), r.d.log);
	n = guest_samples(&r, "g1", &list);
	ck_assert_int_eq(n, 1);
	ck_assert_str_eq(strrchr(list[0], '/'), strrchr(sample, '/'));
	itest_free_list(list, n);
	/* g2's own aux is its own business: one, with its two samples */
	ck_assert_int_eq(aux_files(g2dir), 1);
	n = guest_samples(&r, "g2", &list);
	itest_free_list(list, n);
	ck_assert_int_eq(n, 2);
	itest_run_end(&r);
}
END_TEST

/* An agent that starts again on the same boot: only the task names moved
 * on, so the window held is kept (no sample of its own), and the new aux
 * version decodes every page, old and new. */
START_TEST(agent_restart_keeps_window)
{
	struct itest_run r;
	char gdir[400], sample[4400], dat[400], st[64];
	struct vmt_buf b2 = { 0 };
	struct vmt_meta_entry e;
	size_t pos = 0;
	char **list;
	int n;
	struct vmt_sample *s;
	uint64_t per_cpu[ITEST_MAX_CPUS], total, half_pages = 0, half_events = 0;
	size_t half[ITEST_MAX_CPUS];

	NEED_INPUT();
	/* the same bundle but for one more task in saved_cmdlines */
	while (meta_next(in.bundle.data, in.bundle.len, &pos, &e) > 0) {
		char name[300];
		snprintf(name, sizeof(name), "%.*s", (int)e.name_len, e.name);
		if (!strcmp(name, "saved_cmdlines")) {
			struct vmt_buf c = { 0 };
			buf_append(&c, e.data, e.data_len);
			buf_append(&c, "4242 newtask\n", 13);
			meta_add(&b2, name, c.data, (uint32_t)c.len);
			buf_free(&c);
		} else {
			meta_add(&b2, name, e.data, e.data_len);
		}
	}
	if (meta_find(b2.data, b2.len, "saved_cmdlines", &e) < 0)
		meta_add(&b2, "saved_cmdlines", "4242 newtask\n", 13);

	itest_run_init(&r, &in, "restart");
	r.fc[0].boot_id = "boot-same";
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "record:\n  ring_size: 64MiB\n  flush_timeout: 5000ms\n", 1);
	itest_expect_streaming(&r.d, "g1", 5000);
	itest_expect_pages_in(&r.d, "g1", fed_pages());
	snprintf(gdir, sizeof(gdir), "%s/g1", r.d.state);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "aux_version"), 1);

	itest_run_guest_stop(&r, 0);
	r.fc[0].bundle = b2.data;
	r.fc[0].bundle_len = b2.len;
	for (unsigned c = 0; c < in.ncpus; c++) {
		half[c] = in.npages[c] / 2;
		r.fc[0].pages[c] = in.pages[c] + (in.npages[c] - half[c]) * PS;
		r.fc[0].npages[c] = half[c];
		half_pages += half[c];
		half_events += itest_events_of(r.fc[0].pages[c], half[c]);
	}
	itest_run_guest(&r, 0);
	ck_assert_msg(ITEST_WAIT(itest_num(&r.d, "g1", "aux_version") == 2, 8000),
		      "aux_version %llu after the restart (log: %s)",
		      (unsigned long long)itest_num(&r.d, "g1", "aux_version"), r.d.log);
	ck_assert_msg(itest_wait_state(&r.d, "g1", "streaming", 5000, st, sizeof(st)), "state %s", st);
	itest_expect_pages_in(&r.d, "g1", fed_pages() + half_pages);
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg[0], 10000), 0);
	/* no sample of its own for the old window: it is still in the rings */
	n = guest_samples(&r, "g1", &list);
	itest_free_list(list, n);
	ck_assert_int_eq(n, 0);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "pages"), fed_pages() + half_pages);

	itest_dump_one(&r.d, "g1", sample, sizeof(sample));
	s = itest_read_sample(sample);
	ck_assert_uint_eq(s->aux_version, 2);
	/* written for the sample; aux 1 was never needed by one */
	ck_assert(file_exists(gdir, "aux-000002.vmtaux"));
	ck_assert(!file_exists(gdir, "aux-000001.vmtaux"));
	snprintf(dat, sizeof(dat), "%s/all.dat", r.dir);
	ck_assert_int_eq(itest_merge(&r.d, sample, dat), 0);
	ck_assert_int_eq(tdread_counts(dat, per_cpu, ITEST_MAX_CPUS, &total), 0);
	/* the sample holds both sessions' pages; this stand-in replays the
	 * same pages, which merge keeps once */
	uint64_t held = 0;
	for (unsigned c = 0; c < in.ncpus; c++) {
		ck_assert_uint_eq(s->cpus[c].npages, in.npages[c] + half[c]);
		held += s->cpus[c].events;
	}
	ck_assert_uint_eq(held, fed_events() + half_events);
	ck_assert_uint_eq(total, fed_events());
	sample_free(s);
	buf_free(&b2);
	itest_run_end(&r);
}
END_TEST

/*
 * Socket ports: a connection the host opened and closed before the agent's
 * side took it (the daemon gave up half-way through connecting a guest's
 * ports and tried again) waits in each port's backlog ahead of the live
 * one. QEMU's server chardev takes it, sees the hang-up and takes the next;
 * so must the stand-in, or every page goes into a dead socket (this test
 * played that race on purpose: test_hostile's control_channel hit it by
 * chance when its guest's sockets were made again under a retrying daemon).
 */
START_TEST(socket_ports_stale_connection_first)
{
	struct itest_run r;

	NEED_INPUT();
	itest_run_init(&r, &in, "stale");
	r.fc[0].sockets = 1;
	itest_run_guest(&r, 0);
	for (unsigned c = 0; c <= in.ncpus; c++) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		char p[400];
		int n = c < in.ncpus ? snprintf(p, sizeof(p), "%s/trace-path-cpu%u", r.chan[0], c)
				     : snprintf(p, sizeof(p), "%s/agent-ctl-path", r.chan[0]);

		ck_assert_int_lt(n, (int)sizeof(sa.sun_path));
		memcpy(sa.sun_path, p, (size_t)n + 1);
		ck_assert_int_ge(fd, 0);
		ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect %s: %s",
			      sa.sun_path, strerror(errno));
		close(fd);
	}
	itest_run_daemon(&r, "", 1);
	itest_expect_streaming(&r.d, "g1", 10000);
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg[0], 20000), 0);
	itest_expect_pages_in(&r.d, "g1", fed_pages());
	itest_run_end(&r);
}
END_TEST

/* ---- issue 4: a guest's QEMU dies: its window is written by itself ------------- */

START_TEST(guest_process_death_dumps)
{
	struct itest_run r;
	char **list;
	int n = 0;
	struct vmt_sample *s;
	char st[64];

	NEED_INPUT();
	if (!test_have_root() || access("/sys/kernel/btf/vmlinux", R_OK))
		VMT_SKIP("the detectors need root and BTF");
	itest_run_init(&r, &in, "death");
	itest_run_guest(&r, 0);
	{
		/* the stand-in's channels are made before it forks, so the socket
		 * peer would be this test: name the QEMU pid with a pidfile */
		char pf[400], top[2048];
		FILE *f;

		snprintf(pf, sizeof(pf), "%s/qemu.pid", r.dir);
		f = fopen(pf, "w");
		ck_assert_ptr_nonnull(f);
		fprintf(f, "%d\n", (int)r.fg[0].pid);
		fclose(f);
		char g[600];
		itest_guest_yaml(g, sizeof(g), &r, 0);
		/* a dump that asked the dead one to flush would wait a minute */
		snprintf(top, sizeof(top), "record:\n  ring_size: 64MiB\n  flush_timeout: 60s\n"
			 "triggers:\n  coalesce: 0ms\nguests:\n%s    pidfile: %s\n", g, pf);
		ck_assert_int_eq(testd_start(&r.d, r.dir, top), 0);
	}
	itest_expect_streaming(&r.d, "g1", 5000);
	itest_expect_pages_in(&r.d, "g1", fed_pages());
	/* the detectors learn the pid at their next sync, and say so */
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, "detectors: watching 1 QEMU processes") >= 1,
				 20000),
		      "the detectors never watched the guest's process (log: %s)", r.d.log);
	kill(r.fg[0].pid, SIGSEGV);
	ck_assert_msg(ITEST_WAIT((n = guest_samples(&r, "g1", &list), itest_free_list(list, n), n >= 1),
				 10000),
		      "no sample after the guest process died (log: %s)", r.d.log);
	n = guest_samples(&r, "g1", &list);
	s = itest_read_sample(list[0]);
	ck_assert_uint_eq(s->triggers[0].kind, VMT_TRIGGER_BPF);
	ck_assert_msg(strstr(s->triggers[0].reason, "died") && strstr(s->triggers[0].reason, "SIGSEGV"),
		      "reason '%s'", s->triggers[0].reason);
	ck_assert_uint_eq(s->triggers[0].pid, (uint32_t)r.fg[0].pid);
	/* no FLUSH waited for: a dead agent answers none */
	ck_assert_uint_eq(s->flush_timeouts, 0);
	ck_assert_int_eq(testd_log_count(&r.d, "no FLUSHED within"), 0);
	/* the window before the death: every page the guest sent */
	for (unsigned c = 0; c < in.ncpus; c++)
		ck_assert_uint_eq(s->cpus[c].npages, in.npages[c]);
	sample_free(s);
	itest_free_list(list, n);
	(void)st;
	r.fg_on[0] = false;	/* it is dead already */
	r.fg[0].pid = 0;
	itest_run_end(&r);
}
END_TEST

/* ---- issue 5: clock points from KVM's TSC offsets ------------------------------ */


START_TEST(kvm_tsc_offsets_become_clock_points)
{
	struct itest_run r;
	struct vmt_buf b = { 0 };
	struct vmt_sample *s;
	char top[4096], g[600], kvm[400], path[1600], out[4096];
	char **list;
	int n;

	NEED_INPUT();
	itest_run_init(&r, &in, "kvmtsc");
	itest_bundle_with_clock(&in, &b, "local global counter [x86-tsc]\n");
	r.fc[0].bundle = b.data;
	r.fc[0].bundle_len = b.len;
	itest_run_guest(&r, 0);
	/* a KVM debugfs as the kernel lays it out: <pid>-<vm fd>/vcpuN/tsc-offset */
	snprintf(kvm, sizeof(kvm), "%s/kvm", r.dir);
	for (int c = 0; c < (int)in.ncpus; c++) {
		snprintf(path, sizeof(path), "mkdir -p %s/%d-11/vcpu%d && echo %d > %s/%d-11/vcpu%d/tsc-offset",
			 kvm, (int)r.fg[0].pid, c, -1000000 - c, kvm, (int)r.fg[0].pid, c);
		ck_assert_int_eq(itest_sh("%s", path), 0);
	}
	snprintf(path, sizeof(path), "echo %d > %s/qemu.pid", (int)r.fg[0].pid, r.dir);
	ck_assert_int_eq(itest_sh("%s", path), 0);
	itest_guest_yaml(g, sizeof(g), &r, 0);
	snprintf(top, sizeof(top), "record:\n  ring_size: 64MiB\nhost:\n  clock: x86-tsc\n"
		 "clock_sync:\n  kvm_debugfs: %s\nguests:\n%s    pidfile: %s/qemu.pid\n", kvm, g, r.dir);
	ck_assert_int_eq(testd_start(&r.d, r.dir, top), 0);
	itest_expect_streaming(&r.d, "g1", 5000);
	itest_expect_pages_in(&r.d, "g1", fed_pages());
	ck_assert_int_eq(testd_ctl(&r.d, out, sizeof(out), "dump"), 0);
	n = guest_samples(&r, "g1", &list);
	ck_assert_int_ge(n, 1);
	s = itest_read_sample(list[0]);
	ck_assert(s->have_clock);
	ck_assert_msg(s->clock.method == VMT_SYNC_KVM, "method %s: %s (log: %s)",
		      sync_method_name(s->clock.method), s->clock.why, r.d.log);
	ck_assert_str_eq(s->clock.guest_clock, "x86-tsc");
	ck_assert_str_eq(s->clock.host_clock, "x86-tsc");
	ck_assert_uint_eq(s->clock.qemu_pid, (uint32_t)r.fg[0].pid);
	/* one point per vCPU: host TSC = guest TSC - tsc-offset */
	ck_assert_uint_ge(s->clock.npoints, in.ncpus);
	for (uint32_t i = 0; i < s->clock.npoints; i++) {
		const struct vmt_sync_point *p = &s->clock.points[i];
		ck_assert_uint_lt(p->cpu, in.ncpus);
		ck_assert_int_eq(p->offset, 1000000 + (int64_t)p->cpu);
	}
	sample_free(s);
	itest_free_list(list, n);
	buf_free(&b);
	itest_run_end(&r);
}
END_TEST

/* the stand-in answers no SYNC and its trace clock is local: said, no points */
START_TEST(no_sync_is_said)
{
	struct itest_run r;
	struct vmt_sample *s;
	char out[4096];
	char **list;
	int n;

	NEED_INPUT();
	itest_run_init(&r, &in, "nosync");
	itest_run_guest(&r, 0);
	itest_run_daemon_opts(&r, "record:\n  ring_size: 64MiB\n", 1, NULL);
	itest_expect_streaming(&r.d, "g1", 5000);
	itest_expect_pages_in(&r.d, "g1", fed_pages());
	ck_assert_int_eq(testd_ctl(&r.d, out, sizeof(out), "dump"), 0);
	n = guest_samples(&r, "g1", &list);
	ck_assert_int_ge(n, 1);
	s = itest_read_sample(list[0]);
	ck_assert(s->have_clock);
	ck_assert_uint_eq(s->clock.method, VMT_SYNC_NONE);
	ck_assert_uint_eq(s->clock.npoints, 0);
	ck_assert_msg(strstr(s->clock.why, "cannot be read from user space") || strstr(s->clock.why, "does not answer"),
		      "why: '%s'", s->clock.why);
	sample_free(s);
	itest_free_list(list, n);
	itest_run_end(&r);
}
END_TEST

/* ---- issue 6: a thousand control clients at once, a guest streaming ------------- */

START_TEST(control_thousand_clients)
{
	enum { NCLIENTS = 1000 };
	struct itest_run r;
	struct ictl_msg *m = malloc(sizeof(*m));
	struct rlimit rl;
	int *fds = calloc(NCLIENTS, sizeof(int));
	uint64_t t0, p0, want = 0;
	unsigned answered = 0;

	NEED_INPUT();
	ck_assert(m && fds);
	/* this process holds all 1000 at once */
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_max < NCLIENTS + 200)
		VMT_SKIP("RLIMIT_NOFILE hard limit below what 1000 clients take");
	rl.rlim_cur = rl.rlim_max;
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	itest_run_init(&r, &in, "clients");
	itest_run_pages(&r, &in, 0, 1500);
	r.fc[0].pages_per_sec = 500;
	for (unsigned c = 0; c < in.ncpus; c++)
		want += 1500;
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "record:\n  ring_size: 16MiB\n", 1);
	itest_expect_streaming(&r.d, "g1", 5000);
	p0 = itest_num(&r.d, "g1", "pages_in");
	t0 = now_monotonic_ns();
	/* all connect and ask before any answer is read: 256 are served at a
	 * time, the rest wait in the listen backlog */
	for (int i = 0; i < NCLIENTS; i++) {
		fds[i] = ictl_connect(r.d.sock);
		ck_assert_msg(fds[i] >= 0, "client %d: connect: %s", i, strerror(-fds[i]));
		ck_assert_int_eq(ictl_request(fds[i], VMT_CTL_STATUS, (uint32_t)i + 1, NULL), 0);
	}
	for (int i = 0; i < NCLIENTS; i++) {
		unsigned guests = 0;
		int t = ictl_collect(fds[i], m, VMT_CTL_GUEST, &guests, 20000);
		ck_assert_msg(t == VMT_CTL_END, "client %d: %d instead of END", i, t);
		ck_assert_uint_eq(guests, 1);
		answered++;
		close(fds[i]);
	}
	printf("control: %u concurrent clients answered in %.0f ms; pages in %llu -> %llu meanwhile\n",
	       answered, (double)(now_monotonic_ns() - t0) / 1e6, (unsigned long long)p0,
	       (unsigned long long)itest_num(&r.d, "g1", "pages_in"));
	/* ingestion went on: every page of the guest arrives */
	itest_expect_pages_in(&r.d, "g1", want);
	ck_assert_int_eq(kill(r.d.pid, 0), 0);
	free(m);
	free(fds);
	itest_run_end(&r);
}
END_TEST

/* ---- 3. memory_max ------------------------------------------------------------------ */

/* dump_reserve in the memory_max tests: it counts in the cap */
#define MEMCAP_RESERVE (1ull << 20)

/*
 * A cap in MiB that holds a guest's metadata 4 times over and the reserve
 * (at least 2 MiB), and as many ring pages per CPU as fit beside the
 * metadata and the reserve, rounded to KiB.
 */
static void memcap_sizes(uint64_t *cap, uint64_t *pages, uint64_t *need)
{
	uint64_t meta = in.bundle.len;

	*cap = VMT_MAX(2ull << 20, (4 * meta + MEMCAP_RESERVE + (1 << 20) - 1) & ~((1ull << 20) - 1));
	*pages = (*cap - MEMCAP_RESERVE - meta) / PS / (in.ncpus ? in.ncpus : 1) + 1;
	do
		*need = ring_bytes_planned((uint32_t)--*pages, PS, true) * in.ncpus;
	while (*need + MEMCAP_RESERVE + meta > *cap);
}

/* The configuration's top: the cap, the reserve, pages per CPU. */
static void memcap_config(char *top, size_t n, uint64_t cap, uint64_t pages)
{
	snprintf(top, n,
		 "memory_max: %lluMiB\ndump_reserve: %lluKiB\nrecord:\n  ring_size: %lluKiB\n"
		 "  flush_timeout: 5000ms\n",
		 (unsigned long long)(cap >> 20), (unsigned long long)(MEMCAP_RESERVE >> 10),
		 (unsigned long long)(pages * PS >> 10));
}

START_TEST(memory_cap_refuses_second_guest)
{
	struct itest_run r;
	uint64_t cap, pages, need, mem;
	struct ijson root;
	const struct ijson *g1, *g2, *dm;
	char top[256], st[64], out[4096];

	NEED_INPUT();
	/* g1's rings and metadata fit; g2's rings do not */
	memcap_sizes(&cap, &pages, &need);
	ck_assert_msg(need + MEMCAP_RESERVE <= cap && 2 * need + MEMCAP_RESERVE > cap,
		      "rings of %llu bytes: pick another size", (unsigned long long)need);
	itest_run_init(&r, &in, "memcap");
	memcap_config(top, sizeof(top), cap, pages);
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, top, 2);
	itest_expect_streaming(&r.d, "g1", 5000);
	/* the metadata counts until its aux file is written: held until a
	 * sample needs it */
	ck_assert_uint_eq(itest_num(&r.d, NULL, "mem_used"), need + in.bundle.len);

	itest_run_guest(&r, 1);
	ck_assert_msg(itest_wait_state(&r.d, "g2", "failed", 6000, st, sizeof(st)),
		      "g2 is '%s', not failed (log: %s)", st, r.d.log);
	ck_assert_int_eq(testd_log_count(&r.d, "guest g2: refused: rings of"), 1);
	ck_assert_int_ge(testd_log_count(&r.d, "do not fit under memory_max"), 1);
	ck_assert_int_eq(testd_log_count(&r.d, "guest g1: refused"), 0);

	ck_assert_int_eq(itest_status(&r.d, &root), 0);
	dm = ijson_get(&root, "daemon");
	g1 = itest_guest(&root, "g1");
	g2 = itest_guest(&root, "g2");
	ck_assert_ptr_nonnull(g1);
	ck_assert_ptr_nonnull(g2);
	ck_assert_uint_eq(ijson_u64(dm, "guests_refused"), 1);
	ck_assert_uint_eq(ijson_u64(dm, "mem_cap"), cap);
	ck_assert_uint_eq(ijson_u64(dm, "mem_used"), need + in.bundle.len);
	ck_assert_str_eq(ijson_str(g2, "state"), "failed");
	ck_assert_uint_eq(ijson_u64(g2, "mem_used"), 0);
	ck_assert_uint_eq(ijson_u64(g2, "capacity"), 0);
	ck_assert_str_eq(ijson_str(g1, "state"), "streaming");
	ck_assert_uint_eq(ijson_u64(g1, "mem_used"), need);
	ijson_free(&root);

	/* the cap holds while g1 keeps streaming and g2 keeps trying */
	for (int i = 0; i < 10; i++) {
		mem = itest_num(&r.d, NULL, "mem_used");
		ck_assert_uint_le(mem, cap);
		usleep(100000);
	}
	/* a dump writes g1 only */
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "dump"), 0);
	ck_assert_ptr_nonnull(strstr(out, "/g1/g1-"));
	ck_assert_ptr_null(strstr(out, "/g2/"));
	/* g1's aux file came with it: its bundle is no longer held */
	ck_assert_uint_eq(itest_num(&r.d, NULL, "mem_used"), need);
	itest_run_end(&r);
}
END_TEST

/* Rings that fit, with metadata that does not fit beside them: refused at
 * META_BEGIN, before a byte of it is held. */
START_TEST(memory_cap_counts_metadata)
{
	struct itest_run r;
	uint64_t cap, pages, need, meta = in.bundle.len;
	char top[256], st[64];
	struct ijson root;
	const struct ijson *g1, *dm;

	NEED_INPUT();
	memcap_sizes(&cap, &pages, &need);
	/* rings of (cap - reserve - meta/2): they fit, the metadata does not */
	pages = (cap - MEMCAP_RESERVE - meta / 2) / PS / (in.ncpus ? in.ncpus : 1) + 1;
	do
		need = ring_bytes_planned((uint32_t)--pages, PS, true) * in.ncpus;
	while (need + MEMCAP_RESERVE + meta / 2 > cap);
	ck_assert(need + MEMCAP_RESERVE <= cap && need + MEMCAP_RESERVE + meta > cap);
	itest_run_init(&r, &in, "memcap-meta");
	memcap_config(top, sizeof(top), cap, pages);
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, top, 1);
	ck_assert_msg(itest_wait_state(&r.d, "g1", "failed", 6000, st, sizeof(st)),
		      "g1 is '%s', not failed (log: %s)", st, r.d.log);
	ck_assert_int_eq(testd_log_count(&r.d, "does not fit under memory_max now"), 1);
	ck_assert_int_eq(itest_status(&r.d, &root), 0);
	dm = ijson_get(&root, "daemon");
	g1 = itest_guest(&root, "g1");
	ck_assert_uint_eq(ijson_u64(g1, "meta_rejected"), 1);
	ck_assert_uint_eq(ijson_u64(dm, "mem_used"), need);
	ck_assert_uint_le(ijson_u64(dm, "mem_used"), cap);
	ijson_free(&root);
	printf("memory_cap_counts_metadata: rings %llu KiB + dump_reserve %llu KiB + metadata %llu KiB > "
	       "memory_max %llu KiB: refused at META_BEGIN, mem_used %llu KiB\n",
	       (unsigned long long)(need >> 10), (unsigned long long)(MEMCAP_RESERVE >> 10),
	       (unsigned long long)(meta >> 10), (unsigned long long)(cap >> 10),
	       (unsigned long long)(need >> 10));
	itest_run_end(&r);
}
END_TEST

/* ---- 4. control commands --------------------------------------------------------------- */

/* Split a line into whitespace-separated fields. */
static int fields(char *line, char **f, int max)
{
	int n = 0;

	for (char *t = strtok(line, " \t\n"); t && n < max; t = strtok(NULL, " \t\n"))
		f[n++] = t;
	return n;
}

START_TEST(control_status_guests_reload)
{
	struct itest_run r;
	char out[16384], *line, *f[16], want[64];
	struct ijson root;
	const struct ijson *dm, *gs, *g1;
	struct ictl_msg *m = malloc(sizeof(*m));
	unsigned count;
	int fd, nf;
	uint64_t cap_pages = (16u << 20) / PS;

	NEED_INPUT();
	itest_run_init(&r, &in, "control");
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "record:\n  ring_size: 16MiB\n", 1);
	itest_expect_streaming(&r.d, "g1", 5000);
	itest_expect_pages_in(&r.d, "g1", fed_pages());

	/* JSON: parses, and says what was fed */
	ck_assert_int_eq(itest_status(&r.d, &root), 0);
	ck_assert_int_eq(root.type, IJ_OBJ);
	dm = ijson_get(&root, "daemon");
	gs = ijson_get(&root, "guests");
	ck_assert_ptr_nonnull(dm);
	ck_assert_ptr_nonnull(gs);
	ck_assert_int_eq(gs->type, IJ_ARR);
	ck_assert_uint_eq(gs->n, 1);
	ck_assert_str_eq(ijson_str(dm, "version"), "0.1.0");
	ck_assert_str_eq(ijson_str(dm, "path"), r.d.state);
	ck_assert_uint_eq(ijson_u64(dm, "dumps"), 0);
	ck_assert_uint_eq(ijson_u64(dm, "dump_errors"), 0);
	{
		/* vmtracectl guests: the same guests, no daemon record */
		struct ijson groot;
		char gout[16384], err[128];
		ck_assert_int_eq(testd_ctl(&r.d, gout, sizeof(gout), "--json guests"), 0);
		ck_assert_msg(ijson_parse(gout, &groot, err, sizeof(err)) == 0, "%s: %s", err, gout);
		ck_assert_ptr_null(ijson_get(&groot, "daemon"));
		ck_assert_uint_eq(ijson_get(&groot, "guests")->n, 1);
		ck_assert_int_eq(testd_ctl(&r.d, gout, sizeof(gout), "guests"), 0);
		ck_assert_msg(strstr(gout, "GUEST ") && strstr(gout, "g1 ") && !strstr(gout, "vmtraced "),
			      "guests printed '%s'", gout);
		ijson_free(&groot);
	}
	/* the metadata counts until its aux file is written: held, since no
	 * sample has needed it yet */
	ck_assert_uint_eq(itest_num(&r.d, NULL, "mem_used"),
			  ring_bytes_planned((uint32_t)cap_pages, PS, true) * in.ncpus + in.bundle.len);
	ck_assert_uint_eq(ijson_u64(dm, "reserve"), 32u << 20);
	g1 = itest_guest(&root, "g1");
	ck_assert_ptr_nonnull(g1);
	ck_assert_str_eq(ijson_str(g1, "state"), "streaming");
	ck_assert_uint_eq(ijson_u64(g1, "ncpus"), in.ncpus);
	ck_assert_uint_eq(ijson_u64(g1, "pages_in"), fed_pages());
	ck_assert_uint_eq(ijson_u64(g1, "pages"), fed_pages());
	ck_assert_uint_eq(ijson_u64(g1, "capacity"), cap_pages * in.ncpus);
	ck_assert_uint_eq(ijson_u64(g1, "events_in"), fed_events());
	ck_assert_uint_eq(ijson_u64(g1, "bytes_in"), fed_pages() * PS);
	ck_assert_uint_eq(ijson_u64(g1, "pages_rejected"), 0);
	ck_assert_uint_eq(ijson_u64(g1, "aux_version"), 1);
	ck_assert_uint_eq(ijson_u64(g1, "sessions"), 1);
	ck_assert_uint_eq(ijson_u64(g1, "flags"), 0);
	ck_assert_uint_le(ijson_u64(g1, "first_ts"), ijson_u64(g1, "last_ts"));
	ijson_free(&root);

	/* the table says the same */
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "status"), 0);
	ck_assert_msg(strncmp(out, "vmtraced 0.1.0, up ", 19) == 0, "status: %s", out);
	line = strstr(out, "\nGUEST ");
	ck_assert_msg(line != NULL, "no table header in: %s", out);
	ck_assert_ptr_nonnull(strstr(line, "STATE"));
	ck_assert_ptr_nonnull(strstr(line, "PAGES-IN"));
	line = strstr(line + 1, "\ng1 ");
	ck_assert_msg(line != NULL, "no g1 row in: %s", out);
	nf = fields(line + 1, f, 16);
	ck_assert_int_ge(nf, 9);
	ck_assert_str_eq(f[0], "g1");
	ck_assert_str_eq(f[1], "streaming");
	snprintf(want, sizeof(want), "%u", in.ncpus);
	ck_assert_str_eq(f[2], want);
	snprintf(want, sizeof(want), "%llu/%llu", (unsigned long long)fed_pages(),
		 (unsigned long long)(cap_pages * in.ncpus));
	ck_assert_str_eq(f[3], want);
	snprintf(want, sizeof(want), "%llu", (unsigned long long)fed_pages());
	ck_assert_str_eq(f[5], want);

	/* GUESTS: one GUEST record per guest, no DAEMON record, END */
	fd = ictl_connect(r.d.sock);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ictl_request(fd, VMT_CTL_GUESTS, 7, NULL), 0);
	ck_assert_int_eq(ictl_recv(fd, m, 5000), 1);
	ck_assert_uint_eq(m->type, VMT_CTL_GUEST);
	ck_assert_uint_eq(m->id, 7);
	ck_assert_int_eq(ictl_collect(fd, m, VMT_CTL_DAEMON, &count, 5000), VMT_CTL_END);
	ck_assert_uint_eq(count, 0);
	ck_assert_uint_eq(m->id, 7);
	close(fd);

	/* reload with the same file: the guest keeps its session */
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "reload"), 0);
	ck_assert_str_eq(out, "configuration reloaded\n");
	ck_assert_int_eq(testd_log_count(&r.d, "configuration reloaded: 1 guest(s) kept, 0 started, 0 removed"), 1);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "sessions"), 1);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "pages_in"), fed_pages());
	ck_assert(itest_state_is(&r.d, "g1", "streaming"));
	free(m);
	itest_run_end(&r);
}
END_TEST

struct peer_job {
	const char *sock;
	unsigned type;		/* request sent */
	const char *ctl;	/* or: run vmtracectl with these arguments */
};

/* As nobody: send one request, say what came back: "ERROR <errno> <message>"
 * or "END <records>". */
static int peer_request(void *arg, char *out)
{
	const struct peer_job *j = arg;
	struct ictl_msg *m = malloc(sizeof(*m));
	unsigned n = 0;
	int fd, r;

	fd = ictl_connect(j->sock);
	if (fd < 0) {
		snprintf(out, 4096, "CONNECT %s", strerror(-fd));
		return 1;
	}
	ictl_request(fd, j->type, 42, NULL);	/* may fail: the daemon hung up */
	usleep(100000);	/* a client slower to read than the daemon to answer */
	r = ictl_collect(fd, m, j->type == VMT_CTL_DUMP ? VMT_CTL_FILE : VMT_CTL_GUEST, &n, 10000);
	if (r == VMT_CTL_ERROR)
		snprintf(out, 4096, "ERROR %u %s", m->err, m->message);
	else if (r == VMT_CTL_END)
		snprintf(out, 4096, "END %u", n);
	else
		snprintf(out, 4096, "FAIL %s", strerror(-r));
	close(fd);
	free(m);
	return 0;
}

/* As nobody: connect and say nothing; the daemon must hang up on its own
 * (a refused peer holds no client slot): "CLOSED <seconds>" or "OPEN". */
static int peer_idle(void *arg, char *out)
{
	const struct peer_job *j = arg;
	uint8_t buf[65536];
	uint64_t t0 = now_monotonic_ns();
	int fd = ictl_connect(j->sock);

	if (fd < 0) {
		snprintf(out, 4096, "CONNECT %s", strerror(-fd));
		return 1;
	}
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 10000) <= 0) {
			snprintf(out, 4096, "OPEN");
			break;
		}
		n = recv(fd, buf, sizeof(buf), 0);
		if (n <= 0) {
			snprintf(out, 4096, "CLOSED %.1f", (double)(now_monotonic_ns() - t0) / 1e9);
			break;
		}
	}
	close(fd);
	return 0;
}

/* As nobody: run vmtracectl; "RC <code>\n<stdout>". */
static int peer_ctl(void *arg, char *out)
{
	const struct peer_job *j = arg;
	char cmd[2048];
	FILE *p;
	size_t n;
	int len, st;

	snprintf(cmd, sizeof(cmd), "%s/%s/vmtracectl -s %s %s", test_srcdir(),
		 test_builddir(), j->sock, j->ctl);
	p = popen(cmd, "r");
	if (!p)
		return 1;
	len = snprintf(out, 4096, "RC 000\n");
	n = fread(out + len, 1, 4095 - (size_t)len, p);
	out[len + (int)n] = 0;
	st = pclose(p);
	out[3] = (char)('0' + (WIFEXITED(st) ? WEXITSTATUS(st) : 9));
	out[4] = out[5] = ' ';
	return 0;
}

static void open_socket_to_all(struct itest_run *r)
{
	/* the test folder is 0700 and the socket 0660 root: let nobody reach it */
	ck_assert_int_eq(chmod(r->dir, 0711), 0);
	ck_assert_int_eq(chmod(r->d.sock, 0666), 0);
}

/* A field of /proc/PID/task/TID/status as a number (hex for Cap*), or
 * UINT64_MAX. */
static uint64_t task_status(pid_t pid, const char *tid, const char *field, int base)
{
	char path[128], line[256];
	uint64_t v = UINT64_MAX;
	size_t n = strlen(field);
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%s/status", (int)pid, tid);
	f = fopen(path, "r");
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, field, n) && line[n] == ':')
			v = strtoull(line + n + 1, NULL, base);
	if (f)
		fclose(f);
	return v;
}

/*
 * Started as root, the daemon keeps only what its configuration needs once
 * it is set up, in every thread and in the bounding set, for good
 * (no_new_privs): the channel folders (DAC_OVERRIDE, DAC_READ_SEARCH), the
 * detectors' programs again at a reload (BPF, PERFMON). The host source's
 * tracefs and kallsyms are its helper's (hostpriv.h): nothing more for it.
 */
START_TEST(privilege_dropped)
{
	static const struct {
		const char *body;
		uint64_t want;
	} cases[] = {
		{ "", 1ull << 1 | 1ull << 2 | 1ull << 38 | 1ull << 39 },
		{ "detectors:\n  process_death: {enabled: false}\n  vcpu_starvation: {enabled: false}\n"
		  "  kvm_exit: {enabled: false}\n  oom: {enabled: false}\n",
		  1ull << 1 | 1ull << 2 },
		{ "host:\n  enabled: true\n  events: [sched:sched_switch]\n",
		  1ull << 1 | 1ull << 2 | 1ull << 38 | 1ull << 39 },
	};

	const char *sb = getenv("VMT_TEST_SANDBOX");
	bool sandboxed = sb && !strcmp(sb, "1");

	if (!test_have_root())
		VMT_SKIP("not root: nothing to drop");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *dir = test_mkdtemp("priv"), tdir[64];
		struct testd d;
		DIR *tasks;
		struct dirent *de;
		unsigned threads = 0;

		ck_assert_int_eq(testd_start(&d, dir, cases[i].body), 0);
		ck_assert(ITEST_WAIT(testd_log_count(&d, "privilege: running with") == 1, 10000));
		/* and the writer thread is started: it says it is running after that
		 * (the socket answers a connect() from its backlog before) */
		ck_assert(ITEST_WAIT(testd_log_count(&d, " running: ") == 1, 10000));
		snprintf(tdir, sizeof(tdir), "/proc/%d/task", (int)d.pid);
		tasks = opendir(tdir);
		ck_assert_ptr_nonnull(tasks);
		while ((de = readdir(tasks))) {
			if (de->d_name[0] == '.')
				continue;
			threads++;
			ck_assert_msg(task_status(d.pid, de->d_name, "CapEff", 16) == cases[i].want,
				      "case %zu, thread %s: CapEff %llx, want %llx", i, de->d_name,
				      (unsigned long long)task_status(d.pid, de->d_name, "CapEff", 16),
				      (unsigned long long)cases[i].want);
			ck_assert_uint_eq(task_status(d.pid, de->d_name, "CapPrm", 16), cases[i].want);
			ck_assert_uint_eq(task_status(d.pid, de->d_name, "CapBnd", 16), cases[i].want);
			ck_assert_uint_eq(task_status(d.pid, de->d_name, "CapInh", 16), 0);
			ck_assert_uint_eq(task_status(d.pid, de->d_name, "CapAmb", 16), 0);
			ck_assert_uint_eq(task_status(d.pid, de->d_name, "NoNewPrivs", 10), 1);
			/* under the sandbox suite, every thread is under the filter
			 * (2: SECCOMP_MODE_FILTER), and under none otherwise */
			ck_assert_uint_eq(task_status(d.pid, de->d_name, "Seccomp", 10),
					  sandboxed ? 2 : 0);
		}
		closedir(tasks);
		ck_assert_uint_ge(threads, 2);	/* the loop's and the writer's */
		ck_assert_int_eq(itest_ctl(&d, NULL, 0, "status"), 0);
		ck_assert_int_eq(testd_stop(&d), 0);
		test_rmtree(dir);
		free(dir);
	}
}
END_TEST

/*
 * With user: in the configuration, the daemon started as root gives its
 * state folder to that user (what a root-owned earlier run left in it too),
 * becomes it with no capability left (no detector, no host source), and
 * records and dumps through channels that belong to that user, as QEMU's
 * belong to QEMU's user and vmtraced is in its group.
 */
START_TEST(privilege_user)
{
	static const char top[] =
		"user: nobody\n"
		"detectors:\n  process_death: {enabled: false}\n  vcpu_starvation: {enabled: false}\n"
		"  kvm_exit: {enabled: false}\n  oom: {enabled: false}\n";
	struct itest_run r;
	char path[4400], sample[4400], want[64], tid[16];
	struct passwd *pw;
	struct stat st;
	FILE *f;
	char line[256];
	bool uid_seen = false;

	NEED_INPUT();
	if (!test_have_root())
		VMT_SKIP("not root: cannot become another user");
	pw = getpwnam("nobody");
	if (!pw)
		VMT_SKIP("no user nobody");
	itest_run_init(&r, &in, "user");
	/* nobody reaches the test folder, owns the guest's channels, and finds
	 * a state folder root made (as an earlier run as root would have) */
	ck_assert_int_eq(chmod(r.dir, 0711), 0);
	itest_run_guest(&r, 0);
	ck_assert_int_eq(itest_sh("chown -R nobody '%s'", r.chan[0]), 0);
	snprintf(path, sizeof(path), "%s/state/g1", r.dir);
	ck_assert_int_eq(itest_sh("mkdir -p -m 0700 '%s' && echo old >'%s/stray'", path, path), 0);
	/* and a hard link to a file of root's elsewhere, as a compromised
	 * daemon running as that user could have left: not given away */
	ck_assert_int_eq(itest_sh("echo secret >'%s/secret' && chmod 600 '%s/secret' && "
				  "ln '%s/secret' '%s/link'", r.dir, r.dir, r.dir, path), 0);
	itest_run_daemon(&r, top, 1);
	ck_assert(ITEST_WAIT(testd_log_count(&r.d, "privilege: running as nobody") == 1, 10000));

	snprintf(path, sizeof(path), "/proc/%d/status", (int)r.d.pid);
	snprintf(want, sizeof(want), "Uid:\t%u\t%u\t%u\t%u\n", (unsigned)pw->pw_uid,
		 (unsigned)pw->pw_uid, (unsigned)pw->pw_uid, (unsigned)pw->pw_uid);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "Uid:", 4)) {
			ck_assert_str_eq(line, want);
			uid_seen = true;
		}
	fclose(f);
	ck_assert(uid_seen);
	snprintf(tid, sizeof(tid), "%d", (int)r.d.pid);
	ck_assert_uint_eq(task_status(r.d.pid, tid, "CapEff", 16), 0);
	ck_assert_uint_eq(task_status(r.d.pid, tid, "CapPrm", 16), 0);
	ck_assert_uint_eq(task_status(r.d.pid, tid, "CapBnd", 16), 0);

	/* every page arrives and lands in a sample of nobody's */
	itest_expect_streaming(&r.d, "g1", 10000);
	itest_expect_pages_in(&r.d, "g1", fed_pages());
	itest_dump_one(&r.d, "g1", sample, sizeof(sample));
	ck_assert_int_eq(stat(sample, &st), 0);
	ck_assert_uint_eq(st.st_uid, pw->pw_uid);
	ck_assert_uint_eq(st.st_mode & 0077, 0);
	snprintf(path, sizeof(path), "%s/state/g1/stray", r.dir);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq(st.st_uid, pw->pw_uid);
	snprintf(path, sizeof(path), "%s/secret", r.dir);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq(st.st_uid, 0);
	ck_assert_int_ge(testd_log_count(&r.d, "link is not given to the user"), 1);
	snprintf(path, sizeof(path), "%s/state", r.dir);
	ck_assert_int_eq(stat(path, &st), 0);
	ck_assert_uint_eq(st.st_uid, pw->pw_uid);
	ck_assert_int_eq(itest_samples_check(path), 0);
	itest_run_end(&r);
}
END_TEST

/*
 * As vmtraced.service runs it, but without systemd as PID 1: the unit's
 * SystemCallFilter= from the first instruction (tests/tools/unitfilter
 * expands it with systemd-analyze), its User= and AmbientCapabilities=
 * (setpriv), its folder given to that user (StateDirectory=). The detectors
 * load, a guest streams, a dump, a reload and a stop all pass under the
 * filter, and once set up the daemon keeps only CAP_BPF and CAP_PERFMON.
 */
START_TEST(service_unit)
{
	char unit[4200], filter[4200], regid[32], caps[128], bound[160], tid[16], sample[4400];
	const char *argv_[16];
	const char *env[] = { "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1", NULL };
	struct testd_opts o = { .env = env };
	struct itest_run r;
	struct passwd *pw;
	FILE *f;
	char line[512];
	bool ambient = false;
	int n = 0;

	NEED_INPUT();
	if (!test_have_root())
		VMT_SKIP("not root: cannot become another user");
	if (itest_sh("command -v systemd-analyze >/dev/null && command -v setpriv >/dev/null"))
		VMT_SKIP("no systemd-analyze or setpriv");
	pw = getpwnam("nobody");
	if (!pw)
		VMT_SKIP("no user nobody");
	snprintf(unit, sizeof(unit), "%s/units/vmtraced.service", test_srcdir());
	/* the capabilities below are the unit's */
	f = fopen(unit, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))
		if (!strcmp(line, "AmbientCapabilities=CAP_BPF CAP_PERFMON CAP_DAC_OVERRIDE CAP_SYSLOG\n"))
			ambient = true;
	fclose(f);
	ck_assert_msg(ambient, "the unit's AmbientCapabilities= changed: change this test with it");

	snprintf(filter, sizeof(filter), "%s/%s/tests/tools/unitfilter", test_srcdir(),
		 test_builddir());
	snprintf(regid, sizeof(regid), "--regid=%u", (unsigned)pw->pw_gid);
	snprintf(caps, sizeof(caps), "+bpf,+perfmon,+dac_override,+syslog");
	snprintf(bound, sizeof(bound), "--bounding-set=-all,%s", caps);
	argv_[n++] = filter;
	argv_[n++] = unit;
	argv_[n++] = "setpriv";
	argv_[n++] = "--reuid=nobody";
	argv_[n++] = regid;
	argv_[n++] = "--init-groups";
	argv_[n++] = "--inh-caps=+bpf,+perfmon,+dac_override,+syslog";
	argv_[n++] = "--ambient-caps=+bpf,+perfmon,+dac_override,+syslog";
	argv_[n++] = bound;
	argv_[n] = NULL;
	o.wrapper = argv_;

	itest_run_init(&r, &in, "unit");
	itest_run_guest(&r, 0);
	/* the test's folder is the service's: its state, socket and channels */
	ck_assert_int_eq(itest_sh("chown -R nobody '%s'", r.dir), 0);
	snprintf(r.body, sizeof(r.body), "guests:\n");
	itest_guest_yaml(line, sizeof(line), &r, 0);
	strncat(r.body, line, sizeof(r.body) - strlen(r.body) - 1);
	ck_assert_msg(testd_start_opts(&r.d, r.dir, r.body, &o) == 0, "log: %s", r.d.log);
	ck_assert(ITEST_WAIT(testd_log_count(&r.d, "privilege: running with") == 1, 10000));
	/* BPF as nobody, with the unit's capabilities */
	ck_assert_int_eq(testd_log_count(&r.d, "detector process_death loaded"), 1);
	snprintf(tid, sizeof(tid), "%d", (int)r.d.pid);
	ck_assert_uint_eq(task_status(r.d.pid, tid, "Uid", 10), pw->pw_uid);
	ck_assert_uint_eq(task_status(r.d.pid, tid, "CapEff", 16), 1ull << 38 | 1ull << 39);
	ck_assert_uint_eq(task_status(r.d.pid, tid, "CapAmb", 16), 0);
	ck_assert_uint_eq(task_status(r.d.pid, tid, "Seccomp", 10), 2);

	itest_expect_streaming(&r.d, "g1", 10000);
	itest_expect_pages_in(&r.d, "g1", fed_pages());
	itest_dump_one(&r.d, "g1", sample, sizeof(sample));
	ck_assert_int_eq(itest_ctl(&r.d, NULL, 0, "reload"), 0);
	/* as a user, the detectors cannot be set up again (their tracepoints
	 * are root's files): a change waits for a restart, said, and the ones
	 * running stay */
	{
		char body[sizeof(r.body) + 128];

		snprintf(body, sizeof(body), "%sdetectors:\n  oom: {enabled: false}\n", r.body);
		ck_assert_int_eq(itest_write_conf(&r.d, body), 0);
		ck_assert_int_eq(itest_ctl(&r.d, NULL, 0, "reload"), 0);
		ck_assert_int_eq(testd_log_count(&r.d, "detectors changed: they take effect "
						 "at the next start"), 1);
		ck_assert_int_eq(testd_log_count(&r.d, "detector oom loaded"), 1);
	}
	/* ExecReload= (vmtracectl reload) as the service runs it: its user,
	 * its system call filter; a refused file fails it. No leak checking,
	 * as for the daemon: it ptraces, which the filter forbids. */
#define EXEC_RELOAD "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 '%s' '%s' setpriv --reuid=nobody %s --init-groups '%s/%s/vmtracectl' -s '%s' reload"
	ck_assert_int_eq(itest_sh(EXEC_RELOAD " >/dev/null", filter, unit, regid, test_srcdir(),
				  test_builddir(), r.d.sock), 0);
	ck_assert_int_eq(itest_write_conf(&r.d, "record:\n  ring_size: 0\n"), 0);
	ck_assert_int_eq(itest_sh("out=$(" EXEC_RELOAD " 2>&1); [ $? = 1 ] && echo \"$out\" | grep -q ring_size",
				  filter, unit, regid, test_srcdir(), test_builddir(), r.d.sock), 0);
#undef EXEC_RELOAD
	ck_assert_int_eq(itest_ctl(&r.d, NULL, 0, "status"), 0);
	itest_run_end(&r);	/* exit status 0: nothing was killed */
}
END_TEST

START_TEST(control_unauthorised_peer)
{
	struct itest_run r;
	char out[4096];
	struct ijson j;
	struct peer_job job;
	char *text;

	NEED_INPUT();
	if (!test_have_root())
		VMT_SKIP("not root: cannot become another user");
	itest_run_init(&r, &in, "unauth");
	itest_run_daemon(&r, "", 0);
	open_socket_to_all(&r);

	/* a client sends its request as soon as it is connected, as vmtracectl
	 * does: whenever the daemon looks at it, the answer must be the refusal */
	job = (struct peer_job){ .sock = r.d.sock, .type = VMT_CTL_STATUS };
	for (int i = 0; i < 5; i++) {
		ck_assert_int_eq(itest_as_nobody(peer_request, &job, out), 0);
		ck_assert_msg(strncmp(out, "ERROR 13 ", 9) == 0, "nobody's STATUS (try %d) got: %s", i,
			      out);
		ck_assert_msg(strstr(out, "permission denied") != NULL, "nobody's STATUS got: %s", out);
	}
	/* each refusal counted, said once a minute: any user can connect in a loop */
	ck_assert_int_eq(testd_log_count(&r.d, "refused uid 65534"), 1);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "refused"), 5);

	/* a refused peer that says nothing is hung up on within seconds */
	ck_assert_int_eq(itest_as_nobody(peer_idle, &job, out), 0);
	ck_assert_msg(strncmp(out, "CLOSED ", 7) == 0, "an idle refused peer: %s", out);

	/* vmtracectl as nobody: exit 1, says why; --json prints JSON or nothing */
	for (int i = 0; i < 5; i++) {
		job.ctl = "status 2>&1";
		ck_assert_int_eq(itest_as_nobody(peer_ctl, &job, out), 0);
		ck_assert_msg(strncmp(out, "RC 1", 4) == 0, "vmtracectl as nobody: %s", out);
		ck_assert_msg(strstr(out, "permission denied") != NULL,
			      "vmtracectl status as nobody (try %d) said: %s", i, out);
		job.ctl = "--json status 2>/dev/null";
		ck_assert_int_eq(itest_as_nobody(peer_ctl, &job, out), 0);
		ck_assert_msg(strncmp(out, "RC 1", 4) == 0, "vmtracectl as nobody: %s", out);
		text = strchr(out, '\n') + 1;
		ck_assert_msg(!*text || ijson_parse(text, &j, NULL, 0) == 0,
			      "vmtracectl --json status, refused: stdout is neither empty nor JSON: '%s'",
			      text);
		if (*text)
			ijson_free(&j);
	}
	itest_run_end(&r);
}
END_TEST

#define RO_GROUP "vmt-itest-ro"
static bool ro_group_ready;

/* Unchecked fixture: runs in the suite's process, so it is undone whatever
 * the test does. */
static void ro_group_setup(void)
{
	ro_group_ready = false;
	if (!test_have_root() || access("/usr/sbin/groupadd", X_OK))
		return;
	if (itest_group_exists(RO_GROUP))
		itest_sh("groupdel " RO_GROUP " >/dev/null 2>&1");
	ro_group_ready = itest_sh("groupadd " RO_GROUP " >/dev/null 2>&1") == 0 &&
			 itest_sh("gpasswd -a nobody " RO_GROUP " >/dev/null 2>&1") == 0;
}

static void ro_group_teardown(void)
{
	if (itest_group_exists(RO_GROUP))
		itest_sh("groupdel " RO_GROUP " >/dev/null 2>&1");
}

/*
 * A read-only user opens 300 connections and holds them; root's status must
 * still be answered at once: the user gets 16, the rest are refused with
 * EBUSY. Then, with idle_timeout 1s: an idle client is hung up on, one
 * waiting for a dump's answer (--post) is not.
 */
START_TEST(control_slots_for_root)
{
	struct itest_run r;
	char out[8192];
	int up[2], down[2], st, held = -1;
	uint64_t t0, took;
	pid_t pid;

	NEED_INPUT();
	if (!ro_group_ready)
		VMT_SKIP("cannot make a test group with nobody in it (needs root and groupadd)");
	itest_run_init(&r, &in, "slots");
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "control:\n  read_only_group: " RO_GROUP "\n", 1);
	itest_expect_streaming(&r.d, "g1", 5000);
	open_socket_to_all(&r);

	ck_assert_int_eq(pipe(up), 0);
	ck_assert_int_eq(pipe(down), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fds[300], n = 0, accepted = 0;
		char ch;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
			_exit(1);
		/* nobody is in RO_GROUP through /etc/group, as a login would be */
		for (int i = 0; i < 300; i++)
			if ((fds[n] = ictl_connect(r.d.sock)) >= 0)
				n++;
		/* the refused get their EBUSY at once; the others nothing */
		for (int i = 0; i < n; i++) {
			struct ictl_msg *m = malloc(sizeof(*m));
			int got = m ? ictl_recv(fds[i], m, 500) : -ENOMEM;

			accepted += got == -ETIMEDOUT;
			if (got == 1 && !(m->type == VMT_CTL_ERROR && m->err == EBUSY))
				accepted = -1000;	/* neither held nor refused as it should be */
			free(m);
		}
		if (write(up[1], &accepted, sizeof(accepted)) != sizeof(accepted))
			_exit(2);
		if (read(down[0], &ch, 1) < 0)
			_exit(3);
		_exit(0);
	}
	close(up[1]);
	close(down[0]);
	ck_assert_int_eq(read(up[0], &held, sizeof(held)), (ssize_t)sizeof(held));
	t0 = itest_now_ms();
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "status"), 0);
	took = itest_now_ms() - t0;
	ck_assert_msg(held >= 1 && held <= 16, "nobody holds %d connections", held);
	ck_assert_msg(took < (uint64_t)test_deadline_ms(2000), "root's status took %llu ms",
		      (unsigned long long)took);
	ck_assert_uint_ge(itest_num(&r.d, NULL, "refused"), (uint64_t)(300 - held));
	ck_assert_int_ge(testd_log_count(&r.d, "too many connections"), 1);
	ck_assert_int_eq(write(down[1], "x", 1), 1);
	close(down[1]);
	close(up[0]);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_int_eq(WEXITSTATUS(st), 0);

	/* idle: hung up on; waiting for a dump: answered */
	{
		char body[2048], g[600];

		itest_guest_yaml(g, sizeof(g), &r, 0);
		snprintf(body, sizeof(body),
			 "control:\n  read_only_group: " RO_GROUP "\n  idle_timeout: 1s\nguests:\n%s", g);
		ck_assert_int_eq(itest_write_conf(&r.d, body), 0);
		ck_assert_int_eq(itest_ctl(&r.d, NULL, 0, "reload"), 0);
	}
	{
		int idle = ictl_connect(r.d.sock), waiting = ictl_connect(r.d.sock);
		struct vmt_buf tlv = { 0 };
		struct ictl_msg *m = malloc(sizeof(*m));
		unsigned files = 0;

		ck_assert_int_ge(idle, 0);
		ck_assert_int_ge(waiting, 0);
		ck_assert_ptr_nonnull(m);
		tlv_put_u64(&tlv, VMT_CTAG_POST_NS, 2500000000ull);
		ck_assert_int_eq(ictl_request(waiting, VMT_CTL_DUMP, 7, &tlv), 0);
		ck_assert_int_eq(ictl_recv(idle, m, 10000), 0);	/* closed by the daemon */
		ck_assert_int_eq(ictl_collect(waiting, m, VMT_CTL_FILE, &files, 20000), VMT_CTL_END);
		ck_assert_uint_eq(files, 1);
		close(idle);
		close(waiting);
		buf_free(&tlv);
		free(m);
	}
	printf("control_slots_for_root: nobody opened 300 connections and holds %d; root's status "
	       "in %llu ms; an idle client hung up on after 1 s, one waiting 2.5 s for its dump "
	       "answered\n", held, (unsigned long long)took);
	itest_run_end(&r);
}
END_TEST

START_TEST(control_read_only_group)
{
	struct itest_run r;
	char out[4096], body[1024], g[600];
	struct peer_job job;

	NEED_INPUT();
	if (!ro_group_ready)
		VMT_SKIP("cannot make a test group with nobody in it (needs root and groupadd)");
	itest_run_init(&r, &in, "rogroup");
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "control:\n  read_only_group: " RO_GROUP "\n", 1);
	itest_expect_streaming(&r.d, "g1", 5000);
	open_socket_to_all(&r);

	job = (struct peer_job){ .sock = r.d.sock, .type = VMT_CTL_STATUS };
	ck_assert_int_eq(itest_as_nobody(peer_request, &job, out), 0);
	ck_assert_msg(!strcmp(out, "END 1"), "read-only STATUS got: %s", out);
	job.type = VMT_CTL_GUESTS;
	ck_assert_int_eq(itest_as_nobody(peer_request, &job, out), 0);
	ck_assert_msg(!strcmp(out, "END 1"), "read-only GUESTS got: %s", out);
	job.type = VMT_CTL_DUMP;
	ck_assert_int_eq(itest_as_nobody(peer_request, &job, out), 0);
	ck_assert_msg(strncmp(out, "ERROR 13 permission denied", 26) == 0, "read-only DUMP got: %s",
		      out);
	job.type = VMT_CTL_RELOAD;
	ck_assert_int_eq(itest_as_nobody(peer_request, &job, out), 0);
	ck_assert_msg(strncmp(out, "ERROR 13 permission denied", 26) == 0, "read-only RELOAD got: %s",
		      out);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "dumps"), 0);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "refused"), 2);

	/* the same group as the full-control group, after a reload: dumps work */
	itest_guest_yaml(g, sizeof(g), &r, 0);
	snprintf(body, sizeof(body), "control:\n  group: " RO_GROUP "\nguests:\n%s", g);
	ck_assert_int_eq(itest_write_conf(&r.d, body), 0);
	ck_assert_int_eq(itest_ctl(&r.d, NULL, 0, "reload"), 0);
	job.type = VMT_CTL_DUMP;
	ck_assert_int_eq(itest_as_nobody(peer_request, &job, out), 0);
	ck_assert_msg(!strcmp(out, "END 1"), "DUMP by the control group got: %s", out);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "dumps"), 1);
	itest_run_end(&r);
}
END_TEST

/* A packet: header fields as given, then payload bytes. */
static size_t packet(uint8_t *p, uint32_t magic, uint16_t version, uint16_t type, uint32_t len_field,
		     const void *payload, size_t plen)
{
	put_le32(p, magic);
	put_le16(p + 4, version);
	put_le16(p + 6, type);
	put_le32(p + 8, len_field);
	put_le32(p + 12, 99);
	if (plen)
		memcpy(p + 16, payload, plen);
	return 16 + plen;
}

START_TEST(control_malformed_packets)
{
	struct itest_run r;
	static uint8_t big[70000];
	uint8_t tlv[16];
	struct ictl_msg *m = malloc(sizeof(*m));
	struct {
		const char *what;
		size_t len;
		const uint8_t *data;
		uint32_t err;
	} cases[6];
	size_t n;
	unsigned count;
	int fd, nc = 0;

	itest_run_init(&r, &in, "malformed");
	itest_run_daemon(&r, "", 0);
	fd = ictl_connect(r.d.sock);
	ck_assert_int_ge(fd, 0);

	/* each case is built into its own buffer */
	static uint8_t bufs[5][64];
	n = packet(bufs[0], 0xdeadbeef, VMT_CTL_VERSION, VMT_CTL_STATUS, 0, NULL, 0);
	cases[nc++] = (typeof(cases[0])){ "bad magic", n, bufs[0], EBADMSG };
	n = packet(bufs[1], VMT_CTL_MAGIC, VMT_CTL_VERSION + 1, VMT_CTL_STATUS, 0, NULL, 0);
	cases[nc++] = (typeof(cases[0])){ "wrong version", n, bufs[1], EBADMSG };
	/* a record claiming 100 bytes in a 12-byte payload */
	put_le16(tlv, VMT_CTAG_GUEST);
	put_le16(tlv + 2, 0);
	put_le32(tlv + 4, 100);
	memcpy(tlv + 8, "g1\0\0", 4);
	n = packet(bufs[2], VMT_CTL_MAGIC, VMT_CTL_VERSION, VMT_CTL_DUMP, 12, tlv, 12);
	cases[nc++] = (typeof(cases[0])){ "truncated TLV", n, bufs[2], EBADMSG };
	/* a header whose length field disagrees with the packet */
	n = packet(bufs[3], VMT_CTL_MAGIC, VMT_CTL_VERSION, VMT_CTL_STATUS, 40, NULL, 0);
	cases[nc++] = (typeof(cases[0])){ "length field too long", n, bufs[3], EBADMSG };
	/* an answer type sent as a request */
	n = packet(bufs[4], VMT_CTL_MAGIC, VMT_CTL_VERSION, VMT_CTL_END, 0, NULL, 0);
	cases[nc++] = (typeof(cases[0])){ "END as a request", n, bufs[4], EOPNOTSUPP };
	packet(big, VMT_CTL_MAGIC, VMT_CTL_VERSION, VMT_CTL_STATUS, sizeof(big) - 16, NULL, 0);
	cases[nc++] = (typeof(cases[0])){ "70,000-byte packet", sizeof(big), big, EMSGSIZE };

	for (int i = 0; i < nc; i++) {
		ck_assert_msg(ictl_send(fd, cases[i].data, cases[i].len) == 0, "%s: send failed",
			      cases[i].what);
		ck_assert_msg(ictl_recv(fd, m, 5000) == 1, "%s: no answer", cases[i].what);
		ck_assert_msg(m->type == VMT_CTL_ERROR, "%s: answered %u, not ERROR", cases[i].what,
			      m->type);
		ck_assert_msg(m->err == cases[i].err, "%s: errno %u, want %u (%s)", cases[i].what,
			      m->err, cases[i].err, m->message);
		ck_assert_msg(m->message[0], "%s: ERROR without a message", cases[i].what);
		/* the same connection still serves */
		ck_assert_int_eq(ictl_request(fd, VMT_CTL_STATUS, 1000 + (uint32_t)i, NULL), 0);
		ck_assert_msg(ictl_collect(fd, m, VMT_CTL_DAEMON, &count, 5000) == VMT_CTL_END,
			      "%s: STATUS after it failed", cases[i].what);
		ck_assert_uint_eq(count, 1);
		ck_assert_uint_eq(m->id, 1000 + (uint32_t)i);
	}
	close(fd);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "refused"), (uint64_t)nc);
	ck_assert_int_eq(itest_ctl(&r.d, NULL, 0, "status"), 0);
	free(m);
	itest_run_end(&r);
}
END_TEST

/* A guest that never connected has been offline since the daemon made it,
 * not since the machine booted: status (and metrics, and forget_after)
 * read its time in state from there. */
START_TEST(state_time_of_a_guest_never_seen)
{
	struct itest_run r;
	struct ijson root;
	const struct ijson *dm, *g;

	NEED_INPUT();
	itest_run_init(&r, &in, "never");
	itest_run_daemon(&r, "", 1);	/* g1's channels are never made */
	ck_assert_int_eq(itest_status(&r.d, &root), 0);
	dm = ijson_get(&root, "daemon");
	g = itest_guest(&root, "g1");
	ck_assert_ptr_nonnull(dm);
	ck_assert_ptr_nonnull(g);
	ck_assert_str_eq(ijson_str(g, "state"), "offline");
	ck_assert_msg(ijson_u64(g, "uptime_ns") <= ijson_u64(dm, "uptime_ns"),
		      "g1 offline for %llu ns, the daemon up for %llu ns",
		      (unsigned long long)ijson_u64(g, "uptime_ns"),
		      (unsigned long long)ijson_u64(dm, "uptime_ns"));
	ijson_free(&root);
	itest_run_end(&r);
}
END_TEST

START_TEST(ctl_without_daemon)
{
	struct testd d = { 0 };
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char out[4096], *dir = test_mkdtemp("nodaemon");
	int fd;

	ck_assert_ptr_nonnull(dir);
	snprintf(d.dir, sizeof(d.dir), "%s", dir);
	snprintf(d.sock, sizeof(d.sock), "%s/none.sock", dir);
	ck_assert_int_eq(testd_ctl(&d, out, sizeof(out), "status 2>&1"), 1);
	ck_assert_msg(strstr(out, "not running") != NULL, "no socket: '%s'", out);

	/* a socket file left by a daemon that died */
	fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	ck_assert_uint_lt(strlen(d.sock), sizeof(sa.sun_path));
	memcpy(sa.sun_path, d.sock, strlen(d.sock) + 1);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	ck_assert_int_eq(testd_ctl(&d, out, sizeof(out), "status 2>&1"), 1);
	ck_assert_msg(strstr(out, "not running") != NULL, "stale socket: '%s'", out);
	ck_assert_int_eq(testd_ctl(&d, out, sizeof(out), "dump 2>&1"), 1);
	ck_assert_msg(strstr(out, "not running") != NULL, "dump, stale socket: '%s'", out);
	test_rmtree(dir);
	free(dir);
}
END_TEST

/* ---- issue 16: compressed rings ---------------------------------------------------------- */

/*
 * Every page fed is in the window (pages == want) and the compressor has
 * nothing left to do: the batch it may still be on is back.
 */
static void expect_frames_settled(struct itest_run *r, uint64_t want)
{
	ck_assert_msg(ITEST_WAIT(itest_num(&r->d, "g1", "frames_made") > 0 &&
				 itest_num(&r->d, "g1", "pages") == want, 10000),
		      "frames_made %llu, pages %llu of %llu; %llu in %llu bytes of frames, %llu stored "
		      "raw, %llu overwritten (log: %s)",
		      (unsigned long long)itest_num(&r->d, "g1", "frames_made"),
		      (unsigned long long)itest_num(&r->d, "g1", "pages"), (unsigned long long)want,
		      (unsigned long long)itest_num(&r->d, "g1", "frame_pages"),
		      (unsigned long long)itest_num(&r->d, "g1", "frame_bytes"),
		      (unsigned long long)itest_num(&r->d, "g1", "pages_stored_raw"),
		      (unsigned long long)itest_num(&r->d, "g1", "pages_overwritten"), r->d.log);
}

/*
 * Rings of 2 MiB (512 pages a CPU): raw, they keep the newest 512 pages of
 * each CPU; compressed, every page fed, and the dump holds each one, byte
 * for byte, decoded from frames and raw pages, merged to exactly the
 * events fed in.
 */
START_TEST(compressed_ring_keeps_more)
{
	struct itest_run r;
	char sample[4400], dat[400];
	uint64_t per_cpu[ITEST_MAX_CPUS], total, fp = 0;
	struct vmt_sample *s;

	NEED_INPUT();
	if (in.npages[0] <= 512 && in.npages[1] <= 512)
		VMT_SKIP("the input (%zu, %zu pages) fits raw rings of 2 MiB", in.npages[0], in.npages[1]);
	itest_run_init(&r, &in, "cring");
	/* at a guest's pace, not a burst: the compressor keeps up, so no
	 * page is stored uncompressed (the unit tests cover that) */
	r.fc[0].pages_per_sec = 1000;
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "record:\n  ring_size: 2MiB\n  compression: zstd\n  flush_timeout: 5000ms\n", 1);
	itest_expect_streaming(&r.d, "g1", 5000);
	itest_expect_pages_in(&r.d, "g1", fed_pages());
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg[0], 10000), 0);
	expect_frames_settled(&r, fed_pages());
	ck_assert_uint_eq(itest_num(&r.d, "g1", "pages_stored_raw"), 0);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "pages_overwritten"), 0);
	ck_assert_uint_gt(itest_num(&r.d, "g1", "pages"), itest_num(&r.d, "g1", "capacity"));
	itest_dump_one(&r.d, "g1", sample, sizeof(sample));
	s = itest_read_sample(sample);
	for (unsigned c = 0; c < in.ncpus; c++) {
		ck_assert_uint_eq(s->cpus[c].npages, in.npages[c]);
		ck_assert_uint_eq(s->cpus[c].frames_refused, 0);
		ck_assert_mem_eq(s->cpus[c].pages, in.pages[c], in.npages[c] * PS);
		fp += s->cpus[c].frame_pages;
	}
	ck_assert_uint_gt(fp, 0);
	sample_free(s);
	snprintf(dat, sizeof(dat), "%s/cring.dat", r.dir);
	ck_assert_int_eq(itest_merge(&r.d, sample, dat), 0);
	ck_assert_int_eq(tdread_counts(dat, per_cpu, ITEST_MAX_CPUS, &total), 0);
	ck_assert_uint_eq(total, fed_events());
	printf("compressed_ring_keeps_more: rings of 2 MiB held all %llu pages (%llu in frames; "
	       "raw capacity %llu), %llu events merged\n", (unsigned long long)fed_pages(),
	       (unsigned long long)fp, (unsigned long long)itest_num(&r.d, "g1", "capacity"),
	       (unsigned long long)total);
	itest_run_end(&r);

	/* the same rings raw: the oldest pages are gone */
	itest_run_init(&r, &in, "cring-off");
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "record:\n  ring_size: 2MiB\n  compression: off\n  flush_timeout: 5000ms\n", 1);
	itest_expect_streaming(&r.d, "g1", 5000);
	itest_expect_pages_in(&r.d, "g1", fed_pages());
	ck_assert_uint_gt(itest_num(&r.d, "g1", "pages_overwritten"), 0);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "frames_made"), 0);
	ck_assert_uint_le(itest_num(&r.d, "g1", "pages"), 2 * 512);
	itest_run_end(&r);
}
END_TEST

/* ---- 5. a window by time ---------------------------------------------------------------- */

struct tsv {
	uint64_t *v;
	size_t n, cap;
};

static int ts_cb(uint64_t ts, uint32_t offset, uint32_t size, void *data)
{
	struct tsv *t = data;

	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 4096;
		t->v = realloc(t->v, t->cap * sizeof(*t->v));
		if (!t->v)
			return -ENOMEM;
	}
	t->v[t->n++] = ts;
	return 0;
}

/*
 * Task tables sent ahead of FLUSHED, in pieces, reach the dump's sample
 * whole; pieces out of order are dropped and counted, and the tables last
 * received whole stay.
 */
START_TEST(task_tables_reach_the_sample)
{
	struct itest_run r;
	struct vmt_buf t = { 0 }, cmdlines = { 0 };
	char sample[4400];
	struct vmt_sample *s;

	NEED_INPUT();
	for (int i = 0; i < 3000; i++) {
		char l[64];
		int n = snprintf(l, sizeof(l), "%d task-%d\n", 1000 + i, i);
		buf_append(&cmdlines, l, (size_t)n);
	}
	meta_add(&t, "saved_cmdlines", cmdlines.data, (uint32_t)cmdlines.len);
	meta_add(&t, "saved_tgids", "1000 1000\n", 10);
	itest_run_init(&r, &in, "tasks");
	r.fc[0].tasks = t.data;
	r.fc[0].tasks_len = t.len;
	r.fc[0].tasks_piece = 4000;	/* several pieces */
	/* g2 sends them last piece first */
	r.fc[1].tasks = t.data;
	r.fc[1].tasks_len = t.len;
	r.fc[1].tasks_piece = 4000;
	r.fc[1].tasks_backwards = 1;
	itest_run_guest(&r, 0);
	itest_run_guest(&r, 1);
	itest_run_daemon(&r, "record:\n  flush_timeout: 5000ms\n", 2);
	itest_expect_streaming(&r.d, "g1", 5000);
	itest_expect_streaming(&r.d, "g2", 5000);
	itest_dump_one(&r.d, "g1", sample, sizeof(sample));
	s = itest_read_sample(sample);
	ck_assert_uint_eq(s->tasks_len, t.len);
	ck_assert_mem_eq(s->tasks, t.data, t.len);
	sample_free(s);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "msgs_unexpected"), 0);
	itest_dump_one(&r.d, "g2", sample, sizeof(sample));
	s = itest_read_sample(sample);
	ck_assert_uint_eq(s->tasks_len, 0);
	sample_free(s);
	ck_assert_uint_ge(itest_num(&r.d, "g2", "msgs_unexpected"), 1);
	ck_assert_int_ge(testd_log_count(&r.d, "guest g2: task tables: a piece at"), 1);
	printf("task_tables_reach_the_sample: %zu bytes in pieces of 4000 -> the sample's TASKS section, "
	       "byte for byte; sent last piece first: dropped, %llu messages out of place, the sample "
	       "without tables\n",
	       t.len, (unsigned long long)itest_num(&r.d, "g2", "msgs_unexpected"));
	itest_run_end(&r);
	buf_free(&t);
	buf_free(&cmdlines);
}
END_TEST

/*
 * --window 0.5: every event of the last 0.5 s and nothing before, with
 * rings of ring_size (64 MiB: the input stays raw; 2 MiB compressed: the
 * older pages are frames and the cut falls inside one).
 */
static void window_by_time(const char *ring_size, bool in_frames)
{
	struct itest_run r;
	struct vmt_page_layout l;
	struct tsv fed[ITEST_MAX_CPUS] = { 0 };
	uint64_t t_end = 0, t_min = UINT64_MAX, t_start, want[ITEST_MAX_CPUS] = { 0 }, want_total = 0;
	uint64_t got[ITEST_MAX_CPUS] = { 0 }, first[ITEST_MAX_CPUS];
	const uint64_t span = 500000000;
	char sample[4400], dat[400];
	struct itest_rec *recs;
	size_t nrecs;
	struct vmt_sample *s;

	NEED_INPUT();
	page_layout_default(&l, PS);
	for (unsigned c = 0; c < in.ncpus; c++) {
		for (size_t i = 0; i < in.npages[c]; i++)
			ck_assert_int_eq(page_walk(&l, in.pages[c] + i * PS, ts_cb, &fed[c]), 0);
		for (size_t i = 0; i < fed[c].n; i++) {
			t_end = VMT_MAX(t_end, fed[c].v[i]);
			t_min = VMT_MIN(t_min, fed[c].v[i]);
		}
	}
	if (t_end - t_min < span + span / 5)
		VMT_SKIP("the input spans %.3f s: too short for a 0.5 s window", (t_end - t_min) / 1e9);
	t_start = t_end - span;
	for (unsigned c = 0; c < in.ncpus; c++) {
		for (size_t i = 0; i < fed[c].n; i++)
			want[c] += fed[c].v[i] >= t_start && fed[c].v[i] <= t_end;
		want_total += want[c];
		first[c] = UINT64_MAX;
	}

	itest_run_init(&r, &in, "window");
	if (in_frames)
		r.fc[0].pages_per_sec = 1000;	/* a guest's pace: the compressor keeps up */
	itest_run_guest(&r, 0);
	snprintf(dat, sizeof(dat), "record:\n  ring_size: %s\n  flush_timeout: 5000ms\n", ring_size);
	itest_run_daemon(&r, dat, 1);
	itest_expect_streaming(&r.d, "g1", 5000);
	itest_expect_pages_in(&r.d, "g1", fed_pages());
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg[0], 10000), 0);
	if (in_frames)
		expect_frames_settled(&r, fed_pages());
	itest_dump_one(&r.d, "--window 0.5", sample, sizeof(sample));

	s = itest_read_sample(sample);
	if (in_frames) {
		uint64_t fp = 0;

		for (unsigned c = 0; c < in.ncpus; c++)
			fp += s->cpus[c].frame_pages;
		ck_assert_msg(fp > 0, "no page of the window came from a frame");
	}
	for (unsigned c = 0; c < in.ncpus; c++) {
		if (!want[c])
			continue;
		ck_assert_msg(s->cpus[c].first_ts >= t_start, "cpu%u: sample starts %lld ns before the window",
			      c, (long long)(t_start - s->cpus[c].first_ts));
		ck_assert_uint_le(s->cpus[c].last_ts, t_end);
		ck_assert_msg(s->cpus[c].events == want[c], "cpu%u: the sample counts %llu events, %llu fed in the window",
			      c, (unsigned long long)s->cpus[c].events, (unsigned long long)want[c]);
	}
	sample_free(s);

	snprintf(dat, sizeof(dat), "%s/window.dat", r.dir);
	ck_assert_int_eq(itest_merge(&r.d, sample, dat), 0);
	ck_assert_int_eq(itest_trace_records(dat, &recs, &nrecs), 0);
	for (size_t i = 0; i < nrecs; i++) {
		int c = recs[i].cpu;
		ck_assert_msg(recs[i].ts >= t_start && recs[i].ts <= t_end,
			      "cpu%d: event at %llu outside [%llu, %llu]", c,
			      (unsigned long long)recs[i].ts, (unsigned long long)t_start,
			      (unsigned long long)t_end);
		ck_assert(c >= 0 && c < (int)in.ncpus);
		got[c]++;
		first[c] = VMT_MIN(first[c], recs[i].ts);
	}
	for (unsigned c = 0; c < in.ncpus; c++) {
		ck_assert_msg(got[c] == want[c], "cpu%u: %llu events decoded, %llu fed in the window", c,
			      (unsigned long long)got[c], (unsigned long long)want[c]);
		ck_assert(!got[c] || first[c] >= t_start);
	}
	ck_assert_uint_eq(nrecs, want_total);
	printf("dump_window_by_time (rings of %s%s): %llu of %llu events in the last 0.5 s of %.3f s\n",
	       ring_size, in_frames ? ", cut inside a frame" : "", (unsigned long long)want_total,
	       (unsigned long long)fed_events(), (t_end - t_min) / 1e9);
	free(recs);
	for (unsigned c = 0; c < in.ncpus; c++)
		free(fed[c].v);
	itest_run_end(&r);
}

START_TEST(dump_window_by_time)
{
	window_by_time("64MiB", false);
}
END_TEST

START_TEST(dump_window_by_time_in_frames)
{
	window_by_time("2MiB", true);
}
END_TEST

/* ---- SAMPLES: answered from the writer's index ------------------------------------------- */

/* `vmtracectl --json samples ARGS` into out, parsed into *root; its "samples" array. */
static const struct ijson *samples_of(struct itest_run *r, const char *args, char *out, size_t n,
				      struct ijson *root)
{
	char err[128];
	const struct ijson *a;
	int rc = itest_ctl(&r->d, out, n, "--json samples %s", args);

	ck_assert_msg(rc == 0, "vmtracectl samples %s: exit %d: %s (log: %s)", args, rc, out, r->d.log);
	ck_assert_msg(ijson_parse(out, root, err, sizeof(err)) == 0, "%s: %s", err, out);
	a = ijson_get(root, "samples");
	ck_assert_ptr_nonnull(a);
	ck_assert_int_eq(a->type, IJ_ARR);
	return a;
}

/* The answer says what a scan of the folder (the old way) says, in its order. */
static void samples_as_scanned(struct itest_run *r, const struct ijson *a)
{
	struct vmt_store st;

	ck_assert_int_eq(retention_list(r->d.state, NULL, &st), 0);
	ck_assert_uint_eq(a->n, st.nsamples);
	for (size_t i = 0; i < st.nsamples; i++) {
		const struct vmt_store_sample *sm = &st.samples[i];
		const struct ijson *e = &a->items[i];

		ck_assert_str_eq(ijson_str(e, "path"), sm->path);
		ck_assert_str_eq(ijson_str(e, "guest"), st.guests[sm->guest].name);
		ck_assert_uint_eq(ijson_u64(e, "created_ns"), sm->created_ns);
		ck_assert_uint_eq(ijson_u64(e, "bytes"), sm->bytes);
		if (sm->info_error) {
			ck_assert_str_eq(ijson_str(e, "message"), sm->why);
			ck_assert_ptr_null(ijson_get(e, "aux_version"));
		} else {
			ck_assert_uint_eq(ijson_u64(e, "aux_version"), sm->aux_version);
			ck_assert_ptr_null(ijson_get(e, "message"));
			if (sm->ntriggers)
				ck_assert_str_eq(ijson_str(e, "reason"), sm->triggers[0].reason);
		}
	}
	retention_store_free(&st);
}

/*
 * SAMPLES is answered from an index the writer keeps (built by the start's
 * retention pass, updated by each sample and each pass), with no file
 * opened in the loop: a sample is listed once its dump is answered, one
 * the retention rules deleted is not, the answer is the one a scan gives,
 * and it stays the same while the state folder cannot even be opened.
 */
START_TEST(samples_from_the_index)
{
	struct itest_run r;
	char path[800], moved[800], stranger[900], s1[4400], s2[4400], s3[4400];
	char *out = malloc(65536), *before = malloc(65536);
	const struct ijson *a;
	struct ijson root;
	struct stat st;

	NEED_INPUT();
	itest_run_init(&r, &in, "sindex");
	/* a file that looks like a sample, there before the daemon */
	snprintf(path, sizeof(path), "%s/state", r.dir);
	ck_assert_int_eq(mkdir(path, 0750), 0);
	snprintf(path, sizeof(path), "%s/state/g1", r.dir);
	ck_assert_int_eq(mkdir(path, 0750), 0);
	snprintf(stranger, sizeof(stranger), "%s/g1-20200101T000000.000000Z.vmts", path);
	ck_assert_int_eq(itest_write_file(stranger, "not a sample\n"), 0);
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "record:\n  ring_size: 16MiB\nretention:\n  max_samples: 2\n", 1);
	itest_expect_streaming(&r.d, "g1", 5000);
	itest_expect_pages_in(&r.d, "g1", fed_pages());

	/* the start's pass saw it, and could not read it */
	a = samples_of(&r, "", out, 65536, &root);
	ck_assert_uint_eq(a->n, 1);
	ck_assert_str_eq(ijson_str(&a->items[0], "path"), stranger);
	ck_assert_ptr_nonnull(ijson_str(&a->items[0], "message"));
	samples_as_scanned(&r, a);
	ijson_free(&root);

	/* listed as soon as the dump is answered, newest first */
	itest_dump_one(&r.d, "--reason first", s1, sizeof(s1));
	a = samples_of(&r, "", out, 65536, &root);
	ck_assert_uint_eq(a->n, 2);
	ck_assert_str_eq(ijson_str(&a->items[0], "path"), s1);
	ck_assert_ptr_nonnull(strstr(ijson_str(&a->items[0], "reason"), "first (vmtracectl"));
	ck_assert_uint_eq(ijson_u64(&a->items[0], "aux_version"), 1);
	ck_assert_int_eq(stat(s1, &st), 0);
	ck_assert_uint_eq(ijson_u64(&a->items[0], "bytes"), (uint64_t)st.st_size);
	ck_assert_str_eq(ijson_str(&a->items[1], "path"), stranger);
	samples_as_scanned(&r, a);
	ijson_free(&root);

	/* max_samples 2: the oldest goes with each new one, and leaves the list */
	itest_dump_one(&r.d, "--reason second", s2, sizeof(s2));
	ck_assert_int_ne(access(stranger, F_OK), 0);
	a = samples_of(&r, "", out, 65536, &root);
	ck_assert_uint_eq(a->n, 2);
	ck_assert_str_eq(ijson_str(&a->items[0], "path"), s2);
	ck_assert_str_eq(ijson_str(&a->items[1], "path"), s1);
	ijson_free(&root);
	itest_dump_one(&r.d, "--reason third", s3, sizeof(s3));
	ck_assert_int_ne(access(s1, F_OK), 0);
	a = samples_of(&r, "g1", out, 65536, &root);
	ck_assert_uint_eq(a->n, 2);
	ck_assert_str_eq(ijson_str(&a->items[0], "path"), s3);
	ck_assert_ptr_nonnull(strstr(ijson_str(&a->items[0], "reason"), "third (vmtracectl"));
	ck_assert_str_eq(ijson_str(&a->items[1], "path"), s2);
	samples_as_scanned(&r, a);
	ijson_free(&root);
	a = samples_of(&r, "g2", out, 65536, &root);
	ck_assert_uint_eq(a->n, 0);
	ijson_free(&root);

	/* the point: the state folder moved away and a file in its place
	 * (retention passes meanwhile cannot scan it and leave the index be);
	 * SAMPLES, in text and JSON, says exactly what it said */
	ck_assert_int_eq(itest_ctl(&r.d, before, 65536, "samples"), 0);
	snprintf(moved, sizeof(moved), "%s/state.away", r.dir);
	ck_assert_int_eq(rename(r.d.state, moved), 0);
	ck_assert_int_eq(itest_write_file(r.d.state, "not a folder\n"), 0);
	ck_assert_int_eq(itest_ctl(&r.d, out, 65536, "samples"), 0);
	ck_assert_str_eq(out, before);
	ck_assert_ptr_nonnull(strstr(out, s3));
	ck_assert_int_eq(itest_ctl(&r.d, before, 65536, "--json samples"), 0);
	ck_assert_ptr_nonnull(strstr(before, s2));
	ck_assert_int_eq(unlink(r.d.state), 0);
	ck_assert_int_eq(rename(moved, r.d.state), 0);
	ck_assert_int_eq(itest_ctl(&r.d, out, 65536, "--json samples"), 0);
	ck_assert_str_eq(out, before);
	free(out);
	free(before);
	itest_run_end(&r);
}
END_TEST

/* ---- 6. --post: recording goes on after the request ------------------------------------- */

START_TEST(dump_post_trigger)
{
	struct itest_run r;
	char sample[8192], out[8192];
	uint64_t held = 0, last0 = 0, t0, took, arrived, last = 0;
	const int post_ms = test_deadline_ms(3000);
	struct vmt_sample *s;
	struct ijson root;
	const size_t hold = 100;
	FILE *dump;
	int rc;

	NEED_INPUT();
	/*
	 * The guest sends 100 pages per CPU and waits; the dump is asked for
	 * with --post; once the daemon has the request (its trigger counted),
	 * the guest sends the rest. All of it arrives in the post window (on
	 * an idle machine within tens of ms of a 3 s window), so the sample
	 * holds every page, and the answer comes no sooner than --post.
	 */
	itest_run_init(&r, &in, "post");
	r.fc[0].hold_after = hold;
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "record:\n  ring_size: 64MiB\n  flush_timeout: 5000ms\n", 1);
	itest_expect_streaming(&r.d, "g1", 5000);
	for (unsigned c = 0; c < in.ncpus; c++)
		held += VMT_MIN(hold, in.npages[c]);
	itest_expect_pages_in(&r.d, "g1", held);
	ck_assert_msg(held < fed_pages(), "the input has no pages past the gate");
	ck_assert_int_eq(itest_status(&r.d, &root), 0);
	last0 = ijson_u64(itest_guest(&root, "g1"), "last_ts");
	ijson_free(&root);

	t0 = itest_now_ms();
	snprintf(out, sizeof(out), "dump --post %d.%03d", post_ms / 1000, post_ms % 1000);
	dump = testd_ctl_begin(&r.d, out);
	ck_assert_ptr_nonnull(dump);
	ck_assert_msg(itest_wait_num_ge(&r.d, NULL, "triggers", 1, 10000),
		      "the daemon did not take the dump request (log: %s)", r.d.log);
	ck_assert_int_eq(fakeguest_release(&r.fg[0]), 0);
	itest_expect_pages_in(&r.d, "g1", fed_pages());
	arrived = itest_now_ms() - t0;
	rc = testd_ctl_end(dump, out, sizeof(out));
	took = itest_now_ms() - t0;
	ck_assert_msg(rc == 0 && strstr(out, ".vmts\n"), "dump --post failed (%d): %s (log: %s)", rc,
		      out, r.d.log);
	*strchr(out, '\n') = 0;
	snprintf(sample, sizeof(sample), "%s", out);
	ck_assert_msg(took >= (uint64_t)post_ms, "dump --post %d ms answered after %llu ms", post_ms,
		      (unsigned long long)took);
	ck_assert_msg(arrived < (uint64_t)post_ms,
		      "the pages after the gate took %llu ms to arrive, past --post (%d ms): "
		      "a hang, or set VMT_TEST_TIMEOUT_SCALE",
		      (unsigned long long)arrived, post_ms);

	s = itest_read_sample(sample);
	ck_assert_msg(sample_pages(s) == fed_pages(),
		      "sample holds %llu pages: %llu before the request, %llu sent in the post window",
		      (unsigned long long)sample_pages(s), (unsigned long long)held,
		      (unsigned long long)fed_pages());
	for (uint32_t c = 0; c < s->ncpus; c++)
		last = VMT_MAX(last, s->cpus[c].last_ts);
	ck_assert_uint_gt(last, last0);
	ck_assert_uint_eq(s->ntriggers, 1);
	sample_free(s);
	printf("dump_post_trigger: %llu pages held at the request, all %llu in the sample; the rest "
	       "arrived %llu ms in, the answer %llu ms in (--post %d ms)\n",
	       (unsigned long long)held, (unsigned long long)fed_pages(), (unsigned long long)arrived,
	       (unsigned long long)took, post_ms);
	itest_run_end(&r);
}
END_TEST

/* ---- 7. coalescing, cooldown, rate limit ------------------------------------------------ */

START_TEST(triggers_coalesce)
{
	struct itest_run r;
	char sample[4400], **list;
	struct vmt_sample *s;
	unsigned signals = 0, control = 0;
	uint64_t t0, took, asked;
	const int window_ms = test_deadline_ms(4000);
	char top[256];
	int n;

	NEED_INPUT();
	itest_run_init(&r, &in, "coalesce");
	itest_run_guest(&r, 0);
	snprintf(top, sizeof(top), "triggers:\n  coalesce: %dms\nrecord:\n  ring_size: 16MiB\n",
		 window_ms);
	itest_run_daemon(&r, top, 1);
	itest_expect_streaming(&r.d, "g1", 5000);
	itest_expect_pages_in(&r.d, "g1", fed_pages());

	/* each signal counted before the next is sent: pending together they would be one */
	t0 = itest_now_ms();
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(kill(r.d.pid, SIGUSR1), 0);
		ck_assert(itest_wait_num_ge(&r.d, NULL, "triggers", (uint64_t)i + 1, 10000));
	}
	asked = itest_now_ms() - t0;
	ck_assert_msg(asked < (uint64_t)window_ms - 500,
		      "the three signals took %llu ms, the coalescing window is %d ms: a hang, or set "
		      "VMT_TEST_TIMEOUT_SCALE",
		      (unsigned long long)asked, window_ms);
	itest_dump_one(&r.d, "--reason coalesced", sample, sizeof(sample));
	took = itest_now_ms() - t0;
	ck_assert_msg(took >= (uint64_t)window_ms - 100,
		      "the dump came %llu ms after the first trigger, coalesce is %d ms",
		      (unsigned long long)took, window_ms);
	usleep(300000);
	n = guest_samples(&r, "g1", &list);
	ck_assert_int_eq(n, 1);
	itest_free_list(list, n);

	s = itest_read_sample(sample);
	ck_assert_uint_eq(s->ntriggers, 4);
	for (uint32_t i = 0; i < s->ntriggers; i++) {
		if (s->triggers[i].kind == VMT_TRIGGER_SIGNAL) {
			signals++;
			ck_assert_uint_eq(s->triggers[i].pid, (uint32_t)getpid());
			ck_assert_ptr_nonnull(strstr(s->triggers[i].reason, "SIGUSR1"));
		} else if (s->triggers[i].kind == VMT_TRIGGER_CONTROL) {
			control++;
			ck_assert_ptr_nonnull(strstr(s->triggers[i].reason, "coalesced"));
		}
	}
	ck_assert_uint_eq(signals, 3);
	ck_assert_uint_eq(control, 1);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "dumps"), 1);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "triggers"), 4);
	sample_free(s);
	itest_run_end(&r);
}
END_TEST

/* A storm: 10,000 anomalies from a guest in a few seconds cost a bounded
 * number of samples (cooldown 2 s, at most 6 dumps a minute), and every
 * one of them is counted: taken into a dump or suppressed. */
START_TEST(trigger_storm_is_bounded)
{
	struct itest_run r;
	char **list;
	uint64_t taken, suppressed;
	int n;

	NEED_INPUT();
	itest_run_init(&r, &in, "storm");
	r.fc[0].triggers = 10000;
	r.fc[0].trigger_gap_ms = 0;
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "triggers:\n  coalesce: 100ms\n  cooldown: 2s\n  max_per_minute: 6\n"
			     "record:\n  ring_size: 16MiB\n",
			 1);
	itest_expect_streaming(&r.d, "g1", 5000);
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg[0], 30000), 0);
	itest_expect_triggers_counted(&r.d, 10000, 15000);
	ck_assert(ITEST_WAIT((n = guest_samples(&r, "g1", &list), itest_free_list(list, n),
			      n == (int)itest_num(&r.d, NULL, "dumps")), 10000));
	usleep(500000);
	taken = itest_num(&r.d, NULL, "triggers");
	suppressed = itest_num(&r.d, NULL, "triggers_suppressed");
	n = guest_samples(&r, "g1", &list);
	/* the storm lasts a few seconds: with a 2 s cooldown, a handful */
	ck_assert_msg(n >= 1 && n <= 6, "%d samples for a storm", n);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "dumps"), (uint64_t)n);
	ck_assert_uint_eq(taken + suppressed, 10000);
	/* what was taken is in the samples: listed, or counted as omitted */
	uint64_t served = 0;
	for (int i = 0; i < n; i++) {
		struct vmt_sample *sm = itest_read_sample(list[i]);
		served += sm->ntriggers + sm->triggers_omitted;
		sample_free(sm);
	}
	itest_free_list(list, n);
	ck_assert_uint_eq(served, taken);
	itest_run_end(&r);
}
END_TEST

START_TEST(guest_triggers_cooldown)
{
	struct itest_run r;
	char **list;
	struct vmt_sample *s;
	uint64_t taken, suppressed;
	int n;

	NEED_INPUT();
	itest_run_init(&r, &in, "cooldown");
	r.fc[0].triggers = 20;
	r.fc[0].trigger_gap_ms = 20;
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "triggers:\n  coalesce: 0ms\n  cooldown: 5s\n  max_per_minute: 0\n"
		       "record:\n  ring_size: 16MiB\n",
		   1);
	itest_expect_streaming(&r.d, "g1", 5000);
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg[0], 15000), 0);
	itest_expect_triggers_counted(&r.d, 20, 5000);
	ck_assert(ITEST_WAIT((n = guest_samples(&r, "g1", &list), itest_free_list(list, n), n >= 1), 5000));
	usleep(500000);	/* nothing more comes */
	n = guest_samples(&r, "g1", &list);
	ck_assert_msg(n == 1, "%d samples with a 5 s cooldown", n);
	s = itest_read_sample(list[0]);
	itest_free_list(list, n);

	taken = itest_num(&r.d, NULL, "triggers");
	suppressed = itest_num(&r.d, NULL, "triggers_suppressed");
	ck_assert_uint_eq(itest_num(&r.d, NULL, "dumps"), 1);
	ck_assert_uint_ge(suppressed, 1);
	ck_assert_uint_eq(s->ntriggers, taken);
	ck_assert_uint_eq(itest_num(&r.d, "g1", "triggers_suppressed"), suppressed);
	for (uint32_t i = 0; i < s->ntriggers; i++) {
		ck_assert_uint_eq(s->triggers[i].kind, VMT_TRIGGER_GUEST);
		ck_assert_ptr_nonnull(strstr(s->triggers[i].reason, "fake trigger"));
	}
	ck_assert_str_eq(s->triggers[0].reason, "guest: fake trigger 0");
	sample_free(s);
	itest_run_end(&r);
}
END_TEST

START_TEST(guest_triggers_rate_limit)
{
	struct itest_run r;
	char **list;
	uint64_t ids[64];
	int nids = 0;

	NEED_INPUT();
	itest_run_init(&r, &in, "ratelimit");
	/* paced slower than a dump takes, so that most find no dump open to join */
	for (int i = 0; i < 2; i++) {
		r.fc[i].triggers = 8;
		r.fc[i].trigger_gap_ms = 250;
		itest_run_guest(&r, i);
	}
	itest_run_daemon(&r, "triggers:\n  coalesce: 0ms\n  cooldown: 0s\n  max_per_minute: 2\n"
		       "record:\n  ring_size: 16MiB\n",
		   2);
	itest_expect_streaming(&r.d, "g1", 5000);
	itest_expect_streaming(&r.d, "g2", 5000);
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg[0], 15000), 0);
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg[1], 15000), 0);
	itest_expect_triggers_counted(&r.d, 16, 5000);
	usleep(500000);
	ck_assert_uint_ge(itest_num(&r.d, NULL, "dumps"), 1);
	ck_assert_uint_le(itest_num(&r.d, NULL, "dumps"), 2);
	ck_assert_uint_ge(itest_num(&r.d, NULL, "triggers_suppressed"), 1);
	/* each trigger held back is counted at the guest that sent it too */
	ck_assert_uint_eq(itest_num(&r.d, "g1", "triggers_suppressed") +
				  itest_num(&r.d, "g2", "triggers_suppressed"),
			  itest_num(&r.d, NULL, "triggers_suppressed"));
	/* every sample belongs to one of at most two dumps */
	for (int gi = 0; gi < 2; gi++) {
		char name[8];
		int n;

		snprintf(name, sizeof(name), "g%d", gi + 1);
		n = guest_samples(&r, name, &list);
		for (int i = 0; i < n; i++) {
			struct vmt_sample *s = itest_read_sample(list[i]);
			bool seen = false;

			for (int k = 0; k < nids; k++)
				seen |= ids[k] == s->dump_id;
			if (!seen && nids < 64)
				ids[nids++] = s->dump_id;
			sample_free(s);
		}
		itest_free_list(list, n);
	}
	ck_assert_msg(nids >= 1 && nids <= 2, "samples of %d dumps with max_per_minute 2", nids);
	itest_run_end(&r);
}
END_TEST

/* ---- 8. a full disk ------------------------------------------------------------------- */

static char *full_dir;		/* the test folder; DIR/state is a small tmpfs */
static bool full_mounted;

static void full_setup(void)
{
	char state[400];

	full_mounted = false;
	full_dir = NULL;
	if (!test_have_root())
		return;
	full_dir = test_mkdtemp("diskfull");
	if (!full_dir)
		return;
	snprintf(state, sizeof(state), "%s/state", full_dir);
	mkdir(state, 0755);
	full_mounted = mount("tmpfs", state, "tmpfs", 0, "size=16m,mode=0755") == 0;
}

static void full_teardown(void)
{
	char state[400];

	if (!full_dir)
		return;
	snprintf(state, sizeof(state), "%s/state", full_dir);
	if (full_mounted && umount(state) < 0)
		umount2(state, MNT_DETACH);
	full_mounted = false;
	test_rmtree(full_dir);
	free(full_dir);
	full_dir = NULL;
}

/* Fill the file system under path up to the last byte; 0 or -errno. */
static int fill_up(const char *path)
{
	static uint8_t chunk[65536];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	size_t sz = sizeof(chunk);

	if (fd < 0)
		return -errno;
	memset(chunk, 0x5a, sizeof(chunk));
	while (sz) {
		if (write(fd, chunk, sz) < 0) {
			if (errno != ENOSPC)
				return -errno;
			sz /= 2;
		}
	}
	close(fd);
	return 0;
}

START_TEST(dump_on_full_disk)
{
	struct itest_run r;
	char gdir[400], filler[400], out[4096], sample[4400], **list;
	uint64_t p1;
	int n;

	NEED_INPUT();
	if (!full_mounted)
		VMT_SKIP("not root: cannot mount a small tmpfs for the state folder");
	itest_run_init_in(&r, &in, full_dir);	/* the fixture's folder */
	itest_run_pages(&r, &in, 0, 3000);
	r.fc[0].pages_per_sec = 100;
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "record:\n  ring_size: 4MiB\n  flush_timeout: 5000ms\n", 1);
	itest_expect_streaming(&r.d, "g1", 5000);
	snprintf(gdir, sizeof(gdir), "%s/g1", r.d.state);
	/* a first dump writes the aux file: then the sample alone meets the
	 * full disk (aux_on_full_disk has the aux file meet it) */
	itest_dump_one(&r.d, "", sample, sizeof(sample));
	ck_assert_msg(file_exists(gdir, "aux-000001.vmtaux"), "no aux file on the small tmpfs (log: %s)",
		      r.d.log);

	snprintf(filler, sizeof(filler), "%s/filler", r.d.state);
	ck_assert_int_eq(fill_up(filler), 0);
	p1 = itest_num(&r.d, "g1", "pages_in");
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "dump 2>&1"), 1);
	ck_assert_msg(strstr(out, "No space left on device") != NULL, "dump on a full disk said: %s", out);
	ck_assert_int_eq(testd_log_count(&r.d, "cannot write sample"), 1);
	ck_assert_int_eq(testd_log_count(&r.d, "cannot write aux file"), 0);
	ck_assert_int_ge(testd_log_count(&r.d, "No space left on device"), 1);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "dump_errors"), 1);
	n = itest_samples(gdir, &list);
	ck_assert_msg(n == 1, "%d samples under a final name after a failed write (the first dump's "
		      "is the one)", n);
	itest_free_list(list, n);
	ck_assert_int_eq(itest_count_tmp(gdir), 0);
	/* recording goes on */
	ck_assert_msg(itest_wait_num_ge(&r.d, "g1", "pages_in", p1 + 50, 5000),
		      "pages_in stuck at %llu after the failed dump",
		      (unsigned long long)itest_num(&r.d, "g1", "pages_in"));
	ck_assert(itest_state_is(&r.d, "g1", "streaming"));

	/* room again: the next dump is written */
	ck_assert_int_eq(unlink(filler), 0);
	itest_dump_one(&r.d, "", sample, sizeof(sample));
	sample_free(itest_read_sample(sample));
	ck_assert_uint_eq(itest_num(&r.d, NULL, "dump_errors"), 1);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "dumps"), 3);
	ck_assert_int_eq(itest_count_tmp(gdir), 0);
	itest_run_end(&r);	/* the fixture unmounts, then removes the folder */
}
END_TEST

/* The aux file cannot be written when the first dump needs it: that
 * sample fails with it; once there is room, samples must still come with
 * the aux file they name, or no one can ever decode them. */
START_TEST(aux_on_full_disk)
{
	struct itest_run r;
	char gdir[400], filler[400], sample[4400], aux[64], dat[400], out[4096], **list;
	uint64_t per_cpu[ITEST_MAX_CPUS], total;
	struct vmt_sample *s;
	int n;

	NEED_INPUT();
	if (!full_mounted)
		VMT_SKIP("not root: cannot mount a small tmpfs for the state folder");
	itest_run_init_in(&r, &in, full_dir);	/* the fixture's folder */
	snprintf(filler, sizeof(filler), "%s/state/filler", r.dir);
	ck_assert_int_eq(fill_up(filler), 0);
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "record:\n  ring_size: 16MiB\n  flush_timeout: 5000ms\n", 1);
	itest_expect_streaming(&r.d, "g1", 5000);
	itest_expect_pages_in(&r.d, "g1", fed_pages());
	/* nothing written yet: no sample asked for the aux file */
	ck_assert_int_eq(testd_log_count(&r.d, "cannot write aux file"), 0);
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "dump 2>&1"), 1);
	ck_assert_msg(strstr(out, "No space left on device") != NULL, "dump on a full disk said: %s", out);
	ck_assert_int_eq(testd_log_count(&r.d, "cannot write aux file"), 1);
	ck_assert_msg(testd_log_count(&r.d, "could not be written") == 1,
		      "the sample did not fail with its aux file (log: %s)", r.d.log);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "dump_errors"), 1);
	snprintf(gdir, sizeof(gdir), "%s/g1", r.d.state);
	n = itest_samples(gdir, &list);
	itest_free_list(list, n);
	ck_assert_int_eq(n, 0);
	ck_assert_int_eq(itest_count_tmp(gdir), 0);

	ck_assert_int_eq(unlink(filler), 0);
	itest_dump_one(&r.d, "", sample, sizeof(sample));
	s = itest_read_sample(sample);
	snprintf(aux, sizeof(aux), "aux-%06u.vmtaux", s->aux_version);
	sample_free(s);
	ck_assert_msg(file_exists(gdir, aux), "%s names %s, which was never written (log: %s)", sample,
		      aux, r.d.log);
	snprintf(dat, sizeof(dat), "%s/aux.dat", r.dir);
	ck_assert_int_eq(itest_merge(&r.d, sample, dat), 0);
	ck_assert_int_eq(tdread_counts(dat, per_cpu, ITEST_MAX_CPUS, &total), 0);
	ck_assert_uint_eq(total, fed_events());
	itest_run_end(&r);
}
END_TEST

/* ---- 9. SIGKILL in the middle of a dump ----------------------------------------------------- */

/*
 * Two guests ask for dumps of themselves as fast as the budgets let them;
 * then the third guest's QEMU dies. The detector's dump of it must still
 * happen: the guests may not take the share of the global budget kept for
 * the detectors (and for guests that have caused no dump for a minute).
 */
START_TEST(guests_cannot_starve_a_detector)
{
	struct itest_run r;
	char **list, pf[400], top[4096], g[600];
	uint64_t suppressed;
	int n;
	FILE *f;

	NEED_INPUT();
	if (!test_have_root() || access("/sys/kernel/btf/vmlinux", R_OK))
		VMT_SKIP("the detectors need root and BTF");
	itest_run_init(&r, &in, "starve");
	for (int i = 0; i < 3; i += 2) {
		for (unsigned c = 0; c < in.ncpus; c++)
			r.fc[i].npages[c] = VMT_MIN(in.npages[c], 8);
		/* they ask until the budget has refused one: however fast the
		 * dumps go, the flood outlasts them */
		r.fc[i].triggers = 1;
		r.fc[i].triggers_until_release = 1;
		r.fc[i].trigger_gap_ms = 20;
	}
	for (int i = 0; i < 3; i++)
		itest_run_guest(&r, i);
	snprintf(pf, sizeof(pf), "%s/qemu2.pid", r.dir);
	f = fopen(pf, "w");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "%d\n", (int)r.fg[1].pid);
	fclose(f);
	snprintf(top, sizeof(top),
		 "record:\n  ring_size: 8MiB\n  flush_timeout: 5000ms\n"
		 "triggers:\n  coalesce: 0ms\n  cooldown: 0ms\n  max_per_minute: 4\n"
		 "  per_guest_per_minute: 4\nguests:\n");
	for (int i = 0; i < 3; i++) {
		itest_guest_yaml(g, sizeof(g), &r, i);
		strncat(top, g, sizeof(top) - strlen(top) - 1);
		if (i == 1) {
			snprintf(g, sizeof(g), "    pidfile: %s\n", pf);
			strncat(top, g, sizeof(top) - strlen(top) - 1);
		}
	}
	ck_assert_int_eq(testd_start(&r.d, r.dir, top), 0);
	for (int i = 0; i < 3; i++)
		itest_expect_streaming(&r.d, (const char *[]){ "g1", "g2", "g3" }[i], 5000);
	/* the guests' flood meets the budget, then stops */
	ck_assert_msg(ITEST_WAIT(itest_num(&r.d, "g1", "triggers_suppressed") +
					 itest_num(&r.d, "g3", "triggers_suppressed") >= 1,
				 60000),
		      "no TRIGGER of g1 or g3 was suppressed (log: %s)", r.d.log);
	ck_assert_int_eq(fakeguest_release(&r.fg[0]), 0);
	ck_assert_int_eq(fakeguest_release(&r.fg[2]), 0);
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg[0], itest_hang_ms(20000)), 0);
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg[2], itest_hang_ms(20000)), 0);
	suppressed = itest_num(&r.d, NULL, "triggers_suppressed");
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, "detectors: watching 1 QEMU processes") >= 1,
				 20000),
		      "the detectors never watched g2's process (log: %s)", r.d.log);
	kill(r.fg[1].pid, SIGSEGV);
	ck_assert_msg(ITEST_WAIT((n = guest_samples(&r, "g2", &list), itest_free_list(list, n), n >= 1),
				 10000),
		      "the detector's dump of g2 did not happen (log: %s)", r.d.log);
	printf("guests_cannot_starve_a_detector: g1 and g3 flooded TRIGGERs: %llu dumps of them, "
	       "%llu suppressed; g2's QEMU died: its sample written\n",
	       (unsigned long long)(itest_num(&r.d, NULL, "dumps") - 1),
	       (unsigned long long)suppressed);
	r.fg_on[1] = false;	/* it is dead */
	itest_run_end(&r);
}
END_TEST

/*
 * A reboot storm: the guest comes back with a new boot id again and again,
 * a few pages each time. Each new boot would dump the old window; those
 * dumps are the guest's own and wait for its cooldown and budget: the rest
 * are counted (suppressed, pages discarded), and every sample written has
 * its aux file. Aux files come with samples only: as many as the samples
 * (each old window its own boot), not one per boot.
 */
START_TEST(reboot_storm_is_bounded)
{
	struct itest_run r;
	char **list, boot[64], gdir[400];
	const unsigned cycles = 60;
	uint64_t t0, ms, discarded, suppressed, sampled = 0;
	struct ijson root;
	int n, nsamples, naux;

	NEED_INPUT();
	itest_run_init(&r, &in, "rstorm");
	for (unsigned c = 0; c < in.ncpus; c++)
		r.fc[0].npages[c] = VMT_MIN(in.npages[c], 4);
	snprintf(boot, sizeof(boot), "boot-0");
	r.fc[0].boot_id = boot;
	itest_run_guest(&r, 0);
	/* sessions unbounded: here the dumps of the old windows are bounded;
	 * max_aux unbounded: the aux files are bounded by the samples alone */
	itest_run_daemon(&r, "record:\n  ring_size: 4MiB\n  flush_timeout: 5000ms\n"
			 "  sessions_per_minute: 0\n"
			 "triggers:\n  coalesce: 0ms\n  cooldown: 2s\n  per_guest_per_minute: 4\n"
			 "retention:\n  max_aux: 0\n", 1);
	t0 = itest_now_ms();
	for (unsigned i = 0; i < cycles; i++) {
		ck_assert_msg(itest_wait_num_ge(&r.d, "g1", "sessions", i + 1, 10000),
			      "cycle %u: sessions %llu (log: %s)", i,
			      (unsigned long long)itest_num(&r.d, "g1", "sessions"), r.d.log);
		ck_assert_int_eq(fakeguest_wait_sent(&r.fg[0], 10000), 0);
		itest_expect_pages_in(&r.d, "g1", (i + 1) * fed_pages_of(&r.fc[0]));
		itest_run_guest_stop(&r, 0);
		snprintf(boot, sizeof(boot), "boot-%u", i + 1);
		itest_run_guest(&r, 0);
	}
	/* the last boot streamed its pages: the fate of the one before it (a
	 * dump, or held back) is decided, at its META_END */
	ck_assert_int_eq(fakeguest_wait_sent(&r.fg[0], 10000), 0);
	itest_expect_pages_in(&r.d, "g1", (cycles + 1) * fed_pages_of(&r.fc[0]));
	ms = itest_now_ms() - t0;
	snprintf(gdir, sizeof(gdir), "%s/g1", r.d.state);
	/* what was started is written */
	ck_assert(ITEST_WAIT((n = guest_samples(&r, "g1", &list), itest_free_list(list, n),
			      (uint64_t)n == itest_num(&r.d, NULL, "dumps")), 10000));
	nsamples = itest_samples_check(gdir);
	n = guest_samples(&r, "g1", &list);
	for (int i = 0; i < n; i++) {
		struct vmt_sample *s = itest_read_sample(list[i]);
		char aux[64];

		snprintf(aux, sizeof(aux), "aux-%06u.vmtaux", s->aux_version);
		ck_assert_msg(file_exists(gdir, aux), "%s: no %s beside it", list[i], aux);
		sampled += sample_pages(s);
		sample_free(s);
	}
	itest_free_list(list, n);
	/* 61 boots, each with its own aux version: on disk only those a
	 * sample needed, one per sample (each sample is an old window of its
	 * own boot); the live session's waits for a sample of its own */
	naux = aux_files(gdir);
	ck_assert_msg(naux == nsamples, "%d aux files for %d samples after %u boots (log: %s)", naux,
		      nsamples, cycles + 1, r.d.log);
	/* and no more were ever written (retention would delete those no
	 * sample names, but not undo the writes) */
	ck_assert_msg(testd_log_count(&r.d, ".vmtaux (") == nsamples,
		      "%d aux files written for %d samples (log: %s)",
		      testd_log_count(&r.d, ".vmtaux ("), nsamples, r.d.log);
	/* one snapshot: two requests could fall on either side of a change */
	ck_assert_int_eq(itest_status(&r.d, &root), 0);
	discarded = ijson_u64(itest_guest(&root, "g1"), "pages_discarded");
	suppressed = ijson_u64(itest_guest(&root, "g1"), "triggers_suppressed");
	ijson_free(&root);
	/* 4 a minute, and no two within 2 s */
	ck_assert_msg((uint64_t)nsamples <= VMT_MIN(4 + ms * 4 / 60000 + 1, ms / 2000 + 1),
		      "%d samples in %llu ms of reboots", nsamples, (unsigned long long)ms);
	ck_assert_uint_ge(nsamples, 1);
	ck_assert_uint_eq(suppressed + (uint64_t)nsamples, cycles);
	/* nothing lost silently: every old boot's pages written or counted */
	ck_assert_msg(sampled + discarded == cycles * fed_pages_of(&r.fc[0]),
		      "%llu pages in samples + %llu discarded, %llu of old boots",
		      (unsigned long long)sampled, (unsigned long long)discarded,
		      (unsigned long long)(cycles * fed_pages_of(&r.fc[0])));
	printf("reboot_storm_is_bounded: %u new boots in %.1f s: %d samples of old windows, each "
	       "with its aux (%d aux files); %llu held back (cooldown 2 s, 4 a minute), %llu pages "
	       "discarded; %llu + %llu of %llu old pages accounted for\n",
	       cycles, ms / 1000.0, nsamples, naux, (unsigned long long)suppressed,
	       (unsigned long long)discarded, (unsigned long long)sampled,
	       (unsigned long long)discarded,
	       (unsigned long long)(cycles * fed_pages_of(&r.fc[0])));
	itest_run_end(&r);
}
END_TEST

START_TEST(sigkill_during_dump)
{
	struct itest_run r;
	const uint64_t ring = 32u << 20;	/* x 2 CPUs: 64 MiB of rings */
	uint64_t cap = ring / PS * in.ncpus, t0, dump_ms;
	struct testd_opts o = { .append_log = 1 };
	char gdir[400], sample[4400], top[256];
	/* kill this long after SIGUSR1, or after the writer's temporary appears */
	struct {
		int ms;
		bool after_tmp;
	} kills[16];
	int nk = 0, mid_write = 0, complete = 0;

	NEED_INPUT();
	itest_run_init(&r, &in, "sigkill");
	itest_run_pages(&r, &in, 0, ring / PS + 64);
	itest_run_guest(&r, 0);
	/* no coalescing delay: the kills land in the flush, the freeze, the write */
	/* raw rings: full at a known page count, and the heaviest write */
	snprintf(top, sizeof(top),
		 "triggers:\n  coalesce: 0ms\nrecord:\n  ring_size: %lluMiB\n  compression: off\n"
		 "  flush_timeout: 5000ms\n", (unsigned long long)(ring >> 20));
	itest_run_daemon(&r, top, 1);
	snprintf(gdir, sizeof(gdir), "%s/g1", r.d.state);
	itest_expect_streaming(&r.d, "g1", 5000);
	ck_assert_msg(itest_wait_num_ge(&r.d, "g1", "pages", cap, 30000), "ring not full: %llu of %llu",
		      (unsigned long long)itest_num(&r.d, "g1", "pages"), (unsigned long long)cap);

	/* how long a whole dump takes here, to aim some kills at its end too */
	t0 = itest_now_ms();
	itest_dump_one(&r.d, "", sample, sizeof(sample));
	dump_ms = itest_now_ms() - t0;
	{
		struct vmt_sample *s = itest_read_sample(sample);
		ck_assert_uint_eq(sample_pages(s), cap);
		sample_free(s);
	}
	for (int i = 0; i < 10; i++)
		kills[nk++] = (typeof(kills[0])){ 1 + i * 49 / 9, false };
	kills[nk++] = (typeof(kills[0])){ 0, true };
	kills[nk++] = (typeof(kills[0])){ 20, true };
	kills[nk++] = (typeof(kills[0])){ (int)(dump_ms * 6 / 10), false };
	kills[nk++] = (typeof(kills[0])){ (int)(dump_ms * 9 / 10), false };
	kills[nk++] = (typeof(kills[0])){ (int)dump_ms, false };

	for (int i = 0; i < nk; i++) {
		int st, samples = itest_samples_check(gdir), tmps = itest_count_tmp(gdir);

		ck_assert_int_eq(kill(r.d.pid, SIGUSR1), 0);
		if (kills[i].after_tmp)
			ck_assert_msg(ITEST_WAIT_MS(itest_count_tmp(gdir) > tmps, 10000, 1),
				      "no temporary file within 10 s of SIGUSR1");
		usleep((useconds_t)kills[i].ms * 1000);
		ck_assert_int_eq(kill(r.d.pid, SIGKILL), 0);
		ck_assert_int_eq(waitpid(r.d.pid, &st, 0), r.d.pid);
		r.d.pid = 0;
		/* never a sample under its final name that does not read back whole */
		complete += itest_samples_check(gdir) > samples;
		mid_write += itest_count_tmp(gdir) > tmps;

		/* a new daemon starts on what is left */
		ck_assert_msg(testd_start_opts(&r.d, r.dir, r.body, &o) == 0,
			      "vmtraced does not start after SIGKILL %d (log: %s)", i, r.d.log);
		itest_expect_streaming(&r.d, "g1", 8000);
		ck_assert_msg(itest_wait_num_ge(&r.d, "g1", "pages", cap, 30000),
			      "ring not full again: %llu of %llu",
			      (unsigned long long)itest_num(&r.d, "g1", "pages"), (unsigned long long)cap);
	}
	printf("sigkill_during_dump: a dump takes %llu ms; %d kills: %d in the write, %d after it\n",
	       (unsigned long long)dump_ms, nk, mid_write, complete);
	ck_assert_int_ge(mid_write, 2);
	itest_dump_one(&r.d, "", sample, sizeof(sample));
	sample_free(itest_read_sample(sample));
	itest_run_end(&r);
}
END_TEST

/* ---- 10. SIGHUP ----------------------------------------------------------------------------- */

START_TEST(sighup_bad_config_kept)
{
	struct itest_run r;
	char out[4096], body[2048], g[2][600];
	uint64_t p0, p1, sessions;

	NEED_INPUT();
	itest_run_init(&r, &in, "sighup");
	itest_run_pages(&r, &in, 0, 2000);
	r.fc[0].pages_per_sec = 100;
	itest_run_guest(&r, 0);
	itest_run_daemon(&r, "record:\n  ring_size: 16MiB\n", 1);
	itest_expect_streaming(&r.d, "g1", 5000);
	ck_assert(itest_wait_num_ge(&r.d, "g1", "pages_in", 20, 5000));
	sessions = itest_num(&r.d, "g1", "sessions");
	ck_assert_uint_eq(sessions, 1);

	ck_assert_int_eq(itest_write_file(r.d.conf, "guests: [ {{{ this is not yaml\n\tstate_dir 12Q\n"), 0);
	ck_assert_int_eq(kill(r.d.pid, SIGHUP), 0);
	ck_assert_msg(ITEST_WAIT(testd_log_count(&r.d, "reload refused") == 1, 3000),
		      "no 'reload refused' in the log after SIGHUP with a bad file (log: %s)", r.d.log);
	ck_assert_int_ge(testd_log_count(&r.d, "vmtraced.yaml:"), 1);
	p0 = itest_num(&r.d, "g1", "pages_in");
	ck_assert_uint_ne(p0, UINT64_MAX);	/* status still answers */
	ck_assert(itest_state_is(&r.d, "g1", "streaming"));
	ck_assert_msg(itest_wait_num_ge(&r.d, "g1", "pages_in", p0 + 30, 3000),
		      "g1 stopped streaming after the refused reload");
	ck_assert_uint_eq(itest_num(&r.d, "g1", "sessions"), sessions);
	/* vmtracectl reload says why */
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "reload 2>&1"), 1);
	ck_assert_msg(strstr(out, "vmtraced.yaml:") != NULL, "reload of a bad file said: %s", out);

	/* a good file that adds a guest */
	itest_run_guest(&r, 1);
	itest_guest_yaml(g[0], sizeof(g[0]), &r, 0);
	itest_guest_yaml(g[1], sizeof(g[1]), &r, 1);
	snprintf(body, sizeof(body), "record:\n  ring_size: 16MiB\nguests:\n%s%s", g[0], g[1]);
	ck_assert_int_eq(itest_write_conf(&r.d, body), 0);
	p1 = itest_num(&r.d, "g1", "pages_in");
	ck_assert_int_eq(kill(r.d.pid, SIGHUP), 0);
	itest_expect_streaming(&r.d, "g2", 5000);
	itest_expect_pages_in(&r.d, "g2", fed_pages());
	ck_assert_int_eq(testd_log_count(&r.d, "configuration reloaded: 1 guest(s) kept, 1 started, 0 removed"), 1);
	ck_assert(itest_state_is(&r.d, "g1", "streaming"));
	ck_assert_uint_eq(itest_num(&r.d, "g1", "sessions"), sessions);
	ck_assert_uint_ge(itest_num(&r.d, "g1", "pages_in"), p1);
	ck_assert_int_eq(itest_nguests(&r.d), 2);
	itest_run_end(&r);
}
END_TEST

/* ---- 11. sd_notify ----------------------------------------------------------------------- */

struct notes {
	int ready, watchdog, stopping, reloading, status;
	char last_status[256];
	char order[64];		/* R(eady) L(reloading) S(topping), in order */
};

static void read_notes(int fd, struct notes *n, int ms)
{
	uint64_t end = itest_now_ms() + (uint64_t)ms;

	while (itest_now_ms() < end) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		char buf[4096];
		ssize_t len;

		if (poll(&p, 1, 50) <= 0)
			continue;
		len = recv(fd, buf, sizeof(buf) - 1, 0);
		if (len <= 0)
			continue;
		buf[len] = 0;
		for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n")) {
			size_t o = strlen(n->order);
			char mark = 0;

			if (!strcmp(l, "READY=1"))
				n->ready++, mark = 'R';
			else if (!strcmp(l, "WATCHDOG=1"))
				n->watchdog++;
			else if (!strcmp(l, "STOPPING=1"))
				n->stopping++, mark = 'S';
			else if (!strcmp(l, "RELOADING=1"))
				n->reloading++, mark = 'L';
			else if (!strncmp(l, "STATUS=", 7)) {
				n->status++;
				snprintf(n->last_status, sizeof(n->last_status), "%s", l + 7);
			}
			if (mark && o + 1 < sizeof(n->order))
				n->order[o] = mark;
		}
	}
}

START_TEST(sd_notify_and_watchdog)
{
	struct itest_run r;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char env_sock[400];
	const char *env[3] = { env_sock, "WATCHDOG_USEC=200000", NULL };
	struct testd_opts o = { .env = env };
	struct notes n = { 0 };
	int fd, rc;

	NEED_INPUT();
	itest_run_init(&r, &in, "notify");
	snprintf(env_sock, sizeof(env_sock), "NOTIFY_SOCKET=%s/notify.sock", r.dir);
	ck_assert_uint_lt(strlen(env_sock + 14), sizeof(sa.sun_path));
	memcpy(sa.sun_path, env_sock + 14, strlen(env_sock + 14) + 1);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	itest_run_guest(&r, 0);
	itest_run_daemon_opts(&r, "record:\n  ring_size: 16MiB\n", 1, &o);
	read_notes(fd, &n, 1200);
	ck_assert_int_eq(n.ready, 1);
	ck_assert_msg(n.status >= 1, "no STATUS= notification");
	ck_assert_msg(strstr(n.last_status, "guest(s)") != NULL, "STATUS=%s", n.last_status);
	/* WATCHDOG_USEC 200 ms: several keep-alives a second */
	ck_assert_msg(n.watchdog >= 3, "%d WATCHDOG=1 in 1.2 s with WATCHDOG_USEC=200000", n.watchdog);

	ck_assert_int_eq(kill(r.d.pid, SIGHUP), 0);
	read_notes(fd, &n, 500);
	ck_assert_int_eq(n.reloading, 1);
	ck_assert_int_eq(n.ready, 2);
	ck_assert_str_eq(n.order, "RLR");

	rc = testd_stop(&r.d);
	ck_assert_int_eq(rc, 0);
	read_notes(fd, &n, 300);
	ck_assert_int_eq(n.stopping, 1);
	ck_assert_str_eq(n.order, "RLRS");
	close(fd);
	itest_run_end(&r);
}
END_TEST

/* ---- 12. socket activation ---------------------------------------------------------------- */

START_TEST(socket_activation)
{
	struct itest_run r;
	char path[400], own[400];
	const char *wrapper[8];
	struct testd_opts o = { 0 };
	int rc;

	if (access("/usr/bin/systemd-socket-activate", X_OK) &&
	    access("/bin/systemd-socket-activate", X_OK))
		VMT_SKIP("systemd-socket-activate is not installed (package systemd)");
	itest_run_init(&r, &in, "activate");
	snprintf(path, sizeof(path), "%s/activated.sock", r.dir);
	snprintf(own, sizeof(own), "%s/control.sock", r.dir);
	wrapper[0] = "systemd-socket-activate";
	wrapper[1] = "--seqpacket";
	wrapper[2] = "-l";
	wrapper[3] = path;
	wrapper[4] = "--fdname=control";
	wrapper[5] = NULL;
	o.wrapper = wrapper;
	o.connect = path;
	ck_assert_int_eq(testd_start_opts(&r.d, r.dir, "", &o), 0);
	ck_assert_msg(ITEST_WAIT(itest_ctl(&r.d, NULL, 0, "status >/dev/null 2>&1") == 0, 5000),
		      "no status through the activated socket (log: %s)", r.d.log);
	ck_assert_int_eq(itest_nguests(&r.d), 0);
	ck_assert_int_eq(testd_log_count(&r.d, "control socket passed by systemd"), 1);
	/* it did not bind a socket of its own */
	ck_assert_int_ne(access(own, F_OK), 0);
	rc = testd_stop(&r.d);
	ck_assert_int_eq(rc, 0);
	/* the socket belongs to whoever made it */
	ck_assert_int_eq(access(path, F_OK), 0);
	itest_run_end(&r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("daemon");
	TCase *t = tcase_create("daemon");
	TCase *ro = tcase_create("read-only group");
	TCase *full = tcase_create("full disk");
	TCase *full_aux = tcase_create("full disk, aux");
	int rc;

	itest_input_prepare(&in);
	printf("input: %s, %u CPUs", in.source, in.ncpus);
	for (unsigned c = 0; c < in.ncpus; c++)
		printf(", cpu%u %zu pages", c, in.npages[c]);
	printf("\n");
	fflush(stdout);

	TEST_ADD(t, reboot_new_aux_version);
	TEST_ADD(t, agent_restart_keeps_window);
	TEST_ADD(t, socket_ports_stale_connection_first);
	TEST_ADD(t, aux_on_demand);
	TEST_ADD(t, guest_process_death_dumps);
	TEST_ADD(t, kvm_tsc_offsets_become_clock_points);
	TEST_ADD(t, no_sync_is_said);
	TEST_ADD(t, control_thousand_clients);
	TEST_ADD(t, memory_cap_refuses_second_guest);
	TEST_ADD(t, memory_cap_counts_metadata);
	TEST_ADD(t, task_tables_reach_the_sample);
	TEST_ADD(t, control_status_guests_reload);
	TEST_ADD(t, control_unauthorised_peer);
	TEST_ADD(t, privilege_dropped);
	TEST_ADD(t, privilege_user);
	TEST_ADD(t, service_unit);
	TEST_ADD(t, control_malformed_packets);
	TEST_ADD(t, ctl_without_daemon);
	TEST_ADD(t, state_time_of_a_guest_never_seen);
	TEST_ADD(t, dump_window_by_time);
	TEST_ADD(t, dump_window_by_time_in_frames);
	TEST_ADD(t, compressed_ring_keeps_more);
	TEST_ADD(t, samples_from_the_index);
	TEST_ADD(t, dump_post_trigger);
	TEST_ADD(t, triggers_coalesce);
	TEST_ADD(t, guest_triggers_cooldown);
	TEST_ADD(t, trigger_storm_is_bounded);
	TEST_ADD(t, guest_triggers_rate_limit);
	TEST_ADD(t, guests_cannot_starve_a_detector);
	TEST_ADD(t, reboot_storm_is_bounded);
	TEST_ADD(t, sigkill_during_dump);
	TEST_ADD(t, sighup_bad_config_kept);
	TEST_ADD(t, sd_notify_and_watchdog);
	TEST_ADD(t, socket_activation);
	tcase_set_timeout(t, 300);	/* a hang; sigkill_during_dump restarts 15 times */
	suite_add_tcase(s, t);

	tcase_add_unchecked_fixture(ro, ro_group_setup, ro_group_teardown);
	TEST_ADD(ro, control_read_only_group);
	TEST_ADD(ro, control_slots_for_root);
	tcase_set_timeout(ro, 60);
	suite_add_tcase(s, ro);

	tcase_add_unchecked_fixture(full, full_setup, full_teardown);
	TEST_ADD(full, dump_on_full_disk);
	tcase_set_timeout(full, 60);
	suite_add_tcase(s, full);

	tcase_add_unchecked_fixture(full_aux, full_setup, full_teardown);
	TEST_ADD(full_aux, aux_on_full_disk);
	tcase_set_timeout(full_aux, 60);
	suite_add_tcase(s, full_aux);

	rc = test_run_suite(s);
	itest_input_free(&in);
	return rc;
}
