/* SPDX-License-Identifier: MIT */
/*
 * faultshim.so: an LD_PRELOAD library that makes chosen file system calls
 * fail, for tests/integration/test_faults.c. Driven by VMT_FAULT; without
 * it every call goes straight through.
 *
 *   VMT_FAULT="RULE[;RULE...]"        (',' separates rules too)
 *   RULE = CALL[:ERR][:after=N][:count=N][:path=PREFIX][:name=TEXT][:dir|:file]
 *
 * CALL     write pwrite writev pwritev fsync fdatasync sync_file_range
 *          ftruncate fallocate close, on a descriptor; open (= openat,
 *          creat, mkstemp, mkostemp), rename (= renameat, renameat2),
 *          unlink (= unlinkat), mkdir, on a path; anywrite = the four
 *          writes. Each name covers its *64 and __*_2 twins.
 * ERR      an errno name (EIO, ENOSPC, EMFILE, ...) or number; default EIO.
 *          "short": a write writes half (at least one byte) and says so.
 *          "delay=MS": the call waits MS milliseconds, then goes through
 *          (a slow disk).
 * after=N  the first N matching calls go through, then the rule fails them
 * count=N  fail N times, then let calls through again (default: forever)
 * path=P   only files under P: the path given (made absolute), or for a
 *          descriptor the path it was opened with, if opened through one
 *          of the calls above (descriptors are tracked while they live)
 * name=T   only paths holding T (".vmts.tmp-", "aux-")
 * dir|file only descriptors of directories, or of anything else
 *
 * rename matches if either name does. close closes, then reports the error
 * (as NFS does). Each failure is logged on stderr as
 * "faultshim: inject CALL(...) -> ERR [rule N, failure K]" unless
 * VMT_FAULT_QUIET is set; "faultshim: armed ..." once at start.
 *
 * Thread-safe: counters are atomic, the descriptor table is under a mutex.
 * Built without sanitizers: preloaded ahead of an ASan runtime, the program
 * needs ASAN_OPTIONS=verify_asan_link_order=0.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum call {
	C_WRITE, C_PWRITE, C_WRITEV, C_PWRITEV, C_FSYNC, C_FDATASYNC, C_SYNC_FILE_RANGE,
	C_FTRUNCATE, C_FALLOCATE, C_CLOSE, C_OPEN, C_RENAME, C_UNLINK, C_MKDIR, C_NCALLS
};

static const char *const call_names[C_NCALLS] = {
	"write", "pwrite", "writev", "pwritev", "fsync", "fdatasync", "sync_file_range",
	"ftruncate", "fallocate", "close", "open", "rename", "unlink", "mkdir",
};

static const struct {
	const char *name;
	uint32_t mask;
} call_aliases[] = {
	{ "anywrite", 1u << C_WRITE | 1u << C_PWRITE | 1u << C_WRITEV | 1u << C_PWRITEV },
	{ "openat", 1u << C_OPEN }, { "creat", 1u << C_OPEN }, { "mkstemp", 1u << C_OPEN },
	{ "mkostemp", 1u << C_OPEN }, { "renameat", 1u << C_RENAME },
	{ "renameat2", 1u << C_RENAME }, { "unlinkat", 1u << C_UNLINK },
	{ "pwrite64", 1u << C_PWRITE }, { "pwritev2", 1u << C_PWRITEV },
};

static const struct {
	const char *name;
	int err;
} errnos[] = {
#define E(x) { #x, x }
	E(EIO), E(ENOSPC), E(EDQUOT), E(EMFILE), E(ENFILE), E(EACCES), E(EPERM), E(EROFS),
	E(EFBIG), E(EINTR), E(EAGAIN), E(ENOMEM), E(EBADF), E(EEXIST), E(ENOENT), E(EXDEV),
	E(EBUSY), E(ETXTBSY), E(ENAMETOOLONG), E(EINVAL), E(ENOTDIR), E(EISDIR), E(ELOOP),
	E(ESTALE), E(ENOLCK), E(ETIMEDOUT), E(ENODEV), E(ENXIO),
#undef E
};

#define SHORT_WRITE (-1)	/* rule->err: write half */
#define MAX_RULES 16
#define MAX_FDS 65536

