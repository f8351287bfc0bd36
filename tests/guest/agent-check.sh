#!/bin/bash
# SPDX-License-Identifier: MIT
#
# agent-check.sh [options]: end-to-end check of vmtrace-agent in a TCG guest,
# with tests/tools/agentpeer as the host end and stock trace-cmd as the judge.
#
#   -t pipe|socket   transport (default pipe)
#   -m cmdline|runtime
#                    cmdline: trace_event=sched:*,irq:*,timer:* at boot and a
#                             START with the same list (no enable file written)
#                    runtime: no trace_event= at boot; START enables
#                             sched:*,irq:irq_handler_entry (kernel text patched)
#   -1               single-threaded TCG (the default, as boot.sh's)
#   -M               multi-threaded TCG (boot.sh -M)
#   -s SECS          seconds of streaming per session (default 10)
#   -f SECS          FLUSH every SECS (default 0: one flush at the end)
#   -n N             sessions (STOP, then START)
#   -R               with -n: the next START is sent while streaming
#   -c DIR           cache (default build/guest); output in DIR/check-MODE-TRANSPORT
#   -A FILE          agent binary (default $VMT_AGENT, else build/vmtrace-agent)
#   -a ARGS          more kernel command line (e.g. vmt.load=none, ftrace=function)
#   -b KB            buffer_size_kb in the START (default 0: leave the guest's)
#   -x               the peer first sends junk and bad requests (agentpeer -x)
#
# Passes when the peer's checks hold (bundle crc, bytes received = bytes_sent
# at every flush, decoded events = the agent's "read events") and trace-cmd
# report of each session shows as many events as the agent read, with
# sched_switch among them. A guest that hangs (run-time text patching under
# TCG can livelock it) is booted once more, and the retry is reported.
set -uo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TRANSPORT=pipe MODE=cmdline MULTI="" SECS=10 EVERY=0 SESSIONS=1 CACHE=build/guest
AGENT=${VMT_AGENT:-build/vmtrace-agent} APPEND="" ABUSE="" BUFKB=0 RESTART=""
while getopts "t:m:1Ms:f:n:c:A:a:b:xRh" o; do
	case $o in
	t) TRANSPORT=$OPTARG ;;
	m) MODE=$OPTARG ;;
	1) MULTI="" ;;
	M) MULTI=-M ;;
	s) SECS=$OPTARG ;;
	f) EVERY=$OPTARG ;;
	n) SESSIONS=$OPTARG ;;
	c) CACHE=$OPTARG ;;
	A) AGENT=$OPTARG ;;
	a) APPEND=$OPTARG ;;
	x) ABUSE=-x ;;
	R) RESTART=-R ;;
	b) BUFKB=$OPTARG ;;
	h) sed -n '3,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) exit 2 ;;
	esac
done
case $MODE in
cmdline) BOOTEV='sched:*,irq:*,timer:*' STARTEV='sched:*,irq:*,timer:*' ;;
runtime) BOOTEV='' STARTEV='sched:*,irq:irq_handler_entry' ;;
*) echo "agent-check.sh: -m cmdline|runtime" >&2; exit 2 ;;
esac
command -v trace-cmd >/dev/null || { echo "agent-check.sh: trace-cmd is needed" >&2; exit 2; }

mkdir -p "$CACHE"
PEER=$CACHE/agentpeer
if [ ! -x "$PEER" ] || [ -n "$(find "$ROOT/tests/tools/agentpeer.c" "$ROOT"/lib/*.c -newer "$PEER" 2>/dev/null)" ]; then
	gcc -std=gnu11 -Wall -Wextra -Werror -Wno-unused-parameter -O2 -g -I"$ROOT/lib" -D_GNU_SOURCE \
		-o "$PEER" "$ROOT/tests/tools/agentpeer.c" "$ROOT"/lib/{proto,util,meta,log,page}.c || exit 1
fi

OUT=$CACHE/check-$MODE-$TRANSPORT${MULTI:+-multi}
RUN=$OUT/run
PIDFILE=""
cleanup() { [ -n "$PIDFILE" ] && [ -s "$PIDFILE" ] && kill "$(cat "$PIDFILE")" 2>/dev/null; }
trap cleanup EXIT

