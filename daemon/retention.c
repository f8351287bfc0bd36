/* SPDX-License-Identifier: MIT */
/*
 * retention: the store, what the guest folders of STATE_DIR hold. Names
 * are taken only when they round-trip to the writer's patterns; a scan
 * lists samples (with their INFO), aux files and temporaries, for
 * retention_list and for the plan (retention-plan.c) that deletes.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

#include "aux.h"
#include "retention-int.h"
#include "util.h"

/* "-YYYYMMDDThhmmss.uuuuuuZ.vmts" after the guest name */
#define SAMPLE_SUFFIX_LEN 29
/* ".tmp-XXXXXX" after a temporary's NAME: mkostemp's six letters and digits */
#define TEMP_SUFFIX ".tmp-"
#define TEMP_SUFFIX_LEN 11

/* ---- names ----------------------------------------------------------- */

static bool digits(const char *p, size_t n, uint64_t *v)
{
	*v = 0;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return false;
		*v = *v * 10 + (uint64_t)(p[i] - '0');
	}
	return true;
}

/*
 * name[len] is GUEST-YYYYMMDDThhmmss.uuuuuuZ.vmts for this guest, exactly as
 * sample_file_name() writes it: a round trip refuses 20261332T..., leading
 * junk and every other near miss.
 */
static bool sample_name_parse(const char *guest, const char *name, size_t len, uint64_t *ns)
{
	size_t gl = strlen(guest);
	uint64_t y, mo, d, h, mi, s, us;
	char again[VMT_STORE_NAME_MAX];
	struct tm tm = { 0 };
	const char *t;
	time_t sec;

	if (len != gl + SAMPLE_SUFFIX_LEN || memcmp(name, guest, gl) || name[gl] != '-')
		return false;
	t = name + gl + 1;
	if (!digits(t, 4, &y) || !digits(t + 4, 2, &mo) || !digits(t + 6, 2, &d) || t[8] != 'T' ||
	    !digits(t + 9, 2, &h) || !digits(t + 11, 2, &mi) || !digits(t + 13, 2, &s) ||
	    t[15] != '.' || !digits(t + 16, 6, &us) || memcmp(t + 22, "Z.vmts", 6))
		return false;
	if (y < 1970)
		return false;
	tm.tm_year = (int)y - 1900;
	tm.tm_mon = (int)mo - 1;
	tm.tm_mday = (int)d;
	tm.tm_hour = (int)h;
	tm.tm_min = (int)mi;
	tm.tm_sec = (int)s;
	sec = timegm(&tm);
	if (sec < 0)
		return false;
	*ns = (uint64_t)sec * 1000000000u + us * 1000u;
	if (sample_file_name(again, sizeof(again), guest, *ns) < 0)
		return false;
	return strlen(again) == len && !memcmp(again, name, len);
}

/* aux-NNNNNN.vmtaux, exactly as aux_file_name() writes it. */
static bool aux_name_parse(const char *name, size_t len, uint32_t *version)
{
	return aux_file_version(name, len, version);
}

/* .NAME.tmp-XXXXXX, NAME a sample or aux name of this guest: afile's temporary. */
static bool temp_name_parse(const char *guest, const char *name, size_t len)
{
	const char *x;
	size_t inner;
	uint64_t ns;
	uint32_t v;

	if (len < 1 + TEMP_SUFFIX_LEN + 1 || name[0] != '.' ||
	    memcmp(name + len - TEMP_SUFFIX_LEN, TEMP_SUFFIX, 5))
		return false;
	x = name + len - 6;
	inner = len - 1 - TEMP_SUFFIX_LEN;
	for (int i = 0; i < 6; i++)
		if (!((x[i] >= '0' && x[i] <= '9') || (x[i] >= 'a' && x[i] <= 'z') ||
		      (x[i] >= 'A' && x[i] <= 'Z')))
			return false;
	return sample_name_parse(guest, name + 1, inner, &ns) || aux_name_parse(name + 1, inner, &v);
}

/* ---- scan ------------------------------------------------------------ */

static int grow(void **p, size_t n, size_t *cap, size_t size)
{
	size_t c = *cap ? *cap * 2 : 16;
	void *t;

	if (n < *cap)
		return 0;
	t = reallocarray(*p, c, size);
	if (!t)
		return -ENOMEM;
	*p = t;
	*cap = c;
	return 0;
}

struct scan {
	struct vmt_store *st;
	const char *state_dir;
	size_t cap_guests, cap_samples, cap_aux, cap_temps;
	struct vmt_sample info;	/* scratch: INFO of one sample at a time */
};

/* s: what fstatat said of name, a regular file */
static int add_sample(struct scan *sc, int gfd, uint32_t gi, const char *name, uint64_t ns,
		      struct stat s)
{
	struct vmt_store *st = sc->st;
	struct vmt_store_sample *e;
	const char *gname = st->guests[gi].name;
	int fd, r;

