#!/bin/bash
# SPDX-License-Identifier: MIT
#
# boot.sh [options]: boot the test guest under QEMU (TCG) in the background
# and print QEMU's pid on stdout (the only thing printed there).
#
#   -c DIR     cache: kernel, initramfs (default build/guest)
#   -A FILE    vmtrace-agent binary (default $VMT_AGENT, else build/vmtrace-agent);
#              the initramfs is rebuilt when it, init.sh or mkinitrd.sh change
#   -r DIR     run directory: port endpoints, console.log, qemu.log, qemu.pid
#              (default CACHE/run)
#   -t pipe|socket
#              host side of the ports (default pipe):
#              pipe:   DIR/NAME.in (host writes) and DIR/NAME.out (host reads), FIFOs
#              socket: DIR/NAME, a unix socket QEMU listens on (server=on,wait=off);
#                      until the host connects, guest writes to that port block
#   -s N       vCPUs (default 2); ports trace-path-cpu0..N-1 and agent-ctl-path
#   -m MEM     memory (default 512M)
#   -e LIST    trace_event= of the kernel command line (default sched:*,irq:*,timer:*;
#              "" for none, so events get enabled at run time)
#   -a ARGS    more kernel command line (vmt.load=, vmt.timeout=, vmt.agentargs=,
#              see init.sh)
#   -T SECS    vmt.timeout: the guest powers off after SECS (default 600)
#   -x FILE    a host program to add to the initramfs as /bin/NAME, with its
#              shared libraries (repeat for more; e.g. stress-ng for
#              vmt.load=stress); such an initramfs is CACHE/initramfs-extra.cpio.gz,
#              so the default one stays as it is
#   -M         multi-threaded TCG (a host thread a vCPU). The default is
#              single-threaded TCG (-accel tcg,thread=single; -1 says it
#              too): with a thread a vCPU, QEMU 7.2 lets a vCPU run code
#              another vCPU has just patched (text_poke_bp()'s int3, a
#              static key switched: tracepoints, sched_clock at boot) and
#              the guest kernel dies of "Oops: int3" or hangs in its int3
#              handler, now and then
#   -R         let the guest reboot inside the same QEMU (no -no-reboot): a
#              panic with panic=N boots it again, RAM kept (a persistent
#              ring buffer, reserve_mem=)
#   -w         wait for QEMU to exit instead (still prints the pid first)
#   -P         prepare only: fetch the kernel, build the initramfs, print
#              their absolute paths (KERNEL INITRD) instead of booting, for
#              a guest started by something else (libvirt)
#
# The run directory then holds console.log (the guest console, VMT-* markers),
# qemu.log, qemu.pid, and monitor: QEMU's human monitor on a unix socket, to
# look into a guest that seems hung (`info registers`, `info cpus`). Stop the guest with `kill PID` (or let it power off).
# Example:
#   pid=$(tests/guest/boot.sh -c build/guest -t socket -a vmt.load=forkloop)
#   grep -m1 VMT-AGENT-READY <(tail -F build/guest/run/console.log)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=build/guest AGENT=${VMT_AGENT:-build/vmtrace-agent} RUN="" TRANSPORT=pipe
SMP=2 MEM=512M EVENTS='sched:*,irq:*,timer:*' APPEND="" TIMEOUT=600 ACCEL=tcg,thread=single WAIT=0 PREP=0 EXTRA=() NOREBOOT=-no-reboot
while getopts "c:A:r:t:s:m:e:a:T:x:1MRwPh" o; do
	case $o in
	c) CACHE=$OPTARG ;;
	A) AGENT=$OPTARG ;;
	r) RUN=$OPTARG ;;
	t) TRANSPORT=$OPTARG ;;
	s) SMP=$OPTARG ;;
	m) MEM=$OPTARG ;;
	e) EVENTS=$OPTARG ;;
	a) APPEND=$OPTARG ;;
	T) TIMEOUT=$OPTARG ;;
	x) EXTRA+=("$OPTARG") ;;
	1) ACCEL=tcg,thread=single ;;
	M) ACCEL=tcg,thread=multi ;;
	R) NOREBOOT= ;;
	w) WAIT=1 ;;
	P) PREP=1 ;;
	h) sed -n '3,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) exit 2 ;;
	esac
