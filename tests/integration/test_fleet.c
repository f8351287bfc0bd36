/* SPDX-License-Identifier: MIT */
/*
 * Integration: the fleet over real NATS (servers and hosts: tests/lib/
 * fleettest.c). Three `nats-server -js` on
 * 127.0.0.1 clustered (free ports, store folders in the test's folder,
 * readiness from each server's /healthz), two vmtraced as two hosts with
 * stand-in guests: a label dump reaches both and both answer, their
 * samples land in the bucket (3 replicas), the npm `nats` package's object
 * store reads one back byte for byte, `vmtracectl fleet fetch` too (with
 * its aux); one node killed, uploads go on; every node down, dumps are
 * written and queued, then uploaded when the nodes return. A host without
 * fleet: opens no network socket and says "fleet: off"; wrong credentials
 * give one clear log line and a status line while recording goes on;
 * garbage requests are refused and counted.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nats/nats.h>

#include "fleettest.h"
#include "itest.h"
#include "testd.h"
#include "testutil.h"
#include "util.h"

static struct itest_input in;

/* VMT_FLEET_OUTAGE_KILL=1: the all-nodes-down case SIGKILLs (for
 * tests/tools/fleet-outage-loop.sh, outside make check) */
static bool outage_kill(void)
{
	const char *e = getenv("VMT_FLEET_OUTAGE_KILL");

	return e && !strcmp(e, "1");
}

static void local_path(const struct itest_run *r, const char *object, char *out, size_t n)
{
	const char *file = strrchr(object, '/');

	snprintf(out, n, "%s/g1/%s", r->d.state, file ? file + 1 : object);
}

