#!/bin/bash
# SPDX-License-Identifier: MIT
#
# End to end, detectors.guest_silence with a real guest (tests/guest/boot.sh):
#   panic      an idle guest (vmt.load=none) writes a trace_marker line, then
#              panics 2 s later with panic=0 (it halts, QEMU lives on): a
#              sample comes by itself within the timeout and a few seconds,
#              trigger kind silence, and holds the marker (the agent's timed
#              partial pages: an idle CPU's page would not have filled)
#   panic_idle  the same, but every event off just before the marker
#              (vmt.quiet): the marker is its CPU's last event, in a page
#              that never fills, so only the agent's timed partial page
#              (-f, 1 s by default) takes it out of the guest: it is in
#   panic_idle_no_timer  panic_idle with the timer off (-f 0): the marker
#              is not in the sample (what shows panic_idle rests on the
#              timer alone)
#   killagent  the agent is SIGKILLed inside a live guest: one sample, its
#              reason says the guest stopped answering (that it stays one
#              is test_silence's to check, on events)
#   panic_noreboot  panic=1 under QEMU's -no-reboot (boot.sh): the guest
#              reboots 1 s after the panic, so QEMU exits with status 0
#              before guest_silence could see anything: a process_death
#              sample by itself, its reason says the agent had said no BYE
#   clean_shutdown  the agent stopped (SIGTERM: BYE), then poweroff: QEMU
#              exits 0, counted as filtered by process_death, no sample
# Each prints what it measured: the time from the panic (or kill) to the
# sample as the host sees it, and how far before the panic each CPU's last
# event in the sample is (guest clock).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
B=${VMT_BUILD:-build}
AGENT=${VMT_AGENT:-$B/vmtrace-agent}
CACHE=${VMT_CACHE:-build/guest}
. "$ROOT/tests/guest/vmt-lib.sh"

checks=0 failures=0
WORK=$(mktemp -d "${TMPDIR:-/tmp}/vmt-e2e-panic.XXXXXX")
trap 'vmt_cleanup; [ -n "${VMT_KEEP:-}" ] || rm -rf "$WORK"' EXIT
TIMEOUT_S=5
# a dump that asked a dead or halted guest to flush would be this late
FLUSH_TIMEOUT_S=60

pass() { echo "PASS: $1"; checks=$((checks + 1)); }
fail() { echo "FAIL: $1: $2"; checks=$((checks + 1)); failures=$((failures + 1)); }
skip() { echo "SKIP: $1: $2"; checks=$((checks + 1)); }

now_s() { date +%s.%N; }
# "2026-01-02 03:04:05.678901 UTC" in an info line → seconds since the epoch
info_time() { date -u -d "$(echo "$1" | grep -o '[0-9-]* [0-9:.]* UTC' | head -1)" +%s.%N; }

# no_flush_wait NAME INFO: the sample frozen well within flush_timeout of
# its first trigger (the death, the silence found): no wait for an agent
# that cannot answer. FROZEN_AFTER, the seconds between.
no_flush_wait() {
	local trig frozen
	trig=$(info_time "$(echo "$2" | grep -m1 '^trigger: ')")
	frozen=$(info_time "$(echo "$2" | grep -m1 '^guest: ')")
	FROZEN_AFTER=$(echo "$frozen - $trig" | bc)
	[ "$(echo "$FROZEN_AFTER < $FLUSH_TIMEOUT_S / 2" | bc)" = 1 ] && return 0
	fail "$1" "frozen $FROZEN_AFTER s after its trigger (flush_timeout $FLUSH_TIMEOUT_S s): it waited for an agent that cannot answer"
	return 1
}

