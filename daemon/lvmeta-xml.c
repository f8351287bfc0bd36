/* SPDX-License-Identifier: MIT */
/*
 * lvmeta-xml: a domain's labels element, as virDomainGetMetadata() gives
 * it, into "k=v,k=v". libvirt gives the element back without its
 * namespace (the caller named it), so the root is <labels> in no namespace
 * or in ours. libxml2 reads it with no network, no DTD loaded and
 * no entity substituted; a document with a DTD at all is refused before
 * that (nothing of ours needs one, and an internal subset is where entity
 * bombs live). Children of the root are <label key= value=/> elements, in
 * no namespace (what `virsh metadata --key vmtrace --set '<labels>...'`
 * stores) or in ours; anything else in it is refused rather than skipped,
 * so a typo shows instead of a label silently missing.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lvmeta-dl.h"	/* libvirt, libxml2: loaded when a guest needs them */

#include "config.h"
#include "lvmeta.h"

static int why_set(char *why, size_t n, int r, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int why_set(char *why, size_t n, int r, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, n, fmt, ap);
	va_end(ap);
	return r;
}

/* s for a log line: quoted, at most 40 bytes, what is not printable ASCII as '?' */
static const char *shown(char buf[48], const xmlChar *s)
{
	size_t o = 0;

	buf[o++] = '"';
	for (; s && *s && o < 41; s++)
		buf[o++] = *s >= 0x20 && *s < 0x7f ? (char)*s : '?';
	if (s && *s)
		buf[o - 1] = '+';	/* cut */
	buf[o++] = '"';
	buf[o] = 0;
	return buf;
}

static bool is_blank(const xmlChar *s)
{
	for (; s && *s; s++)
		if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r')
			return false;
	return true;
}

static bool ours(const xmlNode *n, bool none_too)
{
	if (!n->ns)
		return none_too;
	return n->ns->href && !strcmp((const char *)n->ns->href, VMT_LVMETA_NS);
}

/* One <label key= value=/>: checked and appended to out at *o. */
static int one_label(const xmlNode *e, unsigned idx, char *out, size_t n, size_t *o, char *why,
		     size_t why_len)
{
	const xmlChar *key = NULL, *value = NULL;
	char a[48], b[48];
	int k;

	for (const xmlAttr *at = e->properties; at; at = at->next) {
		const xmlChar **dst = NULL;

		if (!at->ns && !strcmp((const char *)at->name, "key"))
			dst = &key;
		else if (!at->ns && !strcmp((const char *)at->name, "value"))
			dst = &value;
		if (!dst)
			return why_set(why, why_len, -EINVAL, "label %u: attribute %s (only key and value)",
				       idx, shown(a, at->name));
		/* one text child: an attribute value with no entity left in it */
		if (!at->children || at->children->next || at->children->type != XML_TEXT_NODE)
			return why_set(why, why_len, -EINVAL, "label %u: %s is not plain text", idx,
				       shown(a, at->name));
		*dst = at->children->content;
	}
	if (!key || !value)
		return why_set(why, why_len, -EINVAL, "label %u: needs a key and a value", idx);
	for (const xmlNode *c = e->children; c; c = c->next)
		if (c->type != XML_TEXT_NODE || !is_blank(c->content))
			return why_set(why, why_len, -EINVAL, "label %u: holds more than its attributes",
				       idx);
	/* the configuration's rule for labels, the same function */
	if (!config_label_token_valid((const char *)key) || !config_label_token_valid((const char *)value))
		return why_set(why, why_len, -EINVAL,
			       "label %u: %s=%s: a key and a value are each one NATS subject token "
			       "([A-Za-z0-9_-], 1 to %d bytes)", idx, shown(a, key), shown(b, value),
			       VMT_FLEET_TOKEN_MAX);
	/* a key twice: which value would a label dump mean? */
	for (const char *p = out; *p;) {
		size_t kl = strcspn(p, "=");

		if (kl == strlen((const char *)key) && !strncmp(p, (const char *)key, kl))
			return why_set(why, why_len, -EINVAL, "label %u: key %s given twice", idx,
				       shown(a, key));
		p += strcspn(p, ",");
		p += *p == ',';
	}
	k = snprintf(out + *o, n - *o, "%s%s=%s", *o ? "," : "", key, value);
	if (k < 0 || (size_t)k >= n - *o)
		return why_set(why, why_len, -E2BIG, "more than %zu bytes of labels", n - 1);
	*o += (size_t)k;
	return 0;
}

