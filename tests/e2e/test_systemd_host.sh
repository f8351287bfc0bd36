#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The host package under a real systemd: a Debian 12 machine booted by
# tests/systemd/vm.sh (QEMU, TCG; the image is cached in
# build/systemd-images), the vmtraced .deb installed in it with apt (its
# maintainer scripts run under systemd as PID 1). Once per suite:
#   install     vm.sh up --deb: apt-get install in the machine succeeds
#   active      the postinst leaves vmtraced.socket and vmtraced.service active
#   user        the user vmtraced, /run/vmtraced, /run/vmtraced/guests 2775 root:vmtraced
#   status      vmtracectl status through the socket; with the service stopped,
#               the socket unit starts it again (socket activation)
#   usr1        systemctl kill -s USR1 vmtraced: a dump, sent by pid 1
#   reload      systemctl reload with a good file: applied; with a broken one:
#               non-zero, the same process keeps the old configuration
#   detectors   as user vmtraced with the unit's capabilities: process_death,
#               vcpu_starvation and oom load; kvm_exit too, or status says
#               the kernel's perf_event_paranoid=3 refuses its perf event,
#               and with the setting at 2 it loads under the same unit
#   security    systemd-analyze security of vmtraced.service beside
#               systemd-journald's and systemd-timesyncd's (printed): at
#               most VMT_EXPOSURE_MAX (1.8, measured: journald 4.3,
#               timesyncd 2.1 in the same machine)
#   verify      systemd-analyze verify of the installed units: no complaint
#   guest       a stand-in guest (tests/tools/guestsim, FIFOs in
#               /run/vmtraced/guests/sim1, group vmtraced) found by discovery;
#               systemctl kill -s USR1: a sample holding every page it sent,
#               byte for byte (the sample copied out, tests/tools/corpusexport)
#   dump        vmtracectl dump as root and as a member of control.group
#               (a user made here; the socket's group by a drop-in): a
#               sample each; a user in neither group is refused
#   segv, kill  systemctl kill -s SEGV, then SIGKILL: Restart= starts it
#               again, it adopts the window from systemd's fd store, and the
#               next dump holds the window before the crash, byte for byte,
#               then the new session's pages
#   watchdog    SIGSTOP (WatchdogSec= lowered by a drop-in): the watchdog
#               kills it, Restart= starts it again, the window likewise
#   restart     systemctl restart: the window is lost (README's table): the
#               next dump holds the new session's pages only
#   upgrade     a package of a higher version installed with apt: the
#               postinst hands over (same pid, the new version, the stand-in
#               saw no new session) and the next dump holds the window
#   metrics     vmtraced-metrics.timer enabled: vmtraced.prom written
#   journal     journalctl -o json: the daemon's own fields (GUEST=, SAMPLE=)
#   libvirt     libvirt in the machine (libvirt-daemon-system and
#               qemu-system-x86 from the archive, in the image before the
#               .deb: its units, its configuration and polkit as shipped;
#               nothing under /etc/libvirt changed): a domain (type qemu, no
#               disk, started paused: its QEMU runs and binds the channels,
#               its vCPUs never do) with `vmtracectl libvirt-xml`'s
#               channels is found by the packaged service (user vmtraced, a
#               member of libvirt-qemu by the postinst) in libvirt's folder
#               with the shipped discovery:, its channels open (connecting:
#               no agent), no folder refused, libvirt's events followed
#               through the read-only socket
#   make-install the package purged, `make install` (PREFIX=/usr/local) copied
#               in: systemd-sysusers, systemd-tmpfiles, systemctl enable
#               --now of both units work, and so does systemctl reload
# The .deb (and the upgrade's): VMT_DEBS=FOLDER, else VMT_DEB_CACHE (where
# test_packages left the ones it built in the same run), else built here
# (tools/mkdeb.sh). SKIPs where QEMU, mmdebstrap or root are missing.
# Waits only catch hangs (VMT_TEST_TIMEOUT_SCALE stretches them).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1
VM=$ROOT/tests/systemd/vm.sh
TESTS="install active user status usr1 reload detectors security verify guest dump segv kill watchdog restart
 upgrade metrics journal libvirt make-install"
. "$ROOT/tests/systemd/suite-lib.sh"

why=""
[ "$(id -u)" = 0 ] || why="not root (mmdebstrap builds the image as root)"
for t in qemu-system-x86_64 mmdebstrap mkfs.ext4 busybox cpio gcc; do
	[ -z "$why" ] && ! command -v $t >/dev/null && why="no $t (make deps)"
