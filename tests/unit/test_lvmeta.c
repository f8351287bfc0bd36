/* SPDX-License-Identifier: MIT */
/*
 * lvmeta-xml: a libvirt domain's labels element into "k=v,k=v". The
 * metadata is the host admin's, but read as untrusted input: what is not
 * the element, a key or value the configuration would refuse, a DTD or an
 * entity, a document over 4 KiB or more than 16 labels is refused with a
 * reason, and no input makes it read a file or the network, or crash.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "lvmeta.h"
#include "testutil.h"
#include "util.h"

#define NS "xmlns:vmtrace=\"" VMT_LVMETA_NS "\""

static char out[VMT_LABELS_MAX], why[200];

static int parse(const char *s)
{
	why[0] = 0;
	return lvmeta_parse(s, strlen(s), out, sizeof(out), why, sizeof(why));
}

START_TEST(libvirt_forms)
{
	/* as virDomainGetMetadata() gives back what `virsh metadata --key
	 * vmtrace --set '<labels>...'` stored (libvirt 9.0): no namespace */
	ck_assert_int_eq(parse("<labels>\n  <label key=\"tenant\" value=\"blue\"/>\n</labels>\n"), 0);
	ck_assert_str_eq(out, "tenant=blue");
	/* as the domain's XML writes it: the root in our namespace, the
	 * children in none */
	ck_assert_int_eq(parse("<vmtrace:labels " NS ">\n  <label key=\"tenant\" value=\"blue\"/>\n"
			       "  <label key=\"rack\" value=\"r-12_a\"/>\n</vmtrace:labels>\n"), 0);
	ck_assert_str_eq(out, "tenant=blue,rack=r-12_a");
	/* any prefix, a default namespace, children in ours, a comment */
	ck_assert_int_eq(parse("<x:labels xmlns:x=\"" VMT_LVMETA_NS "\"><x:label key=\"a\" value=\"b\">"
			       "</x:label><!-- note --></x:labels>"), 0);
	ck_assert_str_eq(out, "a=b");
	ck_assert_int_eq(parse("<labels xmlns=\"" VMT_LVMETA_NS "\"><label value='2' key='k'/></labels>"), 0);
	ck_assert_str_eq(out, "k=2");
	/* no label: none */
	ck_assert_int_eq(parse("<vmtrace:labels " NS "/>"), 0);
	ck_assert_str_eq(out, "");
	ck_assert_int_eq(parse("<?xml version=\"1.0\"?><vmtrace:labels " NS "> </vmtrace:labels>"), 0);
	ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(the_configs_rules)
{
	char xml[4096];
	size_t o;

	static const char *bad[] = {
		"<vmtrace:labels " NS "><label key=\"te nant\" value=\"b\"/></vmtrace:labels>",
		"<vmtrace:labels " NS "><label key=\"a.b\" value=\"b\"/></vmtrace:labels>",
		"<vmtrace:labels " NS "><label key=\"a\" value=\"*\"/></vmtrace:labels>",
		"<vmtrace:labels " NS "><label key=\"a\" value=\"&gt;\"/></vmtrace:labels>",
		"<vmtrace:labels " NS "><label key=\"\" value=\"b\"/></vmtrace:labels>",
		"<vmtrace:labels " NS "><label key=\"a\" value=\"\"/></vmtrace:labels>",
		"<vmtrace:labels " NS "><label key=\"\xc3\xa9t\xc3\xa9\" value=\"b\"/></vmtrace:labels>",
		"<vmtrace:labels " NS "><label key=\"a\" value=\"b\x01\"/></vmtrace:labels>",
		"<vmtrace:labels " NS "><label key=\"a\"/></vmtrace:labels>",
		"<vmtrace:labels " NS "><label value=\"a\"/></vmtrace:labels>",
		"<vmtrace:labels " NS "><label key=\"a\" value=\"b\" x=\"c\"/></vmtrace:labels>",
		"<vmtrace:labels " NS "><label key=\"a\" vmtrace:value=\"b\"/></vmtrace:labels>",
		"<vmtrace:labels " NS "><label key=\"a\" value=\"b\">text</label></vmtrace:labels>",
		"<vmtrace:labels " NS "><label key=\"a\" value=\"b\"><label key=\"c\" value=\"d\"/></label></vmtrace:labels>",
		"<vmtrace:labels " NS "><label key=\"a\" value=\"b\"/><label key=\"a\" value=\"c\"/></vmtrace:labels>",
		"<vmtrace:labels " NS "><tag key=\"a\" value=\"b\"/></vmtrace:labels>",
		"<vmtrace:labels " NS ">text</vmtrace:labels>",
		"<vmtrace:labels " NS "><![CDATA[<label key=\"a\" value=\"b\"/>]]></vmtrace:labels>",
		"<vmtrace:labels " NS "><?pi data?></vmtrace:labels>",
		"<vmtrace:labels " NS "><o:label xmlns:o=\"urn:other\" key=\"a\" value=\"b\"/></vmtrace:labels>",
		/* not our element */
		"<o:labels xmlns:o=\"urn:other\"><label key=\"a\" value=\"b\"/></o:labels>",
		"<labels xmlns=\"urn:other\"/>",
		"<o:labels xmlns:o=\"https://vmtrace.dev/xmlns/labels/2\"/>",
		"<vmtrace:label " NS " key=\"a\" value=\"b\"/>",
		/* not XML */
		"", "   ", "labels", "<vmtrace:labels " NS ">", "<vmtrace:labels " NS "></labels>",
		"<vmtrace:labels " NS "/><again/>", "<vmtrace:labels " NS "><label key=\"a\" value=\"b\">",
		"<vmtrace:labels " NS ">&undefined;</vmtrace:labels>",
		"\xff\xfe<\0l\0",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		ck_assert_msg(parse(bad[i]) < 0, "accepted %s as %s", bad[i], out);
		ck_assert_str_eq(out, "");
		ck_assert_msg(why[0], "no reason for %s", bad[i]);
		for (const char *q = why; *q; q++)
			ck_assert_msg(*q >= 0x20 && *q < 0x7f, "unprintable reason for %s: %s", bad[i], why);
	}
	/* a key of 64 bytes is one, of 65 is not */
	o = (size_t)snprintf(xml, sizeof(xml), "<vmtrace:labels " NS "><label key=\"");
	memset(xml + o, 'k', 64);
	snprintf(xml + o + 64, sizeof(xml) - o - 64, "\" value=\"v\"/></vmtrace:labels>");
	ck_assert_int_eq(parse(xml), 0);
	memset(xml + o, 'k', 65);
	snprintf(xml + o + 65, sizeof(xml) - o - 65, "\" value=\"v\"/></vmtrace:labels>");
	ck_assert_int_eq(parse(xml), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "\"kkkk"));
	ck_assert_ptr_nonnull(strstr(why, "+\""));	/* shown cut */
}
END_TEST

