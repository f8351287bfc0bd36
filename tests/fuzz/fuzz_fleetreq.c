/* SPDX-License-Identifier: MIT */
/*
 * A fleet dump request as NATS hands it to the daemon (daemon/fleet.h):
 * its reply subject through fleet_reply_check(), its body through
 * fleet_req_parse(). Input: u8 n, n bytes of reply subject (cut at a NUL,
 * as libnats gives a C string), the body. A reply the check lets through
 * must be where answers may go, checked here the long way: under
 * "<inbox>.", not under '$' nor the fleet's prefix, tokens of printable
 * ASCII without wildcards, at most VMT_FLEET_REPLY_MAX bytes. A body that
 * parses must hold what the shape allows and parse the same once written
 * back with fleet_json_escape(), as the daemon writes reasons.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "fleet.h"
#include "fuzz.h"

static bool long_way(const char *r, const char *inbox, const char *prefix)
{
	size_t len = strlen(r), il = strlen(inbox), pl = strlen(prefix);

	if (!len || len > VMT_FLEET_REPLY_MAX || r[0] == '$' || r[0] == '.' || r[len - 1] == '.' ||
	    strstr(r, ".."))
		return false;
	for (const char *q = r; *q; q++)
		if ((unsigned char)*q <= ' ' || (unsigned char)*q >= 0x7f || *q == '*' || *q == '>')
			return false;
	if (!strncmp(r, prefix, pl) && (r[pl] == '.' || !r[pl]))
		return false;
	return !strncmp(r, inbox, il) && r[il] == '.' && r[il + 1];
}

static void reply(const char *r, const char *inbox, const char *prefix)
{
	int rc = fleet_reply_check(r, inbox, prefix);

	FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -EPERM);
	FUZZ_CHECK((rc == 0) == long_way(r, inbox, prefix));
}

static void body(const uint8_t *data, size_t size)
{
	struct vmt_fleet_req q, q2;
	char esc[sizeof(q.reason) * 2], again[512];
	int rc = fleet_req_parse((const char *)data, size, &q), n;

	FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -E2BIG || rc == -ERANGE);
	if (rc < 0)
		return;
	FUZZ_CHECK(size <= 1024);
	FUZZ_CHECK(q.window_s <= VMT_FLEET_POST_MAX_S && q.post_s <= VMT_FLEET_POST_MAX_S);
	FUZZ_CHECK(strlen(q.reason) < sizeof(q.reason));
	for (const char *c = q.reason; *c; c++)
		FUZZ_CHECK((unsigned char)*c >= 0x20 && (unsigned char)*c < 0x7f);
	FUZZ_CHECK(fleet_json_escape(esc, sizeof(esc), q.reason) == 0);
	n = snprintf(again, sizeof(again), "{\"reason\":\"%s\",\"window\":%" PRIu64 ",\"post\":%"
		     PRIu64 "}", esc, q.window_s, q.post_s);
	FUZZ_CHECK(n > 0 && (size_t)n < sizeof(again));
	FUZZ_CHECK(fleet_req_parse(again, (size_t)n, &q2) == 0);
	FUZZ_CHECK(!strcmp(q.reason, q2.reason) && q.window_s == q2.window_s &&
		   q.post_s == q2.post_s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char r[256];
	size_t n;

	if (!size)
		return 0;
	n = data[0];
	if (n > size - 1)
		n = size - 1;
	memcpy(r, data + 1, n);
	r[n] = 0;	/* a NUL inside cuts it, as a C string would */
	reply(r, "_INBOX", "vmtrace");
	reply(r, "_VMT.ops", "_VMT");	/* a prefix that is the inbox's first token */
	body(data + 1 + n, size - 1 - n);
	return 0;
}