	r = grow((void **)&st->samples, st->nsamples, &sc->cap_samples, sizeof(*st->samples));
	if (r < 0)
		return r;
	/* O_NOFOLLOW: it was a regular file a moment ago; it must still be */
	fd = openat(gfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 && (errno == ENOENT || errno == ELOOP))
		return 0;
	r = fd < 0 ? -errno : 0;
	if (fd >= 0 && (fstat(fd, &s) < 0 || !S_ISREG(s.st_mode))) {
		close(fd);
		return 0;
	}
	e = &st->samples[st->nsamples];
	memset(e, 0, sizeof(*e));
	e->guest = gi;
	snprintf(e->name, sizeof(e->name), "%s", name);
	e->created_ns = ns;
	e->bytes = (uint64_t)s.st_size;
	{
		char mk[VMT_STORE_NAME_MAX + 16];

		snprintf(mk, sizeof(mk), "%s.uploaded", name);
		e->unuploaded = faccessat(gfd, mk, F_OK, AT_SYMLINK_NOFOLLOW) < 0;
	}
	if (asprintf(&e->path, "%s/%s/%s", sc->state_dir, gname, name) < 0) {
		e->path = NULL;
		if (fd >= 0)
			close(fd);
		return -ENOMEM;
	}
	/* a file that cannot be opened now is listed, and keeps its guest's aux */
	if (fd < 0) {
		e->info_error = r;
	} else {
		e->info_error = sample_read_info_fd(fd, &sc->info, e->why, sizeof(e->why));
		close(fd);
	}
	if (e->info_error == -ENOMEM) {
		free(e->path);
		return -ENOMEM;
	}
	if (e->info_error == 0) {
		e->aux_version = sc->info.aux_version;
		e->aux_id = sc->info.aux_id;
		e->dump_id = sc->info.dump_id;
		e->ncpus = sc->info.ncpus;
		if (sc->info.ntriggers) {
			e->triggers = malloc(sc->info.ntriggers * sizeof(*e->triggers));
			if (!e->triggers) {
				free(e->path);
				return -ENOMEM;
			}
			memcpy(e->triggers, sc->info.triggers, sc->info.ntriggers * sizeof(*e->triggers));
			e->ntriggers = sc->info.ntriggers;
		}
	} else if (!e->why[0]) {
		snprintf(e->why, sizeof(e->why), "%s", strerror(-e->info_error));
	}
	st->nsamples++;
	st->sample_bytes += e->bytes;
	st->guests[gi].nsamples++;
	st->guests[gi].bytes += e->bytes;
	return 0;
}

