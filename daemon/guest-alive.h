/* SPDX-License-Identifier: MIT */
/*
 * guest-alive: is a streaming guest's agent still there? (the guest_silence
 * detector). An agent that says VMT_HELLO_BYE answers SYNC at any time and
 * says BYE before it exits on purpose; the host pings it (a SYNC whose id
 * has VMT_SYNC_ID_PING) every fifth of detectors.guest_silence.timeout. A
 * guest from which nothing comes (no page, no message, no answer) for the
 * whole timeout while its QEMU lives has stopped: a panicked kernel halted
 * (panic=0), a hung guest, a killed agent. It is dumped once (trigger kind
 * "silence", under its own budgets like its TRIGGERs), and not again until
 * it has spoken. An answer later than half the timeout is counted, never
 * dumped; an agent that said BYE is not watched until its next session.
 */
#ifndef VMT_GUEST_ALIVE_H
#define VMT_GUEST_ALIVE_H

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

struct vmt_guest;
struct vmt_msg;

struct vmt_alive_counters {
	uint64_t pings;		/* sent */
	uint64_t late;		/* answers later than half the timeout */
	uint64_t silences;	/* times it fell silent with its QEMU alive (or unknown) */
	uint64_t fired;		/* of them, dumps asked for and granted */
	uint64_t suppressed;	/* of them, held back by the cooldown or budgets */
	uint64_t byes;		/* the agent said it stops on purpose */
	uint64_t qemu_gone;	/* fell silent with its QEMU gone: process_death's */
};

struct vmt_guest_alive {
	sd_event_source *timer;	/* every fifth of the timeout while watched */
	bool watched;		/* streaming, and the agent says VMT_HELLO_BYE */
	bool silent;		/* found silent; cleared when it speaks again */
	/* its QEMU died or its kernel crashed (guest_crashed): what still
	 * comes is its last words, no answer; until a session starts again */
	bool crashed;
	/* its agent says BYE and streamed without saying it: a QEMU exiting
	 * with status 0 now is no clean shutdown (guest_exit_unclean) */
	bool unclean;
	uint64_t heard_ns;	/* CLOCK_MONOTONIC: its last page or message */
	const char *heard_what;	/* what that was (a static name) */
	uint64_t ping_id;	/* the ping out (VMT_SYNC_ID_PING | n), 0: none */
	uint64_t ping_sent_ns;
	uint64_t ping_seq;
	struct vmt_alive_counters c;
};

/* The session streams now (watched if the agent said VMT_HELLO_BYE). */
void alive_session_start(struct vmt_guest *g);
/* It stopped streaming: no more watching; a silence flag goes too. */
void alive_session_end(struct vmt_guest *g);
/* A page or a message came (what: a static name, "pages" or its type). */
void alive_heard(struct vmt_guest *g, const char *what);
/* SYNCED to a ping: id has VMT_SYNC_ID_PING. */
void alive_on_pong(struct vmt_guest *g, uint64_t id);
/* BYE: the agent exits on purpose; the session is over. */
void alive_on_bye(struct vmt_guest *g, const struct vmt_msg *m);
void alive_free(struct vmt_guest *g);
/* New channels (a new QEMU, or the same one reached again): what an
 * earlier session left says nothing of this one. */
void alive_channels_open(struct vmt_guest *g);

#endif
