/* SPDX-License-Identifier: MIT */
/*
 * The control protocol's schema (lib/ctlproto.h): its tables, the check
 * both ends and the fuzz target use, the typed writers (the same bytes as
 * before them: old vmtracectl and new daemon talk), and docs/PROTOCOL.md's
 * control-socket tables, which must list exactly the schema.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctlproto.h"
#include "testutil.h"
#include "util.h"
#include "tlv.h"
#include "vfile.h"

static const char *kind_name(enum vmt_ctl_kind k)
{
	switch (k) {
	case VMT_CTK_I32: return "i32";
	case VMT_CTK_U32: return "u32";
	case VMT_CTK_U64: return "u64";
	case VMT_CTK_STR: return "str";
	case VMT_CTK_NONE: break;
	}
	return NULL;
}

START_TEST(test_tables)
{
	unsigned n = 0;

	ck_assert_ptr_null(ctl_tag_name(0));
	ck_assert_ptr_null(ctl_tag_name(VMT_CTAG_LIMIT));
	ck_assert_int_eq(ctl_tag_kind(VMT_CTAG_LIMIT), VMT_CTK_NONE);
	ck_assert_int_eq(ctl_tag_kind(65535), VMT_CTK_NONE);
	for (unsigned t = 1; t < VMT_CTAG_LIMIT; t++) {
		ck_assert_msg(ctl_tag_name(t) && kind_name(ctl_tag_kind(t)), "tag %u: a gap", t);
		n++;
	}
	ck_assert_uint_eq(n, VMT_CTAG_LIMIT - 1);
	ck_assert_str_eq(ctl_tag_name(VMT_CTAG_ERRNO), "ERRNO");
	ck_assert_int_eq(ctl_tag_kind(VMT_CTAG_ERRNO), VMT_CTK_I32);
	ck_assert_int_eq(ctl_tag_kind(VMT_CTAG_GUEST), VMT_CTK_STR);
	ck_assert_str_eq(ctl_msg_sender(VMT_CTL_DUMP), "client");
	ck_assert_str_eq(ctl_msg_sender(VMT_CTL_DETECTOR), "daemon");
	ck_assert_ptr_null(ctl_msg_sender(7));
	ck_assert(ctl_msg_allows(VMT_CTL_DUMP, VMT_CTAG_POST_NS));
	ck_assert(!ctl_msg_allows(VMT_CTL_DUMP, VMT_CTAG_PATH));
	ck_assert(!ctl_msg_allows(VMT_CTL_END, VMT_CTAG_MESSAGE));
	ck_assert(!ctl_msg_allows(7, VMT_CTAG_GUEST));
	ck_assert(!ctl_msg_allows(VMT_CTL_GUEST, 0));
}
END_TEST

/* The typed writers put what tlv_put_* did: the wire is unchanged. */
START_TEST(test_typed_writers_same_bytes)
{
	static const uint8_t error_msg[] = {
		0x56, 0x4d, 0x54, 0x43, 1, 0, 100, 0, 22, 0, 0, 0, 9, 0, 0, 0,	/* header */
		1, 0, 0, 0, 4, 0, 0, 0, 16, 0, 0, 0,				/* ERRNO 16 */
		2, 0, 0, 0, 2, 0, 0, 0, 'n', 'o',				/* MESSAGE "no" */
	};
	struct vmt_buf a = { 0 }, b = { 0 };

	ck_assert_int_eq(ctl_msg_begin(&a, VMT_CTL_ERROR, 9), 0);
	ctl_put_ERRNO(&a, EBUSY);
	ctl_put_MESSAGE(&a, "no");
	ck_assert_int_eq(ctl_msg_end(&a), 0);
	ck_assert_uint_eq(a.len, sizeof(error_msg));
	ck_assert_mem_eq(a.data, error_msg, sizeof(error_msg));

	ctl_msg_begin(&a, VMT_CTL_GUEST, 3);
	ctl_put_GUEST(&a, "web1");
	ctl_put_NCPUS(&a, 4);
	ctl_put_PAGES(&a, 1ull << 40);
	ctl_msg_end(&a);
	ctl_msg_begin(&b, VMT_CTL_GUEST, 3);
	tlv_put_str(&b, VMT_CTAG_GUEST, "web1");
	tlv_put_u32(&b, VMT_CTAG_NCPUS, 4);
	tlv_put_u64(&b, VMT_CTAG_PAGES, 1ull << 40);
	ctl_msg_end(&b);
	ck_assert_uint_eq(a.len, b.len);
	ck_assert_mem_eq(a.data, b.data, a.len);
	buf_free(&a);
	buf_free(&b);
}
END_TEST