struct rule {
	char text[256];
	uint32_t calls;		/* bit per enum call */
	int err;		/* errno, or SHORT_WRITE */
	uint64_t delay_ms;	/* instead of failing: wait, then go through */
	uint64_t after, count;	/* count 0: forever */
	char path[PATH_MAX];
	char name[256];
	int kind;		/* 0 any, 1 directories, 2 other */
	uint64_t seen, failed;	/* atomic */
};

struct fdent {
	char *path;		/* malloc'd, absolute */
	dev_t dev;
	ino_t ino;
	bool is_dir;
};

static struct rule rules[MAX_RULES];
static unsigned nrules;
static bool quiet;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t fd_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fdent fds[MAX_FDS];

/* ---- the real functions --------------------------------------------------- */

static struct {
	ssize_t (*write)(int, const void *, size_t);
	ssize_t (*pwrite)(int, const void *, size_t, off_t);
	ssize_t (*pwrite64)(int, const void *, size_t, off64_t);
	ssize_t (*writev)(int, const struct iovec *, int);
	ssize_t (*pwritev)(int, const struct iovec *, int, off_t);
	ssize_t (*pwritev64)(int, const struct iovec *, int, off64_t);
	ssize_t (*pwritev2)(int, const struct iovec *, int, off_t, int);
	ssize_t (*pwritev64v2)(int, const struct iovec *, int, off64_t, int);
	int (*fsync)(int);
	int (*fdatasync)(int);
	int (*sync_file_range)(int, off64_t, off64_t, unsigned);
	int (*ftruncate)(int, off_t);
	int (*ftruncate64)(int, off64_t);
	int (*fallocate)(int, int, off_t, off_t);
	int (*fallocate64)(int, int, off64_t, off64_t);
	int (*close)(int);
	int (*open)(const char *, int, ...);
	int (*open64)(const char *, int, ...);
	int (*openat)(int, const char *, int, ...);
	int (*openat64)(int, const char *, int, ...);
	int (*open_2)(const char *, int);
	int (*open64_2)(const char *, int);
	int (*openat_2)(int, const char *, int);
	int (*openat64_2)(int, const char *, int);
	int (*creat)(const char *, mode_t);
	int (*creat64)(const char *, mode_t);
	int (*mkstemp)(char *);
	int (*mkstemp64)(char *);
	int (*mkostemp)(char *, int);
	int (*mkostemp64)(char *, int);
	int (*mkostemps)(char *, int, int);
	int (*mkostemps64)(char *, int, int);
	int (*rename)(const char *, const char *);
	int (*renameat)(int, const char *, int, const char *);
	int (*renameat2)(int, const char *, int, const char *, unsigned);
	int (*unlink)(const char *);
	int (*unlinkat)(int, const char *, int);
	int (*mkdir)(const char *, mode_t);
	int (*mkdirat)(int, const char *, mode_t);
	int (*dup)(int);
	int (*dup2)(int, int);
	int (*dup3)(int, int, int);
} real;

static pthread_once_t real_once = PTHREAD_ONCE_INIT;

