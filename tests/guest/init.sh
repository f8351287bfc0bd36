#!/bin/sh
# SPDX-License-Identifier: MIT
#
# /init of the test guest (busybox). Brings up what vmtrace-agent needs and
# runs it; everything is reported on the console as lines that start with
# "VMT-" so that a test can wait for them:
#
#   VMT-INIT uptime=S kernel=KVER       /init started
#   VMT-PORTS name...                   /dev/virtio-ports links made
#   VMT-TRACE cpus=N clock=C events=N   tracefs state before the agent
#   VMT-LOAD kind pids...               the load started
#   VMT-AGENT-READY pid=P               the agent runs (it says HELLO itself)
#   VMT-TRIGGER rc=N tries=N            `vmtrace-agent trigger` done (vmt.trigger)
#   VMT-MARK uptime=S                   the trace_marker line "vmt-e2e-mark" (vmt.panic)
#   VMT-PANIC uptime=S                  about to panic (vmt.panic, vmt.bootpanic)
#   VMT-BOOTMAP found=0|1 info=...      the persistent ring buffer's state (vmt.bootpanic)
#   VMT-AGENT-KILLED uptime=S           the agent got SIGKILL (vmt.killagent)
#   VMT-POWEROFF uptime=S               the agent stopped for a power off (vmt.poweroff)
#   VMT-AGENT-EXIT rc=N                 the agent exited
#   VMT-AGENT-CPU utime=T stime=T       the agent's CPU ticks, if it still runs
#   VMT-STATS cpuN entries: ...         per_cpu/cpuN/stats at the end
#   VMT-BENCH phase=P round=R ...       one phase of vmt.bench (bench/guest.sh)
#   VMT-BENCH-END agent_ticks=T hz=100  vmt.bench done, the agent stopped
#   VMT-TIMEOUT                         vmt.timeout expired
#   VMT-END                             about to power off
#
# Kernel command line options (all optional):
#   vmt.load=forkloop|stress|none
#                            forkloop: one fork/exec loop per vCPU (default);
#                            stress: /bin/stress-ng (boot.sh -x) in /tmp
#   vmt.stress=A,B           stress-ng's arguments, commas for spaces (default
#                            --cpu,1,--fork,1,--hdd,1,--hdd-bytes,8M)
#   vmt.timeout=SECONDS      power off after this long (default 600, 0 = never)
#   vmt.agentargs=A,B        extra agent arguments, commas for spaces (e.g. -v)
#   vmt.tracing_on=0|1       tracing_on before the agent starts (default 0)
#   vmt.trigger=SECONDS      that long after the agent starts, run
#                            `vmtrace-agent trigger "e2e guest trigger"`, again every
#                            2s while the agent answers no (not streaming yet), at
#                            most 90 times
#   vmt.panic=SECONDS        that long after the agent switched tracing on
#                            (STREAM), write "vmt-e2e-mark" into trace_marker,
#                            2 s later panic the kernel (sysrq c); add panic=0
#                            to halt there rather than reboot
#   vmt.bootpanic=SECONDS    with a persistent ring buffer (trace_instance=boot_map):
#                            in a boot whose kernel did not find the previous
#                            boot's buffer, that long after tracing is on write
#                            "vmt-e2e-panic" into boot_map's trace_marker and at
#                            once panic (sysrq c); add panic=1 and boot.sh -R for
#                            the reboot. The next boot says VMT-BOOTMAP found=1
#   vmt.quiet=1              with vmt.panic: every event off just before the
#                            marker, which is then its CPU's last event, in a
#                            page that never fills (only a partial page
#                            takes it to the host)
#   vmt.killagent=SECONDS    that long after tracing is on, SIGKILL the agent
#   vmt.poweroff=SECONDS     that long after tracing is on, stop the agent
#                            (SIGTERM: it says BYE) and power off, as a clean
#                            shutdown does
#   vmt.bench=ROUNDS,SECONDS once tracing is on, ROUNDS rounds of three
#                            phases of /bin/stress-ng --cpu N --fork N for
#                            SECONDS each (N = vCPUs; boot.sh -x stress-ng,
#                            vmt.load=none): "off" (no event enabled, the
#                            agent stopped), "ftrace" (the events enabled,
#                            nobody reading: the agent SIGSTOPped) and
#                            "agent" (it streams). A round runs them in
#                            order, the next in reverse, so a drift of the
#                            host's speed weighs on each alike. Each phase
#                            says VMT-BENCH with stress-ng's bogo ops and
#                            the ticks of the agent and of every CPU
PATH=/bin:/sbin
export PATH
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
mount -t tmpfs tmpfs /tmp
mkdir -p /run	# the agent's trigger socket
T=/sys/kernel/tracing
mount -t tracefs tracefs $T 2>/dev/null || echo "VMT-WARN tracefs mount failed"
read UP IDLE </proc/uptime
echo "VMT-INIT uptime=$UP kernel=$(uname -r)"

