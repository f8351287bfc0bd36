#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The host package under a real systemd: a Debian 12 machine booted by
# tests/systemd/vm.sh (QEMU, TCG; the image is cached in
# build/systemd-images), the vmtraced .deb installed in it with apt (its
# maintainer scripts run under systemd as PID 1). Once per suite:
#   install     vm.sh up --deb: apt-get install in the machine succeeds
#   active      the postinst leaves vmtraced.socket and vmtraced.service active
#   user        the user vmtraced, /run/vmtraced, /run/vmtraced/guests 2775 root:vmtraced
#   status      vmtracectl status through the socket; with the service stopped,
#               the socket unit starts it again (socket activation)
#   usr1        systemctl kill -s USR1 vmtraced: a dump, sent by pid 1
#   reload      systemctl reload with a good file: applied; with a broken one:
#               non-zero, the same process keeps the old configuration
#   security    systemd-analyze security of vmtraced.service beside
#               systemd-journald's and systemd-timesyncd's (printed)
#   verify      systemd-analyze verify of the installed units: no complaint
# VMT_DEBS=FOLDER: take vmtraced_*.deb from there instead of building it
# (tools/mkdeb.sh). SKIPs where QEMU, mmdebstrap or root are missing.
# Waits only catch hangs (VMT_TEST_TIMEOUT_SCALE stretches them).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
VM=$ROOT/tests/systemd/vm.sh
TESTS="install active user status usr1 reload security verify"
checks=0 failures=0
pass() { echo "PASS: $1"; checks=$((checks + 1)); }
fail() { echo "FAIL: $1: $2"; checks=$((checks + 1)); failures=$((failures + 1)); }
skip() { echo "SKIP: $1: $2"; checks=$((checks + 1)); }
summary() {
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

why=""
[ "$(id -u)" = 0 ] || why="not root (mmdebstrap builds the image as root)"
for t in qemu-system-x86_64 mmdebstrap mkfs.ext4 busybox cpio gcc; do
	[ -z "$why" ] && ! command -v $t >/dev/null && why="no $t (make deps)"
done
[ -z "$why" ] && [ -z "${VMT_DEBS:-}" ] && ! command -v dpkg-buildpackage >/dev/null && why="no dpkg-buildpackage (make deps)"
[ -n "$why" ] && skip_rest install "$why"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/vmt-sysvm.XXXXXX")
M=$WORK/machine
cleanup() {
	"$VM" down "$M" >/dev/null 2>&1
	[ -n "${VMT_KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
vm() { "$VM" run "$M" -- "$@"; }

# ---- install -------------------------------------------------------------
if [ -n "${VMT_DEBS:-}" ]; then
	deb=$(ls "$VMT_DEBS"/vmtraced_*.deb 2>/dev/null | sort -V | tail -1)
else
	LINTIAN=0 tools/mkdeb.sh "$WORK/deb" >"$WORK/build.log" 2>&1 || { tail -20 "$WORK/build.log"; skip_rest install "tools/mkdeb.sh failed"; }
	deb=$(ls "$WORK"/deb/vmtraced_*.deb | head -1)
fi
[ -f "$deb" ] || skip_rest install "no vmtraced .deb"
start=$(date +%s)
if "$VM" up "$M" --deb "$deb" 2>"$WORK/up.log"; then
	pass "install ($(basename "$deb"), machine up in $(( $(date +%s) - start )) s)"
else
	tail -25 "$WORK/up.log" | sed 's/^/  /'
	fail install "vm.sh up failed"
	skip_rest active "no machine"
fi
grep -E 'image built|degraded' "$WORK/up.log" | sed 's/^/  /'

# ---- active --------------------------------------------------------------
st=$(vm systemctl is-active vmtraced.socket vmtraced.service | tr '\n' ' ')
if [ "$st" = "active active " ]; then
	pass active
else
	vm systemctl status --no-pager vmtraced.socket vmtraced.service | sed 's/^/  /'
	fail active "vmtraced.socket, vmtraced.service: $st"
fi

# ---- user ----------------------------------------------------------------
got=$(vm sh -c 'getent passwd vmtraced | cut -d: -f1,6; stat -c "%F %a %U %G" /run/vmtraced /run/vmtraced/guests')
want="vmtraced:/var/lib/vmtraced
directory 755 root root
directory 2775 root vmtraced"
if [ "$got" = "$want" ]; then
	pass user
else
	fail user "got: $(echo $got)"
fi

# ---- status --------------------------------------------------------------
out=$(vm vmtracectl status 2>&1)
if ! echo "$out" | head -1 | grep -q '^vmtraced [^ ]*, up '; then
	fail status "vmtracectl status: $(echo "$out" | head -3)"
else
	# stopped, then a client on the socket: systemd starts it again
	pid1=$(vm systemctl show -P MainPID vmtraced.service)
	vm systemctl stop vmtraced.service 2>/dev/null
	st=$(vm systemctl is-active vmtraced.service)
	out=$(vm vmtracectl status 2>&1)
	pid2=$(vm systemctl show -P MainPID vmtraced.service)
	if [ "$st" = inactive ] && echo "$out" | head -1 | grep -q '^vmtraced [^ ]*, up ' &&
		[ "$pid2" != 0 ] && [ "$pid2" != "$pid1" ]; then
		pass "status (socket activation: pid $pid1, stopped, pid $pid2)"
	else
		fail status "after a stop: service $st, pid $pid1 -> $pid2, vmtracectl: $(echo "$out" | head -2)"
	fi
fi

# ---- usr1 ----------------------------------------------------------------
# no guest: the dump writes no file, but counts, and logs who sent it
vm systemctl kill -s USR1 vmtraced.service
if vm sh -c 'for i in $(seq 300); do vmtracectl status | head -1 | grep -q ", dumps 1 " && exit 0; sleep 0.1; done; exit 1' &&
	vm journalctl -u vmtraced.service --no-pager | grep -q 'dump 1: signal (SIGUSR1 from pid 1)'; then
	pass "usr1 (dump 1, from pid 1)"
else
	fail usr1 "no dump: $(vm vmtracectl status | head -1); $(vm journalctl -u vmtraced.service --no-pager | grep dump | tail -2)"
fi

# ---- reload --------------------------------------------------------------
C=/etc/vmtraced/vmtraced.yaml
pid=$(vm systemctl show -P MainPID vmtraced.service)
vm sed -i 's/^  cooldown: 10s$/  cooldown: 11s/' $C
vm grep -q '^  cooldown: 11s$' $C || fail reload "the shipped $C has no 'cooldown: 10s' to edit"
n0=$(vm journalctl -u vmtraced.service --no-pager | grep -c 'configuration reloaded:')
if ! vm systemctl reload vmtraced.service 2>"$WORK/reload1.err"; then
	fail reload "a good file: $(cat "$WORK/reload1.err")"
elif [ "$(vm journalctl -u vmtraced.service --no-pager | grep -c 'configuration reloaded:')" != $((n0 + 1)) ]; then
	fail reload "a good file: reload succeeded, but the daemon did not log it applied"
else
	vm cp "$C" "$C.good"
	vm sh -c "echo 'triggers: [' >>$C"
	vm systemctl reload vmtraced.service 2>/dev/null
	rc=$?
	st=$(vm systemctl is-active vmtraced.service)
	pid2=$(vm systemctl show -P MainPID vmtraced.service)
	refused=$(vm journalctl -u vmtraced.service --no-pager | grep -c 'reload refused, keeping the running configuration')
	vm mv "$C.good" "$C"
	if [ $rc != 0 ] && [ "$st" = active ] && [ "$pid2" = "$pid" ] && [ "$refused" -ge 1 ] &&
		vm systemctl reload vmtraced.service; then
		pass "reload (good: applied; broken: exit $rc, pid $pid kept running, refusal logged)"
	else
		fail reload "a broken file: reload exit $rc, service $st, pid $pid -> $pid2, refusals logged $refused"
	fi
fi

# Not a test: what the detectors could load under the unit's privileges
vm vmtracectl status | sed -n '/^DETECTOR/,$p' | sed 's/^/  /'

# ---- security ------------------------------------------------------------
scores=""
for u in vmtraced systemd-journald systemd-timesyncd; do
	s=$(vm systemd-analyze security --no-pager "$u.service" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\) .*/\1/p')
	scores="$scores $u.service=${s:-?}"
done
echo "  systemd-analyze security (exposure, 0 best, 10 worst):$scores"
case $scores in
*=\?*) fail security "no score for one of them:$scores" ;;
*) pass "security:$scores" ;;
esac

# ---- verify --------------------------------------------------------------
units=$(vm sh -c 'ls /lib/systemd/system/vmtraced*')
out=$(vm systemd-analyze verify --man=no $units 2>&1)
rc=$?
if [ $rc = 0 ] && [ -z "$out" ]; then
	pass "verify ($(echo $units | wc -w) units)"
else
	echo "$out" | sed 's/^/  /'
	fail verify "systemd-analyze verify exit $rc"
fi
summary
