# SPDX-License-Identifier: MIT
# The systemd suites' reporting (tests/e2e/test_systemd_*.sh): PASS, FAIL
# and SKIP lines with how long each case took, the closing Check-style line.
# The suite sets TESTS (its cases, in order) before using skip_rest.

# What the image holds besides the packages' dependencies (vm.sh up
# --image-packages): one list, so that both suites boot one image.
IMAGE_PKGS=libvirt-daemon-system,qemu-system-x86
# vm CMD [ARG]...: CMD as root in the machine ($VM run, $M: the suite's).
# A command gets VM_CMD_TIMEOUT seconds (stretched by the scale), not
# vmexec's 1800. A machine that stops answering is lost (vm.sh writes
# $M/lost): the first call that finds it so prints why and what `vm.sh
# diag` sees (the vCPUs, the kernel's blocked tasks, the console), once;
# every later call fails at once, so the suite's remaining cases fail in
# seconds rather than each waiting out a deadline (tests/run-tests.sh runs
# such a suite once more).
vm() {
	local rc
	"$VM" run "$M" -t "${VM_CMD_TIMEOUT:-600}" -- "$@"
	rc=$?
	if [ $rc = 255 ] && [ -e "$M/lost" ] && mkdir "$M/lost.told" 2>/dev/null; then
		{ echo "  the machine is lost: $(cat "$M/lost"), in: $(echo "$*" | cut -c1-160)"
		  timeout 60 "$VM" diag "$M" 2>&1 | sed 's/^/  diag: /'; } >&2
	fi
	return $rc
}
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
