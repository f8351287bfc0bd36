/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "page.h"
#include "util.h"

#define TYPE_PADDING 29
#define TYPE_TIME_EXTEND 30
#define TYPE_TIME_STAMP 31
#define TS_SHIFT 27
#define TS_MSB (0xf8ull << 56)

void page_layout_default(struct vmt_page_layout *l, uint32_t page_size)
{
	*l = (struct vmt_page_layout){
		.page_size = page_size,
		.ts_offset = 0,
		.commit_offset = 8,
		.commit_size = 8,
		.data_offset = 16,
	};
}

/* Find "field: ... NAME;\toffset:N;\tsize:M;" in header_page text. */
static int find_field(const char *text, size_t len, const char *name, uint32_t *off, uint32_t *size)
{
	const char *p = text, *end = text + len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t ll = nl ? (size_t)(nl - p) : (size_t)(end - p);
		char line[256];
		const char *f, *os, *ss;
		unsigned o, s;

		if (ll < sizeof(line)) {
			memcpy(line, p, ll);
			line[ll] = 0;
			/* guest text: any piece may be missing */
			f = strstr(line, name);
			os = strstr(line, "offset:");
			ss = strstr(line, "size:");
			if (strstr(line, "field:") && f && f > line && f[strlen(name)] == ';' &&
			    (f[-1] == ' ' || f[-1] == '\t') && os && ss &&
			    sscanf(os, "offset:%u;", &o) == 1 && sscanf(ss, "size:%u;", &s) == 1) {
				*off = o;
				*size = s;
				return 0;
			}
		}
		p += ll + 1;
	}
	return -ENOENT;
}

int page_layout_parse(struct vmt_page_layout *l, const char *text, size_t len, uint32_t page_size)
{
	uint32_t to, ts, co, cs, d_o, ds;

	if (find_field(text, len, "timestamp", &to, &ts) < 0 ||
	    find_field(text, len, "commit", &co, &cs) < 0 ||
	    find_field(text, len, "data", &d_o, &ds) < 0)
		return -EINVAL;
	/* in 64 bits: a guest's "offset:4294967295;" must not wrap past the check */
	if (ts != 8 || (cs != 4 && cs != 8) || (uint64_t)to + 8 > d_o || (uint64_t)co + cs > d_o ||
	    d_o >= page_size || d_o > 64)
		return -EINVAL;
	/* page_cut_before() rewrites the timestamp: it must not share bytes with the commit */
	if (to < co + cs && co < to + 8)
		return -EINVAL;
	*l = (struct vmt_page_layout){
		.page_size = page_size,
		.ts_offset = to,
		.commit_offset = co,
		.commit_size = cs,
		.data_offset = d_o,
	};
	return 0;
}

static uint64_t page_commit_word(const struct vmt_page_layout *l, const uint8_t *page)
{
	return l->commit_size == 8 ? get_le64(page + l->commit_offset)
				   : get_le32(page + l->commit_offset);
}

/*
 * The one walker. Always inlined, so that page_scan() (the hot path of
 * ingestion: every page is checked) gets its callback inlined too.
 */
static inline __attribute__((always_inline)) int
walk(const struct vmt_page_layout *l, const uint8_t *page,
     int (*cb)(uint64_t ts, uint32_t offset, uint32_t size, void *data), void *data)
{
	uint64_t word = page_commit_word(l, page);
	uint64_t ts = get_le64(page + l->ts_offset);
	const uint8_t *d = page + l->data_offset;
	uint64_t commit = word & VMT_PAGE_COMMIT_MASK;
	uint64_t room = l->page_size - l->data_offset;
	uint32_t pos = 0;

	if (commit > room)
		return -EBADMSG;
	if ((word & VMT_PAGE_MISSED_STORED) && commit + l->commit_size > room)
		return -EBADMSG;

	while (pos + 4 <= commit) {
		uint32_t h = get_le32(d + pos);
		uint32_t type_len = h & 0x1f, delta = h >> 5;
		uint64_t size, arr;

		switch (type_len) {
		case TYPE_PADDING:
			if (!delta)	/* the rest of the page is padding */
				return 0;
			if (pos + 8 > commit)
				return -EBADMSG;
			size = 4 + (uint64_t)get_le32(d + pos + 4);
			if (size < 8)
				return -EBADMSG;
			ts += delta;
			break;
		case TYPE_TIME_EXTEND:
		case TYPE_TIME_STAMP:
			if (pos + 8 > commit)
				return -EBADMSG;
			arr = ((uint64_t)get_le32(d + pos + 4) << TS_SHIFT) + delta;
			if (type_len == TYPE_TIME_STAMP)
				ts = arr | (ts & TS_MSB);
			else
				ts += arr;
			size = 8;
			break;
		case 0:
			if (pos + 8 > commit)
				return -EBADMSG;
			arr = get_le32(d + pos + 4);
			if (arr < 4)
				return -EBADMSG;
			size = 8 + ((arr - 4 + 3) & ~3ull);
			ts += delta;
			break;
		default:
			size = 4 + (uint64_t)type_len * 4;
			ts += delta;
			break;
		}
		if (pos + size > commit) {
			/* a discarded event's padding may run to the page end */
			if (type_len == TYPE_PADDING)
				return 0;
			return -EBADMSG;
		}
		if (type_len < TYPE_PADDING && cb) {
			int r = cb(ts, l->data_offset + pos, (uint32_t)size, data);
			if (r)
				return r;
		}
		pos += (uint32_t)size;
	}
	return pos == commit || commit - pos < 4 ? 0 : -EBADMSG;
}

