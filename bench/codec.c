/* SPDX-License-Identifier: MIT */
/*
 * vmtb-codec: what a frame costs to make and to read, on one core, without
 * the daemon around it. The corpus pages of each CPU cut into frames of 64
 * pages (what a ring of 16 MiB or more batches), each made with
 * frame_compress() as the compressor makes it and decoded with
 * frame_decode_with() as merge, report and the dump path read it, in this
 * thread, timed by the thread's CPU clock (CLOCK_THREAD_CPUTIME_ID): the
 * figures are per core whatever else runs on the machine.
 *
 * Codecs: zstd -1 (the baseline: the default before tcode), zstd -3, lz4,
 * tcode (its transcoding alone is timed too, tcode_encode into a buffer).
 * Every frame decoded is compared with its pages: a frame that does not
 * come back byte for byte fails the bench.
 *
 * RESULT codec-tcode-encode: the compressor's CPU seconds per GB of pages,
 * target <= 1.2 (issue 27); codec-tcode-decode: GB of pages per CPU second,
 * target >= 1; the ratios and zstd -1's figures beside them.
 * vmtb-codec [--corpus NAME]... (default: guest-6.1 and guest-6.1-busy)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "frame.h"
#include "tcode.h"

#define FRAME_PAGES 64u
#define TARGET_ENC 1.2	/* CPU-s per GB */
#define TARGET_DEC 1.0	/* GB per CPU-s */

struct kind {
	const char *name;	/* RESULT: codec-NAME-... */
	uint32_t codec;
	int level;
};

static const struct kind kinds[] = {
	{ "zstd1", VMT_FRAME_ZSTD, 1 },
	{ "zstd3", VMT_FRAME_ZSTD, 3 },
	{ "lz4", VMT_FRAME_LZ4, 1 },
	{ "tcode", VMT_FRAME_TCODE, 1 },
};

struct frame {
	const uint8_t *pages;
	uint32_t npages;
	uint8_t *payload;
	size_t len;
};

struct fig {
	double ratio;		/* page bytes / payload bytes */
	double enc_s_gb;	/* CPU-s per GB of pages */
	double dec_gb_s;	/* GB of pages per CPU-s */
	double xform_s_gb;	/* tcode: the transcoding alone */
};

static double min_cpu_s = 1.0;	/* each figure: passes until this much CPU */

static uint64_t thread_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The corpus's pages as frames of up to FRAME_PAGES, CPU after CPU. */
static struct frame *frames_cut(const struct bench_corpus *c, size_t *n)
{
	struct frame *f;
	size_t k = 0, max = 0;

	for (unsigned cpu = 0; cpu < BENCH_CPUS; cpu++)
		max += (c->npages[cpu] + FRAME_PAGES - 1) / FRAME_PAGES;
	f = calloc(max ? max : 1, sizeof(*f));
	if (!f)
		return NULL;
	for (unsigned cpu = 0; cpu < BENCH_CPUS; cpu++)
		for (size_t i = 0; i < c->npages[cpu]; i += FRAME_PAGES)
			f[k++] = (struct frame){ .pages = c->pages[cpu] + i * BENCH_PS,
						 .npages = (uint32_t)VMT_MIN(FRAME_PAGES,
									     c->npages[cpu] - i) };
	*n = k;
	return f;
}

static int measure(const struct kind *k, const struct vmt_tcode *t, struct frame *f, size_t n,
		   struct fig *out)
{
	size_t max_raw = (size_t)FRAME_PAGES * BENCH_PS, cap = frame_bound(k->codec, max_raw);
	struct vmt_frame_ctx *ctx = frame_ctx_new(k->codec, k->level, max_raw);
	uint8_t *dec = malloc(max_raw);
	uint64_t bytes = 0, zbytes = 0, t0, ns;
	char why[200];
	int r = 0;

	memset(out, 0, sizeof(*out));
	if (!ctx || !dec || (k->codec == VMT_FRAME_TCODE && frame_ctx_schema(ctx, t) < 0)) {
		r = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		free(f[i].payload);
		f[i].payload = malloc(cap);
		if (!f[i].payload) {
			r = -ENOMEM;
			goto out;
		}
	}
	/* making: passes over every frame until min_cpu_s */
	t0 = thread_ns();
	do {
		for (size_t i = 0; i < n; i++) {
			struct vmt_iovec iov = { (void *)f[i].pages, (size_t)f[i].npages * BENCH_PS };
			ssize_t len = frame_compress(ctx, &iov, 1, f[i].payload, cap);

			if (len < 0) {
				fprintf(stderr, "vmtb-codec: %s: frame %zu: %s\n", k->name, i,
					strerror((int)-len));
				r = (int)len;
				goto out;
			}
			f[i].len = (size_t)len;
			bytes += iov.len;
			zbytes += (size_t)len;
		}
		ns = thread_ns() - t0;
	} while ((double)ns < min_cpu_s * 1e9);
	out->ratio = (double)bytes / (double)zbytes;
	out->enc_s_gb = (double)ns / (double)bytes;
	/* the transcoding alone, into a kept buffer */
	if (k->codec == VMT_FRAME_TCODE) {
		struct vmt_tcode_ctx *tc;
		struct vmt_buf b = { 0 };

		if (tcode_ctx_new(&tc, t) < 0) {
			r = -ENOMEM;
			goto out;
		}
		bytes = 0;
		t0 = thread_ns();
		do {
			for (size_t i = 0; i < n && r == 0; i++) {
				b.len = 0;
				r = tcode_encode(tc, f[i].pages, f[i].npages, &b, NULL);
				bytes += (size_t)f[i].npages * BENCH_PS;
			}
			ns = thread_ns() - t0;
		} while (r == 0 && (double)ns < min_cpu_s * 1e9);
		out->xform_s_gb = (double)ns / (double)bytes;
		tcode_ctx_free(tc);
		buf_free(&b);
		if (r < 0)
			goto out;
	}
	/* reading: the same, each frame checked against its pages once */
	for (size_t i = 0; i < n; i++) {
		size_t raw = (size_t)f[i].npages * BENCH_PS;

		r = frame_decode_with(t, k->codec, f[i].payload, f[i].len, dec, raw, why, sizeof(why));
		if (r < 0 || memcmp(dec, f[i].pages, raw)) {
			fprintf(stderr, "vmtb-codec: %s: frame %zu does not decode to its pages: %s\n",
				k->name, i, r < 0 ? why : "other bytes");
			r = r < 0 ? r : -EBADMSG;
			goto out;
		}
	}
	bytes = 0;
	t0 = thread_ns();
	do {
		for (size_t i = 0; i < n && r == 0; i++) {
			size_t raw = (size_t)f[i].npages * BENCH_PS;

			r = frame_decode_with(t, k->codec, f[i].payload, f[i].len, dec, raw, why,
					      sizeof(why));
			bytes += raw;
		}
		ns = thread_ns() - t0;
	} while (r == 0 && (double)ns < min_cpu_s * 1e9);
	out->dec_gb_s = (double)bytes / (double)ns;
out:
	frame_ctx_free(ctx);
	free(dec);
	return r;
}

