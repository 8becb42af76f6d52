#!/usr/bin/env bash
# Proves on a real systemd host (a disposable Debian guest under qemu/TCG)
# what the development host cannot show: a cgroup OOM kill classified
# workload_oom, jobs across an orderly power-off and across an abrupt one
# (sysrq) classified host_rebooted, and the .deb's relay system service
# (installed with dpkg, enabled, a device enrolled and a job run through
# it, restarted). Three boots of the same disk.
# See /work/shared/VM-TESTING.md for the measured recipe this follows.
#
#   test/vm/run.sh               build (or reuse) the image, run the boots
#   test/vm/run.sh --image-only  only prepare the cached guest tree
#
# Environment: VMTEST_CACHE (image cache), VMTEST_MIRROR (Debian mirror),
# VMTEST_KEEP=1 keeps the work directory (console logs, disk).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${VMTEST_CACHE:-/var/tmp/commandcore-vmtest}
root=$cache/root
# Bump when build_root changes, so a stale cached tree is rebuilt.
recipe=1
tag=vm-test
. "$here/lib.sh"

work=$(mktemp -d /var/tmp/commandcore-vmtest-run.XXXXXX)
trap cleanup EXIT

need_root() {
	if [ "$(id -u)" != 0 ]; then
		echo "vm-test: must run as root (debootstrap, chroot)" >&2
		exit 2
	fi
}

install_host_packages() {
	local missing=()
	command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
	command -v debootstrap >/dev/null || missing+=(debootstrap)
	command -v mkfs.ext4 >/dev/null || missing+=(e2fsprogs)
	if [ ${#missing[@]} -gt 0 ]; then
		log "installing ${missing[*]}"
		apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null ||
			{ apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }
	fi
}

# mirror picks the Debian mirror apt on this host already uses.
mirror() {
	if [ -n "${VMTEST_MIRROR:-}" ]; then
		echo "$VMTEST_MIRROR"
		return
	fi
	local m
	m=$({
		grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{for (i = 2; i <= NF; i++) print $i}'
		grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | sed -E 's/\[[^]]*\] *//' | awk '{print $2}'
	} | grep -v -- '-security' | grep -m1 '/debian/*$' || true)
	echo "${m:-http://deb.debian.org/debian}"
}

# build_root creates the cached guest tree with kernel and small initrd.
build_root() {
	local m tmp
	m=$(mirror)
	tmp=$cache/root.tmp
	rm -rf "$tmp"
	mkdir -p "$cache"
	log "debootstrap bookworm from $m (about 80 s)"
	debootstrap --variant=minbase \
		--include=systemd,systemd-sysv,dbus,dbus-user-session,libpam-systemd,linux-image-amd64,udev,procps \
		bookworm "$tmp" "$m" >"$cache/debootstrap.log" 2>&1 ||
		{ tail -20 "$cache/debootstrap.log" >&2; exit 1; }

	# A small initrd: the guest only needs virtio and ext4 to mount root.
	printf 'virtio_pci\nvirtio_blk\next4\n' >>"$tmp/etc/initramfs-tools/modules"
	sed -i 's/^MODULES=.*/MODULES=list/' "$tmp/etc/initramfs-tools/initramfs.conf"
	chroot "$tmp" update-initramfs -u -k all >"$cache/initramfs.log" 2>&1
	cp "$tmp"/boot/vmlinuz-* "$cache/vmlinuz"
	cp "$tmp"/boot/initrd.img-* "$cache/initrd.img"

	echo '/dev/vda / ext4 rw,relatime 0 1' >"$tmp/etc/fstab"
	chroot "$tmp" passwd -d root >/dev/null
	echo cctest >"$tmp/etc/hostname"
	# Linger starts root's user manager at boot, with no login.
	mkdir -p "$tmp/var/lib/systemd/linger"
	touch "$tmp/var/lib/systemd/linger/root"
	: >"$tmp/etc/machine-id"

	rm -rf "$tmp"/usr/share/{doc,man,info,locale}/* "$tmp"/var/cache/apt/archives/*.deb \
		"$tmp"/var/lib/apt/lists/* "$tmp"/boot/initrd.img-*
	local mods
	for mods in "$tmp"/lib/modules/*/kernel; do
		rm -rf "$mods"/drivers/{gpu,net,media,infiniband,staging,usb,scsi,bluetooth,isdn,iio,hid} "$mods"/sound
	done
	echo "$recipe" >"$tmp/etc/cctest-recipe"
	rm -rf "$root"
	mv "$tmp" "$root"
	log "guest tree cached in $root"
}

build_binaries() {
	log "building commandcore and the guest driver (static)"
	(cd "$repo" && CGO_ENABLED=0 go build -trimpath -o "$work/commandcore" ./cmd/commandcore)
	(cd "$repo" && CGO_ENABLED=0 go build -trimpath -o "$work/cctest-guest" ./internal/vmtest/guest)
	log "packaging the .deb (packaging/package.sh)"
	(cd "$repo" && BIN="$work/commandcore" DIST="$work/pkg" packaging/package.sh >"$work/package.log" 2>&1) ||
		{ tail -20 "$work/package.log" >&2; exit 1; }
}

# stage puts the binaries and the boot-time test unit into the tree and
# makes a fresh disk from it.
stage() {
	install -m 0755 "$work/commandcore" "$work/cctest-guest" "$root/usr/local/bin/"
	install -m 0755 "$here/guest-run.sh" "$root/usr/local/bin/cctest-run"
	# The guest installs the .deb itself (relay-service).
	rm -rf "$root/usr/local/share/cctest"
	install -D -m 0644 "$work"/pkg/commandcore_*.deb "$root/usr/local/share/cctest/commandcore.deb"
	install_test_unit "$root" "CommandCore VM test" 420
	mkfs.ext4 -q -F -d "$root" "$work/disk.img" 1G
}

# boot runs the disk once until the guest powers off.
boot() {
	local n=$1
	log "boot $n"
	boot_guest 480 "$work/console-$n.log" "$work/results-$n.txt"
	log "boot $n ended (qemu exit $qemu_rc)"
	tr -d '\r' <"$work/results-$n.txt" >>"$work/results.txt" || true
}

need_root
install_host_packages
if [ "$(cat "$root/etc/cctest-recipe" 2>/dev/null)" != "$recipe" ]; then
	build_root
else
	log "reusing guest tree $root"
fi
[ "${1:-}" = --image-only ] && exit 0

build_binaries
stage
: >"$work/results.txt"
boot 1
boot 2
boot 3

cat "$work/results.txt"
expected=(oom reboot-1 reboot-2 crash-1 crash-2 relay-service)
status=0
for name in "${expected[@]}"; do
	if ! grep -qx "PASS $name" "$work/results.txt"; then
		echo "vm-test: missing PASS $name" >&2
		status=1
	fi
done
if grep -q '^FAIL' "$work/results.txt"; then
	status=1
fi
if [ $status != 0 ]; then
	echo "--- console boot 1 (tail) ---" >&2
	tail -40 "$work/console-1.log" >&2 || true
	for n in 2 3; do
		echo "--- console boot $n (tail) ---" >&2
		tail -40 "$work/console-$n.log" >&2 || true
	done
fi
log "done (status $status)"
exit $status
