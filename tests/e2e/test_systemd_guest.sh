#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The guest package under a real systemd: a Debian 12 machine booted by
# tests/systemd/vm.sh (QEMU, TCG; the image is cached in
# build/systemd-images) with vmtrace-agent's virtio-serial ports
# (--trace-ports: unix sockets in this suite's folder), the vmtrace-agent
# .deb installed in it with apt, and a vmtraced on this machine recording
# it through those sockets (transport: socket). One boot, then:
#   install     vm.sh up --deb: apt-get install succeeds; the port being
#               there, the postinst starts the agent; systemd-analyze verify
#               has nothing to say about its unit
#   stream      the daemon's status shows the guest streaming, pages_in
#               growing
#   trigger     `vmtrace-agent trigger TEXT` in the machine: a sample of
#               kind guest whose reason carries TEXT
#   reboot      `systemctl reboot` in the machine: the agent says BYE, the
#               machine boots again, the same guest streams in a second
#               session (sessions 2), no error, no silence
#   udev        in that boot nothing but the udev rule started the agent:
#               the unit is not enabled, the port's device unit wants it
#   stop        `systemctl stop vmtrace-agent`: the unit ends with status 0,
#               the daemon logs the agent's BYE and waits for a HELLO
#               (state connecting), no dump by guest_silence, no error
# The .deb: VMT_DEBS=FOLDER, else VMT_DEB_CACHE (where test_packages left
# the ones it built in the same run), else built here (tools/mkdeb.sh).
# SKIPs where QEMU, mmdebstrap or root are missing. Waits only catch hangs
# (VMT_TEST_TIMEOUT_SCALE stretches them).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
B=${VMT_BUILD:-build}
VM=$ROOT/tests/systemd/vm.sh
TESTS="install stream trigger reboot udev stop"
G=sg	# the guest's name in the daemon
. "$ROOT/tests/systemd/suite-lib.sh"
scale() { awk -v n="$1" -v s="${VMT_TEST_TIMEOUT_SCALE:-1}" 'BEGIN { if (s + 0 < 1) s = 1; printf "%d\n", n * s }'; }

why=""
[ "$(id -u)" = 0 ] || why="not root (mmdebstrap builds the image as root)"
for t in qemu-system-x86_64 mmdebstrap mkfs.ext4 busybox cpio gcc; do
	[ -z "$why" ] && ! command -v $t >/dev/null && why="no $t (make deps)"
done
for t in vmtraced vmtracectl; do
	[ -z "$why" ] && [ ! -x "$B/$t" ] && why="no $B/$t (make)"
done
[ -z "$why" ] && [ -z "${VMT_DEBS:-}" ] && [ -z "$(ls "${VMT_DEB_CACHE:-/nonexistent}"/vmtrace-agent_*.deb 2>/dev/null)" ] &&
	! command -v dpkg-buildpackage >/dev/null && why="no dpkg-buildpackage (make deps)"
[ -n "$why" ] && skip_rest install "$why"