START_TEST(bounds)
{
	char xml[8192], big[VMT_LVMETA_XML_MAX + 2];
	size_t o;

	/* 16 short labels fit, 17 do not */
	o = (size_t)snprintf(xml, sizeof(xml), "<vmtrace:labels " NS ">");
	for (int i = 0; i < VMT_LVMETA_LABELS_MAX; i++)
		o += (size_t)snprintf(xml + o, sizeof(xml) - o, "<label key=\"k%d\" value=\"v\"/>", i);
	snprintf(xml + o, sizeof(xml) - o, "</vmtrace:labels>");
	ck_assert_int_eq(parse(xml), 0);
	ck_assert_ptr_nonnull(strstr(out, ",k15=v"));
	snprintf(xml + o, sizeof(xml) - o, "<label key=\"k99\" value=\"v\"/></vmtrace:labels>");
	ck_assert_int_eq(parse(xml), -E2BIG);
	/* what does not fit the 255 bytes a guest's labels have */
	o = (size_t)snprintf(xml, sizeof(xml), "<vmtrace:labels " NS ">");
	for (int i = 0; i < 4; i++)
		o += (size_t)snprintf(xml + o, sizeof(xml) - o,
				      "<label key=\"k%d%060d\" value=\"v%062d\"/>", i, 0, 0);
	snprintf(xml + o, sizeof(xml) - o, "</vmtrace:labels>");
	ck_assert_int_eq(parse(xml), -E2BIG);
	ck_assert_str_eq(out, "");
	/* over 4 KiB, even of blanks, is refused before it is parsed */
	memset(big, ' ', sizeof(big));
	ck_assert_int_eq(lvmeta_parse(big, sizeof(big), out, sizeof(out), why, sizeof(why)), -E2BIG);
	memcpy(big, "<vmtrace:labels " NS "/>", strlen("<vmtrace:labels " NS "/>"));
	ck_assert_int_eq(lvmeta_parse(big, VMT_LVMETA_XML_MAX, out, sizeof(out), why, sizeof(why)), 0);
	/* a NUL inside */
	ck_assert_int_eq(lvmeta_parse("<a/>\0<b/>", 9, out, sizeof(out), why, sizeof(why)), -EINVAL);
	/* a small out */
	{
		static const char one[] = "<vmtrace:labels " NS "><label key=\"abc\" value=\"def\"/>"
					  "</vmtrace:labels>";

		ck_assert_int_eq(lvmeta_parse(one, sizeof(one) - 1, out, 4, why, sizeof(why)), -E2BIG);
	}
}
END_TEST