# start NAME BOOT_ARGS: a guest and a daemon with a pidfile for QEMU
start() {
	local name=$1 args=$2 run=$WORK/$1/run d=$WORK/$1/d pid
	VMT_DIR=$d
	mkdir -p "$run" "$d"
	pid=$(vmt_boot "$run" pipe -s 2 -e 'sched:*,irq:*,timer:*' -a "vmt.load=none $args" \
		-T "$(vmt_scale 300)") || return 1
	# vmt_boot ran in a subshell: its note of the pid is not ours
	VMT_QEMU_PIDS="$VMT_QEMU_PIDS $pid"
	cat >"$d/vmtraced.yaml" <<-EOF
	state_dir: $d/state
	control_socket: $d/control.sock
	record:
	  ring_size: 16MiB
	  clock: mono
	  events: [sched:*, irq:*, timer:*]
	  flush_timeout: ${FLUSH_TIMEOUT_S}s
	triggers:
	  cooldown: 0ms
	detectors:
	  vcpu_starvation: {enabled: false}
	  guest_silence: {timeout: ${TIMEOUT_S}s}
	guests:
	  - name: g
	    path: $run
	    transport: fifo
	    pidfile: $run/qemu.pid
	EOF
	"$B/vmtraced" -c "$d/vmtraced.yaml" 2>"$d/vmtraced.log" &
	VMT_DAEMON_PID=$!
	vmt_wait_streaming 240
}

# wait_sample DIR SECONDS: the first sample's path
wait_sample() {
	local i=0 n s
	n=$(vmt_scale $(($2 * 10)))
	while [ $i -lt "$n" ]; do
		s=$(vmt_newest_sample "$1" g)
		[ -n "$s" ] && { echo "$s"; return 0; }
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

# panic NAME AGENTARGS QUIET MARKER: QUIET 1, events off before the
# marker; MARKER in|out, whether the marker must be in the sample
panic() {
	local name=$1 run=$WORK/$1/run t0 t1 s info rep up last
	if ! start $name "vmt.panic=3 panic=0${2:+ vmt.agentargs=$2}${3:+ vmt.quiet=$3}"; then
		fail $name "no stream (console: $(tail -2 "$run/console.log" | tr '\n' ' '))"
		vmt_cleanup
		return
	fi
	vmt_wait_panic "$run" 120 ||
		{ fail $name "no panic of its own (console: $(tail -3 "$run/console.log" | tr '\n' ' ')$(vmt_console_crash "$run"))"; vmt_cleanup; return; }
	t0=$(now_s)
	s=$(wait_sample "$VMT_DIR" $((TIMEOUT_S + 30))) ||
		{ fail $name "no sample after the panic (log: $(tail -3 "$VMT_DIR/vmtraced.log"))"; vmt_cleanup; return; }
	t1=$(now_s)
	info=$(vmt_ctl info "$s" 2>&1)
	echo "$info" | grep -q "guest stopped answering" ||
		{ fail $name "the sample's reason is not the silence: $(echo "$info" | head -5 | tr '\n' ' ')"; vmt_cleanup; return; }
	kill -0 "$(cat "$run/qemu.pid")" 2>/dev/null || { fail $name "QEMU did not stay alive (panic=0)"; vmt_cleanup; return; }
	no_flush_wait $name "$info" || { vmt_cleanup; return; }
	rep=$WORK/$name.report
	vmt_ctl report --raw-time "$s" >"$rep" 2>&1 || { fail $name "report: $(head -3 "$rep")"; vmt_cleanup; return; }
	# VMT-PANIC's uptime, else the kernel's own line (the echo before it
	# may die in the tty's buffer)
	up=$(sed -n 's/.*VMT-PANIC uptime=\([0-9.]*\).*/\1/p' "$run/console.log" | head -1)
	[ -n "$up" ] || up=$(sed -n 's/^\[ *\([0-9.]*\)\] Kernel panic - not syncing.*/\1/p' "$run/console.log" | head -1)
	# the last event of each CPU, in seconds of the guest's mono clock
	last=$(awk '{ if (match($0, /\[[0-9]+\] +[0-9]+\.[0-9]+:/)) { f = substr($0, RSTART, RLENGTH);
		split(f, a, /[][ :]+/); c = a[2]; t = a[3]; if (t > m[c]) m[c] = t } }
		END { for (c in m) printf "cpu%d %.3f s before the panic; ", c + 0, P - m[c] }' P="$up" "$rep")
	printf 'MEASURED: %s: sample %.1f s after the console showed the panic (timeout %s s), frozen %.3f s after the silence was found; last events: %s\n' \
		"$name" "$(echo "$t1 - $t0" | bc)" "$TIMEOUT_S" "$FROZEN_AFTER" "$last"
	echo "  $(echo "$info" | grep -m1 "guest stopped answering")"
	# the timer's cost on the host: a partial page takes a whole page of
	# the ring (compare events per page with panic_idle_no_timer's)
	echo "MEASURED: $name: ring use: $(echo "$info" | sed -n 's/^\(cpu[0-9]*\) *\([0-9]*\) pages, \([0-9]*\) events.*/\1 \2 pages \3 events;/p' | tr '\n' ' ')"
	if [ "$4" = out ]; then
		# the control: without the timer, the last page stays in the guest
		! grep -q "vmt-e2e-mark" "$rep" ||
			{ fail $name "the marker is in the sample without timed partial pages: the idle case proves nothing"; vmt_cleanup; return; }
		pass "$name (a sample by itself, kind silence, the marker not in it without the timer)"
		vmt_cleanup
		return
	fi
	grep -q "vmt-e2e-mark" "$rep" || { fail $name "the marker written 2 s before the panic is not in the sample"; vmt_cleanup; return; }
	echo "  the marker: $(grep -m1 vmt-e2e-mark "$rep" | sed 's/^ *//')"
	pass "$name (a sample by itself, kind silence, the marker in it)"
	vmt_cleanup
}

