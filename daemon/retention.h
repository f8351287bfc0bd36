/* SPDX-License-Identifier: MIT */
/*
 * retention: what is stored under STATE_DIR/<guest>/ and what to delete so
 * the limits of `retention:` hold. Pure: no event loop, no globals; the
 * caller says what time it is and which aux versions live sessions hold.
 *
 * Only names of the two patterns of docs/FORMAT.md (a sample of that
 * folder's guest, an aux file) and their publishing temporaries are ever
 * looked at or deleted, only regular files, never through a symlink, and
 * only inside guest folders of state_dir. Rules: docs/FORMAT.md, "Retention".
 */
#ifndef VMT_RETENTION_H
#define VMT_RETENTION_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"	/* struct vmt_retention_conf */
#include "sample.h"	/* struct vmt_trigger, VMT_NAME_MAX */

/* A temporary at least this old was left by a writer that died. */
#define VMT_RETENTION_TEMP_AGE_S 60
/* Longest file name the patterns allow: "." guest "-…Z.vmts" ".tmp-XXXXXX". */
#define VMT_STORE_NAME_MAX 128

struct vmt_store_guest {
	char name[VMT_NAME_MAX];	/* the folder's name */
	uint32_t nsamples;
	uint64_t bytes;		/* of its samples and aux files */
};

struct vmt_store_sample {
	uint32_t guest;		/* index in vmt_store.guests */
	char name[VMT_STORE_NAME_MAX];	/* in STATE_DIR/<guest>/ */
	char *path;		/* STATE_DIR/<guest>/<name> */
	uint64_t created_ns;	/* from the name (to the microsecond), not mtime */
	uint64_t bytes;		/* st_size */
	/*
	 * 0 if the INFO was read; else -EBADMSG (corrupt: aux unknown, keeps
	 * no aux file alive) or another -errno (could not be read now: keeps
	 * every aux file of its guest alive, to be safe).
	 */
	int info_error;
	bool unuploaded;	/* no FILE.uploaded marker beside it (the fleet's) */
	char why[160];		/* what is wrong, when info_error */
	/* from INFO, when it was read */
	uint32_t aux_version;
	uint64_t aux_id;
	uint64_t dump_id;
	uint32_t ncpus;
	uint32_t ntriggers;
	struct vmt_trigger *triggers;	/* ntriggers, in order */
};

struct vmt_store_aux {
	uint32_t guest;
	char name[VMT_STORE_NAME_MAX];
	uint32_t version;	/* from the name */
	uint64_t bytes;
};

/* `.NAME.tmp-XXXXXX` where NAME is a sample or aux name of the folder. */
struct vmt_store_temp {
	uint32_t guest;
	char name[VMT_STORE_NAME_MAX];
	uint64_t bytes;
	int64_t mtime_s;	/* a temporary's name has no time in it */
};

struct vmt_store {
	struct vmt_store_guest *guests;	/* by name */
	size_t nguests;
	struct vmt_store_sample *samples;	/* see retention_scan/retention_list */
	size_t nsamples;
	struct vmt_store_aux *aux;	/* by guest, then version */
	size_t naux;
	struct vmt_store_temp *temps;	/* by guest, then name */
	size_t ntemps;
	uint64_t sample_bytes, aux_bytes;	/* temporaries are not counted */
};

/*
 * Every guest folder of state_dir: samples oldest first (created time in
 * the name, ties by name), aux files, stale-or-not temporaries. Symlinks,
 * other files and folders whose name is not a guest name are left out.
 * -errno if state_dir or a guest folder cannot be read (-ENOENT: no
 * state_dir); a sample whose INFO cannot be read is listed with
 * info_error. *out is freed with retention_store_free(), also on error.
 */
int retention_scan(const char *state_dir, struct vmt_store *out);
/*
 * For `vmtracectl samples [GUEST]`: the same with only guest's folder
 * (every guest if NULL; none and 0 if it has no folder), samples newest
 * first. -EINVAL if guest is not a valid guest name.
 */
int retention_list(const char *state_dir, const char *guest, struct vmt_store *out);
void retention_store_free(struct vmt_store *st);

/* An aux version a live session, or a write still queued, will need. */
struct vmt_aux_pin {
	char guest[VMT_NAME_MAX];
	uint32_t aux_version;
};

struct vmt_retention_result {
	uint32_t samples;	/* sample files deleted */
	uint32_t aux;		/* aux files deleted */
	uint32_t temps;		/* stale temporaries deleted */
	uint64_t bytes;		/* of the samples and aux files deleted */
	uint32_t errors;	/* files that could not be deleted, folders not synced */
	int first_error;	/* -errno of the first of those, 0 if none */
	int unmet;		/* some limit still does not hold */
	uint32_t unuploaded;	/* samples deleted before the fleet uploaded them
				 * (max_bytes forced it) */
	/* what is left */
	uint32_t kept_samples;
	uint32_t kept_aux;
	uint64_t kept_bytes;
};

/*
 * Delete samples oldest first until rc's limits hold (max_aux: until no
 * more of a guest's aux files are needed, by its remaining samples or a
 * pin, than that, or all those left are pinned), then every aux file
 * that no remaining sample of its guest needs and no pin holds, then
 * temporaries older than VMT_RETENTION_TEMP_AGE_S. now_s is CLOCK_REALTIME
 * in seconds. Each guest folder touched is fsync'd. A file that cannot be
 * deleted is counted in res->errors and the rest goes on; a limit that
 * cannot be met sets res->unmet. Returns 0 (also when state_dir does not
 * exist: nothing is stored), or -errno when the scan fails, and then
 * nothing is deleted.
 */
int retention_apply(const char *state_dir, const struct vmt_retention_conf *rc,
		    const struct vmt_aux_pin *pins, size_t npins, uint64_t now_s,
		    struct vmt_retention_result *res);
/*
 * The same, and what is left: *kept gets the samples still there (oldest
 * first, with their guests; the aux and temporary lists as scanned), so a
 * caller can know what is stored without scanning again. kept NULL: as
 * retention_apply(). On error *kept is empty; freed with
 * retention_store_free().
 */
int retention_apply_kept(const char *state_dir, const struct vmt_retention_conf *rc,
			 const struct vmt_aux_pin *pins, size_t npins, uint64_t now_s,
			 struct vmt_retention_result *res, struct vmt_store *kept);

#endif
