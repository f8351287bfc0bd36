#!/bin/bash
# SPDX-License-Identifier: MIT
#
# vm.sh: a Debian 12 machine with systemd as PID 1, under QEMU (TCG), for
# testing the packages under a real systemd.
#
#   vm.sh up DIR [--deb FILE]... [--smp N] [--mem SIZE]
#       Boot a machine whose folder is DIR (QEMU's pid, the channel FIFOs,
#       its copy-on-write overlay, console.log), install the .debs with apt
#       inside it, and return once `systemctl is-system-running` says
#       running or degraded. Prints nothing on stdout; exit 0 when up.
#     up ... --image-deps FILE
#       The dependencies of .deb FILE go into the image too (FILE is not
#       installed): suites that install different packages share one image.
#     up ... --image-packages LIST
#       Debian packages (comma-separated names) that go into the image from
#       the archive, installed (their maintainer scripts run, their units
#       enabled as shipped) before the .debs; part of the image's key.
#     up ... --trace-ports PORTDIR [--reboot]
#       Also vmtrace-agent's virtio-serial ports, agent-ctl-path and
#       trace-path-cpu0..N-1 (N: --smp), their host ends unix sockets
#       PORTDIR/NAME QEMU listens on (a vmtraced guest with that path and
#       transport: socket), as tests/guest/boot.sh -t socket makes them.
#       --reboot: a reboot in the machine restarts it (by default QEMU
#       ends, as it does on a panic); `run` answers again once it is up.
#   vm.sh run DIR [-t SECS] -- CMD [ARG]...
#       Run CMD as root in the machine (stdin /dev/null, cwd /); its
#       stdout and stderr come back on ours, its exit status is ours
#       (255: the channel failed). Like ssh, it returns when CMD has exited
#       and its stdout/stderr are closed (a background child holding them
#       keeps it waiting: redirect its output). -t: give up after SECS
#       (default 1800, stretched by VMT_TEST_TIMEOUT_SCALE). A machine that
#       stops answering is lost: DIR/lost says why, and every later run
#       fails at once (255) with that reason.
#   vm.sh cp DIR HOSTFILE GUESTPATH
#       Copy a file into the machine (mode 0644, owned by root).
#   vm.sh down DIR
#       Power the machine off; kill QEMU if it has not ended in 60 s.
#   vm.sh diag DIR
#       What a machine that stopped answering is doing, from outside:
#       QEMU's state and each vCPU's instruction pointer (its kernel symbol:
#       the kernel boots without KASLR; the image's folder keeps the
#       kernel's own text symbols, read once from /proc/kallsyms), then
#       SysRq w and l by the emulated keyboard (the kernel's blocked tasks
#       and each CPU's backtrace) and the console's last lines.
#
# The image (build/systemd-images/KEY/, or $VM_CACHE) is built once per
# key: this script, vmexec.c, the Debian release, the base package list,
# --image-packages and the dependencies of the given .debs (the script: the functions that make
# the image). Those dependencies are installed into
# the image when it is built, from the same Debian archive (apt-get satisfy
# in mmdebstrap's chroot), so that the machine needs no network: the
# machine has none (-nic none), and `apt-get install ./x.deb` inside it
# finds everything but the .debs already there. Their maintainer scripts
# run in the machine, under systemd.
# Commands go over a virtio-serial port to vmexec.service in the machine
# (tests/systemd/vmexec.c has the protocol). Waits only catch hangs and
# are stretched by VMT_TEST_TIMEOUT_SCALE. VM_KEEP=1: a failed `up` leaves
# the machine running, to look into.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
RELEASE=bookworm
CACHE=${VM_CACHE:-$ROOT/build/systemd-images}
IMAGE_PKGS=""	# --image-packages
# whole seconds for the shell; vmexec stretches its own waits
SCALE=$(awk -v s="${VMT_TEST_TIMEOUT_SCALE:-1}" 'BEGIN { print (s > 1) ? int(s + 0.999) : 1 }')
# What a test machine needs and no more: no login, no getty, no network,
# no timers, none of the modules and mounts a test does not use (each costs
# seconds under TCG). tracefs stays (sys-kernel-tracing.mount).
BASE=systemd,systemd-sysv,dbus,udev,kmod,procps,linux-image-cloud-amd64,lz4,systemd-timesyncd
MASK="apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer
 e2scrub_reap.service getty@tty1.service serial-getty@ttyS0.service
 systemd-networkd-wait-online.service systemd-logind.service systemd-user-sessions.service
 systemd-update-utmp.service systemd-update-utmp-runlevel.service systemd-random-seed.service
 modprobe@dm_mod.service modprobe@fuse.service modprobe@loop.service modprobe@efi_pstore.service
 modprobe@drm.service modprobe@configfs.service kmod-static-nodes.service systemd-pstore.service
 sys-fs-fuse-connections.mount sys-kernel-config.mount sys-kernel-debug.mount dev-hugepages.mount
 dev-mqueue.mount"
