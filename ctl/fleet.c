/* SPDX-License-Identifier: MIT */
/*
 * vmtracectl fleet: the operator's side of the fleet (docs/FLEET.md).
 *   fleet dump: publishes a dump request on the host, guest or label
 *   subject with a fresh inbox as its reply subject and prints every
 *   answer as it comes until the timeout (several hosts answer a label);
 *   fleet fetch: downloads objects of the bucket by name (a sample's aux
 *   with it) into DIR/<guest>/, as the state folder lays them out, so
 *   `vmtracectl merge` takes them; the digest is checked.
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

#include <nats/nats.h>
#include <openssl/evp.h>

#include "b64url.h"
#include "aux.h"
#include "commands.h"
#include "config.h"
#include "sample.h"
#include "util.h"

#define CONF_DEFAULT "/etc/vmtraced/vmtraced.yaml"

static int fleet_connect(const struct vmt_fleet_conf *c, natsConnection **nc)
{
	const char *urls[VMT_FLEET_MAX_SERVERS];
	natsOptions *o = NULL;
	natsStatus s;

	for (uint32_t i = 0; i < c->nservers; i++)
		urls[i] = c->servers[i];
	s = natsOptions_Create(&o);
	if (s == NATS_OK)
		s = natsOptions_SetServers(o, urls, (int)c->nservers);
	if (s == NATS_OK)
		s = natsOptions_SetTimeout(o, 3000);
	if (s == NATS_OK && c->user[0])
		s = natsOptions_SetUserInfo(o, c->user, c->password);
	if (s == NATS_OK && c->creds[0])
		s = natsOptions_SetUserCredentialsFromFiles(o, c->creds, NULL);
	if (s == NATS_OK && c->nkey_seed[0])
		s = natsOptions_SetNKeyFromSeed(o, NULL, c->nkey_seed);
	if (s == NATS_OK && c->tls_ca[0])
		s = natsOptions_LoadCATrustedCertificates(o, c->tls_ca);
	if (s == NATS_OK && c->tls_cert[0])
		s = natsOptions_LoadCertificatesChain(o, c->tls_cert, c->tls_key);
	if (s == NATS_OK)
		s = natsConnection_Connect(nc, o);
	natsOptions_Destroy(o);
	if (s != NATS_OK) {
		const char *last = nats_GetLastError(NULL);

		fprintf(stderr, "vmtracectl fleet: cannot connect: %s%s%s\n", natsStatus_GetText(s),
			last && *last ? ": " : "", last ? last : "");
		return -EIO;
	}
	return 0;
}

static int load_conf(const char *path, struct vmt_config *c)
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
	const char *conf = CONF_DEFAULT, *host = NULL, *guest = "_all", *label = NULL;
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
	if (load_conf(conf, &c) < 0)
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
	natsSubscription_Destroy(sub);
	natsInbox_Destroy(inbox);
	natsConnection_Destroy(nc);
	config_free(&c);
	if (answers == 0)
		fprintf(stderr, "vmtracectl fleet dump: no answer in %lu s\n", timeout);
	return answers > 0 ? 0 : 1;
}

/* A field of the meta JSON our daemons (and other clients) write. */
static bool meta_field(const char *meta, const char *key, char *out, size_t n)
{
	char k[64];
	const char *p;
	size_t o = 0;

	snprintf(k, sizeof(k), "\"%s\":", key);
	p = strstr(meta, k);
	if (!p)
		return false;
	p += strlen(k);
	if (*p == '"')
		p++;
	while (*p && *p != '"' && *p != ',' && *p != '}' && o + 1 < n)
		out[o++] = *p++;
	out[o] = 0;
	return o > 0;
}

