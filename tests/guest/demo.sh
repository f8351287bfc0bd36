#!/bin/bash
# SPDX-License-Identifier: MIT
#
# demo.sh: what `make demo` runs. Boots a 2-vCPU Debian guest under QEMU
# (TCG) with vmtrace-agent and a fork loop per vCPU, runs vmtraced on it,
# lets it record for a few seconds, sends SIGUSR1, merges the sample and
# shows a summary and the first lines of `trace-cmd report`.
#
# Environment: VMT_BUILD (programs, default build), VMT_AGENT (agent binary,
# default $VMT_BUILD/vmtrace-agent), VMT_CACHE (kernel and initramfs cache,
# default build/guest), DEMO_SECONDS (recording time, default 6).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
B=${VMT_BUILD:-build}
AGENT=${VMT_AGENT:-$B/vmtrace-agent}
CACHE=${VMT_CACHE:-build/guest}
SECS=${DEMO_SECONDS:-6}
. "$ROOT/tests/guest/vmt-lib.sh"

T0=$(date +%s)
why=$(vmt_cannot_run) || true
if [ -n "$why" ]; then
	echo "demo: cannot run: $why" >&2
	exit 1
fi
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)	# the configuration takes absolute paths only
RUN=$CACHE/demo-run
VMT_DIR=$CACHE/demo
rm -rf "$VMT_DIR" "$RUN"
trap vmt_cleanup EXIT

echo "== booting a 2-vCPU guest under QEMU (TCG), trace-path-cpu0..1 and agent-ctl-path as FIFOs in $RUN"
vmt_boot "$RUN" pipe -s 2 -a vmt.load=forkloop -T 300 >/dev/null
echo "== starting vmtraced ($VMT_DIR/vmtraced.yaml)"
vmt_daemon "$VMT_DIR" demo "$RUN" fifo 64MiB ||
	{ echo "demo: vmtraced did not start:" >&2; cat "$VMT_DIR/vmtraced.log" >&2; exit 1; }
if ! vmt_wait_streaming 120; then
	echo "demo: the guest did not start streaming; console and daemon log follow" >&2
	tail -20 "$RUN/console.log" >&2
	tail -20 "$VMT_DIR/vmtraced.log" >&2
	exit 1
fi
echo "== streaming; recording $SECS s of a fork loop per vCPU"
sleep "$SECS"
vmt_ctl status
echo
echo "== kill -USR1 $VMT_DAEMON_PID"
kill -USR1 "$VMT_DAEMON_PID"
S=""
for _ in $(seq 1 600); do
	S=$(vmt_newest_sample "$VMT_DIR" demo)
	[ -n "$S" ] && break
	sleep 0.1
done
[ -n "$S" ] || { echo "demo: no sample was written" >&2; tail "$VMT_DIR/vmtraced.log" >&2; exit 1; }
ls -l "$(dirname "$S")"
echo
echo "== vmtracectl merge -o $VMT_DIR/demo.dat $S"
vmt_ctl merge -o "$VMT_DIR/demo.dat" "$S"
echo
echo "== trace-cmd report -i $VMT_DIR/demo.dat (first lines)"
trace-cmd report -i "$VMT_DIR/demo.dat" 2>/dev/null | head -25 || true
echo "..."
echo "sched_switch events: $(trace-cmd report -i "$VMT_DIR/demo.dat" 2>/dev/null | grep -c ' sched_switch: ' || true)"
echo
echo "== done in $(($(date +%s) - T0)) s. Files: $VMT_DIR (sample, aux, demo.dat, vmtraced.log)"
