/* SPDX-License-Identifier: MIT */
/*
 * fleet-json: the strict parser of a fleet dump request. What NATS
 * delivers is untrusted: every shape but {"reason": S, "window": N,
 * "post": N} (keys optional, once each) is refused, and nothing it holds
 * goes past its bounds.
 */
#include <errno.h>
#include <string.h>

#include "b64url.h"
#include "fleet.h"
#include "testutil.h"
#include "util.h"

static int parse(const char *s, struct vmt_fleet_req *r)
{
	return fleet_req_parse(s, strlen(s), r);
}

START_TEST(accepts_the_shape)
{
	struct vmt_fleet_req r;

	ck_assert_int_eq(parse("{}", &r), 0);
	ck_assert_str_eq(r.reason, "");
	ck_assert_int_eq(parse(" { \"reason\" : \"disk \\\"stall\\\" \\\\ a/b\", \"window\": 30,"
			       "\"post\":5 } \n", &r), 0);
	ck_assert_str_eq(r.reason, "disk \"stall\" \\ a/b");
	ck_assert_uint_eq(r.window_s, 30);
	ck_assert_uint_eq(r.post_s, 5);
	ck_assert_int_eq(parse("{\"window\":0,\"post\":3600}", &r), 0);
	ck_assert_uint_eq(r.post_s, 3600);
}
END_TEST

START_TEST(refuses_the_rest)
{
	static const char *bad[] = {
		"", " ", "{", "}", "[]", "null", "\"x\"", "{}{}", "{},", "{\"reason\"}",
		"{\"reason\":}", "{\"reason\":1}", "{\"reason\":\"a\",}", "{,}",
		"{\"reason\":\"a\"\"window\":1}", "{\"window\":-1}", "{\"window\":1.5}",
		"{\"window\":1e3}", "{\"window\":3601}", "{\"window\":01}",
		"{\"window\":99999999999999999999999}", "{\"window\":\"1\"}",
		"{\"reason\":\"a\",\"reason\":\"b\"}", "{\"Reason\":\"a\"}", "{\"x\":1}",
		"{\"reason\":\"\\u0041\"}", "{\"reason\":\"\\n\"}", "{\"reason\":\"tab\there\"}",
		"{\"reason\":\"\xc3\xa9\"}", "{\"reason\":\"unterminated}",
		"{\"post\":1} x", "{\"post\":true}", "{\"reason\":null}",
	};
	struct vmt_fleet_req r;
	char big[2000], longr[400];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(parse(bad[i], &r) < 0, "accepted: %s", bad[i]);
	/* a NUL inside */
	ck_assert_int_lt(fleet_req_parse("{}\0", 3, &r), 0);
	/* too long as a whole, and a reason past its bound */
	memset(big, ' ', sizeof(big));
	big[0] = '{';
	big[sizeof(big) - 1] = '}';
	ck_assert_int_eq(fleet_req_parse(big, sizeof(big), &r), -E2BIG);
	memset(longr, 'a', sizeof(longr));
	memcpy(longr, "{\"reason\":\"", 11);
	memcpy(longr + sizeof(longr) - 3, "\"}", 3);
	ck_assert_int_lt(parse(longr, &r), 0);
}
END_TEST

START_TEST(escape_for_answers)
{
	char out[64];

	ck_assert_int_eq(fleet_json_escape(out, sizeof(out), "a\"b\\c\n\x01"), 0);
	ck_assert_str_eq(out, "a\\\"b\\\\c\\u000a\\u0001");
	ck_assert_int_eq(fleet_json_escape(out, 4, "abcdef"), -ENOSPC);
}
END_TEST

/* window and post past 3600 s are told apart from a malformed body */
START_TEST(extremes_out_of_range)
{
	struct vmt_fleet_req r;

	ck_assert_int_eq(parse("{\"window\":3600,\"post\":0}", &r), 0);
	ck_assert_uint_eq(r.window_s, 3600);
	ck_assert_int_eq(parse("{\"window\":3601}", &r), -ERANGE);
	ck_assert_int_eq(parse("{\"post\":3601}", &r), -ERANGE);
	ck_assert_int_eq(parse("{\"post\":18446744073709551616}", &r), -ERANGE);
	ck_assert_int_eq(parse("{\"post\":-0}", &r), -EINVAL);
}
END_TEST

/*
 * Where answers may go: under the inbox prefix only. The subjects of
 * the confused-deputy findings ($JS.API purge, an object's meta, the
 * fleet's own subjects) are refused whatever the inbox prefix says.
 */
/* The object store's names and digests: RFC 4648's vectors, its URL
 * alphabet, the padding kept, "" when out is too small. */
