/* SPDX-License-Identifier: MIT */
/*
 * libseccomp rather than a BPF program by hand: it knows each
 * architecture's syscall numbers and argument layout.
 */
#include <errno.h>
#include <seccomp.h>
#include <stddef.h>
#include <sys/socket.h>

#include "log.h"
#include "sandbox.h"

/* What vmtraced does once it is set up: its event loop, the writer thread
 * and zstd's workers, its children's exits, files under state_dir and tracefs, channels and the
 * control socket, BPF maps and (at a reload) programs, journald, NSS. */
static const char *const allowed[] = {
	/* memory, threads, time, signals */
	"brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "futex", "set_robust_list",
	"get_robust_list", "rseq", "clone", "clone3", "set_tid_address", "exit", "exit_group",
	"gettid", "getpid", "getppid", "getuid", "geteuid", "getgid", "getegid", "getgroups",
	"getresuid", "getresgid", "clock_gettime", "clock_getres", "gettimeofday", "time",
	"nanosleep", "clock_nanosleep", "sched_yield", "sched_getaffinity", "setpriority",
	"getpriority", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack",
	"tgkill", "restart_syscall", "prctl", "arch_prctl", "uname", "prlimit64", "getrlimit",
	"getrandom", "sysinfo", "umask", "capget",
	/* its own children: the host helper and an upgrade's keeper are reaped */
	"wait4", "waitid",
	/* files */
	"read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "lseek",
	"open", "openat", "close", "close_range", "dup", "dup2", "dup3", "fcntl", "ioctl",
	"stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "access",
	"faccessat", "faccessat2", "readlink", "readlinkat", "getdents", "getdents64", "mkdir", "mkdirat",
	"unlink", "unlinkat", "rmdir", "rename", "renameat", "renameat2", "fsync", "fdatasync",
	"ftruncate", "fallocate", "fchmod", "getcwd", "pipe2", "memfd_create", "splice",
	/* the loop */
	"epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "poll", "ppoll",
	"eventfd2", "timerfd_create", "timerfd_settime", "timerfd_gettime", "signalfd4",
	"inotify_init1", "inotify_add_watch", "inotify_rm_watch",
	/* sockets (socket(2) itself below: unix only) */
	"connect", "accept4", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg",
	"getsockopt", "setsockopt", "getsockname", "getpeername", "shutdown",
	/* the detectors: maps and the ring buffer, programs again at a reload */
	"bpf", "perf_event_open",
#if defined(__SANITIZE_ADDRESS__)
	/* LeakSanitizer stops the world at exit with ptrace from a clone */
	"ptrace", "kill", "process_vm_readv", "sched_getparam",
#endif
};

int sandbox_apply(void)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
	unsigned n = 0;
	int r;

	if (!ctx)
		return -ENOMEM;
	for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++) {
		int nr = seccomp_syscall_resolve_name(allowed[i]);

		if (nr == __NR_SCMP_ERROR)
			continue;	/* not on this architecture */
		r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
		if (r < 0)
			goto out;
		n++;
	}
	/* the control socket, channels, journald: unix sockets only */
	r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
			     SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
	if (r < 0)
		goto out;
	r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1);
	if (r == 0)
		r = seccomp_load(ctx);
	if (r == 0)
		log_info("sandbox: system call filter on, %u calls allowed, socket(2) unix only; "
			 "any other kills the daemon", n + 1);
out:
	if (r < 0)
		log_error_errno(r, "cannot set the system call filter: %m");
	seccomp_release(ctx);
	return r;
}
