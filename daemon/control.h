/* SPDX-License-Identifier: MIT */
/*
 * control: the control socket (lib/ctlproto.h). Accepts vmtracectl
 * clients, checks who they are (SO_PEERCRED), parses each request packet
 * before acting on it, and answers STATUS, GUESTS and DUMP; a DUMP is
 * answered when its files are written (manager calls back).
 */
#ifndef VMT_CONTROL_H
#define VMT_CONTROL_H

#include <stdint.h>

struct vmt_manager;
struct vmt_control;
struct vmt_client;

int control_new(struct vmt_control **out, struct vmt_manager *m, const char *path);
void control_free(struct vmt_control *c);
/* The configuration's groups changed (a reload): look every peer up anew. */
void control_forget_access(struct vmt_control *c);
void control_answer_dump(struct vmt_control *c, struct vmt_client *client, uint32_t request_id,
			 char *const *files, uint32_t nfiles, int error);

#endif
