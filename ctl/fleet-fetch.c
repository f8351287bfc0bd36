/* SPDX-License-Identifier: MIT */
/*
 * vmtracectl fleet fetch: objects of the bucket by name (a sample's aux
 * with it) into DIR/<guest>/, as the state folder lays them out, so
 * `vmtracectl merge` takes them. The bucket is written by every host of the
 * fleet and read here as untrusted: the name asked for is HOST/GUEST/FILE
 * and nothing else; the meta must name that object, that bucket and HOST in
 * its Vmt-Host header, with a size and a chunk count that agree and stay
 * under bounds; every chunk is checked against them before it is written,
 * into a temporary file beside the target that is renamed into place only
 * once the size and the SHA-256 digest match, and removed otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dlnats.h"

#include "aux.h"
#include "b64url.h"
#include "config.h"
#include "fleet-int.h"
#include "natsconn.h"
#include "sample.h"
#include "util.h"

#define META_MAX 8192			/* bytes of a meta; ours are under 4 KiB */
#define CHUNK_DEFAULT (128u * 1024)	/* ADR-20's, when the meta names none */
#define CHUNK_MAX (8u << 20)		/* a chunk larger is refused */
#define SIZE_MAX_FETCH (64ull << 30)	/* an object larger is refused */
#define CHUNK_WAIT_MS 10000

/* where objects come from */
struct fetch_ctx {
	natsConnection *nc;
	jsCtx *js;
	const char *bucket;
};

struct fetch_meta {
	char nuid[32];
	char digest[64];	/* after "SHA-256=" */
	uint64_t size, chunks, chunk_max;
};

/*
 * The one value of "key": in meta: a string's body (no escapes: none of the
 * values read here has any), a number or a word, or the first string of a
 * list (headers). false when missing, given twice, empty or too long.
 */
static bool meta_value(const char *meta, const char *key, char *out, size_t n)
{
	char k[80];
	const char *p, *q;
	bool list = false;

	snprintf(k, sizeof(k), "\"%s\":", key);
	p = strstr(meta, k);
	if (!p || strstr(p + 1, k))
		return false;
	p += strlen(k);
	if (*p == '[') {
		list = true;
		p++;
	}
	if (*p == '"') {
		q = strchr(++p, '"');
		if (!q || (list && q[1] != ']'))
			return false;
	} else {
		if (list)
			return false;
		q = p + strspn(p, "0123456789abcdefghijklmnopqrstuvwxyz");
	}
	if (q == p || (size_t)(q - p) >= n)
		return false;
	memcpy(out, p, (size_t)(q - p));
	out[q - p] = 0;
	return true;
}

static bool meta_number(const char *meta, const char *key, uint64_t *v)
{
	char s[24], *end;

	if (!meta_value(meta, key, s, sizeof(s)) || strspn(s, "0123456789") != strlen(s) ||
	    strlen(s) > 19)
		return false;
	*v = strtoull(s, &end, 10);
	return true;
}

/* meta checked against the object asked for; 0, or -EBADMSG with why. */
static int meta_check(const char *meta, const char *name, const char *host, const char *bucket,
		      struct fetch_meta *m, char *why, size_t wn)
{
	char v[512];

