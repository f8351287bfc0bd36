#!/bin/bash
# SPDX-License-Identifier: MIT
#
# kernel.sh DIR: unpack a Debian cloud kernel for test guests into DIR.
#
#   DIR/boot/vmlinuz-KVER, DIR/lib/modules/KVER (depmod'ed), DIR/kver
#
# Prints KVER on stdout. The newest ABI is the one the meta-package
# linux-image-cloud-amd64 depends on (else the highest version apt-cache
# lists); VMT_KVER=6.1.0-N-cloud-amd64 pins one. If DIR already holds a
# kernel, nothing is downloaded. The package is only unpacked (dpkg-deb -x),
# never installed: the host's /boot and initramfs stay untouched.
set -euo pipefail

DIR=${1:?usage: kernel.sh DIR}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)

if [ -s "$DIR/kver" ] && [ -z "${VMT_KVER:-}" ]; then
	KV=$(cat "$DIR/kver")
	if [ -f "$DIR/boot/vmlinuz-$KV" ] && [ -f "$DIR/lib/modules/$KV/modules.dep" ]; then
		echo "$KV"
		exit 0
	fi
fi

newest() {
	local kv
	kv=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null |
		sed -n 's/^ *Depends: linux-image-\([0-9][^ ]*-cloud-amd64\)\(-unsigned\)\?$/\1/p' | head -1)
	if [ -z "$kv" ]; then
		kv=$(apt-cache search --names-only '^linux-image-[0-9.]+-[0-9]+-cloud-amd64(-unsigned)?$' 2>/dev/null |
			sed -n 's/^linux-image-\([0-9][^ ]*-cloud-amd64\)\(-unsigned\)\? .*/\1/p' | sort -uV | tail -1)
	fi
	echo "$kv"
}

KV=${VMT_KVER:-}
[ -n "$KV" ] || KV=$(newest)
if [ -z "$KV" ]; then
	# the package lists may never have been fetched on this machine
	apt-get update -qq >&2 || true
	KV=$(newest)
fi
[ -n "$KV" ] || { echo "kernel.sh: no linux-image-*-cloud-amd64 known to apt" >&2; exit 1; }

DL=$(mktemp -d "${TMPDIR:-/tmp}/vmt-kernel.XXXXXX")
trap 'rm -rf "$DL"' EXIT
got=
fetch() {
	# signed first, then unsigned: both boot under QEMU without Secure Boot
	for pkg in "linux-image-$KV" "linux-image-$KV-unsigned"; do
		if (cd "$DL" && apt-get download -qq "$pkg" >&2); then
			got=$pkg
			return 0
		fi
	done
	return 1
}
if ! fetch && [ -z "${VMT_KVER:-}" ]; then
	# stale package lists name a kernel the mirror no longer has
	apt-get update -qq >&2 || true
	KV=$(newest)
	[ -n "$KV" ] && fetch
fi
[ -n "$got" ] || { echo "kernel.sh: apt-get download linux-image-$KV failed" >&2; exit 1; }

dpkg-deb -x "$DL"/"$got"_*.deb "$DIR"
[ -f "$DIR/boot/vmlinuz-$KV" ] || { echo "kernel.sh: $got has no boot/vmlinuz-$KV" >&2; exit 1; }
depmod -b "$DIR" "$KV"
echo "$KV" > "$DIR/kver"
echo "$KV"
