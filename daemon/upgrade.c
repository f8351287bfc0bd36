/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "log.h"
#include "upgrade.h"

/* The memfd: this header, then records, each a struct upg_rec and its
 * bytes padded to 8. */
struct upg_hdr {
	uint64_t magic;
	uint32_t layout;	/* VMT_UPGRADE_LAYOUT */
	uint32_t nguests;
	uint64_t bytes;		/* of the whole state */
	uint32_t upgrades;	/* the old process's hand-overs before this one (was pad: 0) */
	uint32_t crc;		/* CRC32C of the bytes before it */
};
struct upg_rec {
	char guest[72];
	uint64_t len;
	uint32_t pad;
	uint32_t crc;		/* CRC32C of the record's bytes */
};
#define PAD8(n) (((n) + 7) & ~(size_t)7)

/* ---- the old process ---------------------------------------------------- */

void upgrade_out_init(struct vmt_upgrade_out *o)
{
	struct upg_hdr h = { 0 };

	memset(o, 0, sizeof(*o));
	buf_append(&o->state, &h, sizeof(h));	/* filled in by upgrade_exec */
}

void upgrade_out_free(struct vmt_upgrade_out *o)
{
	for (unsigned i = 0; i < o->nfds; i++)
		free(o->names[i]);
	buf_free(&o->state);
	o->nfds = 0;
}

int upgrade_add_fd(struct vmt_upgrade_out *o, int fd, const char *fmt, ...)
{
	char name[256];
	va_list ap;

	if (o->nfds >= VMT_UPGRADE_MAX_FDS)
		return -E2BIG;
	va_start(ap, fmt);
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	o->names[o->nfds] = strdup(name);
	if (!o->names[o->nfds])
		return -ENOMEM;
	o->fds[o->nfds++] = fd;
	return 0;
}

int upgrade_add_guest(struct vmt_upgrade_out *o, const char *guest, const struct vmt_buf *rec)
{
	struct upg_rec h = { .len = rec->len, .crc = crc32c(0, rec->data, rec->len) };
	static const uint8_t zero[8];
	int r;

	snprintf(h.guest, sizeof(h.guest), "%s", guest);
	r = buf_append(&o->state, &h, sizeof(h));
	if (r >= 0 && rec->len)
		r = buf_append(&o->state, rec->data, rec->len);
	if (r >= 0 && PAD8(rec->len) != rec->len)
		r = buf_append(&o->state, zero, PAD8(rec->len) - rec->len);
	if (r < 0)
		return r;
	o->nguests++;
	return 0;
}