static void resolve_all(void)
{
#define R(fn) real.fn = (typeof(real.fn))dlsym(RTLD_NEXT, #fn)
#define RN(fn, sym) real.fn = (typeof(real.fn))dlsym(RTLD_NEXT, sym)
	R(write); R(pwrite); R(pwrite64); R(writev); R(pwritev); R(pwritev64); R(pwritev2);
	R(pwritev64v2); R(fsync); R(fdatasync); R(sync_file_range); R(ftruncate); R(ftruncate64);
	R(fallocate); R(fallocate64); R(close); R(open); R(open64); R(openat); R(openat64);
	RN(open_2, "__open_2"); RN(open64_2, "__open64_2"); RN(openat_2, "__openat_2");
	RN(openat64_2, "__openat64_2"); R(creat); R(creat64); R(mkstemp); R(mkstemp64);
	R(mkostemp); R(mkostemp64); R(mkostemps); R(mkostemps64); R(rename); R(renameat);
	R(renameat2); R(unlink); R(unlinkat); R(mkdir); R(mkdirat); R(dup); R(dup2); R(dup3);
#undef R
#undef RN
}

/* the next definition of fn (the sanitizer's interceptor, or libc's) */
#define REAL(fn) (pthread_once(&real_once, resolve_all), real.fn)
#define REALNAME(fn, sym) REAL(fn)

/* ---- rules ------------------------------------------------------------------- */

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line))
		n = sizeof(line) - 1;
	if (REAL(write)(2, line, (size_t)n) < 0) {
		/* nowhere to say it */
	}
}

static const char *err_name(int e)
{
	static __thread char num[16];

	if (e == SHORT_WRITE)
		return "short write";
	for (size_t i = 0; i < sizeof(errnos) / sizeof(errnos[0]); i++)
		if (errnos[i].err == e)
			return errnos[i].name;
	snprintf(num, sizeof(num), "errno %d", e);
	return num;
}

static int parse_u64(const char *s, uint64_t *v)
{
	char *end;

	errno = 0;
	*v = strtoull(s, &end, 10);
	return errno || end == s || *end ? -1 : 0;
}

static int parse_field(struct rule *r, char *f, bool first)
{
	if (first) {
		for (int c = 0; c < C_NCALLS; c++)
			if (!strcmp(f, call_names[c]))
				r->calls |= 1u << c;
		for (size_t i = 0; i < sizeof(call_aliases) / sizeof(call_aliases[0]); i++)
			if (!strcmp(f, call_aliases[i].name))
				r->calls |= call_aliases[i].mask;
		return r->calls ? 0 : -1;
	}
	if (!strncmp(f, "after=", 6))
		return parse_u64(f + 6, &r->after);
	if (!strncmp(f, "count=", 6))
		return parse_u64(f + 6, &r->count);
	if (!strncmp(f, "delay=", 6))
		return parse_u64(f + 6, &r->delay_ms);
	if (!strncmp(f, "path=", 5))
		return snprintf(r->path, sizeof(r->path), "%s", f + 5) >= (int)sizeof(r->path) ? -1 : 0;
	if (!strncmp(f, "name=", 5))
		return snprintf(r->name, sizeof(r->name), "%s", f + 5) >= (int)sizeof(r->name) ? -1 : 0;
	if (!strcmp(f, "dir") || !strcmp(f, "file")) {
		r->kind = f[0] == 'd' ? 1 : 2;
		return 0;
	}
	if (!strcmp(f, "short")) {
		r->err = SHORT_WRITE;
		return 0;
	}
	for (size_t i = 0; i < sizeof(errnos) / sizeof(errnos[0]); i++)
		if (!strcmp(f, errnos[i].name)) {
			r->err = errnos[i].err;
			return 0;
		}
	{
		uint64_t v;
		if (parse_u64(f, &v) == 0 && v > 0 && v < 4096) {
			r->err = (int)v;
			return 0;
		}
	}
	return -1;
}