done
case $TRANSPORT in pipe|socket) ;; *) echo "boot.sh: -t pipe|socket" >&2; exit 2 ;; esac
[ -n "$RUN" ] || RUN=$CACHE/run
mkdir -p "$CACHE" "$RUN"

if [ ! -f "$AGENT" ]; then
	echo "boot.sh: no agent binary at $AGENT: build it (make, or make O=build/plain all)" \
		"or name one with -A FILE (or VMT_AGENT)" >&2
	exit 2
fi
KDIR=$CACHE/kernel
KV=$("$HERE/kernel.sh" "$KDIR")
INITRD=$CACHE/initramfs.cpio.gz
[ ${#EXTRA[@]} = 0 ] || INITRD=$CACHE/initramfs-extra.cpio.gz
# keyed on content, not dates: switching between two agent builds must rebuild
KEY=$(cat "$AGENT" "$HERE/init.sh" "$HERE/mkinitrd.sh" ${EXTRA[@]+"${EXTRA[@]}"} | sha256sum | cut -c1-64)-$KV
[ ${#EXTRA[@]} = 0 ] || KEY="$KEY ${EXTRA[*]}"
if [ ! -s "$INITRD" ] || [ "$(cat "$INITRD.key" 2>/dev/null)" != "$KEY" ]; then
	"$HERE/mkinitrd.sh" "$KDIR" "$KV" "$AGENT" "$INITRD" ${EXTRA[@]+"${EXTRA[@]}"}
	echo "$KEY" > "$INITRD.key"
fi
if [ $PREP = 1 ]; then
	echo "$(cd "$KDIR/boot" && pwd)/vmlinuz-$KV $(cd "$(dirname "$INITRD")" && pwd)/$(basename "$INITRD")"
	exit 0
fi

# one chardev + virtserialport per port; nr=0 is reserved for consoles
DEV=(-device "virtio-serial-pci,id=vser0,max_ports=$((SMP + 2))")
nr=1
for name in agent-ctl-path $(seq -f 'trace-path-cpu%g' 0 $((SMP - 1))); do
	rm -f "$RUN/$name" "$RUN/$name.in" "$RUN/$name.out" "$RUN/monitor"
	if [ "$TRANSPORT" = pipe ]; then
		mkfifo "$RUN/$name.in" "$RUN/$name.out"
		DEV+=(-chardev "pipe,id=ch$nr,path=$RUN/$name")
	else
		DEV+=(-chardev "socket,id=ch$nr,path=$RUN/$name,server=on,wait=off")
	fi
	DEV+=(-device "virtserialport,bus=vser0.0,nr=$nr,chardev=ch$nr,name=$name")
	nr=$((nr + 1))
done

CMDLINE="console=ttyS0 panic=-1 quiet loglevel=5 vmt.timeout=$TIMEOUT"
[ -n "$EVENTS" ] && CMDLINE="$CMDLINE trace_event=$EVENTS"
[ -n "$APPEND" ] && CMDLINE="$CMDLINE $APPEND"

: > "$RUN/console.log"
setsid qemu-system-x86_64 -name "vmt-guest,debug-threads=on" -machine pc -accel "$ACCEL" -smp "$SMP" -m "$MEM" \
	-nographic $NOREBOOT -nic none -serial "file:$RUN/console.log" \
	-monitor "unix:$RUN/monitor,server=on,wait=off" \
	-kernel "$KDIR/boot/vmlinuz-$KV" -initrd "$INITRD" -append "$CMDLINE" \
	"${DEV[@]}" </dev/null >"$RUN/qemu.log" 2>&1 &
PID=$!
echo $PID > "$RUN/qemu.pid"
echo $PID
if [ $WAIT = 1 ]; then
	wait $PID
fi