static int check(struct vmt_buf *b, unsigned *bad)
{
	*bad = 0;
	return ctl_msg_check(get_le16(b->data + 6), b->data + VMT_CTL_HDR_SIZE,
			     b->len - VMT_CTL_HDR_SIZE, bad);
}

START_TEST(test_check)
{
	struct vmt_buf b = { 0 };
	unsigned bad;

	ctl_msg_begin(&b, VMT_CTL_DUMP, 1);
	ctl_put_GUEST(&b, "a");
	ctl_put_GUEST(&b, "b");
	ctl_put_WINDOW_NS(&b, 5);
	ck_assert_int_eq(check(&b, &bad), 0);
	ctl_put_PATH(&b, "/x");		/* not a DUMP's */
	ck_assert_int_eq(check(&b, &bad), -EPROTO);
	ck_assert_uint_eq(bad, VMT_CTAG_PATH);

	ctl_msg_begin(&b, VMT_CTL_DUMP, 1);
	tlv_put_u32(&b, VMT_CTAG_WINDOW_NS, 5);	/* a u64 put short */
	ck_assert_int_eq(check(&b, &bad), -EBADMSG);

	ctl_msg_begin(&b, VMT_CTL_DUMP, 1);
	tlv_put(&b, VMT_CTAG_REASON, "a\0b", 3);	/* a NUL inside a string */
	ck_assert_int_eq(check(&b, &bad), -EBADMSG);

	ctl_msg_begin(&b, VMT_CTL_GUEST, 1);
	tlv_put_u32(&b, VMT_CTAG_LIMIT, 1);	/* a newer peer's tag */
	ck_assert_int_eq(check(&b, &bad), -EPROTO);
	ck_assert_uint_eq(bad, VMT_CTAG_LIMIT);

	ctl_msg_begin(&b, VMT_CTL_END, 1);
	ck_assert_int_eq(check(&b, &bad), 0);
	ck_assert_int_eq(ctl_msg_check(VMT_CTL_END, (const uint8_t *)"\1\0\0\0\4", 5, NULL), -EBADMSG);
	buf_free(&b);
}
END_TEST

/* ---- docs/PROTOCOL.md ---------------------------------------------------- */

static char *doc_section(void)
{
	char path[4096];
	FILE *f;
	char *text, *s;
	long n;

	snprintf(path, sizeof(path), "%s/docs/PROTOCOL.md", test_srcdir());
	f = fopen(path, "r");
	ck_assert_msg(f, "%s: %s", path, strerror(errno));
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	text = malloc((size_t)n + 1);
	ck_assert_ptr_nonnull(text);
	ck_assert_uint_eq(fread(text, 1, (size_t)n, f), (size_t)n);
	text[n] = 0;
	fclose(f);
	s = strstr(text, "\n## Control socket");
	ck_assert_msg(s, "no control socket section in %s", path);
	memmove(text, s, strlen(s) + 1);
	return text;
}

/* The cells of a table row "| a | b | c |", trimmed; their number. */
static unsigned cells(char *line, char **cell, unsigned max)
{
	unsigned n = 0;
	char *p = line, *bar;

	if (*p != '|')
		return 0;
	p++;
	while (n < max && (bar = strchr(p, '|'))) {
		char *e = bar;

		*bar = 0;
		while (*p == ' ')
			p++;
		while (e > p && e[-1] == ' ')
			*--e = 0;
		cell[n++] = p;
		p = bar + 1;
	}
	return n;
}

/* The lines of the table whose header line is head, one after another. */
static char **table(const char *doc, const char *head, unsigned *nrows)
{
	const char *p = strstr(doc, head);
	char **rows = NULL;
	unsigned n = 0;

	ck_assert_msg(p, "PROTOCOL.md: no table \"%s\"", head);
	p = strchr(p, '\n') + 1;	/* the header */
	p = strchr(p, '\n') + 1;	/* |---| */
	while (*p == '|') {
		const char *e = strchrnul(p, '\n');

		rows = realloc(rows, (n + 1) * sizeof(*rows));
		rows[n++] = strndup(p, (size_t)(e - p));
		p = *e ? e + 1 : e;
	}
	*nrows = n;
	return rows;
}

