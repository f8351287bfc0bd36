/* SPDX-License-Identifier: MIT */
/*
 * libcap rather than capset(2) by hand: it knows the kernel's capability
 * count and the bounding-set calls, and the Debian package is small.
 */
#include <errno.h>
#include <sys/capability.h>
#include <sys/prctl.h>

#include "log.h"
#include "priv.h"

#define BIT(c) (1ull << (c))

uint64_t priv_needed(const struct vmt_config *conf)
{
	/*
	 * Channel folders belong to QEMU's user (libvirt's to libvirt-qemu,
	 * mode 0750 or tighter), and so may discovery folders: root opens them
	 * only with DAC_OVERRIDE (DAC_READ_SEARCH to look in). The state
	 * folder, tracefs and debugfs are root's own: no capability needed.
	 */
	uint64_t keep = BIT(CAP_DAC_OVERRIDE) | BIT(CAP_DAC_READ_SEARCH);

	/* a reload that changes the detectors loads their programs again;
	 * the maps and ring buffer they use meanwhile need nothing */
	for (unsigned i = 0; i < VMT_CONFIG_DETECTORS; i++)
		if (conf->detectors[i].enabled)
			keep |= BIT(CAP_BPF) | BIT(CAP_PERFMON);
	/* the host source takes /proc/kallsyms again when a reload sets it up
	 * anew: without CAP_SYSLOG its addresses read as zeros */
	if (conf->host.enabled)
		keep |= BIT(CAP_SYSLOG);
	return keep;
}

int priv_drop(uint64_t keep)
{
	cap_value_t last = (cap_value_t)cap_max_bits() - 1;
	cap_t now = cap_get_proc(), want = cap_init();
	cap_flag_value_t have;
	bool any = false;
	int r = 0;

	if (!now || !want) {
		r = -ENOMEM;
		goto out;
	}
	for (cap_value_t c = 0; c <= last; c++)
		if (cap_get_flag(now, c, CAP_PERMITTED, &have) == 0 && have == CAP_SET)
			any = true;
	if (!any)
		goto out;	/* nothing to give up */
	/* the bounding set first: dropping from it needs CAP_SETPCAP, which
	 * goes with the rest below */
	for (cap_value_t c = 0; c <= last; c++) {
		if (keep & BIT(c) || CAP_IS_SUPPORTED(c) == 0)
			continue;
		if (cap_drop_bound(c) < 0 && errno != EINVAL) {
			r = -errno;
			log_error_errno(r, "cannot drop capability %s from the bounding set: %m",
					cap_to_name(c));
			goto out;
		}
	}
	for (cap_value_t c = 0; c <= last; c++) {
		if (!(keep & BIT(c)) ||
		    cap_get_flag(now, c, CAP_PERMITTED, &have) < 0 || have != CAP_SET)
			continue;
		cap_set_flag(want, CAP_PERMITTED, 1, &c, CAP_SET);
		cap_set_flag(want, CAP_EFFECTIVE, 1, &c, CAP_SET);
	}
	if (cap_set_proc(want) < 0) {
		r = -errno;
		log_error_errno(r, "cannot drop capabilities: %m");
		goto out;
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL) {
		r = -errno;
		goto out;
	}
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		r = -errno;
		log_error_errno(r, "cannot set no_new_privs: %m");
		goto out;
	}
	{
		char *text = cap_to_text(want, NULL);
		log_info("privilege: running with %s from now on", text ? text : "(?)");
		cap_free(text);
	}
out:
	cap_free(now);
	cap_free(want);
	return r;
}