static void init(void)
{
	const char *env = getenv("VMT_FAULT");
	char buf[4096], *save = NULL, *tok;

	quiet = getenv("VMT_FAULT_QUIET") != NULL;
	if (!env || !*env)
		return;
	snprintf(buf, sizeof(buf), "%s", env);
	for (tok = strtok_r(buf, ";,", &save); tok && nrules < MAX_RULES;
	     tok = strtok_r(NULL, ";,", &save)) {
		struct rule *r = &rules[nrules];
		char *fs = NULL, *f;
		bool first = true, ok = true;

		memset(r, 0, sizeof(*r));
		snprintf(r->text, sizeof(r->text), "%s", tok);
		r->err = EIO;
		for (f = strtok_r(tok, ":", &fs); f; f = strtok_r(NULL, ":", &fs), first = false)
			if (parse_field(r, f, first) < 0) {
				say("faultshim: ignoring rule '%s': cannot read '%s'\n", r->text, f);
				ok = false;
				break;
			}
		if (ok && r->calls)
			nrules++;
	}
	for (unsigned i = 0; i < nrules; i++)
		say("faultshim: armed rule %u '%s' (pid %d)\n", i + 1, rules[i].text, (int)getpid());
}

static inline bool armed(void)
{
	pthread_once(&once, init);
	return nrules > 0;
}

__attribute__((constructor)) static void faultshim_ctor(void)
{
	pthread_once(&once, init);
}

/* ---- paths and descriptors -------------------------------------------------------- */

/* path made absolute against dirfd (AT_FDCWD: the working directory) */
static void abs_path(int dirfd, const char *path, char *out, size_t n)
{
	char base[PATH_MAX];
	ssize_t l;

	if (!path) {
		snprintf(out, n, "?");
		return;
	}
	if (path[0] == '/') {
		snprintf(out, n, "%s", path);
		return;
	}
	if (dirfd == AT_FDCWD) {
		if (!getcwd(base, sizeof(base)))
			snprintf(base, sizeof(base), ".");
	} else {
		char proc[64];
		snprintf(proc, sizeof(proc), "/proc/self/fd/%d", dirfd);
		l = readlink(proc, base, sizeof(base) - 1);
		base[l < 0 ? 0 : l] = 0;
	}
	snprintf(out, n, "%s/%s", base, path);
}

static void fd_track(int fd, const char *path)
{
	struct stat st;
	char *p;

	if (fd < 0 || fd >= MAX_FDS || fstat(fd, &st) < 0)
		return;
	p = strdup(path);
	pthread_mutex_lock(&fd_lock);
	free(fds[fd].path);
	fds[fd].path = p;
	fds[fd].dev = st.st_dev;
	fds[fd].ino = st.st_ino;
	fds[fd].is_dir = S_ISDIR(st.st_mode);
	pthread_mutex_unlock(&fd_lock);
}

static void fd_forget(int fd)
{
	if (fd < 0 || fd >= MAX_FDS)
		return;
	pthread_mutex_lock(&fd_lock);
	free(fds[fd].path);
	fds[fd].path = NULL;
	pthread_mutex_unlock(&fd_lock);
}

static void fd_copy(int from, int to)
{
	char *p = NULL;
	struct fdent e;

	if (from < 0 || from >= MAX_FDS || to < 0 || to >= MAX_FDS || from == to)
		return;
	pthread_mutex_lock(&fd_lock);
	e = fds[from];
	if (e.path)
		p = strdup(e.path);
	free(fds[to].path);
	fds[to] = e;
	fds[to].path = p;
	pthread_mutex_unlock(&fd_lock);
}

/*
 * What fd was opened as: 1 with its path, 0 if not tracked. A descriptor
 * closed behind our back (fclose, closedir) and its number reused shows
 * another inode: then it is not ours any more.
 */
static int fd_lookup(int fd, char *path, size_t n, bool *is_dir)
{
	struct stat st;
	struct fdent e = { 0 };
	int r = 0;

	if (fd < 0 || fd >= MAX_FDS)
		return 0;
	pthread_mutex_lock(&fd_lock);
	if (fds[fd].path) {
		e = fds[fd];
		snprintf(path, n, "%s", e.path);
		r = 1;
	}
	pthread_mutex_unlock(&fd_lock);
	if (r && (fstat(fd, &st) < 0 || st.st_dev != e.dev || st.st_ino != e.ino)) {
		fd_forget(fd);
		return 0;
	}
	*is_dir = e.is_dir;
	return r;
}