	if (!meta_value(meta, "name", v, sizeof(v)) || strcmp(v, name))
		return snprintf(why, wn, "its meta names another object"), -EBADMSG;
	if (meta_value(meta, "bucket", v, sizeof(v)) && strcmp(v, bucket))
		return snprintf(why, wn, "its meta names another bucket"), -EBADMSG;
	if (!meta_value(meta, "Vmt-Host", v, sizeof(v)) || strcmp(v, host))
		return snprintf(why, wn, "its meta's Vmt-Host is not %s", host), -EBADMSG;
	if (meta_value(meta, "deleted", v, sizeof(v)) && strcmp(v, "false"))
		return snprintf(why, wn, "deleted"), -ENOENT;
	if (!meta_value(meta, "nuid", m->nuid, sizeof(m->nuid)) ||
	    strspn(m->nuid, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") !=
		    strlen(m->nuid))
		return snprintf(why, wn, "its meta has no valid nuid"), -EBADMSG;
	if (!meta_value(meta, "digest", v, sizeof(v)) || strncmp(v, "SHA-256=", 8) ||
	    strlen(v + 8) != 44)
		return snprintf(why, wn, "its meta has no SHA-256 digest"), -EBADMSG;
	snprintf(m->digest, sizeof(m->digest), "%s", v + 8);
	if (!meta_number(meta, "size", &m->size) || !meta_number(meta, "chunks", &m->chunks))
		return snprintf(why, wn, "its meta has no size or chunk count"), -EBADMSG;
	if (!meta_number(meta, "max_chunk_size", &m->chunk_max))
		m->chunk_max = CHUNK_DEFAULT;
	if (!m->chunk_max || m->chunk_max > CHUNK_MAX)
		return snprintf(why, wn, "its chunk size %" PRIu64 " is out of bounds (1 to %u)",
				m->chunk_max, CHUNK_MAX), -EBADMSG;
	if (m->size > SIZE_MAX_FETCH)
		return snprintf(why, wn, "its size %" PRIu64 " is over %llu GiB", m->size,
				SIZE_MAX_FETCH >> 30), -EBADMSG;
	/* every chunk holds one byte at least, chunk_max at most */
	if (m->chunks > m->size || m->chunks < (m->size + m->chunk_max - 1) / m->chunk_max)
		return snprintf(why, wn, "its %" PRIu64 " chunk(s) cannot hold %" PRIu64 " bytes",
				m->chunks, m->size), -EBADMSG;
	return 0;
}

/* The chunks of m into fd, each checked before it is written. */
static int fetch_chunks(const struct fetch_ctx *fx, const struct fetch_meta *m, int fd,
			char *why, size_t wn)
{
	const char *bucket = fx->bucket;
	char stream[80], subj[160], want[64];
	natsSubscription *sub = NULL;
	natsMsg *msg = NULL;
	jsSubOptions so;
	jsErrCode jerr = 0;
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	uint8_t sha[32];
	unsigned shalen = 0;
	uint64_t got = 0;
	int r = 0;

	if (!md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL)) {
		EVP_MD_CTX_free(md);
		return snprintf(why, wn, "out of memory"), -ENOMEM;
	}
	snprintf(stream, sizeof(stream), "OBJ_%s", bucket);
	snprintf(subj, sizeof(subj), "$O.%s.C.%s", bucket, m->nuid);
	jsSubOptions_Init(&so);
	so.Ordered = true;
	so.Stream = stream;
	if (m->chunks && js_SubscribeSync(&sub, fx->js, subj, NULL, &so, &jerr) != NATS_OK) {
		r = -EIO;
		snprintf(why, wn, "cannot read its chunks");
		goto out;
	}
	for (uint64_t i = 0; i < m->chunks; i++) {
		const char *data;
		int len;

		if (natsSubscription_NextMsg(&msg, sub, CHUNK_WAIT_MS) != NATS_OK) {
			r = -EIO;
			snprintf(why, wn, "chunk %" PRIu64 " of %" PRIu64 " did not come", i + 1,
				 m->chunks);
			goto out;
		}
		data = natsMsg_GetData(msg);
		len = natsMsg_GetDataLength(msg);
		if (len <= 0 || (uint64_t)len > m->chunk_max || (uint64_t)len > m->size - got) {
			r = -EBADMSG;
			snprintf(why, wn, "chunk %" PRIu64 " holds %d bytes: past its meta's size "
				 "(%" PRIu64 ") or chunk size (%" PRIu64 ")", i + 1, len, m->size,
				 m->chunk_max);
			goto out;
		}
		got += (uint64_t)len;
		EVP_DigestUpdate(md, data, (size_t)len);
		r = write_full(fd, data, (size_t)len);
		if (r < 0) {
			snprintf(why, wn, "write: %s", strerror(-r));
			goto out;
		}
		natsMsg_Destroy(msg);
		msg = NULL;
	}
	EVP_DigestFinal_ex(md, sha, &shalen);
	b64url(want, sizeof(want), sha, shalen);
	if (got != m->size) {
		r = -EBADMSG;
		snprintf(why, wn, "%" PRIu64 " bytes came, its meta says %" PRIu64, got, m->size);
	} else if (strcmp(want, m->digest)) {
		r = -EBADMSG;
		snprintf(why, wn, "its digest does not match its meta's");
	}
out:
	natsMsg_Destroy(msg);
	/* the ordered consumer's heartbeats still come: natsconn.h says why */
	natsconn_subs_end(fx->nc, &sub, 1, 5000);
	EVP_MD_CTX_free(md);
	return r;
}