# loglevel=4: the kernel's errors on the console (a hung task, an RCU
# stall); sysrq_always_enabled and nokaslr for `diag`.
CMDLINE="root=/dev/vda rw console=ttyS0 quiet loglevel=4 panic=-1 fsck.mode=skip mitigations=off
 systemd.show_status=0 net.ifnames=0 sysrq_always_enabled nokaslr"

usage() { sed -n '6,44p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "vm.sh: $*" >&2; exit 1; }
log() { echo "vm.sh: $*" >&2; }

# The channel program, static: the same binary serves in the machine.
vmexec_build() {
	local key bin
	key=$(sha256sum "$HERE/vmexec.c" | cut -c1-16)
	bin=$CACHE/vmexec-$key
	if [ ! -x "$bin" ]; then
		mkdir -p "$CACHE"
		gcc -std=gnu11 -O2 -Wall -Wextra -Werror -static -D_GNU_SOURCE -o "$bin.tmp" "$HERE/vmexec.c" >&2
		mv "$bin.tmp" "$bin"
	fi
	echo "$bin"
}

# Depends and Pre-Depends of the .debs, less those among the .debs, one
# clause a line, sorted: part of the image's key.
deb_deps() {
	local d names=" "
	for d in "$@"; do names="$names$(dpkg-deb -f "$d" Package) "; done
	for d in "$@"; do dpkg-deb -f "$d" Pre-Depends Depends | sed 's/^[A-Za-z-]*: //'; done |
		tr ',' '\n' | sed 's/^ *//; s/ *$//' | grep -v '^$' |
		while read -r clause; do
			n=${clause%% *}
			case "$names" in *" $n "*) ;; *) echo "$clause" ;; esac
		done | sort -u
}

