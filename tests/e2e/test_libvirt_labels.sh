#!/bin/bash
# SPDX-License-Identifier: MIT
#
# End to end: fleet labels from libvirt domain metadata. A real libvirtd
# (started as test_libvirt.sh starts it, tests/e2e/libvirt-lib.sh), a real
# `nats-server -js` on 127.0.0.1, and vmtraced with the shipped
# configuration plus a fleet: block. The domain (a TCG guest booted
# directly, its agent streaming) is defined with the labels element
# tenant=blue in its metadata:
#   labels_blue     discovered, its labels read from libvirt (status shows
#                   them); `vmtracectl fleet dump --label tenant=blue` is
#                   answered by this host with a sample of the guest
#   labels_live     `virsh metadata --live` sets tenant=red: the daemon
#                   unsubscribes blue and subscribes red (the server's
#                   subscription list says so), red is answered, blue not
#   labels_refused  a key with a space, then an element over 4 KiB:
#                   refused and counted, one log line naming the guest,
#                   the guest without labels; the daemon streams and
#                   answers on; a good element is followed again
#   labels_libvirtd libvirtd (the suite's own) stopped: status says
#                   connecting, failed connections counted, one log
#                   line; started again: read again, changes followed
#   labels_upgrade  `vmtracectl upgrade`: the discovered guest's session is
#                   taken over (not started afresh); the successor reads
#                   the metadata itself (a new read in its log), answers red
#   labels_user     a daemon started with user: vmtraced reads it after
#                   dropping to that user, through libvirt's read-only
#                   socket (the test gives the guest's channel folder to
#                   group vmtraced), under the unit's system call filter:
#                   red answered
# Every wait is on a status counter, a log line or the NATS server's
# subscription list; deadlines only catch hangs. Skipped with the reason
# where libvirt or nats-server is missing.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
. "$ROOT/tests/e2e/libvirt-lib.sh"

TESTS="labels_blue labels_live labels_refused labels_libvirtd labels_upgrade labels_user"
DOM=vmt-lbl-$$
VIRSH="virsh -q -c qemu:///system"
NS=https://vmtrace.dev/xmlns/labels/1
HOST=lvhost
NATS_PID=""
libvirt_work vmt-labels

# nats-server too, before libvirt_cleanup
cleanup() {
	if [ -n "$NATS_PID" ]; then
		kill "$NATS_PID" 2>/dev/null
		wait "$NATS_PID" 2>/dev/null
	fi
	libvirt_cleanup
}
trap cleanup EXIT

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# GET PATH from nats-server's monitoring port
nats_http() {
	local out
	exec 3<>"/dev/tcp/127.0.0.1/$MPORT" || return 1
	printf 'GET %s HTTP/1.0\r\n\r\n' "$1" >&3
	out=$(cat <&3)
	exec 3<&-
	echo "$out"
}
nats_healthy() { nats_http /healthz 2>/dev/null | grep -q '"ok"'; }
# is anyone subscribed to subject $1?
subscribed() { nats_http '/subsz?subs=1&limit=1024' 2>/dev/null | grep -q "\"subject\": *\"$1\""; }
not_subscribed() { ! subscribed "$1"; }

nats_up() {
	PORT=$(free_port) MPORT=$(free_port)
	mkdir -p "$WORK/js"
	printf 'listen: 127.0.0.1:%s\nhttp: 127.0.0.1:%s\njetstream { store_dir: "%s/js" }\n' \
		"$PORT" "$MPORT" "$WORK" >"$WORK/nats.conf"
	nats-server -c "$WORK/nats.conf" >"$WORK/nats.log" 2>&1 &
	NATS_PID=$!
	wait_for 30 nats_healthy
}

daemon_num() { vmt_ctl --json status 2>/dev/null | grep -o "\"$1\": [0-9]*" | head -1 | grep -o '[0-9]*$'; }
labels_are() { guest_json | grep -q "\"labels\": \"$1\""; }
no_labels() { local j; j=$(guest_json) && [ -n "$j" ] && ! echo "$j" | grep -q '"labels"'; }
streaming() {
	local j
	j=$(guest_json)
	echo "$j" | grep -q '"state": "streaming"' && [ "$(echo "$j" | num pages_in)" -gt "${1:-0}" ]
}
daemon_num_ge() { [ "$(daemon_num "$1")" -ge "$2" ] 2>/dev/null; }