LOAD=forkloop TIMEOUT=600 AGENTARGS="" TRON=0 TRIG="" PANIC="" QUIET="" KILLAG="" POWEROFF="" BOOTPANIC=""
BENCH=""
STRESS="--cpu 1 --fork 1 --hdd 1 --hdd-bytes 8M"
for a in $(cat /proc/cmdline); do
	case "$a" in
	vmt.load=*) LOAD=${a#*=} ;;
	vmt.timeout=*) TIMEOUT=${a#*=} ;;
	vmt.agentargs=*) AGENTARGS=$(echo "${a#*=}" | tr , ' ') ;;
	vmt.tracing_on=*) TRON=${a#*=} ;;
	vmt.trigger=*) TRIG=${a#*=} ;;
	vmt.panic=*) PANIC=${a#*=} ;;
	vmt.quiet=1) QUIET=1 ;;
	vmt.killagent=*) KILLAG=${a#*=} ;;
	vmt.bootpanic=*) BOOTPANIC=${a#*=} ;;
	vmt.poweroff=*) POWEROFF=${a#*=} ;;
	vmt.bench=*) BENCH=${a#*=} ;;
	vmt.stress=*) STRESS=$(echo "${a#*=}" | tr , ' ') ;;
	esac
done

end() {
	# the agent's own CPU time (clock ticks), to see what streaming costs
	a=$(cat /tmp/agent.pid 2>/dev/null)
	[ -n "$a" ] && [ -r /proc/$a/stat ] &&
		echo "VMT-AGENT-CPU $(awk '{print "utime=" $14 " stime=" $15}' /proc/$a/stat) hz=100"
	for c in $(seq 0 $(($(nproc) - 1))); do
		[ -r $T/per_cpu/cpu$c/stats ] && echo "VMT-STATS cpu$c $(tr '\n' ' ' <$T/per_cpu/cpu$c/stats)"
	done
	echo "VMT-END"
	sync
	poweroff -f
}

if [ "$TIMEOUT" -gt 0 ] 2>/dev/null; then
	(sleep "$TIMEOUT"; echo "VMT-TIMEOUT after ${TIMEOUT}s"; end) &
fi

# Debian builds virtio, virtio_pci and virtio_console as modules; load.list
# is in dependency order (mkinitrd.sh).
for m in $(cat /lib/modules/load.list); do
	insmod /lib/modules/$m || echo "VMT-WARN insmod $m failed"
done

# devtmpfs gives /dev/vportNpM only; the by-name links are udev's job
NCPU=$(nproc)
mkdir -p /dev/virtio-ports
i=0
while [ $i -lt 100 ]; do
	n=0
	for p in /sys/class/virtio-ports/vport*; do [ -e "$p/name" ] && n=$((n + 1)); done
	[ $n -ge $((NCPU + 1)) ] && break
	sleep 0.1
	i=$((i + 1))
done
for p in /sys/class/virtio-ports/vport*; do
	name=$(cat $p/name 2>/dev/null)
	[ -n "$name" ] && ln -sf /dev/${p##*/} /dev/virtio-ports/$name
done
echo "VMT-PORTS $(cd /dev/virtio-ports && echo *)"

# Events come from trace_event= on the command line (set before the other
# CPUs run); nothing here patches kernel text.
echo "$TRON" > $T/tracing_on
echo "VMT-TRACE cpus=$NCPU clock=$(sed 's/.*\[\(.*\)\].*/\1/' $T/trace_clock) events=$(grep -c . $T/set_event) bufkb=$(cat $T/buffer_size_kb)"

WL=""
case "$LOAD" in
forkloop)
	c=0
	while [ $c -lt $NCPU ]; do
		taskset -c $c sh -c 'while :; do /bin/true; done' &
		WL="$WL $!"
		c=$((c + 1))
	done
	;;
stress)
	# its workers' files go to the tmpfs; it runs until vmt.timeout
	(cd /tmp && exec /bin/stress-ng --temp-path /tmp --timeout 0 $STRESS) &
	WL=" $!"
	;;
none) ;;
*) echo "VMT-WARN unknown vmt.load=$LOAD" ;;
esac
echo "VMT-LOAD $LOAD$WL"