# Builds the image for these .debs (and IMAGE_PKGS) if it is not cached;
# prints its folder.
image_build() {
	local deps key out tmp vmexec t0 kv
	deps=$( { deb_deps "$@"; [ -z "$IMAGE_PKGS" ] || echo "$IMAGE_PKGS" | tr ',' '\n'; } | sort -u)
	vmexec=$(vmexec_build)
	# what goes into the image: the code that makes it, not the whole script
	key=$( { declare -f image_build image_setup initrd_build; cat "$HERE/vmexec.c"
		echo "$RELEASE $BASE $MASK"; echo "$deps"; } | sha256sum | cut -c1-16)
	out=$CACHE/$RELEASE-$key
	mkdir -p "$CACHE"
	exec 8>"$CACHE/.lock"
	flock 8	# two suites asking for the same image build it once
	if [ ! -s "$out/rootfs.img" ]; then
		for t in mmdebstrap mkfs.ext4 cpio busybox; do command -v $t >/dev/null || die "no $t (make deps)"; done
		t0=$(date +%s)
		tmp=$out.tmp
		rm -rf "$tmp" && mkdir -p "$tmp" "$CACHE/debs"
		log "building the image $out (log in $tmp/build.log)"
		# initramfs: the modules to mount the root, not all of them
		if ! mmdebstrap --variant=minbase --include="$BASE" \
			--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
			--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
			--setup-hook='mkdir -p "$1/etc/initramfs-tools/conf.d"' \
			--setup-hook='printf "MODULES=list\nCOMPRESS=lz4\n" >"$1/etc/initramfs-tools/conf.d/vm"' \
			--setup-hook='printf "virtio_pci\nvirtio_blk\next4\n" >"$1/etc/initramfs-tools/modules"' \
			--skip=download/empty --skip=essential/unlink \
			--setup-hook="mkdir -p \"\$1/var/cache/apt/archives\"" \
			--setup-hook="sync-in '$CACHE/debs' /var/cache/apt/archives/" \
			${deps:+--customize-hook="chroot \"\$1\" apt-get satisfy -y -q --no-install-recommends '$(echo "$deps" | paste -sd, | sed 's/,/, /g')'"} \
			--customize-hook="sync-out /var/cache/apt/archives '$CACHE/debs'" \
			--customize-hook='rm -f "$1"/var/cache/apt/archives/*.deb' \
			"$RELEASE" "$tmp/root" >"$tmp/build.log" 2>&1; then
			tail -20 "$tmp/build.log" >&2
			die "mmdebstrap failed (see $tmp/build.log)"
		fi
		image_setup "$tmp/root" "$vmexec"
		kv=$(cd "$tmp/root/boot" && ls vmlinuz-* | sed 's/^vmlinuz-//' | sort -V | tail -1)
		cp "$tmp/root/boot/vmlinuz-$kv" "$tmp/vmlinuz"
		initrd_build "$tmp/root" "$kv" "$tmp/initrd.img"
		# room for the packages installed at `up`, in a sparse file
		mkfs.ext4 -q -L vmroot -d "$tmp/root" "$tmp/rootfs.img" \
			$(( $(du -sm "$tmp/root" | cut -f1) + 1024 ))M >>"$tmp/build.log" 2>&1 ||
			die "mkfs.ext4 failed (see $tmp/build.log)"
		rm -rf "$tmp/root"
		rm -rf "$out" && mv "$tmp" "$out"
		log "image built in $(( $(date +%s) - t0 )) s"
	fi
	exec 8>&-
	echo "$out"
}

