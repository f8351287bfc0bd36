#!/bin/bash
# SPDX-License-Identifier: MIT
# Alignment of a guest's events on the host's time line, under TCG here.
# A real guest (tests/guest) streams to vmtraced with the host source on and
# clock_sync.markers: each probe writes a marker into the host trace when it
# is sent (S) and when its answer is read (R), and the agent one into the
# guest trace when it reads it (G). After `vmtracectl merge` and
# `trace-cmd report -i host -i guest`, G sits on the host's time line; with
# nothing but the clock offset to go wrong it lands inside [S, R], and at
# the midpoint (S + R) / 2 when both directions take as long. Printed:
# the distribution of |G - (S + R) / 2| (the alignment error, as far as the
# markers can tell: path asymmetry is invisible to any two-way method)
# against the one-way delay (R - S) / 2, and how many G fall inside [S, R].
# The probes of each round that were kept for the sync point are among
# them; the median over all probes is what a user's event sees.
# The RESULT line takes the fast probes (round trip at most twice the
# fastest seen), as the clock points are made of those; all probes are
# printed too. The guest idles unless ALIGN_LOAD names an init.sh load
# (forkloop): a busy TCG guest wakes its agent late, and that delay is on
# the way in only.
# Usage: VMT_BUILD=build bench/align.sh [SECONDS]   (root, QEMU)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
B=${VMT_BUILD:-build}
AGENT=${VMT_AGENT:-$B/vmtrace-agent}
CACHE=${VMT_CACHE:-build/guest}
SECS=${1:-${BENCH_QUICK:+10}}
SECS=${SECS:-30}
. "$ROOT/tests/guest/vmt-lib.sh"
why=$(vmt_cannot_run)
[ -z "$why" ] && ! command -v trace-cmd >/dev/null && why="no trace-cmd"
[ -n "$why" ] && { echo "SKIP: bench/align.sh: $why"; exit 0; }
"$ROOT/tests/guest/kernel.sh" "$CACHE/kernel" >/dev/null || { echo "SKIP: no guest kernel"; exit 0; }

W=$(mktemp -d "${TMPDIR:-/tmp}/vmt-align.XXXXXX")
trap 'vmt_cleanup; rm -rf "$W"' EXIT
VMT_DIR=$W/d
mkdir -p "$W/run" "$VMT_DIR"
vmt_boot "$W/run" pipe -s 2 ${ALIGN_LOAD:+-a vmt.load=$ALIGN_LOAD} -T $((SECS + 300)) >/dev/null || { echo "align: boot failed"; exit 1; }
cat >"$VMT_DIR/vmtraced.yaml" <<EOT
state_dir: $VMT_DIR/state
control_socket: $VMT_DIR/control.sock
record:
  ring_size: 64MiB
  clock: mono
  events: [sched:*, irq:*, timer:*]
  flush_timeout: 10s
host:
  enabled: true
  events: [sched:sched_switch]
  qemu_only: true
  ring_size: 32MiB
clock_sync:
  interval: 1s
  probes: 8
  markers: true
detectors:
  vcpu_starvation:
    enabled: false
guests:
  - name: al
    path: $W/run
    transport: fifo
    pidfile: $W/run/qemu.pid
EOT
"$B/vmtraced" -c "$VMT_DIR/vmtraced.yaml" 2>"$VMT_DIR/vmtraced.log" &
VMT_DAEMON_PID=$!
vmt_wait_streaming 150 || { echo "align: the guest did not stream"; exit 1; }
sleep "$SECS"
vmt_ctl dump --reason align >/dev/null || { echo "align: dump failed"; exit 1; }
vmt_cleanup
"$B/vmtracectl" merge -q -o "$W/out" "$VMT_DIR"/state/*/*.vmts || { echo "align: merge failed"; exit 1; }
trace-cmd report -t -i "$W/out/host.dat" -i "$W/out/al.dat" >"$W/report" 2>/dev/null ||
	{ echo "align: trace-cmd report failed"; exit 1; }
awk -f "$ROOT/tests/guest/markers.awk" "$W/report" | awk -v secs="$SECS" -v load="${ALIGN_LOAD:-idle}" '
	function sort(a, n,   i, j, t) {	# insertion sort is fine for a few hundred
		for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j > 0 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
	}
	function pct(a, n, p,   k) { k = int(n * p / 100 + 0.5); return a[k > 0 ? k : 1] }
	{ n++; S[n] = $2; G[n] = $3; R[n] = $4; rtt = $4 - $2; if (n == 1 || rtt < best) best = rtt }
	END {
		if (n < 5) { print "align: only " n " probes with all three markers"; exit 1 }
		for (i = 1; i <= n; i++) {
			e = G[i] - (S[i] + R[i]) / 2; e = (e < 0 ? -e : e) * 1e6
			all[++na] = e; owd[na] = (R[i] - S[i]) / 2 * 1e6
			if (G[i] >= S[i] && G[i] <= R[i]) inside++
			if (R[i] - S[i] <= 2 * best) { fast[++nf] = e; fowd[nf] = owd[na] }
		}
		sort(all, na); sort(owd, na); sort(fast, nf); sort(fowd, nf)
		printf "   guest %s, %d probes over %d s; fastest round trip %.1f us\n", load, n, secs, best * 1e6
		printf "   all probes:  |guest marker - host midpoint| median %.1f us, p90 %.1f us; one-way delay median %.1f us\n", pct(all, na, 50), pct(all, na, 90), pct(owd, na, 50)
		printf "   fast probes (%d, round trip <= 2 x fastest): median %.1f us, p90 %.1f us; one-way delay median %.1f us\n", nf, pct(fast, nf, 50), pct(fast, nf, 90), pct(fowd, nf, 50)
		printf "   guest markers inside [send, receive]: %d of %d\n", inside, n
		me = pct(fast, nf, 50)
		printf "RESULT align-error-median          %.1f us     target <= 10       %s  fast probes; one-way delay median %.1f us (TCG, guest %s)\n", me, (me <= 10 ? "PASS" : "MISS"), pct(fowd, nf, 50), load
		printf "RESULT align-causal                %.3f ratio target >= 0.99     %s  guest markers inside the host send..receive window\n", inside / n, (inside / n >= 0.99 ? "PASS" : "MISS")
	}'
