/* SPDX-License-Identifier: MIT */
/*
 * Rings that outlive their daemon: a ring's memfd adopted by a second ring
 * (as a successor maps it) gives the same window byte-exact and the same
 * counters; a damaged or foreign header is refused with its reason; a
 * crash between any two stores leaves a state the successor takes only the
 * consistent part of (a writer SIGKILLed at random moments); the fd store's
 * two ends speak systemd's protocol.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "fdstore.h"
#include "cringtest.h"
#include "frame.h"
#include "pagegen.h"
#include "persist.h"
#include "ring.h"
#include "testutil.h"
#include "util.h"

#define PS 4096
#define RAW_PAGES 64
#define CPAGES 512	/* compressed: 176 raw, batches of 8 */
static struct vmt_page_layout L;
static struct vmt_ring R;
static struct vmt_frame_ctx *Z;

static void setup(void)
{
	page_layout_default(&L, PS);
	Z = frame_ctx_new(VMT_FRAME_ZSTD, 1, VMT_RING_BATCH_MAX_BYTES);
	ck_assert_ptr_nonnull(Z);
	memset(&R, 0, sizeof(R));
}

static void teardown(void)
{
	if (R.rm)
		ring_free(&R);
	frame_ctx_free(Z);
}

/* page k: base time k * 1e6, k % 50 + 1 events */
static void make(uint8_t *p, uint64_t k)
{
	pagegen_simple(p, PS, k * 1000000, (uint32_t)(k % 50 + 1));
}

static struct vmt_persist_expect want(uint32_t ring_pages, bool compressed)
{
	return (struct vmt_persist_expect){ .guest = "g1", .cpu = 1, .ncpus = 2, .aux_version = 3,
					    .aux_id = 0xabcdef, .layout = L, .ring_pages = ring_pages,
					    .compressed = compressed };
}

static void init_ring(struct vmt_ring *r, uint32_t pages, bool compressed)
{
	ck_assert_int_eq(compressed ? ring_init_compressed(r, pages, &L) : ring_init(r, pages, &L), 0);
	ring_describe(r, "g1", 1, 2, 3, 0xabcdef);
}

static void push(struct vmt_ring *r, uint64_t k, bool compress)
{
	uint8_t p[PS];

	make(p, k);
	ck_assert_int_eq(ring_push(r, p), 1);
	if (compress && ring_batch_due(r))
		cring_compress_batch(r, Z);
}