# Debian's initramfs takes ~10 s under TCG (udev, scripts) to do what
# matters here: load virtio_pci and virtio_blk, mount /dev/vda (ext4 is
# built in). This one does that with busybox, in well under a second.
initrd_build() {	# root kver out
	local r=$1 t f
	t=$(mktemp -d "${TMPDIR:-/tmp}/vm-initrd.XXXXXX")
	mkdir -p "$t/bin" "$t/dev" "$t/proc" "$t/sys" "$t/root" "$t/m"
	cp /bin/busybox "$t/bin/busybox"
	for f in $(for m in virtio_pci virtio_blk; do modprobe -d "$r" -S "$2" --show-depends $m; done |
		awk '$1 == "insmod" && !seen[$2]++ { print $2 }'); do
		[ -e "$f" ] || f=$r$f
		cp "$f" "$t/m/" && echo "${f##*/}" >>"$t/m/list"
	done
	cat >"$t/init" <<-'EOF'
	#!/bin/busybox sh
	/bin/busybox --install -s /bin
	mount -t proc proc /proc && mount -t sysfs sysfs /sys && mount -t devtmpfs devtmpfs /dev
	for m in $(cat /m/list); do insmod /m/$m; done
	i=0
	while [ ! -b /dev/vda ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
	mount -t ext4 -o rw /dev/vda /root || { echo "initrd: cannot mount /dev/vda"; sleep 5; poweroff -f; }
	umount /proc /sys /dev
	exec switch_root /root /sbin/init
	EOF
	chmod 755 "$t/init"
	mknod "$t/dev/console" c 5 1
	(cd "$t" && find . | cpio -o -H newc --quiet | gzip -1) >"$3"
	rm -rf "$t"
}

# What makes the root a quick test machine, written from the host.
image_setup() {	# root vmexec
	local r=$1 u
	install -m 755 "$2" "$r/usr/local/sbin/vmexec"
	cat >"$r/etc/udev/rules.d/60-vmexec.rules" <<-'EOF'
	SUBSYSTEM=="virtio-ports", ATTR{name}=="vmsh", TAG+="systemd", ENV{SYSTEMD_WANTS}+="vmexec.service"
	EOF
	# early, so that it answers while the boot goes on (is-system-running --wait)
	cat >"$r/etc/systemd/system/vmexec.service" <<-'EOF'
	[Unit]
	Description=vm.sh command server (tests/systemd/vmexec.c)
	DefaultDependencies=no
	BindsTo=dev-virtio\x2dports-vmsh.device
	After=dev-virtio\x2dports-vmsh.device
	Conflicts=shutdown.target
	Before=shutdown.target
	[Service]
	ExecStart=/usr/local/sbin/vmexec serve /dev/virtio-ports/vmsh
	Environment=HOME=/root LANG=C.UTF-8
	Restart=always
	RestartSec=1
	EOF
	for u in $MASK; do ln -sf /dev/null "$r/etc/systemd/system/$u"; done
	# disabled, not masked: a test compares its unit with ours (analyze security)
	systemctl --root="$r" --quiet disable systemd-timesyncd.service
	mkdir -p "$r/etc/systemd/journald.conf.d"
	printf '[Journal]\nStorage=volatile\n' >"$r/etc/systemd/journald.conf.d/vm.conf"
	echo vm >"$r/etc/hostname"
	# a machine-id of its own: an empty one would make every boot a first boot
	od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$r/etc/machine-id"
	echo >>"$r/etc/machine-id"
	echo '/dev/vda / ext4 rw 0 0' >"$r/etc/fstab"
	ln -sf /lib/systemd/system/multi-user.target "$r/etc/systemd/system/default.target"
}

alive() { [ -s "$1/qemu.pid" ] && grep -qs '^qemu-system' "/proc/$(cat "$1/qemu.pid")/comm"; }

# is-system-running --wait, then the answer checked
wait_running() {	# dir secs
	local state
	state=$("$VMEXEC" run -w "$2" -t "$2" "$1" -- systemctl is-system-running --wait 2>&1) || true
	case $state in
	running) ;;
	degraded) log "degraded: $("$VMEXEC" run "$1" -- systemctl --failed --plain --no-legend | tr '\n' ' ')" ;;
	*) return 1 ;;
	esac
}

