/* SPDX-License-Identifier: MIT */
/*
 * vmtracectl fleet: the operator's side of the fleet (docs/FLEET.md).
 *   fleet dump: publishes a dump request on the host, guest or label
 *   subject with a fresh inbox as its reply subject and prints every
 *   answer as it comes until the timeout (several hosts answer a label);
 *   fleet fetch (fleet-fetch.c): downloads objects of the bucket by name.
 * The servers and credentials come from the fleet: block of vmtraced.yaml.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dlnats.h"

#include "commands.h"
#include "config.h"
#include "fleet-int.h"
#include "natsconn.h"

/* Said once at start, as vmtraced does: a fleet without TLS is a choice. */
static void fleet_warn_insecure(const struct vmt_fleet_conf *c)
{
	const char *why = natsconn_insecure(c);

	if (why)
		fprintf(stderr, "vmtracectl fleet: warning: %s\n", why);
}

int fleet_connect(const struct vmt_fleet_conf *c, natsConnection **nc)
{
	natsOptions *o = NULL;
	char why[300];
	natsStatus s;
	const char *last, *state;

	fleet_warn_insecure(c);
	if (natsconn_options(&o, c, NULL, 3000, why, sizeof(why)) < 0) {
		fprintf(stderr, "vmtracectl fleet: %s\n", why);
		return -EINVAL;
	}
	s = natsConnection_Connect(nc, o);
	natsOptions_Destroy(o);
	if (s == NATS_OK)
		return 0;
	last = nats_GetLastError(NULL);
	state = natsconn_state(s, last);
	fprintf(stderr, "vmtracectl fleet: cannot connect%s: %s%s%s\n",
		!strcmp(state, "insecure") ? " (TLS is configured but the server does not require "
					     "it: refused, nothing sent)" :
		!strcmp(state, "refused") ? " (authentication refused)" :
		!strcmp(state, "tls-failed") ? " (TLS handshake failed)" :
		!strcmp(state, "bad-server") ? " (the server does not speak NATS)" : "",
		natsStatus_GetText(s), last && *last ? ": " : "", last ? last : "");
	return -EIO;
}

int fleet_load_conf(const char *path, struct vmt_config *c)
{
	char err[512];
	int r = config_load(c, path, err, sizeof(err));

	if (r < 0) {
		fprintf(stderr, "vmtracectl fleet: %s\n", err);
		return r;
	}
	if (!c->fleet.enabled) {
		fprintf(stderr, "vmtracectl fleet: %s has no fleet: block\n", path);
		config_free(c);
		return -ENOENT;
	}
	return 0;
}

static bool token_ok(const char *s)
{
	if (!*s || strlen(s) > 64)
		return false;
	for (; *s; s++)
		if (*s == '.' || *s == '*' || *s == '>' || *s <= ' ' || *s == 0x7f)
			return false;
	return true;
}

static void json_str(char *out, size_t n, const char *s)
{
	size_t o = 0;

	for (; *s && o + 3 < n; s++) {
		if (*s == '"' || *s == '\\')
			out[o++] = '\\';
		out[o++] = (unsigned char)*s < 0x20 ? ' ' : *s;
	}
	out[o] = 0;
}

