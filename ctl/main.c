/* SPDX-License-Identifier: MIT */
/*
 * vmtracectl: talks to vmtraced over its control socket, and turns samples
 * into trace.dat files.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "ctlproto.h"
#include "log.h"

static const struct {
	const char *name;
	int (*fn)(const struct vmt_ctl_opts *o, int argc, char **argv);
	const char *help;
} commands[] = {
	{ "status", cmd_status, "status                    the daemon and every guest" },
	{ "guests", cmd_guests, "guests                    the guests only" },
	{ "dump", cmd_dump, "dump [GUEST...] [--window SEC] [--post SEC] [--reason TEXT]\n"
			    "                            write samples now; prints the files" },
	{ "samples", cmd_samples, "samples [GUEST]           the samples on disk, newest first" },
	{ "reload", cmd_reload, "reload                    re-read the configuration" },
	{ "info", cmd_info, "info SAMPLE...            what a sample holds: triggers, window, counters" },
	{ "merge", cmd_merge, "merge -o OUT.dat SAMPLE... samples (+ their aux) -> trace.dat" },
	{ "report", cmd_report, "report [--stats] [--cpu LIST] [--event PAT]... SAMPLE...\n"
				"                            the samples' events as text, one time line" },
	{ "libvirt-xml", cmd_libvirt_xml, "libvirt-xml [--split DIR] DOMAIN | --vcpus N\n"
					  "                            the <channel> elements a domain needs" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: vmtracectl [-s SOCKET] [--json] COMMAND [ARGS]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		fprintf(f, "  %s\n", commands[i].help);
	fprintf(f, "\nThe socket defaults to $VMTRACED_SOCKET or %s.\n", VMT_CTL_DEFAULT_SOCKET);
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
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (!strcmp(argv[optind], commands[i].name)) {
			optind++;
			return commands[i].fn(&o, argc - optind + 1, argv + optind - 1);
		}
	fprintf(stderr, "vmtracectl: unknown command '%s'\n", argv[optind]);
	usage(stderr);
	return 2;
}