attempt() {
	rm -rf "$OUT"
	mkdir -p "$RUN"
	local t0 pid rc
	t0=$(date +%s.%N)
	pid=$("$HERE/boot.sh" -c "$CACHE" -A "$AGENT" -r "$RUN" -t "$TRANSPORT" -e "$BOOTEV" $MULTI \
		-T $((SECS * SESSIONS + 240)) -a "$APPEND") || return 1
	PIDFILE=$RUN/qemu.pid
	timeout $((SECS * SESSIONS + 200)) "$PEER" -r "$RUN" -o "$OUT" -t "$TRANSPORT" -s "$SECS" \
		-f "$EVERY" -n "$SESSIONS" -e "$STARTEV" -b "$BUFKB" $ABUSE $RESTART > "$OUT/peer.log" 2>&1
	rc=$?
	kill "$pid" 2>/dev/null
	wait_gone "$pid"
	sed -n 's/.*VMT-INIT uptime=\([0-9.]*\).*/guest \/init at \1 s of guest uptime/p' "$RUN/console.log"
	echo "boot to HELLO: $(sed -n 's/^\[ *\([0-9.]*\)\] <- HELLO.*/\1/p' "$OUT/peer.log" | head -1) s after QEMU started"
	return $rc
}
wait_gone() { for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done; kill -9 "$1" 2>/dev/null; }

echo "== agent-check: mode=$MODE transport=$TRANSPORT${MULTI:+ multi-threaded TCG} secs=$SECS flush=$EVERY sessions=$SESSIONS"
attempt
rc=$?
if [ $rc -ne 0 ] && { [ $rc -eq 124 ] || grep -q 'FATAL: no ' "$OUT/peer.log"; }; then
	echo "RETRY: the guest looked hung (peer rc=$rc: $(grep -m1 -E 'FATAL|FAIL' "$OUT/peer.log"))"
	tail -5 "$RUN/console.log" | sed 's/^/  console: /'
	cp -r "$OUT" "$OUT.hung" 2>/dev/null
	attempt
	rc=$?
fi
grep -E 'STARTED|FLUSHED|session|OK|FAIL|FATAL' "$OUT/peer.log"
[ $rc -eq 0 ] || { echo "FAIL: agentpeer rc=$rc (see $OUT/peer.log, $RUN/console.log)"; exit 1; }

status=0
for s in "$OUT"/s*/; do
	s=${s%/}
	want=$(sed -n "s/.*session $(basename "$s" | tr -d s) saved in .*: \([0-9]*\) events decoded, \([0-9]*\) read$/\2/p" "$OUT/peer.log")
	(cd "$s" && trace-cmd restore -c -t meta -k meta/kallsyms -o head.dat >restore.log 2>&1 &&
		trace-cmd restore -i head.dat -o trace.dat $(ls cpu*.raw | sort -V) >>restore.log 2>&1 &&
		trace-cmd report trace.dat > report.txt 2>report.err) || { echo "FAIL: trace-cmd on $s"; status=1; continue; }
	# "CPU:N [K EVENTS DROPPED]" marks ring-buffer overwrites, not events
	got=$(grep -vcE '^cpus=|^CPU:[0-9]+ \[([0-9]+ )?EVENTS DROPPED\]$' "$s/report.txt")
	drops=$(sed -n 's/^CPU:[0-9]* \[\([0-9]*\) EVENTS DROPPED\]$/\1/p' "$s/report.txt" | awk '{n+=$1} END {print n+0}')
	sw=$(grep -c ' sched_switch: ' "$s/report.txt")
	if [ "$got" = "$want" ] && [ "$sw" -gt 0 ]; then
		echo "CHECK $(basename "$s"): trace-cmd report $got events = agent read events $want, sched_switch $sw, dropped by overwrite $drops: MATCH"
	else
		echo "CHECK $(basename "$s"): trace-cmd report $got events, agent read events $want, sched_switch $sw: MISMATCH"
		status=1
	fi
done
[ $status -eq 0 ] && echo "PASS" || echo "FAIL"
exit $status