/* One object into path; 0, or -errno with a message printed. */
static int fetch_one(jsCtx *js, const char *bucket, const char *name, const char *path)
{
	char stream[80], subj[900], enc[700], meta[8192], id[64], dg[128], szs[32], chs[32], want[64];
	natsMsg *m = NULL;
	natsSubscription *sub = NULL;
	jsSubOptions so;
	jsErrCode jerr = 0;
	uint64_t size, chunks, got = 0;
	uint8_t sha[32];
	unsigned shalen = 0;
	EVP_MD_CTX *md = NULL;
	char tmp[4200];
	FILE *f = NULL;
	int r = 0;

	if (strlen(name) > 400)
		return fprintf(stderr, "fetch: %s: name too long\n", name), -EINVAL;
	snprintf(stream, sizeof(stream), "OBJ_%s", bucket);
	b64url(enc, sizeof(enc), (const uint8_t *)name, strlen(name));
	if (!enc[0]) {
		fprintf(stderr, "fetch: %s: not an object name (empty or too long)\n", name);
		return -EINVAL;
	}
	snprintf(subj, sizeof(subj), "$O.%s.M.%s", bucket, enc);
	if (js_GetLastMsg(&m, js, stream, subj, NULL, &jerr) != NATS_OK) {
		fprintf(stderr, "fetch: %s: not in bucket %s\n", name, bucket);
		return -ENOENT;
	}
	snprintf(meta, sizeof(meta), "%.*s", natsMsg_GetDataLength(m), natsMsg_GetData(m));
	natsMsg_Destroy(m);
	m = NULL;
	if (!meta_field(meta, "nuid", id, sizeof(id)) || !meta_field(meta, "size", szs, sizeof(szs)) ||
	    !meta_field(meta, "chunks", chs, sizeof(chs)) ||
	    !meta_field(meta, "digest", dg, sizeof(dg)) || strncmp(dg, "SHA-256=", 8) ||
	    strstr(meta, "\"deleted\":true")) {
		fprintf(stderr, "fetch: %s: its meta is not one of an object\n", name);
		return -EBADMSG;
	}
	for (const char *q = id; *q; q++)
		if (!((*q >= '0' && *q <= '9') || (*q >= 'A' && *q <= 'Z') || (*q >= 'a' && *q <= 'z')))
			return fprintf(stderr, "fetch: %s: bad nuid\n", name), -EBADMSG;
	size = strtoull(szs, NULL, 10);
	chunks = strtoull(chs, NULL, 10);
	snprintf(tmp, sizeof(tmp), "%s.part", path);
	f = fopen(tmp, "wxe");
	if (!f) {
		r = -errno;
		fprintf(stderr, "fetch: %s: %s\n", tmp, strerror(errno));
		return r;
	}
	md = EVP_MD_CTX_new();
	EVP_DigestInit_ex(md, EVP_sha256(), NULL);
	snprintf(subj, sizeof(subj), "$O.%s.C.%s", bucket, id);
	jsSubOptions_Init(&so);
	so.Ordered = true;
	so.Stream = stream;
	if (chunks && js_SubscribeSync(&sub, js, subj, NULL, &so, &jerr) != NATS_OK) {
		fprintf(stderr, "fetch: %s: cannot read its chunks\n", name);
		r = -EIO;
		goto out;
	}
	for (uint64_t i = 0; i < chunks; i++) {
		if (natsSubscription_NextMsg(&m, sub, 10000) != NATS_OK) {
			fprintf(stderr, "fetch: %s: chunk %" PRIu64 " did not come\n", name, i);
			r = -EIO;
			goto out;
		}
		got += (uint64_t)natsMsg_GetDataLength(m);
		EVP_DigestUpdate(md, natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m));
		if (fwrite(natsMsg_GetData(m), 1, (size_t)natsMsg_GetDataLength(m), f) !=
		    (size_t)natsMsg_GetDataLength(m)) {
			r = -EIO;
			goto out;
		}
		natsMsg_Destroy(m);
		m = NULL;
	}
	EVP_DigestFinal_ex(md, sha, &shalen);
	b64url(want, sizeof(want), sha, shalen);
	if (got != size || strcmp(want, dg + 8)) {
		fprintf(stderr, "fetch: %s: size or digest does not match its meta\n", name);
		r = -EBADMSG;
		goto out;
	}
	if (fclose(f) != 0) {
		f = NULL;
		r = -errno;
		goto out;
	}
	f = NULL;
	if (rename(tmp, path) < 0)
		r = -errno;
	else
		printf("%s\n", path);
