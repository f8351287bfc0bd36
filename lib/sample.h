/* SPDX-License-Identifier: MIT */
/*
 * sample: one guest's frozen window, as written on a dump (.vmts).
 * A vfile with magic "VMTSMPL1": an INFO section (guest, aux version it
 * needs, triggers, creation time), a CPU section per CPU (window times and
 * every counter), per CPU its older pages as FRAME sections (compressed
 * in the ring, written as they are) and the rest in a PAGES section (the
 * raw ftrace pages, zstd-compressed). See docs/FORMAT.md.
 */
#ifndef VMT_SAMPLE_H
#define VMT_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>

#include "clocksync.h"
#include "frame.h"
#include "proto.h"
#include "vfile.h"	/* struct vmt_iovec */

#define VMT_SAMPLE_MAGIC "VMTSMPL1"
#define VMT_SAMPLE_VERSION 1	/* a sample without FRAME sections */
#define VMT_SAMPLE_VERSION_FRAMES 2	/* with FRAME sections or compression counters (docs/FORMAT.md 2.5) */
#define VMT_SAMPLE_MAX_TRIGGERS 64
#define VMT_REASON_MAX 256
/* The first trigger's reason of a sample of a guest's previous boot, from
 * its persistent ring buffer (the daemon's guest-prev.c): merge keeps of its
 * pages only the events the other samples of that boot do not have. */
#define VMT_PREV_BOOT_REASON "previous boot (persistent ring buffer)"
#define VMT_NAME_MAX 65
/* Section types (docs/FORMAT.md) */
#define VMT_SAMPLE_SECT_INFO 0x01
#define VMT_SAMPLE_SECT_CPU 0x10
#define VMT_SAMPLE_SECT_PAGES 0x20
#define VMT_SAMPLE_SECT_FRAME 0x21	/* repeated, id = cpu: one compressed frame (frame.h) */
#define VMT_SAMPLE_SECT_CLOCK 0x30	/* optional: clocksync.h */
#define VMT_SAMPLE_SECT_TASKS 0x31	/* optional: task tables at the dump (meta.h) */
/* Readers refuse a sample declaring more page bytes than this, in all. */
#define VMT_SAMPLE_MAX_PAGE_BYTES (64ull << 30)

/* X(name, value, text) */
#define VMT_TRIGGER_KINDS(X)                        \
	X(SIGNAL,  1, "signal")                     \
	X(CONTROL, 2, "control")                    \
	X(BPF,     3, "bpf")                        \
	X(GUEST,   4, "guest")                      \
	X(SHUTDOWN, 5, "shutdown")                  \
	X(SILENCE, 6, "silence")	/* guest_silence: the guest stopped answering */ \
	X(LIBVIRT, 7, "libvirt")	/* libvirt_events: libvirt said it crashed, ... */

enum vmt_trigger_kind {
#define X(n, v, t) VMT_TRIGGER_##n = v,
	VMT_TRIGGER_KINDS(X)
#undef X
};
/* "signal", ...; "unknown" for a kind this build does not know. */
const char *trigger_kind_name(uint32_t kind);

struct vmt_trigger {
	uint32_t kind;
	uint32_t pid;		/* who asked: peer, signal sender, or the BPF subject */
	uint64_t time_ns;	/* CLOCK_REALTIME */
	uint64_t value;		/* what a detector measured, 0 if none */
	uint64_t threshold;	/* what it was compared with, 0 if none */
	char reason[VMT_REASON_MAX];
};

/*
 * A CPU's ring counters at the freeze, as the sample stores them (CPU
 * section tags 0x10..0x18, docs/FORMAT.md). The daemon's rings count in
 * a struct of their own (ring_counters_to_sample): the file format does
 * not move when the rings do.
 */
struct vmt_sample_counters {
	uint64_t bytes_in;	/* bytes read from the channel */
	uint64_t pages_in;	/* pages accepted */
	uint64_t pages_overwritten;	/* accepted pages pushed out by newer ones */
	uint64_t pages_guest_lost;	/* accepted pages flagged with missed events */
	uint64_t events_guest_lost;	/* missed-event counts stored in those pages */
	uint64_t pages_rejected;
	uint64_t bytes_rejected;	/* bytes of rejected pages and torn tails */
	uint64_t ts_backwards;	/* pages whose time goes back before the previous page */
	uint64_t events_in;	/* events in accepted pages */
	/* a compressed ring's (CPU tags 0x19..0x1d, optional: 0 when absent) */
	uint64_t frames_made;	/* frames made of the ring's older pages */
	uint64_t pages_stored_raw;	/* of their pages, stored uncompressed: the compressor was behind */
	uint64_t frame_bytes_in;	/* page bytes that went into frames */
	uint64_t frame_bytes_out;	/* bytes those frames take */
	uint64_t frames_overwritten;	/* frames pushed out by newer ones (their pages count in pages_overwritten) */
};

