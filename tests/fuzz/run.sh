#!/bin/sh
# SPDX-License-Identifier: MIT
# Runs the fuzz targets for fuzz.mk (see README.md):
#   run.sh probe CC                   0 if CC can build and link a libFuzzer
#                                     target, else "SKIP: why" and 1
#   run.sh check DIR SECS TARGET...   each target over its seeds and regression
#                                     inputs, then fuzzed SECS seconds
#   run.sh fuzz DIR SECS TARGET...    each target fuzzed SECS seconds
# DIR holds the built fuzz_<target> binaries; logs, scratch corpora and
# artifacts go under it. One line per target; exit 1 if any target failed.
# Targets run one after another, one worker each.
set -u

here=$(cd "$(dirname "$0")" && pwd)
mode=${1:?usage: run.sh probe CC | check|fuzz DIR SECS TARGET...}
shift

if [ "$mode" = probe ]; then
	cc=${1:-clang}
	if ! command -v "$cc" >/dev/null 2>&1; then
		echo "SKIP: fuzz: $cc not found (install clang)"
		exit 1
	fi
	tmp=$(mktemp -d) || exit 1
	trap 'rm -rf "$tmp"' EXIT
	printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
		'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
		>"$tmp/p.c"
	if ! "$cc" -fsanitize=fuzzer,address,undefined -o "$tmp/p" "$tmp/p.c" >"$tmp/log" 2>&1; then
		echo "SKIP: fuzz: $cc cannot link -fsanitize=fuzzer,address,undefined" \
			"(libclang_rt.fuzzer missing? install libclang-rt-<version>-dev)"
		exit 1
	fi
	exit 0
fi

dir=${1:?DIR}
secs=${2:?SECS}
shift 2
failed=0
total_execs=0

stat_of() {	# stat_of LOG NAME: a -print_final_stats=1 value
	sed -n "s/^stat::$2: *//p" "$1" | tail -n 1
}

for t in "$@"; do
	bin=$dir/fuzz_$t
	log=$dir/logs/$t.log
	art=$dir/artifacts/$t
	work=$dir/work/$t
	mkdir -p "$dir/logs" "$art"
	# the committed corpus stays as it is: new inputs go to a scratch copy
	rm -rf "$work"
	mkdir -p "$work"
	cp "$here/corpus/$t"/* "$work"/ 2>/dev/null
	set -- "$work"
	[ -d "$here/regress/$t" ] && set -- "$@" "$here/regress/$t"
	start=$(date +%s)
	"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
		-artifact_prefix="$art/" "$@" >"$log" 2>&1
	rc=$?
	took=$(( $(date +%s) - start ))
	execs=$(stat_of "$log" number_of_executed_units)
	rate=$(stat_of "$log" average_exec_per_sec)
	seeds=$(ls "$here/corpus/$t" 2>/dev/null | wc -l)
	regress=$(ls "$here/regress/$t" 2>/dev/null | wc -l)
	corp=$(ls "$work" | wc -l)
	if [ $rc -eq 0 ]; then
		status=ok
	else
		status="FAILED (exit $rc; log $log)"
		failed=1
	fi
	printf '%-9s %10s execs in %3ss (%s exec/s), %s seeds + %s regress, corpus %s: %s\n' \
		"$t" "${execs:-?}" "$took" "${rate:-?}" "$seeds" "$regress" "$corp" "$status"
	if [ $rc -ne 0 ]; then
		grep -E '^(==[0-9]+==ERROR|SUMMARY|.*invariant broken|artifact_prefix|Test unit written)' \
			"$log" | head -n 8 | sed 's/^/    /'
	fi
	total_execs=$((total_execs + ${execs:-0}))
done
echo "fuzz $mode: $total_execs executions in all; $( [ $failed -eq 0 ] && echo 'no crash' || echo 'CRASHES: see above')"
exit $failed