# ask_label K=V: one answer of this host with a sample of the guest
ask_label() {
	"$B/vmtracectl" fleet dump -c "$VMT_DIR/vmtraced.yaml" --label "$1" --reason e2e-labels \
		--timeout "$(vmt_scale 60)" --answers 1 >"$WORK/answer" 2>"$WORK/answer.err" &&
		grep -q "{\"host\":\"$HOST\",\"samples\":\[{\"guest\":\"$DOM\",\"file\":\"$DOM-[^\"]*\.vmts\"" \
			"$WORK/answer"
}
# no_answer K=V: nobody answers (the subject has no subscriber: checked first)
no_answer() {
	! "$B/vmtracectl" fleet dump -c "$VMT_DIR/vmtraced.yaml" --label "$1" --timeout 2 \
		>"$WORK/noanswer" 2>&1 && ! grep -q '"host"' "$WORK/noanswer"
}

set_meta() {	# XML (the labels element, the namespace added by libvirt)
	$VIRSH metadata "$DOM" "$NS" --live --key vmtrace --set "$1" >"$WORK/meta.log" 2>&1
}

config() {	# user
	mkdir -p "$VMT_DIR"
	sed -e "s|^state_dir: .*|state_dir: $VMT_DIR/state|" \
	    -e "s|^control_socket: .*|control_socket: $VMT_DIR/control.sock|" \
	    -e "s|^user: .*|user: \"$1\"|" \
	    conf/vmtraced.yaml >"$VMT_DIR/vmtraced.yaml"
	printf 'fleet:\n  servers: [nats://127.0.0.1:%s]\n  host_id: %s\n  max_per_minute: 100\n' \
		"$PORT" "$HOST" >>"$VMT_DIR/vmtraced.yaml"
}

