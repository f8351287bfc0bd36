/* SPDX-License-Identifier: MIT */
/*
 * fleettest: what the fleet's suites share (test_fleet, test_fleet_attack,
 * test_fleetnet): nats-server nodes on 127.0.0.1 (free ports, store folders
 * in the test's folder, readiness from each server's /healthz, TLS if
 * asked), a host daemon with a stand-in guest and a fleet: block, waits on
 * its fleet counters, and the independent reader of the bucket (the npm
 * `nats` package's object store, tests/tools/fleet-reader.mjs).
 */
#ifndef VMT_FLEETTEST_H
#define VMT_FLEETTEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "itest.h"

#define FTEST_NODES 3

struct ftest_node {
	pid_t pid;
	int port, cport, mport;
	char conf[400], log[400];
};

struct ftest_cluster {
	char *dir;
	struct ftest_node n[FTEST_NODES];
	int nnodes;
	char user[32], pass[32];	/* the reader's: vmt, good unless auth was given */
};

/* A free TCP port on 127.0.0.1. */
int ftest_free_port(void);
/*
 * nnodes servers, clustered when more than one, with JetStream. auth is
 * the servers' authorization block, NULL for one user vmt / password good;
 * reader_user and reader_pass (NULL: vmt, good) are who the reader is.
 */
void ftest_cluster_start_auth(struct ftest_cluster *c, const char *tag, int nnodes,
			      const char *auth, const char *reader_user, const char *reader_pass);
void ftest_cluster_start(struct ftest_cluster *c, const char *tag, int nnodes);
/* One server (user vmt, password good) whose TLS certificate and key are
 * srv.pem and srv.key in certdir. */
void ftest_server_start_tls(struct ftest_cluster *c, const char *tag, const char *certdir);
void ftest_cluster_stop(struct ftest_cluster *c);
void ftest_node_start(struct ftest_cluster *c, int i);
void ftest_node_wait(struct ftest_cluster *c, int i);
/* sig, then reaped; ftest_node_kill: SIGKILL */
void ftest_node_signal(struct ftest_cluster *c, int i, int sig);
void ftest_node_kill(struct ftest_cluster *c, int i);
/* "[nats://127.0.0.1:P, ...]" */
void ftest_servers_yaml(char *out, size_t n, const struct ftest_cluster *c);

/* Skips the test without nats-server; ftest_need_tools: or without node
 * or the npm package. */
void ftest_need_server(void);
void ftest_need_tools(void);
/* The reader gets object name into the file out (its line into out.node);
 * it checks the object's digest as the npm client does. */
/* BUILD/npm, absolute: where the npm client is installed */
const char *ftest_npm_dir(void);
int ftest_npm_get(const struct ftest_cluster *c, int node, const char *name, const char *out);
/* The reader lists the bucket ("NAME SIZE" lines) into the file out. */
int ftest_npm_list(const struct ftest_cluster *c, int node, const char *out);

/* A daemon with guest g1 (labels, may be NULL) and fleet (NULL: none). */
void ftest_host_start(struct itest_run *r, const struct itest_input *in, const char *tag,
		      const char *fleet, const char *labels);
/* The same in a run itest_run_init() made, the daemon started with o (may
 * be NULL). */
void ftest_host_run(struct itest_run *r, const char *fleet, const char *labels,
		    const struct testd_opts *o);
/* A string of the daemon's status record ("" if absent). */
void ftest_fleet_str(struct testd *d, const char *key, char *out, size_t n);
void ftest_wait_fleet_state(struct testd *d, const char *want);
/* At least min_uploaded files uploaded and none waiting. */
void ftest_wait_fleet_drained(struct testd *d, uint64_t min_uploaded);
/* The build's vmtracectl. */
const char *ftest_ctl(void);
/* The first "object" of an answer naming host. */
bool ftest_answer_object(const char *text, const char *host, char *out, size_t n);
/* A command's stdout into out; its exit status as pclose() gives it. */
int ftest_run_out(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