/* A frame as the writer gets it: its header, and its payload where it is. */
struct vmt_sample_frame {
	struct vmt_frame_hdr h;
	const uint8_t *payload;
	uint32_t len;
};

struct vmt_sample_cpu {
	uint32_t cpu;
	/*
	 * Pages of the window. Writer: in frames and in iov/pages together,
	 * the frames' frame_pages first. Reader: the pages decoded into pages,
	 * which leaves out those of refused frames (pages_refused).
	 */
	uint32_t npages;
	/* of npages, in FRAME sections (CPU tag 0x07). Reader: as the file says,
	 * though pages holds them decoded: set it to 0 to write them back raw. */
	uint32_t frame_pages;
	uint64_t first_seq;	/* stream seq of the first page */
	uint64_t first_ts, last_ts;	/* first and last event in the window */
	uint64_t events;
	struct vmt_sample_counters counters;	/* the ring's, at the freeze */
	bool have_guest_stats;
	struct vmt_cpu_stats guest;	/* from the agent's last FLUSHED */
	/* npages * page_size bytes. The writer reads them from iov (pieces of a
	 * ring), or from pages when niov is 0 (rewriting a sample it read); the
	 * reader fills pages with one contiguous buffer (NULL for 0 pages). */
	const struct vmt_iovec *iov;
	uint32_t niov;
	uint8_t *pages;
	/* writer: the frames, oldest first, written as they are (their pages
	 * come before iov's); the reader decodes them into pages */
	const struct vmt_sample_frame *frames;
	uint32_t nframes;
	/* reader: FRAME sections read, refused (bad CRC, header or payload:
	 * their pages left out, the rest kept), and the pages those held */
	uint32_t frames_read, frames_refused, pages_refused;
	uint64_t frame_bytes;	/* reader: stored bytes of the frames read */
	uint32_t frame_codecs;	/* reader: 1 << codec for each codec of the frames read */
};

/*
 * A frame the reader refused (docs/FORMAT.md 2.5), for the user. The pages
 * it left out are those between the frames read around it; when refused
 * frames come in a row they share them (run_frames > 1), as which of them
 * held which cannot be told.
 */
#define VMT_SAMPLE_MAX_REFUSALS 16	/* listed; the CPUs' frames_refused count them all */
struct vmt_sample_refusal {
	uint32_t cpu;
	uint32_t frame;		/* among the CPU's FRAME sections, in file order, from 0 */
	uint32_t run_frames;	/* refused frames in the row it belongs to */
	uint32_t npages;	/* pages left out there, from first_seq on */
	uint64_t first_seq;
	char why[200];
};

struct vmt_sample {
	char guest[VMT_NAME_MAX];
	char host[VMT_NAME_MAX];
	uint32_t aux_version;
	uint64_t aux_id;	/* content hash of the aux it needs */
	uint64_t created_ns;	/* CLOCK_REALTIME of the freeze */
	uint64_t dump_id;	/* daemon-wide dump counter */
	uint32_t page_size;
	uint32_t ncpus;
	uint32_t ntriggers;
	struct vmt_trigger triggers[VMT_SAMPLE_MAX_TRIGGERS];
	/* guest-wide counters */
	uint64_t ctl_rejected_bytes;	/* control-channel garbage */
	uint64_t ctl_rejected_msgs;
	uint64_t flush_timeouts;	/* dumps that did not get the agent's FLUSHED in time */
	uint64_t triggers_omitted;	/* triggers this dump served beyond the ones listed */
	/* optional (INFO 0x0d, 0x0e, 0 when absent): the first sample after the
	 * daemon adopted a crashed predecessor's window says so: the daemons
	 * that have held it, this one included, and since when */
	uint32_t recovered_lifetimes;
	uint64_t window_since_ns;
	struct vmt_sample_cpu *cpus;	/* ncpus entries */
	bool have_clock;	/* a CLOCK section (not read by sample_read_info) */
	struct vmt_clock_info clock;	/* freed by sample_free() */
	/* the guest's task tables at the dump (meta_tasks_validate()), 0 bytes if
	 * none; not read by sample_read_info; freed by sample_free() */
	uint8_t *tasks;
	uint32_t tasks_len;
	/* sample_read: the first refused frames, in file order (0 when none) */
	uint32_t nrefusals;
	struct vmt_sample_refusal refusals[VMT_SAMPLE_MAX_REFUSALS];
};