static int parse_doc(const xmlDoc *doc, char *out, size_t n, char *why, size_t why_len)
{
	const xmlNode *root = xmlDocGetRootElement(doc);
	unsigned count = 0;
	size_t o = 0;
	char a[48];
	int r;

	if (doc->intSubset || doc->extSubset)
		return why_set(why, why_len, -EINVAL, "a DTD");
	if (!root || strcmp((const char *)root->name, "labels") || !ours(root, true))
		return why_set(why, why_len, -EINVAL, "the element is not <labels> (of %s)",
			       VMT_LVMETA_NS);
	for (const xmlNode *c = root->children; c; c = c->next) {
		if (c->type == XML_COMMENT_NODE || (c->type == XML_TEXT_NODE && is_blank(c->content)))
			continue;
		if (c->type != XML_ELEMENT_NODE || strcmp((const char *)c->name, "label") ||
		    !ours(c, true))
			return why_set(why, why_len, -EINVAL, "<labels> holds %s%s (only <label>)",
				       c->type == XML_ELEMENT_NODE ? "element " : "",
				       c->type == XML_ELEMENT_NODE ? shown(a, c->name) : "other than elements");
		if (++count > VMT_LVMETA_LABELS_MAX)
			return why_set(why, why_len, -E2BIG, "more than %d labels",
				       VMT_LVMETA_LABELS_MAX);
		r = one_label(c, count, out, n, &o, why, why_len);
		if (r < 0)
			return r;
	}
	return 0;
}

int lvmeta_parse(const char *xml, size_t len, char *out, size_t n, char *why, size_t why_len)
{
	xmlParserCtxtPtr ctx;
	xmlDocPtr doc;
	int r;

	if (!n)
		return -EINVAL;
	out[0] = 0;
	if (len > VMT_LVMETA_XML_MAX)
		return why_set(why, why_len, -E2BIG, "%zu bytes, more than %d", len, VMT_LVMETA_XML_MAX);
	if (memchr(xml, 0, len))
		return why_set(why, why_len, -EINVAL, "a NUL byte");
	if (memmem(xml, len, "<!DOCTYPE", 9) || memmem(xml, len, "<!ENTITY", 8))
		return why_set(why, why_len, -EINVAL, "a DTD");
	ctx = xmlNewParserCtxt();
	if (!ctx)
		return why_set(why, why_len, -ENOMEM, "out of memory");
	/* no XML_PARSE_NOENT (entities stay references), no DTDLOAD/DTDATTR,
	 * no network; errors are ours to say, not libxml2's on stderr */
	doc = xmlCtxtReadMemory(ctx, xml, (int)len, "metadata.xml", "UTF-8",
				XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING |
				XML_PARSE_NOCDATA);
	if (!doc) {
		const xmlError *e = xmlCtxtGetLastError(ctx);
		char line[120] = "";

		if (e && e->message)
			snprintf(line, sizeof(line), "%s", e->message);
		line[strcspn(line, "\n")] = 0;
		for (char *q = line; *q; q++)
			if ((unsigned char)*q < 0x20 || (unsigned char)*q >= 0x7f)
				*q = '?';
		xmlFreeParserCtxt(ctx);
		return why_set(why, why_len, -EINVAL, "not XML%s%s", line[0] ? ": " : "", line);
	}
	r = parse_doc(doc, out, n, why, why_len);
	if (r < 0)
		out[0] = 0;
	xmlFreeDoc(doc);
	xmlFreeParserCtxt(ctx);
	return r;
}
