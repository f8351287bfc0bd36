/* SPDX-License-Identifier: MIT */
/*
 * vmtracectl: talks to vmtraced over its control socket, and turns samples
 * into trace.dat files.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "ctlproto.h"
#include "log.h"
#include "util.h"

/*
 * Commands that parse options of their own (own_help) answer -h/--help
 * themselves, anywhere among their arguments; for the others any -h or
 * --help argument asks for the help (a sample named so: ./--help).
 */
static const struct {
	const char *name;
	int (*fn)(const struct vmt_ctl_opts *o, int argc, char **argv);
	const char *synopsis;
	const char *summary;
	bool own_help;
} commands[] = {
	{ "status", cmd_status, "status", "the daemon, every guest and detector", false },
	{ "guests", cmd_guests, "guests", "the guests only", false },
	{ "metrics", cmd_metrics, "metrics",
	  "every counter of status, in Prometheus' text format", false },
	{ "dump", cmd_dump, "dump [GUEST...] [--window SEC] [--post SEC] [--reason TEXT] [--timeout SEC]",
	  "write samples now; prints the files (exit 1 if none was written)", true },
	{ "samples", cmd_samples, "samples [GUEST]", "the samples on disk, newest first", false },
	{ "reload", cmd_reload, "reload",
	  "re-read the configuration (exit 1, with its error, if refused)", false },
	{ "upgrade", cmd_upgrade, "upgrade",
	  "hand the sessions over to the installed vmtraced (exit 1, with why, if refused)", false },
	{ "info", cmd_info, "info [--max-memory SIZE] SAMPLE...", "what a sample holds: triggers, window, counters", false },
	{ "merge", cmd_merge, "merge [--max-memory SIZE] -o OUT.dat SAMPLE...", "samples (+ their aux) -> trace.dat", true },
	{ "report", cmd_report, "report [--stats] [--cpu LIST] [--event PAT]... SAMPLE...",
	  "the samples' events as text, one time line", true },
	{ "fleet", cmd_fleet, "fleet dump [--host H] [--guest G] [--label K=V] [--reason TEXT] "
	  "[--window S] [--timeout S] | fleet fetch [-o DIR] HOST/GUEST/FILE...",
	  "ask the fleet for dumps over NATS; download samples from its bucket", true },
	{ "libvirt-xml", cmd_libvirt_xml, "libvirt-xml [--split DIR] DOMAIN | --vcpus N",
	  "the <channel> elements a libvirt domain needs", true },
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f)
{
	fprintf(f, "usage: vmtracectl [-s SOCKET] [--json] COMMAND [ARGS]\n"
		   "       vmtracectl COMMAND --help\n\ncommands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++) {
		if (strlen(commands[i].synopsis) > 26)
			fprintf(f, "  %s\n  %-26s %s\n", commands[i].synopsis, "", commands[i].summary);
		else
			fprintf(f, "  %-26s %s\n", commands[i].synopsis, commands[i].summary);
	}
	fprintf(f, "\noptions:\n"
		   "  -s, --socket SOCKET  the control socket (default $VMTRACED_SOCKET or %s)\n"
		   "  --json               status, guests, samples, dump: JSON\n"
		   "  -h, --help           this help\n"
		   "  -V, --version        the version\n"
		   "\nExit: 0 done, 1 failed or refused (the daemon not running, nothing written),\n"
		   "2 usage error; merge, report: 3 some samples left out; info: 1 a sample refused.\n"
		   "See vmtracectl(8).\n",
		VMT_CTL_DEFAULT_SOCKET);
}

int ctl_max_memory(const char *arg, uint64_t *out)
{
	if (parse_size(arg, out) < 0 || !*out) {
		fprintf(stderr, "vmtracectl: --max-memory %s: not a size like 512M or 8G\n", arg);
		return -EINVAL;
	}
	return 0;
}

void ctl_command_usage(FILE *f, const char *name)
{
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(commands[i].name, name))
			fprintf(f, "usage: vmtracectl [-s SOCKET] [--json] %s\n\n%s\n",
				commands[i].synopsis, commands[i].summary);
}

static bool asks_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--"))
			break;
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
			return true;
	}
	return false;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ 0 },
	};
	struct vmt_ctl_opts o = { .socket = getenv("VMTRACED_SOCKET") };
	int opt;

	log_set_ident("vmtracectl");
	if (!o.socket)
		o.socket = VMT_CTL_DEFAULT_SOCKET;
	/* options before the command only; the command parses the rest */
	while ((opt = getopt_long(argc, argv, "+s:jhV", longopts, NULL)) != -1) {
		switch (opt) {
		case 's': o.socket = optarg; break;
		case 'j': o.json = true; break;
		case 'h': usage(stdout); return 0;
		case 'V': printf("vmtracectl %s\n", VMT_VERSION); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(argv[optind], commands[i].name)) {
			int cargc = argc - optind;
			char **cargv = argv + optind;

			if (!commands[i].own_help && asks_help(cargc, cargv)) {
				ctl_command_usage(stdout, commands[i].name);
				return 0;
			}
			return commands[i].fn(&o, cargc, cargv);
		}
	fprintf(stderr, "vmtracectl: unknown command '%s'\n", argv[optind]);
	usage(stderr);
	return 2;
}