killagent() {
	local name=killagent run=$WORK/killagent/run t0 t1 s info n
	if ! start $name "vmt.killagent=3"; then
		fail $name "no stream"
		vmt_cleanup
		return
	fi
	vmt_wait_console "$run" "VMT-AGENT-KILLED" 120 || { fail $name "the agent was not killed"; vmt_cleanup; return; }
	t0=$(now_s)
	s=$(wait_sample "$VMT_DIR" $((TIMEOUT_S + 30))) ||
		{ fail $name "no sample after the agent was killed (log: $(tail -3 "$VMT_DIR/vmtraced.log"))"; vmt_cleanup; return; }
	t1=$(now_s)
	info=$(vmt_ctl info "$s" 2>&1)
	echo "$info" | grep -q "guest stopped answering" ||
		{ fail $name "reason: $(echo "$info" | head -5 | tr '\n' ' ')"; vmt_cleanup; return; }
	# once (test_silence checks that it stays once, on events)
	n=$(ls "$VMT_DIR/state/g/"*.vmts | wc -l)
	[ "$n" = 1 ] || { fail $name "$n samples, not one"; vmt_cleanup; return; }
	printf 'MEASURED: killagent: sample %.1f s after the kill was seen on the console\n' "$(echo "$t1 - $t0" | bc)"
	echo "  $(echo "$info" | grep -m1 "guest stopped answering")"
	pass "$name (one sample, the silence said)"
	vmt_cleanup
}

death_json() {
	vmt_ctl --json status 2>/dev/null | grep -o '{[^{}]*"name": "process_death"[^{}]*}'
}
num() { sed -n "s/.*\"$1\": \([0-9]*\).*/\1/p"; }
qemu_gone() { ! kill -0 "$1" 2>/dev/null; }

