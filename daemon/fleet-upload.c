/* SPDX-License-Identifier: MIT */
/*
 * fleet's uploads, on the uploader thread. The object store layout is the
 * one NATS clients share (ADR-20, checked against nats.js 2.29
 * lib/jetstream/objectstore.js): stream OBJ_<bucket> on $O.<bucket>.C.>
 * and $O.<bucket>.M.>, rollup headers and direct get allowed, discard new;
 * an object's chunks (128 KiB) on $O.<bucket>.C.<nuid>, then its meta JSON
 * on $O.<bucket>.M.<base64url, padded, of the name> with Nats-Rollup: sub;
 * digest "SHA-256=" + base64url (padded) of the SHA-256 of the content.
 * libnats 3.4.1 has no object store API of its own: the messages are
 * published with its JetStream calls.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "b64url.h"
#include "fleet-int.h"
#include "log.h"
#include "util.h"

static void nuid(char out[23])
{
	static const char d[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
	uint8_t r[22];

	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		for (size_t i = 0; i < sizeof(r); i++)
			r[i] = (uint8_t)rand();
	for (int i = 0; i < 22; i++)
		out[i] = d[r[i] % 62];
	out[22] = 0;
}

static bool is_sample(const char *g, const char *n)
{
	size_t gl = strlen(g), l = strlen(n);

	return n[0] != '.' && l > gl + 6 && !strncmp(n, g, gl) && n[gl] == '-' &&
	       !strcmp(n + l - 5, ".vmts");
}

static bool is_aux(const char *n)
{
	size_t l = strlen(n);

	return !strncmp(n, "aux-", 4) && l > 11 && !strcmp(n + l - 7, ".vmtaux");
}

/* The headers of a sample's object: its reasons and window, from INFO. */
static void sample_headers(int fd, char *out, size_t n)
{
	struct vmt_sample s;
	char why[128], esc[VMT_REASON_MAX * 6 + 1], reasons[2048] = "";
	size_t o = 0;

	out[0] = 0;
	if (sample_read_info_fd(fd, &s, why, sizeof(why)) < 0)
		return;
	/* reasons may be a guest's words: escaped whole, or left out whole,
	 * so the meta stays JSON */
	for (uint32_t i = 0; i < s.ntriggers; i++) {
		if (fleet_json_escape(esc, sizeof(esc), s.triggers[i].reason) < 0)
			continue;
		if (o + strlen(esc) + 4 >= sizeof(reasons))
			break;
		o += (size_t)snprintf(reasons + o, sizeof(reasons) - o, "%s\"%s\"", o ? "," : "",
				      esc);
	}
	snprintf(out, n, ",\"Vmt-Reasons\":[%s],\"Vmt-Created-Ns\":[\"%" PRIu64 "\"],"
		 "\"Vmt-Window-Since-Ns\":[\"%" PRIu64 "\"]", reasons, s.created_ns, s.window_since_ns);
}

/* Best effort: the chunks of an attempt that failed, gone (ADR-20 says a
 * writer purges them); while disconnected it would only wait for the
 * request's timeout, so it is left to a later purge of the bucket. */
static void upload_purge(struct vmt_fleet *f, natsConnection *nc, jsCtx *js, const char *csubj)
{
	char stream[80];
	jsOptions o;
	jsErrCode jerr = 0;

	if (natsConnection_Status(nc) != NATS_CONN_STATUS_CONNECTED)
		return;
	snprintf(stream, sizeof(stream), "OBJ_%s", f->conf.bucket);
	jsOptions_Init(&o);
	o.Stream.Purge.Subject = csubj;
	js_PurgeStream(js, stream, &o, &jerr);
}

/*
 * Whether the stream holds the object whole, asked of the stream's leader
 * before the marker says so: its chunk subject holds exactly the chunks
 * whose publishes were acknowledged. An acknowledged publish is stored,
 * but after servers are killed a publish that timed out may still be
 * stored later, and a reader (nats.js) reads every message on the chunk
 * subject, not `chunks` of them. Only stream info is asked: a host's
 * permissions (docs/FLEET.md) allow it, and not reading messages (which
 * would let a host read every other host's samples). -EIO: it does not
 * hold it whole; -EAGAIN: it could not be asked.
 */