done
[ -z "$why" ] && [ -z "${VMT_DEBS:-}" ] && ! command -v dpkg-buildpackage >/dev/null && why="no dpkg-buildpackage (make deps)"
[ -n "$why" ] && skip_rest install "$why"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/vmt-sysvm.XXXXXX")
M=$WORK/machine
bg_pids=""
cleanup() {
	local p
	# each in a session of its own: its children go with it
	for p in $bg_pids; do kill -- -"$p" 2>/dev/null && wait "$p"; done
	"$VM" down "$M" >/dev/null 2>&1
	[ -n "${VMT_KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

# ---- install -------------------------------------------------------------
# the lowest version installed first, the highest (if another) the upgrade's
debdir=${VMT_DEBS:-}
[ -z "$debdir" ] && ls "${VMT_DEB_CACHE:-/nonexistent}"/vmtraced_*.deb >/dev/null 2>&1 && debdir=$VMT_DEB_CACHE
deb2=""
if [ -n "$debdir" ]; then
	# by Debian's order of versions (sort -V puts 0.1.0+x before 0.1.0)
	deb=""
	for d in "$debdir"/vmtraced_*.deb; do
		[ -e "$d" ] || continue
		v=$(dpkg-deb -f "$d" Version)
		[ -z "$deb" ] || dpkg --compare-versions "$v" lt "$(dpkg-deb -f "$deb" Version)" && deb=$d
		[ -z "$deb2" ] || dpkg --compare-versions "$v" gt "$(dpkg-deb -f "$deb2" Version)" && deb2=$d
	done
	[ "$deb2" = "$deb" ] && deb2=""
	echo "  the packages of $debdir"
else
	LINTIAN=0 tools/mkdeb.sh "$WORK/deb" >"$WORK/build.log" 2>&1 || { tail -20 "$WORK/build.log"; skip_rest install "tools/mkdeb.sh failed"; }
	deb=$(ls "$WORK"/deb/vmtraced_*.deb | head -1)
fi
[ -f "$deb" ] || skip_rest install "no vmtraced .deb"
v1=$(dpkg-deb -f "$deb" Version)
# Built while the machine boots: the upgrade's package, and `make install`'s
# programs (the plain build beside the sanitizer one, or one of its own).
bg_pids=""
if [ -z "$deb2" ]; then
	LINTIAN=0 setsid tools/mkdeb.sh "$WORK/deb2" "$v1+test1" >"$WORK/build2.log" 2>&1 </dev/null &
	deb2_pid=$!
	bg_pids="$bg_pids $deb2_pid"
fi
PLAIN=$(dirname "${VMT_AGENT:-$WORK/plain/x}")
setsid make --no-print-directory O="$PLAIN" DESTDIR="$WORK/inst" PREFIX=/usr/local install \
	>"$WORK/make-install.log" 2>&1 </dev/null &
make_pid=$!
bg_pids="$bg_pids $make_pid"
start=$(date +%s)
# the agent's dependencies too: test_systemd_guest then boots the same image
more=$(ls "$(dirname "$deb")"/vmtrace-agent_*.deb 2>/dev/null | head -1)
if "$VM" up "$M" --deb "$deb" ${more:+--image-deps "$more"} --image-packages $IMAGE_PKGS 2>"$WORK/up.log"; then
	pass "install ($(basename "$deb"), machine up in $(( $(date +%s) - start )) s)"
else
	tail -25 "$WORK/up.log" | sed 's/^/  /'
	fail install "vm.sh up failed"
	skip_rest active "no machine"
fi
grep -E 'image built|degraded' "$WORK/up.log" | sed 's/^/  /'

# ---- active --------------------------------------------------------------
st=$(vm systemctl is-active vmtraced.socket vmtraced.service | tr '\n' ' ')
if [ "$st" = "active active " ]; then
	pass active
else
	vm systemctl status --no-pager vmtraced.socket vmtraced.service | sed 's/^/  /'
	fail active "vmtraced.socket, vmtraced.service: $st"
fi

# ---- user ----------------------------------------------------------------
got=$(vm sh -c 'getent passwd vmtraced | cut -d: -f1,6; stat -c "%F %a %U %G" /run/vmtraced /run/vmtraced/guests')
want="vmtraced:/var/lib/vmtraced
directory 755 root root
directory 2775 root vmtraced"
if [ "$got" = "$want" ]; then
	pass user
else
	fail user "got: $(echo $got)"
fi

# ---- status --------------------------------------------------------------
out=$(vm vmtracectl status 2>&1)
if ! echo "$out" | head -1 | grep -q '^vmtraced [^ ]*, up '; then
	fail status "vmtracectl status: $(echo "$out" | head -3)"
else
	# stopped, then a client on the socket: systemd starts it again
	pid1=$(vm systemctl show -P MainPID vmtraced.service)
	vm systemctl stop vmtraced.service 2>/dev/null
	st=$(vm systemctl is-active vmtraced.service)
	out=$(vm vmtracectl status 2>&1)
	pid2=$(vm systemctl show -P MainPID vmtraced.service)
	if [ "$st" = inactive ] && echo "$out" | head -1 | grep -q '^vmtraced [^ ]*, up ' &&
		[ "$pid2" != 0 ] && [ "$pid2" != "$pid1" ]; then
		pass "status (socket activation: pid $pid1, stopped, pid $pid2)"
	else
		fail status "after a stop: service $st, pid $pid1 -> $pid2, vmtracectl: $(echo "$out" | head -2)"
	fi
fi

# ---- usr1 ----------------------------------------------------------------
# no guest: the dump writes no file, but counts, and logs who sent it
vm systemctl kill -s USR1 vmtraced.service
if vm sh -c 'for i in $(seq 300); do vmtracectl status | head -1 | grep -q ", dumps 1 " && exit 0; sleep 0.1; done; exit 1' &&
	vm journalctl -u vmtraced.service --no-pager | grep -c 'dump 1: signal (SIGUSR1 from pid 1)' >/dev/null; then
	pass "usr1 (dump 1, from pid 1)"
else
	fail usr1 "no dump: $(vm vmtracectl status | head -1); $(vm journalctl -u vmtraced.service --no-pager | grep dump | tail -2)"
fi

# ---- reload --------------------------------------------------------------
C=/etc/vmtraced/vmtraced.yaml
pid=$(vm systemctl show -P MainPID vmtraced.service)
vm sed -i 's/^  cooldown: 10s$/  cooldown: 11s/' $C
vm grep -q '^  cooldown: 11s$' $C || fail reload "the shipped $C has no 'cooldown: 10s' to edit"
n0=$(vm journalctl -u vmtraced.service --no-pager | grep -c 'configuration reloaded:')
if ! vm systemctl reload vmtraced.service 2>"$WORK/reload1.err"; then
	fail reload "a good file: $(cat "$WORK/reload1.err")"
elif [ "$(vm journalctl -u vmtraced.service --no-pager | grep -c 'configuration reloaded:')" != $((n0 + 1)) ]; then
	fail reload "a good file: reload succeeded, but the daemon did not log it applied"
else
	vm cp "$C" "$C.good"
	vm sh -c "echo 'triggers: [' >>$C"
	vm systemctl reload vmtraced.service 2>/dev/null
	rc=$?
	st=$(vm systemctl is-active vmtraced.service)
	pid2=$(vm systemctl show -P MainPID vmtraced.service)
	refused=$(vm journalctl -u vmtraced.service --no-pager | grep -c 'reload refused, keeping the running configuration')
	vm mv "$C.good" "$C"
	if [ $rc != 0 ] && [ "$st" = active ] && [ "$pid2" = "$pid" ] && [ "$refused" -ge 1 ] &&
		vm systemctl reload vmtraced.service; then
		pass "reload (good: applied; broken: exit $rc, pid $pid kept running, refusal logged)"
	else
		fail reload "a broken file: reload exit $rc, service $st, pid $pid -> $pid2, refusals logged $refused"
	fi
fi

# ---- detectors -----------------------------------------------------------
# what the BPF detectors load as user vmtraced with the unit's capabilities
# only: all of them, but kvm_exit where the kernel refuses its
# perf_event_open(2) (Debian's kernel.perf_event_paranoid=3: CAP_SYS_ADMIN
# only), which status must then name; with the setting at 2, kvm_exit too
det_row() { vm vmtracectl status | sed -n "s/^$1  *//p"; }
detectors_check() {	# -> why not, or nothing
	local pid d row caps
	pid=$(vm systemctl show -P MainPID vmtraced.service)
	[ "$(vm ps -o user= -p "$pid")" = vmtraced ] || { echo "not running as vmtraced"; return; }
	# its bounding set within the unit's four capabilities (DAC_OVERRIDE 1,
	# SYSLOG 34, PERFMON 38, BPF 39): no CAP_SYS_ADMIN
	caps=$(vm sed -n 's/^CapBnd:[[:space:]]*//p' "/proc/$pid/status")
	[ -n "$caps" ] && [ $((0x$caps & ~0xc400000002)) = 0 ] || { echo "bounding set $caps, beyond the unit's"; return; }
	for d in process_death vcpu_starvation oom; do
		row=$(det_row $d)
		echo "$row" | grep -q '^yes ' || { echo "$d not loaded: $row"; return; }
	done
}
kvm_row=""
why=$(detectors_check)
if [ -n "$why" ]; then
	fail detectors "$why; $(vm vmtracectl status | sed -n '/^DETECTOR/,$p' | tr -s ' ' | tr '\n' '|')"
else
	kvm_row=$(det_row kvm_exit)
	paranoid=$(vm cat /proc/sys/kernel/perf_event_paranoid)
	has_kvm=$(vm sh -c 'test -d /sys/kernel/tracing/events/kvm/kvm_exit && echo yes')
	case "$kvm_row" in
	yes\ *) pass "detectors (all four loaded as vmtraced, perf_event_paranoid=$paranoid)" ;;
	*"perf_event_open(2) refused: kernel.perf_event_paranoid=3 lets only CAP_SYS_ADMIN"*)
		# the same unit, the setting at 2: kvm_exit loads (its record read
		# without the kvm module's BTF, which needs CAP_SYS_ADMIN to find)
		vm sysctl -q kernel.perf_event_paranoid=2
		vm systemctl restart vmtraced.service
		row2=$(det_row kvm_exit)
		vm sysctl -q kernel.perf_event_paranoid="$paranoid"
		vm systemctl restart vmtraced.service
		why=$(detectors_check)
		if [ "$paranoid" = 3 ] && echo "$row2" | grep -q '^yes ' && [ -z "$why" ]; then
			pass "detectors (3 of 4 as vmtraced; kvm_exit named why at perf_event_paranoid=3, loaded at 2)"
		else
			fail detectors "kvm_exit at perf_event_paranoid 2: $row2 (was $paranoid: $kvm_row) $why"
		fi ;;
	*"kvm tracepoints not found"*)
		[ -z "$has_kvm" ] && pass "detectors (3 of 4 as vmtraced; no kvm module here, said so)" ||
			fail detectors "kvm_exit says no kvm tracepoints, but they are there: $kvm_row" ;;
	*) fail detectors "kvm_exit: $kvm_row (perf_event_paranoid=$paranoid)" ;;
	esac
