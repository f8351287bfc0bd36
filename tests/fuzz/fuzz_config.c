/* SPDX-License-Identifier: MIT */
/*
 * The configuration (lib/config.h): config_load_string() on the input as
 * YAML text (no NUL needed: it gets exactly len bytes), then config_free().
 * A config that loads is printed in normalized form (config_print(), what
 * `vmtraced -n -v` shows); that text must load again and print the same.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "fuzz.h"

static char *print(const struct vmt_config *c, size_t *len)
{
	char *out = NULL;
	FILE *f = open_memstream(&out, len);

	if (!f)
		abort();
	config_print(c, f);
	if (fclose(f))
		abort();
	return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size ? size : 1), *p1, *p2;
	struct vmt_config c, c2;
	char err[512];
	size_t l1, l2;
	int r;

	if (!text)
		abort();
	memcpy(text, data, size);
	err[0] = 0;
	r = config_load_string(&c, "fuzz.yaml", text, size, err, sizeof(err));
	free(text);
	FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ENOMEM);
	if (r < 0) {
		FUZZ_CHECK(err[0] && !strchr(err, '\n'));
		config_free(&c);	/* harmless on a failed load: c is as config_init() leaves it */
		return 0;
	}
	p1 = print(&c, &l1);
	config_free(&c);

	r = config_load_string(&c2, "normalized.yaml", p1, l1, err, sizeof(err));
	if (r < 0)
		fprintf(stderr, "normalized config does not load: %s\n---\n%s---\n", err, p1);
	FUZZ_CHECK(r == 0);
	p2 = print(&c2, &l2);
	config_free(&c2);
	if (l1 != l2 || memcmp(p1, p2, l1))
		fprintf(stderr, "normalized config prints differently:\n%s---\n%s---\n", p1, p2);
	FUZZ_CHECK(l1 == l2 && !memcmp(p1, p2, l1));
	free(p1);
	free(p2);
	return 0;
}
