#!/bin/bash
# SPDX-License-Identifier: MIT
#
# End to end with real guests: Debian's cloud kernel under QEMU (TCG), the
# static vmtrace-agent in a busybox initramfs, vmtraced on the host.
#   fifo_cmdline   FIFO channels, events on the kernel command line
#   socket_runtime unix-socket channels, events switched on at run time by
#                  the agent (single-threaded TCG; a hung boot is retried once)
#   two_guests     a second guest found by discovery after the daemon started,
#                  dumped by name while the first keeps recording
#   guest_trigger  `vmtrace-agent trigger` inside the guest (init.sh's
#                  vmt.trigger) makes vmtraced dump that guest, kind guest
#   host_merge     the host source beside a guest, clock sync with markers;
#                  three overlapping dumps and a tampered sample merged into
#                  host.dat + guest.dat: linked for libtracecmd (GUEST map,
#                  TIME_SHIFT applied), interleaved by `trace-cmd report -i -i`,
#                  no event twice or lost, the guest's markers between the host's
#                  (and a KernelShark screenshot of the two, under Xvfb, kept
#                  in $VMT_ARTIFACTS, default build/artifacts)
#   merge_reboot   the guest reboots between two dumps: merge splits at the boot
# Each checks that the merged sample decodes with stock trace-cmd, holds
# sched_switch events, and that nothing was lost silently: with a ring large
# enough for the whole run, the events decoded equal the events the guest
# kernel reports read at the flush, CPU by CPU.
# Prints Check's summary line; tests that cannot run print SKIP lines.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
B=${VMT_BUILD:-build}
AGENT=${VMT_AGENT:-$B/vmtrace-agent}
CACHE=${VMT_CACHE:-build/guest}
TDCOUNT=${VMT_TDCOUNT:-$B/tests/tools/tdcount}
ARTIFACTS=${VMT_ARTIFACTS:-$B/artifacts}
. "$ROOT/tests/guest/vmt-lib.sh"

checks=0 failures=0
WORK=$(mktemp -d "${TMPDIR:-/tmp}/vmt-e2e.XXXXXX")
trap 'vmt_cleanup; [ -n "${VMT_KEEP:-}" ] || rm -rf "$WORK"' EXIT

pass() { echo "PASS: $1"; checks=$((checks + 1)); }
fail() { echo "FAIL: $1: $2"; checks=$((checks + 1)); failures=$((failures + 1)); }
skip() { echo "SKIP: $1: $2"; checks=$((checks + 1)); }

# check_sample NAME SAMPLE: merge, decode, compare with the guest's counters.
check_sample() {
	local name=$1 sample=$2 dat=$WORK/$1.dat out counts cpu want got sw lines unnamed
	out=$(vmt_ctl merge -o "$dat" "$sample" 2>&1) || { fail "$name" "merge: $out"; return 1; }
	echo "$out" | sed 's/^/  /'
	trace-cmd report -i "$dat" >"$WORK/$name.report" 2>"$WORK/$name.report.err" ||
		{ fail "$name" "trace-cmd report failed: $(head -3 "$WORK/$name.report.err")"; return 1; }
	sw=$(grep -c ' sched_switch: ' "$WORK/$name.report")
	[ "$sw" -gt 0 ] || { fail "$name" "no sched_switch in trace-cmd report"; return 1; }
	# the fork loop's tasks start after the agent did: their names come from
	# the task tables taken at the dump (at most 1 % of lines without one)
	lines=$(grep -c '^ *[^ ].*\] *[0-9]*\.[0-9]*: ' "$WORK/$name.report")
	unnamed=$(grep -c '^ *<\.\.\.>-' "$WORK/$name.report")
	[ $((unnamed * 100)) -le "$lines" ] ||
		{ fail "$name" "$unnamed of $lines lines have no task name (<...>)"; return 1; }
	counts=$("$TDCOUNT" "$dat") || { fail "$name" "libtracecmd cannot read $dat"; return 1; }
	for cpu in $(echo "$out" | sed -n 's/^ *cpu\([0-9]*\):.*/\1/p'); do
		want=$(echo "$out" | sed -n "s/^ *cpu$cpu:.*guest: read \([0-9]*\).*/\1/p")
		got=$(echo "$counts" | sed -n "s/^cpu$cpu \([0-9]*\)$/\1/p")
		[ -n "$want" ] || { fail "$name" "cpu$cpu: the sample has no guest counters"; return 1; }
		if [ "${got:-0}" != "$want" ]; then
			fail "$name" "cpu$cpu: ${got:-0} events decoded, the guest read $want"
			return 1
		fi
		if echo "$out" | grep -q "^ *cpu$cpu:.*overwritten [1-9]"; then
			fail "$name" "cpu$cpu: the host ring overwrote pages; the check needs a larger ring"
			return 1
		fi
	done
	pass "$name ($(echo "$counts" | tail -1 | cut -d' ' -f2) events, $sw sched_switch, decoded = read on every CPU, $unnamed of $lines lines without a task name)"
}