fi
vm vmtracectl status | sed -n '/^DETECTOR/,$p' | sed 's/^/  /'

# ---- security ------------------------------------------------------------
scores=""
for u in vmtraced systemd-journald systemd-timesyncd; do
	s=$(vm systemd-analyze security --no-pager "$u.service" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\) .*/\1/p')
	scores="$scores $u.service=${s:-?}"
done
echo "  systemd-analyze security (exposure, 0 best, 10 worst):$scores"
own=$(echo "$scores" | sed -n 's/.* vmtraced.service=\([0-9.]*\).*/\1/p')
case $scores in
*=\?*) fail security "no score for one of them:$scores" ;;
*) if awk -v s="$own" -v m="${VMT_EXPOSURE_MAX:-1.8}" 'BEGIN { exit !(s <= m) }'; then
	pass "security (vmtraced.service at most ${VMT_EXPOSURE_MAX:-1.8}):$scores"
   else
	fail security "vmtraced.service's exposure $own is over ${VMT_EXPOSURE_MAX:-1.8}:$scores"
   fi ;;
esac

# ---- verify --------------------------------------------------------------
units=$(vm sh -c 'ls /lib/systemd/system/vmtraced*')
out=$(vm systemd-analyze verify --man=no $units 2>&1)
rc=$?
if [ $rc = 0 ] && [ -z "$out" ]; then
	pass "verify ($(echo $units | wc -w) units)"