out:
	natsMsg_Destroy(m);
	natsSubscription_Destroy(sub);
	EVP_MD_CTX_free(md);
	if (f)
		fclose(f);
	if (r < 0)
		unlink(tmp);
	return r;
}

static int fleet_fetch(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "config", required_argument, NULL, 'c' }, { "output", required_argument, NULL, 'o' },
		{ 0 },
	};
	const char *conf = CONF_DEFAULT, *dir = ".";
	struct vmt_config c;
	natsConnection *nc = NULL;
	jsCtx *js = NULL;
	int opt, bad = 0;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "c:o:", lo, NULL)) != -1) {
		switch (opt) {
		case 'c': conf = optarg; break;
		case 'o': dir = optarg; break;
		default: return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "usage: vmtracectl fleet fetch [-c CONFIG] [-o DIR] HOST/GUEST/FILE...\n");
		return 2;
	}
	if (load_conf(conf, &c) < 0)
		return 1;
	if (fleet_connect(&c.fleet, &nc) < 0 || natsConnection_JetStream(&js, nc, NULL) != NATS_OK) {
		natsConnection_Destroy(nc);
		config_free(&c);
		return 1;
	}
	for (int i = optind; i < argc; i++) {
		const char *name = argv[i], *s1 = strchr(name, '/'), *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
		char guest[VMT_NAME_MAX], gdir[4200], path[4400];
		struct vmt_sample info;
		char why[128];

		if (!s1 || !s2 || s2 - s1 - 1 <= 0 || s2 - s1 - 1 >= (long)sizeof(guest) ||
		    strchr(s2 + 1, '/') || !name_is_valid(s2 + 1)) {
			fprintf(stderr, "fetch: %s: not HOST/GUEST/FILE\n", name);
			bad++;
			continue;
		}
		snprintf(guest, sizeof(guest), "%.*s", (int)(s2 - s1 - 1), s1 + 1);
		if (!name_is_valid(guest)) {
			fprintf(stderr, "fetch: %s: not a guest name\n", name);
			bad++;
			continue;
		}
		snprintf(gdir, sizeof(gdir), "%s/%s", dir, guest);
		mkdir(dir, 0755);
		mkdir(gdir, 0755);
		snprintf(path, sizeof(path), "%s/%s", gdir, s2 + 1);
		if (access(path, F_OK) == 0) {
			printf("%s (there already)\n", path);
		} else if (fetch_one(js, c.fleet.bucket, name, path) < 0) {
			bad++;
			continue;
		}
		/* a sample needs its aux file to be merged */
		if (sample_read_info(path, &info, why, sizeof(why)) == 0) {
			char an[64], aname[600], apath[4400];

			aux_file_name(an, sizeof(an), info.aux_version);
			snprintf(apath, sizeof(apath), "%s/%s", gdir, an);
			snprintf(aname, sizeof(aname), "%.*s/%s", (int)(s2 - name), name, an);
			if (access(apath, F_OK) != 0 && fetch_one(js, c.fleet.bucket, aname, apath) < 0)
				bad++;
		}
	}
	jsCtx_Destroy(js);
	natsConnection_Destroy(nc);
	config_free(&c);
	return bad ? 1 : 0;
}

int cmd_fleet(const struct vmt_ctl_opts *o, int argc, char **argv)
{
	int r;

	if (argc >= 2 && (!strcmp(argv[1], "dump") || !strcmp(argv[1], "fetch"))) {
		r = !strcmp(argv[1], "dump") ? fleet_dump(argc - 1, argv + 1) :
					       fleet_fetch(argc - 1, argv + 1);
		nats_Close();
		return r;
	}
	fprintf(stderr, "usage: vmtracectl fleet dump [-c CONFIG] [--host H] [--guest G] "
		"[--label K=V] [--reason TEXT] [--window S] [--post S] [--timeout S] [--answers N]\n"
		"       vmtracectl fleet fetch [-c CONFIG] [-o DIR] HOST/GUEST/FILE...\n");
	return 2;
}
