#!/bin/sh
# Install the Debian packages vmtraced builds, tests and demos with, when
# they are missing. Does nothing when all are present; as non-root, lists
# what is missing and fails.
# nats-server and nodejs are for test_fleet (three NATS servers, and the npm
# `nats` package as an independent object store reader, which the test
# installs into BUILD/npm with npm, shipped with nodejs: nothing committed).
# prometheus is there for promtool (test_ctl checks vmtracectl metrics with
# it); on a host run by systemd its postinst also starts the server (port
# 9090): `systemctl disable --now prometheus` if that is not wanted.
# mmdebstrap and e2fsprogs build tests/systemd/vm.sh's Debian image (its
# kernel is installed into the image from the archive, not on this host).
set -eu
PKGS="make gcc pkg-config libsystemd-dev libnats-dev libssl-dev nats-server nodejs libtracefs-dev libtraceevent-dev libtracecmd-dev
libbpf-dev bpftool clang llvm libzstd-dev liblz4-dev zstd libyaml-dev check trace-cmd
qemu-system-x86 busybox-static cpio kmod systemd libc6-dev libclang-rt-14-dev mmdebstrap e2fsprogs
kernelshark xvfb imagemagick stress-ng libcap-dev libseccomp-dev python3
dpkg-dev debhelper lintian prometheus
libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients libvirt-dev libxml2-dev"
missing=""
for p in $PKGS; do
	s=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
	case "$s" in ii*) ;; *) missing="$missing $p" ;; esac
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing packages:$missing (run 'make deps' as root, or apt-get install them)" >&2
	exit 1
fi
echo "deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends $missing >/dev/null
