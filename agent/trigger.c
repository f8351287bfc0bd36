/* SPDX-License-Identifier: MIT */
/*
 * trigger: local requests and kernel oops lines -> TRIGGER, rate-limited.
 *
 * The request socket is SOCK_DGRAM: one datagram is one request, the
 * sender's (autobound) address is where the answer goes, and the agent
 * keeps no per-client state that a stuck client could pin. Mode 0600 on a
 * root-owned socket is the access check: sending needs write permission.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"
#include "trigger.h"
#include "util.h"

#define REQUESTS_PER_WAKEUP 16
#define KMSG_RECORDS_PER_WAKEUP 64
#define KMSG_RECORD_MAX 8192	/* a read() smaller than the record fails */
#define ANSWER_TIMEOUT_S 5

void trigger_sanitize(char *dst, const char *src, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)src[i];
		dst[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
}

static bool starts_with(const char *s, size_t n, const char *prefix)
{
	size_t pl = strlen(prefix);

	return n >= pl && !memcmp(s, prefix, pl);
}

/* The die() header of x86 and arm64: "Oops: 0002 [#1] ...", also
 * "invalid opcode: 0000 [#1]", "general protection fault, ...: 0000 [#1]",
 * "Internal error: Oops: 0000000096000005 [#1]". */
static bool is_die_header(const char *s, size_t n)
{
	for (size_t i = 0; i + 1 < n; i++) {
		size_t j = i + 2, hex = 0;

		if (s[i] != ':' || s[i + 1] != ' ')
			continue;
		while (j < n && isxdigit((unsigned char)s[j])) {
			j++;
			hex++;
		}
		if (hex >= 4 && hex <= 16 && j + 3 < n && s[j] == ' ' && s[j + 1] == '[' &&
		    s[j + 2] == '#' && isdigit((unsigned char)s[j + 3]))
			return true;
	}
	return false;
}

/* Lines as 6.1 prints them: "BUG: kernel NULL pointer dereference, ...",
 * "kernel BUG at mm/x.c:12!", "WARNING: CPU: 0 PID: 1 at ...", lockdep's
 * "WARNING: possible circular locking ...", "Kernel panic - not syncing: ...";
 * also after one pr_fmt prefix ("watchdog: BUG: soft lockup - CPU#0 ..."). */
static bool is_marker(const char *s, size_t n)
{
	static const char *const markers[] = {
		"Oops: ", "BUG: ", "kernel BUG at ", "WARNING: ", "Kernel panic - not syncing",
		"Unable to handle kernel ",
	};
	const char *colon;

	for (int pass = 0; pass < 2; pass++) {
		for (size_t i = 0; i < sizeof(markers) / sizeof(markers[0]); i++)
			if (starts_with(s, n, markers[i]))
				return true;
		colon = memchr(s, ':', n);
		if (!colon || (size_t)(colon - s) + 2 > n || colon[1] != ' ')
			return false;
		for (const char *p = s; p < colon; p++)	/* a prefix is one word */
			if (*p == ' ')
				return false;
		n -= (size_t)(colon - s) + 2;
		s = colon + 2;
	}
	return false;
}

/* A record is "PRIO,SEQ,USEC,FLAGS[,...];TEXT\n" then " KEY=VALUE\n" lines;
 * newlines inside TEXT come escaped. PRIO is facility << 3 | level: only
 * facility 0 is the kernel's, what user space writes to /dev/kmsg is not. */
bool trigger_kmsg_match(const char *rec, size_t len, const char **text, size_t *tlen)
{
	const char *semi = memchr(rec, ';', VMT_MIN(len, (size_t)128));
	const char *s, *nl;
	unsigned prio = 0;
	size_t i, n;

	if (!semi)
		return false;
	for (i = 0; i < (size_t)(semi - rec) && isdigit((unsigned char)rec[i]); i++) {
		prio = prio * 10 + (unsigned)(rec[i] - '0');
		if (prio > 1023)
			return false;
	}
	if (i == 0 || rec[i] != ',' || prio >> 3 != 0)
		return false;
	s = semi + 1;
	n = len - (size_t)(s - rec);
	nl = memchr(s, '\n', n);
	if (nl)
		n = (size_t)(nl - s);
	if (!n || !(is_marker(s, n) || is_die_header(s, n)))
		return false;
	*text = s;
	*tlen = n;
	return true;
}

int trigger_fire(struct vmt_agent_trigger *t, const char *reason, size_t len)
{
	char text[VMT_TRIGGER_REASON_MAX];
	uint64_t now = now_monotonic_ns();
	int r;

	len = VMT_MIN(len, sizeof(text));
	trigger_sanitize(text, reason, len);
	if (t->last_ns && now - t->last_ns < VMT_TRIGGER_INTERVAL_NS) {
		t->limited++;
		log_debug("TRIGGER held back by the rate limit: %.*s", (int)len, text);
		return -EAGAIN;
	}
	r = t->send(t->ctx, text, len);
	if (r < 0)
		return r;
	t->last_ns = now;
	t->sent++;
	if (t->limited)
		log_info("TRIGGER sent: %.*s (%llu held back by the rate limit before it)", (int)len,
			 text, (unsigned long long)t->limited);
	else
		log_info("TRIGGER sent: %.*s", (int)len, text);
	t->limited = 0;
	return 0;
}

static int trigger_listen(struct vmt_agent_trigger *t, const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	mode_t old;
	int fd, probe, r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return -EEXIST;	/* never unlink what is not ours */
		probe = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		r = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0;
		if (probe >= 0)
			close(probe);
		if (r)
			return -EADDRINUSE;	/* another agent answers there */
		unlink(path);
	}
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	old = umask(0177);
	r = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
	umask(old);
	if (r < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	t->sock_fd = fd;
	return 0;
}

