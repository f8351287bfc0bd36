#!/bin/sh
# SPDX-License-Identifier: MIT
# The layering check checked: on a copy of the sources and the design,
# tools/layering.py passes as they are and fails, saying why, on each break
# below (the two includes docs/design.ini forbids that no cycle would show,
# the writer reaching the rings it must know only as iovecs,
# a private header, a never broken through a third module, a field of an
# owned struct written outside its module, a file in no module, a module
# the architecture's table leaves out, a daemon/ function or file too
# long). Run by make layering.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/layering.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
fails=0

fresh() {
	rm -rf "$tmp/t" && mkdir -p "$tmp/t/docs"
	cp -R "$top/lib" "$top/daemon" "$top/ctl" "$top/agent" "$tmp/t/"
	cp "$top/docs/design.ini" "$top/docs/ARCHITECTURE.md" "$tmp/t/docs/"
}
run() {
	python3 "$top/tools/layering.py" --root "$tmp/t" --no-link >"$tmp/out" 2>&1
}
# expect NAME TEXT: the check fails and says TEXT
expect() {
	if run; then
		echo "layering-selftest: $1: passed, should have failed"; fails=$((fails + 1))
	elif ! grep -qF -- "$2" "$tmp/out"; then
		echo "layering-selftest: $1: failed without \"$2\":"; sed 's/^/  /' "$tmp/out"
		fails=$((fails + 1))
	fi
}
# add FILE LINE: LINE after FILE's first #include
add() {
	sed -i "0,/^#include/s//$(printf '%s' "$2" | sed 's/[\/&]/\\&/g')\n#include/" "$tmp/t/$1"
}

fresh
if ! run; then
	echo "layering-selftest: the copy as it is fails:"; sed 's/^/  /' "$tmp/out"; exit 1
fi
fresh; add daemon/dump.c '#include "control.h"'
expect "dump.c includes control.h" "daemon/dump.c includes control.h: dump may not use control"
fresh; add daemon/writer.c '#include "guest.h"'
expect "writer.c includes guest.h" "daemon/writer.c includes guest.h: writer may not use guest"
fresh; add daemon/writer.h '#include "ring.h"'
expect "writer.h includes ring.h" "never writer -> ring"
fresh; add daemon/dump.c '#include "guest-int.h"'
expect "dump.c includes guest-int.h" "daemon/dump.c includes guest-int.h: a private header of guest"
# an arrow the design allows that breaks a never two steps away
fresh; sed -i '/^\[module sindex\]/,/^uses/s/^uses = retention$/uses = retention guest/' \
	"$tmp/t/docs/design.ini"
add daemon/sindex.h '#include "guest.h"'
expect "writer reaches guest through sindex" "never writer -> guest"
fresh; printf 'static void poke(struct vmt_manager *m)\n{\n\tm->fleet = NULL;\n}\n' >>"$tmp/t/daemon/main.c"
expect "a field of struct vmt_manager written in main.c" "m->fleet written: struct vmt_manager is manager's"
fresh; echo 'int x;' >"$tmp/t/daemon/stray.c"
expect "a file in no module" "daemon/stray.c is in no module"
fresh; sed -i '/^| `trigger` |/d' "$tmp/t/docs/ARCHITECTURE.md"
expect "a module missing from ARCHITECTURE.md" "module trigger (docs/design.ini) is not in its table"
fresh; { printf 'static int long_one(void)\n{\n'; for i in $(seq 100); do printf '\t(void)0;\n'; done
	printf '\treturn 0;\n}\n'; } >>"$tmp/t/daemon/trigger.c"
expect "a function of 100 lines or more" "long_one() is 104 lines"
fresh; for i in $(seq 700); do echo; done >>"$tmp/t/daemon/trigger.c"
expect "a file over 700 lines" "daemon/trigger.c has"

[ $fails = 0 ] && echo "layering-selftest: ok (11 cases)"
exit $((fails != 0))
