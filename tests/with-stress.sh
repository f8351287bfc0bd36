#!/bin/bash
# Runs a command while stress-ng loads the machine (every CPU busy, one
# process hammering the disk with sync()), as `make check-stress` does:
#   tests/with-stress.sh tests/run-tests.sh [kinds...]
# Deadlines in the tests stretch by VMT_TEST_TIMEOUT_SCALE (default 3 here);
# nothing else about the tests changes.
set -u
command -v stress-ng >/dev/null || { echo "with-stress: stress-ng is missing (make deps)" >&2; exit 2; }
export VMT_TEST_TIMEOUT_SCALE=${VMT_TEST_TIMEOUT_SCALE:-3}
cpus=$(nproc)
setsid stress-ng --cpu "$cpus" --io 1 --timeout 3h --quiet </dev/null >/dev/null 2>&1 &
spid=$!
trap 'kill -TERM -- -$spid 2>/dev/null; wait $spid 2>/dev/null' EXIT
echo "with-stress: stress-ng --cpu $cpus --io 1 (pid $spid), VMT_TEST_TIMEOUT_SCALE=$VMT_TEST_TIMEOUT_SCALE"
"$@"
