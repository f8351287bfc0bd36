#!/bin/bash
# SPDX-License-Identifier: MIT
#
# The Debian packages, built, checked and installed on this machine:
#   build      tools/mkdeb.sh builds vmtraced and vmtrace-agent .debs
#   lintian    no lintian error (warnings are printed)
#   install    apt-get install ./*.deb: programs, units naming /usr/sbin,
#              udev rule, man pages, the user vmtraced (sysusers), the
#              folder /run/vmtraced/guests (tmpfiles), the conffile
#              (where no systemd runs, the postinst says nothing was started)
#   config     vmtraced -n accepts the installed configuration
#   upgrade    the configuration edited, a newer version (a changelog entry
#              in the copy) installed over it: the edit is kept, no
#              .dpkg-dist beside it, the programs are the new version; and
#              where no systemd runs, a vmtraced started by hand from the
#              old package (its own configuration, the default control
#              socket) is handed over by the postinst: same pid, the new
#              version, one upgrade in its status
#   purge      apt-get purge removes programs, configuration and the control
#              socket; keeps the samples in /var/lib/vmtraced and says so
# Installs for real (CI machines are throwaway), so it SKIPs where that
# would touch someone's installation (either package or /etc/vmtraced
# already there) and puts back what it changed: the packages purged, the
# user vmtraced and /run/vmtraced removed if it made them, services kept
# from starting (policy-rc.d) while systemd runs. Nothing waits on time.
# Prints Check's summary line; tests that cannot run print SKIP lines.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
TESTS="build lintian install config upgrade purge"
checks=0 failures=0
pass() { echo "PASS: $1"; checks=$((checks + 1)); }
fail() { echo "FAIL: $1: $2"; checks=$((checks + 1)); failures=$((failures + 1)); }
skip() { echo "SKIP: $1: $2"; checks=$((checks + 1)); }
summary() {
	echo "$(( checks ? (checks - failures) * 100 / checks : 100 ))%: Checks: $checks, Failures: $failures, Errors: 0"
	[ $failures = 0 ]
	exit
}
skip_rest() {	# why: every test not run yet
	local t seen=1
	for t in $TESTS; do
		[ "$t" = "$1" ] && seen=0
		[ $seen = 0 ] && skip "$t" "$2"
	done
	summary
}
installed() { dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null | grep -q '^ii'; }

why=""
[ "$(id -u)" = 0 ] || why="not root"
for t in dpkg-buildpackage dh lintian apt-get systemd-sysusers; do
	[ -z "$why" ] && ! command -v $t >/dev/null && why="no $t (make deps)"
done
for p in vmtraced vmtrace-agent; do
	[ -z "$why" ] && dpkg-query -W "$p" >/dev/null 2>&1 &&
		why="package $p is on this machine already: not touched"
done
[ -z "$why" ] && [ -e /etc/vmtraced ] && why="/etc/vmtraced exists: not touched"
[ -n "$why" ] && skip_rest build "$why"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/vmt-pkg.XXXXXX")
had_user=0; getent passwd vmtraced >/dev/null && had_user=1
had_group=0; getent group vmtraced >/dev/null && had_group=1
had_run=0; [ -e /run/vmtraced ] && had_run=1
policy=""
daemon=""
if [ -d /run/systemd/system ] && [ ! -e /usr/sbin/policy-rc.d ]; then
	# the daemon would start with the shipped configuration: not in a test
	printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d &&
		policy=/usr/sbin/policy-rc.d
