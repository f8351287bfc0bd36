/* SPDX-License-Identifier: MIT */
/*
 * unitfilter UNIT PROG [ARG...]: run PROG under the system call filter the
 * SystemCallFilter= lines of the systemd unit file UNIT describe, as
 * systemd would put it on the service from its first instruction, so that
 * a test can run the real daemon under the shipped unit's list on a
 * machine without systemd as PID 1.
 *
 * The groups (@system-service, ...) are expanded by systemd-analyze
 * syscall-filter, systemd's own table for this version, not a copy of it.
 * Allow lines add, "~" lines take away (the first line must allow, as the
 * unit's does); a call outside the list kills the process (SIGSYS), as
 * with no SystemCallErrorNumber=.
 */
#include <ctype.h>
#include <errno.h>
#include <seccomp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct names {
	char **v;
	size_t n;
};

static void add(struct names *s, const char *name)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->v[i], name))
			return;
	s->v = realloc(s->v, (s->n + 1) * sizeof(*s->v));
	if (!s->v || !(s->v[s->n] = strdup(name))) {
		perror("unitfilter");
		exit(2);
	}
	s->n++;
}

static bool has(const struct names *s, const char *name)
{
	for (size_t i = 0; i < s->n; i++)
		if (!strcmp(s->v[i], name))
			return true;
	return false;
}

/* Every system call of item (a name, or a @group expanded, groups within
 * it too) into out; seen keeps each group expanded once. */
static int expand(const char *item, struct names *out, struct names *seen)
{
	char cmd[256], line[256];
	FILE *p;
	bool header = true;

	if (item[0] != '@') {
		add(out, item);
		return 0;
	}
	if (has(seen, item))
		return 0;
	add(seen, item);
	snprintf(cmd, sizeof(cmd), "systemd-analyze --no-pager syscall-filter '%s' 2>/dev/null",
		 item);
	p = popen(cmd, "r");
	if (!p)
		return -errno;
	while (fgets(line, sizeof(line), p)) {
		char *s = line, *e;

		while (isspace((unsigned char)*s))
			s++;
		e = s + strlen(s);
		while (e > s && isspace((unsigned char)e[-1]))
			*--e = 0;
		if (header) {	/* the group's own name first */
			header = false;
			continue;
		}
		if (!*s || *s == '#')
			continue;
		if (expand(s, out, seen) < 0)
			break;
	}
	if (pclose(p) != 0 || header) {
		fprintf(stderr, "unitfilter: systemd-analyze does not know %s\n", item);
		return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct names allow = { 0 }, deny = { 0 }, seen = { 0 };
	char line[4096];
	bool service = false, first = true;
	scmp_filter_ctx ctx;
	unsigned n = 0;
	FILE *f;

	if (argc < 3) {
		fprintf(stderr, "usage: unitfilter UNIT PROG [ARG...]\n");
		return 2;
	}
	f = fopen(argv[1], "r");
	if (!f) {
		perror(argv[1]);
		return 2;
	}
	while (fgets(line, sizeof(line), f)) {
		static const char key[] = "SystemCallFilter=";
		bool minus;
		char *s = line, *tok, *save;

		line[strcspn(line, "\n")] = 0;
		if (line[0] == '[')
			service = !strcmp(line, "[Service]");
		if (!service || strncmp(line, key, sizeof(key) - 1))
			continue;
		s += sizeof(key) - 1;
		minus = *s == '~';
		s += minus;
		if (first && minus) {
			fprintf(stderr, "unitfilter: a deny list first is not handled\n");
			return 2;
		}
		first = false;
		for (tok = strtok_r(s, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save))
			if (expand(tok, minus ? &deny : &allow, &seen) < 0)
				return 2;
	}
	fclose(f);
	if (!allow.n) {
		fprintf(stderr, "unitfilter: %s has no SystemCallFilter= in [Service]\n", argv[1]);
		return 2;
	}
	ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
	if (!ctx)
		return 2;
	for (size_t i = 0; i < allow.n; i++) {
		int nr;

		if (has(&deny, allow.v[i]))
			continue;
		nr = seccomp_syscall_resolve_name(allow.v[i]);
		if (nr == __NR_SCMP_ERROR)
			continue;	/* not on this architecture */
		if (seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0) < 0) {
			fprintf(stderr, "unitfilter: cannot allow %s\n", allow.v[i]);
			return 2;
		}
		n++;
	}
	if (seccomp_load(ctx) < 0) {
		fprintf(stderr, "unitfilter: cannot load the filter\n");
		return 2;
	}
	fprintf(stderr, "unitfilter: %u system calls allowed by %s\n", n, argv[1]);
	execvp(argv[2], argv + 2);
	perror(argv[2]);
	return 127;
}
