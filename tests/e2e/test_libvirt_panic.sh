#!/bin/bash
# SPDX-License-Identifier: MIT
#
# End to end with a real libvirtd: a guest panic the hypervisor sees. The
# domain as test_libvirt.sh makes it (2 vCPUs, the test kernel and initramfs
# booted directly, the devices from `vmtracectl libvirt-xml`, which offers
# <panic model='isa'/>: QEMU's pvpanic, driven by the guest's pvpanic_mmio),
# an idle guest (vmt.load=none) that writes "vmt-e2e-mark" into trace_marker
# and panics 2 s later (sysrq c) with panic=0; its agent's watch of kernel
# messages is off (-k), or it could say the panic first, and the libvirt
# path would be no longer the one tested. vmtraced runs the SHIPPED
# configuration but for its folders and flush_timeout: 60 s, so that a dump
# that asked the dead kernel to flush would be a minute late, unmistakably.
#   libvirt_panic_destroy   on_crash destroy (libvirt's default): libvirt's
#                  CRASHED event (detail panicked) through the libvirt events
#                  module gives a sample whose reason says the guest
#                  panicked; it holds the marker (the agent's timed partial
#                  pages); frozen well within flush_timeout of the event
#   libvirt_panic_preserve  on_crash preserve: QEMU stays, so neither
#                  process_death nor guest_silence has anything to say (the
#                  crash is said once): the panicked sample is the libvirt
#                  events module's alone, and the only one
# Each prints what it measured: the time from the panic (the console's line,
# as the host saw it) to the sample, from libvirt's event to the freeze, and
# how far before the panic each CPU's last event in the sample is.
# Skipped with the reason where libvirt is not installed.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
. "$ROOT/tests/e2e/libvirt-lib.sh"

TESTS="libvirt_panic_destroy libvirt_panic_preserve"
DOM=vmt-lvp-$$
VIRSH="virsh -q -c qemu:///system"
FLUSH_TIMEOUT_S=60 OLD=""
libvirt_work vmt-libvirt-panic
trap libvirt_cleanup EXIT

now_s() { date +%s.%N; }
# "2026-01-02 03:04:05.678901 UTC" in an info line → seconds since the epoch
info_time() { date -u -d "$(echo "$1" | grep -o '[0-9-]* [0-9:.]* UTC' | head -1)" +%s.%N; }

# panic_uptime CONSOLE: the guest's uptime at the panic: VMT-PANIC's, else
# the kernel's own line (the echo before it may die in the tty's buffer)
panic_uptime() {
	local up
	up=$(sed -n 's/.*VMT-PANIC uptime=\([0-9.]*\).*/\1/p' "$1" | head -1)
	[ -n "$up" ] || up=$(sed -n 's/^\[ *\([0-9.]*\)\] Kernel panic - not syncing.*/\1/p' "$1" | head -1)
	echo "${up:-0}"
}

shipped_config() {
	mkdir -p "$VMT_DIR"
	sed -e "s|^state_dir: .*|state_dir: $VMT_DIR/state|" \
	    -e "s|^control_socket: .*|control_socket: $VMT_DIR/control.sock|" \
	    -e "s|^  flush_timeout: .*|  flush_timeout: ${FLUSH_TIMEOUT_S}s|" \
	    conf/vmtraced.yaml >"$VMT_DIR/vmtraced.yaml"
	[ "$(diff conf/vmtraced.yaml "$VMT_DIR/vmtraced.yaml" | grep -c '^>')" = 3 ]
}