void trigger_on_request(struct vmt_agent_trigger *t)
{
	for (int i = 0; i < REQUESTS_PER_WAKEUP; i++) {
		char buf[VMT_TRIGGER_REASON_MAX], answer[80];
		struct sockaddr_un from;
		socklen_t fl = sizeof(from);
		ssize_t n = recvfrom(t->sock_fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC,
				     (struct sockaddr *)&from, &fl);
		int r;

		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR)
				log_warning("trigger socket: %m");
			return;
		}
		r = trigger_fire(t, buf, VMT_MIN((size_t)n, sizeof(buf)));
		if (r == 0)
			snprintf(answer, sizeof(answer), "sent");
		else if (r == -EAGAIN)
			snprintf(answer, sizeof(answer), "rate limited: at most one trigger a second");
		else if (r == -ENOTCONN)
			snprintf(answer, sizeof(answer), "not streaming");
		else
			snprintf(answer, sizeof(answer), "%s", strerror(-r));
		if (r < 0)
			log_info("trigger request refused: %s", answer);
		if (fl > sizeof(sa_family_t))	/* an unbound sender cannot be answered */
			sendto(t->sock_fd, answer, strlen(answer), MSG_DONTWAIT,
			       (struct sockaddr *)&from, fl);
	}
}

static int trigger_kmsg_open(struct vmt_agent_trigger *t)
{
	int fd = open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC), r;

	if (fd < 0)
		return -errno;
	if (lseek(fd, 0, SEEK_END) < 0) {	/* only what happens from now on */
		r = -errno;
		close(fd);
		return r;
	}
	t->kmsg_fd = fd;
	return 0;
}

void trigger_on_kmsg(struct vmt_agent_trigger *t)
{
	static char rec[KMSG_RECORD_MAX];

	for (int i = 0; i < KMSG_RECORDS_PER_WAKEUP; i++) {
		char reason[VMT_TRIGGER_REASON_MAX];
		const char *text;
		size_t tlen;
		ssize_t n = read(t->kmsg_fd, rec, sizeof(rec));
		int r;

		if (n < 0 && errno == EPIPE)
			continue;	/* records overwritten before we read them */
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n <= 0) {
			log_warning("/dev/kmsg: %s; kernel oopses no longer trigger",
				    n ? strerror(errno) : "end of file");
			close(t->kmsg_fd);
			t->kmsg_fd = -1;
			return;
		}
		if (!trigger_kmsg_match(rec, (size_t)n, &text, &tlen))
			continue;
		r = snprintf(reason, sizeof(reason), "kernel: %.*s", (int)tlen, text);
		r = trigger_fire(t, reason, VMT_MIN((size_t)r, sizeof(reason) - 1));
		if (r == -ENOTCONN)
			log_debug("kernel: %.*s (not streaming: no TRIGGER)", (int)tlen, text);
	}
}

void trigger_open(struct vmt_agent_trigger *t, const char *path, bool kmsg,
		  int (*send)(void *ctx, const char *reason, size_t len), void *ctx)
{
	int r;

	*t = (struct vmt_agent_trigger){ .sock_fd = -1, .kmsg_fd = -1, .send = send, .ctx = ctx };
	r = trigger_listen(t, path);
	if (r < 0)
		log_warning_errno(r, "%s: %m; `vmtrace-agent trigger` will not work", path);
	if (kmsg && (r = trigger_kmsg_open(t)) < 0)
		log_warning_errno(r, "/dev/kmsg: %m; kernel oopses will not trigger");
}

void trigger_close(struct vmt_agent_trigger *t, const char *path)
{
	if (t->sock_fd >= 0) {
		close(t->sock_fd);
		unlink(path);
	}
	if (t->kmsg_fd >= 0)
		close(t->kmsg_fd);
	t->sock_fd = t->kmsg_fd = -1;
}

int trigger_request(const char *path, const char *reason)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = ANSWER_TIMEOUT_S };
	_cleanup_close_ int fd = -1;
	size_t len = strlen(reason);
	char answer[128];
	ssize_t n;

	if (strlen(path) >= sizeof(sa.sun_path))
		return log_error_errno(-ENAMETOOLONG, "%s: %m", path);
	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (len > VMT_TRIGGER_REASON_MAX) {
		log_warning("reason cut to %d bytes", VMT_TRIGGER_REASON_MAX);
		len = VMT_TRIGGER_REASON_MAX;
	}
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return log_error_errno(-errno, "socket: %m");
	/* autobind: an address for the answer to come back to */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa_family_t)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		return log_error_errno(-errno, "socket set-up: %m");
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return log_error_errno(-errno, "no agent at %s (is vmtrace-agent running?): %m", path);
	if (send(fd, reason, len, 0) < 0)
		return log_error_errno(-errno, "cannot send to the agent at %s: %m", path);
	n = recv(fd, answer, sizeof(answer) - 1, 0);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return log_error_errno(-ETIMEDOUT, "no answer from the agent within %ds", ANSWER_TIMEOUT_S);
	if (n < 0)
		return log_error_errno(-errno, "no answer from the agent: %m");
	answer[n] = 0;
	trigger_sanitize(answer, answer, (size_t)n);
	if (strcmp(answer, "sent")) {
		log_error("trigger not sent: %s", answer);
		return -EAGAIN;
	}
	printf("trigger sent: %.*s\n", (int)len, reason);
	return 0;
}
