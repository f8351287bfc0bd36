#!/bin/bash
# SPDX-License-Identifier: MIT
#
# mkbusy.sh [OUT.tar.zst]: record the corpus guest-6.1-busy again (README.md
# beside this script says what it is). Default output:
# tests/corpus/guest-6.1-busy.tar.zst. Needs root, qemu-system-x86_64,
# busybox-static, stress-ng, trace-cmd and zstd; not run by `make check`.
#
# The test guest (tests/guest/boot.sh, 2 vCPUs, TCG) runs stress-ng from the
# host (boot.sh -x) with its CPU, fork and I/O stressors, events from the
# kernel command line; vmtraced records it into a ring large enough to keep
# every page, uncompressed; once the CPUs have 2 * TARGET pages in, `vmtracectl dump`
# writes the window, and tests/tools/corpusexport turns the sample and its
# aux file into the corpus layout (pages exactly as the guest spliced them).
# expected-event-counts.txt comes from stock trace-cmd: `trace-cmd restore`
# of the pages with the guest's own tracefs files, then `trace-cmd report`.
#
# Environment: B (build with vmtraced, vmtracectl, tests/tools/corpusexport;
# default build/plain), AGENT (default $B/vmtrace-agent), CACHE (kernel and
# initramfs, default build/guest), TARGET (pages per CPU on average, default
# 2400; the CPUs need not be even, a ring holds 4096),
# STRESS (stress-ng's arguments), KEEP=1 keeps the work folder.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
B=${B:-build/plain}
AGENT=${AGENT:-$B/vmtrace-agent}
CACHE=${CACHE:-build/guest}
TARGET=${TARGET:-2400}
STRESS=${STRESS:---cpu 1 --fork 1 --hdd 1 --hdd-bytes 8M}
OUT=${1:-tests/corpus/guest-6.1-busy.tar.zst}
NAME=guest-6.1-busy
EVENTS="sched:*,irq:*,timer:*,syscalls:sys_enter_openat,syscalls:sys_exit_openat"
EVENTS="$EVENTS,syscalls:sys_enter_read,syscalls:sys_exit_read"
EVENTS="$EVENTS,syscalls:sys_enter_write,syscalls:sys_exit_write"

. "$ROOT/tests/guest/vmt-lib.sh"
why=$(vmt_cannot_run)
[ -z "$why" ] || { echo "mkbusy.sh: cannot run: $why" >&2; exit 1; }
for t in stress-ng trace-cmd zstd python3; do
	command -v $t >/dev/null || { echo "mkbusy.sh: no $t" >&2; exit 1; }
done
for f in vmtraced vmtracectl tests/tools/corpusexport; do
	[ -x "$B/$f" ] || { echo "mkbusy.sh: no $B/$f (make O=$B tests)" >&2; exit 1; }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/vmt-mkbusy.XXXXXX")
VMT_DIR=$WORK/d
RUN=$WORK/run
C=$WORK/$NAME
done_() {
	vmt_cleanup
	[ "${KEEP:-0}" = 1 ] && echo "mkbusy.sh: kept $WORK" >&2 || rm -rf "$WORK"
}
trap done_ EXIT
mkdir -p "$VMT_DIR" "$RUN"

# The guest enables the events itself, from the command line, and the
# daemon asks for the same set: the agent leaves a matching set alone (no
# kernel text patched at run time). Commas for spaces in vmt.stress.
vmt_boot "$RUN" socket -s 2 -m 768M -e "$EVENTS" -x "$(command -v stress-ng)" \
	-a "vmt.load=stress vmt.stress=$(echo "$STRESS" | tr ' ' ,)" -T 3600 >/dev/null

# 16 MiB rings: 4096 pages per CPU, more than TARGET and what the dump's
# flush adds; uncompressed, so that the sample holds the pages themselves.
cat >"$VMT_DIR/vmtraced.yaml" <<EOF
state_dir: $VMT_DIR/state
control_socket: $VMT_DIR/control.sock
compression_level: 3
record:
  ring_size: 16MiB
  guest_buffer_size: 4MiB
  clock: mono
  events: [$(echo "$EVENTS" | sed 's/,/, /g')]
  flush_timeout: 10s
  compression: off
detectors:
  vcpu_starvation:
    enabled: false
guests:
  - name: busy
    path: $RUN
    transport: socket
EOF
"$B/vmtraced" -c "$VMT_DIR/vmtraced.yaml" 2>"$VMT_DIR/vmtraced.log" &
VMT_DAEMON_PID=$!
vmt_wait_console "$RUN" VMT-LOAD 600 || { echo "mkbusy.sh: the guest did not start its load" >&2; exit 1; }
grep -a 'VMT-TRACE\|VMT-LOAD\|VMT-WARN' "$RUN/console.log" >&2
vmt_wait_streaming 600 || { echo "mkbusy.sh: no stream: $(tail -2 "$VMT_DIR/vmtraced.log")" >&2; exit 1; }