START_TEST(label_dump_two_hosts_bucket_outages)
{
	struct ftest_cluster c;
	struct itest_run a, b;
	char servers[300], fa[1024], fb[1024], out[8192], obj[400], path[800], got[800];
	char sample[600], objc[400];
	uint64_t up;

	ITEST_NEED_INPUT(in);
	ftest_need_tools();
	ftest_cluster_start(&c, "fleet3", 3);
	ftest_servers_yaml(servers, sizeof(servers), &c);
	snprintf(fa, sizeof(fa), "fleet:\n  servers: %s\n  user: vmt\n  password: good\n"
		 "  host_id: hostA\n  replicas: 3\n  max_per_minute: 100\n", servers);
	snprintf(fb, sizeof(fb), "fleet:\n  servers: %s\n  user: vmt\n  password: good\n"
		 "  host_id: hostB\n  replicas: 3\n  max_per_minute: 100\n", servers);
	ftest_host_start(&a, &in, "hostA", fa, "{tenant: acme}");
	ftest_host_start(&b, &in, "hostB", fb, "{tenant: acme, rack: r2}");
	ftest_wait_fleet_state(&a.d, "connected");
	ftest_wait_fleet_state(&b.d, "connected");

	/* one label request, two answers with their samples */
	ck_assert_int_eq(ftest_run_out(out, sizeof(out), "%s fleet dump -c %s --label tenant=acme "
				 "--reason incident-42 --timeout %d --answers 2", ftest_ctl(), a.d.conf,
				 test_deadline_ms(60000) / 1000), 0);
	ck_assert_msg(ftest_answer_object(out, "hostA", obj, sizeof(obj)), "no answer of hostA: %s", out);
	ck_assert_msg(ftest_answer_object(out, "hostB", objc, sizeof(objc)), "no answer of hostB: %s", out);
	ck_assert_uint_eq(itest_num(&a.d, NULL, "fleet_triggers"), 1);
	ck_assert_uint_eq(itest_num(&b.d, NULL, "fleet_triggers"), 1);

	/* both uploaded (a sample and its aux each) */
	ftest_wait_fleet_drained(&a.d, 2);
	ftest_wait_fleet_drained(&b.d, 2);

	/* the npm client's object store reads hostB's sample byte for byte */
	local_path(&b, objc, path, sizeof(path));
	snprintf(got, sizeof(got), "%s/npm-got.vmts", c.dir);
	ck_assert_msg(ftest_npm_get(&c, 0, objc, got) == 0, "npm reader failed: see %s.node", got);
	ck_assert_msg(itest_sh("cmp -s '%s' '%s'", path, got) == 0, "%s differs from %s", got, path);
	ck_assert_msg(itest_sh("grep -qs 'guest=g1' %s.node", got) == 0, "headers: no Vmt-Guest");

	/* vmtracectl fleet fetch: the sample and its aux, merge-able */
	snprintf(got, sizeof(got), "%s/fetched", c.dir);
	ck_assert_int_eq(itest_sh("%s fleet fetch -c %s -o %s '%s' >/dev/null", ftest_ctl(), a.d.conf, got,
				  obj), 0);
	local_path(&a, obj, path, sizeof(path));
	ck_assert_int_eq(itest_sh("cmp -s '%s' '%s/g1/%s'", path, got, strrchr(obj, '/') + 1), 0);
	ck_assert_int_eq(itest_sh("ls %s/g1/aux-*.vmtaux >/dev/null", got), 0);
	ck_assert_int_eq(itest_sh("%s merge -o %s/m.dat %s/g1/*.vmts >/dev/null 2>&1", ftest_ctl(), got,
				  got), 0);

	/* one node down: uploads go on (replicas 3, quorum 2) */
	ftest_node_kill(&c, 0);
	up = itest_num(&a.d, NULL, "fleet_uploaded");
	itest_dump_one(&a.d, "g1", sample, sizeof(sample));
	ftest_wait_fleet_drained(&a.d, up + 1);

	/* every node down: the dump is written and waits. n2 and n3 are
	 * stopped (SIGTERM), not killed: after three SIGKILLs a 2.9 stream
	 * may stay without a leader ("has NO quorum, stalled") for a minute
	 * or more, past this test's deadlines on a loaded machine; and the
	 * npm reader may then find a wrong digest (issue 23: 1 run in 240 of
	 * tests/tools/fleet-outage-loop.sh, VMT_FLEET_OUTAGE_KILL=1): the
	 * stream's leader held the object whole, a second read was right, and
	 * the failed read's ordered consumer was on n1, the replica down
	 * longest, still catching up (2.9 puts an R1 consumer on any replica;
	 * nats.js stops at its pending 0). A node killed is the case above. */
	ftest_node_signal(&c, 1, outage_kill() ? SIGKILL : SIGTERM);
	ftest_node_signal(&c, 2, outage_kill() ? SIGKILL : SIGTERM);
	ftest_wait_fleet_state(&a.d, "connecting");
	up = itest_num(&a.d, NULL, "fleet_uploaded");
	itest_dump_one(&a.d, "g1", sample, sizeof(sample));
	ck_assert_msg(access(sample, F_OK) == 0, "%s not written", sample);
	{
		uint64_t end = test_now_ms() + (uint64_t)test_deadline_ms(30000);

		while (itest_num(&a.d, NULL, "fleet_queue") < 1) {
			ck_assert_msg(test_now_ms() < end, "the sample is not queued");
			usleep(20000);
		}
	}
	ck_assert_uint_eq(itest_num(&a.d, NULL, "fleet_uploaded"), up);
	/* vmtracectl samples: the older ones uploaded (as of the pass after
	 * this sample), this one not */
	{
		uint64_t end = test_now_ms() + (uint64_t)test_deadline_ms(30000);

		for (;;) {
			ck_assert_int_eq(itest_ctl(&a.d, out, sizeof(out), "samples g1"), 0);
			if (strstr(out, "uploaded to the fleet") && strstr(out, "not uploaded yet"))
				break;
			ck_assert_msg(test_now_ms() < end, "samples: %s", out);
			usleep(20000);
		}
	}
	/* back: uploaded, nothing lost */
	for (int i = 0; i < FTEST_NODES; i++)
		ftest_node_start(&c, i);
	for (int i = 0; i < FTEST_NODES; i++)
		ftest_node_wait(&c, i);
	ftest_wait_fleet_drained(&a.d, up + 1);
	snprintf(objc, sizeof(objc), "hostA/g1/%s", strrchr(sample, '/') + 1);
	/* our own client, which counts the chunks the meta names */
	ck_assert_int_eq(itest_sh("%s fleet fetch -c %s -o %s/ours '%s' >/dev/null && cmp '%s' "
				  "%s/ours/g1/%s", ftest_ctl(), a.d.conf, c.dir, objc, sample, c.dir,
				  strrchr(sample, '/') + 1), 0);
	snprintf(got, sizeof(got), "%s/npm-after.vmts", c.dir);
	if (ftest_npm_get(&c, 1, objc, got) != 0) {
		/* what the bucket holds, read by our own client (counts chunks) */
		char again[820];
		int ours = itest_sh("%s fleet fetch -c %s -o %s/ours '%s' >&2 && cmp '%s' %s/ours/g1/%s",
				    ftest_ctl(), a.d.conf, c.dir, objc, sample, c.dir,
				    strrchr(sample, '/') + 1);

		/* the meta against the chunks the stream holds (VMT_KEEP keeps it) */
		itest_sh("VMT_NPM=%s node %s/tests/tools/fleet-inspect.mjs nats://127.0.0.1:%d vmt good "
			 "vmtrace '%s' >%s.inspect 2>&1", ftest_npm_dir(), test_srcdir(), c.n[1].port, objc,
			 got);
		/* read again: a transient view of the server, or what it stores */
		snprintf(again, sizeof(again), "%s.again", got);
		ck_abort_msg("npm reader failed (see %s.node, .inspect); vmtracectl fleet fetch: %s; "
			     "the npm reader again: %s", got, ours == 0 ? "identical" : "failed too",
			     ftest_npm_get(&c, 1, objc, again) == 0 && itest_sh("cmp -s '%s' '%s'", sample,
										 again) == 0 ?
			     "identical" : "failed too");
	}
	ck_assert_int_eq(itest_sh("cmp -s '%s' '%s'", sample, got), 0);

	itest_run_end(&a);
	itest_run_end(&b);
	ftest_cluster_stop(&c);
}
END_TEST