/* The state in a sealed memfd, close-on-exec (the move to 3.. clears it). */
static int state_memfd(struct vmt_upgrade_out *o)
{
	struct upg_hdr *h = (struct upg_hdr *)o->state.data;
	int fd;

	h->magic = VMT_UPGRADE_MAGIC;
	h->layout = VMT_UPGRADE_LAYOUT;
	h->nguests = o->nguests;
	h->bytes = o->state.len;
	h->upgrades = o->upgrades;
	h->crc = crc32c(0, o->state.data, offsetof(struct upg_hdr, crc));
	fd = memfd_create("vmtraced-upgrade", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (write_full(fd, o->state.data, o->state.len) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

/* Put back what the move to 3.. changed (execve failed). */
static void unmove(unsigned n, const int *high, const int *saved, const int *flags)
{
	for (unsigned i = 0; i < n; i++) {
		int t = 3 + (int)i;

		if (saved[i] >= 0) {
			dup3(saved[i], t, flags[i] & FD_CLOEXEC ? O_CLOEXEC : 0);
			close(saved[i]);
		} else {
			close(t);
		}
		if (high[i] >= 0)
			close(high[i]);
	}
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
}

static int join_names(const struct vmt_upgrade_out *o, struct vmt_buf *b)
{
	int r = 0;

	for (unsigned i = 0; r >= 0 && i < o->nfds; i++) {
		if (i)
			r = buf_append(b, ":", 1);
		if (r >= 0)
			r = buf_append(b, o->names[i], strlen(o->names[i]));
	}
	return r >= 0 ? buf_append(b, "", 1) : r;
}

/*
 * execve drops the old address space before the successor runs: with the
 * rings mapped (1 GiB for 8 guests x 2 CPUs x 64 MiB), zapping their page
 * tables (each page marked accessed on its way out) took ~200 ms of a
 * hand-over measured at 230 ms (bench/README.md). A keeper, a process
 * that shares the address space (CLONE_VM, not a thread: execve does not
 * end it), holds it across the execve: the pipe's write end closes with
 * the execve, the keeper exits and the teardown runs there, beside the
 * successor. It touches nothing of the process but its own stack: raw
 * system calls only. The successor reaps it (VMT_UPGRADE_KEEPER_ENV).
 */
#define KEEPER_STACK (64 * 1024)

static int keeper_main(void *arg)
{
	const int *p = arg;
	char c;

	/* no handlers (signals come through signalfd): no EINTR; should the
	 * read end early, the keeper only lets go early, execve tears down */
	syscall(SYS_close, p[1]);
	syscall(SYS_read, p[0], &c, 1);
	syscall(SYS_exit, 0);
	return 0;
}

static void *keeper_stack;	/* unmapped if the execve fails */

/* The keeper's pid and *w the write end (close-on-exec); -1 if none:
 * the hand-over goes on without it, only slower. */
static pid_t keeper_start(int *w)
{
	static int p[2];	/* read by the keeper after this returns */
	void *stack;
	pid_t pid;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	stack = mmap(NULL, KEEPER_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
		     -1, 0);
	if (stack == MAP_FAILED) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	pid = clone(keeper_main, (char *)stack + KEEPER_STACK, CLONE_VM | SIGCHLD, p);
	close(p[0]);
	if (pid < 0) {
		close(p[1]);
		munmap(stack, KEEPER_STACK);
		return -1;
	}
	*w = p[1];
	keeper_stack = stack;
	return pid;
}

/* execve failed: the keeper ends and is reaped. */
static void keeper_end(pid_t pid, int w)
{
	if (pid <= 0)
		return;
	close(w);
	while (waitpid(pid, NULL, __WALL) < 0 && errno == EINTR)
		;
	munmap(keeper_stack, KEEPER_STACK);
	keeper_stack = NULL;
}

/*
 * Every fd is first duplicated above the range 3..3+n (so moving one does
 * not overwrite another still to move), what lives in the range now is
 * kept aside (close-on-exec: execve closes it; a failure puts it back),
 * then dup2() puts each in its place without close-on-exec.
 */
static int move_and_exec(struct vmt_upgrade_out *o, const char *exe, char *const argv[],
			 const char *names)
{
	unsigned n = o->nfds;
	int keeper_w = -1;
	pid_t keeper;
	int *high = malloc(n * sizeof(int)), *saved = malloc(n * sizeof(int)),
	    *flags = malloc(n * sizeof(int));
	char num[32];
	int r = -ENOMEM;

	if (!high || !saved || !flags)
		goto out;
	for (unsigned i = 0; i < n; i++) {
		high[i] = fcntl(o->fds[i], F_DUPFD_CLOEXEC, 3 + (int)n);
		flags[i] = fcntl(3 + (int)i, F_GETFD);
		saved[i] = flags[i] >= 0 ? fcntl(3 + (int)i, F_DUPFD_CLOEXEC, 3 + (int)n) : -1;
		if (high[i] < 0 || (flags[i] >= 0 && saved[i] < 0)) {
			r = -errno;
			unmove(i + 1, high, saved, flags);
			goto out;
		}
	}
	for (unsigned i = 0; i < n; i++)
		dup2(high[i], 3 + (int)i);
	snprintf(num, sizeof(num), "%d", getpid());
	setenv("LISTEN_PID", num, 1);
	snprintf(num, sizeof(num), "%u", n);
	setenv("LISTEN_FDS", num, 1);
	setenv("LISTEN_FDNAMES", names, 1);
	keeper = keeper_start(&keeper_w);
	if (keeper > 0) {
		snprintf(num, sizeof(num), "%d", keeper);
		setenv(VMT_UPGRADE_KEEPER_ENV, num, 1);
	}
	/* the successor gets what LISTEN_FDS lists and nothing else: a
	 * library's fd without O_CLOEXEC (libnats' socket, whose server would
	 * go on routing the old subscriptions to it) is closed by the execve */
	if (close_range(3 + n, ~0U, CLOSE_RANGE_CLOEXEC) < 0)
		log_warning("upgrade: fds past the hand-over's kept open: close_range: %s",
			    strerror(errno));
	execv(exe, argv);
	r = -errno;
	keeper_end(keeper, keeper_w);
	unsetenv(VMT_UPGRADE_KEEPER_ENV);
	unmove(n, high, saved, flags);
out:
	free(high);
	free(saved);
	free(flags);
	return r;
}

int upgrade_exec(struct vmt_upgrade_out *o, const char *exe, char *const argv[], char *why,
		 size_t n)
{
	struct vmt_buf names = { 0 };
	int fd, r;

	fd = state_memfd(o);
	if (fd < 0) {
		snprintf(why, n, "cannot write the state: %s", strerror(-fd));
		return fd;
	}
	r = upgrade_add_fd(o, fd, VMT_UPGRADE_STATE);
	if (r >= 0)
		r = join_names(o, &names);
	if (r < 0)
		snprintf(why, n, "too many fds to pass (%u)", o->nfds);
	else {
		r = move_and_exec(o, exe, argv, (const char *)names.data);
		snprintf(why, n, "execve %s: %s", exe, strerror(-r));
	}
	close(fd);
	if (o->nfds && o->fds[o->nfds - 1] == fd) {
		free(o->names[--o->nfds]);
	}
	buf_free(&names);
	return r;
}

/* ---- the successor ------------------------------------------------------- */

bool upgrade_fd_name(const char *name)
{
	return name && (!strcmp(name, VMT_UPGRADE_STATE) || !strcmp(name, VMT_UPGRADE_HOSTPRIV) ||
			!strncmp(name, VMT_UPGRADE_CHAN_PREFIX, strlen(VMT_UPGRADE_CHAN_PREFIX)));
}

/* A copy of the state, if its header checks; why otherwise. */
static void take_state(struct vmt_upgrade_in *in, int fd)
{
	struct upg_hdr h;
	struct stat st;

	in->handed_over = true;
	in->upgrades = 1;	/* at least this one; those before if the header checks */
	if (fstat(fd, &st) < 0 || st.st_size < (off_t)sizeof(h) ||
	    pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) || h.magic != VMT_UPGRADE_MAGIC) {
		snprintf(in->why, sizeof(in->why), "not a vmtraced hand-over state");
		return;
	}
	if (h.layout != VMT_UPGRADE_LAYOUT) {
		snprintf(in->why, sizeof(in->why), "state layout version %u, this vmtraced reads %u",
			 h.layout, VMT_UPGRADE_LAYOUT);
		return;
	}
	if (h.crc != crc32c(0, &h, offsetof(struct upg_hdr, crc)) || h.bytes != (uint64_t)st.st_size) {
		snprintf(in->why, sizeof(in->why), "state header checksum mismatch");
		return;
	}
	in->upgrades = h.upgrades + 1;
	in->state = malloc(h.bytes);
	if (!in->state || pread(fd, in->state, h.bytes, 0) != (ssize_t)h.bytes) {
		snprintf(in->why, sizeof(in->why), "cannot read the state");
		free(in->state);
		in->state = NULL;
		return;
	}
	in->len = h.bytes;
}

int upgrade_take(struct vmt_upgrade_in *in)
{
	char **names = NULL, *keeper;
	int k;

	memset(in, 0, sizeof(*in));
	keeper = getenv(VMT_UPGRADE_KEEPER_ENV);
	if (keeper) {
		in->keeper = (pid_t)atoi(keeper);
		unsetenv(VMT_UPGRADE_KEEPER_ENV);
		upgrade_reap(in);
	}
	k = sd_listen_fds_with_names(0, &names);
	if (k > 0)
		in->fds = calloc((size_t)k, sizeof(*in->fds));
	for (int i = 0; i < k; i++) {
		int fd = SD_LISTEN_FDS_START + i;
		const char *nm = names ? names[i] : NULL;

		if (!upgrade_fd_name(nm) || !in->fds)
			continue;
		fcntl(fd, F_SETFD, FD_CLOEXEC);
		if (!strcmp(nm, VMT_UPGRADE_STATE)) {
			int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);

			take_state(in, fd);
			/* its memory let go, its number kept open: sd_listen_fds()
			 * checks every fd LISTEN_FDS names until control_new() takes
			 * the control socket, and a closed one would make that fail
			 * (a new socket bound, the clients queued on the old one lost) */
			if (nul < 0 || dup2(nul, fd) < 0)
				close(fd);
			if (nul >= 0)
				close(nul);
			continue;
		}
		snprintf(in->fds[in->nfds].name, sizeof(in->fds[0].name), "%s", nm);
		in->fds[in->nfds++].fd = fd;
	}
	for (int i = 0; names && i < k; i++)
		free(names[i]);
	free(names);
	return k > 0 && !in->fds ? -ENOMEM : 0;
}

void upgrade_reap(struct vmt_upgrade_in *in)
{
	pid_t r;

	if (in->keeper <= 0)
		return;
	r = waitpid(in->keeper, NULL, WNOHANG | __WALL);
	if (r == 0)
		return;
	if (r == in->keeper) {
		in->keeper_reaped = in->keeper;
		in->keeper_reaped_ns = now_monotonic_ns();
	}
	in->keeper = 0;	/* reaped, or not ours (ECHILD) */
}

pid_t upgrade_keeper_reaped(struct vmt_upgrade_in *in, uint64_t *ns)
{
	pid_t pid = in->keeper_reaped;

	*ns = in->keeper_reaped_ns;
	in->keeper_reaped = 0;
	return pid;
}

void upgrade_in_free(struct vmt_upgrade_in *in)
{
	upgrade_reap(in);
	for (unsigned i = 0; i < in->nfds; i++)
		if (in->fds[i].fd >= 0)
			close(in->fds[i].fd);
	free(in->fds);
	free(in->state);
	in->fds = NULL;
	in->state = NULL;
	in->nfds = 0;
}

int upgrade_record(const struct vmt_upgrade_in *in, const char *guest, const uint8_t **p,
		   size_t *n, char *why, size_t wn)
{
	size_t off = sizeof(struct upg_hdr);

	while (in->state && off + sizeof(struct upg_rec) <= in->len) {
		struct upg_rec h;

		memcpy(&h, in->state + off, sizeof(h));
		off += sizeof(h);
		if (h.len > in->len - off) {
			snprintf(why, wn, "a record runs past the state's end");
			return -EBADMSG;
		}
		if (!strncmp(h.guest, guest, sizeof(h.guest))) {
			if (crc32c(0, in->state + off, h.len) != h.crc) {
				snprintf(why, wn, "its record's checksum does not match");
				return -EBADMSG;
			}
			*p = in->state + off;
			*n = h.len;
			return 0;
		}
		off += PAD8(h.len);
	}
	return -ENOENT;
}

int upgrade_take_fd(struct vmt_upgrade_in *in, const char *fmt, ...)
{
	char name[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(name, sizeof(name), fmt, ap);
	va_end(ap);
	for (unsigned i = 0; i < in->nfds; i++)
		if (in->fds[i].fd >= 0 && !strcmp(in->fds[i].name, name)) {
			int fd = in->fds[i].fd;
			in->fds[i].fd = -1;
			return fd;
		}
	return -ENOENT;
}

void upgrade_close_rest(struct vmt_upgrade_in *in)
{
	for (unsigned i = 0; i < in->nfds; i++)
		if (in->fds[i].fd >= 0) {
			log_debug("hand-over: %s not claimed, closed", in->fds[i].name);
			close(in->fds[i].fd);
			in->fds[i].fd = -1;
		}
	free(in->state);
	in->state = NULL;
	in->len = 0;
}