fi
cleanup() {
	local p
	for p in vmtraced vmtrace-agent; do
		dpkg-query -W "$p" >/dev/null 2>&1 && dpkg --purge "$p" >>"$WORK/cleanup.log" 2>&1
	done
	[ -n "$policy" ] && rm -f "$policy"
	[ $had_user = 0 ] && getent passwd vmtraced >/dev/null && userdel vmtraced 2>/dev/null
	[ $had_group = 0 ] && getent group vmtraced >/dev/null && groupdel vmtraced 2>/dev/null
	[ $had_run = 0 ] && rm -rf /run/vmtraced
	if [ -n "$daemon" ] && kill "$daemon" 2>/dev/null; then
		wait "$daemon" 2>/dev/null
	fi
	[ -n "${VMT_KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT
export DEBIAN_FRONTEND=noninteractive
apt_install() {	# log debs...: no network needed, every dependency is here
	local log=$1
	shift
	apt-get install -y -q --no-install-recommends "$@" </dev/null >"$log" 2>&1
}
arch=$(dpkg --print-architecture)
v1=$(dpkg-parsechangelog -SVersion)
v2="$v1+test1"

# ---- build ---------------------------------------------------------------
start=$(date +%s)
# VMT_DEB_CACHE (tests/run-tests.sh): the packages built, for
# test_systemd_host and test_systemd_guest to install rather than build
# them again
share() { [ -z "${VMT_DEB_CACHE:-}" ] || { mkdir -p "$VMT_DEB_CACHE" && cp "$@" "$VMT_DEB_CACHE/"; } || true; }
if LINTIAN=0 tools/mkdeb.sh "$WORK/v1" >"$WORK/build1.out" 2>&1; then
	pass "build ($v1, $(( $(date +%s) - start )) s)"
	share "$WORK/v1/vmtraced_${v1}_$arch.deb" "$WORK/v1/vmtrace-agent_${v1}_$arch.deb"
else
	sed 's/^/  /' "$WORK/build1.out" | tail -20
	fail build "tools/mkdeb.sh failed"
	skip_rest lintian "no packages"
fi
debs1="$WORK/v1/vmtraced_${v1}_$arch.deb $WORK/v1/vmtrace-agent_${v1}_$arch.deb"

# ---- lintian -------------------------------------------------------------
# lintian leaves files in TMPDIR: in WORK, which goes
mkdir -p "$WORK/tmp"
TMPDIR=$WORK/tmp lintian --fail-on error --tag-display-limit 0 $debs1 >"$WORK/lintian.out" 2>&1
rc=$?
grep -E '^[EWIP]: ' "$WORK/lintian.out" | sed 's/^/  /'
if [ $rc = 0 ] && ! grep -q '^E: ' "$WORK/lintian.out"; then
	pass "lintian (no error, $(grep -c '^W: ' "$WORK/lintian.out") warnings)"
else
	fail lintian "errors (exit $rc)"
fi

# ---- install -------------------------------------------------------------
if ! apt_install "$WORK/install1.log" $debs1; then
	tail -20 "$WORK/install1.log" | sed 's/^/  /'
	fail install "apt-get install failed"
	skip_rest config "not installed"
fi
why=""
for f in /usr/sbin/vmtraced /usr/bin/vmtracectl /usr/sbin/vmtrace-agent; do
	[ -x "$f" ] || why="$why; no $f"
done
for f in /lib/systemd/system/vmtraced.service /lib/systemd/system/vmtraced.socket \
	/lib/systemd/system/vmtrace-agent.service /lib/udev/rules.d/99-vmtrace-agent.rules \
	/usr/lib/sysusers.d/vmtraced.conf /usr/lib/tmpfiles.d/vmtraced.conf \
	/usr/share/man/man8/vmtraced.8.gz /usr/share/man/man8/vmtracectl.8.gz \
	/usr/share/man/man8/vmtrace-agent.8.gz /usr/share/man/man5/vmtraced.yaml.5.gz \
	/etc/vmtraced/vmtraced.yaml; do
	[ -f "$f" ] || why="$why; no $f"
done
if [ -e "$ROOT/tools/vmtracectl.bash" ] && [ ! -f /usr/share/bash-completion/completions/vmtracectl ]; then
	why="$why; no bash completion for vmtracectl"
fi
grep -qx 'ExecStart=/usr/sbin/vmtraced' /lib/systemd/system/vmtraced.service ||
	why="$why; vmtraced.service: $(grep '^ExecStart' /lib/systemd/system/vmtraced.service)"
grep -qx 'ExecStart=/usr/sbin/vmtrace-agent' /lib/systemd/system/vmtrace-agent.service ||
	why="$why; vmtrace-agent.service: $(grep '^ExecStart=' /lib/systemd/system/vmtrace-agent.service)"
dpkg-query -W -f='${Conffiles}\n' vmtraced | grep -q '^ */etc/vmtraced/vmtraced.yaml ' ||
	why="$why; /etc/vmtraced/vmtraced.yaml is not a conffile"
getent passwd vmtraced >/dev/null || why="$why; no user vmtraced (sysusers)"
[ "$(stat -c '%a %G' /run/vmtraced/guests 2>/dev/null)" = "2775 vmtraced" ] ||
	why="$why; /run/vmtraced/guests: $(stat -c '%a %G' /run/vmtraced/guests 2>&1) (tmpfiles)"
ldd /usr/sbin/vmtrace-agent >/dev/null 2>&1 && why="$why; vmtrace-agent is not static"
# where no systemd runs, the postinst says that nothing was started
if [ ! -d /run/systemd/system ] && ! grep -q '^vmtraced: systemd is not running here: nothing was started' \
	"$WORK/install1.log"; then
	why="$why; the postinst did not say that nothing was started"
fi
out=$(/usr/sbin/vmtrace-agent --version 2>&1)
[ "$out" = "vmtrace-agent $v1" ] || why="$why; vmtrace-agent --version: $out"
out=$(/usr/sbin/vmtraced -V 2>&1)
[[ "$out" == *"$v1"* ]] || why="$why; vmtraced -V: $out"
if [ -z "$why" ]; then
	pass "install (programs, units, udev rule, man pages, user, /run/vmtraced/guests, conffile)"
else
	fail install "${why#; }"
fi

# ---- config --------------------------------------------------------------
if out=$(/usr/sbin/vmtraced -n -c /etc/vmtraced/vmtraced.yaml 2>&1); then
	pass "config (vmtraced -n accepts /etc/vmtraced/vmtraced.yaml)"
else
	fail config "vmtraced -n: $out"
fi

# ---- upgrade -------------------------------------------------------------
# an edit the checker must see in the normalized output
sed -i 's/^log_level: info/log_level: debug/' /etc/vmtraced/vmtraced.yaml
echo "# edited by test_packages" >>/etc/vmtraced/vmtraced.yaml
why=""
# The old version running, for the postinst to hand over: by hand, as
# there is no systemd to start the unit (with systemd, policy-rc.d keeps
# it stopped and there is nothing to hand over); not where a daemon
# answers the default control socket already (not ours to upgrade).
handover=""
if [ -d /run/systemd/system ]; then
	handover="systemd runs here: the unit is kept from starting, nothing to hand over"
elif /usr/bin/vmtracectl status >/dev/null 2>&1; then
	handover="a vmtraced answers /run/vmtraced/control.sock already"
else
	printf 'state_dir: %s/state\ncontrol_socket: /run/vmtraced/control.sock\nguests: []\n' \
		"$WORK" >"$WORK/daemon.yaml"
	/usr/sbin/vmtraced -c "$WORK/daemon.yaml" >"$WORK/daemon.log" 2>&1 </dev/null &
	daemon=$!
	# ready once it answers (bounded: a daemon that never does fails here)
	for _ in $(seq 300); do
		/usr/bin/vmtracectl status >/dev/null 2>&1 && break
		kill -0 "$daemon" 2>/dev/null || break
		sleep 0.1
	done
	/usr/bin/vmtracectl status >/dev/null 2>&1 ||
		why="$why; vmtraced $v1 started by hand does not answer: $(tail -3 "$WORK/daemon.log")"
fi
if ! LINTIAN=0 tools/mkdeb.sh "$WORK/v2" "$v2" >"$WORK/build2.out" 2>&1; then
	tail -20 "$WORK/build2.out" | sed 's/^/  /'
	why="tools/mkdeb.sh $v2 failed"
elif ! apt_install "$WORK/install2.log" "$WORK/v2/vmtraced_${v2}_$arch.deb" \
	"$WORK/v2/vmtrace-agent_${v2}_$arch.deb"; then
	tail -20 "$WORK/install2.log" | sed 's/^/  /'
	why="apt-get install of $v2 failed"
else
	share "$WORK/v2/vmtraced_${v2}_$arch.deb"
	for p in vmtraced vmtrace-agent; do
		got=$(dpkg-query -W -f='${Version}' $p)
		[ "$got" = "$v2" ] || why="$why; $p is $got after the upgrade"
	done
	grep -qx '# edited by test_packages' /etc/vmtraced/vmtraced.yaml ||
		why="$why; the edit of vmtraced.yaml is gone"
	ls /etc/vmtraced/*.dpkg-* >/dev/null 2>&1 &&
		why="$why; dpkg left $(ls /etc/vmtraced/*.dpkg-*)"
	out=$(/usr/sbin/vmtraced -n -v -c /etc/vmtraced/vmtraced.yaml 2>&1) ||
		why="$why; vmtraced -n on the edited configuration: $out"
	echo "$out" | grep -q '^log_level: debug' ||
		why="$why; vmtraced -n -v does not show the edit (log_level: debug)"
	out=$(/usr/sbin/vmtrace-agent --version 2>&1)
	[ "$out" = "vmtrace-agent $v2" ] || why="$why; vmtrace-agent --version: $out"
	if [ -n "$daemon" ]; then
		st=$(/usr/bin/vmtracectl status 2>&1)
		kill -0 "$daemon" 2>/dev/null || why="$why; the daemon (pid $daemon) is gone"
		echo "$st" | head -1 | grep -q "^vmtraced $v2, " ||
			why="$why; not handed over: status says $(echo "$st" | head -1)"
		echo "$st" | grep -q '^upgrades: 1 hand-over' ||
			why="$why; status says no upgrade"
		grep -q "vmtraced: handed over to $v2" "$WORK/install2.log" ||
			why="$why; the postinst did not say it handed over (it said: $(grep '^vmtraced: ' "$WORK/install2.log" | tr '\n' ' '))"
		grep -q "upgrade: handing over to /usr/sbin/vmtraced" "$WORK/daemon.log" ||
			why="$why; the daemon did not exec /usr/sbin/vmtraced"
		kill "$daemon" && wait "$daemon" || why="$why; the daemon exited with $? after a SIGTERM"
		daemon=""
		handover="pid kept, $v2 running"
	fi
	why=${why#; }
fi
if [ -z "$why" ]; then
	pass "upgrade ($v1 -> $v2: the edited configuration kept and accepted; hand-over: $handover)"
else
	fail upgrade "$why"
fi

# ---- purge ---------------------------------------------------------------
why=""
# a sample in the state folder: the purge keeps it and says so
made_state=0
if [ ! -e /var/lib/vmtraced ]; then
	mkdir -p /var/lib/vmtraced/g1 && : >/var/lib/vmtraced/g1/g1-20261128T000000.000000Z.vmts && made_state=1
fi
if ! apt-get purge -y -q vmtraced vmtrace-agent </dev/null >"$WORK/purge.log" 2>&1; then
	tail -20 "$WORK/purge.log" | sed 's/^/  /'
	why="apt-get purge failed"
else
	for p in vmtraced vmtrace-agent; do
		dpkg-query -W "$p" >/dev/null 2>&1 && why="$why; $p still known to dpkg"
	done
	for f in /usr/sbin/vmtraced /usr/bin/vmtracectl /usr/sbin/vmtrace-agent /etc/vmtraced \
		/lib/systemd/system/vmtraced.service /lib/udev/rules.d/99-vmtrace-agent.rules \
		/run/vmtraced/control.sock; do
		[ -e "$f" ] && why="$why; $f is left"
	done
	# the samples stay, and the postrm says so
	if [ -d /var/lib/vmtraced ] && ! grep -q '^vmtraced: /var/lib/vmtraced is kept' "$WORK/purge.log"; then
		why="$why; /var/lib/vmtraced left without a word"
	fi
	[ -e /var/lib/vmtraced/g1/g1-20261128T000000.000000Z.vmts ] || why="$why; the purge deleted a sample"
	why=${why#; }
fi
[ $made_state = 1 ] && rm -rf /var/lib/vmtraced
if [ -z "$why" ]; then
	pass "purge (programs and configuration gone, samples kept and said)"
else
	fail purge "$why"
fi
summary