else
	echo "$out" | sed 's/^/  /'
	fail verify "systemd-analyze verify exit $rc"
fi

# ==== with a stand-in guest ==============================================
B=${VMT_BUILD:-build}
GUESTSIM=$B/tests/tools/guestsim
EXPORT=$B/tests/tools/corpusexport
CORPUS=${VMT_CORPUS:-$B/corpus/guest-6.1}
[ -d "$CORPUS/pages" ] || CORPUS=$ROOT/../shared/corpus/guest-6.1
SCALE=$(awk -v s="${VMT_TEST_TIMEOUT_SCALE:-1}" 'BEGIN { print (s > 1) ? int(s + 0.999) : 1 }')
GS=/run/guestsim.state
# the corpus' pages a CPU: what the stand-in sends each session
npages() { echo $(( $(stat -c %s "$CORPUS/pages/cpu$1.raw") / 4096 )); }

# vwait SECS COND: COND (shell, in the machine) true within SECS (a deadline
# that only catches a hang; checked every 0.2 s)
vwait() {
	vm sh -c "i=0; while [ \$i -lt $(( $1 * 5 * SCALE )) ]; do $2 && exit 0; sleep 0.2; i=\$((i + 1)); done; exit 1"
}
# the stand-in's count of FIELD (hellos, starts, meta, sent)
gfield() { vm cat $GS | tr ' ' '\n' | sed -n "/^$1\$/{n;p}"; }
mainpid() { vm systemctl show -P MainPID vmtraced.service; }
nrestarts() { vm systemctl show -P NRestarts vmtraced.service; }
# the session K the stand-in was asked for has been sent whole
wait_session() { vwait 120 "grep -qs 'starts $1 meta [0-9]* sent $1\$' $GS"; }
# the newest sample SAMPLE= says was written
last_sample() { vm journalctl -u vmtraced.service -o cat --no-pager | sed -n 's/^wrote \(\/.*\.vmts\): .*/\1/p' | tail -1; }

# sample_check SAMPLE COPIES: nothing if SAMPLE (copied out of the machine,
# with its guest's newest aux file, and exported by corpusexport: every page
# walks, none lost) holds, per CPU, COPIES times the corpus' pages back to
# back, byte for byte; else why not
sample_check() {
	local d=$WORK/sample.$2.$RANDOM aux c n want
	mkdir -p "$d"
	vm cat "$1" >"$d/s.vmts" || { echo "cannot copy $1 out"; return; }
	aux=$(vm sh -c "ls ${1%/*}/*.vmtaux | tail -1")
	vm cat "$aux" >"$d/s.vmtaux" || { echo "cannot copy $aux out"; return; }
	if ! "$EXPORT" "$d/s.vmts" "$d/s.vmtaux" "$d/out" >"$d/export.txt" 2>&1; then
		echo "corpusexport $1: $(tail -3 "$d/export.txt" | tr '\n' ' ')"
		return
	fi
	for c in 0 1; do
		want=$d/want$c
		for n in $(seq "$2"); do cat "$CORPUS/pages/cpu$c.raw"; done >"$want"
		if ! cmp -s "$d/out/pages/cpu$c.raw" "$want"; then
			n=$(( $(stat -c %s "$d/out/pages/cpu$c.raw" 2>/dev/null || echo 0) / 4096 ))
			echo "$1 cpu$c: $n pages, not $2 x $(npages $c) as sent ($(cmp "$d/out/pages/cpu$c.raw" "$want" 2>&1 | head -1))"
			return
		fi
	done
	rm -rf "$d"
}

# ---- guest ---------------------------------------------------------------
# Set up once, ahead of the stand-in (the units restarted: nothing recorded
# yet): a group for control.group and a member of it, the socket given that
# group (a drop-in, as vmtraced.socket says), a lower watchdog (a drop-in),
# rings that hold the corpus 4 times over (the crashes add a session each).
why=""
for f in "$GUESTSIM" "$EXPORT" "$CORPUS/pages/cpu0.raw" "$CORPUS/pages/cpu1.raw"; do
	[ -e "$f" ] || why="no $f (make tests)"
done
if [ -n "$why" ]; then
	skip_rest guest "$why"
fi
WD=$((10 * SCALE))
tar -C "$CORPUS" -czf "$WORK/corpus.tgz" meta pages
vm mkdir -p /var/tmp/corpus
"$VM" cp "$M" "$GUESTSIM" /usr/local/bin/guestsim && "$VM" cp "$M" "$WORK/corpus.tgz" /var/tmp/corpus.tgz &&
	vm sh -c 'chmod 755 /usr/local/bin/guestsim && tar -xzf /var/tmp/corpus.tgz -C /var/tmp/corpus' || why="copying guestsim and the corpus in failed"
