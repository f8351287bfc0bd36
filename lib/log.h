/* SPDX-License-Identifier: MIT */
/*
 * log: one logging path for every program. Messages go to stderr with a
 * level prefix, or to journald with structured fields once
 * log_open_journal() has been called. Helpers that take an error return it,
 * so a caller can write `return log_error_errno(r, "…: %m");`.
 */
#ifndef VMT_LOG_H
#define VMT_LOG_H

#include <errno.h>
#include <stdarg.h>

enum vmt_log_level {
	VMT_LOG_ERR = 3,
	VMT_LOG_WARNING = 4,
	VMT_LOG_NOTICE = 5,
	VMT_LOG_INFO = 6,
	VMT_LOG_DEBUG = 7,
};

void log_set_level(int level);
int log_get_level(void);
void log_set_ident(const char *ident);
/* Send messages to journald (fields GUEST=, REASON=, SAMPLE= when given). */
void log_open_journal(void);
/* Back to stderr (a child that closed the journal's socket). */
void log_close_journal(void);

/* fields: NULL or "KEY=value" strings terminated by NULL */
int log_fullv(int level, int err, const char *const *fields, const char *fmt, va_list ap)
	__attribute__((format(printf, 4, 0)));
int log_full(int level, int err, const char *const *fields, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* %m in fmt expands to strerror(-err); the negative errno is returned. */
#define log_error_errno(err, ...)   log_full(VMT_LOG_ERR, (err), NULL, __VA_ARGS__)
#define log_warning_errno(err, ...) log_full(VMT_LOG_WARNING, (err), NULL, __VA_ARGS__)
#define log_error(...)   ((void)log_full(VMT_LOG_ERR, 0, NULL, __VA_ARGS__))
#define log_warning(...) ((void)log_full(VMT_LOG_WARNING, 0, NULL, __VA_ARGS__))
#define log_notice(...)  ((void)log_full(VMT_LOG_NOTICE, 0, NULL, __VA_ARGS__))
#define log_info(...)    ((void)log_full(VMT_LOG_INFO, 0, NULL, __VA_ARGS__))
#define log_debug(...)   ((void)log_full(VMT_LOG_DEBUG, 0, NULL, __VA_ARGS__))

/* Per-guest variants: prefix "guest NAME: " and add GUEST=NAME to the journal. */
int log_guest(int level, int err, const char *guest, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
