/* SPDX-License-Identifier: MIT */
/*
 * fleet-json: the one JSON shape a fleet dump request has, parsed
 * strictly: an object of at most the keys reason (string), window and
 * post (whole numbers of seconds). A general JSON library is not in the
 * allowed stack and this shape is fixed: a parser of 100 lines that
 * refuses everything else is smaller to trust than one that accepts all.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fleet.h"

#define WINDOW_MAX_S 3600

struct jp {
	const char *s;
	size_t len, pos;
};

static void ws(struct jp *p)
{
	while (p->pos < p->len && strchr(" \t\r\n", p->s[p->pos]) && p->s[p->pos])
		p->pos++;
}

static int lit(struct jp *p, char c)
{
	ws(p);
	if (p->pos >= p->len || p->s[p->pos] != c)
		return -EINVAL;
	p->pos++;
	return 0;
}

/* A string of printable ASCII and the escapes \" \\ \/ only. */
static int str(struct jp *p, char *out, size_t n)
{
	size_t o = 0;

	if (lit(p, '"') < 0)
		return -EINVAL;
	while (p->pos < p->len) {
		unsigned char c = (unsigned char)p->s[p->pos++];

		if (c == '"') {
			out[o] = 0;
			return 0;
		}
		if (c == '\\') {
			if (p->pos >= p->len)
				return -EINVAL;
			c = (unsigned char)p->s[p->pos++];
			if (c != '"' && c != '\\' && c != '/')
				return -EINVAL;
		} else if (c < 0x20 || c >= 0x7f) {
			return -EINVAL;
		}
		if (o + 1 >= n)
			return -EINVAL;
		out[o++] = (char)c;
	}
	return -EINVAL;
}

static int num(struct jp *p, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	size_t start;

	ws(p);
	start = p->pos;
	while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') {
		v = v * 10 + (uint64_t)(p->s[p->pos++] - '0');
		if (v > max)
			return -ERANGE;
	}
	if (p->pos == start || p->pos - start > 1 + (p->s[start] != '0') * 19)
		return -EINVAL;
	if (p->s[start] == '0' && p->pos - start > 1)
		return -EINVAL;	/* no leading zeros */
	*out = v;
	return 0;
}

int fleet_req_parse(const char *s, size_t len, struct vmt_fleet_req *out)
{
	struct jp p = { .s = s, .len = len };
	unsigned seen = 0;
	char key[16];

	memset(out, 0, sizeof(*out));
	if (len > 1024)
		return -E2BIG;
	if (memchr(s, 0, len))
		return -EINVAL;
	if (lit(&p, '{') < 0)
		return -EINVAL;
	ws(&p);
	if (p.pos < len && s[p.pos] == '}') {
		p.pos++;
		goto end;
	}
	for (;;) {
		unsigned bit;
		int r;

		if (str(&p, key, sizeof(key)) < 0 || lit(&p, ':') < 0)
			return -EINVAL;
		if (!strcmp(key, "reason")) {
			bit = 1;
			r = str(&p, out->reason, sizeof(out->reason));
		} else if (!strcmp(key, "window")) {
			bit = 2;
			r = num(&p, WINDOW_MAX_S, &out->window_s);
		} else if (!strcmp(key, "post")) {
			bit = 4;
			r = num(&p, WINDOW_MAX_S, &out->post_s);
		} else {
			return -EINVAL;
		}
		if (r < 0)
			return r;	/* -ERANGE: a number past 3600 s, told apart */
		if (seen & bit)
			return -EINVAL;
		seen |= bit;
		ws(&p);
		if (p.pos < len && s[p.pos] == ',') {
			p.pos++;
			continue;
		}
		if (lit(&p, '}') < 0)
			return -EINVAL;
		break;
	}
end:
	ws(&p);
	return p.pos == len ? 0 : -EINVAL;
}

int fleet_json_escape(char *out, size_t n, const char *s)
{
	size_t o = 0;

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		char tmp[8];
		const char *w = tmp;

		if (c == '"' || c == '\\')
			snprintf(tmp, sizeof(tmp), "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			snprintf(tmp, sizeof(tmp), "\\u%04x", c);
		else
			tmp[0] = (char)c, tmp[1] = 0;
		if (o + strlen(w) + 1 > n)
			return -ENOSPC;
		memcpy(out + o, w, strlen(w));
		o += strlen(w);
	}
	out[o] = 0;
	return 0;
}
