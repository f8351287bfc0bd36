/* SPDX-License-Identifier: MIT */
/* fakeguest: QEMU + vmtrace-agent stand-in for integration tests. */
#ifndef VMT_FAKEGUEST_H
#define VMT_FAKEGUEST_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define FAKEGUEST_MAX_CPUS 64

struct fakeguest_conf {
	const char *dir;	/* channel folder, made if missing */
	int sockets;		/* 0: FIFO pairs, 1: unix sockets (QEMU server=on) */
	uint32_t ncpus;
	uint32_t page_size;
	const uint8_t *bundle;	/* metadata bundle sent after START */
	size_t bundle_len;
	const uint8_t *tasks;	/* task tables sent ahead of each FLUSHED, in pieces */
	size_t tasks_len;
	uint32_t tasks_piece;	/* their size, 0: as large as a message takes */
	int tasks_backwards;	/* send the pieces last first */
	const uint8_t *pages[FAKEGUEST_MAX_CPUS];	/* per CPU, back to back */
	size_t npages[FAKEGUEST_MAX_CPUS];
	unsigned pages_per_sec;	/* 0: as fast as the host reads */
	size_t hold_after;	/* each CPU sends this many pages of its first stream,
				 * then waits for fakeguest_release() (0: never) */
	int hold_first;		/* each CPU waits for fakeguest_release() before the
				 * first page of its first stream */
	uint32_t chunk;		/* write pages in pieces of this size, 0: whole */
	const char *release, *boot_id;
	/* misbehaviour, for the hostile cases */
	uint32_t hello_ncpus;	/* claim this many CPUs, 0: ncpus */
	uint64_t meta_claim;	/* announce this metadata size, 0: the real one */
	int corrupt_meta_crc;
	int garbage_first;	/* junk on the control channel before HELLO */
	int lie_in_flush;	/* claim more bytes sent than were */
	unsigned triggers;	/* TRIGGER messages sent once all pages are out */
	unsigned trigger_gap_ms;	/* between them */
	int triggers_until_release;	/* go on past triggers until fakeguest_release() */
	/* an agent the host watches for silence (VMT_HELLO_BYE): answers SYNC
	 * (ping or probe, 'p' told), each answer sync_delay_ms late;
	 * fakeguest_bye() makes it say BYE and fall mute, as an agent exits */
	int watched;
	unsigned sync_delay_ms;
	/* control bytes (whole messages, framed) written as it gets STREAM,
	 * before any page: the previous boot's set (PREV_*), well made or not */
	const uint8_t *after_stream;
	size_t after_stream_len;
	size_t cut_after;	/* sockets: this many pages into its first stream cpu0 sends half a
				 * page and closes its data channel; the host's reconnect is served */
};

struct fakeguest {
	pid_t pid;
	int done_fd;
	int gate_fd;
	unsigned sent_pages, sent_meta;		/* what the guest told so far */
	unsigned waited_pages, waited_meta;	/* what the test waited for */
	unsigned host_hellos, starts;	/* HOST_HELLOs and STARTs it got, as read so far */
	unsigned syncs;		/* SYNCs it answered (watched) */
};

/* Make the channels, then fork the guest; c must outlive the call only. */
int fakeguest_start(struct fakeguest *fg, const struct fakeguest_conf *c);
/* Wait until every CPU has sent all its pages (after a START). */
int fakeguest_wait_sent(struct fakeguest *fg, int timeout_ms);
/* Wait until its metadata (META_BEGIN … META_END) is all written, once
 * more than this was waited for. */
int fakeguest_wait_meta_sent(struct fakeguest *fg, int timeout_ms);
/* Read what it told so far without waiting (host_hellos, starts). */
void fakeguest_poll(struct fakeguest *fg);
void fakeguest_count(struct fakeguest *fg, char ch);
/* Let CPUs held by hold_after go on; end a triggers_until_release flood. */
int fakeguest_release(struct fakeguest *fg);
/* watched: BYE, then nothing more on the control channel (it still tells
 * the HOST_HELLOs it gets). */
int fakeguest_bye(struct fakeguest *fg);
void fakeguest_stop(struct fakeguest *fg);

#endif
