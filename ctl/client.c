/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "client.h"
#include "ctlproto.h"
#include "tlv.h"
#include "vfile.h"

int client_connect(struct vmt_ctl_client *c, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	memset(c, 0, sizeof(*c));
	c->fd = -1;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -errno;
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;
		close(c->fd);
		c->fd = -1;
		return e;
	}
	return 0;
}

void client_close(struct vmt_ctl_client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}

int client_request(struct vmt_ctl_client *c, struct vmt_buf *b)
{
	int r = ctl_msg_end(b);

	if (r < 0)
		return r;
	c->id = get_le32(b->data + 12);
	if (send(c->fd, b->data, b->len, MSG_NOSIGNAL) < 0)
		return -errno;
	return 0;
}

int client_next(struct vmt_ctl_client *c, struct vmt_ctl_record *rec, int timeout_ms)
{
	for (;;) {
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		const uint8_t *payload;
		uint32_t id, plen;
		unsigned type;
		ssize_t n;
		int r;

		r = poll(&p, 1, timeout_ms);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -ETIMEDOUT;
		n = recv(c->fd, c->buf, sizeof(c->buf), 0);
		if (n < 0)
			return -errno;
		if (n == 0) {
			snprintf(c->error, sizeof(c->error), "the daemon closed the connection");
			return -ECONNRESET;
		}
		if (ctl_msg_parse(c->buf, (size_t)n, &type, &id, &payload, &plen) < 0) {
			snprintf(c->error, sizeof(c->error), "malformed answer from the daemon");
			return -EBADMSG;
		}
		if (id != c->id && type != VMT_CTL_ERROR)
			continue;	/* not ours: an answer to an earlier, abandoned request */
		if (type == VMT_CTL_END)
			return 0;
		if (type == VMT_CTL_ERROR) {
			struct vmt_tlv t;
			size_t pos = 0;
			uint32_t err = EIO;

			snprintf(c->error, sizeof(c->error), "the daemon refused");
			while (tlv_next(payload, plen, &pos, &t) > 0) {
				if (t.tag == VMT_CTAG_ERRNO)
					tlv_u32(&t, &err);
				else if (t.tag == VMT_CTAG_MESSAGE)
					tlv_str(&t, c->error, sizeof(c->error));
			}
			return err ? -(int)err : -EIO;
		}
		rec->type = type;
		rec->payload = payload;
		rec->len = plen;
		return 1;
	}
}
