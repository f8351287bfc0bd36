/* SPDX-License-Identifier: MIT */
/*
 * page: the ftrace ring-buffer page as the guest kernel writes it
 * (events/header_page): a u64 timestamp, a commit word (long-sized) whose low
 * 27 bits are the bytes of event data and whose top bits flag missed events,
 * then the event data. page_scan() walks every event header of an untrusted
 * page without trusting any length in it.
 */
#ifndef VMT_PAGE_H
#define VMT_PAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct vmt_page_layout {
	uint32_t page_size;
	uint32_t ts_offset;	/* 0 */
	uint32_t commit_offset;	/* 8 */
	uint32_t commit_size;	/* 8 on a 64-bit kernel, 4 on 32-bit */
	uint32_t data_offset;	/* 16 */
};

#define VMT_PAGE_MISSED_EVENTS (1ull << 31)
#define VMT_PAGE_MISSED_STORED (1ull << 30)
#define VMT_PAGE_COMMIT_MASK ((1ull << 27) - 1)

/* The layout of a 64-bit x86 guest with 4 KiB pages. */
void page_layout_default(struct vmt_page_layout *l, uint32_t page_size);
/* Read events/header_page text; -EINVAL names nothing: the caller logs. */
int page_layout_parse(struct vmt_page_layout *l, const char *header_page, size_t len,
		      uint32_t page_size);

struct vmt_page_info {
	uint64_t base_ts;	/* page header timestamp */
	uint64_t first_ts;	/* of the first data event (base_ts if none) */
	uint64_t last_ts;	/* of the last data event (base_ts if none) */
	uint32_t commit;	/* data bytes */
	uint32_t events;	/* data events */
	uint64_t missed;	/* events the kernel says were lost before this page, if stored */
	bool missed_flag;	/* the page says events were lost before it */
};

/*
 * Walk one page. 0 and info filled if every event lies inside the commit
 * area; -EBADMSG if the commit is larger than the page or an event header
 * points outside it.
 */
int page_scan(const struct vmt_page_layout *l, const uint8_t *page, struct vmt_page_info *info);

/*
 * Callback walk, for cutting windows and for tests: cb gets each data
 * event's timestamp and offset in the page; a non-zero return stops the walk
 * and is returned.
 */
int page_walk(const struct vmt_page_layout *l, const uint8_t *page,
	      int (*cb)(uint64_t ts, uint32_t offset, uint32_t size, void *data), void *data);

/*
 * Drop the events before t_start from a page in place, so that a window
 * can start at the same time on every CPU: the leading events become one
 * padding event (time delta 1) and the page timestamp is set so that the
 * first kept event keeps its time. Returns the number of events dropped
 * (0: nothing before t_start), or -EBADMSG for a page that does not walk.
 * A page with no event at or after t_start loses all its events.
 */
int page_cut_before(const struct vmt_page_layout *l, uint8_t *page, uint64_t t_start);
/* The same, dropping the events up to the one at offset (as page_walk
 * gives it), that one included, whatever their times. */
int page_cut_through(const struct vmt_page_layout *l, uint8_t *page, uint32_t offset);

#endif
