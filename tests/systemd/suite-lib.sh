# SPDX-License-Identifier: MIT
# The systemd suites' reporting (tests/e2e/test_systemd_*.sh): PASS, FAIL
# and SKIP lines with how long each case took, the closing Check-style line.
# The suite sets TESTS (its cases, in order) before using skip_rest.

# What the image holds besides the packages' dependencies (vm.sh up
# --image-packages): one list, so that both suites boot one image.
IMAGE_PKGS=libvirt-daemon-system,qemu-system-x86
checks=0 failures=0
# each line says how long its case took (since the line before)
t_suite=$(date +%s) t_case=$t_suite
took() { local t=$t_case; t_case=$(date +%s); took="[$((t_case - t)) s]"; }
pass() { took; echo "PASS: $1 $took"; checks=$((checks + 1)); }
fail() { took; echo "FAIL: $1: $2 $took"; checks=$((checks + 1)); failures=$((failures + 1)); }
skip() { echo "SKIP: $1: $2"; checks=$((checks + 1)); }
summary() {
	echo "  the suite took $(( $(date +%s) - t_suite )) s"
	echo "$(( checks ? (checks - failures) * 100 / checks : 100 ))%: Checks: $checks, Failures: $failures, Errors: 0"
	[ $failures = 0 ]
	exit
}
skip_rest() {	# first-test why: every test from first on
	local t seen=1
	for t in $TESTS; do
		[ "$t" = "$1" ] && seen=0
		[ $seen = 0 ] && skip "$t" "$2"
	done
	summary
}