vm sh -e -c "groupadd -r vmtctl; useradd -M -N -g users -G vmtctl vmtop; useradd -M -N -g users vmother
	mkdir -p /etc/systemd/system/vmtraced.socket.d /etc/systemd/system/vmtraced.service.d
	printf '[Socket]\nSocketGroup=vmtctl\n' >/etc/systemd/system/vmtraced.socket.d/group.conf
	printf '[Service]\nWatchdogSec=${WD}s\n' >/etc/systemd/system/vmtraced.service.d/watchdog.conf
	sed -i 's/^  group: \"\"\$/  group: vmtctl/; /^record:/,/^[a-z]/s/^  ring_size: 4MiB\$/  ring_size: 16MiB/' $C
	grep -q '^  group: vmtctl\$' $C && grep -q '^  ring_size: 16MiB\$' $C
	systemctl daemon-reload
	systemctl stop vmtraced.service vmtraced.socket
	systemctl start vmtraced.socket vmtraced.service" >"$WORK/setup.log" 2>&1 ||
	why="$why; the set-up failed: $(tail -3 "$WORK/setup.log" | tr '\n' ' ')"
vm systemd-run --unit=guestsim --quiet /usr/local/bin/guestsim -d /run/vmtraced/guests/sim1 \
	-m /var/tmp/corpus/meta -s $GS /var/tmp/corpus/pages/cpu0.raw /var/tmp/corpus/pages/cpu1.raw ||
	why="$why; systemd-run guestsim failed"
[ -n "$why" ] && skip_rest guest "${why#; }"
if ! wait_session 1; then
	fail guest "the stand-in's first session was not sent: $(vm cat $GS); $(vm journalctl -u guestsim --no-pager | tail -3)"
else
	n0=$(vm vmtracectl status | head -1 | sed -n 's/.*, dumps \([0-9]*\) .*/\1/p')
	s0=$(last_sample)
	vm systemctl kill -s USR1 vmtraced.service
	vwait 120 "vmtracectl status | head -1 | grep -q ', dumps $((n0 + 1)) '" &&
		vwait 60 "journalctl -u vmtraced.service -o cat --no-pager | grep -q '^wrote /var/lib/vmtraced/sim1/.*\.vmts: '"
	s1=$(last_sample)
	got=$(vm stat -c '%G %a' /run/vmtraced/guests/sim1 /run/vmtraced/guests/sim1/agent-ctl-path.in | tr '\n' ' ')
	if [ -z "$s1" ] || [ "$s1" = "$s0" ]; then
		fail guest "no sample after SIGUSR1: $(vm vmtracectl status | head -1)"
	elif [ "$got" != "vmtraced 2770 vmtraced 660 " ]; then
		fail guest "the stand-in's channels: $got"
	elif why=$(sample_check "$s1" 1) && [ -n "$why" ]; then
		fail guest "$why"
	else
		pass "guest (sim1 discovered, $(npages 0)+$(npages 1) pages sent; SIGUSR1: ${s1##*/} holds them byte for byte)"
	fi
fi

# ---- dump ----------------------------------------------------------------
# pages a sample holds, by vmtracectl info: "cpu0 pages N ..." summed
info_pages() { vm vmtracectl info "$1" | awk '$1 ~ /^cpu[0-9]+$/ && $3 == "pages," { n += $2 } END { print n + 0 }'; }
why=""
want=$(( $(npages 0) + $(npages 1) ))
for who in root vmtop; do
	if [ $who = root ]; then
		out=$(vm vmtracectl dump sim1 2>&1)
	else
		out=$(vm setpriv --reuid=vmtop --regid=users --init-groups vmtracectl dump sim1 2>&1)
	fi
	case $out in
	/var/lib/vmtraced/sim1/*.vmts) n=$(info_pages "$out"); [ "$n" = "$want" ] || why="$why; $who's sample has $n pages, not $want" ;;
	*) why="$why; vmtracectl dump as $who: $out" ;;
	esac
done
out=$(vm setpriv --reuid=vmother --regid=users --init-groups vmtracectl dump sim1 2>&1)
rc=$?
[ $rc = 1 ] || why="$why; a user in neither group: exit $rc ($out)"
if [ -z "$why" ]; then
	pass "dump (root and vmtop of control.group vmtctl: $want pages each; vmother refused: ${out:0:80})"
else
	fail dump "${why#; }"
fi

# ---- segv, kill, watchdog ------------------------------------------------
# crash NAME SIGNAL COPIES: the main process sent SIGNAL; Restart= starts
# the next one (NRestarts + 1), which adopts both CPUs' windows from the fd
# store; the stand-in's next session is sent whole; a dump holds COPIES
# times the corpus (the window kept, then the new session).
# Only systemctl asks meanwhile: a vmtracectl on the socket would start the
# service by socket activation, not Restart=.
crash() {
	local name=$1 sig=$2 pid0 pid1 nr0 nr1 st0 s adopted why=""
	pid0=$(mainpid) nr0=$(nrestarts) st0=$(gfield starts)
	vm systemctl kill --kill-who=main -s "$sig" vmtraced.service
	if ! vwait $(( 60 + WD * 2 )) "p=\$(systemctl show -P MainPID vmtraced.service); [ \"\$p\" != 0 ] && [ \"\$p\" != $pid0 ] && systemctl -q is-active vmtraced.service"; then
		fail "$name" "not running again: $(vm systemctl status --no-pager vmtraced.service | head -5 | tr '\n' ' ')"
		return
	fi
	pid1=$(mainpid) nr1=$(nrestarts)
	[ "$nr1" = $((nr0 + 1)) ] || why="$why; NRestarts $nr0 -> $nr1 (not started by Restart=)"
	wait_session $((st0 + 1)) || why="$why; the stand-in's next session: $(vm cat $GS)"
	adopted=$(vm journalctl -u vmtraced.service _PID="$pid1" -o cat --no-pager | grep -c 'guest sim1: cpu[01]: window adopted from a previous daemon')
	# SIGSTOP: ended by systemd's watchdog, not by anything else
	# (grep -c reads it all: with -q, journalctl could die of SIGPIPE and
	# pipefail take the pipeline for a miss)
	[ "$sig" = STOP ] && ! vm journalctl -b -o cat --no-pager | grep -c "vmtraced.service: Watchdog timeout" >/dev/null &&
		why="$why; systemd logged no watchdog timeout: $(vm journalctl -b _PID=1 -o cat --no-pager | grep vmtraced | tail -6 | tr '\n' '|')"
	[ "$adopted" = 2 ] || why="$why; $adopted CPU window(s) adopted by pid $pid1"
	if [ -z "$why" ]; then
		s=$(vm vmtracectl dump sim1)
		why=$(sample_check "$s" "$3")
	fi
	if [ -z "$why" ]; then
		pass "$name (pid $pid0 -> $pid1 by Restart=, both windows adopted, ${s##*/}: $3 x the corpus byte for byte)"
	else
		fail "$name" "${why#; }"
	fi
}
crash segv SEGV 2
crash kill KILL 3
crash watchdog STOP 4

