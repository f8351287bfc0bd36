/* SPDX-License-Identifier: MIT */
/*
 * fakenats: a stand-in NATS server for the tests, a thread listening on
 * 127.0.0.1 (a free port) that greets every client with a crafted INFO
 * (or something that is not one) and records, bounded, what clients send
 * it. The fleet's tests point vmtraced and vmtracectl at it to see what a
 * hostile or broken server gets from them.
 */
#ifndef VMT_FAKENATS_H
#define VMT_FAKENATS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum fakenats_mode {
	FAKENATS_NO_TLS,	/* a plain INFO without tls_required, auth_required */
	FAKENATS_BIG_INFO,	/* an INFO line of 256 KiB */
	FAKENATS_GARBAGE,	/* 64 KiB of random bytes, lines and all */
	FAKENATS_BIG_MSG,	/* a good greeting, PONG to PING, then a MSG line of 4 MiB */
};

#define FAKENATS_RECORD_MAX (64 * 1024)

struct fakenats {
	enum fakenats_mode mode;
	int port;
	int lfd;
	int wake[2];
	pthread_t thread;
	pthread_mutex_t lock;
	uint64_t accepted;	/* connections served */
	uint64_t received;	/* bytes clients sent, all of them */
	size_t nrecord;
	char record[FAKENATS_RECORD_MAX + 1];	/* the first bytes clients sent */
};

int fakenats_start(struct fakenats *f, enum fakenats_mode mode);
void fakenats_stop(struct fakenats *f);
/* Connections served so far. */
uint64_t fakenats_accepted(struct fakenats *f);
/* Whether what clients sent holds s. */
bool fakenats_received(struct fakenats *f, const char *s);

#endif