# panic=1 under -no-reboot: QEMU exits 0 a second after the panic
panic_noreboot() {
	local name=panic_noreboot run=$WORK/panic_noreboot/run t0 t1 s info
	if ! start $name "vmt.panic=3 panic=1"; then
		fail $name "no stream"
		vmt_cleanup
		return
	fi
	vmt_wait_panic "$run" 120 ||
		{ fail $name "no panic of its own (console: $(tail -3 "$run/console.log" | tr '\n' ' ')$(vmt_console_crash "$run"))"; vmt_cleanup; return; }
	t0=$(now_s)
	s=$(wait_sample "$VMT_DIR" $((FLUSH_TIMEOUT_S + 30))) ||
		{ fail $name "no sample after the panic (log: $(tail -3 "$VMT_DIR/vmtraced.log"))"; vmt_cleanup; return; }
	t1=$(now_s)
	info=$(vmt_ctl info "$s" 2>&1)
	echo "$info" | grep -q "process_death: .*exited (status 0) without its agent's BYE" ||
		{ fail $name "the sample's reason is not the exit without BYE: $(echo "$info" | grep -m2 trigger | tr '\n' ' ')"; vmt_cleanup; return; }
	no_flush_wait $name "$info" || { vmt_cleanup; return; }
	printf 'MEASURED: panic_noreboot: sample %.1f s after the console showed the panic (panic=1), frozen %.3f s after QEMU'"'"'s exit (flush_timeout %s s)\n' \
		"$(echo "$t1 - $t0" | bc)" "$FROZEN_AFTER" "$FLUSH_TIMEOUT_S"
	echo "  $(echo "$info" | grep -m1 "process_death")"
	pass "$name (a process_death sample by itself: QEMU exited 0 without the agent's BYE)"
	vmt_cleanup
}

# poweroff after the agent's BYE: no incident
clean_shutdown() {
	local name=clean_shutdown run=$WORK/clean_shutdown/run qpid j
	if ! start $name "vmt.poweroff=3"; then
		fail $name "no stream"
		vmt_cleanup
		return
	fi
	qpid=$(cat "$run/qemu.pid")
	vmt_wait_console "$run" "VMT-END" 120 || { fail $name "no poweroff (console: $(tail -3 "$run/console.log" | tr '\n' ' '))"; vmt_cleanup; return; }
	i=0
	while ! qemu_gone "$qpid" && [ $i -lt "$(vmt_scale 300)" ]; do sleep 0.1; i=$((i + 1)); done
	qemu_gone "$qpid" || { fail $name "QEMU did not exit"; vmt_cleanup; return; }
	# the exit record read and judged: filtered (or fired, the failure)
	i=0
	while j=$(death_json) && [ "$(echo "$j" | num filtered)" -lt 1 ] 2>/dev/null &&
	      [ "$(echo "$j" | num fired)" -lt 1 ] 2>/dev/null && [ $i -lt "$(vmt_scale 300)" ]; do
		sleep 0.1
		i=$((i + 1))
	done
	grep -q "the agent stops" "$VMT_DIR/vmtraced.log" ||
		{ fail $name "no BYE in the log: $(tail -3 "$VMT_DIR/vmtraced.log")"; vmt_cleanup; return; }
	if [ "$(echo "$j" | num filtered)" != 1 ] || [ "$(echo "$j" | num fired)" != 0 ]; then
		fail $name "process_death: $j"
	elif ls "$VMT_DIR/state/g/"*.vmts >/dev/null 2>&1; then
		fail $name "a sample was written: $(ls "$VMT_DIR/state/g/")"
	else
		pass "$name (BYE, then QEMU exited 0: filtered, no sample)"
	fi
	vmt_cleanup
}

why=$(vmt_cannot_run)
if [ -n "$why" ]; then
	skip guest_panic "$why"
else
	# VMT_TEST=NAME: the cases whose name holds NAME
	want() { [[ "$1" == *"${VMT_TEST:-}"* ]]; }
	want panic && panic panic "" "" in
	want panic_idle && panic panic_idle "" 1 in
	want panic_idle_no_timer && panic panic_idle_no_timer "-f,0" 1 out
	want killagent && killagent
	want panic_noreboot && panic_noreboot
	want clean_shutdown && clean_shutdown
fi
pct=100
[ $checks -gt 0 ] && pct=$(((checks - failures) * 100 / checks))
echo "$pct%: Checks: $checks, Failures: $failures, Errors: 0"
[ $failures -eq 0 ]
