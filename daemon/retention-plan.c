/* SPDX-License-Identifier: MIT */
/*
 * retention-plan: what goes so that the limits of `retention:` hold, and
 * carrying it out. A plan over a fresh scan drops samples oldest first (by
 * age, count per guest, aux files per guest, bytes); then in each guest
 * folder the dropped samples, the aux files no remaining sample or pin
 * needs and stale temporaries are deleted, and the folder fsync'd. Rules:
 * docs/FORMAT.md, "Retention".
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "retention-int.h"
#include "util.h"

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
	a = bsearch(&key, st->aux, st->naux, sizeof(*st->aux), retention_cmp_aux);
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
	/* with the fleet, a sample not uploaded yet is kept by every rule but
	 * the disk's (max_bytes), which counts it when it forces it */
#define HELD(i) (rc->hold_unuploaded && st.samples[i].unuploaded)
	for (size_t i = 0; i < st.nsamples; i++)
		if (!HELD(i) && too_old(rc, st.samples[i].created_ns, now_s))
			plan_drop(&p, i);
	for (size_t i = 0; rc->max_samples && i < st.nsamples; i++)
		if (!HELD(i) && !p.gone[i] && p.count[st.samples[i].guest] > rc->max_samples)
			plan_drop(&p, i);
	for (size_t i = 0; rc->max_aux && i < st.nsamples; i++)
		if (!HELD(i) && !p.gone[i] && aux_over(&p, rc, st.samples[i].guest))
			plan_drop(&p, i);
	for (size_t i = 0; rc->max_bytes && i < st.nsamples && p.total > rc->max_bytes; i++) {
		if (HELD(i) && !p.gone[i])
			res->unuploaded++;
		plan_drop(&p, i);
	}
#undef HELD

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