cmd_up() {
	local dir="" smp=2 mem=1G debs=() more=() img d tports="" noreboot=-no-reboot ports=() i n
	while [ $# -gt 0 ]; do
		case $1 in
		--deb) [ -f "${2:-}" ] || die "--deb: no file ${2:-}"; debs+=("$(realpath "$2")"); shift 2 ;;
		--image-deps) [ -f "${2:-}" ] || die "--image-deps: no file ${2:-}"
			more+=("$(realpath "$2")"); shift 2 ;;
		--image-packages)
			echo "${2:-}" | grep -Eqx '[a-z0-9][a-z0-9+.-]+(,[a-z0-9][a-z0-9+.-]+)*' ||
				die "--image-packages: not a comma-separated list of package names: ${2:-}"
			IMAGE_PKGS=$(echo "$IMAGE_PKGS,$2" | tr ',' '\n' | grep -v '^$' | sort -u | paste -sd,)
			shift 2 ;;
		--smp) smp=${2:?}; shift 2 ;;
		--mem) mem=${2:?}; shift 2 ;;
		--trace-ports) mkdir -p "${2:?}"; tports=$(cd "$2" && pwd); shift 2 ;;
		--reboot) noreboot=""; shift ;;
		-*) die "up: unknown option $1" ;;
		*) [ -z "$dir" ] || die "up: one DIR"; dir=$1; shift ;;
		esac
	done
	[ -n "$dir" ] || { usage >&2; exit 2; }
	command -v qemu-system-x86_64 >/dev/null || die "no qemu-system-x86_64 (make deps)"
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	alive "$dir" && die "$dir: a machine is running there already"
	img=$(image_build ${debs[@]+"${debs[@]}"} ${more[@]+"${more[@]}"})
	VMEXEC=$(vmexec_build)
	rm -rf "$dir/chan.in" "$dir/chan.out" "$dir/monitor" "$dir/qemu.pid" "$dir/lost" "$dir/lost.told"
	mkfifo "$dir/chan.in" "$dir/chan.out"
	: >"$dir/console.log"
	if [ -n "$tports" ]; then
		i=0
		for n in agent-ctl-path $(seq -f 'trace-path-cpu%g' 0 $((smp - 1))); do
			rm -f "$tports/$n"
			ports+=(-chardev "socket,id=tp$i,path=$tports/$n,server=on,wait=off"
				-device "virtserialport,chardev=tp$i,name=$n")
			i=$((i + 1))
		done
	fi
	# snapshot=on: QEMU's overlay goes to TMPDIR, in DIR; the image stays clean
	TMPDIR=$dir setsid qemu-system-x86_64 -name vmsh,debug-threads=on -machine pc -accel tcg \
		-smp "$smp" -m "$mem" -nodefaults -display none $noreboot -nic none \
		-serial "file:$dir/console.log" -monitor "unix:$dir/monitor,server=on,wait=off" \
		-kernel "$img/vmlinuz" -initrd "$img/initrd.img" -append "$(echo $CMDLINE)" \
		-drive "file=$img/rootfs.img,format=raw,if=virtio,snapshot=on,cache=unsafe" \
		-device virtio-serial-pci -chardev "pipe,id=vmsh,path=$dir/chan" \
		-device virtserialport,chardev=vmsh,name=vmsh ${ports[@]+"${ports[@]}"} \
		</dev/null >"$dir/qemu.log" 2>&1 &
	echo $! >"$dir/qemu.pid"
	if ! up_finish "$dir" "$img" ${debs[@]+"${debs[@]}"}; then
		tail -15 "$dir/console.log" | sed 's/^/vm.sh: console: /' >&2
		[ "${VM_KEEP:-0}" = 1 ] || cmd_down "$dir" 2>/dev/null
		exit 1
	fi
}

