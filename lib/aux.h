/* SPDX-License-Identifier: MIT */
/*
 * aux: the persistent auxiliary file of one guest boot and event set
 * (.vmtaux): what decoding its pages needs. A vfile with magic "VMTAUX01":
 * an INFO section (guest, version, content id, kernel release, CPUs, page
 * size, trace clock, boot id, agent) and a META section (the metadata
 * bundle of meta.h, zstd-compressed).
 *
 * The content id is a 64-bit FNV-1a hash of the INFO fields that describe
 * the guest and of the bundle; the same id means the same aux, so a daemon
 * restart or a reconnect with nothing changed reuses the version.
 */
#ifndef VMT_AUX_H
#define VMT_AUX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "clocksync.h"
#include "proto.h"

#define VMT_AUX_MAGIC "VMTAUX01"
#define VMT_AUX_VERSION 1
/* Section types (docs/FORMAT.md) */
#define VMT_AUX_SECT_INFO 0x01
#define VMT_AUX_SECT_META 0x30
#define VMT_AUX_SECT_CLOCK 0x40	/* optional: the clocks and method when written */
#define VMT_AUX_ZSTD_LEVEL 3

struct vmt_aux {
	char guest[65];
	uint32_t version;	/* 1, 2, ... per guest */
	uint64_t id;		/* content hash, see above */
	uint64_t created_ns;
	uint32_t ncpus;
	uint32_t page_size;
	char release[VMT_STR_RELEASE];
	char clock[VMT_STR_CLOCK];
	char boot_id[VMT_STR_BOOTID];
	char agent[VMT_STR_AGENT];
	uint8_t *meta;		/* the bundle */
	size_t meta_len;
	bool have_clock;	/* not part of the content id */
	struct vmt_clock_info sync;	/* clocks, method, vCPU map, first points */
};

uint64_t aux_compute_id(const struct vmt_aux *a);
/*
 * -EINVAL if a is not something aux_read() accepts: a->id must already be
 * aux_compute_id(a), strings printable, the bundle pass meta_validate().
 */
int aux_write(int fd, const struct vmt_aux *a);
/* max_meta bounds the bundle; -EBADMSG and why on a bad file. On error a
 * holds nothing to free. */
int aux_read(const char *path, uint64_t max_meta, struct vmt_aux *a, char *why, size_t why_len);
int aux_read_mem(const void *data, size_t len, uint64_t max_meta, struct vmt_aux *a, char *why,
		 size_t why_len);
void aux_free(struct vmt_aux *a);

/* "aux-000001.vmtaux" (six digits at least, ten at most) */
int aux_file_name(char *out, size_t n, uint32_t version);
/* Is name[len] an aux file's name, exactly as aux_file_name() writes it?
 * Its version then. */
bool aux_file_version(const char *name, size_t len, uint32_t *version);

#endif
