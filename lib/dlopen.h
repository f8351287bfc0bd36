/* SPDX-License-Identifier: MIT */
/*
 * dlopen: an optional library loaded when the configuration needs it, as
 * systemd loads its own: a table of the functions a module calls, filled
 * all at once or not at all, so a host that never uses the fleet or
 * libvirt never maps libnats, OpenSSL, libvirt or libxml2 (nor the code
 * in them that parses network input). The module's header redirects each
 * function's name to its pointer (lib/dlnats.h, daemon/lvmeta-dl.h): the
 * calls read as usual, and a function left out of either list fails the
 * build (an undefined pointer, or the real symbol with no -l to find it).
 */
#ifndef VMT_DLOPEN_H
#define VMT_DLOPEN_H

#include <stdbool.h>
#include <stddef.h>

struct vmt_dlsym {
	void **fn;		/* the pointer to fill */
	const char *name;
};

/* An entry for the table of the pointer sym_NAME. */
#define VMT_DLSYM(name) { (void **)&sym_##name, #name },

/*
 * soname and every symbol of syms[n] into *handle and the pointers; 0, or
 * -ELIBACC with why (the library, its soname and dlerror()) and every
 * pointer left NULL. A function a preloaded library (LD_PRELOAD) defines is
 * taken from there, as it would be for a linked library. Once loaded, a
 * no-op. Not thread-safe: on the main thread, before the threads that call
 * through the table start.
 */
int dl_open(void **handle, const char *soname, const struct vmt_dlsym *syms, size_t n,
	    char *why, size_t why_len);

#endif