# ---- restart -------------------------------------------------------------
pid0=$(mainpid) st0=$(gfield starts)
vm systemctl restart vmtraced.service
pid1=$(mainpid)
why=""
wait_session $((st0 + 1)) || why="the stand-in's next session: $(vm cat $GS)"
adopted=$(vm journalctl -u vmtraced.service _PID="$pid1" -o cat --no-pager | grep -c 'window adopted from a previous daemon')
[ -z "$why" ] && [ "$adopted" != 0 ] && why="pid $pid1 adopted $adopted window(s): README says a restart loses them"
if [ -z "$why" ]; then
	s=$(vm vmtracectl dump sim1)
	why=$(sample_check "$s" 1)
fi
if [ -z "$why" ]; then
	pass "restart (pid $pid0 -> $pid1, the window lost as README's table says: ${s##*/} holds the new session only)"
else
	fail restart "$why"
fi

# ---- upgrade -------------------------------------------------------------
why=""
if [ -z "$deb2" ]; then
	wait "$deb2_pid" 2>/dev/null
	deb2=$(ls "$WORK"/deb2/vmtraced_*.deb 2>/dev/null | head -1)
	[ -n "$deb2" ] || why="tools/mkdeb.sh $v1+test1 failed: $(tail -5 "$WORK/build2.log" | tr '\n' ' ')"
fi
if [ -z "$why" ]; then
	v2=$(dpkg-deb -f "$deb2" Version)
	pid0=$(mainpid) nr0=$(nrestarts) g0=$(vm cat $GS)
	"$VM" cp "$M" "$deb2" "/var/tmp/vm-debs/${deb2##*/}"
	vm env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
		"/var/tmp/vm-debs/${deb2##*/}" >"$WORK/upgrade.log" 2>&1 || why="apt-get install of $v2 failed"
	st=$(vm vmtracectl status)
	[ "$(mainpid)" = "$pid0" ] || why="$why; pid $pid0 -> $(mainpid)"
	[ "$(nrestarts)" = "$nr0" ] || why="$why; NRestarts $nr0 -> $(nrestarts)"
	echo "$st" | head -1 | grep -q "^vmtraced $v2, " || why="$why; status: $(echo "$st" | head -1)"
	echo "$st" | grep -q '^upgrades: 1 hand-over' || why="$why; status says no hand-over"
	grep -q "^vmtraced: handed over to $v2, the recorded window kept" "$WORK/upgrade.log" ||
		why="$why; the postinst said: $(grep '^vmtraced: ' "$WORK/upgrade.log" | tr '\n' ' ')"
	[ "$(vm cat $GS)" = "$g0" ] || why="$why; the stand-in saw a new session: $g0 -> $(vm cat $GS)"
	if [ -z "$why" ]; then
		s=$(vm vmtracectl dump sim1)
		why=$(sample_check "$s" 1)
	fi
fi
if [ -z "$why" ]; then
	pass "upgrade ($v1 -> $v2 by apt: pid $pid0 kept, no new session, ${s##*/} holds the window)"
else
	sed 's/^/  /' "$WORK/upgrade.log" | tail -15
	fail upgrade "${why#; }"
fi

# ---- metrics -------------------------------------------------------------
P=/var/lib/prometheus/node-exporter/vmtraced.prom
vm mkdir -p /var/lib/prometheus/node-exporter
vm systemctl enable --now --quiet vmtraced-metrics.timer
if ! vwait 120 "[ -s $P ]"; then
	fail metrics "no $P: $(vm systemctl status --no-pager vmtraced-metrics.timer vmtraced-metrics.service | tr '\n' ' ' | cut -c1-400)"
else
	got=$(vm sh -c "stat -c %a $P; grep -c '^vmtraced_up 1\$' $P; grep -c 'guest=\"sim1\"' $P" | tr '\n' ' ')
	set -- $got
	if [ "${1:-}" != 644 ] || [ "${2:-}" != 1 ] || [ "${3:-0}" = 0 ]; then
		fail metrics "$P: mode, vmtraced_up 1 lines, sim1's lines: $got"
	else
		pass "metrics (the timer wrote $P: vmtraced_up 1, $3 lines of sim1)"
	fi
