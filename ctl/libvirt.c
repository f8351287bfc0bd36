/* SPDX-License-Identifier: MIT */
/*
 * vmtracectl libvirt-xml: the <channel> elements a libvirt domain needs to
 * be recorded (agent-ctl-path and one trace-path-cpuN per vCPU, unix
 * sockets libvirt binds where discovery finds them), for a vCPU count
 * given or read from `virsh dumpxml DOMAIN`. Past what QEMU's default
 * virtio-serial controller holds, the controller too. And a pvpanic
 * device (--no-panic leaves it out): a guest's panic becomes libvirt's
 * CRASHED event, which vmtraced dumps the guest for. --split DIR writes
 * one file per device, as `virsh attach-device` takes them.
 */
#include <errno.h>
#include <getopt.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "commands.h"
#include "proto.h"	/* VMT_MAX_CPUS */
#include "util.h"

extern char **environ;

/* QEMU's virtio-serial-pci: 31 ports unless told, port 0 kept for a console */
#define DEFAULT_PORTS 31
#define XML_MAX (16u << 20)

/* The domain's XML from virsh (no shell: a domain name is any string). */
static char *virsh_dumpxml(const char *uri, const char *domain)
{
	char *argv[8], *buf = NULL;
	size_t len = 0, cap = 0;
	int fds[2], status, i = 0, r;
	posix_spawn_file_actions_t fa;
	pid_t pid;
	ssize_t n;

	argv[i++] = "virsh";
	if (uri) {
		argv[i++] = "-c";
		argv[i++] = (char *)uri;
	}
	argv[i++] = "dumpxml";
	argv[i++] = "--";
	argv[i++] = (char *)domain;
	argv[i] = NULL;
	if (pipe(fds) < 0)
		return NULL;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
	posix_spawn_file_actions_addclose(&fa, fds[0]);
	posix_spawn_file_actions_addclose(&fa, fds[1]);
	r = posix_spawnp(&pid, "virsh", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(fds[1]);
	if (r) {
		close(fds[0]);
		fprintf(stderr, "vmtracectl: cannot run virsh: %s\n", strerror(r));
		return NULL;
	}
	for (;;) {
		if (cap - len < 4096) {
			char *nb = cap < XML_MAX ? realloc(buf, cap + 65536) : NULL;
			if (!nb)
				break;
			buf = nb;
			cap += 65536;
		}
		n = read(fds[0], buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status) || !buf || !len) {
		fprintf(stderr, "vmtracectl: virsh dumpxml %s failed\n", domain);
		free(buf);
		return NULL;
	}
	buf[len] = 0;
	return buf;
}

/* <vcpu placement='static' current='1'>4</vcpu>: 4, the most the domain can
 * have online (hot-plugged ones need their ports too); current: 1. */
static int parse_vcpus(const char *xml, unsigned *max, unsigned *current)
{
	const char *p = xml, *end, *a;
	char *e;
	unsigned long v;

	while ((p = strstr(p, "<vcpu")) && p[5] != ' ' && p[5] != '>')
		p += 5;
	if (!p || !(end = strchr(p, '>')))
		return -ENOENT;
	v = strtoul(end + 1, &e, 10);
	if (e == end + 1 || strncmp(e, "</vcpu>", 7) || !v || v > VMT_MAX_CPUS)
		return -EINVAL;
	*max = *current = (unsigned)v;
	for (a = p; (a = strstr(a, "current=")) && a < end; a += 8) {
		v = strtoul(a + 9, &e, 10);
		if (v && v <= *max)
			*current = (unsigned)v;
	}
	return 0;
}

/* One device: to stdout, or (--split) to DIR/FILE.xml, whose name is printed. */
static int put(const char *dir, const char *file, const char *xml)
{
	char path[4200];
	FILE *f = stdout;

	if (dir) {
		snprintf(path, sizeof(path), "%s/%s.xml", dir, file);
		f = fopen(path, "w");
		if (!f) {
			fprintf(stderr, "vmtracectl: %s: %s\n", path, strerror(errno));
			return -errno;
		}
	}
	fputs(xml, f);
	if (dir) {
		if (fclose(f) != 0) {
			fprintf(stderr, "vmtracectl: %s: %s\n", path, strerror(errno));
			return -EIO;
		}
		printf("%s\n", path);
	}
	return 0;
}

static int put_channel(const char *dir, const char *name)
{
	char xml[256], file[64];

	snprintf(xml, sizeof(xml), "<channel type='unix'>\n  <source mode='bind'/>\n"
		 "  <target type='virtio' name='%s'/>\n</channel>\n", name);
	snprintf(file, sizeof(file), "channel-%s", name);
	return put(dir, file, xml);
}

/* The guest's kernel (its pvpanic driver) tells QEMU of a panic, QEMU
 * tells libvirt (GUEST_PANICKED), libvirt reports CRASHED/PANICKED to its
 * clients: vmtraced dumps the guest at once (detectors.libvirt_events),
 * whatever the guest's panic= says. <on_crash> decides what QEMU does next
 * (destroy, the default; restart; preserve). */
static const char panic_xml[] =
	"<!-- vmtraced: a guest panic becomes libvirt's CRASHED event (vmtraced dumps the guest);\n"
	"     <on_crash> decides what QEMU does next. The guest needs its pvpanic driver. -->\n"
	"<panic model='isa'/>\n";

/*
 * The previous boot's trace across a crash (Linux >= 6.12's persistent
 * ring buffer, vmtraced(8)) is set on the guest's kernel command line, not
 * in the domain: said on stderr, with what the domain's memory allows (the
 * region is overwritten at 512 MiB). xml: the domain's, or NULL.
 */
static void note_pstore(const char *xml)
{
	/* libvirt writes <memory unit='KiB'>N</memory> */
	const char *m = xml ? strstr(xml, "<memory unit='KiB'>") : NULL;
	unsigned long long kib = 0;

	fprintf(stderr, "vmtracectl: note: with a Linux >= 6.12 guest kernel, 'reserve_mem=12M:4096:trace "
			"trace_instance=boot_map@trace nokaslr' on its command line keeps its last trace "
			"across a crash and a reboot in the same QEMU (1 GiB of memory or more; vmtraced(8))\n");
	if (m && sscanf(m + 19, "%llu", &kib) == 1 && kib < (1ull << 20))
		fprintf(stderr, "vmtracectl: note: this domain has %llu MiB: firmware overwrites that region "
				"below 1 GiB\n", kib >> 10);
}

static int print_devices(unsigned vcpus, const char *dir, bool panic)
{
	unsigned nports = vcpus + 1;
	char xml[128], name[32];

	if (nports > DEFAULT_PORTS - 1) {
		/* port 0 stays reserved: one more than the channels */
		snprintf(xml, sizeof(xml), "<controller type='virtio-serial' index='0' ports='%u'/>\n",
			 nports + 1);
		if (put(dir, "controller-virtio-serial", xml) < 0)
			return 1;
	}
	if (put_channel(dir, "agent-ctl-path") < 0)
		return 1;
	for (unsigned c = 0; c < vcpus; c++) {
		snprintf(name, sizeof(name), "trace-path-cpu%u", c);
		if (put_channel(dir, name) < 0)
			return 1;
	}
	if (panic && put(dir, "panic", panic_xml) < 0)
		return 1;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: vmtracectl libvirt-xml [-c URI] [--split DIR] [--no-panic] DOMAIN\n"
		   "       vmtracectl libvirt-xml [--split DIR] [--no-panic] --vcpus N\n");
}

