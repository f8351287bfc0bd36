/* SPDX-License-Identifier: MIT */
/*
 * client: vmtracectl's side of the control socket. One request, then the
 * answer's records one by one until END (0) or ERROR (-errno, message).
 */
#ifndef VMT_CLIENT_H
#define VMT_CLIENT_H

#include <stdint.h>

#include "util.h"

struct vmt_ctl_client {
	int fd;
	uint32_t id;
	uint8_t buf[65536];
	char error[512];
};

struct vmt_ctl_record {
	unsigned type;
	const uint8_t *payload;
	uint32_t len;
};

int client_connect(struct vmt_ctl_client *c, const char *path);
void client_close(struct vmt_ctl_client *c);
/* Send the request in b (from ctl_msg_begin + tlv_put*). */
int client_request(struct vmt_ctl_client *c, struct vmt_buf *b);
/*
 * Next record of the answer: 1 and r filled; 0 on END; -errno on ERROR
 * (c->error holds the daemon's message) or on a broken answer;
 * -ETIMEDOUT after timeout_ms without a packet.
 */
int client_next(struct vmt_ctl_client *c, struct vmt_ctl_record *r, int timeout_ms);

#endif