# panic_domain KERNEL INITRD ON_CRASH: $DOM (re)defined, as define_domain
# makes it but for the panic's command line and <on_crash>
panic_domain() {
	$VIRSH undefine "$DOM" >/dev/null 2>&1	# the last case's
	define_domain "$1" "$2" || return 1
	sed -i -e "s|<cmdline>.*</cmdline>|<cmdline>console=ttyS0 panic=0 quiet loglevel=5 vmt.timeout=$(vmt_scale 600) trace_event=sched:*,irq:*,timer:* vmt.load=none vmt.panic=3 vmt.agentargs=-k</cmdline>|" \
	       -e "s|<on_crash>.*</on_crash>|<on_crash>$3</on_crash>|" "$WORK/domain.xml"
	grep -q "<panic model='isa'/>" "$WORK/domain.xml" || { echo "no <panic> from libvirt-xml" >"$WORK/define.log"; return 1; }
	# define_domain defined it already (a new definition without its uuid
	# would be another domain of the same name)
	$VIRSH undefine "$DOM" >"$WORK/define.log" 2>&1 &&
		$VIRSH define "$WORK/domain.xml" >"$WORK/define.log" 2>&1
}

# streaming with aux version $1 and pages in
streaming_aux() {
	local j
	j=$(guest_json)
	echo "$j" | grep -q '"state": "streaming"' && echo "$j" | grep -q "\"aux_version\": $1[,}]" &&
		[ "$(echo "$j" | num pages_in)" -gt 0 ]
}

# $DOM's samples not in $OLD (an earlier case's)
new_samples() {
	local f
	for f in "$VMT_DIR/state/$DOM/"*.vmts; do
		[ -f "$f" ] && [[ " $OLD " != *" $f "* ]] && echo "$f"
	done
}
# those that say a crash (not the last boot's window a new boot dumps)
crash_samples() {
	local f
	for f in $(new_samples); do
		vmt_ctl info "$f" 2>/dev/null |
			grep -q '^trigger: .*\(libvirt: \|guest stopped answering\|process_death\)' && echo "$f"
	done
}
# those whose reason says it panicked
panicked_samples() {
	local f
	for f in $(new_samples); do
		vmt_ctl info "$f" 2>/dev/null | grep -q '^trigger: .*libvirt: domain crashed (panicked)' &&
			echo "$f"
	done
}
have_panicked() { [ -n "$(panicked_samples)" ]; }