/* No fleet: block: no network socket, "fleet: off", no fleet log line. */
START_TEST(no_fleet_no_connection)
{
	struct itest_run r;
	char out[8192], st[64];

	ITEST_NEED_INPUT(in);
	ftest_host_start(&r, &in, "nofleet", NULL, NULL);
	ftest_fleet_str(&r.d, "fleet_state", st, sizeof(st));
	ck_assert_str_eq(st, "off");
	ck_assert_int_eq(testd_log_count(&r.d, "fleet: "), 0);
	/* every socket of the daemon is a unix one */
	ck_assert_int_eq(itest_sh("for f in /proc/%d/fd/*; do l=$(readlink $f); case $l in "
				  "socket:*) i=${l#socket:[}; i=${i%%]}; grep -q \" $i \" "
				  "/proc/net/tcp /proc/net/tcp6 /proc/net/udp && exit 1;; esac; "
				  "done; exit 0", (int)r.d.pid), 0);
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "status"), 0);
	ck_assert_msg(strstr(out, "fleet: off"), "status: %s", out);
	itest_run_end(&r);
}
END_TEST

/* Wrong password: one clear line, a status line; dumps go on locally. */
START_TEST(wrong_credentials_local_goes_on)
{
	struct ftest_cluster c;
	struct itest_run r;
	char fl[600], out[8192], sample[600];

	ITEST_NEED_INPUT(in);
	ftest_need_tools();
	ftest_cluster_start(&c, "fleetauth", 1);
	snprintf(fl, sizeof(fl), "fleet:\n  servers: [nats://127.0.0.1:%d]\n  user: vmt\n"
		 "  password: wrong\n  host_id: hostC\n", c.n[0].port);
	ftest_host_start(&r, &in, "hostC", fl, NULL);
	ftest_wait_fleet_state(&r.d, "refused");
	ck_assert_int_ge(testd_log_count(&r.d, "fleet: authentication refused"), 1);
	ck_assert_int_eq(itest_ctl(&r.d, out, sizeof(out), "status"), 0);
	ck_assert_msg(strstr(out, "! fleet: authentication refused"), "status: %s", out);
	itest_dump_one(&r.d, "g1", sample, sizeof(sample));
	ck_assert_int_eq(access(sample, F_OK), 0);
	/* rate-limited: still one line after more attempts */
	ck_assert_int_eq(testd_log_count(&r.d, "fleet: authentication refused"), 1);
	itest_run_end(&r);
	ftest_cluster_stop(&c);
}
END_TEST

