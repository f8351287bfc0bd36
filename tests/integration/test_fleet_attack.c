/* SPDX-License-Identifier: MIT */
/*
 * Integration: a requester against the fleet, over a real nats-server
 * with the permission block of docs/FLEET.md. The host hostA may publish
 * the object store's subjects and answer what it receives
 * (allow_responses); the tenant may publish only
 * vmtrace.dump.label.tenant.acme and its inbox. The tenant names reply
 * subjects the host would publish to with its own permissions: the
 * JetStream API (purge, delete the bucket's stream), an object's meta,
 * the fleet's own subjects; it floods malformed and oversized requests
 * and asks for extreme windows and posts. After each case every object
 * the host uploaded is still in the bucket, read back (digest checked by
 * `vmtracectl fleet fetch`, listed by the npm client) byte for byte like
 * the host's file, and an honest dump from the tenant still happens.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

#include <nats/nats.h>

#include "b64url.h"
#include "fleettest.h"
#include "itest.h"
#include "testd.h"
#include "testutil.h"
#include "util.h"

static struct itest_input in;

/* docs/FLEET.md's block, for a host hostA, a tenant and an operator */
#define AUTH                                                                                   \
	"authorization {\n  users: [\n"                                                         \
	"    { user: hostA, password: pa, permissions: {\n"                                     \
	"        publish: { allow: [\"$O.vmtrace.C.>\", \"$O.vmtrace.M.*\",\n"                   \
	"                           \"$JS.API.STREAM.INFO.OBJ_vmtrace\",\n"                       \
	"                           \"$JS.API.STREAM.CREATE.OBJ_vmtrace\",\n"                     \
	"                           \"vmtrace.sample.hostA.>\", \"_INBOX.>\"] }\n"                 \
	"        subscribe: { allow: [\"vmtrace.dump.hostA.*\", \"vmtrace.dump.label.>\",\n"       \
	"                             \"_INBOX.>\"] }\n"                                          \
	"        allow_responses: true } }\n"                                                     \
	"    { user: tenant, password: pt, permissions: {\n"                                    \
	"        publish: { allow: [\"vmtrace.dump.label.tenant.acme\", \"_INBOX.>\"] }\n"         \
	"        subscribe: { allow: [\"_INBOX.>\"] } } }\n"                                      \
	"    { user: oncall, password: po, permissions: {\n"                                    \
	"        publish: [\"vmtrace.dump.>\", \"$JS.API.>\", \"$JS.FC.>\", \"_INBOX.>\"]\n"                     \
	"        subscribe: [\"_INBOX.>\", \"vmtrace.sample.>\", \"$O.vmtrace.>\"] } }\n"           \
	"  ]\n}\n"

#define LABEL_SUBJ "vmtrace.dump.label.tenant.acme"
/* over the 1 KiB a request may have; 16 of them stay under the 64 KiB
 * the host's subscription holds pending, so none is lost uncounted */
#define REQ_BIG 1100

struct attack {
	struct ftest_cluster c;
	struct itest_run r;
	natsConnection *tenant;
	char reader_conf[600];	/* vmtracectl's fleet: as oncall */
	uint64_t uploaded;	/* files the host uploaded so far */
	int round;
};

/* The host's counter, 0 where its daemon has none (an older one). */
static uint64_t num0(struct attack *a, const char *key)
{
	uint64_t v = itest_num(&a->r.d, NULL, key);

	return v == UINT64_MAX ? 0 : v;
}

/* Requests the host has taken off the wire, whatever it made of them. */
static uint64_t handled(struct attack *a)
{
	return num0(a, "fleet_refused") + num0(a, "fleet_replies_refused") +
	       num0(a, "fleet_triggers");
}

static void wait_handled(struct attack *a, uint64_t want)
{
	ck_assert_msg(ITEST_WAIT(handled(a) >= want, 30000),
		      "the host took %llu request(s), not %llu (log %s)",
		      (unsigned long long)handled(a), (unsigned long long)want, a->r.d.log);
}

static void attack_start(struct attack *a, const char *tag, const char *extra)
{
	char fl[1024], servers[200], url[128];

	memset(a, 0, sizeof(*a));
	ftest_need_tools();
	ftest_cluster_start_auth(&a->c, tag, 1, AUTH, "oncall", "po");
	ftest_servers_yaml(servers, sizeof(servers), &a->c);
	snprintf(fl, sizeof(fl), "fleet:\n  servers: %s\n  user: hostA\n  password: pa\n"
		 "  host_id: hostA\n%s", servers, extra ? extra : "  max_per_minute: 0\n");
	ftest_host_start(&a->r, &in, tag, fl, "{tenant: acme}");
	ftest_wait_fleet_state(&a->r.d, "connected");
	snprintf(a->reader_conf, sizeof(a->reader_conf), "%s/reader.yaml", a->c.dir);
	snprintf(fl, sizeof(fl), "state_dir: %s/reader-state\nfleet:\n  servers: %s\n"
		 "  user: oncall\n  password: po\n", a->c.dir, servers);
	ck_assert_int_eq(itest_write_file(a->reader_conf, fl), 0);
	snprintf(url, sizeof(url), "nats://tenant:pt@127.0.0.1:%d", a->c.n[0].port);
	ck_assert_int_eq(natsConnection_ConnectTo(&a->tenant, url), NATS_OK);
}