# one_case NAME KERNEL INITRD ON_CRASH AUXVERSION
one_case() {
	local name=$1 on_crash=$4 aux=$5 t0 t1 s info rep up last trig frozen n
	ran "$name"
	OLD=$(echo "$VMT_DIR/state/$DOM/"*.vmts)
	: >"$WORK/console.log"
	panic_domain "$2" "$3" "$on_crash" || { fail "$name" "virsh define: $(head -3 "$WORK/define.log")"; return 1; }
	$VIRSH start "$DOM" >"$WORK/start.log" 2>&1 ||
		{ fail "$name" "virsh start: $(head -3 "$WORK/start.log")"; return 1; }
	if ! wait_for 240 streaming_aux "$aux"; then
		fail "$name" "not streaming: $(guest_json) (console: $(tail -2 "$WORK/console.log" | tr '\n' ' '))"
		return 1
	fi
	grep -q "VMT-WARN insmod pvpanic" "$WORK/console.log" &&
		{ fail "$name" "the guest has no pvpanic driver: $(grep VMT-WARN "$WORK/console.log")"; return 1; }
	wait_for 120 grep -q "Kernel panic - not syncing" "$WORK/console.log" ||
		{ fail "$name" "no panic (console: $(tail -3 "$WORK/console.log" | tr '\n' ' '))"; return 1; }
	t0=$(now_s)
	if ! wait_for $((FLUSH_TIMEOUT_S / 2)) have_panicked; then
		fail "$name" "no sample that says the guest panicked within $((FLUSH_TIMEOUT_S / 2)) s: $(ls "$VMT_DIR/state/$DOM/" 2>&1 | tr '\n' ' '); log: $(grep -i "libvirt\|dump" "$VMT_DIR/vmtraced.log" | tail -4 | tr '\n' ' ')"
		return 1
	fi
	t1=$(now_s)
	s=$(panicked_samples | head -1)
	info=$(vmt_ctl info "$s" 2>&1)
	trig=$(info_time "$(echo "$info" | grep -m1 '^trigger: .*panicked')")
	frozen=$(info_time "$(echo "$info" | grep -m1 '^guest: ')")
	# a dump that waited for the dead kernel's FLUSHED would be frozen a
	# whole flush_timeout after the event
	if [ "$(echo "$frozen - $trig < $FLUSH_TIMEOUT_S / 2" | bc)" != 1 ]; then
		fail "$name" "frozen $(echo "$frozen - $trig" | bc) s after libvirt's event (flush_timeout $FLUSH_TIMEOUT_S s): it waited for a dead agent"
		return 1
	fi
	rep=$WORK/$name.report
	vmt_ctl report --raw-time "$s" >"$rep" 2>&1 || { fail "$name" "report: $(head -3 "$rep")"; return 1; }
	up=$(panic_uptime "$WORK/console.log")
	last=$(awk '{ if (match($0, /\[[0-9]+\] +[0-9]+\.[0-9]+:/)) { f = substr($0, RSTART, RLENGTH);
		split(f, a, /[][ :]+/); c = a[2]; t = a[3]; if (t > m[c]) m[c] = t } }
		END { for (c in m) printf "cpu%d %.3f s before the panic; ", c + 0, P - m[c] }' P="$up" "$rep")
	printf 'MEASURED: %s: sample %.1f s after the console showed the panic; frozen %.3f s after libvirt'"'"'s event (flush_timeout %s s); last events: %s\n' \
		"$name" "$(echo "$t1 - $t0" | bc)" "$(echo "$frozen - $trig" | bc)" "$FLUSH_TIMEOUT_S" "$last"
	echo "$info" | grep '^trigger: ' | sed 's/^/  /'
	grep -q "vmt-e2e-mark" "$rep" ||
		{ fail "$name" "the marker written 2 s before the panic is not in the sample"; return 1; }
	if [ "$on_crash" = preserve ]; then
		# QEMU stays: the crash said once, by libvirt alone
		n=$(crash_samples | wc -l)
		[ "$n" = 1 ] || { fail "$name" "$n samples of the crash, not one: $(for f in $(crash_samples); do vmt_ctl info "$f" | grep '^trigger'; done | tr '\n' ' ')"; return 1; }
		$VIRSH domstate "$DOM" 2>/dev/null | grep -q crashed ||
			{ fail "$name" "the domain is not kept crashed: $($VIRSH domstate "$DOM" 2>&1)"; return 1; }
	fi
	pass "$name (a sample by libvirt's CRASHED event, reason panicked, the marker in it, no flush wait)"
	$VIRSH destroy "$DOM" >/dev/null 2>&1
	return 0
}

run() {
	local paths kernel initrd

	paths=$("$ROOT/tests/guest/boot.sh" -P -c "$CACHE" -A "$AGENT" 2>"$WORK/prep.err") ||
		{ skip_rest "no guest kernel or initramfs: $(tail -1 "$WORK/prep.err")"; return; }
	read -r kernel initrd <<<"$paths"
	libvirt_up || { fail libvirt_panic_destroy "libvirtd did not start (see $LV/log)"; skip_rest "no libvirtd"; return; }
	shipped_config || { skip_rest "the shipped config could not be redirected"; return; }
	"$B/vmtraced" -c "$VMT_DIR/vmtraced.yaml" 2>"$VMT_DIR/vmtraced.log" &
	VMT_DAEMON_PID=$!
	wait_for 20 test -S "$VMT_DIR/control.sock" ||
		{ skip_rest "vmtraced did not start: $(tail -3 "$VMT_DIR/vmtraced.log")"; return; }
	want libvirt_panic_destroy && one_case libvirt_panic_destroy "$kernel" "$initrd" destroy 1
	# the first case's QEMU gone before the domain is redefined
	wait_for 60 eval '! $VIRSH domstate "$DOM" 2>/dev/null | grep -q running'
	want libvirt_panic_preserve && one_case libvirt_panic_preserve "$kernel" "$initrd" preserve \
		"$(want libvirt_panic_destroy && echo 2 || echo 1)"
	skip_rest "not run (VMT_TEST, or an earlier step failed)"
}

# VMT_TEST=NAME: the cases whose name holds NAME
want() { [[ "$1" == *"${VMT_TEST:-}"* ]]; }

why=$(libvirt_cannot_run)
libvirt_main "$why"
