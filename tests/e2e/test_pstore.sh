#!/bin/bash
# SPDX-License-Identifier: MIT
#
# End to end, the persistent ring buffer (Linux >= 6.12) with a real guest:
# the Debian 6.12 cloud kernel (bookworm-security; cached in
# build/guest-6.12, VMT_CACHE_612), 1 GiB, `reserve_mem=12M:4096:trace
# trace_instance=boot_map@trace nokaslr panic=1`, QEMU without -no-reboot
# (boot.sh -R). The agent sets boot_map up like the top-level instance; the
# guest writes "vmt-e2e-panic" into boot_map's trace_marker and panics at
# once; it reboots inside the same QEMU; the new boot's agent reads
# boot_map before enabling anything in it and sends it (PREV_*). Checked:
#   - a sample whose reason says "previous boot (persistent ring buffer)",
#     under the aux of the boot the daemon held (not the new boot's), no CPU's
#     buffer lost (the kernel says which it found invalid; the agent tells)
#   - the marker is in it, and the CPU that wrote it (then panicked) has
#     nothing lost after it: its last event is the marker or after it (how far: printed)
#   - merge puts it in the same trace.dat as the window the host held for
#     that boot (one file for one boot), its events there once
# VMT_PSTORE_MEM (default 1G) sets the guest's memory, to see the region
# fail where SeaBIOS overwrites it (512M). Prints the time from the panic to the sample and how far each CPU's last
# event is from the marker. One boot, one reboot.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
B=${VMT_BUILD:-build}
AGENT=${VMT_AGENT:-$B/vmtrace-agent}
CACHE=${VMT_CACHE_612:-build/guest-6.12}
. "$ROOT/tests/guest/vmt-lib.sh"

checks=0 failures=0
WORK=$(mktemp -d "${TMPDIR:-/tmp}/vmt-e2e-pstore.XXXXXX")
trap 'vmt_cleanup; [ -n "${VMT_KEEP:-}" ] || rm -rf "$WORK"' EXIT

pass() { echo "PASS: $1"; checks=$((checks + 1)); }
fail() { echo "FAIL: $1: $2"; checks=$((checks + 1)); failures=$((failures + 1)); }
skip() { echo "SKIP: $1: $2"; checks=$((checks + 1)); }
now_s() { date +%s.%N; }

# The newest 6.12 cloud kernel apt knows (bookworm-security has them), or
# the one cached already: VMT_KVER for kernel.sh.
kernel_612() {
	local kv
	if [ -s "$CACHE/kernel/kver" ] && grep -q '^6\.12\.' "$CACHE/kernel/kver"; then
		cat "$CACHE/kernel/kver"
		return 0
	fi
	kv=$(apt-cache search --names-only '^linux-image-6\.12\.[0-9]+\+deb12-cloud-amd64(-unsigned)?$' 2>/dev/null |
		sed -n 's/^linux-image-\(6\.12\.[^ ]*-cloud-amd64\)\(-unsigned\)\? .*/\1/p' | sort -uV | tail -1)
	if [ -z "$kv" ]; then
		apt-get update -qq >/dev/null 2>&1 || true
		kv=$(apt-cache search --names-only '^linux-image-6\.12\.[0-9]+\+deb12-cloud-amd64(-unsigned)?$' 2>/dev/null |
			sed -n 's/^linux-image-\(6\.12\.[^ ]*-cloud-amd64\)\(-unsigned\)\? .*/\1/p' | sort -uV | tail -1)
	fi
	[ -n "$kv" ] || return 1
	VMT_KVER=$kv "$ROOT/tests/guest/kernel.sh" "$CACHE/kernel" >/dev/null 2>"$WORK/kernel.err" || return 1
	echo "$kv"
}

