/* SPDX-License-Identifier: MIT */
/*
 * hostpriv-int: the wire between the daemon (hostpriv.c) and its helper
 * (hostpriv-tracefs.c): SOCK_SEQPACKET, one message a request or reply, a
 * fixed header, the body's size fixed by its type, descriptors with
 * SCM_RIGHTS. Bump HP_VERSION with any change: an upgrade's successor may
 * talk to a helper an older binary forked.
 */
#ifndef VMT_HOSTPRIV_INT_H
#define VMT_HOSTPRIV_INT_H

#include <stdint.h>

#include "config.h"
#include "hostpriv.h"

#define HP_MAGIC 0x56485056u	/* "VPHV" */
#define HP_VERSION 1
#define HP_FDS_MAX 64		/* descriptors in one message (SCM_MAX_FD is 253) */

enum hp_type {
	HP_HELLO = 1,		/* -> HP_REPLY + hp_hello */
	HP_SETUP = 2,		/* hp_setup -> HP_REPLY + hp_setup_reply [meta, marker?], HP_FDS... */
	HP_TRACE_ON = 3,	/* -> HP_REPLY */
	HP_TASKS = 4,		/* -> HP_REPLY [memfd] */
	HP_DESTROY = 5,		/* -> HP_REPLY */
	HP_REPLY = 100,
	HP_FDS = 101,		/* hp_fds, with that many descriptors */
};

struct hp_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	int32_t result;		/* replies: 0 or -errno */
	uint32_t len;		/* of the body that follows */
};

struct hp_hello {
	uint32_t pid;
};

struct hp_setup {
	char events[VMT_CONFIG_MAX_EVENTS];
	char clock[32];
	uint32_t buffer_kb;
	uint32_t qemu_only;
	char instance[VMT_HOST_INSTANCE_MAX + 1];
};

struct hp_setup_reply {
	uint32_t ncpus;
	uint32_t buffer_kb;
	uint32_t poll_ok;
	uint32_t have_marker;
	uint32_t nfds;		/* CPU descriptors in the HP_FDS messages that follow */
	char clock[32];
	char dir[256];
	uint8_t present[VMT_MAX_CPUS];	/* CPU i has a descriptor, in order */
};

struct hp_fds {
	uint32_t n;
};

#define HP_BODY_MAX sizeof(struct hp_setup)

/* hostpriv.c: one message out (fds may be NULL); -errno. */
int hp_send(int fd, uint16_t type, int32_t result, const void *body, uint32_t len,
	    const int *fds, unsigned nfds);
/*
 * One message in, within timeout_ms (-1: no limit): its header, its body
 * into body (at most max bytes) and its descriptors into fds (at most
 * *nfds; *nfds their number on return, any beyond closed). -EPIPE when
 * the peer is gone, -EBADMSG for a message that does not check (its
 * descriptors closed), -ETIMEDOUT.
 */
int hp_recv(int fd, int timeout_ms, struct hp_hdr *h, void *body, uint32_t max, int *fds,
	    unsigned *nfds);

#endif