int page_walk(const struct vmt_page_layout *l, const uint8_t *page,
	      int (*cb)(uint64_t ts, uint32_t offset, uint32_t size, void *data), void *data)
{
	return walk(l, page, cb, data);
}


static inline int scan_cb(uint64_t ts, uint32_t offset, uint32_t size, void *data)
{
	struct vmt_page_info *i = data;

	(void)offset;
	(void)size;
	if (!i->events)
		i->first_ts = ts;
	i->last_ts = ts;
	i->events++;
	return 0;
}

int page_scan(const struct vmt_page_layout *l, const uint8_t *page, struct vmt_page_info *info)
{
	uint64_t word = page_commit_word(l, page);
	struct vmt_page_info i = { 0 };
	int r;

	i.base_ts = i.first_ts = i.last_ts = get_le64(page + l->ts_offset);
	i.commit = (uint32_t)(word & VMT_PAGE_COMMIT_MASK);
	i.missed_flag = !!(word & VMT_PAGE_MISSED_EVENTS);
	r = walk(l, page, scan_cb, &i);
	if (r < 0)
		return r;
	if ((word & VMT_PAGE_MISSED_STORED) && i.missed_flag) {
		const uint8_t *m = page + l->data_offset + i.commit;
		i.missed = l->commit_size == 8 ? get_le64(m) : get_le32(m);
	}
	*info = i;
	return 0;
}

struct cut_state {
	const uint8_t *page;
	uint64_t t_start;
	uint32_t through;	/* page_cut_through: drop up to this offset; 0: by time */
	uint32_t dropped;
	uint32_t keep_off;	/* offset of the first kept event, 0 = none found */
	uint64_t keep_ts;
};

static int cut_cb(uint64_t ts, uint32_t offset, uint32_t size, void *data)
{
	struct cut_state *c = data;

	(void)size;
	/* walk to the end all the same: a page that does not walk is not cut */
	if (c->keep_off)
		return 0;
	if (c->through ? offset > c->through : ts >= c->t_start) {
		c->keep_off = offset;
		c->keep_ts = ts;
		return 0;
	}
	c->dropped++;
	return 0;
}

static int page_cut(const struct vmt_page_layout *l, uint8_t *page, struct cut_state c)
{
	uint64_t word = page_commit_word(l, page), base;
	uint32_t pad, delta;
	int r;

	r = page_walk(l, page, cut_cb, &c);
	if (r < 0)
		return r;
	if (!c.dropped)
		return 0;
	if (!c.keep_off) {
		/* nothing at or after t_start: an empty page, flags kept */
		uint64_t flags = word & ~VMT_PAGE_COMMIT_MASK & ~VMT_PAGE_MISSED_STORED;
		if (l->commit_size == 8)
			put_le64(page + l->commit_offset, flags);
		else
			put_le32(page + l->commit_offset, (uint32_t)flags);
		return (int)c.dropped;
	}
	delta = get_le32(page + c.keep_off) >> 5;
	base = c.keep_ts - delta;
	if (base < 1)
		return 0;
	pad = c.keep_off - l->data_offset;	/* at least 8: the smallest event */
	put_le32(page + l->data_offset, 29u | 1u << 5);
	put_le32(page + l->data_offset + 4, pad - 4);
	put_le64(page + l->ts_offset, base - 1);
	return (int)c.dropped;
}

int page_cut_before(const struct vmt_page_layout *l, uint8_t *page, uint64_t t_start)
{
	return page_cut(l, page, (struct cut_state){ .page = page, .t_start = t_start });
}

int page_cut_through(const struct vmt_page_layout *l, uint8_t *page, uint32_t offset)
{
	return page_cut(l, page, (struct cut_state){ .page = page, .through = offset });
}