/* Garbage on the dump subjects: refused, counted, answered; no crash. */
/* One NATS server and one host on it (user vmt), connected; extra: more
 * fleet: lines. Returns the client connection when nc is given. */
static void one_node_host(struct ftest_cluster *c, struct itest_run *r, const char *tag,
			  const char *host, const char *extra, const char *labels, natsConnection **nc)
{
	char fl[600], url[64];

	ftest_need_tools();
	ftest_cluster_start(c, tag, 1);
	snprintf(fl, sizeof(fl), "fleet:\n  servers: [nats://127.0.0.1:%d]\n  user: vmt\n"
		 "  password: good\n  host_id: %s\n%s", c->n[0].port, host, extra);
	ftest_host_start(r, &in, host, fl, labels);
	ftest_wait_fleet_state(&r->d, "connected");
	if (nc) {
		snprintf(url, sizeof(url), "nats://vmt:good@127.0.0.1:%d", c->n[0].port);
		ck_assert_int_eq(natsConnection_ConnectTo(nc, url), NATS_OK);
	}
}

START_TEST(hostile_requests_refused)
{
	struct ftest_cluster c;
	struct itest_run r;
	char big[3000], obj[400], got[600];
	natsConnection *nc = NULL;
	natsMsg *m = NULL;
	static const char *bad[] = {
		"", "not json", "{", "{\"reason\":1}", "{\"window\":-1}", "{\"window\":99999999}",
		"{\"reason\":\"a\",\"reason\":\"b\"}", "{\"x\":1}", "{\"window\":1}garbage",
		"{\"reason\":\"\\u0000\"}", "[]", "{\"window\":01}",
	};

	ITEST_NEED_INPUT(in);
	/* 12 malformed, an unknown guest and a good one take the budget; the
	 * 15th request is over it: malformed requests count like good ones */
	one_node_host(&c, &r, "fleethostile", "hostD", "  max_per_minute: 14\n", "{tenant: t1}", &nc);
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		ck_assert_int_eq(natsConnection_Request(&m, nc, "vmtrace.dump.hostD._all", bad[i],
							(int)strlen(bad[i]), test_deadline_ms(10000)),
				 NATS_OK);
		ck_assert_msg(strstr(natsMsg_GetData(m), "\"refused\""), "%s: %s", bad[i],
			      natsMsg_GetData(m));
		natsMsg_Destroy(m);
	}
	memset(big, '{', sizeof(big));
	/* too big, and without a reply subject: dropped and counted */
	natsConnection_Publish(nc, "vmtrace.dump.hostD._all", big, sizeof(big));
	natsConnection_PublishString(nc, "vmtrace.dump.hostD._all", "{}");
	natsConnection_Flush(nc);
	/* an unknown guest, a label of nobody */
	ck_assert_int_eq(natsConnection_RequestString(&m, nc, "vmtrace.dump.hostD.nosuch", "{}",
						      test_deadline_ms(10000)), NATS_OK);
	ck_assert_ptr_nonnull(strstr(natsMsg_GetData(m), "no such guest"));
	natsMsg_Destroy(m);
	/* a reason with JSON's special characters: the object's meta stays
	 * readable by a stock client */
	ck_assert_int_eq(natsConnection_RequestString(&m, nc, "vmtrace.dump.hostD._all",
						      "{\"reason\":\"q\\\"uo\\\\te\"}",
						      test_deadline_ms(20000)), NATS_OK);
	ck_assert_msg(strstr(natsMsg_GetData(m), "\"samples\":[{"), "%s", natsMsg_GetData(m));
	ck_assert(ftest_answer_object(natsMsg_GetData(m), "hostD", obj, sizeof(obj)));
	natsMsg_Destroy(m);
	ftest_wait_fleet_drained(&r.d, 2);
	snprintf(got, sizeof(got), "%s/hostile.vmts", c.dir);
	ck_assert_msg(ftest_npm_get(&c, 0, obj, got) == 0, "npm reader failed: see %s.node", got);
	/* over the budget (max_per_minute: 14) */
	/* a label no guest of this host has: not subscribed, nobody answers */
	ck_assert_int_eq(natsConnection_RequestString(&m, nc, "vmtrace.dump.label.t1.t1", "{}",
						      test_deadline_ms(10000)), NATS_NO_RESPONDERS);
	ck_assert_int_eq(natsConnection_RequestString(&m, nc, "vmtrace.dump.label.tenant.t1", "{}",
						      test_deadline_ms(10000)), NATS_OK);
	ck_assert_msg(strstr(natsMsg_GetData(m), "max_per_minute"), "%s", natsMsg_GetData(m));
	natsMsg_Destroy(m);
	ck_assert(itest_wait_num_ge(&r.d, NULL, "fleet_refused", ARRAY_SIZE(bad) + 4,
				    test_deadline_ms(10000)));
	ck_assert_uint_eq(itest_num(&r.d, NULL, "fleet_triggers"), 1);
	ck_assert_int_eq(testd_log_count(&r.d, "fleet: no credentials"), 0);
	natsConnection_Destroy(nc);
	itest_run_end(&r);
	ftest_cluster_stop(&c);
}
END_TEST

