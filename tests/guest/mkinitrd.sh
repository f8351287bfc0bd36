#!/bin/bash
# SPDX-License-Identifier: MIT
#
# mkinitrd.sh KDIR KVER AGENT OUT [EXTRA...]: build the test guest's initramfs.
#
#   KDIR   a kernel tree from kernel.sh (KDIR/lib/modules/KVER, depmod'ed)
#   KVER   its version (what kernel.sh printed)
#   AGENT  the static vmtrace-agent binary, installed as /bin/vmtrace-agent
#   OUT    the gzip'ed newc cpio to write
#   EXTRA  optional host programs (a load such as stress-ng), installed as
#          /bin/NAME with the shared libraries ldd lists, at their host paths
#
# Contents: busybox-static and its applets, the virtio and pvpanic modules in
# load order (/lib/modules/load.list, from modprobe --show-depends),
# /dev/console and /dev/null nodes (/init has no stdio without
# /dev/console), and init.sh
# (beside this script) as /init. No part of the host's /boot is used.
set -euo pipefail

K=${1:?usage: mkinitrd.sh KDIR KVER AGENT OUT}
KV=${2:?usage: mkinitrd.sh KDIR KVER AGENT OUT}
AGENT=${3:?usage: mkinitrd.sh KDIR KVER AGENT OUT}
OUT=${4:?usage: mkinitrd.sh KDIR KVER AGENT OUT}
HERE=$(cd "$(dirname "$0")" && pwd)
K=$(cd "$K" && pwd)
BB=$(command -v busybox || true)

[ -x "$AGENT" ] || { echo "mkinitrd.sh: $AGENT: no agent binary" >&2; exit 1; }
[ -n "$BB" ] || { echo "mkinitrd.sh: busybox not found (apt-get install busybox-static)" >&2; exit 1; }
if ! file -L "$BB" "$AGENT" 2>/dev/null | grep -q 'statically linked'; then
	# `file` may be missing; then trust the caller
	command -v file >/dev/null && { echo "mkinitrd.sh: $BB or $AGENT is not static" >&2; exit 1; }
fi

R=$(mktemp -d "${TMPDIR:-/tmp}/vmt-rootfs.XXXXXX")
trap 'rm -rf "$R"' EXIT
mkdir -p "$R"/bin "$R"/sbin "$R"/proc "$R"/sys "$R"/dev "$R"/tmp "$R"/lib/modules "$R"/etc
cp "$BB" "$R/bin/busybox"
for a in $("$BB" --list); do
	[ -e "$R/bin/$a" ] || ln -s busybox "$R/bin/$a"
done
cp "$AGENT" "$R/bin/vmtrace-agent"
shift 4
for x in "$@"; do
	[ -x "$x" ] || { echo "mkinitrd.sh: $x: not an executable" >&2; exit 1; }
	cp "$x" "$R/bin/$(basename "$x")"
	# "name => /path (addr)" and the loader's "/path (addr)"; vdso has no path
	for l in $(ldd "$x" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'); do
		mkdir -p "$R$(dirname "$l")"
		cp -L "$l" "$R$l"
	done
done

# virtio_console needs virtio_ring and virtio; the PCI transport needs the
# modern/legacy helpers; pvpanic_mmio drives libvirt's <panic model='isa'/>
# (ACPI QEMU0001), so that a panic reaches the host. One module per
# modprobe call: a second name would be taken as a module parameter.
# Built-in (=y) modules print "builtin".
: > "$R/lib/modules/load.list"
for m in virtio_pci virtio_console pvpanic_mmio; do
	modprobe -d "$K" -S "$KV" --show-depends "$m"
done | awk '$1 == "insmod" { print $2 }' | awk '!seen[$0]++' | while read -r f; do
	cp "$f" "$R/lib/modules/"
	basename "$f" >> "$R/lib/modules/load.list"
done
[ -s "$R/lib/modules/load.list" ] || echo "mkinitrd.sh: note: no virtio modules (built in?)" >&2

cp "$HERE/init.sh" "$R/init"
chmod 755 "$R/init"
mknod "$R/dev/console" c 5 1
mknod "$R/dev/null" c 1 3
(cd "$R" && find . | LC_ALL=C sort | cpio -o -H newc --quiet | gzip -1) > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