static int fleet_dump(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "config", required_argument, NULL, 'c' }, { "host", required_argument, NULL, 'H' },
		{ "guest", required_argument, NULL, 'g' }, { "label", required_argument, NULL, 'l' },
		{ "reason", required_argument, NULL, 'r' }, { "window", required_argument, NULL, 'w' },
		{ "post", required_argument, NULL, 'p' }, { "timeout", required_argument, NULL, 't' },
		{ "answers", required_argument, NULL, 'n' }, { 0 },
	};
	const char *conf = FLEET_CONF_DEFAULT, *host = NULL, *guest = "_all", *label = NULL;
	const char *reason = "vmtracectl fleet dump";
	unsigned long window = 0, post = 0, timeout = 5, want = 0;
	char subj[512], body[512], esc[300], hn[65];
	struct vmt_config c;
	natsConnection *nc = NULL;
	natsSubscription *sub = NULL;
	natsInbox *inbox = NULL;
	int opt, answers = 0;
	int64_t deadline;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "c:H:g:l:r:w:p:t:n:", lo, NULL)) != -1) {
		switch (opt) {
		case 'c': conf = optarg; break;
		case 'H': host = optarg; break;
		case 'g': guest = optarg; break;
		case 'l': label = optarg; break;
		case 'r': reason = optarg; break;
		case 'w': window = strtoul(optarg, NULL, 10); break;
		case 'p': post = strtoul(optarg, NULL, 10); break;
		case 't': timeout = strtoul(optarg, NULL, 10); break;
		case 'n': want = strtoul(optarg, NULL, 10); break;	/* stop after N */
		default: return 2;
		}
	}
	if (fleet_load_conf(conf, &c) < 0)
		return 1;
	if (label) {
		char k[128];
		const char *eq = strchr(label, '=');

		snprintf(k, sizeof(k), "%.*s", eq ? (int)(eq - label) : 0, label);
		if (!eq || !token_ok(k) || !token_ok(eq + 1)) {
			fprintf(stderr, "vmtracectl fleet dump: --label KEY=VALUE, each one token\n");
			return 2;
		}
		snprintf(subj, sizeof(subj), "%s.dump.label.%s.%s", c.fleet.subject_prefix, k, eq + 1);
	} else {
		if (!host) {
			host = c.fleet.host_id;
			if (!*host) {
				gethostname(hn, sizeof(hn) - 1);
				hn[64] = 0;
				for (char *q = hn; *q; q++)
					if (*q == '.')
						*q = '_';
				host = hn;
			}
		}
		if (!token_ok(host) || !token_ok(guest)) {
			fprintf(stderr, "vmtracectl fleet dump: --host and --guest are one token each "
				"(a guest with '.' in its name: --label or the host's _all)\n");
			return 2;
		}
		snprintf(subj, sizeof(subj), "%s.dump.%s.%s", c.fleet.subject_prefix, host, guest);
	}
	json_str(esc, sizeof(esc), reason);
	snprintf(body, sizeof(body), "{\"reason\":\"%s\",\"window\":%lu,\"post\":%lu}", esc, window,
		 post);
	if (fleet_connect(&c.fleet, &nc) < 0) {
		config_free(&c);
		return 1;
	}
	if (natsInbox_Create(&inbox) != NATS_OK ||
	    natsConnection_SubscribeSync(&sub, nc, inbox) != NATS_OK ||
	    natsConnection_PublishRequestString(nc, subj, inbox, body) != NATS_OK ||
	    natsConnection_Flush(nc) != NATS_OK) {
		fprintf(stderr, "vmtracectl fleet dump: cannot publish on %s\n", subj);
		answers = -1;
		goto out;
	}
	fprintf(stderr, "asked on %s\n", subj);
	deadline = nats_Now() + (int64_t)timeout * 1000;
	for (;;) {
		int64_t left = deadline - nats_Now();
		natsMsg *m = NULL;

		if (left <= 0 || natsSubscription_NextMsg(&m, sub, left) != NATS_OK)
			break;
		printf("%.*s\n", natsMsg_GetDataLength(m), natsMsg_GetData(m));
		fflush(stdout);
		natsMsg_Destroy(m);
		answers++;
		if (want && (unsigned long)answers >= want)
			break;
	}
out:
	natsconn_subs_end(nc, &sub, 1, 2000);	/* more answers may come: natsconn.h */
	natsInbox_Destroy(inbox);
	natsConnection_Destroy(nc);
	config_free(&c);
	if (answers == 0)
		fprintf(stderr, "vmtracectl fleet dump: no answer in %lu s\n", timeout);
	return answers > 0 ? 0 : 1;
}

int cmd_fleet(const struct vmt_ctl_opts *o, int argc, char **argv)
{
	char why[256];
	int r;

	if (argc >= 2 && (!strcmp(argv[1], "dump") || !strcmp(argv[1], "fetch"))) {
		/* libnats and OpenSSL are loaded for these two only (dlnats.h) */
		if (dlnats_open(why, sizeof(why)) < 0) {
			fprintf(stderr, "vmtracectl fleet: %s (install libnats3.4)\n", why);
			return 1;
		}
		natsconn_init();	/* before libnats: natsconn.h says why */
		r = !strcmp(argv[1], "dump") ? fleet_dump(argc - 1, argv + 1) :
					       fleet_fetch(argc - 1, argv + 1);
		/* libnats' threads gone before exit() cleans OpenSSL up */
		if (natsconn_close(10000) < 0)
			fprintf(stderr, "vmtracectl fleet: libnats' threads did not finish within 10 s\n");
		return r;
	}
	fprintf(stderr, "usage: vmtracectl fleet dump [-c CONFIG] [--host H] [--guest G] "
		"[--label K=V] [--reason TEXT] [--window S] [--post S] [--timeout S] [--answers N]\n"
		"       vmtracectl fleet fetch [-c CONFIG] [-o DIR] HOST/GUEST/FILE...\n");
	return 2;
}
