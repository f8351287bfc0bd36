/* SPDX-License-Identifier: MIT */
/*
 * fleet-reply: where a fleet answer may go. A request's reply subject is
 * the requester's word, and the host publishes its answer there with its
 * own permissions (allow_responses, and an allow-list that holds the
 * object store's $O.<bucket>.* and $JS.API subjects): a reply of
 * $JS.API.STREAM.PURGE.OBJ_<bucket> would have the host purge the bucket,
 * one of $O.<bucket>.M.<name> overwrite an object's meta, one under the
 * fleet's prefix forge a request or an announcement. So an answer goes
 * only under the requesters' inbox prefix, never under '$' or the
 * fleet's own subjects, and only to a well-formed subject. Pure: the
 * fuzz target and the unit test call it as the daemon does.
 */
#include <errno.h>
#include <string.h>

#include "fleet.h"

static bool under(const char *s, const char *prefix)
{
	size_t l = strlen(prefix);

	return !strncmp(s, prefix, l) && (s[l] == '.' || !s[l]);
}

int fleet_reply_check(const char *reply, const char *inbox_prefix, const char *subject_prefix)
{
	size_t il = strlen(inbox_prefix);

	if (!config_subject_valid(reply, VMT_FLEET_REPLY_MAX))
		return -EINVAL;
	/* the server's own ($JS.API, $O, $SYS...) and the fleet's */
	if (reply[0] == '$' || under(reply, subject_prefix))
		return -EPERM;
	/* "<inbox_prefix>." and at least one token of the requester's */
	if (strncmp(reply, inbox_prefix, il) || reply[il] != '.' || !reply[il + 1])
		return -EPERM;
	return 0;
}
