/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>

#include "aux.h"
#include "retention.h"
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

static int cmp_aux(const void *a, const void *b)
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
		qsort(out->aux, out->naux, sizeof(*out->aux), cmp_aux);
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

/* ---- apply ----------------------------------------------------------- */

/*
 * What a plan tracks while it drops samples: for each aux file how many
 * remaining samples need it, for each guest how many samples remain and how
 * many of those could not be read now (each keeps all of its guest's aux).
 */
struct plan {
	const struct vmt_store *st;
	bool *gone;		/* per sample: dropped */
	bool *pinned;		/* per aux */
	uint32_t *refs;		/* per aux */
	size_t *aux_of;		/* per sample: index in st->aux, or SIZE_MAX */
	uint32_t *count;	/* per guest: samples remaining */
	uint32_t *held;		/* per guest: unreadable samples remaining */
	uint32_t *live;		/* per guest: aux files still needed (aux_live) */
	uint32_t *npinned;	/* per guest: of those, pinned */
	size_t *aux_first;	/* per guest: its aux files are aux_first[g]..aux_first[g + 1] */
	uint64_t total;		/* bytes of remaining samples and live aux files */
};

static bool aux_live(const struct plan *p, size_t a)
{
	return p->refs[a] || p->pinned[a] || p->held[p->st->aux[a].guest];
}

static void plan_free(struct plan *p)
{
	free(p->gone);
	free(p->pinned);
	free(p->refs);
	free(p->aux_of);
	free(p->count);
	free(p->held);
	free(p->live);
	free(p->npinned);
	free(p->aux_first);
}

static size_t find_aux(const struct vmt_store *st, uint32_t guest, uint32_t version)
{
	struct vmt_store_aux key = { .guest = guest, .version = version };
	const struct vmt_store_aux *a;

	if (!st->naux)
		return SIZE_MAX;
	a = bsearch(&key, st->aux, st->naux, sizeof(*st->aux), cmp_aux);
	return a ? (size_t)(a - st->aux) : SIZE_MAX;
}

static int plan_init(struct plan *p, const struct vmt_store *st, const struct vmt_aux_pin *pins,
		     size_t npins)
{
	size_t ns = st->nsamples, na = st->naux, ng = st->nguests;

	memset(p, 0, sizeof(*p));
	p->st = st;
	p->gone = calloc(ns + 1, sizeof(*p->gone));
	p->aux_of = calloc(ns + 1, sizeof(*p->aux_of));
	p->pinned = calloc(na + 1, sizeof(*p->pinned));
	p->refs = calloc(na + 1, sizeof(*p->refs));
	p->count = calloc(ng + 1, sizeof(*p->count));
	p->held = calloc(ng + 1, sizeof(*p->held));
	p->live = calloc(ng + 1, sizeof(*p->live));
	p->npinned = calloc(ng + 1, sizeof(*p->npinned));
	p->aux_first = calloc(ng + 1, sizeof(*p->aux_first));
	if (!p->gone || !p->aux_of || !p->pinned || !p->refs || !p->count || !p->held ||
	    !p->live || !p->npinned || !p->aux_first)
		return -ENOMEM;

	for (size_t g = 0, a = 0; g <= ng; g++) {
		while (a < na && st->aux[a].guest < g)
			a++;
		p->aux_first[g] = a;
	}
	for (size_t i = 0; i < npins; i++)
		for (size_t a = 0; a < na; a++)
			if (st->aux[a].version == pins[i].aux_version &&
			    !strcmp(st->guests[st->aux[a].guest].name, pins[i].guest))
				p->pinned[a] = true;
	for (size_t i = 0; i < ns; i++) {
		const struct vmt_store_sample *s = &st->samples[i];

		p->aux_of[i] = SIZE_MAX;
		p->count[s->guest]++;
		p->total += s->bytes;
		if (s->info_error == 0) {
			p->aux_of[i] = find_aux(st, s->guest, s->aux_version);
			if (p->aux_of[i] != SIZE_MAX)
				p->refs[p->aux_of[i]]++;
		} else if (s->info_error != -EBADMSG) {
			p->held[s->guest]++;
		}
	}
	for (size_t a = 0; a < na; a++) {
		p->npinned[st->aux[a].guest] += p->pinned[a];
		if (aux_live(p, a)) {
			p->total += st->aux[a].bytes;
			p->live[st->aux[a].guest]++;
		}
	}
	return 0;
}