up_finish() {	# dir img deb...
	local dir=$1 img=$2 d paths=()
	shift 2
	wait_running "$dir" 300 || { log "the machine did not come up"; return 1; }
	# the kernel's text symbols, for diag (nokaslr: the same every boot;
	# Debian's System.map is a stub)
	if [ ! -s "$img/kallsyms" ] &&
		"$VMEXEC" run "$dir" -- sh -c 'grep -v "\[" /proc/kallsyms | grep " [tT] " | sort' >"$img/kallsyms.$$" 2>/dev/null; then
		mv "$img/kallsyms.$$" "$img/kallsyms"
	fi
	rm -f "$img/kallsyms.$$"
	[ $# -gt 0 ] || return 0
	"$VMEXEC" run "$dir" -- mkdir -p /var/tmp/vm-debs >&2 || return 1
	for d in "$@"; do
		"$VMEXEC" put "$dir" "/var/tmp/vm-debs/${d##*/}" <"$d" || return 1
		paths+=("/var/tmp/vm-debs/${d##*/}")
	done
	"$VMEXEC" run "$dir" -- env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		--no-install-recommends "${paths[@]}" >&2 || { log "apt-get install failed"; return 1; }
	wait_running "$dir" 120 || { log "not running after the install"; return 1; }
}

cmd_down() {
	local dir=${1:?usage: vm.sh down DIR} pid i
	alive "$dir" || { rm -f "$dir/qemu.pid"; return 0; }
	pid=$(cat "$dir/qemu.pid")
	"$(vmexec_build)" run -w 10 -t 30 "$dir" -- systemctl poweroff --no-block >/dev/null 2>&1 || kill "$pid" 2>/dev/null || true
	for ((i = 0; i < 600 * SCALE; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && { log "QEMU did not end: killed"; kill -9 "$pid"; }
	rm -f "$dir/qemu.pid" "$dir/chan.in" "$dir/chan.out" "$dir/chan.lock" "$dir/monitor"
}

# HMP commands to QEMU's monitor, their answers on stdout
monitor() {	# dir cmd...
	python3 - "$@" <<-'EOF'
	import socket, sys, time
	s = socket.socket(socket.AF_UNIX)
	s.settimeout(10)
	s.connect(sys.argv[1] + "/monitor")
	def answer():
	    b = b""
	    while not b.endswith(b"(qemu) "):
	        d = s.recv(65536)
	        if not d:
	            break
	        b += d
	    return b.decode(errors="replace")
	answer()	# the banner
	for c in sys.argv[2:]:
	    s.sendall(c.encode() + b"\n")
	    # the monitor echoes the command (with its line editor's escapes) first
	    a = answer().replace("\r", "").rsplit("(qemu) ", 1)[0]
	    print(a.split("\n", 1)[1] if "\n" in a else "", end="")
	EOF
}

cmd_diag() {
	local dir=${1:?usage: vm.sh diag DIR} img map n0 n i
	alive "$dir" || { echo "QEMU is not running"; tail -40 "$dir/console.log" 2>/dev/null; return 0; }
	monitor "$dir" "info status" 2>&1
	# the image this machine booted, for its kernel's symbols
	img=$(tr '\0' '\n' <"/proc/$(cat "$dir/qemu.pid")/cmdline" | sed -n 's|/vmlinuz$||p' | head -1)
	map=$img/kallsyms
	monitor "$dir" "info registers -a" 2>&1 | awk -v map="$map" '
		BEGIN { if ((getline l < map) > 0) { do { split(l, f, " "); a[++n] = f[1]; s[n] = f[3] } while ((getline l < map) > 0) } }
		function sym(x,   lo, hi, mid) {
			if (!n) return ""
			x = sprintf("%016s", tolower(x)); gsub(/ /, "0", x)
			lo = 1; hi = n
			while (lo < hi) { mid = int((lo + hi + 1) / 2); if (a[mid] <= x) lo = mid; else hi = mid - 1 }
			return a[lo] <= x ? " (" s[lo] ")" : ""
		}
		/^CPU#/ { cpu = $0 }
		/^RIP=/ { rip = substr($1, 5); print "vCPU " cpu ": RIP " rip sym(rip) " " $0 }'
	n0=$(wc -c <"$dir/console.log")
	monitor "$dir" "sendkey alt-sysrq-w" "sendkey alt-sysrq-l" >/dev/null 2>&1
	# until the console has been quiet for a second (10 s at most)
	for ((i = 0; i < 20; i++)); do
		n=$(wc -c <"$dir/console.log")
		sleep 0.5
		[ "$i" -gt 2 ] && [ "$(wc -c <"$dir/console.log")" = "$n" ] && break
	done
	[ "$(wc -c <"$dir/console.log")" = "$n0" ] && echo "SysRq: the kernel printed nothing (it takes no interrupts)"
	echo "the console's last lines:"
	tail -c +$((n0 > 20000 ? n0 - 20000 : 1)) "$dir/console.log" | tail -120
}

case ${1:-} in
up) shift; cmd_up "$@" ;;
diag) shift; cmd_diag "$@" ;;
run)
	dir=${2:-} opts=()
	shift $(($# < 2 ? $# : 2))
	[ "${1:-}" = -t ] && [ $# -ge 2 ] && { opts=(-t "$2"); shift 2; }
	[ -n "$dir" ] && [ "${1:-}" = -- ] && [ $# -ge 2 ] || die "usage: vm.sh run DIR [-t SECS] -- CMD [ARG]..."
	exec "$(vmexec_build)" run ${opts[@]+"${opts[@]}"} "$dir" -- "${@:2}" ;;
cp)
	[ $# = 4 ] || die "usage: vm.sh cp DIR HOSTFILE GUESTPATH"
	exec "$(vmexec_build)" put "$2" "$4" <"$3" ;;
down) shift; cmd_down "$@" ;;
-h|--help|help) usage ;;
*) usage >&2; exit 2 ;;
esac