/* NATS unreachable, max_samples: 1: retention keeps what is not uploaded. */
/*
 * A reload that gives the guest another label: the fleet takes it by
 * handing over to a new process (the sessions kept), which subscribes to
 * the new label's subject and to the old one no more.
 */
START_TEST(reload_new_labels_hand_over)
{
	struct ftest_cluster c;
	struct itest_run r;
	char body[sizeof(r.body)], out[512], *at;
	natsConnection *nc = NULL;
	natsMsg *m = NULL;
	natsStatus s;

	ITEST_NEED_INPUT(in);
	one_node_host(&c, &r, "fleetreload", "hostE", "", "{tenant: t1}", &nc);
	ck_assert_int_eq(natsConnection_RequestString(&m, nc, "vmtrace.dump.label.tenant.t1", "{}",
						      test_deadline_ms(20000)), NATS_OK);
	ck_assert_msg(strstr(natsMsg_GetData(m), "\"samples\":[{"), "%s", natsMsg_GetData(m));
	natsMsg_Destroy(m);

	snprintf(body, sizeof(body), "%s", r.body);
	at = strstr(body, "{tenant: t1}");
	ck_assert_ptr_nonnull(at);
	at[10] = '2';
	ck_assert_int_eq(itest_write_conf(&r.d, body), 0);
	ck_assert_msg(itest_ctl(&r.d, out, sizeof(out), "reload") == 0, "reload: %s", out);
	ck_assert_msg(ITEST_WAIT(itest_num(&r.d, NULL, "upgrades") == 1, 20000),
		      "no hand-over after the labels changed (log: %s)", r.d.log);
	ck_assert_int_eq(testd_log_count(&r.d, "fleet changed: handing over"), 1);
	ftest_wait_fleet_state(&r.d, "connected");
	ck_assert_uint_eq(itest_num(&r.d, "g1", "sessions"), 1);
	/* the new label answers (its subscription is made once connected:
	 * asked until it is there, the deadline only catches a hang) */
	for (uint64_t end = test_now_ms() + (uint64_t)test_deadline_ms(20000);;) {
		s = natsConnection_RequestString(&m, nc, "vmtrace.dump.label.tenant.t2", "{}",
						 test_deadline_ms(20000));
		if (s != NATS_NO_RESPONDERS)
			break;
		ck_assert_msg(test_now_ms() < end, "nobody subscribes to tenant.t2 (log: %s)", r.d.log);
		usleep(20000);
	}
	ck_assert_int_eq(s, NATS_OK);
	ck_assert_msg(strstr(natsMsg_GetData(m), "\"samples\":[{"), "%s", natsMsg_GetData(m));
	natsMsg_Destroy(m);
	/* the old one nobody holds: the old process's connection went with it */
	ck_assert_int_eq(natsConnection_RequestString(&m, nc, "vmtrace.dump.label.tenant.t1", "{}",
						      test_deadline_ms(10000)), NATS_NO_RESPONDERS);
	natsConnection_Destroy(nc);
	itest_run_end(&r);
	ftest_cluster_stop(&c);
}
END_TEST