START_TEST(b64url_names)
{
	static const char *const v[][2] = { { "", "" }, { "f", "Zg==" }, { "fo", "Zm8=" },
		{ "foo", "Zm9v" }, { "foob", "Zm9vYg==" }, { "fooba", "Zm9vYmE=" },
		{ "foobar", "Zm9vYmFy" }, { "\xfb\xff\xbf", "-_-_" } };
	char out[16];

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		b64url(out, sizeof(out), (const uint8_t *)v[i][0], strlen(v[i][0]));
		ck_assert_str_eq(out, v[i][1]);
	}
	b64url(out, 8, (const uint8_t *)"foobar", 6);	/* needs 9 */
	ck_assert_str_eq(out, "");
	b64url(out, 9, (const uint8_t *)"foobar", 6);
	ck_assert_str_eq(out, "Zm9vYmFy");
}
END_TEST

START_TEST(reply_subjects)
{
	static const char *ok[] = {
		"_INBOX.abc", "_INBOX.Xy7AbCdEfGhIjKlMnOpQrS.12", "_INBOX.a.b.c", "_INBOX.$x",
	};
	static const char *denied[] = {
		"$JS.API.STREAM.PURGE.OBJ_vmtrace", "$JS.API.STREAM.DELETE.OBJ_vmtrace",
		"$O.vmtrace.M.aG9zdEEvZzEvYXV4LTAwMDAwMS52bXRhdXg=", "$O.vmtrace.C.abc",
		"$SYS.REQ.SERVER.PING", "vmtrace.dump.hostA._all", "vmtrace.sample.hostB.g1",
		"vmtrace", "_INBOX", "_INBOXX.a", "_inbox.a", "x._INBOX.a", "INBOX.a",
	};
	static const char *malformed[] = {
		"", ".", "_INBOX.", "_INBOX..a", "._INBOX.a", "_INBOX.a.", "_INBOX.*", "_INBOX.>",
		"_INBOX.a*", "_INBOX.a>b", "_INBOX.a b", "_INBOX.a\tb", "_INBOX.\x7f", "_INBOX.\xc3\xa9",
		"_INBOX.a\r\nPUB $JS.API.STREAM.PURGE.OBJ_vmtrace 0",
	};
	char big[VMT_FLEET_REPLY_MAX + 2];

	for (size_t i = 0; i < ARRAY_SIZE(ok); i++)
		ck_assert_msg(fleet_reply_check(ok[i], "_INBOX", "vmtrace") == 0, "refused %s", ok[i]);
	for (size_t i = 0; i < ARRAY_SIZE(denied); i++)
		ck_assert_msg(fleet_reply_check(denied[i], "_INBOX", "vmtrace") == -EPERM,
			      "not denied: %s", denied[i]);
	for (size_t i = 0; i < ARRAY_SIZE(malformed); i++)
		ck_assert_msg(fleet_reply_check(malformed[i], "_INBOX", "vmtrace") == -EINVAL,
			      "not malformed: %s", malformed[i]);
	/* bounded length: the longest fits, one more does not */
	memset(big, 'a', sizeof(big));
	memcpy(big, "_INBOX.", 7);
	big[VMT_FLEET_REPLY_MAX] = 0;
	ck_assert_int_eq(fleet_reply_check(big, "_INBOX", "vmtrace"), 0);
	big[VMT_FLEET_REPLY_MAX] = 'a';
	big[VMT_FLEET_REPLY_MAX + 1] = 0;
	ck_assert_int_eq(fleet_reply_check(big, "_INBOX", "vmtrace"), -EINVAL);
	/* a custom inbox prefix of several tokens; the default no longer goes */
	ck_assert_int_eq(fleet_reply_check("_VMT.ops.abc", "_VMT.ops", "vmtrace"), 0);
	ck_assert_int_eq(fleet_reply_check("_VMT.opsX.abc", "_VMT.ops", "vmtrace"), -EPERM);
	ck_assert_int_eq(fleet_reply_check("_INBOX.abc", "_VMT.ops", "vmtrace"), -EPERM);
	/* the fleet's prefix wins over an inbox prefix that would hold it */
	ck_assert_int_eq(fleet_reply_check("vt.dump.h.g", "vt", "vt"), -EPERM);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("fleetjson");
	TCase *t = tcase_create("fleetjson");

	TEST_ADD(t, accepts_the_shape);
	TEST_ADD(t, refuses_the_rest);
	TEST_ADD(t, escape_for_answers);
	TEST_ADD(t, extremes_out_of_range);
	TEST_ADD(t, reply_subjects);
	TEST_ADD(t, b64url_names);
	suite_add_tcase(s, t);
	return test_run_suite(s);
}