static int scan_guest(struct scan *sc, int sfd, const char *gname)
{
	struct vmt_store *st = sc->st;
	struct vmt_store_guest *g;
	struct dirent *de;
	uint32_t gi;
	DIR *d;
	int gfd, r = 0;

	/* O_NOFOLLOW: a symlinked guest folder would lead outside state_dir */
	gfd = openat(sfd, gname, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (gfd < 0)
		return errno == ENOENT || errno == ELOOP || errno == ENOTDIR ? 0 : -errno;
	d = fdopendir(gfd);
	if (!d) {
		r = -errno;
		close(gfd);
		return r;
	}
	r = grow((void **)&st->guests, st->nguests, &sc->cap_guests, sizeof(*st->guests));
	if (r < 0)
		goto out;
	gi = (uint32_t)st->nguests++;
	g = &st->guests[gi];
	memset(g, 0, sizeof(*g));
	snprintf(g->name, sizeof(g->name), "%s", gname);

	while (r == 0) {
		const char *name;
		size_t len;
		uint64_t ns;
		uint32_t v;
		struct stat s;
		enum { NONE, SAMPLE, AUX, TEMP } kind = NONE;

		errno = 0;
		de = readdir(d);
		if (!de) {
			r = -errno;
			break;
		}
		name = de->d_name;
		len = strlen(name);
		if (len >= VMT_STORE_NAME_MAX)
			continue;
		if (sample_name_parse(gname, name, len, &ns))
			kind = SAMPLE;
		else if (aux_name_parse(name, len, &v))
			kind = AUX;
		else if (temp_name_parse(gname, name, len))
			kind = TEMP;
		else
			continue;
		if (fstatat(gfd, name, &s, AT_SYMLINK_NOFOLLOW) < 0) {
			if (errno != ENOENT)
				r = -errno;
			continue;
		}
		if (!S_ISREG(s.st_mode))
			continue;	/* symlinks too: neither counted nor touched */
		if (kind == SAMPLE) {
			r = add_sample(sc, gfd, gi, name, ns, s);
		} else if (kind == AUX) {
			r = grow((void **)&st->aux, st->naux, &sc->cap_aux, sizeof(*st->aux));
			if (r < 0)
				break;
			st->aux[st->naux] = (struct vmt_store_aux){ .guest = gi, .version = v,
								     .bytes = (uint64_t)s.st_size };
			snprintf(st->aux[st->naux].name, VMT_STORE_NAME_MAX, "%s", name);
			st->naux++;
			st->aux_bytes += (uint64_t)s.st_size;
			st->guests[gi].bytes += (uint64_t)s.st_size;
		} else {
			r = grow((void **)&st->temps, st->ntemps, &sc->cap_temps, sizeof(*st->temps));
			if (r < 0)
				break;
			st->temps[st->ntemps] = (struct vmt_store_temp){ .guest = gi,
				.bytes = (uint64_t)s.st_size, .mtime_s = (int64_t)s.st_mtime };
			snprintf(st->temps[st->ntemps].name, VMT_STORE_NAME_MAX, "%s", name);
			st->ntemps++;
		}
	}
out:
	closedir(d);
	return r;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_sample_old_first(const void *a, const void *b)
{
	const struct vmt_store_sample *x = a, *y = b;

	if (x->created_ns != y->created_ns)
		return x->created_ns < y->created_ns ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int cmp_sample_new_first(const void *a, const void *b)
{
	return cmp_sample_old_first(b, a);
}

int retention_cmp_aux(const void *a, const void *b)
{
	const struct vmt_store_aux *x = a, *y = b;

	if (x->guest != y->guest)
		return x->guest < y->guest ? -1 : 1;
	return x->version < y->version ? -1 : x->version > y->version;
}

static int cmp_temp(const void *a, const void *b)
{
	const struct vmt_store_temp *x = a, *y = b;

	if (x->guest != y->guest)
		return x->guest < y->guest ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* The names of state_dir's entries that may be guest folders, sorted. */
static int guest_names(int sfd, char ***out, size_t *n)
{
	char **v = NULL;
	size_t cap = 0;
	struct dirent *de;
	DIR *d;
	int fd, r = 0;

	*out = NULL;
	*n = 0;
	fd = dup(sfd);
	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		r = -errno;
		close(fd);
		return r;
	}
	rewinddir(d);
	for (;;) {
		errno = 0;
		de = readdir(d);
		if (!de) {
			r = -errno;
			break;
		}
		if (!name_is_valid(de->d_name))
			continue;	/* ".", "..", hidden, or no guest's */
		r = grow((void **)&v, *n, &cap, sizeof(*v));
		if (r < 0)
			break;
		v[*n] = strdup(de->d_name);
		if (!v[*n]) {
			r = -ENOMEM;
			break;
		}
		(*n)++;
	}
	closedir(d);
	if (*n)
		qsort(v, *n, sizeof(*v), cmp_str);
	*out = v;
	return r;
}

/* guest NULL: every guest folder. */
static int scan(const char *state_dir, const char *guest, struct vmt_store *out)
{
	struct scan sc = { .st = out, .state_dir = state_dir };
	char **names = NULL;
	size_t n = 0;
	int sfd, r;

	memset(out, 0, sizeof(*out));
	if (guest && !name_is_valid(guest))
		return -EINVAL;
	sfd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sfd < 0)
		return -errno;
	if (guest)
		r = scan_guest(&sc, sfd, guest);
	else
		r = guest_names(sfd, &names, &n);
	for (size_t i = 0; r == 0 && i < n; i++)
		r = scan_guest(&sc, sfd, names[i]);
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	close(sfd);
	if (out->nsamples)
		qsort(out->samples, out->nsamples, sizeof(*out->samples), cmp_sample_old_first);
	if (out->naux)
		qsort(out->aux, out->naux, sizeof(*out->aux), retention_cmp_aux);
	if (out->ntemps)
		qsort(out->temps, out->ntemps, sizeof(*out->temps), cmp_temp);
	return r;
}

int retention_scan(const char *state_dir, struct vmt_store *out)
{
	return scan(state_dir, NULL, out);
}

int retention_list(const char *state_dir, const char *guest, struct vmt_store *out)
{
	int r = scan(state_dir, guest, out);

	if (r == 0 && out->nsamples)
		qsort(out->samples, out->nsamples, sizeof(*out->samples), cmp_sample_new_first);
	return r;
}

void retention_store_free(struct vmt_store *st)
{
	for (size_t i = 0; i < st->nsamples; i++) {
		free(st->samples[i].path);
		free(st->samples[i].triggers);
	}
	free(st->guests);
	free(st->samples);
	free(st->aux);
	free(st->temps);
	memset(st, 0, sizeof(*st));
}