/*
 * queue_max: 1 and a backlog of four samples made while the server was
 * down: each pass takes one, the next follows at once, all are uploaded;
 * the queue's length counted the whole backlog meanwhile.
 */
START_TEST(queue_max_backlog_in_passes)
{
	struct ftest_cluster c;
	struct itest_run r;
	char sample[600];
	uint64_t up;

	ITEST_NEED_INPUT(in);
	one_node_host(&c, &r, "fleetqueue", "hostF", "  queue_max: 1\n", NULL, NULL);
	itest_dump_one(&r.d, "g1", sample, sizeof(sample));
	ftest_wait_fleet_drained(&r.d, 2);	/* the aux file and the sample */
	up = itest_num(&r.d, NULL, "fleet_uploaded");
	ftest_node_signal(&c, 0, SIGTERM);
	ftest_wait_fleet_state(&r.d, "connecting");
	for (int i = 0; i < 4; i++)
		itest_dump_one(&r.d, "g1", sample, sizeof(sample));
	ck_assert(itest_wait_num_ge(&r.d, NULL, "fleet_queue", 4, test_deadline_ms(20000)));
	ck_assert_uint_eq(itest_num(&r.d, NULL, "fleet_queue"), 4);
	ftest_node_start(&c, 0);
	ftest_node_wait(&c, 0);
	ftest_wait_fleet_drained(&r.d, up + 4);
	ck_assert_uint_eq(itest_num(&r.d, NULL, "fleet_uploaded"), up + 4);
	/* 1 file a pass: 3 of the 4 waited at the first, 2 at the second... */
	ck_assert_int_ge(testd_log_count(&r.d, "files this pass, 3 wait for the next (queue_max 1)"), 1);
	ck_assert_int_ge(testd_log_count(&r.d, "files this pass, 1 wait for the next (queue_max 1)"), 1);
	itest_run_end(&r);
	ftest_cluster_stop(&c);
}
END_TEST

/*
 * A chunk stored twice (natsshim.so makes the daemon's first js_Publish
 * twice, which is what a publish that timed out and was stored later
 * leaves next to its retry): the uploader finds the stream holding more
 * than it wrote, writes no marker, purges those chunks and uploads again;
 * the npm reader, which reads every message on the chunk subject, then
 * reads the object whole.
 */
