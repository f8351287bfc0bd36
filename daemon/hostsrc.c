/* SPDX-License-Identifier: MIT */
/* Placeholder until the host source lands: no host recording. */
#include <errno.h>

#include "hostsrc.h"

int hostsrc_new(struct vmt_manager *m, struct vmt_guest **out)
{
	(void)m;
	(void)out;
	return -EOPNOTSUPP;
}

void hostsrc_flush(struct vmt_hostsrc *h)
{
	(void)h;
}

void hostsrc_free(struct vmt_hostsrc *h)
{
	(void)h;
}
