/* SPDX-License-Identifier: MIT */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>

#include "dlopen.h"

int dl_open(void **handle, const char *soname, const struct vmt_dlsym *syms, size_t n,
	    char *why, size_t why_len)
{
	void *h;

	if (*handle)
		return 0;
	/* RTLD_NODELETE: a failed table closes the library, but what it set up
	 * at load (OpenSSL's, libvirt's constructors) stays mapped and sane */
	h = dlopen(soname, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (!h) {
		const char *e = dlerror();

		snprintf(why, why_len, "%s cannot be loaded: %s", soname, e ? e : "unknown error");
		return -ELIBACC;
	}
	for (size_t i = 0; i < n; i++) {
		/* a preloaded library's (LD_PRELOAD) first, as the dynamic linker
		 * binds a linked library's calls: test_fleet's natsshim.so */
		*syms[i].fn = dlsym(RTLD_DEFAULT, syms[i].name);
		if (*syms[i].fn)
			continue;
		dlerror();
		*syms[i].fn = dlsym(h, syms[i].name);
		if (!*syms[i].fn) {
			const char *e = dlerror();

			snprintf(why, why_len, "%s has no %s (another version?): %s", soname,
				 syms[i].name, e ? e : "NULL");
			for (size_t j = 0; j <= i; j++)
				*syms[j].fn = NULL;
			dlclose(h);
			return -ELIBACC;
		}
	}
	*handle = h;
	return 0;
}