/* ---- deciding ---------------------------------------------------------------------- */

static bool path_matches(const struct rule *r, const char *path)
{
	if (!path)
		return !r->path[0] && !r->name[0];
	if (r->path[0] && strncmp(path, r->path, strlen(r->path)))
		return false;
	if (r->name[0] && !strstr(path, r->name))
		return false;
	return true;
}

/*
 * 0: let the call through; otherwise the errno to fail it with (or
 * SHORT_WRITE). p1, p2: the paths involved (NULL if unknown); is_dir -1
 * when it does not apply.
 */
static int decide(enum call c, const char *what, const char *p1, const char *p2, int is_dir)
{
	for (unsigned i = 0; i < nrules; i++) {
		struct rule *r = &rules[i];
		uint64_t seen, failed;

		if (!(r->calls & (1u << c)))
			continue;
		if (r->kind && is_dir >= 0 && (r->kind == 1) != (is_dir == 1))
			continue;
		if (r->kind && is_dir < 0)
			continue;
		if (!path_matches(r, p1) && !(p2 && path_matches(r, p2)))
			continue;
		seen = __atomic_add_fetch(&r->seen, 1, __ATOMIC_SEQ_CST);
		if (seen <= r->after)
			continue;
		failed = __atomic_add_fetch(&r->failed, 1, __ATOMIC_SEQ_CST);
		if (r->count && failed > r->count)
			continue;
		if (r->delay_ms) {
			struct timespec ts = { (time_t)(r->delay_ms / 1000), (long)(r->delay_ms % 1000) * 1000000 };

			if (!quiet)
				say("faultshim: delay %s(%s%s%s) by %llu ms [rule %u, time %llu]\n", what,
				    p1 ? p1 : "?", p2 ? " -> " : "", p2 ? p2 : "",
				    (unsigned long long)r->delay_ms, i + 1, (unsigned long long)failed);
			while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
				;
			return 0;
		}
		if (!quiet)
			say("faultshim: inject %s(%s%s%s) -> %s [rule %u, failure %llu]\n", what,
			    p1 ? p1 : "?", p2 ? " -> " : "", p2 ? p2 : "", err_name(r->err), i + 1,
			    (unsigned long long)failed);
		return r->err;
	}
	return 0;
}

static int decide_fd(enum call c, const char *what, int fd)
{
	char path[PATH_MAX];
	bool is_dir = false;
	int saved = errno, r;

	if (!armed())
		return 0;
	if (fd_lookup(fd, path, sizeof(path), &is_dir))
		r = decide(c, what, path, NULL, is_dir);
	else
		r = decide(c, what, NULL, NULL, -1);
	errno = saved;
	return r;
}

static int decide_path(enum call c, const char *what, int dirfd, const char *p, int dirfd2,
		       const char *p2)
{
	char a[2 * PATH_MAX + 2], b[2 * PATH_MAX + 2];
	int saved = errno, r;

	if (!armed())
		return 0;
	abs_path(dirfd, p, a, sizeof(a));
	if (p2)
		abs_path(dirfd2, p2, b, sizeof(b));
	r = decide(c, what, a, p2 ? b : NULL, -1);
	errno = saved;
	return r;
}

static void track_path(int fd, int dirfd, const char *p)
{
	char a[2 * PATH_MAX + 2];
	int saved = errno;

	if (fd < 0 || !armed())
		return;
	abs_path(dirfd, p, a, sizeof(a));
	fd_track(fd, a);
	errno = saved;
}

#define FAIL(e) ({ errno = (e) == SHORT_WRITE ? EIO : (e); -1; })

/* ---- writes -------------------------------------------------------------------------- */

static size_t half(size_t n)
{
	return n > 1 ? n / 2 : n;
}