fi

# ---- journal -------------------------------------------------------------
vm journalctl -u vmtraced.service -o json --no-pager >"$WORK/journal.json"
out=$(python3 - "$WORK/journal.json" <<'EOF'
import json, re, sys
def text(v):
    return bytes(v).decode("utf-8", "replace") if isinstance(v, list) else v
guest = sample = 0
bad = []
for line in open(sys.argv[1]):
    e = json.loads(line)
    m = text(e.get("MESSAGE", ""))
    if e.get("_COMM") != "vmtraced":
        continue
    g = re.match(r"guest (\S+): ", m)
    if g:
        guest += 1
        if e.get("GUEST") != g.group(1) or e.get("_TRANSPORT") != "journal":
            bad.append("%r: GUEST=%r, _TRANSPORT=%r" % (m[:60], e.get("GUEST"), e.get("_TRANSPORT")))
    w = re.match(r"wrote (/\S+\.vmts): ", m)
    if w:
        sample += 1
        if e.get("SAMPLE") != w.group(1) or e.get("PRIORITY") != "5":
            bad.append("%r: SAMPLE=%r, PRIORITY=%r" % (m[:60], e.get("SAMPLE"), e.get("PRIORITY")))
if bad or not guest or not sample:
    print("%d guest line(s), %d sample line(s); %s" % (guest, sample, "; ".join(bad[:3])))
    sys.exit(1)
print("%d guest line(s) with GUEST=, %d sample line(s) with SAMPLE=" % (guest, sample))
EOF
)
if [ $? = 0 ]; then
	pass "journal ($out)"
else
	fail journal "$out"
fi

# ---- libvirt -------------------------------------------------------------
# the state of guest $1 in status (connecting: channels open, no agent)
lv_row() { vm vmtracectl status | awk -v d="$1" '$1 == d { print $2; exit }'; }
LVDOM=vmtlv
why="" nolv=""
pid=$(mainpid)
# bounded inside the machine: a libvirtd that never answers (CI, 2026-12-06:
# vmexec's 1800 s ran out, then the machine answered nothing more) costs
# 3 minutes, and says what libvirtd and the console said
if ! vm sh -c 'timeout 180 virsh -q -c qemu:///system version >/dev/null' 2>"$WORK/lv.err"; then
	nolv="no libvirtd answering in the machine: $(head -2 "$WORK/lv.err" | tr '\n' ' ')"
	vm sh -c 'timeout 30 systemctl status --no-pager -n 15 libvirtd.service libvirtd.socket' 2>&1 |
		sed 's/^/  libvirtd: /' >&2
	tail -15 "$M/console.log" 2>/dev/null | sed 's/^/  console: /' >&2
fi
# stock: no conffile of libvirt's changed, no file under /etc/libvirt newer
# than vmtraced's installation (checked before the domain is defined: its
# definition is libvirt's to write there); vmtraced's discovery: as shipped
if [ -z "$nolv" ]; then
	out=$(vm sh -c 'dpkg -V $(dpkg -S /etc/libvirt | sed "s/:.*//; s/,//g") | grep " /etc/"; find /etc/libvirt ! -type d -newer /var/lib/dpkg/info/vmtraced.list')
	[ -z "$out" ] || why="/etc/libvirt is not as shipped: $(echo $out)"
	[ "$(vm sed -n '/^discovery:/,/^[a-z]/p' $C)" = "$(sed -n '/^discovery:/,/^[a-z]/p' conf/vmtraced.yaml)" ] ||
		why="$why; $C's discovery: is not the shipped one"
	gid=$(vm getent group libvirt-qemu | cut -d: -f3)
	vm id -nG vmtraced | tr ' ' '\n' | grep -qx libvirt-qemu || why="$why; vmtraced is not in group libvirt-qemu"
	vm grep "^Groups:" "/proc/$pid/status" | tr '\t ' '\n\n' | grep -qx "$gid" ||
		why="$why; vmtraced (pid $pid) does not run with group libvirt-qemu ($gid): $(vm grep '^Groups:' /proc/$pid/status)"
fi
# on, whatever the above found: what discovery makes of it is said too
if [ -z "$nolv" ]; then
	# no disk, no kernel: started paused, its QEMU binds the channels and
	# no vCPU of the nested TCG ever runs
	vm sh -e -c "{ printf '<domain type=\"qemu\">\n<name>$LVDOM</name>\n<memory unit=\"MiB\">64</memory>\n<vcpu>2</vcpu>\n'
		printf '<os><type arch=\"x86_64\" machine=\"pc\">hvm</type></os>\n<features><acpi/><apic/></features>\n<devices>\n'
		vmtracectl libvirt-xml --vcpus 2 2>/dev/null
		printf '</devices>\n</domain>\n'; } >/var/tmp/$LVDOM.xml
		grep -c \"<channel type='unix'>\" /var/tmp/$LVDOM.xml | grep -qx 3
		virsh -q -c qemu:///system define /var/tmp/$LVDOM.xml
		virsh -q -c qemu:///system start --paused $LVDOM" >"$WORK/lv.log" 2>&1 ||
		nolv="the domain did not start: $(tail -3 "$WORK/lv.log" | tr '\n' ' ')"
fi
if [ -n "$nolv" ]; then
	why="$why; $nolv"