struct vmt_iovec;
struct vmt_tcode;
/*
 * Write s to fd as a whole sample file (the caller publishes it with afile).
 * PAGES sections are zstd-compressed when zstd_level > 0. Bytes of host and
 * of trigger reasons outside 0x20..0x7e are written as '?'. Format version
 * 2 when a CPU has frames or compression counters, else 1. -EINVAL if s is
 * not something sample_read() reads whole (guest name, ncpus, page_size,
 * cpus[i].cpu != i, a frame header that does not read or does not start
 * where the one before ended (first_seq for the first), frame_pages other
 * than the frames' pages, page bytes in iov or pages != (npages -
 * frame_pages) * page_size); -errno from the fd.
 */
int sample_write(int fd, const struct vmt_sample *s, int zstd_level, int zstd_workers);
/*
 * Read and check a whole sample; on -EBADMSG why says what is wrong.
 * A corrupt frame does not make it wrong: it is refused, its pages left
 * out, and said in refusals (print them with sample_refusal_text()).
 * *out is freed with sample_free().
 */
int sample_read(const char *path, struct vmt_sample **out, char *why, size_t why_len);
int sample_read_mem(const void *data, size_t len, struct vmt_sample **out, char *why, size_t why_len);
/* What sample_read_with() does with the pages (docs/FORMAT.md 1.4). */
enum vmt_sample_pages {
	VMT_SAMPLE_PAGES_KEEP = 0,	/* every CPU's decoded into cpus[].pages: sample_read() */
	/* every CPU decoded in turn and let go: npages, counts and refusals as
	 * with KEEP, pages NULL; one CPU's pages in memory at a time */
	VMT_SAMPLE_PAGES_CHECK,
	/* frames decoded one at a time into a scratch buffer, to count what is
	 * read and refused; PAGES sections only CRC-checked; pages NULL */
	VMT_SAMPLE_PAGES_FRAMES,
	/* only cpu's pages decoded and kept (the others' npages as the file says) */
	VMT_SAMPLE_PAGES_ONE_CPU,
};

struct vmt_sample_read_opts {
	uint64_t max_memory;	/* the budget; 0: vfile_budget()'s default */
	enum vmt_sample_pages pages;
	uint32_t cpu;		/* VMT_SAMPLE_PAGES_ONE_CPU */
	/* TCODE frames (lib/frame.h) decode with this schema; NULL: with one
	 * made from aux_path if it is the sample's aux, else from the aux
	 * beside the sample file (aux_file_name() of its aux_version, its
	 * content id checked). Without one they are refused. */
	const struct vmt_tcode *tcode;
	const char *aux_path;
};

/*
 * sample_read() under o (NULL: the defaults). Whatever the mode, a sample
 * whose sections and frames together declare more than the budget is
 * refused whole (-EBADMSG, why names the section) before anything is
 * decoded; nothing decodes to more than it declares.
 */
int sample_read_with(const char *path, const struct vmt_sample_read_opts *o, struct vmt_sample **out,
		     char *why, size_t why_len);
int sample_read_mem_with(const void *data, size_t len, const struct vmt_sample_read_opts *o,
			 struct vmt_sample **out, char *why, size_t why_len);
void sample_free(struct vmt_sample *s);
/*
 * Only the INFO section (guest, aux version, triggers, ...) into *s, which
 * the caller owns; s->cpus is NULL. The file is mapped and only its section
 * headers and INFO are touched, so this is cheap for a sample of any size.
 * -EBADMSG with why when the file is not a whole sample as far as the
 * section headers tell or its INFO is bad; -EINVAL if it is not a regular
 * file; -errno for I/O. On error *s is zeroed.
 */
int sample_read_info(const char *path, struct vmt_sample *s, char *why, size_t why_len);
/* The same on an open file (openat with O_NOFOLLOW, say); fd stays open. */
int sample_read_info_fd(int fd, struct vmt_sample *s, char *why, size_t why_len);

/*
 * One line for the user, without the file's name (the caller has it):
 * "cpu 1 frame 3: WHY; pages 640..703 (64) left out". Returns snprintf's.
 */
int sample_refusal_text(const struct vmt_sample_refusal *r, char *out, size_t n);

/* "GUEST-20261122T121314.123456Z.vmts" for a CLOCK_REALTIME time. */
int sample_file_name(char *out, size_t n, const char *guest, uint64_t realtime_ns);

#endif