/* A copy of a memfd, sealed alike: the original ring goes on untouched. */
static int clone_fd(int fd)
{
	struct stat st;
	int c = memfd_create("test-clone", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	void *src;

	ck_assert_int_ge(c, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	src = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(src, MAP_FAILED);
	ck_assert_int_eq(write_full(c, src, (size_t)st.st_size), 0);
	munmap(src, (size_t)st.st_size);
	ck_assert_int_eq(fcntl(c, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
	return c;
}

/* Adopt a clone of r's memfd into a; returns adopt's result. */
static int adopt_clone(const struct vmt_ring *r, const struct vmt_persist_expect *w, struct vmt_ring *a,
		       struct vmt_persist_adopted *res, char *why, size_t n)
{
	int fd = clone_fd(persist_ring_fd(r)), err;

	err = persist_adopt_ring(fd, w, a, res, why, n);
	close(fd);	/* the ring keeps a duplicate */
	return err;
}

/*
 * Every page of the window, frames then raw, is page seq as made, in
 * order; returns the pages and their first and last seq.
 */
static uint64_t check_window(const struct vmt_ring *r, uint64_t *first, uint64_t *last)
{
	uint8_t want_page[PS], *buf = malloc((size_t)VMT_FRAME_MAX_PAGES * PS);
	uint64_t next = UINT64_MAX, n = 0;
	char why[160];

	*first = UINT64_MAX;
	*last = 0;
	for (uint32_t i = 0; i < r->fr.count; i++) {
		const struct vmt_frame_desc *d = frames_at(&r->fr, i);

		ck_assert_int_eq(frame_decode(d->h.codec, frames_payload(&r->fr, d), d->len, buf,
					      (size_t)d->h.npages * PS, why, sizeof(why)), 0);
		ck_assert(next == UINT64_MAX || d->h.first_seq >= next);
		for (uint32_t k = 0; k < d->h.npages; k++) {
			make(want_page, d->h.first_seq + k);
			ck_assert_mem_eq(buf + (size_t)k * PS, want_page, PS);
		}
		*first = VMT_MIN(*first, d->h.first_seq);
		next = d->h.first_seq + d->h.npages;
		n += d->h.npages;
	}
	for (uint32_t i = 0; i < r->count; i++) {
		const struct vmt_ring_slot *s = ring_slot(r, i);

		ck_assert(next == UINT64_MAX || s->seq >= next);
		make(want_page, s->seq);
		ck_assert_mem_eq(ring_page(r, i), want_page, PS);
		*first = VMT_MIN(*first, s->seq);
		next = s->seq + 1;
		n++;
	}
	*last = next == UINT64_MAX ? 0 : next - 1;
	free(buf);
	return n;
}

/* The same window and counters, page for page and frame for frame. */
static void same_ring(const struct vmt_ring *a, const struct vmt_ring *b)
{
	ck_assert_uint_eq(a->count, b->count);
	ck_assert_uint_eq(a->head, b->head);
	ck_assert_uint_eq(a->next_seq, b->next_seq);
	ck_assert_uint_eq(a->last_ts, b->last_ts);
	ck_assert_mem_eq(&a->c, &b->c, sizeof(a->c));
	for (uint32_t i = 0; i < a->count; i++) {
		ck_assert_mem_eq(ring_slot(a, i), ring_slot(b, i), sizeof(struct vmt_ring_slot));
		ck_assert_mem_eq(ring_page(a, i), ring_page(b, i), PS);
	}
	ck_assert_uint_eq(a->fr.count, b->fr.count);
	ck_assert_uint_eq(a->fr.pages, b->fr.pages);
	for (uint32_t i = 0; i < a->fr.count; i++) {
		const struct vmt_frame_desc *da = frames_at(&a->fr, i), *db = frames_at(&b->fr, i);

		ck_assert_mem_eq(da, db, sizeof(*da));
		ck_assert_mem_eq(frames_payload(&a->fr, da), frames_payload(&b->fr, db), da->len);
	}
}

/* ---- adoption ------------------------------------------------------------- */

START_TEST(a_raw_ring_is_adopted_byte_exact)
{
	struct vmt_persist_expect w = want(RAW_PAGES, false);
	struct vmt_persist_adopted res;
	struct vmt_ring a;
	uint64_t first, last;
	char why[160] = "";

	init_ring(&R, RAW_PAGES, false);
	for (uint64_t k = 0; k < 150; k++)
		push(&R, k, false);
	ck_assert_msg(adopt_clone(&R, &w, &a, &res, why, sizeof(why)) == 0, "%s", why);
	same_ring(&R, &a);
	ck_assert_uint_eq(res.pages, RAW_PAGES);
	ck_assert_uint_eq(res.pages_dropped, 0);
	ck_assert_uint_eq(res.lifetimes, 2);
	ck_assert_uint_eq(check_window(&a, &first, &last), RAW_PAGES);
	ck_assert_uint_eq(last, 149);
	/* it goes on recording where the other stopped */
	push(&a, 150, false);
	ck_assert_uint_eq(ring_slot(&a, a.count - 1)->seq, 150);
	ck_assert_uint_eq(a.c.pages_in, 151);
	ring_free(&a);
}
END_TEST

START_TEST(a_compressed_ring_is_adopted_byte_exact)
{
	struct vmt_persist_expect w = want(CPAGES, true);
	struct vmt_persist_adopted res;
	struct vmt_ring a;
	uint64_t first, last, n;
	char why[160] = "";

	init_ring(&R, CPAGES, true);
	ck_assert_ptr_nonnull(R.fr.fm);
	for (uint64_t k = 0; k < 3000; k++)
		push(&R, k, k < 1000 || k > 1800);	/* a late compressor between: stored frames */
	ck_assert_uint_gt(R.c.pages_stored_raw, 0);
	ck_assert_uint_gt(R.c.frames_overwritten, 0);
	ck_assert_msg(adopt_clone(&R, &w, &a, &res, why, sizeof(why)) == 0, "%s", why);
	same_ring(&R, &a);
	ck_assert_uint_eq(res.frames, R.fr.count);
	ck_assert_uint_eq(res.frames_dropped + res.pages_dropped, 0);
	n = check_window(&a, &first, &last);
	ck_assert_uint_eq(n, ring_window_pages(&R));
	ck_assert_uint_eq(last, 2999);
	ck_assert_uint_eq(last - first + 1, n);
	for (uint64_t k = 3000; k < 3200; k++)
		push(&a, k, true);
	check_window(&a, &first, &last);
	ck_assert_uint_eq(last, 3199);
	ring_free(&a);
}
END_TEST

START_TEST(the_memfd_is_sealed)
{
	int fd, seals;

	init_ring(&R, RAW_PAGES, false);
	fd = persist_ring_fd(&R);
	seals = fcntl(fd, F_GET_SEALS);
	ck_assert_int_eq(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
			 F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	ck_assert_int_lt(ftruncate(fd, 4096), 0);
	ck_assert_int_ne(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
	ck_assert_uint_eq(ring_bytes(&R), ring_mem_size(RAW_PAGES, PS));
}
END_TEST

/* ---- refusals ------------------------------------------------------------- */

/* Flip a bit of copy (0: A, 1: B) of fd's header. */
static void flip(int fd, int copy, size_t off)
{
	uint8_t *m = mmap(NULL, VMT_RINGMEM_HDR_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	ck_assert_ptr_ne(m, MAP_FAILED);
	m[copy * VMT_RINGMEM_COPY_OFF + off] ^= 0x10;
	munmap(m, VMT_RINGMEM_HDR_BYTES);
}

START_TEST(a_flipped_bit_is_refused)
{
	struct vmt_persist_expect w = want(RAW_PAGES, false);
	struct vmt_persist_adopted res;
	struct vmt_ring a;
	uint64_t first, last;
	char why[160] = "";
	int fd;

	init_ring(&R, RAW_PAGES, false);
	for (uint64_t k = 0; k < 100; k++)
		push(&R, k, false);
	/* both copies damaged: nothing to trust */
	fd = clone_fd(persist_ring_fd(&R));
	flip(fd, 0, offsetof(struct vmt_ringmem_hdr, count));
	flip(fd, 1, offsetof(struct vmt_ringmem_hdr, guest) + 1);
	ck_assert_int_eq(persist_adopt_ring(fd, &w, &a, &res, why, sizeof(why)), -EBADMSG);
	ck_assert_msg(strstr(why, "checksum"), "%s", why);
	close(fd);
	/* the newer copy damaged: the older, one publish before, and what it
	 * covers that still checks out */
	fd = clone_fd(persist_ring_fd(&R));
	flip(fd, (int)(R.rm->shadow.gen & 1), offsetof(struct vmt_ringmem_hdr, head));
	ck_assert_msg(persist_adopt_ring(fd, &w, &a, &res, why, sizeof(why)) == 0, "%s", why);
	close(fd);
	ck_assert_uint_ge(a.count, RAW_PAGES - 1);
	check_window(&a, &first, &last);
	ck_assert_uint_eq(last, 98);
	ring_free(&a);
}
END_TEST

START_TEST(another_layout_version_is_refused)
{
	struct vmt_persist_expect w = want(RAW_PAGES, false);
	struct vmt_ring a;
	char why[160] = "";
	uint8_t *m;
	int fd;

	init_ring(&R, RAW_PAGES, false);
	push(&R, 0, false);
	fd = clone_fd(persist_ring_fd(&R));
	m = mmap(NULL, VMT_RINGMEM_HDR_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	for (int c = 0; c < 2; c++) {
		struct vmt_ringmem_hdr *h = (struct vmt_ringmem_hdr *)(m + c * VMT_RINGMEM_COPY_OFF);

		h->layout = VMT_PERSIST_LAYOUT + 1;
		h->crc = crc32c(0, h, offsetof(struct vmt_ringmem_hdr, crc));
	}
	munmap(m, VMT_RINGMEM_HDR_BYTES);
	ck_assert_int_eq(persist_adopt_ring(fd, &w, &a, NULL, why, sizeof(why)), -EPROTO);
	ck_assert_msg(strstr(why, "another layout version"), "%s", why);
	close(fd);
	/* an older layout (1: a 400-byte header, 32-byte slot records without
	 * a reserve offset) is refused as such, never read as this one */
	fd = clone_fd(persist_ring_fd(&R));
	m = mmap(NULL, VMT_RINGMEM_HDR_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	for (int c = 0; c < 2; c++) {
		uint8_t *h = m + c * VMT_RINGMEM_COPY_OFF;
		uint32_t one = 1, size = 400, crc;

		memcpy(h + 8, &one, 4);
		memcpy(h + 12, &size, 4);
		crc = crc32c(0, h, 396);
		memcpy(h + 396, &crc, 4);
	}
	munmap(m, VMT_RINGMEM_HDR_BYTES);
	ck_assert_int_eq(persist_adopt_ring(fd, &w, &a, NULL, why, sizeof(why)), -EPROTO);
	ck_assert_msg(strstr(why, "another layout version (1; this vmtraced reads 2)"), "%s", why);
	close(fd);
	/* not a ring's at all */
	fd = memfd_create("x", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ck_assert_int_eq(ftruncate(fd, 8192), 0);
	ck_assert_int_eq(persist_adopt_ring(fd, &w, &a, NULL, why, sizeof(why)), -EBADMSG);
	ck_assert_msg(strstr(why, "sealed"), "%s", why);
	ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
	ck_assert_int_eq(persist_adopt_ring(fd, &w, &a, NULL, why, sizeof(why)), -EBADMSG);
	ck_assert_msg(strstr(why, "magic"), "%s", why);
	close(fd);
}
END_TEST

/* The successor's expectation, changed one way; what the refusal says. */
static const char *const geometry_says[] = {
	"raw pages", "frame descriptors", "another guest", "CPU 1, not 0", "CPU count", "aux content id",
	"aux version", "page size", "page layout", "raw pages 177, not 513",
};

static void geometry_change(struct vmt_persist_expect *x, size_t i)
{
	switch (i) {
	case 0: x->ring_pages = CPAGES / 4; x->compressed = false; break;
	case 1: x->ring_pages = CPAGES + 8; break;
	case 2: x->guest = "g2"; break;
	case 3: x->cpu = 0; break;
	case 4: x->ncpus = 4; break;
	case 5: x->aux_id++; break;
	case 6: x->aux_version++; break;
	case 7: x->layout.page_size = 8192; break;
	case 8: x->layout.commit_size = 4; break;
	case 9: x->compressed = false; break;
	}
}

START_TEST(another_geometry_or_owner_is_refused)
{
	struct vmt_persist_expect w;
	struct vmt_ring a;
	char why[160] = "";

	init_ring(&R, CPAGES, true);
	push(&R, 0, true);
	for (size_t i = 0; i < ARRAY_SIZE(geometry_says); i++) {
		w = want(CPAGES, true);
		geometry_change(&w, i);
		ck_assert_int_eq(adopt_clone(&R, &w, &a, NULL, why, sizeof(why)), -EPROTO);
		ck_assert_msg(strstr(why, geometry_says[i]), "case %zu: '%s', not '%s'", i, why,
			      geometry_says[i]);
	}
	w = want(CPAGES, true);
	ck_assert_msg(adopt_clone(&R, &w, &a, NULL, why, sizeof(why)) == 0, "%s", why);
	ring_free(&a);
}
END_TEST

/* ---- torn states ------------------------------------------------------------ */

START_TEST(a_page_not_yet_committed_is_not_taken)
{
	struct vmt_persist_expect w = want(RAW_PAGES, false);
	struct vmt_ring a;
	uint64_t first, last;
	char why[160] = "";
	uint32_t room;
	uint8_t *p;

	init_ring(&R, RAW_PAGES, false);
	for (uint64_t k = 0; k < 100; k++)
		push(&R, k, false);
	/* the whole page is in the fill slot, the crash came before its commit */
	p = ring_fill_space(&R, &room);
	make(p, 100);
	ck_assert_msg(adopt_clone(&R, &w, &a, NULL, why, sizeof(why)) == 0, "%s", why);
	ck_assert_uint_eq(a.count, RAW_PAGES);
	ck_assert_uint_eq(a.fill, 0);
	check_window(&a, &first, &last);
	ck_assert_uint_eq(last, 99);
	ring_free(&a);
}
END_TEST

START_TEST(a_page_damaged_after_its_record_is_dropped)
{
	struct vmt_persist_expect w = want(RAW_PAGES, false);
	struct vmt_persist_adopted res;
	struct vmt_ring a;
	uint64_t first, last;
	char why[160] = "";
	uint64_t gone[2];

	init_ring(&R, RAW_PAGES, false);
	for (uint64_t k = 0; k < 100; k++)
		push(&R, k, false);
	gone[0] = ring_slot(&R, 5)->seq;
	gone[1] = ring_slot(&R, 40)->seq;
	/* a commit past the page (page_scan fails), a timestamp that moved
	 * (page_scan passes, the record does not agree) */
	memset((uint8_t *)ring_page(&R, 5) + 8, 0xff, 4);
	((uint8_t *)ring_page(&R, 40))[0] ^= 1;
	ck_assert_msg(adopt_clone(&R, &w, &a, &res, why, sizeof(why)) == 0, "%s", why);
	ck_assert_uint_eq(res.pages_dropped, 2);
	ck_assert_uint_eq(a.count, RAW_PAGES - 2);
	ck_assert_uint_eq(check_window(&a, &first, &last), RAW_PAGES - 2);
	for (uint32_t i = 0; i < a.count; i++)
		ck_assert(ring_slot(&a, i)->seq != gone[0] && ring_slot(&a, i)->seq != gone[1]);
	ck_assert_uint_eq(first, 100 - RAW_PAGES);
	ck_assert_uint_eq(last, 99);
	/* compacted: it records on as if those two had never come */
	push(&a, 100, false);
	ck_assert_uint_eq(check_window(&a, &first, &last), RAW_PAGES - 1);
	ring_free(&a);
}
END_TEST

START_TEST(a_damaged_frame_is_dropped)
{
	struct vmt_persist_expect w = want(CPAGES, true);
	struct vmt_persist_adopted res;
	struct vmt_frame_desc *d;
	struct vmt_ring a;
	uint64_t first, last;
	char why[160] = "";
	uint32_t frames;

	init_ring(&R, CPAGES, true);
	for (uint64_t k = 0; k < 1500; k++)
		push(&R, k, true);
	frames = R.fr.count;
	ck_assert_uint_ge(frames, 4);
	/* a payload cut short, a payload byte changed */
	d = (struct vmt_frame_desc *)frames_at(&R.fr, 1);
	d->len -= 7;
	d = (struct vmt_frame_desc *)frames_at(&R.fr, 2);
	((uint8_t *)frames_payload(&R.fr, d))[d->len / 2] ^= 0x40;
	ck_assert_msg(adopt_clone(&R, &w, &a, &res, why, sizeof(why)) == 0, "%s", why);
	ck_assert_uint_eq(res.frames_dropped, 2);
	ck_assert_uint_eq(a.fr.count, frames - 2);
	check_window(&a, &first, &last);	/* decodes each frame: never a damaged one */
	ck_assert_uint_eq(last, 1499);
	ring_free(&a);
}
END_TEST

/*
 * A ring of RAW_PAGES full, held whole by a dump, then five pages more:
 * the first into the free fill slot, the next four into reserve pages.
 */
static void ring_with_away_pages(struct vmt_pagepool *pool, struct vmt_ring_hold *h)
{
	ck_assert_int_eq(pagepool_init(pool, 16 * PS), 0);
	init_ring(&R, RAW_PAGES, false);
	R.pool = pool;
	for (uint64_t k = 0; k < RAW_PAGES; k++)
		push(&R, k, false);
	ck_assert_int_eq(ring_hold(&R, 0, R.count, h), 0);
	for (uint64_t k = RAW_PAGES; k < RAW_PAGES + 5; k++)
		push(&R, k, false);
	ck_assert_uint_eq(R.displaced, 4);
}

/* A clone of the pool's memfd, mapped as a successor maps it. */
static void open_reserve_clone(const struct vmt_pagepool *pool, struct vmt_persist_reserve *v)
{
	char why[160] = "";
	int fd = clone_fd(pool->fd);

	ck_assert_msg(persist_reserve_open(fd, v, why, sizeof(why)) == 0, "%s", why);
	close(fd);	/* the mapping stays */
	ck_assert_uint_eq(v->id, pool->id);
	ck_assert_uint_eq(v->bytes, 16 * PS);
}

START_TEST(pages_in_the_dump_reserve_are_brought_home)
{
	struct vmt_persist_expect w = want(RAW_PAGES, false);
	struct vmt_persist_adopted res;
	struct vmt_persist_reserve v;
	struct vmt_pagepool pool;
	struct vmt_ring_hold h;
	struct vmt_ring a;
	uint64_t first, last;
	char why[160] = "";

	ring_with_away_pages(&pool, &h);
	/* no reserve handed back: those pages are dropped, and said why */
	ck_assert_msg(adopt_clone(&R, &w, &a, &res, why, sizeof(why)) == 0, "%s", why);
	ck_assert_uint_eq(res.pages_dropped, 4);
	ck_assert_uint_eq(res.pages_no_reserve, 4);
	ck_assert_uint_eq(res.pages_home, 0);
	ck_assert_uint_eq(check_window(&a, &first, &last), RAW_PAGES - 4);
	ring_free(&a);
	/* with it (as after a crash during the dump): home, byte-exact, in order */
	open_reserve_clone(&pool, &v);
	w.reserves = &v;
	w.nreserves = 1;
	ck_assert_msg(adopt_clone(&R, &w, &a, &res, why, sizeof(why)) == 0, "%s", why);
	ck_assert_uint_eq(res.pages_dropped, 0);
	ck_assert_uint_eq(res.pages_home, 4);
	ck_assert_uint_eq(check_window(&a, &first, &last), RAW_PAGES);
	ck_assert_uint_eq(first, 5);
	ck_assert_uint_eq(last, RAW_PAGES + 4);
	for (uint32_t i = 0; i < a.count; i++)
		ck_assert_uint_eq(ring_slot(&a, i)->flags & VMT_SLOT_AWAY, 0);
	for (uint32_t i = 0; i < a.count; i++) {	/* the dead daemon's window as it saw it */
		ck_assert_uint_eq(ring_slot(&a, i)->seq, ring_slot(&R, i)->seq);
		ck_assert_mem_eq(ring_page(&a, i), ring_page(&R, i), PS);
	}
	ring_free(&a);
	/* a handed-over ring's reserve pages are checked too (scanned) */
	w.handed_over = true;
	ck_assert_msg(adopt_clone(&R, &w, &a, &res, why, sizeof(why)) == 0, "%s", why);
	ck_assert_uint_eq(res.pages_home, 4);
	ring_free(&a);
	persist_reserve_close(&v);
	/* once the dump is written the pages go home in the ring's own memfd */
	ring_release(&h);
	ring_settle(&R);
	w.reserves = NULL;
	w.nreserves = 0;
	w.handed_over = false;
	ck_assert_msg(adopt_clone(&R, &w, &a, &res, why, sizeof(why)) == 0, "%s", why);
	ck_assert_uint_eq(res.pages_dropped, 0);
	ck_assert_uint_eq(check_window(&a, &first, &last), RAW_PAGES);
	ck_assert_uint_eq(last, RAW_PAGES + 4);
	ring_free(&a);
	ring_free(&R);
	pagepool_free(&pool);
}
END_TEST

/* The reserve's memfd, its header damaged one way; what the refusal says. */
START_TEST(a_bad_reserve_is_refused)
{
	struct vmt_persist_reserve v;
	struct vmt_pagepool pool;
	struct vmt_reserve_hdr *hd;
	char why[160] = "";
	uint8_t *m;
	int fd;

	ck_assert_int_eq(pagepool_init(&pool, 16 * PS), 0);
	for (int c = 0; c < 4; c++) {
		fd = clone_fd(pool.fd);
		m = mmap(NULL, VMT_RESERVE_HDR_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		ck_assert_ptr_ne(m, MAP_FAILED);
		hd = (struct vmt_reserve_hdr *)m;
		if (c == 0) {
			m[20] ^= 0x40;	/* the id: the CRC no longer matches */
		} else if (c == 1) {
			hd->layout = VMT_RESERVE_LAYOUT + 1;
			hd->crc = crc32c(0, hd, offsetof(struct vmt_reserve_hdr, crc));
		} else if (c == 2) {
			hd->bytes += 2 * PS;	/* more pages than the memfd holds */
			hd->crc = crc32c(0, hd, offsetof(struct vmt_reserve_hdr, crc));
		} else {
			memcpy(m, &(uint64_t){ VMT_PERSIST_MAGIC }, 8);	/* a ring's */
		}
		munmap(m, VMT_RESERVE_HDR_BYTES);
		ck_assert_int_eq(persist_reserve_open(fd, &v, why, sizeof(why)), c == 1 ? -EPROTO : -EBADMSG);
		ck_assert_msg(strstr(why, (const char *[]){ "checksum", "another layout version",
							  "do not add up", "not a dump reserve" }[c]),
			      "%d: %s", c, why);
		ck_assert_ptr_null(v.base);
		close(fd);
	}
	/* not sealed: its size could change under the mapping */
	fd = memfd_create("x", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ck_assert_int_eq(ftruncate(fd, 8 * PS), 0);
	ck_assert_int_eq(persist_reserve_open(fd, &v, why, sizeof(why)), -EBADMSG);
	ck_assert_msg(strstr(why, "sealed"), "%s", why);
	close(fd);
	pagepool_free(&pool);
}
END_TEST

/* The ring's AWAY records in a clone of its memfd, for a test to change. */
static struct vmt_ring_slot *away_records(uint8_t *m, uint32_t *idx, uint32_t *n)
{
	struct vmt_ringmem_hdr h;
	struct vmt_ring_slot *sl;
	char why[96];

	ck_assert_int_eq(ringmem_read_hdr(m, VMT_RINGMEM_HDR_BYTES, &h, why, sizeof(why)), 0);
	sl = (struct vmt_ring_slot *)(m + h.slots_off);
	*n = 0;
	for (uint32_t s = 0; s <= h.nr_pages; s++)
		if (sl[s].flags & VMT_SLOT_AWAY)
			idx[(*n)++] = s;
	return sl;
}

START_TEST(an_away_slot_out_of_the_reserve_or_disagreeing_is_dropped)
{
	struct vmt_persist_expect w = want(RAW_PAGES, false);
	struct vmt_persist_adopted res;
	struct vmt_persist_reserve v, other;
	struct vmt_pagepool pool, pool2;
	struct vmt_ring_slot *sl;
	struct vmt_ring_hold h;
	struct vmt_ring a;
	uint32_t idx[8], n;
	uint64_t first, last;
	char why[160] = "";
	struct stat st;
	uint8_t *m, *rm;
	int fd, rfd;

	ring_with_away_pages(&pool, &h);
	fd = clone_fd(persist_ring_fd(&R));
	ck_assert_int_eq(fstat(fd, &st), 0);
	m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	sl = away_records(m, idx, &n);
	ck_assert_uint_eq(n, 4);
	/* past the end, wrapping past it, not on a unit; the fourth stays good
	 * (the reserve is mapped read-only: a bad offset would fault, not read
	 * another's memory) */
	sl[idx[3]].away = (uint64_t)16 * PS;
	sl[idx[2]].away = UINT64_MAX - PS / 2;
	sl[idx[1]].away = 100;
	rfd = clone_fd(pool.fd);
	ck_assert_int_eq(persist_reserve_open(rfd, &v, why, sizeof(why)), 0);
	close(rfd);
	w.reserves = &v;
	w.nreserves = 1;
	ck_assert_msg(persist_adopt_ring(fd, &w, &a, &res, why, sizeof(why)) == 0, "%s", why);
	ck_assert_uint_eq(res.pages_dropped, 3);
	ck_assert_uint_eq(res.pages_home, 1);
	ck_assert_uint_eq(res.pages_no_reserve, 3);
	ring_free(&a);
	persist_reserve_close(&v);
	munmap(m, (size_t)st.st_size);
	close(fd);

	/* a page in the reserve that does not agree with its record */
	fd = clone_fd(persist_ring_fd(&R));
	rfd = clone_fd(pool.fd);
	rm = mmap(NULL, VMT_RESERVE_HDR_BYTES + 16 * PS, PROT_READ | PROT_WRITE, MAP_SHARED, rfd, 0);
	ck_assert_ptr_ne(rm, MAP_FAILED);
	ck_assert_int_eq(fstat(fd, &st), 0);
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	sl = away_records(m, idx, &n);
	make(rm + VMT_RESERVE_HDR_BYTES + sl[idx[0]].away, 1000);	/* a good page, another one */
	memset(rm + VMT_RESERVE_HDR_BYTES + sl[idx[1]].away + 16, 0xff, 64);	/* torn */
	munmap(rm, VMT_RESERVE_HDR_BYTES + 16 * PS);
	munmap(m, (size_t)st.st_size);
	ck_assert_int_eq(persist_reserve_open(rfd, &v, why, sizeof(why)), 0);
	close(rfd);
	ck_assert_msg(persist_adopt_ring(fd, &w, &a, &res, why, sizeof(why)) == 0, "%s", why);
	ck_assert_uint_eq(res.pages_dropped, 2);
	ck_assert_uint_eq(res.pages_no_reserve, 0);
	ck_assert_uint_eq(res.pages_home, 2);
	ck_assert_uint_eq(check_window(&a, &first, &last), RAW_PAGES - 2);
	ring_free(&a);
	persist_reserve_close(&v);

	/* another daemon's reserve (its id is not the one the ring names); the
	 * adoption above wrote into its clone: a fresh one */
	close(fd);
	fd = clone_fd(persist_ring_fd(&R));
	ck_assert_int_eq(pagepool_init(&pool2, 16 * PS), 0);
	open_reserve_clone(&pool2, &other);
	w.reserves = &other;
	ck_assert_msg(persist_adopt_ring(fd, &w, &a, &res, why, sizeof(why)) == 0, "%s", why);
	ck_assert_uint_eq(res.pages_no_reserve, 4);
	ck_assert_uint_eq(res.pages_home, 0);
	ring_free(&a);
	persist_reserve_close(&other);
	pagepool_free(&pool2);
	close(fd);
	ring_release(&h);
	ring_free(&R);
	pagepool_free(&pool);
}
END_TEST

/* ---- a writer killed at random moments ---------------------------------- */

/* The child: pages 0.. into the ring, *done after each push returned. */
static void writer(struct vmt_ring *r, bool compressed, volatile uint64_t *done)
{
	for (uint64_t k = 0; k < 20000; k++) {
		push(r, k, compressed);
		*done = k + 1;
	}
	for (;;)
		pause();
}

/*
 * What the header covers when the writer dies: every page it had pushed,
 * but the one whose push was under way (done lags by at most one), as far
 * as the window holds them; nothing dropped, nothing torn.
 */
static void killed_writer_once(bool compressed, unsigned seed)
{
	uint32_t pages = compressed ? CPAGES : RAW_PAGES;
	struct vmt_persist_expect w = want(pages, compressed);
	volatile uint64_t *done = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct vmt_persist_adopted res;
	struct vmt_ring mine, a;
	uint64_t first, last, n;
	char why[160] = "";
	pid_t pid;
	int st;

	ck_assert_ptr_ne((void *)done, MAP_FAILED);
	init_ring(&mine, pages, compressed);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		writer(&mine, compressed, done);
	/* a raw ring's 20000 pages take about 10 ms, a compressed one's 50 */
	usleep((useconds_t)(rand_r(&seed) % (compressed ? 40000 : 9000)));
	kill(pid, SIGKILL);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(persist_adopt_ring(persist_ring_fd(&mine), &w, &a, &res, why, sizeof(why)) == 0,
		      "%s", why);
	ck_assert_uint_eq(res.pages_dropped + res.frames_dropped, 0);
	n = check_window(&a, &first, &last);	/* byte-exact, in order */
	if (*done) {
		ck_assert_msg(last + 1 == *done || last == *done, "newest %llu, pushed %llu",
			      (unsigned long long)last, (unsigned long long)*done);
		ck_assert_uint_eq(last - first + 1, n);	/* no gap */
		ck_assert_uint_ge(n, VMT_MIN(*done - 1, (uint64_t)a.nr_pages - 2 * a.batch));
	}
	ring_free(&a);
	ring_free(&mine);
	munmap((void *)done, 4096);
}

START_TEST(a_writer_killed_at_random_leaves_what_it_committed)
{
	for (unsigned i = 0; i < 50; i++)
		killed_writer_once(i % 2, 1234 + i);
}
END_TEST

/* ---- fd names and the fd store ---------------------------------------------- */

START_TEST(fd_names_are_valid_for_systemd)
{
	char name[VMT_PERSIST_FDNAME_MAX], guest[72], long_name[80];
	uint32_t cpu;

	ck_assert_int_eq(persist_ring_name(name, sizeof(name), "web-01.prod", 7), 0);
	ck_assert_str_eq(name, "ring/web-01.prod/7");
	ck_assert_int_eq(persist_ring_name_parse(name, guest, sizeof(guest), &cpu), 0);
	ck_assert_str_eq(guest, "web-01.prod");
	ck_assert_uint_eq(cpu, 7);
	memset(long_name, 'g', 64);
	long_name[64] = 0;
	ck_assert_int_eq(persist_ring_name(name, sizeof(name), long_name, UINT32_MAX), 0);
	ck_assert_uint_le(strlen(name), 255);
	ck_assert_ptr_null(strchr(name, ':'));
	long_name[64] = 'g';
	long_name[65] = 0;
	ck_assert_int_eq(persist_ring_name(name, sizeof(name), long_name, 0), -EINVAL);
	ck_assert_int_eq(persist_ring_name(name, sizeof(name), "a:b", 0), -EINVAL);
	ck_assert_int_eq(persist_ring_name(name, sizeof(name), "", 0), -EINVAL);
	ck_assert_int_eq(persist_ring_name_parse("control", guest, sizeof(guest), &cpu), -EINVAL);
	ck_assert_int_eq(persist_ring_name_parse("ring/g1/", guest, sizeof(guest), &cpu), -EINVAL);
	ck_assert_int_eq(persist_ring_name_parse("ring/g1/1x", guest, sizeof(guest), &cpu), -EINVAL);
	ck_assert_int_eq(persist_ring_name_parse("ring/g/1/2", guest, sizeof(guest), &cpu), -EINVAL);
}
END_TEST

/* One datagram and the fds that came with it. */
static ssize_t recv_notify(int s, char *buf, size_t n, int *fds, int *nfds)
{
	char cbuf[CMSG_SPACE(sizeof(int) * 4)];
	struct iovec iov = { buf, n - 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	ssize_t k = recvmsg(s, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

	*nfds = 0;
	if (k < 0)
		return -errno;
	buf[k] = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			*nfds = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			memcpy(fds, CMSG_DATA(c), (size_t)*nfds * sizeof(int));
		}
	return k;
}

START_TEST(the_fd_store_gets_the_memfd_and_its_name)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat a, b;
	char buf[512], name[VMT_PERSIST_FDNAME_MAX];
	int s, fds[4], nfds;

	init_ring(&R, RAW_PAGES, false);
	/* not under systemd: nothing sent, no error */
	unsetenv("NOTIFY_SOCKET");
	ck_assert_int_eq(fdstore_push(persist_ring_fd(&R), "ring/g1/1"), 0);
	/* systemd's end: a datagram socket named in NOTIFY_SOCKET */
	s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(s, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/notify.%d", getenv("TMPDIR") ?: "/tmp", getpid());
	unlink(sa.sun_path);
	ck_assert_int_eq(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setenv("NOTIFY_SOCKET", sa.sun_path, 1);
	ck_assert_int_eq(persist_ring_name(name, sizeof(name), "g1", 1), 0);
	ck_assert_int_gt(fdstore_push(persist_ring_fd(&R), name), 0);
	ck_assert_int_gt(recv_notify(s, buf, sizeof(buf), fds, &nfds), 0);
	ck_assert_str_eq(buf, "FDSTORE=1\nFDNAME=ring/g1/1");
	ck_assert_int_eq(nfds, 1);
	ck_assert_int_eq(fstat(fds[0], &a), 0);
	ck_assert_int_eq(fstat(persist_ring_fd(&R), &b), 0);
	ck_assert_uint_eq(a.st_ino, b.st_ino);
	ck_assert_uint_eq(a.st_dev, b.st_dev);
	close(fds[0]);
	ck_assert_int_gt(fdstore_remove(name), 0);
	ck_assert_int_gt(recv_notify(s, buf, sizeof(buf), fds, &nfds), 0);
	ck_assert_str_eq(buf, "FDSTOREREMOVE=1\nFDNAME=ring/g1/1");
	ck_assert_int_eq(nfds, 0);
	unsetenv("NOTIFY_SOCKET");
	close(s);
	unlink(sa.sun_path);
}
END_TEST

/* In a child, with fds 3.. as systemd passes them: what the receiver takes. */
static int passed_child(const int *fds, int n, const char *names, const ino_t *ino)
{
	struct vmt_fdstore_ring *v;
	char pid[32], nfds[16];
	unsigned k;
	struct stat st;

	for (int i = 0; i < n; i++)
		if (dup2(fds[i], 100 + i) < 0)
			return 10;
	for (int i = 0; i < n; i++)
		if (dup2(100 + i, SD_LISTEN_FDS_START + i) < 0)
			return 11;
	snprintf(pid, sizeof(pid), "%d", getpid());
	snprintf(nfds, sizeof(nfds), "%d", n);
	setenv("LISTEN_PID", pid, 1);
	setenv("LISTEN_FDS", nfds, 1);
	setenv("LISTEN_FDNAMES", names, 1);
	if (fdstore_take_rings(&v, &k) < 0 || k != 2)
		return 12;
	if (strcmp(v[0].name, "ring/g1/0") || strcmp(v[0].guest, "g1") || v[0].cpu != 0 ||
	    strcmp(v[1].name, "ring/g-2/1") || v[1].cpu != 1 || v[0].fd != 4 || v[1].fd != 5)
		return 13;
	for (unsigned i = 0; i < k; i++)
		if (fstat(v[i].fd, &st) < 0 || st.st_ino != ino[i + 1] ||
		    !(fcntl(v[i].fd, F_GETFD) & FD_CLOEXEC))
			return 14;
	/* the control socket's fd and the environment stay for control_new() */
	if (fcntl(3, F_GETFD) < 0 || !getenv("LISTEN_FDS") || !getenv("LISTEN_FDNAMES"))
		return 15;
	free(v);
	return 0;
}

START_TEST(rings_passed_back_are_told_from_the_control_socket)
{
	struct vmt_ring r2;
	ino_t ino[3];
	struct stat st;
	int fds[3], status;
	pid_t pid;

	init_ring(&R, RAW_PAGES, false);
	init_ring(&r2, RAW_PAGES, false);
	fds[0] = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	fds[1] = persist_ring_fd(&R);
	fds[2] = persist_ring_fd(&r2);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(fstat(fds[i], &st), 0);
		ino[i] = st.st_ino;
	}
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(passed_child(fds, 3, "control:ring/g1/0:ring/g-2/1", ino));
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child said %d", WEXITSTATUS(status));
	close(fds[0]);
	ring_free(&r2);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("persist");
	TCase *t = tcase_create("core");

	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 300);
	tcase_add_test(t, a_raw_ring_is_adopted_byte_exact);
	tcase_add_test(t, a_compressed_ring_is_adopted_byte_exact);
	tcase_add_test(t, the_memfd_is_sealed);
	tcase_add_test(t, a_flipped_bit_is_refused);
	tcase_add_test(t, another_layout_version_is_refused);
	tcase_add_test(t, another_geometry_or_owner_is_refused);
	tcase_add_test(t, a_page_not_yet_committed_is_not_taken);
	tcase_add_test(t, a_page_damaged_after_its_record_is_dropped);
	tcase_add_test(t, a_damaged_frame_is_dropped);
	tcase_add_test(t, pages_in_the_dump_reserve_are_brought_home);
	tcase_add_test(t, a_bad_reserve_is_refused);
	tcase_add_test(t, an_away_slot_out_of_the_reserve_or_disagreeing_is_dropped);
	tcase_add_test(t, a_writer_killed_at_random_leaves_what_it_committed);
	tcase_add_test(t, fd_names_are_valid_for_systemd);
	tcase_add_test(t, the_fd_store_gets_the_memfd_and_its_name);
	tcase_add_test(t, rings_passed_back_are_told_from_the_control_socket);
	suite_add_tcase(s, t);
	return test_run_suite(s);
}