# the sample whose first trigger names the previous boot, "" if none yet
prev_sample() {
	local s
	for s in "$VMT_DIR"/state/g/*.vmts; do
		[ -f "$s" ] || continue
		case "$(vmt_ctl info "$s" 2>/dev/null)" in
		*"previous boot (persistent ring buffer)"*) echo "$s"; return 0 ;;
		esac
	done
	return 0
}

pstore() {
	local run=$WORK/run d=$WORK/d pid t0 t1 s info rep mark last i n aux_prev aux_new
	VMT_DIR=$d
	mkdir -p "$run" "$d"
	pid=$(vmt_boot "$run" pipe -R -m "${VMT_PSTORE_MEM:-1G}" -s 2 -e 'sched:*,irq:*,timer:*' -T "$(vmt_scale 300)" \
		-a "vmt.load=none vmt.bootpanic=3 panic=1 reserve_mem=12M:4096:trace trace_instance=boot_map@trace nokaslr") ||
		{ fail pstore "boot.sh failed"; return; }
	VMT_QEMU_PIDS="$VMT_QEMU_PIDS $pid"
	cat >"$d/vmtraced.yaml" <<-EOF
	state_dir: $d/state
	control_socket: $d/control.sock
	record:
	  ring_size: 16MiB
	  clock: mono
	  events: [sched:*, irq:*, timer:*]
	  flush_timeout: 10s
	triggers:
	  cooldown: 0ms
	detectors:
	  vcpu_starvation: {enabled: false}
	guests:
	  - name: g
	    path: $run
	    transport: fifo
	    pidfile: $run/qemu.pid
	EOF
	"$B/vmtraced" -c "$d/vmtraced.yaml" 2>"$d/vmtraced.log" &
	VMT_DAEMON_PID=$!
	vmt_wait_streaming 240 || { fail pstore "no stream (console: $(tail -2 "$run/console.log" | tr '\n' ' '))"; return; }
	# its own panic: a kernel that died of something else first is no
	# previous boot to look for
	vmt_wait_panic "$run" 120 ||
		{ fail pstore "no panic of its own (console: $(grep -a VMT- "$run/console.log" | tail -3 | tr '\n' ' ')$(vmt_console_crash "$run"))"; return; }
	t0=$(now_s)
	vmt_wait_console "$run" "VMT-BOOTMAP found=1" 240 ||
		{ fail pstore "the next boot did not find the previous boot's buffer: $(grep -a 'VMT-BOOTMAP\|Ring buffer' "$run/console.log" | tr '\n' ' ')"; return; }
	i=0 n=$(vmt_scale 1200) s=""
	while [ -z "$s" ] && [ $i -lt "$n" ]; do
		s=$(prev_sample)
		[ -n "$s" ] || sleep 0.1
		i=$((i + 1))
	done
	[ -n "$s" ] || { fail pstore "no sample of the previous boot (log: $(grep -a 'previous\|PREV' "$d/vmtraced.log" | tail -3))"; return; }
	t1=$(now_s)
	info=$(vmt_ctl info "$s" 2>&1)
	echo "  $(echo "$info" | grep -m1 "previous boot")"
	# under the aux of the boot the daemon held: not the new boot's
	echo "$info" | grep -q '^aux: .*\.vmtaux: kernel' ||
		{ fail pstore "its aux file is not there or not its own: $(echo "$info" | grep '^aux:')"; return; }
	aux_prev=$(echo "$info" | sed -n 's/^aux: .*aux-0*\([0-9][0-9]*\)\.vmtaux.*/\1/p' | head -1)
	aux_new=$(vmt_ctl --json status | sed -n 's/.*"aux_version": \([0-9]*\).*/\1/p' | head -1)
	if [ -z "$aux_prev" ] || [ "$aux_prev" = "$aux_new" ]; then
		fail pstore "the sample's aux ($aux_prev) is not the previous boot's (the new boot's is $aux_new)"
		return
	fi
	# every CPU's buffer came back (the kernel's verdict, sent by the agent)
	echo "$info" | grep -q "previous boot.*lost\|previous boot.*firmware" &&
		{ fail pstore "a CPU's buffer lost or the region too near the top of RAM: $(echo "$info" | grep -m1 "previous boot")"; return; }
	rep=$WORK/prev.report
	vmt_ctl report --raw-time "$s" >"$rep" 2>&1 || { fail pstore "report: $(head -3 "$rep")"; return; }
	mark=$(grep -m1 "vmt-e2e-panic" "$rep" | sed -n 's/.*\] *\([0-9]*\.[0-9]*\):.*/\1/p')
	mcpu=$(grep -m1 "vmt-e2e-panic" "$rep" | sed -n 's/.*\[0*\([0-9][0-9]*\)\] .*/\1/p')
	[ -n "$mark" ] && [ -n "$mcpu" ] || { fail pstore "the marker written before the panic is not in the sample"; return; }
	# each CPU's last event, from the marker (ms; negative: before it)
	last=$(awk '{ if (match($0, /\[[0-9]+\] +[0-9]+\.[0-9]+:/)) { f = substr($0, RSTART, RLENGTH);
		split(f, a, /[][ :]+/); c = a[2]; t = a[3]; if (t > m[c]) m[c] = t } }
		END { for (c in m) printf "cpu%d %+.3f ms; ", c + 0, (m[c] - P) * 1000 }' P="$mark" "$rep")
	# the marking CPU's last event (it panicked right after the marker), in us
	n=$(awk '{ if (match($0, /\[[0-9]+\] +[0-9]+\.[0-9]+:/)) { f = substr($0, RSTART, RLENGTH);
		split(f, a, /[][ :]+/); if (a[2] + 0 == C && a[3] > m) m = a[3] } } END { printf "%d", (m - P) * 1e6 }' \
		P="$mark" C="$mcpu" "$rep")
	printf 'MEASURED: pstore: sample %.1f s after the console showed the panic; last events from the marker (cpu%s wrote it, then panicked): %s\n' \
		"$(echo "$t1 - $t0" | bc)" "$mcpu" "$last"
	# nothing of the panicking CPU's last moments missing: its last event is
	# the marker or follows it (the other CPUs ran on until the panic stopped
	# them: their events after the marker are kept too). How far after is
	# the emulator's speed: 0-1.2 ms here alone, 15 ms on a loaded machine
	# (printed above); a buffer that lost its last page would end seconds
	# before the marker, or without it. The 1 s bound only catches that.
	[ "$n" -ge 0 ] && [ "$n" -le 1000000 ] ||
		{ fail pstore "cpu$mcpu's last event is $n us from the marker, not at or just after it"; return; }
	pass "pstore (a sample of the previous boot, its aux, the marker, the marking CPU's last event at or after the marker)"

	# merge: one trace.dat for that boot, the host's window and the buffer's
	# events after it; every event once (the buffer recorded the same events
	# as the pages the host held, in pages of its own)
	rep=$WORK/merge.out
	"$B/vmtracectl" merge -o "$WORK/m" "$d"/state/g/*.vmts >"$rep" 2>&1 ||
		{ fail pstore_merge "merge: $(tail -2 "$rep")"; return; }
	n=$(ls "$WORK/m"/*.dat 2>/dev/null | wc -l)
	[ "$n" = 1 ] || { fail pstore_merge "$n trace.dat files, not one for the one boot: $(ls "$WORK/m")"; return; }
	grep -q "previous boot's persistent ring buffer: [1-9][0-9]* pages added" "$rep" ||
		{ fail pstore_merge "merge added nothing of the buffer: $(grep -A2 "\.dat:" "$rep" | tr '\n' ' ')"; return; }
	echo "  $(grep -m1 "previous boot's" "$rep")"
	vmt_ctl report --raw-time "$d"/state/g/*.vmts >"$WORK/all.report" 2>&1 ||
		{ fail pstore_merge "report: $(head -2 "$WORK/all.report")"; return; }
	n=$(grep '\] *[0-9]*\.[0-9]*:' "$WORK/all.report" | sort | uniq -d | wc -l)
	[ "$n" = 0 ] || { fail pstore_merge "$n events twice: $(grep '\] *[0-9]*\.[0-9]*:' "$WORK/all.report" | sort | uniq -d | head -2 | tr '\n' ' ')"; return; }
	grep -q "vmt-e2e-panic" "$WORK/all.report" || { fail pstore_merge "the marker is not in the merged events"; return; }
	if command -v trace-cmd >/dev/null; then
		# into a file: grep -q would end trace-cmd with SIGPIPE (pipefail)
		trace-cmd report -i "$WORK"/m/*.dat >"$WORK/tc.report" 2>&1
		grep -q "vmt-e2e-panic" "$WORK/tc.report" ||
			{ fail pstore_merge "trace-cmd report of the trace.dat has no marker: $(tail -2 "$WORK/tc.report")"; return; }
	fi
	pass "pstore_merge (one trace.dat for the boot: the host's window, then the buffer's events after it, each once)"
}

why=$(vmt_cannot_run)
if [ -n "$why" ]; then
	skip pstore "$why"
elif ! kv=$(kernel_612); then
	skip pstore "no Linux 6.12 cloud kernel could be fetched (apt-cache search linux-image-6.12.*+deb12-cloud-amd64 in bookworm-security: $(tail -1 "$WORK/kernel.err" 2>/dev/null))"
else
	echo "guest kernel $kv"
	pstore
	vmt_cleanup
fi
pct=100
[ $checks -gt 0 ] && pct=$(((checks - failures) * 100 / checks))
echo "$pct%: Checks: $checks, Failures: $failures, Errors: 0"
[ $failures -eq 0 ]
