# SPDX-License-Identifier: MIT
# Shell functions shared by demo.sh and the end-to-end suite: boot a guest,
# run vmtraced on it, wait for it to stream, dump, merge. Source it with
# ROOT (the source tree), B (the build with vmtraced, vmtracectl) and
# CACHE (kernel and initramfs cache) set.

VMT_QEMU_PIDS=""
VMT_DAEMON_PID=""

vmt_say() { printf '%s\n' "$*" >&2; }

# vmt_scale N: N (a count of seconds or of polls that bounds a wait, only
# there to catch a hang) times VMT_TEST_TIMEOUT_SCALE, as the C suites'
# test_deadline_ms() does.
vmt_scale() {
	awk -v n="$1" -v s="${VMT_TEST_TIMEOUT_SCALE:-1}" \
		'BEGIN { if (s + 0 < 1) s = 1; printf "%d\n", n * s }'
}

# vmt_boot RUN TRANSPORT [boot.sh options...]: boots, remembers QEMU's pid.
vmt_boot() {
	local run=$1 transport=$2 pid
	shift 2
	pid=$("$ROOT/tests/guest/boot.sh" -c "$CACHE" -A "$AGENT" -r "$run" -t "$transport" "$@") || return 1
	VMT_QEMU_PIDS="$VMT_QEMU_PIDS $pid"
	echo "$pid"
}

# vmt_wait_console RUN PATTERN SECONDS
vmt_wait_console() {
	local i=0 n
	n=$(vmt_scale $(($3 * 10)))
	while [ $i -lt "$n" ]; do
		grep -q "$2" "$1/console.log" 2>/dev/null && return 0
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

# vmt_wait_panic RUN SECONDS: the guest's own panic on RUN's console, its
# VMT-PANIC line and then the kernel's; a kernel that died of something
# else first (vmt_console_crash says what) is not waited for as one.
vmt_wait_panic() {
	vmt_wait_console "$1" "VMT-PANIC" "$2" && vmt_wait_console "$1" "Kernel panic - not syncing" "$2"
}

# vmt_console_crash RUN: "; the kernel crashed first: LINE", LINE the first
# line of a guest kernel crash on RUN's console that the test did not cause
# (its own panics come after a VMT-PANIC line), or nothing: for a failure
# to say beside its own words.
vmt_console_crash() {
	local c
	c=$(sed -n '/VMT-PANIC/q; /Oops: \|BUG: \|Kernel panic/{s/\r//g; s/^\[ *[0-9.]*\] //; p; q}' \
		"$1/console.log" 2>/dev/null | cut -c1-160)
	[ -z "$c" ] || echo "; the kernel crashed first: $c"
}

# vmt_daemon DIR GUEST RUN TRANSPORT [RING_SIZE] [EVENTS]: config + start.
vmt_daemon() {
	local dir=$1 guest=$2 run=$3 transport=$4 ring=${5:-64MiB}
	local events=${6:-"[sched:*, irq:*, timer:*]"}
	mkdir -p "$dir"
	cat >"$dir/vmtraced.yaml" <<-EOF
	state_dir: $dir/state
	control_socket: $dir/control.sock
	record:
	  ring_size: $ring
	  guest_buffer_size: 4MiB
	  clock: mono
	  events: $events
	  flush_timeout: 10s
	# TCG vCPUs on two busy host cores are starved by design: no dumps for it
	detectors:
	  vcpu_starvation:
	    enabled: false
	guests:
	  - name: $guest
	    path: $run
	    transport: $transport
	EOF
	"$B/vmtraced" -c "$dir/vmtraced.yaml" 2>"$dir/vmtraced.log" &
	VMT_DAEMON_PID=$!
	local i=0
	local n
	n=$(vmt_scale 200)
	while [ ! -S "$dir/control.sock" ] && [ $i -lt "$n" ]; do sleep 0.1; i=$((i + 1)); done
	[ -S "$dir/control.sock" ]
}

vmt_ctl() { "$B/vmtracectl" -s "$VMT_DIR/control.sock" "$@"; }

# vmt_wait_streaming SECONDS: until every guest streams and has pages in.
vmt_wait_streaming() {
	local i=0 s n
	n=$(vmt_scale $(($1 * 2)))
	while [ $i -lt "$n" ]; do
		s=$(vmt_ctl --json status 2>/dev/null)
		if echo "$s" | grep -q '"state": "streaming"' &&
		   ! echo "$s" | grep -q '"pages_in": 0[,}]'; then
			return 0
		fi
		sleep 0.5
		i=$((i + 1))
	done
	return 1
}

# vmt_newest_sample DIR GUEST: path of the newest sample, "" if none.
vmt_newest_sample() {
	ls -t "$1/state/$2/"*.vmts 2>/dev/null | head -1 || true
}

vmt_cleanup() {
	if [ -n "$VMT_DAEMON_PID" ]; then
		kill "$VMT_DAEMON_PID" 2>/dev/null
		wait "$VMT_DAEMON_PID" 2>/dev/null
		VMT_DAEMON_PID=""
	fi
	for p in $VMT_QEMU_PIDS; do
		kill "$p" 2>/dev/null
	done
	# gone before the next step (or suite) starts: SIGKILL what lingers
	local i=0 n
	n=$(vmt_scale 100)
	for p in $VMT_QEMU_PIDS; do
		while kill -0 "$p" 2>/dev/null && [ $i -lt "$n" ]; do sleep 0.1; i=$((i + 1)); done
		kill -9 "$p" 2>/dev/null || true
	done
	VMT_QEMU_PIDS=""
	return 0
}

# Why the guest suites cannot run here, or nothing.
vmt_cannot_run() {
	[ "$(id -u)" = 0 ] || { echo "not root"; return; }
	command -v qemu-system-x86_64 >/dev/null || { echo "no qemu-system-x86_64"; return; }
	command -v busybox >/dev/null || [ -x /bin/busybox ] || { echo "no busybox-static"; return; }
	[ -x "$AGENT" ] || { echo "no agent binary at $AGENT"; return; }
}