# run_one NAME TRANSPORT EVENTS_ON_CMDLINE RUNTIME_EVENTS [boot opts...]
run_one() {
	local name=$1 transport=$2 bootev=$3 events=$4 run=$WORK/$1/run s tries=0
	shift 4
	VMT_DIR=$WORK/$name/d
	while :; do
		rm -rf "$WORK/$name"
		mkdir -p "$run"
		vmt_boot "$run" "$transport" -s 2 -e "$bootev" -a vmt.load=forkloop -T "$(vmt_scale 300)" "$@" >/dev/null ||
			{ fail "$name" "boot failed"; return; }
		vmt_daemon "$VMT_DIR" "g-$name" "$run" "$([ "$transport" = pipe ] && echo fifo || echo socket)" \
			64MiB "$events" || { fail "$name" "vmtraced did not start"; vmt_cleanup; return; }
		if vmt_wait_streaming 120; then
			break
		fi
		tries=$((tries + 1))
		if [ $tries -ge 2 ]; then
			fail "$name" "no stream after two boots (console: $(tail -2 "$run/console.log" | tr '\n' ' '))"
			vmt_cleanup
			return
		fi
		echo "RETRY: $name: the guest did not stream; booting it once more (run-time event changes can livelock TCG)"
		vmt_cleanup
	done
	sleep 4
	s=$(vmt_ctl dump --reason "e2e $name" 2>&1 | head -1)
	case "$s" in
	*.vmts) check_sample "$name" "$s" ;;
	*) fail "$name" "dump: $s" ;;
	esac
	vmt_cleanup
}

two_guests() {
	local name=two_guests root=$WORK/two/guests d=$WORK/two/d s1 s2 ok=1
	VMT_DIR=$d
	mkdir -p "$root/a" "$d"
	vmt_boot "$root/a" pipe -s 2 -a vmt.load=forkloop -T "$(vmt_scale 300)" >/dev/null || { fail $name "boot a"; return; }
	cat >"$d/vmtraced.yaml" <<-EOF
	state_dir: $d/state
	control_socket: $d/control.sock
	record:
	  ring_size: 16MiB
	  events: [sched:*, irq:*, timer:*]
	  flush_timeout: 10s
	detectors:
	  vcpu_starvation:
	    enabled: false
	discovery:
	  - path: $root
	    transport: fifo
	EOF
	"$B/vmtraced" -c "$d/vmtraced.yaml" 2>"$d/vmtraced.log" &
	VMT_DAEMON_PID=$!
	mkdir -p "$root/b"
	vmt_boot "$root/b" pipe -s 2 -a vmt.load=forkloop -T "$(vmt_scale 300)" >/dev/null || { fail $name "boot b"; return; }
	for _ in $(seq 1 "$(vmt_scale 240)"); do
		[ "$(vmt_ctl --json status 2>/dev/null | grep -o '"state": "streaming"' | wc -l)" = 2 ] && break
		sleep 0.5
	done
	[ "$(vmt_ctl --json status 2>/dev/null | grep -o '"state": "streaming"' | wc -l)" = 2 ] ||
		{ fail $name "both guests should stream: $(vmt_ctl status 2>&1 | tail -2 | tr '\n' ' ')"; vmt_cleanup; return; }
	sleep 2
	s1=$(vmt_ctl dump b --reason "only b" 2>&1)
	case "$s1" in */b/b-*.vmts) ;; *) ok=0; fail $name "dump b gave '$s1'" ;; esac
	[ "$(echo "$s1" | wc -l)" = 1 ] || { ok=0; fail $name "dump b wrote more than one sample: $s1"; }
	[ -z "$(ls "$d/state/a/"*.vmts 2>/dev/null)" ] || { ok=0; fail $name "guest a was dumped too"; }
	s2=$(vmt_ctl --json status | grep -o '{[^{}]*"guest": "a"[^{}]*}' | grep '"state": "streaming"')
	[ -n "$s2" ] || { ok=0; fail $name "guest a stopped streaming"; }
	[ $ok = 1 ] && pass "$name (b found after the daemon started, dumped by name, a untouched)"
	vmt_cleanup
}