/* Sample i no longer counts; its aux files may stop counting with it. */
static void plan_drop(struct plan *p, size_t i)
{
	const struct vmt_store_sample *s = &p->st->samples[i];
	size_t a = p->aux_of[i];

	if (p->gone[i])
		return;
	p->gone[i] = true;
	p->count[s->guest]--;
	p->total -= s->bytes;
	if (a != SIZE_MAX) {
		p->refs[a]--;
		if (!aux_live(p, a)) {
			p->total -= p->st->aux[a].bytes;
			p->live[s->guest]--;
		}
	} else if (s->info_error != 0 && s->info_error != -EBADMSG) {
		p->held[s->guest]--;
		if (p->held[s->guest])
			return;
		for (a = p->aux_first[s->guest]; a < p->aux_first[s->guest + 1]; a++)
			if (!aux_live(p, a)) {
				p->total -= p->st->aux[a].bytes;
				p->live[s->guest]--;
			}
	}
}

/*
 * max_aux: while more of a guest's aux files are needed than that, its
 * oldest sample goes, which may free one. A pinned aux file cannot go:
 * once every one still needed is pinned, dropping samples frees nothing.
 */
static bool aux_over(const struct plan *p, const struct vmt_retention_conf *rc, uint32_t g)
{
	return rc->max_aux && p->live[g] > rc->max_aux && p->live[g] > p->npinned[g];
}