/* Object name (HOST/GUEST/FILE, checked) into file under gfd; 0, or -errno
 * with a message printed and nothing left behind. */
static int fetch_one(const struct fetch_ctx *fx, const char *name, const char *host, int gfd,
		     const char *file, const char *shown)
{
	const char *bucket = fx->bucket;
	char stream[80], subj[700], enc[600], meta[META_MAX + 1], tmp[160], why[256] = "";
	struct fetch_meta m;
	natsMsg *msg = NULL;
	jsErrCode jerr = 0;
	int fd = -1, r, len;

	snprintf(stream, sizeof(stream), "OBJ_%s", bucket);
	b64url(enc, sizeof(enc), (const uint8_t *)name, strlen(name));
	snprintf(subj, sizeof(subj), "$O.%s.M.%s", bucket, enc);
	if (js_GetLastMsg(&msg, fx->js, stream, subj, NULL, &jerr) != NATS_OK) {
		fprintf(stderr, "fetch: %s: not in bucket %s\n", name, bucket);
		return -ENOENT;
	}
	len = natsMsg_GetDataLength(msg);
	if (len <= 0 || len > META_MAX || memchr(natsMsg_GetData(msg), 0, (size_t)len)) {
		natsMsg_Destroy(msg);
		fprintf(stderr, "fetch: %s: its meta is not one (%d bytes, at most %d)\n", name, len,
			META_MAX);
		return -EBADMSG;
	}
	memcpy(meta, natsMsg_GetData(msg), (size_t)len);
	meta[len] = 0;
	natsMsg_Destroy(msg);
	r = meta_check(meta, name, host, bucket, &m, why, sizeof(why));
	if (r < 0) {
		fprintf(stderr, "fetch: %s: refused: %s\n", name, why);
		return r;
	}
	/* a name of our own beside the target, made here (O_EXCL: no symlink
	 * followed), renamed into place once whole */
	snprintf(tmp, sizeof(tmp), ".%s.part-%d", file, (int)getpid());
	fd = openat(gfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		r = -errno;
		fprintf(stderr, "fetch: %s: %s: %s\n", name, tmp, strerror(errno));
		return r;
	}
	r = fetch_chunks(fx, &m, fd, why, sizeof(why));
	if (r == 0 && fsync(fd) < 0)
		r = -errno, snprintf(why, sizeof(why), "fsync: %s", strerror(errno));
	if (close(fd) < 0 && r == 0)
		r = -errno, snprintf(why, sizeof(why), "close: %s", strerror(errno));
	if (r == 0 && renameat2(gfd, tmp, gfd, file, RENAME_NOREPLACE) < 0)
		r = -errno, snprintf(why, sizeof(why), "rename: %s", strerror(errno));
	if (r < 0) {
		unlinkat(gfd, tmp, 0);
		fprintf(stderr, "fetch: %s: refused: %s\n", name, why);
		return r;
	}
	printf("%s\n", shown);
	return 0;
}

/* HOST/GUEST/FILE: HOST one subject token, GUEST a guest's name, FILE one
 * of its samples or an aux file; nothing else (no '..', no more '/'). */
static bool object_name_split(const char *name, char *host, char *guest, char *file)
{
	const char *s1 = strchr(name, '/'), *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
	size_t hl, gl, fl;
	uint32_t ver;

	if (!s1 || !s2 || strchr(s2 + 1, '/'))
		return false;
	hl = (size_t)(s1 - name);
	gl = (size_t)(s2 - s1 - 1);
	fl = strlen(s2 + 1);
	if (!hl || hl > VMT_FLEET_TOKEN_MAX || strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
			"abcdefghijklmnopqrstuvwxyz0123456789_-") < hl ||
	    !gl || gl >= VMT_NAME_MAX || !fl || fl >= VMT_NAME_MAX + 64)
		return false;
	memcpy(host, name, hl);
	host[hl] = 0;
	memcpy(guest, s1 + 1, gl);
	guest[gl] = 0;
	memcpy(file, s2 + 1, fl + 1);
	if (!name_is_valid(guest) || strstr(file, "..") || strchr(file, '\\') || file[0] == '.')
		return false;
	if (aux_file_version(file, fl, &ver))
		return true;
	/* a sample: GUEST-<time>.vmts, of this guest, in the name's own characters */
	return fl > gl + 6 && !strncmp(file, guest, gl) && file[gl] == '-' &&
	       !strcmp(file + fl - 5, ".vmts") &&
	       strspn(file, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.") == fl;
}

