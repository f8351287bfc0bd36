#!/bin/bash
# SPDX-License-Identifier: MIT
#
# End to end with a real libvirtd: a domain defined from `vmtracectl
# libvirt-xml` (2 vCPUs, the test kernel and initramfs booted directly, the
# agent started by the initramfs' /init), recorded by vmtraced with the
# SHIPPED configuration (only state_dir and control_socket moved here).
#   libvirt_stream     discovered in libvirt's channel folder, both vCPUs
#                      stream (ncpus 2, events of both in the sample); the
#                      dump merges and trace-cmd report shows sched_switch
#   libvirt_destroy    virsh destroy of a streaming guest (SIGTERM, QEMU
#                      exits 0) whose agent said no BYE: a process_death
#                      sample that says so, under the shipped exit policy
#                      (the guest did not shut down: a pulled plug cannot be
#                      told from libvirt's on_crash=destroy); nothing counted
#                      as filtered
#   libvirt_restart    virsh start again: the same guest, a new aux version
#   libvirt_clean_exit reloaded with on_clean_exit: true, virsh destroy
#                      gives a second process_death sample
#   libvirt_no_group   QEMU as libvirt-qemu (a per-domain DAC label, as
#                      libvirt's default user), vmtraced as the unit runs
#                      it (user vmtraced from units/vmtraced.sysusers, its
#                      capabilities, the shipped config) but not in group
#                      libvirt-qemu: the folder is not entered, and status
#                      says so (a "!" line with errno 13, the counter)
#   libvirt_group      the membership the package's postinst gives
#                      (debian/vmtraced.postinst configure): recorded
#   etc_libvirt_unchanged  the host's /etc/libvirt byte for byte as before
# The libvirt daemons (virtlogd, libvirtd) are the suite's own, started as
# on a host without systemd in a mount namespace of its own
# (tests/e2e/libvirt-lib.sh): /etc overlaid (the libvirt-qemu user and the
# kvm group made there if missing), libvirt's folders private, qemu.conf
# telling QEMU to run as root without a security driver; a libvirtd of the
# host's is left alone. The domain is undefined and the daemons stopped
# whatever happens. Skipped with the reason where libvirt is not installed.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
. "$ROOT/tests/e2e/libvirt-lib.sh"

TESTS="libvirt_stream libvirt_destroy libvirt_restart libvirt_clean_exit libvirt_no_group libvirt_group"
DOM=vmt-lv-$$
VIRSH="virsh -q -c qemu:///system"
libvirt_work vmt-libvirt
trap libvirt_cleanup EXIT

death_json() {
	vmt_ctl --json status 2>/dev/null | grep -o '{[^{}]*"name": "process_death"[^{}]*}'
}
death_samples() {
	vmt_ctl --json samples "$DOM" 2>/dev/null | grep -o '"reason": "process_death[^"]*"' | wc -l
}

# streaming, with aux version $1, and both CPUs' pages in (pages_in moves)
streaming_aux() {
	local j
	j=$(guest_json)
	echo "$j" | grep -q '"state": "streaming"' && echo "$j" | grep -q "\"aux_version\": $1[,}]" &&
		[ "$(echo "$j" | num ncpus)" = 2 ] && [ "$(echo "$j" | num pages_in)" -gt "${2:-0}" ]
}

shipped_config() {
	mkdir -p "$VMT_DIR"
	sed -e "s|^state_dir: .*|state_dir: $VMT_DIR/state|" \
	    -e "s|^control_socket: .*|control_socket: $VMT_DIR/control.sock|" \
	    conf/vmtraced.yaml >"$VMT_DIR/vmtraced.yaml"
	# nothing else differs from the shipped file
	[ "$(diff conf/vmtraced.yaml "$VMT_DIR/vmtraced.yaml" | grep -c '^>')" = 2 ]
}