ssize_t write(int fd, const void *b, size_t n)
{
	int e = decide_fd(C_WRITE, "write", fd);

	if (e == SHORT_WRITE)
		return REAL(write)(fd, b, half(n));
	return e ? FAIL(e) : REAL(write)(fd, b, n);
}

ssize_t pwrite(int fd, const void *b, size_t n, off_t off)
{
	int e = decide_fd(C_PWRITE, "pwrite", fd);

	if (e == SHORT_WRITE)
		return REAL(pwrite)(fd, b, half(n), off);
	return e ? FAIL(e) : REAL(pwrite)(fd, b, n, off);
}

ssize_t pwrite64(int fd, const void *b, size_t n, off64_t off)
{
	int e = decide_fd(C_PWRITE, "pwrite64", fd);

	if (e == SHORT_WRITE)
		return REAL(pwrite64)(fd, b, half(n), off);
	return e ? FAIL(e) : REAL(pwrite64)(fd, b, n, off);
}

/* the first piece, half of it: a short write of a vector */
static struct iovec short_iov(const struct iovec *v, int n)
{
	struct iovec one = { NULL, 0 };

	for (int i = 0; i < n; i++)
		if (v[i].iov_len) {
			one = v[i];
			one.iov_len = half(one.iov_len);
			break;
		}
	return one;
}

ssize_t writev(int fd, const struct iovec *v, int n)
{
	int e = decide_fd(C_WRITEV, "writev", fd);
	struct iovec one;

	if (e == SHORT_WRITE) {
		one = short_iov(v, n);
		return REAL(writev)(fd, &one, 1);
	}
	return e ? FAIL(e) : REAL(writev)(fd, v, n);
}

ssize_t pwritev(int fd, const struct iovec *v, int n, off_t off)
{
	int e = decide_fd(C_PWRITEV, "pwritev", fd);
	struct iovec one;

	if (e == SHORT_WRITE) {
		one = short_iov(v, n);
		return REAL(pwritev)(fd, &one, 1, off);
	}
	return e ? FAIL(e) : REAL(pwritev)(fd, v, n, off);
}

ssize_t pwritev64(int fd, const struct iovec *v, int n, off64_t off)
{
	int e = decide_fd(C_PWRITEV, "pwritev64", fd);
	struct iovec one;

	if (e == SHORT_WRITE) {
		one = short_iov(v, n);
		return REAL(pwritev64)(fd, &one, 1, off);
	}
	return e ? FAIL(e) : REAL(pwritev64)(fd, v, n, off);
}

ssize_t pwritev2(int fd, const struct iovec *v, int n, off_t off, int flags)
{
	int e = decide_fd(C_PWRITEV, "pwritev2", fd);
	struct iovec one;

	if (e == SHORT_WRITE) {
		one = short_iov(v, n);
		return REAL(pwritev2)(fd, &one, 1, off, flags);
	}
	return e ? FAIL(e) : REAL(pwritev2)(fd, v, n, off, flags);
}

ssize_t pwritev64v2(int fd, const struct iovec *v, int n, off64_t off, int flags)
{
	int e = decide_fd(C_PWRITEV, "pwritev64v2", fd);
	struct iovec one;

	if (e == SHORT_WRITE) {
		one = short_iov(v, n);
		return REAL(pwritev64v2)(fd, &one, 1, off, flags);
	}
	return e ? FAIL(e) : REAL(pwritev64v2)(fd, v, n, off, flags);
}

/* ---- syncs, sizes, close ----------------------------------------------------------------- */

