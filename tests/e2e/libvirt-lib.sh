# SPDX-License-Identifier: MIT
# Sourced by the e2e suites that run a real libvirtd (test_libvirt.sh,
# test_libvirt_labels.sh); brings tests/guest/vmt-lib.sh. The caller sets
# ROOT, TESTS (its test names, for skip_rest), DOM and VIRSH, calls
# libvirt_work, defines run and ends with libvirt_main (which runs it in a
# mount namespace of its own and checks that /etc/libvirt is unchanged);
# libvirt_down undefines $DOM and stops what libvirt_up started.
B=${VMT_BUILD:-build}
AGENT=${VMT_AGENT:-$B/vmtrace-agent}
CACHE=${VMT_CACHE:-build/guest}
TDCOUNT=${VMT_TDCOUNT:-$B/tests/tools/tdcount}
. "$ROOT/tests/guest/vmt-lib.sh"
started_virtlogd="" started_libvirtd=""

# Check's way of counting, for run-tests.sh: PASS/FAIL/SKIP lines; ran
# marks a test begun, skip_rest skips those that were not
checks=0 failures=0 done=""
pass() { echo "PASS: $1"; checks=$((checks + 1)); }
fail() { echo "FAIL: $1: $2"; checks=$((checks + 1)); failures=$((failures + 1)); }
skip() { echo "SKIP: $1: $2"; checks=$((checks + 1)); }
skip_rest() { local t; for t in $TESTS; do [[ " $done " == *" $t "* ]] || skip "$t" "$1"; done; }
done=""
ran() { done="$done $1"; }

# stop_pidfile FILE NAME: stop a daemon this suite started, by its pid
# file (only if that pid is still a NAME), and wait for it
stop_pidfile() {
	local pid i=0 n
	pid=$(cat "$1" 2>/dev/null) || return 0
	[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] || return 0
	kill "$pid" 2>/dev/null || return 0
	n=$(vmt_scale 100)
	while kill -0 "$pid" 2>/dev/null && [ $i -lt "$n" ]; do sleep 0.1; i=$((i + 1)); done
	kill -9 "$pid" 2>/dev/null || true
}

# Why libvirt cannot run here, or nothing.
libvirt_cannot_run() {
	local why
	why=$(vmt_cannot_run)
	[ -z "$why" ] || { echo "$why"; return; }
	for c in virsh libvirtd virtlogd; do
		command -v $c >/dev/null || { echo "no $c (apt-get install libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients, or make deps)"; return; }
	done
	[ -x "$TDCOUNT" ] || { echo "no $TDCOUNT"; return; }
	command -v unshare >/dev/null || { echo "no unshare (util-linux)"; return; }
	grep -qw overlay /proc/filesystems || modprobe -q overlay 2>/dev/null ||
		{ echo "no overlayfs: the suite's libvirt would change the host's /etc"; return; }
}

# The libvirt daemons run in a mount namespace of the suite's own, never
# on the host's configuration: libvirt's QEMU driver reads /etc/libvirt
# (qemu.conf) and reaches virtlogd at /run/libvirt/virtlogd-sock, paths
# built in as root, with no option or LIBVIRT_* variable to move them. So
# the whole suite runs again (libvirt_main) under `unshare -m` with /etc
# overlaid by a tmpfs (the users and groups made here, the postinst's
# membership: gone at the end) and libvirt's /etc, /run, /var/lib, /var/log
# and /var/cache folders bound to folders under $WORK/lv. Nothing of the
# host's changes, whatever happens; its own libvirtd, if one runs, is
# neither seen nor stopped (ours has its own sockets and pid files).
LV_DIRS="etc:/etc/libvirt run:/run/libvirt lib:/var/lib/libvirt log:/var/log/libvirt cache:/var/cache/libvirt"