/bin/vmtrace-agent $AGENTARGS &
AG=$!
echo $AG > /tmp/agent.pid
echo "VMT-AGENT-READY pid=$AG"
if [ -n "$TRIG" ]; then
	(
		sleep "$TRIG"
		t=1 rc=1
		while :; do
			/bin/vmtrace-agent trigger "e2e guest trigger" && { rc=0; break; }
			[ $t -ge 90 ] && break
			sleep 2
			t=$((t + 1))
		done
		echo "VMT-TRIGGER rc=$rc tries=$t"
	) &
fi
# once the host streams (the agent turns tracing on at STREAM), then $1 s
after_stream() {
	while [ "$(cat $T/tracing_on)" != 1 ]; do sleep 0.2; done
	sleep "$1"
}
if [ -n "$PANIC" ]; then
	(
		after_stream "$PANIC"
		[ -n "$QUIET" ] && echo 0 > $T/events/enable
		echo vmt-e2e-mark > $T/trace_marker
		read UP IDLE </proc/uptime
		echo "VMT-MARK uptime=$UP"
		sleep 2
		read UP IDLE </proc/uptime
		echo "VMT-PANIC uptime=$UP"
		echo c > /proc/sysrq-trigger
	) &
fi
if [ -n "$BOOTPANIC" ]; then
	B=$T/instances/boot_map
	found=0
	dmesg | grep -q "Ring buffer meta .* is from previous boot" && found=1
	echo "VMT-BOOTMAP found=$found info=$(tr '\n' ' ' <$B/last_boot_info 2>/dev/null)" \
		"kernel: $(dmesg | grep 'boot_map\|Ring buffer.*meta\|Ring buffer.*valid\|System RAM' | sed 's/^\[[^]]*\] //' | tr '\n' '|')"
	[ $found = 1 ] || (
		after_stream "$BOOTPANIC"
		read UP IDLE </proc/uptime
		echo "VMT-PANIC uptime=$UP"
		echo vmt-e2e-panic > $B/trace_marker
		echo c > /proc/sysrq-trigger
	) &
fi
if [ -n "$KILLAG" ]; then
	(
		after_stream "$KILLAG"
		kill -9 $AG
		read UP IDLE </proc/uptime
		echo "VMT-AGENT-KILLED uptime=$UP"
	) &
fi
if [ -n "$POWEROFF" ]; then
	(
		after_stream "$POWEROFF"
		read UP IDLE </proc/uptime
		echo "VMT-POWEROFF uptime=$UP"
		kill -TERM $AG
	) &
fi
# vmt.bench: ticks of the agent (all its threads) and of every CPU (busy, all)
agent_ticks() { awk '{print $14 + $15}' /proc/$AG/stat; }
cpu_ticks() { awk '/^cpu / {t = 0; for (i = 2; i <= NF; i++) t += $i; print t - $5 - $6, t}' /proc/stat; }
bench_phase() {	# off|ftrace|agent ROUND SECONDS
	case $1 in
	off) kill -STOP $AG; echo 0 > $T/tracing_on; echo > $T/set_event ;;
	ftrace) kill -STOP $AG; cat /tmp/bench.events > $T/set_event; echo 1 > $T/tracing_on ;;
	agent) cat /tmp/bench.events > $T/set_event; echo 1 > $T/tracing_on; kill -CONT $AG ;;
	esac
	a0=$(agent_ticks); c0=$(cpu_ticks)
	m=$(cd /tmp && /bin/stress-ng --temp-path /tmp --cpu $NCPU --fork $NCPU --timeout "$3" \
		--metrics-brief 2>&1 | awk '$4 == "cpu" || $4 == "fork" { printf " %s=%s %s_secs=%s", $4, $5, $4, $6 }')
	a1=$(agent_ticks); c1=$(cpu_ticks)
	echo "VMT-BENCH phase=$1 round=$2$m agent_ticks=$((a1 - a0)) busy_ticks=$((${c1% *} - ${c0% *})) all_ticks=$((${c1#* } - ${c0#* })) hz=100"
}
if [ -n "$BENCH" ]; then
	(
		after_stream 2
		cp $T/set_event /tmp/bench.events
		r=1
		while [ $r -le "${BENCH%,*}" ]; do
			order="off ftrace agent"
			[ $((r % 2)) = 0 ] && order="agent ftrace off"
			for p in $order; do bench_phase $p $r "${BENCH#*,}"; done
			r=$((r + 1))
		done
		# stopped for good: what it moved and what it spent are final
		kill -STOP $AG
		echo "VMT-BENCH-END agent_ticks=$(agent_ticks) hz=100"
	) &
fi
wait $AG
echo "VMT-AGENT-EXIT rc=$?"
# the guest lives on without its agent (until vmt.timeout)
[ -n "$KILLAG" ] && while :; do sleep 3600; done
[ -n "$WL" ] && kill $WL 2>/dev/null
end
