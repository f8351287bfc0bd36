#!/bin/bash
# The all-servers-SIGKILLed outage of test_fleet, N times in a row (not
# part of make check): test_fleet's label_dump_two_hosts_bucket_outages
# with VMT_FLEET_OUTAGE_KILL=1, at nice 19, each run in a TMPDIR of its
# own that is kept when the run fails (its servers' logs, the npm
# reader's output, and <obj>.inspect: the meta against the chunks the
# stream holds). Prints a line a run and a closing line:
#   outage loop: N runs, P passed, F failed (digest mismatches: M; runs
#   where the uploader found an object not whole and uploaded it again: C)
# Usage: tests/tools/fleet-outage-loop.sh [N] [OUTDIR]   (N default 100)
# VMT_BUILD names the build (default build/san); run from anywhere. The
# test's deadlines are stretched 4 times (VMT_TEST_TIMEOUT_SCALE) unless
# set: after three SIGKILLs a 2.9 server may take long to be healthy again
# on a loaded machine, which is not what this loop looks for.
set -u
cd "$(dirname "$0")/../.."
n=${1:-100}
B=${VMT_BUILD:-build/san}
out=${2:-$B/outage-loop}
export VMT_BUILD=$B VMT_SRCDIR=$PWD
export VMT_TEST_TIMEOUT_SCALE=${VMT_TEST_TIMEOUT_SCALE:-4}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
[ -x "$B/tests/test_fleet" ] || { echo "no $B/tests/test_fleet (make O=$B tests)"; exit 2; }
mkdir -p "$out"
pass=0 fail=0 mism=0 checks=0

# Pids of live processes whose environment holds VMT_SUITE_TAG=$1.
tagged_pids() {
	local p
	for p in /proc/[0-9]*; do
		[ "${p#/proc/}" = $$ ] && continue
		tr "\0" "\n" 2>/dev/null <"$p/environ" | grep -qx "VMT_SUITE_TAG=$1" && echo "${p#/proc/}"
	done
}

for i in $(seq 1 "$n"); do
	tag="outage.$$.$i"
	tmp=$out/run-$i
	rm -rf "$tmp" && mkdir -m 1777 -p "$tmp"
	start=$(date +%s)
	VMT_SUITE_TAG=$tag TMPDIR=$tmp VMT_KEEP=1 VMT_FLEET_OUTAGE_KILL=1 \
		VMT_TEST=label_dump_two_hosts_bucket_outages \
		nice -n 19 "$B/tests/test_fleet" >"$tmp/check.log" 2>&1
	rc=$?
	# a failed run leaves its servers and daemons: ended by pid
	for p in $(tagged_pids "$tag"); do kill -9 "$p" 2>/dev/null; done
	secs=$(($(date +%s) - start))
	# the uploader's check (daemon/fleet-upload.c upload_verify) finding the
	# stream not holding an object whole: said for every run
	fired=$(cat "$tmp"/vmt-host*/vmtraced.log 2>/dev/null | grep -c ' messages on its chunk subject, ')
	if [ "$fired" != 0 ]; then
		checks=$((checks + 1))
		grep -h ' messages on its chunk subject, ' "$tmp"/vmt-host*/vmtraced.log | sed 's/^/    /'
	fi
	if [ $rc = 0 ] && grep -q '^100%: Checks: 1, Failures: 0, Errors: 0' "$tmp/check.log"; then
		pass=$((pass + 1))
		echo "run $i: ok (${secs}s)"
		rm -rf "$tmp"
	else
		fail=$((fail + 1))
		why=$(grep -E ':[EF]:' "$tmp/check.log" | head -1 | cut -c1-300)
		ins=$(find "$tmp" -name '*.inspect' | head -1)
		if grep -qs 'digests do not match' "$tmp"/vmt-*/npm-after.vmts.node; then
			mism=$((mism + 1))
			why="DIGEST MISMATCH: $why"
		fi
		echo "run $i: FAILED (${secs}s, kept in $tmp): $why"
		[ -n "$ins" ] && sed 's/^/    /' "$ins"
	fi
done
echo "outage loop: $n runs, $pass passed, $fail failed (digest mismatches: $mism;" \
	"runs where the uploader found an object not whole and uploaded it again: $checks)"
[ $fail = 0 ]
