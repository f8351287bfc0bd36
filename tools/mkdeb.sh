#!/bin/sh
# Builds the Debian packages vmtraced and vmtrace-agent (debian/) from a
# copy of the tree, so that dpkg-buildpackage writes nothing outside OUT:
#   tools/mkdeb.sh OUT [VERSION]
# VERSION adds a changelog entry for it to the copy (an upgrade to test).
# Leaves OUT/vmtraced_V_ARCH.deb and OUT/vmtrace-agent_V_ARCH.deb, then
# runs lintian on them unless LINTIAN=0; lintian errors fail the build.
set -eu
cd "$(dirname "$0")/.."
out=${1:?usage: tools/mkdeb.sh OUT [VERSION]}
version=${2:-}
for t in dpkg-buildpackage dh; do
	command -v $t >/dev/null || { echo "mkdeb: no $t: run 'make deps' (packages dpkg-dev, debhelper)" >&2; exit 1; }
done
mkdir -p "$out"
out=$(cd "$out" && pwd)
src=$out/src/vmtraced
rm -rf "$out/src" && mkdir -p "$src"

# the tree's files as they are now: tracked and new ones, not build/
if git rev-parse --git-dir >/dev/null 2>&1; then
	git ls-files -z --cached --others --exclude-standard |
		xargs -0 sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
		tar --null -T - -cf - | tar -xf - -C "$src"
else
	tar --exclude=./build --exclude=./.git -cf - . | tar -xf - -C "$src"
fi

if [ -n "$version" ]; then
	{ printf 'vmtraced (%s) unstable; urgency=medium\n\n  * Rebuilt as %s.\n\n -- %s  %s\n\n' \
		"$version" "$version" \
		"$(sed -n 's/^Maintainer: //p' debian/control)" "$(date -R)"
	  cat debian/changelog; } >"$src/debian/changelog"
fi
version=$(cd "$src" && dpkg-parsechangelog -SVersion)
arch=$(dpkg --print-architecture)

echo "  DEB     vmtraced $version ($arch), log in $out/build.log"
jobs=$(nproc 2>/dev/null || echo 1)
if ! (cd "$src" && DEB_BUILD_OPTIONS="parallel=$jobs ${DEB_BUILD_OPTIONS:-}" \
	dpkg-buildpackage -b -us -uc) >"$out/build.log" 2>&1; then
	tail -30 "$out/build.log" >&2
	echo "mkdeb: dpkg-buildpackage failed, see $out/build.log" >&2
	exit 1
fi
# dpkg-buildpackage writes beside the source folder
for f in "$out"/src/*.deb "$out"/src/*.ddeb "$out"/src/*.changes "$out"/src/*.buildinfo; do
	[ -e "$f" ] && mv -f "$f" "$out/"
done
rm -rf "$out/src"
debs="$out/vmtraced_${version}_$arch.deb $out/vmtrace-agent_${version}_$arch.deb"
for d in $debs; do
	[ -e "$d" ] || { echo "mkdeb: $d was not built" >&2; exit 1; }
	echo "  DEB     $d"
done
if [ "${LINTIAN:-1}" != 0 ]; then
	command -v lintian >/dev/null || { echo "mkdeb: no lintian: run 'make deps'" >&2; exit 1; }
	echo "  LINTIAN vmtraced $version"
	# fails on errors only; warnings and the rest are printed
	# (lintian leaves files in TMPDIR: one of its own, removed after)
	mkdir -p "$out/tmp"
	rc=0
	TMPDIR=$out/tmp lintian --fail-on error --tag-display-limit 0 $debs || rc=$?
	rm -rf "$out/tmp"
	exit $rc
fi