static int upload_verify(struct vmt_fleet *f, jsCtx *js, const char *name, const char *csubj,
			 uint64_t chunks)
{
	static uint64_t last_log;	/* the uploader thread's only */
	char stream[80];
	jsOptions o;
	jsStreamInfo *si = NULL;
	jsErrCode jerr = 0;
	uint64_t held = 0;
	natsStatus s;

	snprintf(stream, sizeof(stream), "OBJ_%s", f->conf.bucket);
	jsOptions_Init(&o);
	o.Stream.Info.SubjectsFilter = csubj;
	s = js_GetStreamInfo(&si, js, stream, &o, &jerr);
	if (s == NATS_OK && si->State.Subjects)
		for (int i = 0; i < si->State.Subjects->Count; i++)
			if (!strcmp(si->State.Subjects->List[i].Subject, csubj))
				held = si->State.Subjects->List[i].Msgs;
	jsStreamInfo_Destroy(si);
	if (s != NATS_OK) {
		fleet_set_error(f, "upload: asking the stream what it holds", s);
		return -EAGAIN;	/* not known: nothing purged */
	}
	if (held == chunks)
		return 0;
	pthread_mutex_lock(&f->lock);
	snprintf(f->st.error, sizeof(f->st.error), "upload: %s: the stream holds %" PRIu64 " messages "
		 "on its chunk subject, %" PRIu64 " written (uploaded again)", name, held, chunks);
	if (!last_log || now_monotonic_ns() - last_log > LOG_EVERY_NS) {
		last_log = now_monotonic_ns();
		log_warning("fleet: %s (logged once a minute)", f->st.error);
	}
	pthread_mutex_unlock(&f->lock);
	return -EIO;
}

/* The file's chunks published on csubj, its digest into digest; on a
 * failure the chunks published are purged. */
static int upload_chunks(struct vmt_fleet *f, natsConnection *nc, jsCtx *js, int fd,
			 const char *csubj, char digest[64], uint64_t *size, uint64_t *chunks)
{
	uint8_t *buf = malloc(CHUNK), sha[32];
	unsigned shalen = 0;
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	natsStatus s;
	jsErrCode jerr = 0;
	int r = 0;

	if (!buf || !md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL)) {
		r = -ENOMEM;
		goto out;
	}
	for (;;) {
		ssize_t got = 0, k;

		while (got < CHUNK && (k = read(fd, buf + got, (size_t)(CHUNK - got))) > 0)
			got += k;
		if (got < 0 || (got < CHUNK && k < 0)) {
			r = -errno;
			if (*chunks)
				upload_purge(f, nc, js, csubj);
			goto out;
		}
		if (!got)
			break;
		EVP_DigestUpdate(md, buf, (size_t)got);
		s = js_Publish(NULL, js, csubj, buf, (int)got, NULL, &jerr);
		if (s != NATS_OK) {
			fleet_set_error(f, "upload", s);
			upload_purge(f, nc, js, csubj);
			r = -EIO;
			goto out;
		}
		*size += (uint64_t)got;
		(*chunks)++;
		if (got < CHUNK)
			break;
	}
	EVP_DigestFinal_ex(md, sha, &shalen);
	b64url(digest, 64, sha, shalen);
out:
	EVP_MD_CTX_free(md);
	free(buf);
	return r;
}

/* The object's meta, after its chunks: 0 or -EIO (its chunks stay: a meta
 * that timed out may still be stored). */
static int upload_meta(struct vmt_fleet *f, jsCtx *js, const char *name, const char *guest,
		       const char *hdrs, const char *id, uint64_t size, uint64_t chunks,
		       const char *digest)
{
	char subj[512], ename[420], meta[8192], mt[40];
	natsMsg *msg = NULL;
	natsStatus s;
	jsErrCode jerr = 0;
	struct tm tm;
	time_t t;

	b64url(ename, sizeof(ename), (const uint8_t *)name, strlen(name));
	t = time(NULL);
	gmtime_r(&t, &tm);
	strftime(mt, sizeof(mt), "%Y-%m-%dT%H:%M:%SZ", &tm);
	snprintf(meta, sizeof(meta),
		 "{\"name\":\"%s\",\"description\":\"\",\"headers\":{\"Vmt-Host\":[\"%s\"],"
		 "\"Vmt-Guest\":[\"%s\"]%s},\"options\":{\"max_chunk_size\":%d},\"bucket\":\"%s\","
		 "\"nuid\":\"%s\",\"size\":%" PRIu64 ",\"mtime\":\"%s\",\"chunks\":%" PRIu64 ","
		 "\"digest\":\"SHA-256=%s\",\"deleted\":false}",
		 name, f->host, guest, hdrs, CHUNK, f->conf.bucket, id, size, mt, chunks, digest);
	snprintf(subj, sizeof(subj), "$O.%s.M.%s", f->conf.bucket, ename);
	s = natsMsg_Create(&msg, subj, NULL, meta, (int)strlen(meta));
	if (s == NATS_OK)
		s = natsMsgHeader_Set(msg, "Nats-Rollup", "sub");
	if (s == NATS_OK)
		s = js_PublishMsg(NULL, js, msg, NULL, &jerr);
	natsMsg_Destroy(msg);
	if (s != NATS_OK) {
		fleet_set_error(f, "upload", s);
		return -EIO;
	}
	return 0;
}

