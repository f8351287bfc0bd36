#!/bin/sh
# SPDX-License-Identifier: MIT
# Cost of the BPF detectors (bpf/detect.bpf.c) on a scheduler-heavy load.
# A scheduler storm (perf bench sched messaging, else hackbench, else a
# pipe ping-pong) runs REPS times in each of three modes, interleaved:
#   off   nothing loaded
#   miss  all detectors loaded and attached, no subject registered (a
#         host's usual case: most threads are not vCPUs)
#   hit   every thread on the host registered as a vCPU (the worst case:
#         each sched event finds its map entry)
# and prints the median time of each, the ratios to off (target < 1.02),
# and each program's run_time_ns / run_cnt from kernel.bpf_stats_enabled
# (target < 300 ns per event). The loader below is the skeleton's
# open -> load -> attach, as daemon/probe.c does; root only.
# Usage: VMT_BUILD=build/bpf bench/detect.sh [REPS]
set -eu
B=${VMT_BUILD:-build}
REPS=${1:-7}
SKEL=$B/bpf/detect.skel.h
[ "$(id -u)" = 0 ] || { echo "SKIP: bench/detect.sh needs root"; exit 0; }
[ -r "$SKEL" ] || { echo "SKIP: no $SKEL (make O=$B with clang and bpftool)"; exit 0; }
T=$(mktemp -d)
trap 'kill $LPID 2>/dev/null || true; wait 2>/dev/null || true; sysctl -qw kernel.bpf_stats_enabled=$STATS0; rm -rf $T' EXIT
LPID=
STATS0=$(sysctl -n kernel.bpf_stats_enabled)

cat > $T/loader.c <<'EOC'
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "detect.h"
#include "detect.skel.h"
static volatile sig_atomic_t stop;
static void on_term(int s) { stop = 1; }
/* every thread on the host -> tids (and every process -> pids) */
static void register_all(struct detect_bpf *s)
{
	struct vmt_detect_tid t = { .guest = 0, .vcpu = 0 };
	struct vmt_detect_pid p = { 0 };
	DIR *d = opendir("/proc"), *td;
	struct dirent *de, *te;
	char path[64];
	if (!d)
		return;
	while ((de = readdir(d))) {
		unsigned pid = strtoul(de->d_name, NULL, 10);
		if (!pid)
			continue;
		bpf_map_update_elem(bpf_map__fd(s->maps.pids), &pid, &p, BPF_NOEXIST);
		snprintf(path, sizeof(path), "/proc/%u/task", pid);
		if (!(td = opendir(path)))
			continue;
		while ((te = readdir(td))) {
			unsigned tid = strtoul(te->d_name, NULL, 10);
			if (tid)
				bpf_map_update_elem(bpf_map__fd(s->maps.tids), &tid, &t, BPF_NOEXIST);
		}
		closedir(td);
	}
	closedir(d);
	/* every bit set: each event goes on to the hash lookup */
	for (__u32 w = 0; w < VMT_DETECT_BITMAP_WORDS; w++)
		bpf_map_update_elem(bpf_map__fd(s->maps.subjects), &w, &(__u64){ ~0ull }, BPF_ANY);
}
int main(int argc, char **argv)
{
	int hit = argc > 1 && !strcmp(argv[1], "hit");
	struct detect_bpf *s = detect_bpf__open();
	struct bpf_program *prog;
	if (!s || detect_bpf__load(s) || detect_bpf__attach(s)) {
		fprintf(stderr, "loader: cannot load the detectors\n");
		return 1;
	}
	signal(SIGTERM, on_term);
	printf("ready\n");
	fflush(stdout);
	while (!stop) {
		if (hit)
			register_all(s);
		usleep(hit ? 100000 : 200000);
	}
	bpf_object__for_each_program(prog, s->obj) {
		struct bpf_prog_info info = { 0 };
		__u32 len = sizeof(info);
		if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len) == 0 && info.run_cnt)
			printf("  %-18s %12llu runs %8.0f ns/run\n", bpf_program__name(prog),
			       (unsigned long long)info.run_cnt,
			       (double)info.run_time_ns / (double)info.run_cnt);
	}
	detect_bpf__destroy(s);
	return 0;
}
EOC
cc -O2 -I$B/bpf -Ibpf -o $T/loader $T/loader.c -lbpf

# the load
if command -v perf >/dev/null 2>&1 && perf bench sched messaging -g 1 -l 1 >/dev/null 2>&1; then
	LOAD="perf bench sched messaging -g 10 -l 300"
elif command -v hackbench >/dev/null 2>&1; then
	LOAD="hackbench -g 10 -l 300"
else
	cat > $T/pingpong.c <<'EOC'
#include <unistd.h>
int main(void)
{
	int a[2], b[2];
	char c = 0;
	if (pipe(a) || pipe(b))
		return 1;
	if (!fork()) {
		for (int i = 0; i < 200000; i++)
			if (read(a[0], &c, 1) != 1 || write(b[1], &c, 1) != 1)
				return 1;
		return 0;
	}
	for (int i = 0; i < 200000; i++)
		if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1)
			return 1;
	return 0;
}
EOC
	cc -O2 -o $T/pingpong $T/pingpong.c
	LOAD=$T/pingpong
fi
echo "load: $LOAD, $REPS runs per mode, $(nproc) CPUs"

run_once() {
	s=$(date +%s%N)
	$LOAD >/dev/null 2>&1
	e=$(date +%s%N)
	echo $(( (e - s) / 1000 ))
}

start_loader() {
	$T/loader $1 > $T/loader.$1.out &
	LPID=$!
	while ! grep -q ready $T/loader.$1.out 2>/dev/null; do sleep 0.1; done
	if [ "$1" = hit ]; then sleep 0.5; fi	# the first registration
}
stop_loader() {
	kill $LPID
	wait $LPID || true
	LPID=
}

$LOAD >/dev/null 2>&1 || true	# warm up
sysctl -qw kernel.bpf_stats_enabled=1
: > $T/off; : > $T/miss; : > $T/hit
i=0
while [ $i -lt $REPS ]; do
	run_once >> $T/off
	start_loader miss; run_once >> $T/miss; stop_loader
	start_loader hit; run_once >> $T/hit; stop_loader
	i=$((i + 1))
done
med() { sort -n "$1" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
OFF=$(med $T/off); MISS=$(med $T/miss); HIT=$(med $T/hit)
printf "off   %8d us\n" $OFF
RM=$(awk "BEGIN { printf \"%.4f\", $MISS / $OFF }")
RH=$(awk "BEGIN { printf \"%.4f\", $HIT / $OFF }")
printf "miss  %8d us  ratio %s\n" $MISS $RM
printf "hit   %8d us  ratio %s\n" $HIT $RH
verdict() { awk "BEGIN { print ($1 <= $2) ? \"PASS\" : \"MISS\" }"; }
echo "RESULT detect-slowdown-usual       $RM ratio  target <= 1.02     $(verdict $RM 1.02)  detectors loaded, no thread registered: $MISS us vs $OFF us"
echo "RESULT detect-slowdown-worst       $RH ratio  target <= 1.02     $(verdict $RH 1.02)  every thread registered as a vCPU: $HIT us vs $OFF us"
echo "per-program cost, detectors loaded, nothing registered (last run):"
cat $T/loader.miss.out | grep -v ready
echo "per-program cost, every thread registered (last run):"
cat $T/loader.hit.out | grep -v ready