/* The records cell's tags: the names outside parentheses, before "answer:". */
static void doc_tags(char *cell, bool seen[VMT_CTAG_LIMIT], const char *msg)
{
	char *answer = strstr(cell, "answer:");
	int depth = 0;

	if (answer)
		*answer = 0;
	for (char *p = cell; *p; p++) {
		if (*p == '(')
			depth++;
		else if (*p == ')')
			depth--;
		if (depth || *p == ')')
			*p = ' ';
	}
	for (char *p = cell; *p;) {
		char word[64];
		size_t n = 0;
		unsigned t;

		if (!isalnum((unsigned char)*p) && *p != '_') {
			p++;
			continue;
		}
		while ((isalnum((unsigned char)*p) || *p == '_') && n < sizeof(word) - 1)
			word[n++] = *p++;
		word[n] = 0;
		if (!isupper((unsigned char)word[0]))
			continue;	/* prose: "none", "and", "or" */
		for (t = 1; t < VMT_CTAG_LIMIT; t++)
			if (!strcmp(ctl_tag_name(t), word))
				break;
		ck_assert_msg(t < VMT_CTAG_LIMIT, "PROTOCOL.md: %s lists %s, not a tag", msg, word);
		ck_assert_msg(!seen[t], "PROTOCOL.md: %s lists %s twice", msg, word);
		seen[t] = true;
	}
}

START_TEST(test_doc_messages)
{
	char *doc = doc_section(), **rows;
	unsigned nrows, found = 0;

	rows = table(doc, "| type | name | sent by | records |", &nrows);
	for (unsigned i = 0; i < nrows; i++) {
		char *c[8];
		bool seen[VMT_CTAG_LIMIT] = { false };
		unsigned type;

		ck_assert_uint_eq(cells(rows[i], c, 8), 4);
		type = (unsigned)atoi(c[0]);
		ck_assert_msg(!strcmp(ctl_msg_name(type), c[1]),
			      "PROTOCOL.md: message %s is %s in the schema", c[0], ctl_msg_name(type));
		ck_assert_msg(!strcmp(ctl_msg_sender(type), c[2]), "PROTOCOL.md: %s is sent by %s",
			      c[1], ctl_msg_sender(type));
		doc_tags(c[3], seen, c[1]);
		for (unsigned t = 1; t < VMT_CTAG_LIMIT; t++)
			ck_assert_msg(seen[t] == ctl_msg_allows(type, t),
				      "PROTOCOL.md: %s %s %s, the schema %s", c[1],
				      seen[t] ? "lists" : "does not list", ctl_tag_name(t),
				      seen[t] ? "does not allow it" : "does");
		found++;
		free(rows[i]);
	}
	free(rows);
	/* and every message of the schema has its row (none twice: a row's
	 * type is checked above, so equal counts mean the same set) */
#define X(n, v, from, tags) +1
	ck_assert_uint_eq(found, 0 VMT_CTL_MESSAGES(X));
#undef X
	free(doc);
}
END_TEST

START_TEST(test_doc_tags)
{
	char *doc = doc_section(), **rows;
	unsigned nrows;

	rows = table(doc, "| tag | name | type |", &nrows);
	for (unsigned i = 0; i < nrows; i++) {
		char *c[4];
		unsigned t;

		ck_assert_uint_eq(cells(rows[i], c, 4), 3);
		t = (unsigned)atoi(c[0]);
		ck_assert_msg(t == i + 1, "PROTOCOL.md: tag row %u is %s, not %u", i + 1, c[0], i + 1);
		ck_assert_msg(ctl_tag_name(t) && !strcmp(ctl_tag_name(t), c[1]),
			      "PROTOCOL.md: tag %u is %s, in the schema %s", t, c[1], ctl_tag_name(t));
		ck_assert_msg(!strcmp(kind_name(ctl_tag_kind(t)), c[2]),
			      "PROTOCOL.md: tag %s is %s, in the schema %s", c[1], c[2],
			      kind_name(ctl_tag_kind(t)));
		free(rows[i]);
	}
	free(rows);
	ck_assert_msg(nrows == VMT_CTAG_LIMIT - 1, "PROTOCOL.md lists %u tags, the schema %u", nrows,
		      VMT_CTAG_LIMIT - 1);
	free(doc);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("ctlproto");
	TCase *tc = tcase_create("schema");

	tcase_add_test(tc, test_tables);
	tcase_add_test(tc, test_typed_writers_same_bytes);
	tcase_add_test(tc, test_check);
	tcase_add_test(tc, test_doc_messages);
	tcase_add_test(tc, test_doc_tags);
	suite_add_tcase(s, tc);
	return test_run_suite(s);
}
