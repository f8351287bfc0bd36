/* SPDX-License-Identifier: MIT */
#include <string.h>

#include "pagegen.h"
#include "util.h"

void pagegen_init(struct pagegen *g, uint8_t *page, uint32_t size, uint64_t ts)
{
	memset(page, 0, size);
	g->page = page;
	g->size = size;
	g->pos = 0;
	g->ts = ts;
	put_le64(page, ts);
}

static uint8_t *room(struct pagegen *g, uint32_t n)
{
	if (16 + g->pos + n > g->size)
		return NULL;
	return g->page + 16 + g->pos;
}

int pagegen_event(struct pagegen *g, uint64_t delta, uint32_t len, uint8_t fill)
{
	uint32_t body = (len + 3) & ~3u, need = 4 + body + (body > 112 ? 4 : 0);
	uint8_t *p;

	if (delta >= (1u << 27)) {
		p = room(g, 8);
		if (!p)
			return -1;
		put_le32(p, 30u | (uint32_t)(delta & ((1u << 27) - 1)) << 5);
		put_le32(p + 4, (uint32_t)(delta >> 27));
		g->pos += 8;
		delta = 0;
	}
	p = room(g, need);
	if (!p)
		return -1;
	if (body <= 112) {
		put_le32(p, body / 4 | (uint32_t)delta << 5);
		memset(p + 4, fill, body);
	} else {
		put_le32(p, (uint32_t)delta << 5);
		put_le32(p + 4, body + 4);
		memset(p + 8, fill, body);
	}
	g->pos += need;
	g->ts += delta;
	return 0;
}

int pagegen_padding(struct pagegen *g, uint32_t len)
{
	uint8_t *p = room(g, 4 + len);

	if (!p || len < 4)
		return -1;
	put_le32(p, 29u | 1u << 5);
	put_le32(p + 4, len);
	g->pos += 4 + len;
	g->ts += 1;
	return 0;
}

void pagegen_finish(struct pagegen *g, uint64_t flags)
{
	put_le64(g->page + 8, g->pos | flags);
}

void pagegen_simple(uint8_t *page, uint32_t size, uint64_t ts, uint32_t n)
{
	struct pagegen g;

	pagegen_init(&g, page, size, ts);
	for (uint32_t i = 0; i < n; i++)
		if (pagegen_event(&g, i ? 1000 : 0, 8 + (i * 8) % 57, (uint8_t)i) < 0)
			break;
	pagegen_finish(&g, 0);
}
