/* SPDX-License-Identifier: MIT */
#define VMT_DLNATS_IMPL	/* the real names, for __typeof__ and dlsym */
#include "dlnats.h"
#include "dlopen.h"

#define VMT_DLNATS_DEFINE(f) __typeof__(f) *sym_##f;
VMT_DLNATS_SYMS(VMT_DLNATS_DEFINE)
VMT_DLCRYPTO_SYMS(VMT_DLNATS_DEFINE)

int dlnats_open(char *why, size_t why_len)
{
	static void *nats, *crypto;
	static const struct vmt_dlsym nats_syms[] = { VMT_DLNATS_SYMS(VMT_DLSYM) };
	static const struct vmt_dlsym crypto_syms[] = { VMT_DLCRYPTO_SYMS(VMT_DLSYM) };
	/* libcrypto first: OpenSSL is set up (natsconn_init()) before libnats' use */
	int r = dl_open(&crypto, VMT_DLCRYPTO_SONAME, crypto_syms,
			sizeof(crypto_syms) / sizeof(crypto_syms[0]), why, why_len);

	if (r < 0)
		return r;
	return dl_open(&nats, VMT_DLNATS_SONAME, nats_syms, sizeof(nats_syms) / sizeof(nats_syms[0]),
		       why, why_len);
}
