/* SPDX-License-Identifier: MIT */
/*
 * fleet: this host in a fleet, over NATS (docs/FLEET.md). Off unless the
 * configuration has fleet:. One thread of ours (the uploader) owns the
 * libnats connection: it connects (and reconnects, with backoff), ensures
 * the object store's stream, subscribes to the dump subjects and uploads
 * every sample and aux file of the state folder that has no marker yet
 * (FILE.uploaded beside it), then announces it. libnats' own threads only
 * queue dump requests (bounded, locked) and wake the event loop through an
 * eventfd: nothing of theirs touches daemon state. On the loop a request is
 * checked (subject, strict JSON, the fleet's own budget) and handed to the
 * owner's dump callback; the dump's answer comes back through
 * fleet_answer() and is published to the request's reply subject.
 * Labels: the configuration's guests' at creation, and those libvirt's
 * metadata gives (fleet_set_labels(), lvmeta.h) as they come; the loop
 * keeps the table requests are matched against and the subjects it wants,
 * the uploader subscribes and unsubscribes to follow them.
 */
#ifndef VMT_FLEET_H
#define VMT_FLEET_H

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "config.h"

struct vmt_fleet;

/* A dump asked for over NATS; token goes back in fleet_answer(). */
struct vmt_fleet_dump {
	char *const *names;	/* n = 0: every guest */
	uint32_t n;
	const char *reason;
	uint64_t window_ns;
	uint64_t post_ns;
	void *token;
};

struct vmt_fleet_ops {
	/* 0: the answer will come through fleet_answer(token); <0: refused */
	int (*dump)(void *owner, const struct vmt_fleet_dump *d);
};

struct vmt_fleet_status {
	bool enabled;
	bool connected;
	/* connecting, connected, refused (authentication), insecure (TLS wanted,
	 * the server does not require it), tls-failed, bad-server, bad-config,
	 * no-library (libnats could not be loaded: error says why; no thread) */
	char state[16];
	char server[256];	/* connected to, or "" */
	char error[200];	/* the last connection error, "" if none */
	uint64_t queue;		/* files waiting for upload */
	uint64_t uploaded;
	uint64_t uploaded_bytes;
	uint64_t upload_failures;
	uint64_t triggers;	/* fleet dumps taken */
	uint64_t refused;	/* fleet dump requests refused (budget, bad) */
	uint64_t replies_refused;	/* dropped for their reply subject */
	uint64_t auth_failures;
	uint32_t subjects;	/* subscribed now */
};

/* *out = NULL when c has no fleet: (0 returned, nothing started). */
int fleet_new(struct vmt_fleet **out, sd_event *e, const struct vmt_config *c,
	      const char *hostname, const struct vmt_fleet_ops *ops, void *owner);
void fleet_free(struct vmt_fleet *f);
/* A file was written: look for uploads now rather than at the next scan. */
void fleet_kick(struct vmt_fleet *f);
/* Whether token is a fleet request's; if so, answers it and forgets it. */
bool fleet_answer(struct vmt_fleet *f, const void *token, char *const *files, uint32_t nfiles,
		  int error);
void fleet_status(struct vmt_fleet *f, struct vmt_fleet_status *st);
/* guest's labels from libvirt ("k=v,..."; NULL or "": none), on the loop;
 * a guest of the configuration keeps the configuration's. */
void fleet_set_labels(struct vmt_fleet *f, const char *guest, const char *labels);
/* The labels requests match guest by (the configuration's or libvirt's),
 * NULL for none or without a fleet. */
const char *fleet_labels(struct vmt_fleet *f, const char *guest);

/* fleet-json.c, pure: a dump request {"reason": S, "window": N, "post": N},
 * every key optional, nothing else; numbers whole seconds. */
struct vmt_fleet_req {
	char reason[160];
	uint64_t window_s;
	uint64_t post_s;
};
/* 0; -E2BIG past 1 KiB, -ERANGE for a number past 3600, -EINVAL */
int fleet_req_parse(const char *s, size_t len, struct vmt_fleet_req *out);
/* fleet-reply.c, pure: whether an answer may go to reply (a subject
 * without wildcards, at most VMT_FLEET_REPLY_MAX bytes, under
 * "<inbox_prefix>.", not under '$' nor "<subject_prefix>."): 0, -EINVAL
 * (not a subject), -EPERM (not where answers go). */
int fleet_reply_check(const char *reply, const char *inbox_prefix, const char *subject_prefix);
/* s as a JSON string's body (no quotes) into out; -ENOSPC if it does not fit */
int fleet_json_escape(char *out, size_t n, const char *s);

#endif