/* Entities, DTDs and XInclude read nothing and expand nothing. */
START_TEST(hostile)
{
	static const char *bad[] = {
		/* a billion laughs */
		"<?xml version=\"1.0\"?><!DOCTYPE l [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">"
		"<!ENTITY c \"&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;\"><!ENTITY d \"&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;\">]>"
		"<vmtrace:labels " NS "><label key=\"&d;\" value=\"v\"/></vmtrace:labels>",
		/* an external entity */
		"<!DOCTYPE l [<!ENTITY x SYSTEM \"file:///etc/passwd\">]><vmtrace:labels " NS ">"
		"<label key=\"a\" value=\"&x;\"/></vmtrace:labels>",
		"<!DOCTYPE l SYSTEM \"http://127.0.0.1:9/l.dtd\"><vmtrace:labels " NS "/>",
		/* the doctype spelled so the quick look misses it: the parser's
		 * document still says it has one */
		"<!doctype l><vmtrace:labels " NS "/>",
		"<vmtrace:labels " NS " xmlns:xi=\"http://www.w3.org/2001/XInclude\">"
		"<xi:include href=\"/etc/passwd\" parse=\"text\"/></vmtrace:labels>",
		"<vmtrace:labels " NS "><label key=\"a\" value=\"&#0;\"/></vmtrace:labels>",
		"<vmtrace:labels " NS "><label key=\"a\" value=\"&#x41;\"/><label key=\"b\" value=\"&#10;\"/></vmtrace:labels>",
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		ck_assert_msg(parse(bad[i]) < 0, "accepted %zu: %s", i, out);
	/* deep nesting, within the size: refused, no recursion trouble */
	{
		char xml[VMT_LVMETA_XML_MAX];
		size_t o = (size_t)snprintf(xml, sizeof(xml), "<vmtrace:labels " NS ">");

		while (o + 3 < sizeof(xml))
			o += (size_t)snprintf(xml + o, sizeof(xml) - o, "<a>");
		ck_assert_int_lt(lvmeta_parse(xml, o, out, sizeof(out), why, sizeof(why)), 0);
	}
}
END_TEST

/* Random bytes and random cuts of a good element: refused or parsed,
 * never a crash (ASan and UBSan watch). */
START_TEST(random_inputs)
{
	static const char good[] = "<vmtrace:labels " NS "><label key=\"tenant\" value=\"blue\"/>"
				   "<label key=\"rack\" value=\"r1\"/></vmtrace:labels>";
	char buf[600];
	unsigned seed = 42;

	for (int i = 0; i < 3000; i++) {
		size_t len = (size_t)(rand_r(&seed) % (int)sizeof(buf));

		if (i % 2) {
			for (size_t k = 0; k < len; k++)
				buf[k] = (char)rand_r(&seed);
		} else {
			len = (size_t)(rand_r(&seed) % (int)sizeof(good));
			memcpy(buf, good, len);
			if (len)
				buf[rand_r(&seed) % (int)len] = (char)rand_r(&seed);
		}
		if (lvmeta_parse(buf, len, out, sizeof(out), why, sizeof(why)) == 0)
			ck_assert(strlen(out) < sizeof(out));
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("lvmeta");
	TCase *t = tcase_create("lvmeta");

	/* the parser calls libxml2 through lvmeta-dl.c's table, as the daemon does */
	if (lvmeta_dl_open(false, why, sizeof(why)) < 0) {
		fprintf(stderr, "%s\n", why);
		return 1;
	}
	TEST_ADD(t, libvirt_forms);
	TEST_ADD(t, the_configs_rules);
	TEST_ADD(t, bounds);
	TEST_ADD(t, hostile);
	TEST_ADD(t, random_inputs);
	suite_add_tcase(s, t);
	return test_run_suite(s);
}
