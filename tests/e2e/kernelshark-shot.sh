#!/bin/bash
# SPDX-License-Identifier: MIT
#
# kernelshark-shot.sh HOST.dat GUEST.dat OUT.png
#
# Opens a host trace.dat and a guest trace.dat together in KernelShark
# (`kernelshark -i HOST.dat -a GUEST.dat`) on a private Xvfb server, waits
# until the main window has drawn and stopped changing, and saves a
# screenshot of the whole screen in OUT.png. KernelShark's stdout/stderr go
# to kernelshark.log beside OUT.png.
#
# Needs (Debian 12): kernelshark xvfb imagemagick. Nothing is installed here.
#
# Exit: 0 screenshot written and not blank
#       77 "SKIP: reason" - kernelshark, Xvfb or ImageMagick missing
#       1 KernelShark/Xvfb crashed, no window within the timeout, blank shot
#       2 usage
#
# Environment: KS_SHOT_TIMEOUT seconds for the window (60),
#              KS_SHOT_SIZE screen size (1600x1000), VMT_KEEP=1 keeps the
#              temporary folder (empty-screen shot, HOME) for debugging.
set -uo pipefail

usage() { echo "usage: $0 HOST.dat GUEST.dat OUT.png" >&2; exit 2; }
[ $# -eq 3 ] || usage
HOST=$1 GUEST=$2 OUT=$3
die() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }

TIMEOUT=${KS_SHOT_TIMEOUT:-60}
SIZE=${KS_SHOT_SIZE:-1600x1000}

for f in "$HOST" "$GUEST"; do
	[ -r "$f" ] || die "cannot read trace file '$f'"
done

# What Debian ships, package by package. `convert` is not probed: other
# tools may put a stand-in of that name on PATH; import/identify are only
# ImageMagick's.
missing=""
command -v kernelshark >/dev/null 2>&1 || missing="$missing kernelshark(kernelshark)"
command -v Xvfb >/dev/null 2>&1 || missing="$missing Xvfb(xvfb)"
for t in import identify; do
	command -v $t >/dev/null 2>&1 || { missing="$missing $t(imagemagick)"; }
done
[ -z "$missing" ] || skip "kernelshark screenshot: missing tools:$missing"

OUTDIR=$(dirname -- "$OUT")
mkdir -p -- "$OUTDIR" || die "cannot create $OUTDIR"
LOG=$OUTDIR/kernelshark.log
: >"$LOG" || die "cannot write $LOG"