# pages_in of the guest, all CPUs, from `vmtracectl --json guests`
pages_in() {
	vmt_ctl --json guests | python3 -c '
import json, sys
print(sum(g.get("pages_in", 0) for g in json.load(sys.stdin).get("guests", [])))'
}
n=0 i=0
while [ "$n" -lt $((TARGET * 2)) ]; do
	[ $i -lt "$(vmt_scale 3600)" ] || { echo "mkbusy.sh: only $n pages after an hour" >&2; exit 1; }
	sleep 1
	i=$((i + 1))
	n=$(pages_in)
	[ $((i % 30)) = 0 ] && echo "mkbusy.sh: $n pages in" >&2
done
S=$(vmt_ctl dump --reason "corpus $NAME" | head -1)
case "$S" in *.vmts) ;; *) echo "mkbusy.sh: dump: $S" >&2; exit 1 ;; esac
vmt_ctl info "$S" >&2
grep -a 'VMT-STATS\|VMT-WARN' "$RUN/console.log" >&2 || true
vmt_cleanup

mkdir -p "$C"
"$B/tests/tools/corpusexport" "$S" "$(ls "$(dirname "$S")"/*.vmtaux | tail -1)" "$C" | tee "$WORK/export.txt"
# what the agent asked tracefs for, one event a line as tracefs lists them
for e in $(echo "$EVENTS" | tr , ' '); do
	sys=${e%%:*} ev=${e#*:}
	for d in "$C/meta/events/$sys"/$ev; do
		[ -f "$d/format" ] && echo "$sys:$(basename "$d")"
	done
done >"$C/meta/set_event"
echo 4096 >"$C/meta/buffer_size_kb"

# The expected counts, by stock trace-cmd alone: a header from the guest's
# tracefs files (-t), then the pages as they are.
ls "$C/pages" >&2
trace-cmd restore -c -t "$C/meta" -k "$C/meta/kallsyms" -o "$WORK/head.dat" >&2
trace-cmd restore -i "$WORK/head.dat" -o "$WORK/trace.dat" \
	$(for c in "$C"/pages/cpu*.raw; do echo "$c"; done | sort -V) >&2
trace-cmd report -i "$WORK/trace.dat" 2>/dev/null | awk '$1 !~ /^cpus=/ {
	for (i = 1; i <= NF; i++) if ($i ~ /^[a-z_0-9]+:$/ && $(i - 1) ~ /^[0-9]+\.[0-9]+:$/) { print $i; break }
}' | sort | uniq -c | sort -rn >"$C/expected-event-counts.txt"
total=$(awk '{ s += $1 } END { print s }' "$C/expected-event-counts.txt")
echo "mkbusy.sh: trace-cmd report: $total events" >&2
cpus=$(grep -c '^cpu' "$WORK/export.txt")
{
	cat <<-EOF
	# $NAME: real ftrace pages of a busy guest

	A Debian 12 guest (kernel $(awk '/^guest/ { print $4 }' "$WORK/export.txt"), $cpus vCPUs, 768 MiB)
	under QEMU TCG, the project's test guest (tests/guest/boot.sh: busybox initramfs,
	vmtrace-agent splicing each CPU's trace_pipe_raw into virtio-serial), running
	\`stress-ng $STRESS\` (CPU, fork and I/O stressors; the I/O one on tmpfs).
	Events enabled on the kernel command line: $EVENTS.
	Recorded by vmtraced (uncompressed 16 MiB rings, nothing overwritten),
	dumped with \`vmtracectl dump\` and exported by tests/tools/corpusexport;
	made by tests/corpus/mkbusy.sh.

	- pages/cpuN.raw: back-to-back 4096-byte ring-buffer pages as they arrived;
	  the last pages of each CPU are partial pages flushed at the dump.
	- meta/: the guest's tracefs files in tracefs layout, from the aux file
	  (events/header_page, header_event, events/<system>/<event>/format,
	  printk_formats, kallsyms, trace_clock) and the dump (saved_cmdlines,
	  saved_tgids, per_cpu/cpuN/stats as the agent last read them); set_event
	  (the events above, expanded) and buffer_size_kb (what vmtraced asked for).
	- expected-event-counts.txt: events per name as stock \`trace-cmd report\`
	  decodes a trace.dat made by \`trace-cmd restore\` from these pages and
	  meta/ (-t meta -k meta/kallsyms): $total events in all.

	What corpusexport said (pages, events by page_scan(), pages with the
	missed-events flag, pages that do not walk, and the ring's counters):

	EOF
	sed 's/^/    /' "$WORK/export.txt"
} >"$C/README.md"
# whole or not at all: zstd -19 of ~20 MB takes a while
tar -C "$WORK" --owner=0 --group=0 --sort=name -cf - "$NAME" | zstd -19 -q -o "$OUT.tmp" -f
mv "$OUT.tmp" "$OUT"
ls -l "$OUT" >&2
