#!/bin/bash
# SPDX-License-Identifier: MIT
#
# `make install` and `make install-agent` into a DESTDIR, for several PREFIXes:
#   paths    every program an installed unit names on an Exec line
#            (ExecStart, ExecReload, a shell's command line) is where that
#            PREFIX put it: `systemctl reload vmtraced` ran /usr/bin/vmtracectl
#            after a PREFIX=/usr/local install, which put it in /usr/local/bin
#   nolocal  with PREFIX=/usr no unit names /usr/local
# Needs only make and the plain build's programs (VMT_AGENT's folder, or
# build/plain); writes into its TMPDIR only. Prints Check's summary line.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
checks=0 failures=0
pass() { echo "PASS: $1"; checks=$((checks + 1)); }
fail() { echo "FAIL: $1: $2"; checks=$((checks + 1)); failures=$((failures + 1)); }

O=$(dirname "${VMT_AGENT:-build/plain/vmtrace-agent}")
work=$(mktemp -d "${TMPDIR:-/tmp}/vmt-install.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Programs of ours named on the Exec lines of DESTDIR's units: one a line
exec_programs() {	# destdir unitdir
	grep -h '^Exec' "$1$2"/*.service | grep -o '/[^ "'\'';]*/vmtrace[a-z-]*' | sort -u
}

for prefix in /usr/local /usr /opt/vmt; do
	d=$work/${prefix//\//_}
	unitdir=$prefix/lib/systemd/system
	if ! make -s O="$O" PREFIX="$prefix" DESTDIR="$d" install install-agent >"$work/make.log" 2>&1; then
		fail "paths $prefix" "make install failed: $(tail -3 "$work/make.log")"
		continue
	fi
	progs=$(exec_programs "$d" "$unitdir")
	missing=""
	for p in $progs; do
		[ -x "$d$p" ] || missing="$missing $p"
	done
	n=$(echo "$progs" | grep -c .)
	if [ -n "$missing" ]; then
		fail "paths $prefix" "the units name programs install did not put there:$missing"
	elif [ "$n" -lt 3 ]; then	# vmtraced, vmtracectl (reload, metrics), the agent
		fail "paths $prefix" "only $n program(s) found on the Exec lines: $(echo $progs)"
	else
		pass "paths $prefix ($n programs)"
	fi
	if [ "$prefix" = /usr ]; then
		if grep -l '^Exec.*/usr/local/' "$d$unitdir"/*.service >"$work/local" 2>/dev/null; then
			fail nolocal "$(tr '\n' ' ' <"$work/local")name /usr/local"
		else
			pass nolocal
		fi
	fi
done
echo "$(( checks ? (checks - failures) * 100 / checks : 100 ))%: Checks: $checks, Failures: $failures, Errors: 0"
[ $failures = 0 ]