T=$(mktemp -d "${TMPDIR:-/tmp}/vmt-ksshot.XXXXXX") || die "mktemp failed"
XPID="" KPID=""
stop() { # pid: TERM, then KILL after 3 s; reap it
	local p=$1 i
	[ -n "$p" ] || return 0
	kill "$p" 2>/dev/null || { wait "$p" 2>/dev/null; return 0; }
	for i in 1 2 3 4 5 6; do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.5
	done
	kill -KILL "$p" 2>/dev/null
	wait "$p" 2>/dev/null
	return 0
}
cleanup() {
	stop "$KPID"; KPID=""
	stop "$XPID"; XPID=""
	if [ -n "${VMT_KEEP:-}" ]; then
		echo "kept $T" >&2
	else
		rm -rf "$T"
	fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# A fresh HOME: no saved session, no first-run questions. KernelShark keeps
# its settings in KS_USER_CACHE_DIR/setting.ini (QSettings, INI; without
# the variable it uses /root/.cache/kernelshark as root, whatever HOME says).
# noRootWarn stops the modal "KernelShark is running with Root privileges"
# box, which otherwise holds back the main window when run as root.
export HOME=$T/home XDG_CONFIG_HOME=$T/home/.config XDG_CACHE_HOME=$T/home/.cache
export XDG_DATA_HOME=$T/home/.local/share XDG_RUNTIME_DIR=$T/run
export KS_USER_CACHE_DIR=$XDG_CACHE_HOME/kernelshark
mkdir -p "$XDG_CONFIG_HOME" "$KS_USER_CACHE_DIR" "$XDG_DATA_HOME" "$XDG_RUNTIME_DIR"
chmod 700 "$XDG_RUNTIME_DIR"
printf '[General]\nnoRootWarn=true\n' >"$KS_USER_CACHE_DIR/setting.ini"
# No session bus: an unusable address keeps Qt from autolaunching a
# dbus-daemon (dbus-launch --autolaunch) that would outlive us.
export DBUS_SESSION_BUS_ADDRESS=unix:path=$T/run/no-bus
unset WAYLAND_DISPLAY SESSION_MANAGER XAUTHORITY
export LIBGL_ALWAYS_SOFTWARE=1 QT_QPA_PLATFORM=xcb
export NO_AT_BRIDGE=1 QT_ACCESSIBILITY=0 QT_QPA_PLATFORMTHEME=

# Our own X server on a free display number (-displayfd), no TCP, no auth
# file needed for local clients.
Xvfb -displayfd 5 -screen 0 "${SIZE}x24" -nolisten tcp -noreset \
	5>"$T/display" </dev/null >"$T/xvfb.log" 2>&1 &
XPID=$!
for _ in $(seq 1 150); do
	[ -s "$T/display" ] && break
	kill -0 "$XPID" 2>/dev/null || { cat "$T/xvfb.log" >&2; die "Xvfb exited at start"; }
	sleep 0.1
done
[ -s "$T/display" ] || { cat "$T/xvfb.log" >&2; die "Xvfb gave no display within 15 s"; }
export DISPLAY=:$(head -n1 "$T/display" | tr -dc 0-9)

shot() { import -display "$DISPLAY" -window root "$1" 2>>"$T/import.log"; }
sig() { identify -format '%#' "$1" 2>/dev/null; }
colours() { identify -format '%k' "$1" 2>/dev/null; }

shot "$T/empty.png" || { cat "$T/import.log" >&2; die "import cannot capture the empty Xvfb screen"; }
EMPTY=$(sig "$T/empty.png")

start=$SECONDS
# No window manager: Qt's -geometry makes the main window fill the screen,
# so the host's and the guest's CPU rows all show (the default 800x518
# window shows only the first three rows of the graph).
echo "kernelshark -geometry ${SIZE}+0+0 -i $HOST -a $GUEST (DISPLAY=$DISPLAY)" >>"$LOG"
kernelshark -geometry "${SIZE}+0+0" -i "$HOST" -a "$GUEST" </dev/null >>"$LOG" 2>&1 &
KPID=$!

# Ready when the screen differs from the empty one, the drawn area is at
# least 600x400 (a main window, not the root warning or a progress box,
# which are about 360x150) and three screenshots in a row (1-3 s apart)
# are identical (loading and drawing done).
prev="" same=0 last_box=""
while :; do
	if ! kill -0 "$KPID" 2>/dev/null; then
		wait "$KPID"; rc=$?; KPID=""
		tail -n 20 "$LOG" >&2
		die "KernelShark exited with status $rc before its window was ready (see $LOG)"
	fi
	if ! kill -0 "$XPID" 2>/dev/null; then
		wait "$XPID"; rc=$?; XPID=""
		cat "$T/xvfb.log" >&2
		die "Xvfb exited with status $rc while KernelShark was starting"
	fi
	if [ $((SECONDS - start)) -ge "$TIMEOUT" ]; then
		[ -f "$T/cur.png" ] && cp "$T/cur.png" "$OUT" 2>/dev/null
		tail -n 20 "$LOG" >&2
		die "no KernelShark main window drawn within ${TIMEOUT} s (drawn area: ${last_box:-none}; last screen in $OUT, log $LOG)"
	fi
	sleep 0.5
	shot "$T/cur.png" || continue
	# pixel signature, and WxH+X+Y of what differs from the background
	read -r s box < <(identify -format '%# %@' "$T/cur.png" 2>/dev/null)
	last_box=$box
	bw=${box%%x*}; bh=${box#*x}; bh=${bh%%+*}
	case "$bw$bh" in *[!0-9]*|"") bw=0 bh=0 ;; esac
	if [ "$s" = "$EMPTY" ] || [ "$bw" -lt 600 ] || [ "$bh" -lt 400 ]; then
		same=0 prev=""
		continue
	fi
	if [ "$s" = "$prev" ]; then
		same=$((same + 1))
		[ "$same" -ge 2 ] && break
	else
		same=0 prev=$s
	fi
done
took=$((SECONDS - start))

cp "$T/cur.png" "$OUT" || die "cannot write $OUT"
n=$(colours "$OUT")
[ -n "$n" ] || die "identify cannot read $OUT"
# An empty Xvfb screen has 1 colour; KernelShark's window with text, icons
# and graphs has hundreds.
[ "$n" -gt 50 ] || die "screenshot $OUT looks blank ($n colours)"
kill -0 "$KPID" 2>/dev/null || die "KernelShark exited right after drawing (see $LOG)"
if grep -qiE 'segmentation fault|core dumped|terminate called|aborted' "$LOG"; then
	die "KernelShark reported a crash (see $LOG)"
fi
# KernelShark prints 'Loading  "FILE"' per stream; say so if one is missing.
for f in "$HOST" "$GUEST"; do
	grep -qF "Loading  \"$f\"" "$LOG" ||
		echo "WARN: kernelshark.log does not say it loaded $f" >&2
done
echo "PASS: KernelShark drew $HOST + $GUEST in ${took} s: $OUT (${n} colours, window area $last_box, not blank)"
exit 0
