/* SPDX-License-Identifier: MIT */
/*
 * recover: the rings a crashed predecessor left in systemd's fd store,
 * between start-up and the moment each guest claims them. Taken from
 * LISTEN_FDS before control_new() clears it (fdstore_take_rings), kept
 * aside by name; a guest whose session settles its aux version takes its
 * own (guest-persist.c) and adopts or refuses each (persist.c). What no
 * guest claims goes: at once for a guest the daemon does not know, after
 * forget_after for one it knows but that never came back.
 *
 * A dump reserve handed back (pagepool.h) holds the pages rings filled
 * while a dump held their own slots; it is checked and mapped at once, and
 * read by each ring's adoption (persist.c) until no ring waits any more.
 *
 * The counters are the daemon's (status and metrics): an adoption is an
 * event of the daemon's life, not of a guest's stream.
 */
#ifndef VMT_RECOVER_H
#define VMT_RECOVER_H

#include <stdbool.h>
#include <stdint.h>

#include "fdstore.h"
#include "persist.h"

struct vmt_recover {
	struct vmt_fdstore_ring *v;	/* fd < 0: claimed or dropped */
	unsigned n;
	/* the dump reserves handed back, mapped until no ring waits any more
	 * (recover_release_reserves); a refused one is all zeros (id 0 is
	 * no ring's). Their fds stay open till then: sd_listen_fds() checks
	 * every fd LISTEN_FDS names until control_new() clears it */
	struct vmt_persist_reserve *reserves;
	char (*reserve_names)[VMT_PERSIST_FDNAME_MAX];
	int *reserve_fds;
	unsigned nreserves;
	uint64_t reserves_refused;	/* reserves handed back that did not check out */
	uint64_t adopted;	/* rings taken over */
	uint64_t refused;	/* rings handed back that did not validate */
	uint64_t unclaimed;	/* rings no guest claimed, closed */
};

/* The rings systemd handed back, if any, and the dump reserves: each
 * checked now (persist_reserve_open), refused ones closed, removed from
 * the store, logged and counted. -errno (logged by the caller). */
int recover_init(struct vmt_recover *rc);
/* Once no ring waits to be claimed, the reserves' pages are home or gone:
 * unmapped, closed and removed from the store. Call after claims and
 * drops, and not before control_new() (see above). */
void recover_release_reserves(struct vmt_recover *rc);
void recover_free(struct vmt_recover *rc);
/* Is a ring of guest (any CPU) waiting to be claimed? */
bool recover_pending(const struct vmt_recover *rc, const char *guest);
/* Is this CPU's ring waiting? (Then its name in the store is the old ring's.) */
bool recover_pending_cpu(const struct vmt_recover *rc, const char *guest, uint32_t cpu);
/* Claim guest's ring of cpu (cpu UINT32_MAX: any; *cpu_out says which): its
 * fd, the caller's to close; -ENOENT when there is none. */
int recover_take(struct vmt_recover *rc, const char *guest, uint32_t cpu, uint32_t *cpu_out);
/* Close the rings no guest claimed, of guests known() says no to (known
 * NULL: all of them), removing them from the store; logged and counted. */
void recover_drop(struct vmt_recover *rc, bool (*known)(void *arg, const char *guest), void *arg,
		  const char *why);

#endif