run() {
	local paths kernel initrd p1 lines reads red="tenant=red"

	paths=$("$ROOT/tests/guest/boot.sh" -P -c "$CACHE" -A "$AGENT" 2>"$WORK/prep.err") ||
		{ skip_rest "no guest kernel or initramfs: $(tail -1 "$WORK/prep.err")"; return; }
	read -r kernel initrd <<<"$paths"
	ran labels_blue
	nats_up || { fail labels_blue "nats-server did not start: $(tail -3 "$WORK/nats.log")"; skip_rest "no NATS"; return; }
	libvirt_up || { fail labels_blue "libvirtd did not start (see $LV/log)"; skip_rest "no libvirtd"; return; }
	define_domain "$kernel" "$initrd" \
		"<vmtrace:labels xmlns:vmtrace='$NS'><label key='tenant' value='blue'/></vmtrace:labels>" ||
		{ fail labels_blue "virsh define: $(head -3 "$WORK/define.log")"; skip_rest "no domain"; return; }
	config ""
	"$B/vmtraced" -c "$VMT_DIR/vmtraced.yaml" 2>"$VMT_DIR/vmtraced.log" &
	VMT_DAEMON_PID=$!
	wait_for 20 test -S "$VMT_DIR/control.sock" || { fail labels_blue "vmtraced did not start: $(tail -3 "$VMT_DIR/vmtraced.log")"; skip_rest "no daemon"; return; }
	$VIRSH start "$DOM" >"$WORK/start.log" 2>&1 ||
		{ fail labels_blue "virsh start: $(head -3 "$WORK/start.log")"; skip_rest "the domain did not start"; return; }

	# --- labels_blue
	if ! wait_for 240 streaming; then
		fail labels_blue "not streaming: $(guest_json) (console: $(tail -2 "$WORK/console.log" | tr '\n' ' '))"
		skip_rest "the guest did not stream"
		return
	fi
	if ! wait_for 30 labels_are tenant=blue; then
		fail labels_blue "no labels from libvirt: $(guest_json); $(vmt_ctl status | grep -i 'libvirt')"
	elif ! wait_for 30 subscribed "vmtrace.dump.label.tenant.blue"; then
		fail labels_blue "tenant.blue not subscribed: $(vmt_ctl status | grep fleet)"
	elif ! ask_label tenant=blue; then
		fail labels_blue "no answer with a sample: $(cat "$WORK/answer" "$WORK/answer.err")"
	elif ! vmt_ctl status | grep -q "labels tenant=blue"; then
		fail labels_blue "vmtracectl status shows no labels: $(vmt_ctl status | grep -A3 "$DOM")"
	else
		pass "labels_blue ($(cut -c1-150 "$WORK/answer"))"
	fi

	# --- labels_live: no reload, the metadata-change event
	ran labels_live
	if ! set_meta "<labels><label key='tenant' value='red'/><label key='rack' value='r7'/></labels>"; then
		fail labels_live "virsh metadata: $(cat "$WORK/meta.log")"
	elif ! wait_for 30 labels_are "tenant=red,rack=r7"; then
		fail labels_live "labels not followed: $(guest_json)"
	elif ! wait_for 30 subscribed "vmtrace.dump.label.tenant.red" ||
	     ! wait_for 30 not_subscribed "vmtrace.dump.label.tenant.blue"; then
		fail labels_live "subscriptions not followed: $(nats_http '/subsz?subs=1' | grep -o '"subject": *"[^"]*"' | tr '\n' ' ')"
	elif ! ask_label "$red"; then
		fail labels_live "tenant=red: no answer with a sample: $(cat "$WORK/answer" "$WORK/answer.err")"
	elif ! no_answer tenant=blue; then
		fail labels_live "tenant=blue still answered: $(cat "$WORK/noanswer")"
	elif [ "$(daemon_num upgrades)" != 0 ]; then
		fail labels_live "handed over: $(daemon_num upgrades) upgrades"
	else
		pass "labels_live (tenant=red answered, blue unsubscribed, no reload)"
	fi

	# --- labels_refused: a bad key, then an element over 4 KiB
	ran labels_refused
	p1=$(guest_json | num pages_in)
	set_meta "<labels><label key='ten ant' value='x'/></labels>" ||
		fail labels_refused "virsh metadata: $(cat "$WORK/meta.log")"
	if ! wait_for 30 daemon_num_ge libvirt_refused 1; then
		fail labels_refused "a key with a space not refused: $(vmt_ctl status | grep -i libvirt)"
	elif ! wait_for 30 no_labels || ! wait_for 30 not_subscribed "vmtrace.dump.label.tenant.red"; then
		fail labels_refused "the refused guest kept its labels: $(guest_json)"
	else
		set_meta "<labels><label key='tenant' value='x' pad='$(head -c 5000 /dev/zero | tr '\0' p)'/></labels>" ||
			fail labels_refused "virsh metadata (big): $(cat "$WORK/meta.log")"
		lines=$(grep -c "guest $DOM: labels metadata refused" "$VMT_DIR/vmtraced.log")
		if ! wait_for 30 daemon_num_ge libvirt_refused 2; then
			fail labels_refused "5000 bytes not refused: $(vmt_ctl status | grep -i libvirt)"
		elif [ "$lines" != 1 ]; then
			fail labels_refused "$lines log lines naming the guest, not 1 (once a minute)"
		elif ! wait_for 60 streaming "$p1" || ! vmt_ctl status >/dev/null; then
			fail labels_refused "the daemon is not fine: $(guest_json)"
		elif ! set_meta "<labels><label key='tenant' value='red'/></labels>" ||
		     ! wait_for 30 labels_are tenant=red || ! wait_for 30 subscribed "vmtrace.dump.label.tenant.red"; then
			fail labels_refused "a good element not followed again: $(guest_json)"
		else
			pass "labels_refused (2 refused, $(grep -m1 "labels metadata refused" "$VMT_DIR/vmtraced.log" | sed 's/.*refused: //' | cut -c1-100))"
		fi
	fi

	# --- labels_libvirtd: libvirtd (the suite's own) restarted under the
	# daemon: it says so, retries, reads again when back
	ran labels_libvirtd
	reads=$(daemon_num libvirt_reads)
	libvirtd_stop
	if ! wait_for 30 eval 'vmt_ctl --json status | grep -q "\"libvirt_state\": \"connecting\""' ||
	   ! wait_for 30 daemon_num_ge libvirt_connect_failures 1; then
		fail labels_libvirtd "libvirtd gone unnoticed: $(vmt_ctl status | grep -i libvirt)"
	elif ! libvirtd_start; then
		fail labels_libvirtd "libvirtd did not start again"
	elif ! wait_for 60 daemon_num_ge libvirt_reads $((reads + 1)) ||
	     ! wait_for 30 eval 'vmt_ctl --json status | grep -q "\"libvirt_state\": \"connected\""'; then
		fail labels_libvirtd "not read again: $(vmt_ctl status | grep -i libvirt)"
	elif ! set_meta "<labels><label key='tenant' value='red'/><label key='rack' value='r9'/></labels>" ||
	     ! wait_for 30 labels_are "tenant=red,rack=r9" ||
	     ! set_meta "<labels><label key='tenant' value='red'/></labels>" ||
	     ! wait_for 30 labels_are "tenant=red"; then
		fail labels_libvirtd "changes not followed after the reconnection: $(guest_json)"
	elif ! streaming || [ "$(grep -c "libvirt: the connection to qemu:///system was closed" "$VMT_DIR/vmtraced.log")" != 1 ]; then
		fail labels_libvirtd "the daemon: $(guest_json | cut -c1-200); $(grep -c 'libvirt: ' "$VMT_DIR/vmtraced.log") libvirt lines"
	else
		pass "labels_libvirtd ($(vmt_ctl status | grep 'labels from libvirt' | cut -c1-110))"
	fi

	# --- labels_upgrade: the successor of a hand-over reads them itself
	ran labels_upgrade
	reads=$(grep -c "fleet: guest $DOM: labels tenant=red (from libvirt)" "$VMT_DIR/vmtraced.log")
	if ! vmt_ctl upgrade >"$WORK/upgrade.log" 2>&1; then
		fail labels_upgrade "upgrade: $(cat "$WORK/upgrade.log")"
	elif ! wait_for 60 eval '[ "$(daemon_num upgrades)" = 1 ]'; then
		fail labels_upgrade "no hand-over: $(grep -i 'upgrade' "$VMT_DIR/vmtraced.log" | tail -2)"
	elif ! wait_for 60 grep -q "upgrade: 1 guest session(s) taken over, 0 started afresh" "$VMT_DIR/vmtraced.log"; then
		# the discovered guest's session is taken over, not started anew
		fail labels_upgrade "the session was not taken over: $(grep -i 'upgrade\|afresh' "$VMT_DIR/vmtraced.log" | tail -3)"
	elif ! wait_for 60 eval '[ "$(grep -c "fleet: guest $DOM: labels tenant=red (from libvirt)" "$VMT_DIR/vmtraced.log")" -gt "$reads" ]' ||
	     ! wait_for 30 labels_are tenant=red; then
		fail labels_upgrade "the successor read no labels: $(guest_json); $(vmt_ctl status | grep -i libvirt)"
	elif ! wait_for 120 streaming || ! wait_for 30 subscribed "vmtrace.dump.label.tenant.red" ||
	     ! ask_label "$red"; then
		fail labels_upgrade "tenant=red: no answer after the hand-over: $(cat "$WORK/answer" "$WORK/answer.err")"
	else
		pass "labels_upgrade (the session taken over; the successor read tenant=red and answers it)"
	fi

	# --- labels_user: a daemon that drops to user vmtraced reads them
	# through libvirt's read-only socket
	ran labels_user
	if ! getent passwd vmtraced >/dev/null; then
		useradd -r -d /nonexistent -s /usr/sbin/nologin vmtraced ||
			{ fail labels_user "cannot make the user vmtraced"; return; }
	fi
	kill "$VMT_DAEMON_PID"
	wait "$VMT_DAEMON_PID"
	VMT_DAEMON_PID=""
	# it finds the guest's folder and connects to its sockets: given to
	# group vmtraced, as README says a host's channels must be (QEMU runs
	# as root here, libvirt-lib.sh)
	for d in /var/lib/libvirt/qemu/channel/target/domain-*-"$DOM" /run/libvirt/qemu/channel/domain-*-"$DOM"; do
		[ -d "$d" ] && chgrp -R vmtraced "$d" && chmod -R g+rwx "$d"
	done
	config vmtraced
	# under the shipped unit's SystemCallFilter= too, as systemd runs it
	# (LeakSanitizer's ptrace at exit is not in it: as test_daemon does)
	ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 "$B/tests/tools/unitfilter" \
		units/vmtraced.service "$B/vmtraced" -c "$VMT_DIR/vmtraced.yaml" \
		2>"$VMT_DIR/vmtraced-user.log" &
	VMT_DAEMON_PID=$!
	if ! wait_for 30 grep -q "privilege: running as vmtraced" "$VMT_DIR/vmtraced-user.log"; then
		fail labels_user "not running as vmtraced: $(tail -3 "$VMT_DIR/vmtraced-user.log")"
	elif ! wait_for 60 labels_are tenant=red; then
		fail labels_user "no labels read as vmtraced: $(guest_json); $(vmt_ctl status | grep -i libvirt); $(grep -i libvirt "$VMT_DIR/vmtraced-user.log" | tail -2)"
	elif ! wait_for 120 streaming || ! wait_for 30 subscribed "vmtrace.dump.label.tenant.red" ||
	     ! ask_label "$red"; then
		fail labels_user "tenant=red: no answer: $(guest_json) $(cat "$WORK/answer" "$WORK/answer.err")"
	else
		pass "labels_user (as $(ps -o user= -p "$VMT_DAEMON_PID"), the unit's filter: $(vmt_ctl status | grep 'labels from libvirt' | cut -c1-100))"
	fi
}

why=$(libvirt_cannot_run)
[ -n "$why" ] || command -v nats-server >/dev/null || why="no nats-server (make deps)"
[ -n "$why" ] || command -v python3 >/dev/null || why="no python3 (make deps)"
libvirt_main "$why"
