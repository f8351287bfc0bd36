/* SPDX-License-Identifier: MIT */
#define VMT_LVMETA_DL_IMPL	/* the real names, for __typeof__ and dlsym */
#include "dlopen.h"
#include "lvmeta-dl.h"
#include "lvmeta.h"

#define VMT_LVMETA_DL_DEFINE(f) __typeof__(f) *sym_##f;
VMT_DLVIRT_SYMS(VMT_LVMETA_DL_DEFINE)
VMT_DLXML_SYMS(VMT_LVMETA_DL_DEFINE)

int lvmeta_dl_open(bool virt, char *why, size_t why_len)
{
	static void *xml, *lv;
	static const struct vmt_dlsym xml_syms[] = { VMT_DLXML_SYMS(VMT_DLSYM) };
	static const struct vmt_dlsym virt_syms[] = { VMT_DLVIRT_SYMS(VMT_DLSYM) };
	int r = dl_open(&xml, VMT_DLXML_SONAME, xml_syms, sizeof(xml_syms) / sizeof(xml_syms[0]),
			why, why_len);

	if (r < 0 || !virt)
		return r;
	return dl_open(&lv, VMT_DLVIRT_SONAME, virt_syms, sizeof(virt_syms) / sizeof(virt_syms[0]),
		       why, why_len);
}