/* "short" means nothing to these: EIO */
#define FD_CALL(c, name, ...)                                   \
	do {                                                    \
		int e_ = decide_fd(c, #name, fd);               \
		return e_ ? FAIL(e_) : REAL(name)(__VA_ARGS__); \
	} while (0)

int fsync(int fd)
{
	FD_CALL(C_FSYNC, fsync, fd);
}

int fdatasync(int fd)
{
	FD_CALL(C_FDATASYNC, fdatasync, fd);
}

int sync_file_range(int fd, off64_t off, off64_t n, unsigned flags)
{
	FD_CALL(C_SYNC_FILE_RANGE, sync_file_range, fd, off, n, flags);
}

int ftruncate(int fd, off_t len)
{
	FD_CALL(C_FTRUNCATE, ftruncate, fd, len);
}

int ftruncate64(int fd, off64_t len)
{
	FD_CALL(C_FTRUNCATE, ftruncate64, fd, len);
}

int fallocate(int fd, int mode, off_t off, off_t len)
{
	FD_CALL(C_FALLOCATE, fallocate, fd, mode, off, len);
}

int fallocate64(int fd, int mode, off64_t off, off64_t len)
{
	FD_CALL(C_FALLOCATE, fallocate64, fd, mode, off, len);
}

int close(int fd)
{
	int e = decide_fd(C_CLOSE, "close", fd), r;

	if (armed())
		fd_forget(fd);
	r = REAL(close)(fd);
	/* the descriptor is gone either way, as after a close that fails */
	return e ? FAIL(e) : r;
}

int dup(int fd)
{
	int r = REAL(dup)(fd);

	if (r >= 0 && armed())
		fd_copy(fd, r);
	return r;
}

int dup2(int fd, int to)
{
	int r = REAL(dup2)(fd, to);

	if (r >= 0 && armed())
		fd_copy(fd, r);
	return r;
}

int dup3(int fd, int to, int flags)
{
	int r = REAL(dup3)(fd, to, flags);

	if (r >= 0 && armed())
		fd_copy(fd, r);
	return r;
}

/* ---- opens ----------------------------------------------------------------------------------- */

static mode_t mode_arg(int flags, va_list ap)
{
	return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

#define OPEN_BODY(fn, sym, dirfd, path, flags, mode_expr)                               \
	do {                                                                           \
		int e_ = decide_path(C_OPEN, sym, dirfd, path, 0, NULL), fd_;          \
		if (e_)                                                                \
			return FAIL(e_);                                               \
		fd_ = mode_expr;                                                       \
		track_path(fd_, dirfd, path);                                          \
		return fd_;                                                            \
	} while (0)

int open(const char *path, int flags, ...)
{
	va_list ap;
	mode_t m;

	va_start(ap, flags);
	m = mode_arg(flags, ap);
	va_end(ap);
	OPEN_BODY(open, "open", AT_FDCWD, path, flags, REAL(open)(path, flags, m));
}

int open64(const char *path, int flags, ...)
{
	va_list ap;
	mode_t m;

	va_start(ap, flags);
	m = mode_arg(flags, ap);
	va_end(ap);
	OPEN_BODY(open64, "open64", AT_FDCWD, path, flags, REAL(open64)(path, flags, m));
}

int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t m;

	va_start(ap, flags);
	m = mode_arg(flags, ap);
	va_end(ap);
	OPEN_BODY(openat, "openat", dirfd, path, flags, REAL(openat)(dirfd, path, flags, m));
}

int openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t m;

	va_start(ap, flags);
	m = mode_arg(flags, ap);
	va_end(ap);
	OPEN_BODY(openat64, "openat64", dirfd, path, flags, REAL(openat64)(dirfd, path, flags, m));
}

/* _FORTIFY_SOURCE's checked opens */
int __open_2(const char *path, int flags)
{
	OPEN_BODY(open_2, "open", AT_FDCWD, path, flags, REALNAME(open_2, "__open_2")(path, flags));
}

int __open64_2(const char *path, int flags)
{
	OPEN_BODY(open64_2, "open64", AT_FDCWD, path, flags,
		  REALNAME(open64_2, "__open64_2")(path, flags));
}

