/* SPDX-License-Identifier: MIT */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <syslog.h>
#ifdef VMT_HAVE_JOURNAL
#include <systemd/sd-journal.h>
#endif

#include "log.h"

static int max_level = VMT_LOG_INFO;
static const char *ident = "vmtraced";
static int use_journal;

void log_set_level(int level) { max_level = level; }
int log_get_level(void) { return max_level; }
void log_set_ident(const char *id) { ident = id; }

void log_open_journal(void)
{
#ifdef VMT_HAVE_JOURNAL
	use_journal = 1;
#endif
}

void log_close_journal(void)
{
	use_journal = 0;
}

static const char *level_name(int level)
{
	switch (level) {
	case VMT_LOG_ERR: return "error";
	case VMT_LOG_WARNING: return "warning";
	case VMT_LOG_NOTICE: return "notice";
	case VMT_LOG_INFO: return "info";
	default: return "debug";
	}
}

/* Expand %m against err (glibc expands %m from errno; set it explicitly). */
int log_fullv(int level, int err, const char *const *fields, const char *fmt, va_list ap)
{
	char msg[2048];
	int saved = errno;

	if (err < 0)
		err = -err;
	if (level > max_level)
		return -err;
	errno = err;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	errno = saved;

#ifdef VMT_HAVE_JOURNAL
	if (use_journal) {
		struct iovec iov[16];
		char prio[32], mbuf[2100];
		int n = 0;

		snprintf(prio, sizeof(prio), "PRIORITY=%d", level);
		snprintf(mbuf, sizeof(mbuf), "MESSAGE=%s", msg);
		iov[n++] = (struct iovec){ mbuf, strlen(mbuf) };
		iov[n++] = (struct iovec){ prio, strlen(prio) };
		for (; fields && *fields && n < 16; fields++)
			iov[n++] = (struct iovec){ (void *)*fields, strlen(*fields) };
		sd_journal_sendv(iov, n);
		return -err;
	}
#else
	(void)fields;
	(void)use_journal;
#endif
	fprintf(stderr, "%s: %s: %s\n", ident, level_name(level), msg);
	return -err;
}

int log_full(int level, int err, const char *const *fields, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = log_fullv(level, err, fields, fmt, ap);
	va_end(ap);
	return r;
}

int log_guest(int level, int err, const char *guest, const char *fmt, ...)
{
	char buf[1800], field[128];
	const char *fields[2] = { field, NULL };
	int saved = errno;
	va_list ap;

	if (err > 0)
		err = -err;
	if (level > max_level)
		return err;
	errno = -err;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	errno = saved;
	snprintf(field, sizeof(field), "GUEST=%s", guest);
	return log_full(level, err, fields, "guest %s: %s", guest, buf);
}
