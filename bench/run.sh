#!/bin/bash
# Builds the benchmark programs into $VMT_BUILD/bench and runs them; ends
# with a summary of every RESULT line. A MISS is reported, not a failure:
# the exit code is non-zero only when a benchmark could not run.
#
# Usage: VMT_BUILD=build/plain bench/run.sh [codec|ingest|window|dump|memory|trigger|upgrade|detect|align|guest|soak]...
#   soak is not in the default set: `make soak` runs it (SOAK_SECONDS, default 600)
#   BENCH_QUICK=1   short runs (about a minute in all) instead of ~8 minutes
# See bench/README.md for what each one measures.
set -u
cd "$(dirname "$0")/.." || exit 1
B=${VMT_BUILD:-build}
export VMT_BUILD=$B VMT_SRCDIR=$PWD
CC=${CC:-cc}
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
PKGS=(libsystemd libtracefs libtraceevent libzstd liblz4 yaml-0.1)
kinds=${*:-codec ingest window dump memory trigger upgrade detect align guest}

for f in vmtraced vmtracectl libvmt.a; do
	if [ ! -e "$B/$f" ]; then
		echo "bench: $B/$f is missing: run 'make O=$B all' first (or 'make bench')" >&2
		exit 1
	fi
done
command -v zstd >/dev/null || { echo "bench: the zstd program is needed (apt-get install zstd)" >&2; exit 1; }

# Built like the Makefile builds everything else, from bench/ alone.
CFLAGS="-std=gnu11 -Wall -Wextra -Werror -Wno-unused-parameter -Wshadow -Wformat=2 \
 -D_GNU_SOURCE -Ilib -Ibench -O2 -g $($PKG_CONFIG --cflags "${PKGS[@]}")"
LIBS="$($PKG_CONFIG --libs "${PKGS[@]}") -lpthread"
mkdir -p "$B/bench"
common="bench/corpus.c bench/producer.c bench/harness.c"
for p in drain codec ingest window dump memory trigger upgrade soak; do
	out=$B/bench/vmtb-$p
	if [ ! -e "$out" ] || [ -n "$(find bench lib "$B/libvmt.a" -newer "$out" -name '*.[cha]' -print -quit)" ]; then
		echo "  CC      $out"
		# shellcheck disable=SC2086
		$CC $CFLAGS -o "$out" "bench/$p.c" $common "$B/libvmt.a" $LIBS || exit 1
	fi
done

log=$(mktemp "${TMPDIR:-/tmp}/vmtbench.XXXXXX")
trap 'rm -f "$log"' EXIT
failed=""
t0=$(date +%s)
echo "vmtraced benchmarks: $B, $(nproc) CPUs, $(uname -r)${BENCH_QUICK:+, BENCH_QUICK=$BENCH_QUICK}"
for k in $kinds; do
	case $k in
	codec|ingest|window|dump|memory|trigger|upgrade|detect|align|guest|soak) ;;
	*) echo "bench: unknown benchmark '$k'" >&2; exit 2 ;;
	esac
	echo
	# other work on the machine skews every figure: say how busy it was
	echo "   load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
	if [ "$k" = detect ]; then
		# the BPF detectors' cost: a script of its own (root, skeleton)
		VMT_BUILD=$B sh "$(dirname "$0")/detect.sh" ${BENCH_QUICK:+3} 2>&1 | tee -a "$log"
	elif [ "$k" = align ] || [ "$k" = guest ]; then
		# a real guest under QEMU (root): its time against the host's, or
		# what recording costs it
		VMT_BUILD=$B bash "$(dirname "$0")/$k.sh" 2>&1 | tee -a "$log"
	elif [ "$k" = window ] && [ -e "$B/corpus/guest-6.1-busy" ] && [ -z "${VMT_CORPUS:-}${VMT_BENCH_CORPUS:-}" ]; then
		# the window on both corpora (its RESULT lines name the busy one)
		{ "$B/bench/vmtb-window" && "$B/bench/vmtb-window" --corpus guest-6.1-busy; } 2>&1 | tee -a "$log"
	else
		"$B/bench/vmtb-$k" 2>&1 | tee -a "$log"
	fi
	[ "${PIPESTATUS[0]}" = 0 ] || failed="$failed $k"
done

echo
echo "== summary ($(( $(date +%s) - t0 )) s; MISS is informational)"
grep '^RESULT ' "$log" | sed 's/^RESULT /  /'
miss=$(grep -c '^RESULT .* MISS ' "$log")
pass=$(grep -c '^RESULT .* PASS ' "$log")
echo "  $pass PASS, $miss MISS${failed:+; could not run:$failed}"
[ -z "$failed" ]