static void attack_end(struct attack *a)
{
	natsConnection_Destroy(a->tenant);
	itest_run_end(&a->r);
	ftest_cluster_stop(&a->c);
}

/* The tenant asks with its own inbox; the answer's text into out. */
static natsStatus ask(struct attack *a, const char *body, char *out, size_t n)
{
	natsMsg *m = NULL;
	natsStatus s = natsConnection_RequestString(&m, a->tenant, LABEL_SUBJ, body,
						    test_deadline_ms(30000));

	out[0] = 0;
	if (s == NATS_OK) {
		snprintf(out, n, "%.*s", natsMsg_GetDataLength(m), natsMsg_GetData(m));
		natsMsg_Destroy(m);
	}
	return s;
}

/* The tenant publishes n requests naming reply; none waits for an answer. */
static void send_with_reply(struct attack *a, const char *reply, const char *body, size_t len,
			    int n)
{
	for (int i = 0; i < n; i++)
		ck_assert_int_eq(natsConnection_PublishRequest(a->tenant, LABEL_SUBJ, reply, body,
							       (int)len), NATS_OK);
	ck_assert_int_eq(natsConnection_FlushTimeout(a->tenant, test_deadline_ms(30000)), NATS_OK);
}

/* An honest request from the tenant: answered with a sample, uploaded. */
static void honest_dump(struct attack *a)
{
	char out[2048], obj[400];

	ck_assert_int_eq(ask(a, "{\"reason\":\"honest\"}", out, sizeof(out)), NATS_OK);
	ck_assert_msg(ftest_answer_object(out, "hostA", obj, sizeof(obj)),
		      "no sample in the answer: %s (log %s)", out, a->r.d.log);
	a->uploaded += 1 + (a->uploaded == 0);	/* the first brings its aux file */
	ftest_wait_fleet_drained(&a->r.d, a->uploaded);
}

/*
 * Every file the host marked uploaded is in the bucket as it is on disk:
 * fetched (size and digest checked) by vmtracectl as the operator,
 * compared byte for byte, and listed by the npm client.
 */
static void bucket_intact(struct attack *a, const char *after)
{
	char gdir[400], names[8192] = "", got[600], list[620], *p;
	size_t o = 0;
	int nfiles = 0;
	struct dirent *de;
	DIR *d;

	snprintf(gdir, sizeof(gdir), "%s/g1", a->r.d.state);
	snprintf(got, sizeof(got), "%s/fetch%d", a->c.dir, ++a->round);
	d = opendir(gdir);
	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);

		if (l < 10 || strcmp(de->d_name + l - 9, ".uploaded"))
			continue;
		o += (size_t)snprintf(names + o, sizeof(names) - o, " 'hostA/g1/%.*s'", (int)(l - 9),
				      de->d_name);
		ck_assert_uint_lt(o, sizeof(names));
		nfiles++;
	}
	closedir(d);
	ck_assert_int_eq((uint64_t)nfiles, a->uploaded);
	ck_assert_msg(itest_sh("%s fleet fetch -c %s -o %s%s >%s.out 2>&1", ftest_ctl(),
			       a->reader_conf, got, names, got) == 0,
		      "after %s: the bucket lost or spoiled an object (see %s.out)", after, got);
	snprintf(list, sizeof(list), "%s.list", got);
	ck_assert_msg(ftest_npm_list(&a->c, 0, list) == 0, "after %s: npm list failed (%s)", after,
		      list);
	for (p = names; (p = strstr(p, "'hostA/")); p++) {
		char name[300], *q;

		snprintf(name, sizeof(name), "%s", p + 1);
		q = strchr(name, '\'');
		ck_assert_ptr_nonnull(q);
		*q = 0;
		ck_assert_msg(itest_sh("cmp -s '%s/%s' '%s/g1/%s'", a->r.d.state, name + 6, got,
				       strrchr(name, '/') + 1) == 0,
			      "after %s: %s differs from the host's file", after, name);
		ck_assert_msg(itest_sh("grep -q '^%s ' %s", name, list) == 0,
			      "after %s: the npm client does not list %s (%s)", after, name, list);
	}
}