int cmd_libvirt_xml(const struct vmt_ctl_opts *o, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "vcpus", required_argument, NULL, 'n' },
		{ "split", required_argument, NULL, 'd' },
		{ "connect", required_argument, NULL, 'c' },
		{ "no-panic", no_argument, NULL, 'P' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *dir = NULL, *uri = NULL;
	unsigned vcpus = 0, current;
	bool panic = true;
	struct stat st;
	int opt;

	(void)o;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "n:d:c:h", longopts, NULL)) != -1) {
		char *e;
		unsigned long v;

		switch (opt) {
		case 'n':
			v = strtoul(optarg, &e, 10);
			if (*e || !v || v > VMT_MAX_CPUS) {
				fprintf(stderr, "vmtracectl: --vcpus: 1 to %d\n", VMT_MAX_CPUS);
				return 2;
			}
			vcpus = (unsigned)v;
			break;
		case 'd': dir = optarg; break;
		case 'c': uri = optarg; break;
		case 'P': panic = false; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if ((vcpus != 0) == (optind < argc) || argc - optind > 1) {
		usage(stderr);
		return 2;
	}
	if (dir && (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))) {
		fprintf(stderr, "vmtracectl: --split %s: not a folder\n", dir);
		return 2;
	}
	if (!vcpus) {
		char *xml = virsh_dumpxml(uri, argv[optind]);
		int r;

		if (!xml)
			return 1;
		r = parse_vcpus(xml, &vcpus, &current);
		/* without ACPI (libvirt leaves it out unless <features> has it) a
		 * kernel without MP-table support, as Debian's cloud kernels, finds
		 * one CPU however many the domain has */
		if (r == 0 && vcpus > 1 && !strstr(xml, "<acpi/>"))
			fprintf(stderr, "vmtracectl: note: %s has no <features><acpi/></features>: "
					"its guest may see only one CPU\n", argv[optind]);
		if (r == 0)
			note_pstore(xml);
		free(xml);
		if (r < 0) {
			fprintf(stderr, "vmtracectl: %s: no <vcpu>N</vcpu> (1 to %d) in its XML\n",
				argv[optind], VMT_MAX_CPUS);
			return 1;
		}
		if (current != vcpus)
			fprintf(stderr, "vmtracectl: note: %s has %u vCPUs online of %u; ports for %u\n",
				argv[optind], current, vcpus, vcpus);
	} else {
		note_pstore(NULL);
	}
	return print_devices(vcpus, dir, panic);
}