START_TEST(upload_checked_before_marked)
{
	struct ftest_cluster c;
	struct itest_run r;
	char shim[700], asan[600], sample[600], aux[300], obj[400], got[800], path[800];
	const char *a = getenv("ASAN_OPTIONS");

	ITEST_NEED_INPUT(in);
	/* next to BUILD/npm, made absolute there */
	snprintf(shim, sizeof(shim), "%.*s/tests/tools/natsshim.so",
		 (int)(strrchr(ftest_npm_dir(), '/') - ftest_npm_dir()), ftest_npm_dir());
	if (access(shim, R_OK) != 0)
		VMT_SKIP("%s missing (make tests builds it)", shim);
	/* this test's process only (Check forks one a test): the daemon
	 * inherits them; the shim comes ahead of a sanitizer runtime */
	snprintf(asan, sizeof(asan), "%s%sverify_asan_link_order=0", a ? a : "", a && *a ? ":" : "");
	setenv("ASAN_OPTIONS", asan, 1);
	setenv("LD_PRELOAD", shim, 1);
	setenv("VMT_NATS_DUP", "1", 1);
	one_node_host(&c, &r, "fleetdup", "hostG", "", NULL, NULL);
	unsetenv("LD_PRELOAD");
	unsetenv("VMT_NATS_DUP");
	itest_dump_one(&r.d, "g1", sample, sizeof(sample));
	ftest_wait_fleet_drained(&r.d, 2);	/* the aux file (uploaded first) and the sample */
	ck_assert_msg(testd_log_count(&r.d, "natsshim: js_Publish 1 on $O.vmtrace.C.") == 1,
		      "no chunk made twice (log %s)", r.d.log);
	ck_assert_msg(testd_log_count(&r.d, " messages on its chunk subject, ") == 1,
		      "the extra chunk not seen (log %s)", r.d.log);
	ck_assert_uint_ge(itest_num(&r.d, NULL, "fleet_upload_failures"), 1);
	/* both read whole by the npm client, the aux file first (the one made twice) */
	ck_assert_int_eq(ftest_run_out(aux, sizeof(aux), "cd %s/g1 && ls aux-*.vmtaux", r.d.state), 0);
	aux[strcspn(aux, "\n")] = 0;
	snprintf(obj, sizeof(obj), "hostG/g1/%s", aux);
	snprintf(got, sizeof(got), "%s/aux.got", c.dir);
	ck_assert_msg(ftest_npm_get(&c, 0, obj, got) == 0, "npm reader failed: see %s.node", got);
	snprintf(path, sizeof(path), "%s/g1/%s", r.d.state, aux);
	ck_assert_int_eq(itest_sh("cmp -s '%s' '%s'", path, got), 0);
	snprintf(obj, sizeof(obj), "hostG/g1/%s", strrchr(sample, '/') + 1);
	snprintf(got, sizeof(got), "%s/sample.got", c.dir);
	ck_assert_msg(ftest_npm_get(&c, 0, obj, got) == 0, "npm reader failed: see %s.node", got);
	ck_assert_int_eq(itest_sh("cmp -s '%s' '%s'", sample, got), 0);
	itest_run_end(&r);
	ftest_cluster_stop(&c);
}
END_TEST

START_TEST(retention_keeps_unuploaded)
{
	struct itest_run r;
	char fl[600], sample[600], gdir[400];

	ITEST_NEED_INPUT(in);
	snprintf(fl, sizeof(fl), "retention:\n  max_samples: 1\nfleet:\n"
		 "  servers: [nats://127.0.0.1:%d]\n  host_id: hostE\n", ftest_free_port());
	ftest_host_start(&r, &in, "hostE", fl, NULL);
	for (int i = 0; i < 3; i++)
		itest_dump_one(&r.d, "g1", sample, sizeof(sample));
	/* the pass after the third dump has run once SAMPLES lists three */
	snprintf(gdir, sizeof(gdir), "%s/g1", r.d.state);
	ck_assert_int_eq(itest_sh("test $(ls %s/g1-*.vmts | wc -l) -eq 3", gdir), 0);
	ck_assert(itest_wait_num_ge(&r.d, NULL, "fleet_queue", 3, test_deadline_ms(10000)));
	/* no credentials: said once at start */
	ck_assert_int_eq(testd_log_count(&r.d, "fleet: no credentials"), 1);
	itest_run_end(&r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("fleet");
	TCase *t = tcase_create("fleet");
	int rc;

	itest_input_prepare(&in);
	TEST_ADD(t, no_fleet_no_connection);
	TEST_ADD(t, wrong_credentials_local_goes_on);
	TEST_ADD(t, hostile_requests_refused);
	TEST_ADD(t, retention_keeps_unuploaded);
	TEST_ADD(t, reload_new_labels_hand_over);
	TEST_ADD(t, queue_max_backlog_in_passes);
	TEST_ADD(t, upload_checked_before_marked);
	TEST_ADD(t, label_dump_two_hosts_bucket_outages);
	tcase_set_timeout(t, 600);
	suite_add_tcase(s, t);
	rc = test_run_suite(s);
	itest_input_free(&in);
	nats_Close();
	return rc;
}