guest_trigger() {
	local name=guest_trigger run=$WORK/trig/run js s reason
	VMT_DIR=$WORK/trig/d
	mkdir -p "$run"
	vmt_boot "$run" pipe -s 2 -a "vmt.load=forkloop vmt.trigger=5" -T "$(vmt_scale 300)" >/dev/null ||
		{ fail $name "boot failed"; return; }
	vmt_daemon "$VMT_DIR" g-trig "$run" fifo 64MiB ||
		{ fail $name "vmtraced did not start"; vmt_cleanup; return; }
	if ! vmt_wait_console "$run" '^VMT-TRIGGER ' 300; then
		fail $name "the guest never ran the trigger (console: $(tail -2 "$run/console.log" | tr '\n' ' '))"
		vmt_cleanup
		return
	fi
	grep -q '^VMT-TRIGGER rc=0' "$run/console.log" ||
		{ fail $name "$(grep -m1 '^VMT-TRIGGER' "$run/console.log"), agent: $(grep 'trigger' "$run/console.log" | tail -2 | tr '\n' ' ')"; vmt_cleanup; return; }
	for _ in $(seq 1 "$(vmt_scale 120)"); do
		js=$(vmt_ctl --json samples g-trig 2>/dev/null)
		echo "$js" | grep -q '"path": "[^"]*\.vmts"' && break
		sleep 0.5
	done
	s=$(echo "$js" | grep -o '"path": "[^"]*\.vmts"' | head -1 | sed 's/^"path": "//; s/"$//')
	reason=$(echo "$js" | grep -o '"reason": "[^"]*"' | head -1 | sed 's/^"reason": "//; s/"$//')
	[ -n "$s" ] || { fail $name "no sample after the trigger: $js"; vmt_cleanup; return; }
	case "$reason" in
	"guest: "*"e2e guest trigger"*) ;;
	*) fail $name "the sample's first trigger is '$reason', not the guest's"; vmt_cleanup; return ;;
	esac
	grep -q "dump [0-9]*: guest (guest: e2e guest trigger)" "$VMT_DIR/vmtraced.log" ||
		{ fail $name "vmtraced did not log a dump of kind guest: $(grep 'dump' "$VMT_DIR/vmtraced.log" | head -2 | tr '\n' ' ')"; vmt_cleanup; return; }
	echo "  $(grep -m1 '^VMT-TRIGGER' "$run/console.log"), sample $s: $reason"
	check_sample $name "$s"
	vmt_cleanup
}

# host_daemon DIR GUEST RUN: vmtraced recording the guest and the host, clock
# sync every second with markers on both sides.
host_daemon() {
	mkdir -p "$1"
	cat >"$1/vmtraced.yaml" <<-EOF
	state_dir: $1/state
	control_socket: $1/control.sock
	record:
	  # compressed (the default): 288 pages a CPU stay raw, the rest are
	  # frames, so the window merged below went through them
	  ring_size: 16MiB
	  guest_buffer_size: 4MiB
	  clock: mono
	  events: [sched:*, irq:*, timer:*]
	  flush_timeout: 10s
	host:
	  enabled: true
	  events: [sched:sched_switch, sched:sched_wakeup]
	  qemu_only: false
	  ring_size: 32MiB
	clock_sync:
	  interval: 1s
	  markers: true
	detectors:
	  vcpu_starvation:
	    enabled: false
	guests:
	  - name: $2
	    path: $3
	    transport: fifo
	    pidfile: $3/qemu.pid
	EOF
	"$B/vmtraced" -c "$1/vmtraced.yaml" 2>"$1/vmtraced.log" &
	VMT_DAEMON_PID=$!
}

