/* SPDX-License-Identifier: MIT */
/*
 * control: the control socket (lib/ctlproto.h). Accepts vmtracectl
 * clients, checks who they are (SO_PEERCRED) against the configuration's
 * groups, keeps slots for root and a limit per user, hangs up on idle
 * clients, parses each request packet, and hands a request its client may
 * make to its owner (the manager), which answers through control_send(),
 * control_error() and control_end(), at once or when a dump is written.
 */
#ifndef VMT_CONTROL_H
#define VMT_CONTROL_H

#include <stdint.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "config.h"
#include "util.h"

struct vmt_control;
struct vmt_client;

struct vmt_control_ops {
	/* A well-formed request this client may make (read-only clients:
	 * STATUS, GUESTS, SAMPLES); p is the TLV payload. */
	void (*request)(void *owner, struct vmt_client *cl, unsigned type, uint32_t id,
			const uint8_t *p, uint32_t len);
	/* The client is gone: forget it wherever an answer waits for it. */
	void (*gone)(void *owner, struct vmt_client *cl);
};

/* Listen on conf->control_socket (or the socket systemd passed). */
int control_new(struct vmt_control **out, sd_event *e, const struct vmt_config *conf,
		const struct vmt_control_ops *ops, void *owner);
void control_free(struct vmt_control *c);
/* The listening socket (an upgrade passes it on as "control"). */
int control_fd(const struct vmt_control *c);
/* The configuration's groups changed (a reload): look every peer up anew. */
void control_forget_access(struct vmt_control *c);
/* Requests refused (permission) and malformed, for status. */
uint64_t control_refused(const struct vmt_control *c);

/* Answers: b is a message begun with ctl_msg_begin(); end or error last. */
void control_send(struct vmt_client *cl, struct vmt_buf *b);
void control_error(struct vmt_client *cl, uint32_t id, int err, const char *msg);
void control_end(struct vmt_client *cl, uint32_t id);
/* A malformed request (counted with the refused). */
void control_bad_request(struct vmt_client *cl);
pid_t control_client_pid(const struct vmt_client *cl);
/* An answer it waits for (+1) or got (-1): a waiting client is not idle. */
void control_client_waits(struct vmt_client *cl, int delta);

#endif
