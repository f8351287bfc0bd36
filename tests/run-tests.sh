#!/bin/bash
# Runs the test suites and prints one closing line:
#   tests: N passed, N failed, N skipped
# Usage: tests/run-tests.sh [unit|integration|e2e]...   (default: all)
# VMT_BUILD names the (sanitizer) build holding tests/ and the programs.
set -u
cd "$(dirname "$0")/.."
B=${VMT_BUILD:-build}
export VMT_BUILD=$B VMT_SRCDIR=$PWD
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
kinds=${*:-unit integration e2e}
pass=0 fail=0 skip=0 failed_suites=""
log=$(mktemp -d "${TMPDIR:-/tmp}/vmt-tests.XXXXXX")

run_suite() {	# name binary
	local name=$1 bin=$2 out=$log/$1.log rc
	echo "== $name"
	"$bin" >"$out" 2>&1
	rc=$?
	cat "$out"
	# Check's summary: "NN%: Checks: C, Failures: F, Errors: E"
	local line c f e s
	line=$(grep -E '^[0-9]+%: Checks: ' "$out" | tail -1)
	s=$(grep -c '^SKIP: ' "$out")
	if [ -z "$line" ]; then
		echo "!! $name: no Check summary (exit $rc)"
		fail=$((fail + 1)); failed_suites="$failed_suites $name"
		return
	fi
	c=$(echo "$line" | sed -E 's/.*Checks: ([0-9]+).*/\1/')
	f=$(echo "$line" | sed -E 's/.*Failures: ([0-9]+).*/\1/')
	e=$(echo "$line" | sed -E 's/.*Errors: ([0-9]+).*/\1/')
	pass=$((pass + c - f - e - s)); fail=$((fail + f + e)); skip=$((skip + s))
	if [ "$rc" != 0 ] || [ $((f + e)) != 0 ]; then
		failed_suites="$failed_suites $name"
		[ $((f + e)) = 0 ] && fail=$((fail + 1))
	fi
}

for k in $kinds; do
	case $k in
	unit) for t in tests/unit/test_*.c; do
		n=$(basename "$t" .c); run_suite "$n" "$B/tests/$n"; done ;;
	integration) for t in tests/integration/test_*.c; do
		[ -e "$t" ] || continue
		n=$(basename "$t" .c); run_suite "$n" "$B/tests/$n"; done ;;
	e2e) for t in tests/e2e/test_*.sh; do
		[ -e "$t" ] || continue
		n=$(basename "$t" .sh); run_suite "$n" "$t"; done ;;
	*) echo "unknown kind $k"; exit 2 ;;
	esac
done
rm -rf "$log"
[ -n "$failed_suites" ] && echo "failed suites:$failed_suites"
echo "tests: $pass passed, $fail failed, $skip skipped"
[ "$fail" = 0 ]