host_merge() {
	local name=host_merge run=$WORK/hm/run d=$WORK/hm/d out=$WORK/hm/out bad=$WORK/hm/bad
	local m rc link gs want got qpid ev a b total ok i cpu ks
	VMT_DIR=$d
	mkdir -p "$run" "$bad"
	# in $( ) vmt_boot cannot remember the pid itself
	qpid=$(vmt_boot "$run" pipe -s 2 -a vmt.load=forkloop -T "$(vmt_scale 300)") || { fail $name "boot failed"; return; }
	VMT_QEMU_PIDS="$VMT_QEMU_PIDS $qpid"
	host_daemon "$d" hm "$run"
	vmt_wait_streaming 150 || { fail $name "no stream: $(tail -2 "$d/vmtraced.log" | tr '\n' ' ')"; vmt_cleanup; return; }
	for i in 1 2 3; do
		sleep 3
		vmt_ctl dump --reason "e2e $name $i" >/dev/null 2>&1 || { fail $name "dump $i"; vmt_cleanup; return; }
	done
	vmt_cleanup
	gs=$(ls "$d/state/hm/"*.vmts | sort)
	[ "$(echo "$gs" | wc -l)" = 3 ] || { fail $name "3 guest samples expected: $gs"; return; }
	# a copy of the second sample with one byte changed in its pages
	cp "$(echo "$gs" | sed -n 2p)" "$bad/tampered.vmts"
	printf 'X' | dd of="$bad/tampered.vmts" bs=1 seek=$(($(stat -c %s "$bad/tampered.vmts") / 2)) conv=notrunc 2>/dev/null
	m=$(vmt_ctl merge -o "$out" "$d"/state/*/*.vmts "$bad/tampered.vmts" 2>&1); rc=$?
	echo "$m" | sed 's/^/  /'
	# a byte in a compressed frame costs that frame (said, the rest merged,
	# exit 0); anywhere else the sample (said, skipped, exit 3)
	if echo "$m" | grep -q "tampered.vmts: cpu [0-9]* frame [0-9]*: .*left out"; then
		[ $rc = 0 ] || { fail $name "merge with a tampered frame should end 0, ended $rc"; return; }
	else
		[ $rc = 3 ] || { fail $name "merge with a tampered sample should end 3, ended $rc"; return; }
		echo "$m" | grep -q "tampered.vmts: .*; skipped" || { fail $name "no line naming the tampered sample"; return; }
	fi
	[ -s "$out/hm.dat" ] && [ -s "$out/host.dat" ] || { fail $name "hm.dat and host.dat expected in $out"; return; }
	echo "$m" | grep -q "hm.dat: .*[34] sample(s)" || { fail $name "the three good samples should be merged"; return; }
	echo "$m" | grep -q "pages [0-9]* ([1-9][0-9]* duplicates dropped)" || { fail $name "overlapping dumps, but no duplicate page dropped"; return; }
	# nothing twice, nothing lost: every CPU decodes to what the guest read by the last dump
	total=$("$TDCOUNT" "$out/hm.dat") || { fail $name "libtracecmd cannot read hm.dat"; return; }
	for cpu in 0 1; do
		want=$(vmt_ctl info "$(echo "$gs" | tail -1)" | sed -n "/^cpu$cpu /,/^cpu/s/.*guest: \([0-9]*\) events read.*/\1/p" | head -1)
		got=$(echo "$total" | sed -n "s/^cpu$cpu \([0-9]*\)$/\1/p")
		[ -n "$want" ] && [ "$got" = "$want" ] || { fail $name "cpu$cpu: merged ${got:-0} events, the guest read ${want:-?}"; return; }
	done
	# past the raw slots (288 pages of a 16 MiB ring), the window is frames
	inf=$(vmt_ctl info "$(echo "$gs" | tail -1)")
	echo "$inf" | grep '^ *frames: ' | sed 's/^ */  /'
	for cpu in 0 1; do
		a=$(echo "$inf" | sed -n "s/^cpu$cpu  *\([0-9]*\) pages.*/\1/p")
		[ "${a:-0}" -le 288 ] || echo "$inf" | sed -n "/^cpu$cpu /,/^cpu/p" | grep -q '^ *frames: [1-9]' ||
			{ fail $name "cpu$cpu: $a pages in the last sample, none from a frame"; return; }
	done
	# the link as libtracecmd sees it
	link=$("$B/tests/tools/tdlink" "$out/host.dat" "$out/hm.dat") || { fail $name "tdlink: $link"; return; }
	echo "$link" | grep -v '^event' | sed 's/^/  /'
	set -- $(echo "$link" | sed -n 's/^guest hm vcpus \([0-9]*\) pids \(.*\)/\1 \2/p')
	[ "${1:-0}" = 2 ] || { fail $name "host.dat should map 2 vCPUs of hm: $(echo "$link" | head -1)"; return; }
	[ "$2" != 0 ] && [ "$3" != 0 ] || { fail $name "vCPU threads of QEMU $qpid unknown: $*"; return; }
	set -- $(echo "$link" | sed -n 's/^shift //p') $(echo "$link" | sed -n 's/^host //p') $(echo "$link" | sed -n 's/^guest \([0-9]\)/\1/p')
	[ "${1:-0}" != 0 ] || { fail $name "libtracecmd applied no time shift"; return; }
	# the guest's window (host time) lies inside the host's, give or take a second
	[ "$5" -ge $(($2 - 1000000000)) ] && [ "$6" -le $(($3 + 1000000000)) ] ||
		{ fail $name "guest window $5..$6 is not within the host's $2..$3"; return; }
	# trace-cmd interleaves them, with the guest's events all there
	trace-cmd report -t -i "$out/host.dat" -i "$out/hm.dat" >"$WORK/hm.report" 2>"$WORK/hm.report.err" ||
		{ fail $name "trace-cmd report -i -i: $(head -2 "$WORK/hm.report.err")"; return; }
	a=$(grep -c '^host.dat:' "$WORK/hm.report") b=$(grep -c '^ *hm.dat:' "$WORK/hm.report")
	[ "$a" -gt 0 ] && [ "$b" -gt 0 ] || { fail $name "report lacks host ($a) or guest ($b) lines"; return; }
	for ev in sched_switch sched_wakeup hrtimer_expire_entry irq_handler_entry; do
		want=$(echo "$link" | sed -n "s/^event $ev //p")
		got=$(grep '^ *hm.dat:' "$WORK/hm.report" | grep -c " $ev: ")
		[ "${want:-0}" = "$got" ] || { fail $name "$ev: trace-cmd report shows $got, libtracecmd ${want:-0}"; return; }
	done
	# each guest marker between the host's send and receive markers (causality)
	ok=$(awk -f "$ROOT/tests/guest/markers.awk" "$WORK/hm.report" |
		awk '{ n++; if ($3 >= $2 - 0.0001 && $3 <= $4 + 0.0001) in_++ } END { printf "%d %d\n", in_, n }')
	set -- $ok
	[ "${2:-0}" -ge 5 ] && [ $(($1 * 10)) -ge $(($2 * 9)) ] ||
		{ fail $name "guest markers inside the host's send..receive window: $1 of $2"; return; }
	pass "$name ($b guest and $a host events interleaved; $1 of $2 guest markers between the host's send and receive)"
	# KernelShark opens the two together; the screenshot is kept, not compared
	mkdir -p "$ARTIFACTS"
	ks=$("$ROOT/tests/e2e/kernelshark-shot.sh" "$out/host.dat" "$out/hm.dat" "$ARTIFACTS/kernelshark-host-guest.png" 2>&1)
	case $? in
	0) pass "kernelshark (host and guest in one window: $ARTIFACTS/kernelshark-host-guest.png)" ;;
	77) skip kernelshark "$(echo "$ks" | grep -m1 '^SKIP' | sed 's/^SKIP: //')" ;;
	*) fail kernelshark "$(echo "$ks" | tail -2 | tr '\n' ' ')" ;;
	esac
}

