/* SPDX-License-Identifier: MIT */
/*
 * vmtraced: parse argv -> load config -> set up -> run the loop.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "config.h"
#include "log.h"
#include "manager.h"

#define DEFAULT_CONFIG "/etc/vmtraced/vmtraced.yaml"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: vmtraced [-c FILE] [-n [-v]] [-d]\n"
		"  -c, --config FILE  configuration (default " DEFAULT_CONFIG ")\n"
		"  -n, --check        check the configuration and exit\n"
		"  -v, --verbose      with -n: print it normalized\n"
		"  -d, --debug        debug logging\n"
		"  -V, --version      print the version\n"
		"  -h, --help         this help\n");
}

/* Under systemd, stderr is a stream to journald: log with fields instead. */
static bool stderr_is_journal(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2 || fstat(2, &st) < 0)
		return false;
	return st.st_dev == dev && st.st_ino == ino;
}

/*
 * Every guest takes 2 fds per channel and every control client one: the
 * soft limit of 1024 is below what 64 guests and 256 clients need. epoll
 * has no FD_SETSIZE limit, so take what the hard limit allows.
 */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max < 65536 ? rl.rlim_max : 65536;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int main(int argc, char **argv)
{
	const char *path = DEFAULT_CONFIG;
	struct vmt_config conf;
	struct vmt_manager *m;
	bool check = false, verbose = false, debug = false;
	char err[1024];
	int opt, r;

	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "check", no_argument, NULL, 'n' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "debug", no_argument, NULL, 'd' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};

	log_set_ident("vmtraced");
	while ((opt = getopt_long(argc, argv, "c:nvdVh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c': path = optarg; break;
		case 'n': check = true; break;
		case 'v': verbose = true; break;
		case 'd': debug = true; break;
		case 'V': printf("vmtraced %s\n", VMT_VERSION); return 0;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}

	r = config_load(&conf, path, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	if (check) {
		r = manager_check_libraries(&conf, err, sizeof(err));
		if (r < 0) {
			fprintf(stderr, "%s\n", err);
			config_free(&conf);
			return 1;
		}
		if (verbose)
			config_print(&conf, stdout);
		else
			fprintf(stderr, "configuration OK\n");
		config_free(&conf);
		return 0;
	}
	log_set_level(debug ? VMT_LOG_DEBUG : conf.log_level);
	raise_fd_limit();
	if (stderr_is_journal())
		log_open_journal();
	if (manager_resolve_config(&conf, err, sizeof(err)) < 0) {
		log_error("%s", err);
		config_free(&conf);
		return 1;
	}

	r = manager_new(&m, &conf, path);
	config_free(&conf);
	if (r < 0) {
		log_error_errno(r, "cannot start: %m");
		return 1;
	}
	manager_upgrade_init(m, argv);
	r = manager_run(m);
	manager_free(m);
	return r;
}