else
	# found and its channels open, or a folder refused (no need to wait on)
	vwait 120 "vmtracectl status | awk '\$1 == \"$LVDOM\" && (\$2 == \"connecting\" || \$2 == \"streaming\") || /^! discovery: / { f = 1 } END { exit !f }'"
	st=$(lv_row $LVDOM)
	if [ "$st" != connecting ] && [ "$st" != streaming ]; then
		why="$why; $LVDOM not connecting: $(vm vmtracectl status | grep -E "^!|^$LVDOM " | tr '\n' ' ') $(vm sh -c 'ls -ld /var/lib/libvirt/qemu/channel/target /var/lib/libvirt/qemu/channel/target/* /run/libvirt/qemu/channel/* 2>/dev/null' | tr '\n' ' ')"
	fi
	log=$(vm journalctl -u vmtraced.service _PID="$pid" -o cat --no-pager)
	dir=$(echo "$log" | sed -n "s/^guest $LVDOM: discovered in \(.*\)$/\1/p" | tail -1)
	case $dir in
	/var/lib/libvirt/qemu/channel/target|/run/libvirt/qemu/channel) ;;
	*) why="$why; not discovered in libvirt's folder: $(echo "$log" | grep "$LVDOM" | head -2 | tr '\n' ' ')" ;;
	esac
	echo "$log" | grep -q "^guest $LVDOM: channels open (socket, 2 CPUs), waiting for the agent" ||
		why="$why; no 'channels open' logged for $LVDOM"
	vm vmtracectl --json status | grep -q '"discovery_unreadable": [1-9]' &&
		why="$why; a folder refused: $(vm vmtracectl status | grep '^!' | tr '\n' ' ')"
	[ "$(vm ps -o user= -p "$pid")" = vmtraced ] && [ "$(mainpid)" = "$pid" ] ||
		why="$why; not pid $pid as vmtraced any more"
	# libvirt_events: the daemon's read-only connection, polkit as shipped
	echo "$log" | grep -q '^libvirt: connected to qemu:///system (read-only)' ||
		why="$why; libvirt's events not followed: $(det_row libvirt_events)"
fi
if [ -z "$why" ]; then
	pass "libvirt (domain $LVDOM, QEMU as $(vm ps -o user= -C qemu-system-x86_64 | head -1), found in $dir by pid $pid as vmtraced, groups $(vm id -nG vmtraced | tr ' ' ,): $(lv_row $LVDOM), channels open)"
else
	fail libvirt "${why#; }"
fi
vm sh -c "virsh -q -c qemu:///system destroy $LVDOM; virsh -q -c qemu:///system undefine $LVDOM" >/dev/null 2>&1

# ---- make-install --------------------------------------------------------
why=""
wait "$make_pid"
rc=$?
if [ $rc != 0 ]; then
	why="make install (O=$PLAIN) exit $rc: $(tail -3 "$WORK/make-install.log" | tr '\n' ' ')"
else
	tar -C "$WORK/inst" -czf "$WORK/inst.tgz" .
	vm env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q vmtraced >"$WORK/purge.log" 2>&1 ||
		why="apt-get purge failed"
	vm test -e /usr/sbin/vmtraced && why="$why; /usr/sbin/vmtraced is left after the purge"
	vm rm -rf /etc/systemd/system/vmtraced.socket.d /etc/systemd/system/vmtraced.service.d
	"$VM" cp "$M" "$WORK/inst.tgz" /var/tmp/inst.tgz
	vm sh -e -c 'tar -xzf /var/tmp/inst.tgz -C / && systemd-sysusers && systemd-tmpfiles --create &&
		systemctl daemon-reload && systemctl enable --now vmtraced.socket vmtraced.service' \
		>"$WORK/make-install.vm.log" 2>&1 ||
		why="$why; the installation failed: $(tail -3 "$WORK/make-install.vm.log" | tr '\n' ' ')"
	st=$(vm systemctl is-active vmtraced.socket vmtraced.service | tr '\n' ' ')
	[ "$st" = "active active " ] || why="$why; vmtraced.socket, vmtraced.service: $st"
	vm systemctl show -P ExecStart vmtraced.service | grep -q 'path=/usr/local/sbin/vmtraced ' ||
		why="$why; ExecStart: $(vm systemctl show -P ExecStart vmtraced.service)"
	out=$(vm /usr/local/bin/vmtracectl status 2>&1 | head -1)
	echo "$out" | grep -q '^vmtraced [^ ]*, up ' || why="$why; vmtracectl status: $out"
	pid=$(mainpid)
	n0=$(vm journalctl -u vmtraced.service _PID="$pid" -o cat --no-pager | grep -c 'configuration reloaded:')
	vm systemctl reload vmtraced.service 2>"$WORK/reload3.err" ||
		why="$why; systemctl reload: $(head -1 "$WORK/reload3.err"); the journal: $(vm journalctl -u vmtraced.service -n 6 --no-pager -o cat | tr '\n' ' ')"
	n1=$(vm journalctl -u vmtraced.service _PID="$pid" -o cat --no-pager | grep -c 'configuration reloaded:')
	[ "$n1" = $((n0 + 1)) ] || why="$why; the reload was not applied ($n0 -> $n1 reloads logged)"
fi
if [ -z "$why" ]; then
	pass "make-install (purged; make install PREFIX=/usr/local unpacked: enable --now, status, reload)"
else
	fail make-install "${why#; }"
fi
vm systemctl stop guestsim.service
summary