run() {
	local paths kernel initrd dat out counts s j p1 rc

	paths=$("$ROOT/tests/guest/boot.sh" -P -c "$CACHE" -A "$AGENT" 2>"$WORK/prep.err") ||
		{ skip_rest "no guest kernel or initramfs: $(tail -1 "$WORK/prep.err")"; return; }
	read -r kernel initrd <<<"$paths"
	ran libvirt_stream
	libvirt_up || { fail libvirt_stream "libvirtd did not start (see $LV/log)"; skip_rest "no libvirtd"; return; }
	shipped_config || { fail libvirt_stream "the shipped config could not be redirected"; return; }
	define_domain "$kernel" "$initrd" ||
		{ fail libvirt_stream "virsh define: $(head -3 "$WORK/define.log")"; skip_rest "no domain"; return; }
	# libvirt-xml DOMAIN reads the 2 vCPUs back: agent + two trace ports
	n=$("$B/vmtracectl" libvirt-xml "$DOM" 2>"$WORK/lx.err" | grep -c "<channel type='unix'>")
	[ "$n" = 3 ] || { fail libvirt_stream "libvirt-xml $DOM printed $n channels: $(cat "$WORK/lx.err")"; }

	"$B/vmtraced" -c "$VMT_DIR/vmtraced.yaml" 2>"$VMT_DIR/vmtraced.log" &
	VMT_DAEMON_PID=$!
	wait_for 20 test -S "$VMT_DIR/control.sock" || { fail libvirt_stream "vmtraced did not start: $(tail -3 "$VMT_DIR/vmtraced.log")"; skip_rest "no daemon"; return; }
	$VIRSH start "$DOM" >"$WORK/start.log" 2>&1 ||
		{ fail libvirt_stream "virsh start: $(head -3 "$WORK/start.log")"; skip_rest "the domain did not start"; return; }

	# --- libvirt_stream
	if ! wait_for 240 streaming_aux 1; then
		fail libvirt_stream "not streaming with 2 CPUs: $(guest_json) (console: $(tail -2 "$WORK/console.log" | tr '\n' ' '))"
		skip_rest "the guest did not stream"
		return
	fi
	grep -q "guest $DOM: discovered in /var/lib/libvirt/qemu/channel/target\|guest $DOM: discovered in /run/libvirt/qemu/channel" "$VMT_DIR/vmtraced.log" ||
		fail libvirt_stream "not found by the shipped discovery folders: $(grep "$DOM" "$VMT_DIR/vmtraced.log" | head -2)"
	grep -q 'VMT-TRACE cpus=2 ' "$WORK/console.log" ||
		fail libvirt_stream "the guest does not see 2 CPUs: $(grep VMT-TRACE "$WORK/console.log")"
	# pages keep coming: the count moves past what it is now
	p1=$(guest_json | num pages_in)
	wait_for 60 streaming_aux 1 "$p1" || fail libvirt_stream "pages_in stays at $p1"
	s=$(vmt_ctl dump "$DOM" --reason "e2e libvirt" 2>&1 | head -1)
	dat=$WORK/stream.dat
	case "$s" in
	*.vmts)
		if ! out=$(vmt_ctl merge -o "$dat" "$s" 2>&1); then
			fail libvirt_stream "merge: $out"
		elif ! trace-cmd report -i "$dat" >"$WORK/report" 2>"$WORK/report.err"; then
			fail libvirt_stream "trace-cmd report: $(head -2 "$WORK/report.err")"
		elif ! grep -q ' sched_switch: ' "$WORK/report"; then
			fail libvirt_stream "no sched_switch in trace-cmd report"
		else
			counts=$("$TDCOUNT" "$dat")
			if [ "$(echo "$counts" | sed -n 's/^cpu0 \([0-9]*\)$/\1/p')" -gt 0 ] 2>/dev/null &&
			   [ "$(echo "$counts" | sed -n 's/^cpu1 \([0-9]*\)$/\1/p')" -gt 0 ] 2>/dev/null; then
				pass "libvirt_stream (ncpus 2, $(echo "$counts" | grep '^cpu' | tr '\n' ' ')events, sched_switch in trace-cmd report)"
			else
				fail libvirt_stream "events of both vCPUs expected: $counts"
			fi
		fi
		;;
	*) fail libvirt_stream "dump: $s" ;;
	esac

	# --- libvirt_destroy: SIGTERM, exit 0, no BYE from the agent: a death
	ran libvirt_destroy
	$VIRSH destroy "$DOM" >/dev/null 2>&1
	if ! wait_for 60 eval '[ "$(death_samples)" -ge 1 ]'; then
		fail libvirt_destroy "no process_death sample: $(death_json)"
	elif ! vmt_ctl --json samples "$DOM" 2>/dev/null | grep -q "without its agent's BYE"; then
		fail libvirt_destroy "the sample does not say the agent said no BYE: $(vmt_ctl --json samples "$DOM" | grep -o '"reason": "process_death[^"]*"' | head -1)"
	elif [ "$(death_json | num filtered)" != 0 ]; then
		fail libvirt_destroy "the exit was counted as filtered: $(death_json)"
	else
		pass "libvirt_destroy (exit 0 without BYE: a process_death sample)"
	fi

	# --- libvirt_restart: the same guest under a new domain id, a new aux
	ran libvirt_restart
	# the shipped cooldown stays: libvirt_stream's dump may be less than 10 s
	# ago, and a QEMU's death is dumped anyway (its last word)
	sed -i -e 's/^    on_clean_exit: false$/    on_clean_exit: true/' "$VMT_DIR/vmtraced.yaml"
	[ "$(diff conf/vmtraced.yaml "$VMT_DIR/vmtraced.yaml" | grep -c '^>')" = 3 ] ||
		fail libvirt_clean_exit "the config for the reload is not as meant"
	rc=$(vmt_ctl reload 2>&1) || fail libvirt_clean_exit "reload: $rc"
	$VIRSH start "$DOM" >"$WORK/start.log" 2>&1 ||
		{ fail libvirt_restart "virsh start: $(head -3 "$WORK/start.log")"; skip_rest "no restart"; return; }
	if wait_for 240 streaming_aux 2; then
		j=$(vmt_ctl --json status | grep -o '"guest": "'"$DOM"'"' | wc -l)
		[ "$j" = 1 ] && pass "libvirt_restart (aux version 2, one guest)" ||
			fail libvirt_restart "$j guests named $DOM"
	else
		fail libvirt_restart "no stream with aux version 2: $(guest_json)"
		skip_rest "no restart"
		return
	fi

	# --- libvirt_clean_exit: on_clean_exit: true, the same destroy dumps
	ran libvirt_clean_exit
	$VIRSH destroy "$DOM" >/dev/null 2>&1
	if wait_for 60 eval '[ "$(death_samples)" -ge 2 ]'; then
		pass "libvirt_clean_exit ($(vmt_ctl --json samples "$DOM" | grep -o '"reason": "process_death[^"]*"' | head -1))"
	else
		fail libvirt_clean_exit "no process_death sample: $(death_json); log: $(grep -i 'dump\|detector\|suppress\|watching\|reload' "$VMT_DIR/vmtraced.log" | tail -8 | tr '\n' ' ')"
	fi
	run_as_user
}

# vmtraced as vmtraced.service runs it: its user and group, supplementary
# groups from the group database, its capabilities, its system call filter
start_as_unit() {
	local caps=+bpf,+perfmon,+dac_override,+syslog
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 "$B/tests/tools/unitfilter" units/vmtraced.service \
		setpriv --reuid=vmtraced --regid=vmtraced --init-groups --inh-caps=$caps \
		--ambient-caps=$caps --bounding-set=-all,$caps \
		"$B/vmtraced" -c "$VMT_DIR/vmtraced.yaml" 2>"$VMT_DIR/vmtraced.log" &
	VMT_DAEMON_PID=$!
	wait_for 20 grep -q ' running: ' "$VMT_DIR/vmtraced.log"
}

stop_daemon() {
	kill "$VMT_DAEMON_PID" 2>/dev/null
	wait "$VMT_DAEMON_PID" 2>/dev/null
	VMT_DAEMON_PID=""
}

unreadable() {
	vmt_ctl --json status 2>/dev/null | grep -o '{[^{}]*"discovery_unreadable": [0-9]*[^{}]*}'
}

run_as_user() {
	local uid gid j
	ran libvirt_no_group
	stop_daemon
	# the user as the package makes it (sysusers), QEMU as libvirt's user
	getent passwd vmtraced >/dev/null || systemd-sysusers "$ROOT/units/vmtraced.sysusers" ||
		{ fail libvirt_no_group "systemd-sysusers"; skip_rest "no user vmtraced"; return; }
	gpasswd -d vmtraced libvirt-qemu >/dev/null 2>&1
	uid=$(id -u libvirt-qemu) gid=$(getent group libvirt-qemu | cut -d: -f3)
	sed -i "s|</domain>|  <seclabel type='static' model='dac' relabel='yes'><label>+$uid:+$gid</label></seclabel>\n</domain>|" "$WORK/domain.xml"
	$VIRSH destroy "$DOM" >/dev/null 2>&1
	$VIRSH undefine "$DOM" >/dev/null 2>&1
	$VIRSH define "$WORK/domain.xml" >"$WORK/define.log" 2>&1 ||
		{ fail libvirt_no_group "virsh define: $(head -3 "$WORK/define.log")"; skip_rest "no domain"; return; }
	VMT_DIR=$WORK/u
	shipped_config || { fail libvirt_no_group "the shipped config could not be redirected"; return; }
	chown -R vmtraced:vmtraced "$VMT_DIR"
	start_as_unit || { fail libvirt_no_group "vmtraced did not start: $(tail -3 "$VMT_DIR/vmtraced.log")"; skip_rest "no daemon"; return; }
	$VIRSH start "$DOM" >"$WORK/start.log" 2>&1 ||
		{ fail libvirt_no_group "virsh start: $(head -3 "$WORK/start.log")"; skip_rest "the domain did not start"; return; }
	if ! wait_for 60 eval '[ "$(unreadable | num discovery_unreadable)" -ge 1 ]'; then
		fail libvirt_no_group "no folder counted as unreadable: $(vmt_ctl status | head -4); $(ls -ld /var/lib/libvirt/qemu/channel/target/domain-* /run/libvirt/qemu/channel/domain-* 2>&1 | tr '\n' ' ')"
	else
		j=$(unreadable)
		if [ "$(echo "$j" | num discovery_unreadable_errno)" != 13 ] ||
		   ! echo "$j" | grep -q "\"discovery_unreadable_path\": \"[^\"]*domain-[0-9]*-$DOM\"" ||
		   ! vmt_ctl status | grep -q "^! discovery: .*domain-[0-9]*-$DOM: Permission denied (errno 13)"; then
			fail libvirt_no_group "not named with errno 13: $j / $(vmt_ctl status | grep '^!')"
		elif [ -n "$(guest_json)" ]; then
			fail libvirt_no_group "recorded without the group? $(guest_json)"
		else
			pass "libvirt_no_group ($(vmt_ctl status | grep '^! discovery' | cut -c1-140))"
		fi
	fi

	# --- libvirt_group: the membership the package gives, then a start
	ran libvirt_group
	stop_daemon
	sh debian/vmtraced.postinst configure >"$WORK/postinst.log" 2>&1 ||
		fail libvirt_group "postinst: $(cat "$WORK/postinst.log")"
	id -nG vmtraced | tr ' ' '\n' | grep -qx libvirt-qemu ||
		{ fail libvirt_group "the postinst did not add vmtraced to libvirt-qemu: $(cat "$WORK/postinst.log")"; return; }
	start_as_unit || { fail libvirt_group "vmtraced did not start: $(tail -3 "$VMT_DIR/vmtraced.log")"; return; }
	if wait_for 240 eval '[ -n "$(guest_json)" ] && guest_json | grep -q "\"state\": \"streaming\"" && [ "$(guest_json | num pages_in)" -gt 0 ]'; then
		s=$(vmt_ctl dump "$DOM" --reason "e2e as vmtraced" 2>&1 | head -1)
		case "$s" in
		*.vmts) pass "libvirt_group (as $(ps -o user= -p "$VMT_DAEMON_PID"), groups $(id -nG vmtraced | tr ' ' ,), $(basename "$s"))" ;;
		*) fail libvirt_group "dump: $s" ;;
		esac
	else
		fail libvirt_group "not streaming as vmtraced: $(guest_json); $(vmt_ctl status | grep '^!'); $(grep -i "$DOM\|discovery" "$VMT_DIR/vmtraced.log" | tail -3)"
	fi
	$VIRSH destroy "$DOM" >/dev/null 2>&1
}

why=$(libvirt_cannot_run)
libvirt_main "$why"
