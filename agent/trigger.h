/* SPDX-License-Identifier: MIT */
/*
 * trigger: what makes the agent send TRIGGER (a dump request) to the host.
 * Two sources: `vmtrace-agent trigger REASON`, a datagram on a local unix
 * socket, answered "sent" or why not; and the kernel's own oops, BUG,
 * WARNING and panic lines, read from /dev/kmsg. One limiter holds both: at
 * most one TRIGGER a second leaves the guest, the rest are counted, so a
 * misbehaving guest process cannot flood the host.
 */
#ifndef VMT_AGENT_TRIGGER_H
#define VMT_AGENT_TRIGGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VMT_TRIGGER_SOCK "/run/vmtrace-agent.sock"
#define VMT_TRIGGER_REASON_MAX 240	/* bytes of reason a request may carry */
#define VMT_TRIGGER_INTERVAL_NS 1000000000ull

struct vmt_agent_trigger {
	int sock_fd;		/* request socket, -1 when none */
	int kmsg_fd;		/* /dev/kmsg, -1 when not watched */
	/* sends one TRIGGER: 0, or -ENOTCONN while not streaming */
	int (*send)(void *ctx, const char *reason, size_t len);
	void *ctx;
	uint64_t last_ns;	/* when the last TRIGGER went out, 0 = never */
	uint64_t sent, limited;	/* limited: held back since the last one sent */
};

/* Binds the request socket at path (mode 0600) and, if kmsg, watches
 * /dev/kmsg from its current end. What fails is logged and left out: the
 * agent streams without it. */
void trigger_open(struct vmt_agent_trigger *t, const char *path, bool kmsg,
		  int (*send)(void *ctx, const char *reason, size_t len), void *ctx);
/* The poll loop calls these on POLLIN; each handles a bounded batch. */
void trigger_on_request(struct vmt_agent_trigger *t);
void trigger_on_kmsg(struct vmt_agent_trigger *t);
/* Sanitised, rate-limited send: 0, -EAGAIN when limited, or send()'s error. */
int trigger_fire(struct vmt_agent_trigger *t, const char *reason, size_t len);
void trigger_close(struct vmt_agent_trigger *t, const char *path);

/* `vmtrace-agent trigger REASON`: asks the agent at path, prints the answer. */
int trigger_request(const char *path, const char *reason);

/* Pure helpers (tests/unit/test_agent_kmsg.c) */
/* Copies len bytes to dst (room for len), non-printable bytes as '?'. */
void trigger_sanitize(char *dst, const char *src, size_t len);
/* Whether one /dev/kmsg record is a kernel oops/BUG/WARNING/panic line;
 * then *text, *tlen: its message text, first line only, inside rec. */
bool trigger_kmsg_match(const char *rec, size_t len, const char **text, size_t *tlen);

#endif