/* After a case: the bucket as it was, and a dump still taken. */
static void after_case(struct attack *a, const char *what)
{
	honest_dump(a);
	bucket_intact(a, what);
}

/*
 * The confused deputy: reply subjects the host must never publish to,
 * with malformed and valid bodies. Before the fix the first case purged
 * the bucket's stream (the refusal published to $JS.API.STREAM.PURGE).
 */
START_TEST(reply_subjects_the_host_must_not_answer)
{
	struct attack a;
	char meta[400], b64[300], name[300], gdir[400];
	const char *obj = NULL;
	struct dirent *de;
	DIR *d;
	struct {
		const char *reply, *body;
	} cases[] = {
		{ "$JS.API.STREAM.PURGE.OBJ_vmtrace", "not json" },
		{ "$JS.API.STREAM.DELETE.OBJ_vmtrace", "{\"window\":-1}" },
		{ "$JS.API.STREAM.PURGE.OBJ_vmtrace", "{\"reason\":\"valid\"}" },
		{ meta, "{" },
		{ meta, "{}" },
		{ "vmtrace.dump.hostA._all", "[]" },
		{ "vmtrace.sample.hostA.g1", "{}" },
		{ "_INBOX", "{}" },
		{ "_INBOX.*", "{}" },
		{ "_INBOX.>", "x" },
	};
	uint64_t base, rr;

	ITEST_NEED_INPUT(in);
	attack_start(&a, "fleetattack", NULL);
	/* something in the bucket to lose: a sample and its aux file */
	honest_dump(&a);
	bucket_intact(&a, "the first dump");
	/* an existing object's meta subject: the sample's */
	snprintf(gdir, sizeof(gdir), "%s/g1", a.r.d.state);
	d = opendir(gdir);
	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)))
		if (strstr(de->d_name, ".vmts") && !strstr(de->d_name, ".uploaded"))
			obj = de->d_name;
	ck_assert_ptr_nonnull(obj);
	snprintf(name, sizeof(name), "hostA/g1/%s", obj);
	closedir(d);
	b64url(b64, sizeof(b64), (const uint8_t *)name, strlen(name));
	snprintf(meta, sizeof(meta), "$O.vmtrace.M.%s", b64);

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		char what[600];

		snprintf(what, sizeof(what), "a request %s with reply %s", cases[i].body,
			 cases[i].reply);
		base = handled(&a);
		rr = num0(&a, "fleet_replies_refused");
		send_with_reply(&a, cases[i].reply, cases[i].body, strlen(cases[i].body), 1);
		wait_handled(&a, base + 1);
		/* the bucket first: what a host that answered did to it */
		after_case(&a, what);
		ck_assert_msg(num0(&a, "fleet_replies_refused") == rr + 1,
			      "%s: not dropped for its reply (log %s)", what, a.r.d.log);
	}
	ck_assert_uint_eq(num0(&a, "fleet_replies_refused"), ARRAY_SIZE(cases));
	/* said, once a minute: one line for them all */
	ck_assert_int_eq(testd_log_count(&a.r.d, "its reply subject"), 1);
	ck_assert_int_ge(testd_log_count(&a.r.d, "$JS.API.STREAM.PURGE.OBJ_vmtrace"), 1);
	/* an inbox is answered, a malformed body with its reason */
	{
		char out[8192];

		ck_assert_int_eq(itest_ctl(&a.r.d, out, sizeof(out), "status"), 0);
		ck_assert_msg(strstr(out, "! fleet: 10 request(s) dropped for a reply subject not "
				     "under the inbox prefix"), "status: %s", out);
		ck_assert_msg(itest_sh("%s -s %s metrics | grep -x 'vmtraced_fleet_replies_refused_total 10' >/dev/null",
				       ftest_ctl(), a.r.d.sock) == 0, "metrics: no replies refused");

		ck_assert_int_eq(ask(&a, "{\"reason\":1}", out, sizeof(out)), NATS_OK);
		ck_assert_msg(strstr(out, "\"refused\":\"not a dump request"), "%s", out);
	}
	attack_end(&a);
}
END_TEST

/*
 * Floods: malformed requests to an inbox and to the JetStream API,
 * oversized ones, each batch under the host's queue so every one is
 * accounted for; the host stays up, the bucket whole.
 */