merge_reboot() {
	local name=merge_reboot run=$WORK/mr/run d=$WORK/mr/d out=$WORK/mr/out m n
	VMT_DIR=$d
	mkdir -p "$run"
	vmt_boot "$run" pipe -s 2 -a vmt.load=forkloop -T "$(vmt_scale 300)" >/dev/null || { fail $name "boot 1 failed"; return; }
	vmt_daemon "$d" mr "$run" fifo 16MiB || { fail $name "vmtraced did not start"; vmt_cleanup; return; }
	vmt_wait_streaming 150 || { fail $name "no stream from boot 1"; vmt_cleanup; return; }
	sleep 2
	vmt_ctl dump --reason "before the reboot" >/dev/null 2>&1 || { fail $name "dump 1"; vmt_cleanup; return; }
	for p in $VMT_QEMU_PIDS; do kill "$p"; done
	VMT_QEMU_PIDS=""
	sleep 1
	vmt_boot "$run" pipe -s 2 -a vmt.load=forkloop -T "$(vmt_scale 300)" >/dev/null || { fail $name "boot 2 failed"; vmt_cleanup; return; }
	# the second boot's aux version is given at its META_END; its file is
	# written with the first sample that needs it
	for _ in $(seq 1 "$(vmt_scale 300)"); do
		vmt_ctl --json status 2>/dev/null | grep -q '"aux_version": 2[,}]' && vmt_wait_streaming 1 && break
		sleep 0.5
	done
	n=$(ls "$d/state/mr/"aux-*.vmtaux 2>/dev/null | wc -l)
	[ "$n" = 1 ] || { fail $name "$n aux files before the dump of boot 2, 1 expected"; vmt_cleanup; return; }
	sleep 2
	vmt_ctl dump --reason "after the reboot" >/dev/null 2>&1 || { fail $name "dump 2"; vmt_cleanup; return; }
	n=$(ls "$d/state/mr/"aux-*.vmtaux 2>/dev/null | wc -l)
	[ "$n" = 2 ] || { fail $name "$n aux files after the dump of boot 2, 2 expected"; vmt_cleanup; return; }
	vmt_cleanup
	m=$(vmt_ctl merge -o "$out" "$d"/state/mr/*.vmts 2>&1) || { fail $name "merge: $m"; return; }
	echo "$m" | sed 's/^/  /'
	echo "$m" | grep -q "guest mr: samples from more than one boot" || { fail $name "the split was not said"; return; }
	n=$(ls "$out"/mr-aux*.dat 2>/dev/null | wc -l)
	[ "$n" = 2 ] || { fail $name "two files expected, one per boot: $(ls "$out")"; return; }
	for f in "$out"/mr-aux*.dat; do
		"$TDCOUNT" "$f" >/dev/null || { fail $name "libtracecmd cannot read $f"; return; }
	done
	pass "$name (one file per boot: $(cd "$out" && echo mr-aux*.dat))"
}

why=$(vmt_cannot_run)
if [ -z "$why" ] && ! "$ROOT/tests/guest/kernel.sh" "$CACHE/kernel" >/dev/null 2>"$WORK/kernel.err"; then
	why="no guest kernel: $(tail -1 "$WORK/kernel.err")"
fi
[ -z "$why" ] && [ ! -x "$TDCOUNT" ] && why="no $TDCOUNT"
if [ -n "$why" ]; then
	for t in fifo_cmdline socket_runtime two_guests guest_trigger host_merge kernelshark merge_reboot; do skip $t "$why"; done
else
	# VMT_E2E_ONLY="host_merge merge_reboot" runs those alone
	only() { [ -z "${VMT_E2E_ONLY:-}" ] || [[ " $VMT_E2E_ONLY " == *" $1 "* ]]; }
	only fifo_cmdline && run_one fifo_cmdline pipe 'sched:*,irq:*,timer:*' '[sched:*, irq:*, timer:*]'
	only socket_runtime && run_one socket_runtime socket '' '[sched:*, irq:irq_handler_entry]' -1
	only two_guests && two_guests
	only guest_trigger && guest_trigger
	only host_merge && host_merge
	only merge_reboot && merge_reboot
fi
echo "$(( checks ? (checks - failures) * 100 / checks : 100 ))%: Checks: $checks, Failures: $failures, Errors: 0"
[ $failures = 0 ]