# never on with an empty WORK: its paths would be at /
WORK=$(mktemp -d "${TMPDIR:-/tmp}/vmt-sysguest.XXXXXX") || skip_rest install "mktemp failed in ${TMPDIR:-/tmp}"
M=$WORK/machine P=$WORK/ports D=$WORK/d
daemon=""
cleanup() {
	if [ -n "$daemon" ]; then kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null; fi
	"$VM" down "$M" >/dev/null 2>&1
	[ -n "${VMT_KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
ctl() { "$B/vmtracectl" -s "$D/control.sock" "$@"; }
# the guest's record in `vmtracectl --json status`, and one field of it
grec() { ctl --json status 2>/dev/null | grep -o '{[^{}]*"guest": "'$G'"[^{}]*}'; }
gfield() { grec | grep -o "\"$1\": [^,}]*" | head -1 | sed 's/^[^:]*: //; s/"//g'; }
# until CMD succeeds, polled every half second; SECS only catches a hang
wait_for() {	# secs cmd...
	local i n
	n=$(scale $(($1 * 2)))
	shift
	for ((i = 0; i < n; i++)); do
		"$@" && return 0
		sleep 0.5
	done
	return 1
}
# the daemon's log lines at error level, and its dumps of kind silence
errors() { grep ': error: ' "$D/vmtraced.log"; }
silence_dumps() { grep -c 'dump [0-9]*: silence' "$D/vmtraced.log"; }

# ---- the package -----------------------------------------------------------
debdir=${VMT_DEBS:-}
[ -z "$debdir" ] && ls "${VMT_DEB_CACHE:-/nonexistent}"/vmtrace-agent_*.deb >/dev/null 2>&1 && debdir=$VMT_DEB_CACHE
if [ -n "$debdir" ]; then
	deb=""
	for d in "$debdir"/vmtrace-agent_*.deb; do
		[ -e "$d" ] || continue
		# the lowest version: the one test_packages built first
		[ -z "$deb" ] || dpkg --compare-versions "$(dpkg-deb -f "$d" Version)" lt "$(dpkg-deb -f "$deb" Version)" && deb=$d
	done
	echo "  the package of $debdir"
else
	LINTIAN=0 tools/mkdeb.sh "$WORK/deb" >"$WORK/build.log" 2>&1 ||
		{ tail -20 "$WORK/build.log"; skip_rest install "tools/mkdeb.sh failed"; }
	deb=$(ls "$WORK"/deb/vmtrace-agent_*.deb | head -1)
fi
[ -f "${deb:-}" ] || skip_rest install "no vmtrace-agent .deb"

# ---- the host's vmtraced ---------------------------------------------------
# started first: it connects to the sockets as soon as QEMU makes them, so
# the agent's first writes do not wait on it
mkdir -p "$D" "$P"
cat >"$D/vmtraced.yaml" <<EOF
state_dir: $D/state
control_socket: $D/control.sock
record:
  ring_size: 8MiB
  guest_buffer_size: 4MiB
  clock: mono
  events: [sched:*, irq:*, timer:*]
  flush_timeout: 10s
# TCG vCPUs on busy host cores are starved by design: no dumps for it
detectors:
  vcpu_starvation:
    enabled: false
guests:
  - name: $G
    path: $P
    transport: socket
EOF
"$B/vmtraced" -c "$D/vmtraced.yaml" 2>"$D/vmtraced.log" &
daemon=$!
wait_for 30 test -S "$D/control.sock" || skip_rest install "vmtraced did not start: $(tail -3 "$D/vmtraced.log")"

# ---- install ---------------------------------------------------------------
start=$(date +%s)
# vmtraced's dependencies too: the image test_systemd_host boots
more=$(ls "$(dirname "$deb")"/vmtraced_*.deb 2>/dev/null | head -1)
if ! "$VM" up "$M" --deb "$deb" ${more:+--image-deps "$more"} --image-packages "$IMAGE_PKGS" --trace-ports "$P" --reboot 2>"$WORK/up.log"; then
	tail -25 "$WORK/up.log" | sed 's/^/  /'
	fail install "vm.sh up failed"
	skip_rest stream "no machine"
fi
up_s=$(( $(date +%s) - start ))
grep -E 'image built|degraded' "$WORK/up.log" | sed 's/^/  /'
st=$(vm systemctl is-active vmtrace-agent.service)
# --man=no: the machine has no man(1) and dpkg leaves man pages out
verify=$(vm systemd-analyze verify --man=no /lib/systemd/system/vmtrace-agent.service 2>&1)
if [ "$st" != active ]; then
	vm systemctl status --no-pager vmtrace-agent.service | sed 's/^/  /'
	fail install "vmtrace-agent.service is $st after the install (machine up in $up_s s)"
elif [ -n "$verify" ]; then
	fail install "systemd-analyze verify vmtrace-agent.service: $(echo "$verify" | head -3 | tr '\n' ' ')"
else
	pass "install ($(basename "$deb"), machine up in $up_s s; the postinst started the agent; systemd-analyze verify: no complaint)"
fi

# ---- stream ----------------------------------------------------------------
streaming() { [ "$(gfield state)" = streaming ] && [ "$(gfield pages_in)" -gt "${1:-0}" ] 2>/dev/null; }
if ! wait_for 120 streaming 0; then
	fail stream "not streaming: $(grec); vmtraced: $(tail -3 "$D/vmtraced.log" | tr '\n' ' ')"
	vm journalctl -u vmtrace-agent.service --no-pager | tail -10 | sed 's/^/  /'
else
	p1=$(gfield pages_in)
	if wait_for 120 streaming "$p1"; then
		pass "stream (streaming, pages_in $p1 -> $(gfield pages_in), session $(gfield sessions))"
	else
		fail stream "pages_in stays at $p1: $(grec)"
	fi
fi

# ---- trigger ---------------------------------------------------------------
text="systemd-guest trigger $$-$RANDOM"
out=$(vm vmtrace-agent trigger "$text" 2>&1)
rc=$?
sample_reason() {
	js=$(ctl --json samples $G 2>/dev/null)
	echo "$js" | grep -q '"path": "[^"]*\.vmts"'
}
if [ $rc != 0 ]; then
	fail trigger "vmtrace-agent trigger: exit $rc: $out"
elif ! wait_for 120 sample_reason; then
	fail trigger "no sample after the trigger ($out): $js"
else
	s=$(echo "$js" | grep -o '"path": "[^"]*\.vmts"' | head -1 | sed 's/^"path": "//; s/"$//')
	reason=$(echo "$js" | grep -o '"reason": "[^"]*"' | head -1 | sed 's/^"reason": "//; s/"$//')
	if [ "$reason" != "guest: $text" ]; then
		fail trigger "the sample's reason is '$reason', not 'guest: $text'"
	elif ! grep -q "dump [0-9]*: guest (guest: $text)" "$D/vmtraced.log"; then
		fail trigger "vmtraced did not log a dump of kind guest: $(grep 'dump' "$D/vmtraced.log" | head -2 | tr '\n' ' ')"
	elif ! info=$(ctl info "$s" 2>&1); then
		fail trigger "vmtracectl info ${s##*/}: $(echo "$info" | tail -2 | tr '\n' ' ')"
	else
		pass "trigger ('$out'; ${s##*/}: $reason)"
	fi
fi

# ---- reboot, udev ----------------------------------------------------------
boot1=$(vm cat /proc/sys/kernel/random/boot_id)
byes0=$(grep -c "guest $G: the agent stops" "$D/vmtraced.log")
sessions0=$(gfield sessions)
rstart=$(date +%s)
# a second later, by a timer: vm.sh's server must answer before the shutdown
# stops it. What `systemctl reboot` does where logind does not run (vm.sh
# masks it), without its complaint that logind is not there.
vm systemd-run --quiet --on-active=1 --timer-property=AccuracySec=10ms \
	systemctl start --job-mode=replace-irreversibly reboot.target
# the daemon sees it all: the agent's BYE, then a HELLO from the new boot
second_session() { [ "$(gfield sessions)" = $((sessions0 + 1)) ] && streaming 0; }
wait_for 300 second_session
reboot_s=$(( $(date +%s) - rstart ))
boot2=$(vm cat /proc/sys/kernel/random/boot_id)
byes=$(grep -c "guest $G: the agent stops" "$D/vmtraced.log")
why=""
second_session || why="no second session: $(grec | cut -c1-300); vmtraced: $(tail -3 "$D/vmtraced.log" | tr '\n' ' ')"
[ -n "$boot2" ] && [ "$boot2" != "$boot1" ] || why="$why; the machine did not boot again (boot id $boot1 -> $boot2)"
[ "$byes" = $((byes0 + 1)) ] || why="$why; the agent's BYE at the shutdown was not logged ($byes0 -> $byes)"
[ "$(gfield silences)" = 0 ] && [ "$(silence_dumps)" = 0 ] ||
	why="$why; guest_silence saw the reboot: silences $(gfield silences), $(silence_dumps) dump(s)"
[ -z "$(errors)" ] || why="$why; vmtraced logged errors: $(errors | head -3 | tr '\n' ' ')"
if [ -z "$why" ]; then
	pass "reboot (back streaming in $reboot_s s: sessions $sessions0 -> $(gfield sessions), BYE logged, no silence, no error)"
else
	fail reboot "${why#; }"
fi
# In the new boot only udev's SYSTEMD_WANTS (99-vmtrace-agent.rules) can
# have started it: the package neither enables the unit nor starts it at
# boot. udev's properties go to the device's main unit, its sysfs path's.
if [ -z "$boot2" ] || [ "$boot2" = "$boot1" ]; then
	skip udev "the machine did not boot again"
else
	dev=$(vm sh -c 'systemd-escape -p --suffix=device "/sys$(udevadm info -q path /dev/virtio-ports/agent-ctl-path)"')
	en=$(vm systemctl is-enabled vmtrace-agent.service)
	wants=$(vm systemctl show -P Wants "$dev")
	st=$(vm systemctl is-active vmtrace-agent.service)
	started=$(vm journalctl -b -u vmtrace-agent.service -o cat --no-pager | grep -c '^Started ')
	if [ "$st" = active ] && [ "$en" != enabled ] && [[ " $wants " == *" vmtrace-agent.service "* ]] &&
		[ "$started" = 1 ]; then
		pass "udev (the port's device unit wants vmtrace-agent.service, the unit is $en, started once in this boot)"
	else
		fail udev "agent $st, unit $en, $dev wants '$wants', started $started time(s) in this boot"
	fi
fi

# ---- stop ------------------------------------------------------------------
byes0=$(grep -c "guest $G: the agent stops" "$D/vmtraced.log")
if ! streaming 0; then
	skip stop "the guest does not stream"
elif ! vm systemctl stop vmtrace-agent.service 2>"$WORK/stop.err"; then
	fail stop "systemctl stop: $(cat "$WORK/stop.err")"
else
	bye() { [ "$(grep -c "guest $G: the agent stops" "$D/vmtraced.log")" -gt "$byes0" ] && [ "$(gfield state)" = connecting ]; }
	wait_for 60 bye
	why=""
	line=$(grep "guest $G: the agent stops" "$D/vmtraced.log" | tail -1)
	bye || why="no BYE logged, state $(gfield state)"
	res=$(vm systemctl show -P Result,ExecMainStatus vmtrace-agent.service | tr '\n' ' ')
	[ "$res" = "success 0 " ] || why="$why; the unit ended with Result, ExecMainStatus $res"
	[ "$(gfield silences)" = 0 ] && [ "$(silence_dumps)" = 0 ] ||
		why="$why; guest_silence counted the stop: silences $(gfield silences), $(silence_dumps) dump(s)"
	[ -z "$(errors)" ] || why="$why; vmtraced logged errors: $(errors | head -3 | tr '\n' ' ')"
	if [ -z "$why" ]; then
		pass "stop (unit ended: $res; ${line#*: guest $G: })"
	else
		fail stop "${why#; }"
	fi
fi
# what the agent's units said in the machine, for the log
vm journalctl -u vmtrace-agent.service -p warning -o short-monotonic --no-pager 2>/dev/null |
	grep -v '^-- ' | head -10 | sed 's/^/  guest journal: /'
summary
