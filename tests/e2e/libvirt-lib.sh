# SPDX-License-Identifier: MIT
# Sourced by the e2e suites that run a real libvirtd (test_libvirt.sh,
# test_libvirt_labels.sh); brings tests/guest/vmt-lib.sh. The caller sets
# ROOT, TESTS (its test names, for skip_rest), DOM, VIRSH and WORK;
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

# stop a daemon this script started, by its pid file, and wait for it
stop_pidfile() {
	local pid i=0 n
	pid=$(cat "$1" 2>/dev/null) || return 0
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
}

# virtlogd and libvirtd as the lab note runs them, unless already running.
libvirt_up() {
	local i=0 n
	# the QEMU driver parses its default user and group (Debian's build:
	# libvirt-qemu:libvirt-qemu) before qemu.conf's, and gives up without them
	getent group kvm >/dev/null || groupadd -r kvm || return 1
	getent group libvirt-qemu >/dev/null || groupadd -r libvirt-qemu || return 1
	getent passwd libvirt-qemu >/dev/null ||
		useradd -r -g kvm -d /var/lib/libvirt -s /usr/sbin/nologin libvirt-qemu || return 1
	mkdir -p /var/log/libvirt /var/lib/libvirt /var/cache/libvirt /run/libvirt
	# QEMU as root and no security driver: no sVirt labels or dynamic
	# ownership to set up here. Added once, marked; kept for re-runs.
	if ! grep -q '^security_driver *= *"none"' /etc/libvirt/qemu.conf 2>/dev/null; then
		printf '# added by vmtraced tests/e2e/test_libvirt.sh\nuser = "root"\ngroup = "root"\nsecurity_driver = "none"\n' \
			>>/etc/libvirt/qemu.conf || return 1
	fi
	# the read-only socket for every user, as libvirt's polkit policy
	# (org.libvirt.unix.monitor, libvirt-daemon-system) allows it on a host
	# with a system bus; here there is none, and libvirtd asks polkit
	if ! grep -qs '^auth_unix_ro *= *"none"' /etc/libvirt/libvirtd.conf; then
		printf '# added by vmtraced tests/e2e/libvirt-lib.sh\nauth_unix_ro = "none"\n' \
			>>/etc/libvirt/libvirtd.conf || return 1
	fi
	if ! pgrep -x virtlogd >/dev/null; then
		virtlogd -d || return 1
		started_virtlogd=1
	fi
	if ! pgrep -x libvirtd >/dev/null; then
		libvirtd -d || return 1
		started_libvirtd=1
	fi
	n=$(vmt_scale 300)
	while ! $VIRSH version >/dev/null 2>&1; do
		[ $i -lt "$n" ] || return 1
		sleep 0.1
		i=$((i + 1))
	done
}

# libvirt_work NAME: WORK, a folder of the test's (others reach into it:
# QEMU runs the guest from there), and VMT_DIR in it for the daemon
libvirt_work() {
	WORK=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
	chmod 0711 "$WORK"
	VMT_DIR=$WORK/d
}

# At exit: the daemon the test started (VMT_DAEMON_PID) stopped, then
# libvirt_down, and WORK removed unless VMT_KEEP is set.
libvirt_cleanup() {
	if [ -n "${VMT_DAEMON_PID:-}" ]; then
		kill "$VMT_DAEMON_PID" 2>/dev/null
		wait "$VMT_DAEMON_PID" 2>/dev/null
		VMT_DAEMON_PID=""
	fi
	libvirt_down
	[ -n "${VMT_KEEP:-}" ] || rm -rf "$WORK"
}

# The domain gone, and the daemons libvirt_up started stopped.
libvirt_down() {
	if [ -n "$started_libvirtd" ] || pgrep -x libvirtd >/dev/null 2>&1; then
		$VIRSH destroy "$DOM" >/dev/null 2>&1
		$VIRSH undefine "$DOM" >/dev/null 2>&1
	fi
	[ -n "$started_libvirtd" ] && stop_pidfile /run/libvirtd.pid
	[ -n "$started_virtlogd" ] && stop_pidfile /run/virtlogd.pid
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