/* Uploaded whole: the marker (the backlog is what has none), the counters,
 * and a sample's announcement. */
static int upload_done(struct vmt_fleet *f, natsConnection *nc, int gfd, const char *guest,
		       const char *file, const char *name, const char *hdrs, uint64_t size,
		       bool sample)
{
	char subj[512], meta[8192];
	int r;

	snprintf(subj, sizeof(subj), "%s.uploaded", file);
	r = openat(gfd, subj, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
	if (r < 0)
		return -errno;
	close(r);
	pthread_mutex_lock(&f->lock);
	f->st.uploaded++;
	f->st.uploaded_bytes += size;
	pthread_mutex_unlock(&f->lock);
	if (sample) {
		char tok[VMT_NAME_MAX];

		snprintf(tok, sizeof(tok), "%s", guest);
		for (char *q = tok; *q; q++)
			if (*q == '.')
				*q = '_';	/* one token: docs/FLEET.md */
		snprintf(subj, sizeof(subj), "%s.sample.%s.%s", f->conf.subject_prefix, f->host, tok);
		snprintf(meta, sizeof(meta), "{\"host\":\"%s\",\"guest\":\"%s\",\"object\":\"%s\","
			 "\"size\":%" PRIu64 ",\"headers\":{%s}}", f->host, guest, name, size,
			 hdrs[0] ? hdrs + 1 : "");
		natsConnection_PublishString(nc, subj, meta);
	}
	return 0;
}

static int upload(struct vmt_fleet *f, natsConnection *nc, jsCtx *js, int gfd, const char *guest,
		  const char *file, bool sample)
{
	char csubj[512], id[23], name[300], digest[64], hdrs[2400];
	uint64_t size = 0, chunks = 0;
	int fd, r;

	fd = openat(gfd, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;	/* retention took it */
	nuid(id);
	snprintf(csubj, sizeof(csubj), "$O.%s.C.%s", f->conf.bucket, id);
	r = upload_chunks(f, nc, js, fd, csubj, digest, &size, &chunks);
	if (r < 0)
		goto out;
	snprintf(name, sizeof(name), "%s/%s/%s", f->host, guest, file);
	hdrs[0] = 0;
	if (sample)
		sample_headers(fd, hdrs, sizeof(hdrs));
	r = upload_meta(f, js, name, guest, hdrs, id, size, chunks, digest);
	if (r < 0)
		goto out;
	r = upload_verify(f, js, name, csubj, chunks);
	if (r < 0) {
		if (r == -EIO)
			upload_purge(f, nc, js, csubj);	/* not whole */
		goto out;
	}
	r = upload_done(f, nc, gfd, guest, file, name, hdrs, size, sample);
out:
	close(fd);
	return r;
}

static int names_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Another name into *v (grown as needed, up to cap names): false when full. */
static bool names_add(char ***v, size_t *nv, size_t *room, size_t cap, const char *name)
{
	if (*nv >= cap)
		return false;
	if (*nv == *room) {
		size_t more = *room ? *room * 2 : 64;
		char **nvv = realloc(*v, more * sizeof(**v));

		if (!nvv)
			return false;
		*v = nvv;
		*room = more;
	}
	(*v)[*nv] = strdup(name);
	*nv += (*v)[*nv] != NULL;
	return true;
}

/*
 * One guest folder: aux files first, so a sample's aux is there before its
 * announcement; then samples, oldest first. Every file not uploaded counts
 * in *waiting; a pass takes every aux file (retention.max_aux bounds them)
 * and up to queue_max samples in the order the folder lists them (oldest
 * first among those), the rest wait on disk for the next pass.
 */
static int scan_guest(struct vmt_fleet *f, natsConnection *nc, jsCtx *js, int sfd,
		      const char *guest, uint64_t *waiting, bool upload_now)
{
	char **v = NULL;
	size_t nv = 0, room = 0, over = 0;
	DIR *d;
	int gfd, r = 0;
	struct dirent *de;

	gfd = openat(sfd, guest, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (gfd < 0)
		return 0;
	d = fdopendir(gfd);
	if (!d) {
		close(gfd);
		return 0;
	}
	while ((de = readdir(d))) {
		char mk[300];
		struct stat st;
		size_t l = strlen(de->d_name);

		if (l > 8 && !strcmp(de->d_name + l - 9, ".uploaded")) {
			/* a marker whose file retention took: gone with it */
			snprintf(mk, sizeof(mk), "%.*s", (int)(l - 9), de->d_name);
			if (fstatat(gfd, mk, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT)
				unlinkat(gfd, de->d_name, 0);
			continue;
		}
		if (!is_aux(de->d_name) && !is_sample(guest, de->d_name))
			continue;
		if (fstatat(gfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
			continue;
		snprintf(mk, sizeof(mk), "%s.uploaded", de->d_name);
		if (faccessat(gfd, mk, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
			continue;
		if (!names_add(&v, &nv, &room, is_aux(de->d_name) ? nv + 1 : f->conf.queue_max,
			       de->d_name))
			over++;	/* waits on disk: a later pass takes it */
	}
	if (nv)
		qsort(v, nv, sizeof(*v), names_cmp);	/* "aux-" sorts apart; samples by time */
	*waiting += nv + over;
	if (over && upload_now)
		log_debug("fleet: guest %s: %zu files this pass, %zu wait for the next (queue_max %u)",
			  guest, nv, over, f->conf.queue_max);
	for (int pass = 0; pass < 2 && upload_now && r == 0; pass++)
		for (size_t i = 0; i < nv && r == 0; i++) {
			bool aux = is_aux(v[i]);

			if (aux != (pass == 0))
				continue;
			r = upload(f, nc, js, gfd, guest, v[i], !aux);
			fleet_subs_apply(f, nc);	/* a label that changed meanwhile */
			if (r == 0) {
				pthread_mutex_lock(&f->lock);
				if (f->st.queue)
					f->st.queue--;
				pthread_mutex_unlock(&f->lock);
			}
		}
	for (size_t i = 0; i < nv; i++)
		free(v[i]);
	free(v);
	closedir(d);
	return r;
}

/* Count what waits, then upload it; <0 at the first failure. */
int fleet_scan(struct vmt_fleet *f, natsConnection *nc, jsCtx *js)
{
	uint64_t waiting = 0;
	int sfd, r = 0;
	DIR *d;
	struct dirent *de;

	for (int round = 0; round < 2 && r == 0; round++) {
		sfd = open(f->state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (sfd < 0)
			return -errno;
		d = fdopendir(sfd);
		if (!d) {
			close(sfd);
			return -ENOMEM;
		}
		waiting = 0;
		while ((de = readdir(d)) && r == 0)
			if (name_is_valid(de->d_name) && de->d_type == DT_DIR)
				r = scan_guest(f, nc, js, sfd, de->d_name, &waiting, round == 1);
		closedir(d);
		if (round == 0) {
			pthread_mutex_lock(&f->lock);
			f->st.queue = waiting;
			pthread_mutex_unlock(&f->lock);
			if (!waiting || !js)
				break;
		}
	}
	return r;
}

int fleet_ensure_stream(struct vmt_fleet *f, jsCtx *js)
{
	char name[80], c[80], m[80];
	const char *subjects[2] = { c, m };
	jsStreamConfig cfg;
	jsStreamInfo *si = NULL;
	jsErrCode jerr = 0;
	natsStatus s;

	snprintf(name, sizeof(name), "OBJ_%s", f->conf.bucket);
	s = js_GetStreamInfo(&si, js, name, NULL, &jerr);
	if (s == NATS_OK) {
		jsStreamInfo_Destroy(si);
		return 0;
	}
	snprintf(c, sizeof(c), "$O.%s.C.>", f->conf.bucket);
	snprintf(m, sizeof(m), "$O.%s.M.>", f->conf.bucket);
	jsStreamConfig_Init(&cfg);
	cfg.Name = name;
	cfg.Subjects = subjects;
	cfg.SubjectsLen = 2;
	cfg.Storage = js_FileStorage;
	cfg.Replicas = (int64_t)f->conf.replicas;
	cfg.Discard = js_DiscardNew;
	cfg.AllowRollup = true;
	cfg.AllowDirect = true;
	s = js_AddStream(&si, js, &cfg, NULL, &jerr);
	if (s != NATS_OK) {
		fleet_set_error(f, "creating the bucket's stream", s);
		return -EIO;
	}
	jsStreamInfo_Destroy(si);
	return 0;
}