/* Unlink a regular file of the folder; 1 if it was, 0 if already gone. */
static int unlink_reg(int gfd, const char *name)
{
	struct stat s;

	if (fstatat(gfd, name, &s, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	/* replaced by a symlink or else since the scan: not ours to delete */
	if (!S_ISREG(s.st_mode))
		return -EPERM;
	if (unlinkat(gfd, name, 0) < 0)
		return errno == ENOENT ? 0 : -errno;
	return 1;
}

static void count_error(struct vmt_retention_result *res, int r)
{
	res->errors++;
	if (!res->first_error)
		res->first_error = r;
}

static bool too_old(const struct vmt_retention_conf *rc, uint64_t created_ns, uint64_t now_s)
{
	uint64_t t = created_ns / 1000000000u;

	return rc->max_age_s && now_s > t && now_s - t > rc->max_age_s;
}

/*
 * Carry out the plan in one guest folder: its samples, then the aux files
 * that no sample left in it needs (a sample that could not be deleted
 * keeps its aux), then stale temporaries; fsync the folder.
 */
static void apply_guest(struct plan *p, int sfd, uint32_t g, uint64_t now_s,
			struct vmt_retention_result *res)
{
	const struct vmt_store *st = p->st;
	bool dirty = false;
	int gfd, gerr = 0, r;

	gfd = openat(sfd, st->guests[g].name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (gfd < 0)
		gerr = errno == ENOENT ? 0 : -errno;	/* ENOENT: all gone already */
	for (size_t i = 0; i < st->nsamples; i++) {
		const struct vmt_store_sample *s = &st->samples[i];

		if (s->guest != g || !p->gone[i])
			continue;
		r = gfd < 0 ? gerr : unlink_reg(gfd, s->name);
		if (r < 0) {
			count_error(res, r);
			/* still there: count it again, and what it needs */
			p->gone[i] = false;
			p->count[g]++;
			if (p->aux_of[i] != SIZE_MAX)
				p->refs[p->aux_of[i]]++;
			else if (s->info_error != 0 && s->info_error != -EBADMSG)
				p->held[g]++;
			continue;
		}
		if (r > 0) {
			res->samples++;
			res->bytes += s->bytes;
			dirty = true;
		}
	}
	for (size_t a = p->aux_first[g]; a < p->aux_first[g + 1]; a++) {
		if (aux_live(p, a))
			continue;
		r = gfd < 0 ? gerr : unlink_reg(gfd, st->aux[a].name);
		if (r < 0) {
			count_error(res, r);
			p->pinned[a] = true;	/* still there: keep counting it */
			continue;
		}
		if (r > 0) {
			res->aux++;
			res->bytes += st->aux[a].bytes;
			dirty = true;
		}
	}
	for (size_t i = 0; i < st->ntemps; i++) {
		const struct vmt_store_temp *t = &st->temps[i];

		/* a younger one may be a writer's, still at work */
		if (t->guest != g || t->mtime_s < 0 ||
		    (uint64_t)t->mtime_s + VMT_RETENTION_TEMP_AGE_S > now_s)
			continue;
		r = gfd < 0 ? gerr : unlink_reg(gfd, t->name);
		if (r < 0) {
			count_error(res, r);
			continue;
		}
		if (r > 0) {
			res->temps++;
			dirty = true;
		}
	}
	if (gfd < 0)
		return;
	/* the deletions must not come back after a crash */
	if (dirty && fsync(gfd) < 0)
		count_error(res, -errno);
	close(gfd);
}

/* st's samples that are still there move to *kept, oldest first. */
static void store_keep(struct vmt_store *st, const bool *gone, struct vmt_store *kept)
{
	size_t k = 0;

	for (size_t i = 0; i < st->nsamples; i++) {
		struct vmt_store_sample *s = &st->samples[i];

		if (!gone[i]) {
			st->samples[k++] = *s;
			continue;
		}
		st->sample_bytes -= s->bytes;
		st->guests[s->guest].nsamples--;
		st->guests[s->guest].bytes -= s->bytes;
		free(s->path);
		free(s->triggers);
	}
	st->nsamples = k;
	*kept = *st;
	memset(st, 0, sizeof(*st));
}

int retention_apply(const char *state_dir, const struct vmt_retention_conf *rc,
		    const struct vmt_aux_pin *pins, size_t npins, uint64_t now_s,
		    struct vmt_retention_result *res)
{
	return retention_apply_kept(state_dir, rc, pins, npins, now_s, res, NULL);
}

int retention_apply_kept(const char *state_dir, const struct vmt_retention_conf *rc,
			 const struct vmt_aux_pin *pins, size_t npins, uint64_t now_s,
			 struct vmt_retention_result *res, struct vmt_store *kept)
{
	struct vmt_store st;
	struct plan p;
	int sfd, r;

	memset(res, 0, sizeof(*res));
	if (kept)
		memset(kept, 0, sizeof(*kept));
	r = retention_scan(state_dir, &st);
	if (r < 0) {
		retention_store_free(&st);
		return r == -ENOENT ? 0 : r;
	}
	r = plan_init(&p, &st, pins, npins);
	if (r < 0)
		goto out;

	/* oldest first: by age, then by count per guest, then by the aux files
	 * per guest, then by bytes over all */
	for (size_t i = 0; i < st.nsamples; i++)
		if (too_old(rc, st.samples[i].created_ns, now_s))
			plan_drop(&p, i);
	for (size_t i = 0; rc->max_samples && i < st.nsamples; i++)
		if (!p.gone[i] && p.count[st.samples[i].guest] > rc->max_samples)
			plan_drop(&p, i);
	for (size_t i = 0; rc->max_aux && i < st.nsamples; i++)
		if (!p.gone[i] && aux_over(&p, rc, st.samples[i].guest))
			plan_drop(&p, i);
	for (size_t i = 0; rc->max_bytes && i < st.nsamples && p.total > rc->max_bytes; i++)
		plan_drop(&p, i);

	sfd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sfd < 0) {
		r = -errno;
		goto out;
	}
	for (uint32_t g = 0; g < st.nguests; g++)
		apply_guest(&p, sfd, g, now_s, res);
	close(sfd);

	/* what is left, after what could not be deleted */
	for (size_t i = 0; i < st.nsamples; i++) {
		if (p.gone[i])
			continue;
		res->kept_samples++;
		res->kept_bytes += st.samples[i].bytes;
		if (too_old(rc, st.samples[i].created_ns, now_s))
			res->unmet = 1;
	}
	for (size_t a = 0; a < st.naux; a++) {
		if (!aux_live(&p, a))
			continue;
		res->kept_aux++;
		res->kept_bytes += st.aux[a].bytes;
	}
	for (uint32_t g = 0; g < st.nguests; g++) {
		uint32_t live = 0;

		if (rc->max_samples && p.count[g] > rc->max_samples)
			res->unmet = 1;
		for (size_t a = p.aux_first[g]; a < p.aux_first[g + 1]; a++)
			live += aux_live(&p, a);
		if (rc->max_aux && live > rc->max_aux)
			res->unmet = 1;
	}
	if (rc->max_bytes && res->kept_bytes > rc->max_bytes)
		res->unmet = 1;
	if (kept)
		store_keep(&st, p.gone, kept);
out:
	plan_free(&p);
	retention_store_free(&st);
	return r;
}