/* One object and, for a sample, its aux file; the number of failures. */
static int fetch_named(const struct fetch_ctx *fx, int dfd, const char *dir, const char *name)
{
	char host[VMT_FLEET_TOKEN_MAX + 1], guest[VMT_NAME_MAX], file[VMT_NAME_MAX + 64];
	char shown[4400], an[64], aname[600];
	struct vmt_sample info;
	struct stat st;
	char why[128];
	bool made;
	int gfd, fd, bad = 0;

	if (!object_name_split(name, host, guest, file)) {
		fprintf(stderr, "fetch: %s: not HOST/GUEST/FILE (one subject token, a guest's "
			"name, one of its samples or aux files)\n", name);
		return 1;
	}
	made = mkdirat(dfd, guest, 0755) == 0;
	gfd = openat(dfd, guest, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (gfd < 0) {
		fprintf(stderr, "fetch: %s/%s: %s\n", dir, guest, strerror(errno));
		return 1;
	}
	snprintf(shown, sizeof(shown), "%s/%s/%s", dir, guest, file);
	if (fstatat(gfd, file, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (!S_ISREG(st.st_mode)) {
			fprintf(stderr, "fetch: %s: there already, and not a file\n", shown);
			close(gfd);
			return 1;
		}
		printf("%s (there already)\n", shown);
	} else if (fetch_one(fx, name, host, gfd, file, shown) < 0) {
		if (made)
			unlinkat(dfd, guest, AT_REMOVEDIR);	/* only if empty */
		close(gfd);
		return 1;
	}
	/* a sample needs its aux file to be merged */
	fd = openat(gfd, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0 && sample_read_info_fd(fd, &info, why, sizeof(why)) == 0 &&
	    aux_file_name(an, sizeof(an), info.aux_version) == 0) {
		snprintf(aname, sizeof(aname), "%s/%s/%s", host, guest, an);
		snprintf(shown, sizeof(shown), "%s/%s/%s", dir, guest, an);
		if (faccessat(gfd, an, F_OK, AT_SYMLINK_NOFOLLOW) != 0 &&
		    fetch_one(fx, aname, host, gfd, an, shown) < 0)
			bad++;
	}
	if (fd >= 0)
		close(fd);
	close(gfd);
	return bad;
}

int fleet_fetch(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "config", required_argument, NULL, 'c' }, { "output", required_argument, NULL, 'o' },
		{ 0 },
	};
	const char *conf = FLEET_CONF_DEFAULT, *dir = ".";
	struct vmt_config c;
	natsConnection *nc = NULL;
	jsCtx *js = NULL;
	jsOptions jo;
	int opt, bad = 0, dfd;

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
	if (fleet_load_conf(conf, &c) < 0)
		return 1;
	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		fprintf(stderr, "fetch: %s: %s\n", dir, strerror(errno));
		config_free(&c);
		return 1;
	}
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		fprintf(stderr, "fetch: %s: %s\n", dir, strerror(errno));
		config_free(&c);
		return 1;
	}
	jsOptions_Init(&jo);
	/* a loaded server answers late: 5 s (the library's) failed a fetch
	 * under load; the chunks wait CHUNK_WAIT_MS each on their own */
	jo.Wait = 30000;
	if (fleet_connect(&c.fleet, &nc) < 0 || natsConnection_JetStream(&js, nc, &jo) != NATS_OK) {
		natsConnection_Destroy(nc);
		close(dfd);
		config_free(&c);
		return 1;
	}
	for (int i = optind; i < argc; i++) {
		const struct fetch_ctx fx = { nc, js, c.fleet.bucket };

		bad += fetch_named(&fx, dfd, dir, argv[i]);
	}
	jsCtx_Destroy(js);
	natsConnection_Destroy(nc);
	close(dfd);
	config_free(&c);
	return bad ? 1 : 0;
}