START_TEST(floods_of_malformed_and_oversized)
{
	struct attack a;
	char big[REQ_BIG], inbox[64];
	uint64_t base, refused, rr;

	ITEST_NEED_INPUT(in);
	attack_start(&a, "fleetflood", NULL);
	honest_dump(&a);
	memset(big, '{', sizeof(big));
	for (int batch = 0; batch < 6; batch++) {
		base = handled(&a);
		refused = num0(&a, "fleet_refused");
		rr = num0(&a, "fleet_replies_refused");
		snprintf(inbox, sizeof(inbox), "_INBOX.flood%d", batch);
		send_with_reply(&a, inbox, "{\"x\":1}", 7, 16);
		send_with_reply(&a, "$JS.API.STREAM.PURGE.OBJ_vmtrace", "{\"x\":1}", 7, 16);
		send_with_reply(&a, inbox, big, sizeof(big), 8);	/* over 1 KiB */
		send_with_reply(&a, "$JS.API.STREAM.DELETE.OBJ_vmtrace", big, sizeof(big), 8);
		wait_handled(&a, base + 48);
		ck_assert_uint_eq(num0(&a, "fleet_refused"), refused + 24);
		ck_assert_uint_eq(num0(&a, "fleet_replies_refused"), rr + 24);
	}
	ck_assert_uint_eq(num0(&a, "fleet_triggers"), 1);
	after_case(&a, "the floods");
	attack_end(&a);
}
END_TEST

/*
 * window and post at their extremes: past 3600 s or past max_post
 * refused with the reason in the answer; 0 and 3600 s of window taken.
 */
START_TEST(window_and_post_extremes)
{
	struct attack a;
	char out[2048];
	static const struct {
		const char *body, *says;
	} refused[] = {
		{ "{\"post\":61}", "post 61 s is over fleet.max_post (60 s)" },
		{ "{\"post\":3600}", "post 3600 s is over fleet.max_post (60 s)" },
		{ "{\"post\":3601}", "at most 3600 s" },
		{ "{\"window\":3601}", "at most 3600 s" },
		{ "{\"window\":18446744073709551616}", "at most 3600 s" },
		{ "{\"window\":-1}", "not a dump request" },
		{ "{\"post\":1.5}", "not a dump request" },
	};

	ITEST_NEED_INPUT(in);
	attack_start(&a, "fleetextremes", NULL);
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++) {
		ck_assert_int_eq(ask(&a, refused[i].body, out, sizeof(out)), NATS_OK);
		ck_assert_msg(strstr(out, "\"refused\"") && strstr(out, refused[i].says),
			      "%s: %s", refused[i].body, out);
	}
	ck_assert_uint_eq(num0(&a, "fleet_triggers"), 0);
	ck_assert_int_eq(ask(&a, "{\"window\":0,\"post\":0}", out, sizeof(out)), NATS_OK);
	ck_assert_msg(strstr(out, "\"samples\":[{"), "%s", out);
	ck_assert_int_eq(ask(&a, "{\"window\":3600}", out, sizeof(out)), NATS_OK);
	ck_assert_msg(strstr(out, "\"samples\":[{"), "%s", out);
	a.uploaded = 3;	/* two samples and their aux file */
	ftest_wait_fleet_drained(&a.r.d, a.uploaded);
	after_case(&a, "the extremes");
	attack_end(&a);
}
END_TEST

/*
 * Malformed requests take their turn of max_per_minute like good ones;
 * those dropped for their reply subject cause nothing, so take none.
 */
START_TEST(malformed_requests_count_against_the_budget)
{
	struct attack a;
	char out[2048];

	ITEST_NEED_INPUT(in);
	attack_start(&a, "fleetbudget", "  max_per_minute: 3\n");
	send_with_reply(&a, "$JS.API.STREAM.PURGE.OBJ_vmtrace", "{}", 2, 10);
	ck_assert(itest_wait_num_ge(&a.r.d, NULL, "fleet_replies_refused", 10,
				    test_deadline_ms(30000)));
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(ask(&a, "nonsense", out, sizeof(out)), NATS_OK);
		ck_assert_msg(strstr(out, "not a dump request"), "%s", out);
	}
	honest_dump(&a);	/* the third of three */
	ck_assert_int_eq(ask(&a, "{}", out, sizeof(out)), NATS_OK);
	ck_assert_msg(strstr(out, "fleet.max_per_minute reached"), "%s", out);
	ck_assert_int_eq(ask(&a, "nonsense", out, sizeof(out)), NATS_OK);
	ck_assert_msg(strstr(out, "fleet.max_per_minute reached"), "%s", out);
	ck_assert_uint_eq(num0(&a, "fleet_triggers"), 1);
	bucket_intact(&a, "the budget");
	attack_end(&a);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("fleet_attack");
	TCase *t = tcase_create("fleet_attack");
	int rc;

	itest_input_prepare(&in);
	TEST_ADD(t, reply_subjects_the_host_must_not_answer);
	TEST_ADD(t, floods_of_malformed_and_oversized);
	TEST_ADD(t, window_and_post_extremes);
	TEST_ADD(t, malformed_requests_count_against_the_budget);
	tcase_set_timeout(t, 600);
	suite_add_tcase(s, t);
	rc = test_run_suite(s);
	itest_input_free(&in);
	nats_Close();
	return rc;
}
