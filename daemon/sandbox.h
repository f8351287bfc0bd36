/* SPDX-License-Identifier: MIT */
/*
 * sandbox: `sandbox: true` — a system call allow-list (seccomp, through
 * libseccomp) that vmtraced puts on itself once it is set up, as chronyd's
 * -F does, for machines where no systemd SystemCallFilter= wraps it. A call
 * outside the list kills the daemon: better than a compromised one going
 * on. The list is in sandbox.c; vmtraced(8) says what it covers.
 */
#ifndef VMT_SANDBOX_H
#define VMT_SANDBOX_H

/* Load the filter on every thread; 0 or -errno (logged). */
int sandbox_apply(void);

#endif