int __openat_2(int dirfd, const char *path, int flags)
{
	OPEN_BODY(openat_2, "openat", dirfd, path, flags,
		  REALNAME(openat_2, "__openat_2")(dirfd, path, flags));
}

int __openat64_2(int dirfd, const char *path, int flags)
{
	OPEN_BODY(openat64_2, "openat64", dirfd, path, flags,
		  REALNAME(openat64_2, "__openat64_2")(dirfd, path, flags));
}

int creat(const char *path, mode_t mode)
{
	OPEN_BODY(creat, "creat", AT_FDCWD, path, 0, REAL(creat)(path, mode));
}

int creat64(const char *path, mode_t mode)
{
	OPEN_BODY(creat64, "creat64", AT_FDCWD, path, 0, REAL(creat64)(path, mode));
}

/* glibc's mkstemp family opens with an internal call: wrap them whole.
 * The template is what decides; the name made is what is tracked. */
#define TEMP_BODY(sym, tmpl, call)                                                 \
	do {                                                                       \
		int e_ = decide_path(C_OPEN, sym, AT_FDCWD, tmpl, 0, NULL), fd_;   \
		if (e_)                                                            \
			return FAIL(e_);                                           \
		fd_ = call;                                                        \
		track_path(fd_, AT_FDCWD, tmpl);                                   \
		return fd_;                                                        \
	} while (0)

int mkstemp(char *t)
{
	TEMP_BODY("mkstemp", t, REAL(mkstemp)(t));
}

int mkstemp64(char *t)
{
	TEMP_BODY("mkstemp64", t, REAL(mkstemp64)(t));
}

int mkostemp(char *t, int flags)
{
	TEMP_BODY("mkostemp", t, REAL(mkostemp)(t, flags));
}

int mkostemp64(char *t, int flags)
{
	TEMP_BODY("mkostemp64", t, REAL(mkostemp64)(t, flags));
}

int mkostemps(char *t, int suffixlen, int flags)
{
	TEMP_BODY("mkostemps", t, REAL(mkostemps)(t, suffixlen, flags));
}

int mkostemps64(char *t, int suffixlen, int flags)
{
	TEMP_BODY("mkostemps64", t, REAL(mkostemps64)(t, suffixlen, flags));
}

/* ---- names ----------------------------------------------------------------------------------- */

int rename(const char *a, const char *b)
{
	int e = decide_path(C_RENAME, "rename", AT_FDCWD, a, AT_FDCWD, b);

	return e ? FAIL(e) : REAL(rename)(a, b);
}

int renameat(int da, const char *a, int db, const char *b)
{
	int e = decide_path(C_RENAME, "renameat", da, a, db, b);

	return e ? FAIL(e) : REAL(renameat)(da, a, db, b);
}

int renameat2(int da, const char *a, int db, const char *b, unsigned flags)
{
	int e = decide_path(C_RENAME, "renameat2", da, a, db, b);

	return e ? FAIL(e) : REAL(renameat2)(da, a, db, b, flags);
}

int unlink(const char *p)
{
	int e = decide_path(C_UNLINK, "unlink", AT_FDCWD, p, 0, NULL);

	return e ? FAIL(e) : REAL(unlink)(p);
}

int unlinkat(int d, const char *p, int flags)
{
	int e = decide_path(C_UNLINK, "unlinkat", d, p, 0, NULL);

	return e ? FAIL(e) : REAL(unlinkat)(d, p, flags);
}

int mkdir(const char *p, mode_t mode)
{
	int e = decide_path(C_MKDIR, "mkdir", AT_FDCWD, p, 0, NULL);

	return e ? FAIL(e) : REAL(mkdir)(p, mode);
}

int mkdirat(int d, const char *p, mode_t mode)
{
	int e = decide_path(C_MKDIR, "mkdirat", d, p, 0, NULL);

	return e ? FAIL(e) : REAL(mkdirat)(d, p, mode);
}