static int run_corpus(const char *name)
{
	struct bench_corpus c;
	struct vmt_tcode *t = NULL;
	struct fig figs[ARRAY_SIZE(kinds)];
	struct frame *f;
	size_t n = 0;
	int r;

	setenv("VMT_BENCH_CORPUS", name, 1);	/* corpus_open() reads it */
	if (corpus_open(&c) < 0) {
		printf("   %s: no corpus at %s: skipped\n", name, c.dir);
		return 0;
	}
	r = tcode_new(&t, c.bundle.data, c.bundle.len, BENCH_PS);
	if (r < 0) {
		fprintf(stderr, "vmtb-codec: %s: no schema from its formats (%s)\n", name, strerror(-r));
		return r;
	}
	f = frames_cut(&c, &n);
	if (!f) {
		tcode_free(t);
		return -ENOMEM;
	}
	printf("   corpus %s: %zu + %zu pages, %zu frames of up to %u pages; schema of %u events, "
	       "%u columns\n", c.name, c.npages[0], c.npages[1], n, FRAME_PAGES, tcode_nevents(t),
	       tcode_ncolumns(t));
	for (size_t i = 0; i < ARRAY_SIZE(kinds) && r == 0; i++) {
		r = measure(&kinds[i], t, f, n, &figs[i]);
		if (r < 0)
			break;
		printf("   %-6s %6.2f:1   make %.3f CPU-s/GB (%4.0f MB/s)", kinds[i].name, figs[i].ratio,
		       figs[i].enc_s_gb, 1e3 / figs[i].enc_s_gb);
		if (figs[i].xform_s_gb)
			printf(" of which the transcoding %.3f", figs[i].xform_s_gb);
		printf("   read %.2f GB/s per core\n", figs[i].dec_gb_s);
	}
	if (r == 0) {
		const struct fig *z = &figs[0], *tc = &figs[ARRAY_SIZE(kinds) - 1];
		const char *sfx = strcmp(c.name, "guest-6.1") ? c.name : NULL;
		char rn[200], detail[400];

		snprintf(rn, sizeof(rn), "codec-tcode-encode%s%s", sfx ? "@" : "", sfx ? sfx : "");
		snprintf(detail, sizeof(detail),
			 "tcode %.2f:1, %.3f CPU-s/GB (transcoding %.3f) vs zstd -1 %.2f:1, %.3f CPU-s/GB "
			 "(%.2f x the ratio, %.2f x the CPU); one core, 64-page frames",
			 tc->ratio, tc->enc_s_gb, tc->xform_s_gb, z->ratio, z->enc_s_gb,
			 tc->ratio / z->ratio, tc->enc_s_gb / z->enc_s_gb);
		bench_result(rn, tc->enc_s_gb, "s/GB", TARGET_ENC, false, detail);
		snprintf(rn, sizeof(rn), "codec-tcode-decode%s%s", sfx ? "@" : "", sfx ? sfx : "");
		snprintf(detail, sizeof(detail), "tcode frames %.2f GB/s per core vs zstd -1 %.2f, lz4 %.2f; "
			 "frame_decode_with() with the CRC check", tc->dec_gb_s, z->dec_gb_s,
			 figs[2].dec_gb_s);
		bench_result(rn, tc->dec_gb_s, "GB/s", TARGET_DEC, true, detail);
	}
	for (size_t i = 0; i < n; i++)
		free(f[i].payload);
	free(f);
	tcode_free(t);
	return r;
}

int main(int argc, char **argv)
{
	const char *def[] = { "guest-6.1", "guest-6.1-busy" };
	int fails = 0;

	if (bench_quick())
		min_cpu_s = 0.3;
	printf("== codec: frames made and read on one core (thread CPU time), each figure over "
	       "%.1f CPU-s at least\n", min_cpu_s);
	if (getenv("VMT_CORPUS")) {
		fails += run_corpus("guest-6.1") < 0;	/* VMT_CORPUS wins in corpus_open() */
	} else if (argc > 2 && !strcmp(argv[1], "--corpus")) {
		for (int i = 2; i < argc; i++)
			fails += run_corpus(argv[i]) < 0;
	} else {
		for (size_t i = 0; i < ARRAY_SIZE(def); i++)
			fails += run_corpus(def[i]) < 0;
	}
	return fails ? 1 : 0;
}
