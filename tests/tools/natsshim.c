/* SPDX-License-Identifier: MIT */
/*
 * natsshim.so: an LD_PRELOAD library for test_fleet. With VMT_NATS_DUP=N
 * the process's Nth js_Publish (libnats) is made twice: the same message
 * stored twice on its subject, which is what a publish that timed out and
 * was stored later anyway, next to its retry, leaves in a stream. Logs
 * "natsshim: js_Publish N on SUBJECT made twice" on stderr. Without
 * VMT_NATS_DUP every call goes straight through.
 *
 * Declared by hand (no libnats header): natsStatus and jsErrCode are enums,
 * the rest pointers. Built without sanitizers, like faultshim.so.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*pub_fn)(void **pa, void *js, const char *subj, const void *data, int len, void *opts,
		      int *err);

int js_Publish(void **pa, void *js, const char *subj, const void *data, int len, void *opts,
	       int *err);
int js_Publish(void **pa, void *js, const char *subj, const void *data, int len, void *opts,
	       int *err)
{
	static _Atomic(pub_fn) real;
	static atomic_long calls;
	const char *e = getenv("VMT_NATS_DUP");
	long n = atomic_fetch_add(&calls, 1) + 1;
	pub_fn fn = atomic_load(&real);

	if (!fn) {
		fn = (pub_fn)dlsym(RTLD_NEXT, "js_Publish");
		/* vmtraced loads libnats itself (dlopen, RTLD_LOCAL): not in the
		 * global scope RTLD_NEXT searches, but loaded by now */
		if (!fn) {
			void *h = dlopen("libnats.so.3.4", RTLD_LAZY | RTLD_NOLOAD);

			fn = h ? (pub_fn)dlsym(h, "js_Publish") : NULL;
		}
		atomic_store(&real, fn);
	}
	if (!fn)
		return 1;	/* NATS_ERR */
	if (e && atol(e) == n) {
		int s = fn(NULL, js, subj, data, len, opts, err);

		fprintf(stderr, "natsshim: js_Publish %ld on %s made twice\n", n, subj);
		if (s != 0)
			return s;
	}
	return fn(pa, js, subj, data, len, opts, err);
}
