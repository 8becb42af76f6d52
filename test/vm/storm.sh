#!/usr/bin/env bash
# Benchmark on a cgroup v2 host with the cpu controller delegated to the
# user manager (the disposable Debian guest of run.sh): process.output p50
# idle and under an output storm, for a base build and this tree's, in one
# boot, alternating (internal/vmtest/guest/storm.go; BENCHMARKS.md "Jobs in
# one slice"). Prints the guest's HOST and RESULT lines.
#
#   test/vm/storm.sh [BASE]      BASE: the git revision to compare (main)
#
# Needs the guest tree run.sh caches (`test/vm/run.sh --image-only`); copies
# it, so the cache stays as it was. Environment: VMTEST_CACHE, VMTEST_KEEP=1.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
base=${1:-main}
cache=${VMTEST_CACHE:-/var/tmp/commandcore-vmtest}
tag=vm-storm
. "$here/lib.sh"

[ "$(id -u)" = 0 ] || { echo "vm-storm: must run as root" >&2; exit 2; }
[ -d "$cache/root" ] || { echo "vm-storm: no guest tree in $cache; run test/vm/run.sh --image-only" >&2; exit 2; }

work=$(mktemp -d /var/tmp/commandcore-vmstorm.XXXXXX)
trap cleanup EXIT

log "building $base and this tree (static)"
mkdir "$work/base-src"
git -C "$repo" archive "$base" | tar -x -C "$work/base-src"
(cd "$work/base-src" && CGO_ENABLED=0 go build -trimpath -o "$work/commandcore-base" ./cmd/commandcore)
(cd "$repo" && CGO_ENABLED=0 go build -trimpath -o "$work/commandcore-tree" ./cmd/commandcore)
(cd "$repo" && CGO_ENABLED=0 go build -trimpath -o "$work/cctest-guest" ./internal/vmtest/guest)

root=$work/root
cp -a "$cache/root" "$root"
install -m 0755 "$work/commandcore-base" "$work/commandcore-tree" "$work/cctest-guest" "$root/usr/local/bin/"
# The unit file an install writes, not enabled: the guest reads its Slice.
install -D -m 0644 "$repo/install/commandcore.service" "$root/root/.config/systemd/user/commandcore.service"
cat >"$root/usr/local/bin/cctest-run" <<-'EOF'
	#!/bin/sh
	export XDG_RUNTIME_DIR=/run/user/0
	export DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/0/bus
	export HOME=/root
	/usr/local/bin/cctest-guest storm base=/usr/local/bin/commandcore-base tree=/usr/local/bin/commandcore-tree
	exit 0
EOF
chmod 0755 "$root/usr/local/bin/cctest-run"
install_test_unit "$root" "CommandCore VM storm benchmark" 900
mkfs.ext4 -q -F -d "$root" "$work/disk.img" 2G
rm -rf "$root"

log "boot ($(nproc) host CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"
boot_guest 1000 "$work/console.log" "$work/results.txt"
rc=$qemu_rc
log "guest ended (qemu exit $rc, load $(cut -d' ' -f1-3 /proc/loadavg))"
tr -d '\r' <"$work/results.txt"
if ! grep -q '^PASS storm' "$work/results.txt"; then
	echo "--- console (tail) ---" >&2
	tail -40 "$work/console.log" >&2 || true
	exit 1
fi