# libvirt_private: the namespace's mounts and configuration (in the inner
# run only: refuses to touch /etc where the namespace is not its own)
libvirt_private() {
	local m src dst
	[ -n "${VMT_LIBVIRT_INNER:-}" ] && [ "$(readlink /proc/self/ns/mnt)" != "$VMT_LIBVIRT_HOSTNS" ] ||
		{ echo "not in a mount namespace of the suite's own"; return 1; }
	mkdir -p "$LV/ovl" && mount -t tmpfs -o mode=0700 vmt-etc "$LV/ovl" &&
		mkdir "$LV/ovl/upper" "$LV/ovl/work" &&
		mount -t overlay vmt-etc -o "lowerdir=/etc,upperdir=$LV/ovl/upper,workdir=$LV/ovl/work" /etc ||
		{ echo "cannot overlay /etc (overlayfs, tmpfs)"; return 1; }
	for m in $LV_DIRS; do
		src=$LV/${m%%:*} dst=${m#*:}
		mkdir -p -m 0755 "$src" "$dst" && mount --bind "$src" "$dst" || { echo "cannot bind $dst"; return 1; }
	done
	# the read-only socket for every user, as libvirt's polkit policy
	# (org.libvirt.unix.monitor, libvirt-daemon-system) allows it on a host
	# with a system bus; here there is none, and libvirtd asks polkit
	printf 'auth_unix_ro = "none"\n' >/etc/libvirt/libvirtd.conf &&
	# QEMU as root and no security driver: no sVirt labels or dynamic
	# ownership to set up here
	printf 'user = "root"\ngroup = "root"\nsecurity_driver = "none"\n' >/etc/libvirt/qemu.conf &&
	: >/etc/libvirt/virtlogd.conf || { echo "cannot write the private configuration"; return 1; }
	# the QEMU driver parses its default user and group (Debian's build:
	# libvirt-qemu:libvirt-qemu) before qemu.conf's, and gives up without
	# them (made in the overlay: the host's /etc/passwd is untouched)
	getent group kvm >/dev/null || groupadd -r kvm || return 1
	getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu || return 1
	getent passwd libvirt-qemu >/dev/null ||
		useradd -r -g kvm -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu || return 1
}

# virtlogd and libvirtd of this suite (the namespace's), pid files in $LV
libvirtd_start() {
	local i=0 n
	libvirtd -d -f /etc/libvirt/libvirtd.conf -p "$LV/libvirtd.pid" || return 1
	n=$(vmt_scale 300)
	while ! $VIRSH version >/dev/null 2>&1; do
		[ $i -lt "$n" ] || return 1
		sleep 0.1
		i=$((i + 1))
	done
}
libvirtd_stop() { stop_pidfile "$LV/libvirtd.pid" libvirtd; }

libvirt_up() {
	[ -d /proc/self ] && [ "$(readlink /proc/self/ns/mnt)" != "${VMT_LIBVIRT_HOSTNS:-}" ] ||
		return 1	# never on the host's folders
	virtlogd -d -f /etc/libvirt/virtlogd.conf -p "$LV/virtlogd.pid" || return 1
	started_virtlogd=1
	libvirtd_start || return 1
	started_libvirtd=1
}

# libvirt_work NAME: WORK, a folder of the test's (others reach into it:
# QEMU runs the guest from there), VMT_DIR in it for the daemon and LV for
# libvirt's private folders; the isolated run gets the same WORK
libvirt_work() {
	if [ -n "${VMT_LIBVIRT_INNER:-}" ]; then
		WORK=$VMT_LIBVIRT_WORK
	else
		WORK=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
		chmod 0711 "$WORK"
	fi
	VMT_DIR=$WORK/d LV=$WORK/lv
	# an interrupted run ends at once, through the caller's EXIT trap (bash
	# would otherwise carry on after a foreground command's SIGINT)
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

# At exit: the daemon the test started (VMT_DAEMON_PID) stopped, then
# libvirt_down; outside the namespace, what an isolated run killed hard
# may have left running stopped too, the mount points made for it removed,
# and WORK removed unless VMT_KEEP is set.
libvirt_cleanup() {
	local d
	if [ -n "${VMT_DAEMON_PID:-}" ]; then
		kill "$VMT_DAEMON_PID" 2>/dev/null
		wait "$VMT_DAEMON_PID" 2>/dev/null
		VMT_DAEMON_PID=""
	fi
	if [ -n "${VMT_LIBVIRT_INNER:-}" ]; then
		libvirt_down
		return
	fi
	libvirtd_stop
	stop_pidfile "$LV/virtlogd.pid" virtlogd
	for d in $(cat "$WORK/made-dirs" 2>/dev/null); do rmdir "$d"; done
	[ -n "${VMT_KEEP:-}" ] || rm -rf "$WORK"
}

# The domain gone, and the daemons libvirt_up started stopped.
libvirt_down() {
	if [ -n "$started_libvirtd" ]; then
		$VIRSH destroy "$DOM" >/dev/null 2>&1
		$VIRSH undefine "$DOM" >/dev/null 2>&1
		libvirtd_stop
	fi
	[ -n "$started_virtlogd" ] && stop_pidfile "$LV/virtlogd.pid" virtlogd
}

# Every entry under /etc/libvirt: type, mode, owner and, for a file, its
# SHA-256 (a link: its target)
libvirt_etc_sums() {
	[ -d /etc/libvirt ] || { echo "no /etc/libvirt"; return; }
	find /etc/libvirt -printf '%y %m %u:%g %p %l\n' | sort
	find /etc/libvirt -type f -exec sha256sum {} + | sort -k2
}

# libvirt_main WHY: the suite (its function run) run again in a mount
# namespace of its own (libvirt_private), unless WHY says libvirt cannot
# run; then etc_libvirt_unchanged: /etc/libvirt as it was before,
# byte for byte, whatever the run did or how it ended. Prints Check's
# summary line; its status is the suite's.
libvirt_main() {
	local m d before after rc c f
	if [ -n "${VMT_LIBVIRT_INNER:-}" ]; then
		if ! libvirt_private >"$WORK/private.log" 2>&1; then
			ran "${TESTS%% *}"
			fail "${TESTS%% *}" "no private libvirt: $(tail -2 "$WORK/private.log" | tr '\n' ' ')"
			skip_rest "no private libvirt"
		else
			run
		fi
		echo "$checks $failures" >"$WORK/inner.counts"
		return 0
	fi
	if [ -n "$1" ]; then
		skip_rest "$1"
		skip etc_libvirt_unchanged "$1"
	else
		# the mount points the namespace binds over, made if missing
		for m in $LV_DIRS; do
			d=${m#*:}
			[ "$d" = /etc/libvirt ] || [ -d "$d" ] || { mkdir -p "$d" && echo "$d" >>"$WORK/made-dirs"; }
		done
		before=$(libvirt_etc_sums)
		VMT_LIBVIRT_INNER=1 VMT_LIBVIRT_WORK=$WORK VMT_LIBVIRT_HOSTNS=$(readlink /proc/self/ns/mnt) \
			unshare -m --propagation private "$ROOT/tests/e2e/$(basename "$0")"
		rc=$?
		if [ -f "$WORK/inner.counts" ] && read -r c f <"$WORK/inner.counts"; then
			checks=$((checks + c)) failures=$((failures + f))
		else
			fail libvirt_isolated "the run in its namespace ended early (exit $rc)"
		fi
		after=$(libvirt_etc_sums)
		if [ "$before" = "$after" ]; then
			pass "etc_libvirt_unchanged ($(echo "$before" | grep -c '^f ') files byte-identical)"
		else
			fail etc_libvirt_unchanged "the host's /etc/libvirt changed: $(diff <(echo "$before") <(echo "$after") | grep '^[<>]' | head -6 | tr '\n' ' ')"
		fi
	fi
	echo "$(( checks ? (checks - failures) * 100 / checks : 100 ))%: Checks: $checks, Failures: $failures, Errors: 0"
	[ $failures = 0 ]
}

# wait_for SECONDS CMD...: poll CMD every half second; only a hang times out
wait_for() {
	local n i=0
	n=$(vmt_scale $(($1 * 2)))
	shift
	while ! "$@"; do
		[ $i -lt "$n" ] || return 1
		sleep 0.5
		i=$((i + 1))
	done
}

# $DOM's status record as JSON ("" while not listed)
guest_json() {
	vmt_ctl --json status 2>/dev/null | grep -o "{[^{}]*\"guest\": \"$DOM\"[^{}]*}"
}
num() { sed -n "s/.*\"$1\": \([0-9]*\).*/\1/p"; }

# define_domain KERNEL INITRD [METADATA]: $DOM, 2 vCPUs booted directly,
# the channels from vmtracectl libvirt-xml, METADATA in <metadata>
define_domain() {
	local kernel=$1 initrd=$2 meta=${3:-}
	{
		cat <<-EOF
		<domain type='qemu'>
		  <name>$DOM</name>
		  <memory unit='MiB'>512</memory>
		  <vcpu>2</vcpu>
		  ${meta:+<metadata>$meta</metadata>}
		  <os>
		    <type arch='x86_64' machine='pc'>hvm</type>
		    <kernel>$kernel</kernel>
		    <initrd>$initrd</initrd>
		    <cmdline>console=ttyS0 panic=-1 quiet loglevel=5 vmt.timeout=$(vmt_scale 600) trace_event=sched:*,irq:*,timer:* vmt.load=forkloop</cmdline>
		  </os>
		  <features><acpi/><apic/></features>
		  <on_poweroff>destroy</on_poweroff>
		  <on_reboot>destroy</on_reboot>
		  <on_crash>destroy</on_crash>
		  <devices>
		    <serial type='file'><source path='$WORK/console.log'/><target port='0'/></serial>
		EOF
		"$B/vmtracectl" libvirt-xml --vcpus 2 | sed 's/^/    /'
		printf '  </devices>\n</domain>\n'
	} >"$WORK/domain.xml"
	$VIRSH define "$WORK/domain.xml" >"$WORK/define.log" 2>&1
}

