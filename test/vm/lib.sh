# Shared by run.sh and storm.sh (sourced): logging, the clean-up trap and one
# boot of the guest. The caller sets tag (the log prefix), cache and work.

start=$(date +%s)
qemu_pid=

log() { printf '[%s %4ds] %s\n' "$tag" "$(($(date +%s) - start))" "$*" >&2; }

# cleanup stops the qemu this script started (by its PID, nothing else) and
# removes the work directory unless VMTEST_KEEP=1.
cleanup() {
	if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
		kill "$qemu_pid" 2>/dev/null || true
		wait "$qemu_pid" 2>/dev/null || true
	fi
	if [ "${VMTEST_KEEP:-0}" = 1 ]; then
		log "work directory kept: $work"
	else
		rm -rf "$work"
	fi
}

# boot_guest LIMIT CONSOLE RESULTS boots $work/disk.img until the guest
# powers off or LIMIT seconds pass, with the guest's console in CONSOLE and
# its second serial port (the test's results) in RESULTS; qemu's exit
# status is left in qemu_rc.
boot_guest() {
	timeout "$1" qemu-system-x86_64 -accel tcg,thread=multi -cpu max -m 1024 -smp 2 \
		-display none -monitor none -no-reboot -nic none \
		-kernel "$cache/vmlinuz" -initrd "$cache/initrd.img" \
		-append 'root=/dev/vda rw console=ttyS0 panic=1 quiet' \
		-drive file="$work/disk.img",format=raw,if=virtio \
		-serial file:"$2" \
		-chardev file,id=res,path="$3" -device isa-serial,chardev=res &
	qemu_pid=$!
	qemu_rc=0
	wait "$qemu_pid" || qemu_rc=$?
	qemu_pid=
}

# install_test_unit ROOT DESCRIPTION LIMIT has the guest in ROOT run
# /usr/local/bin/cctest-run once at boot (at most LIMIT seconds) and power
# off after it, and clears the test's state from earlier runs.
install_test_unit() {
	# Not After=multi-user.target: the unit is wanted by it (ordering cycle).
	cat >"$1/etc/systemd/system/cctest.service" <<-EOF
		[Unit]
		Description=$2
		Wants=user@0.service
		After=user@0.service systemd-user-sessions.service
		SuccessAction=poweroff
		FailureAction=poweroff

		[Service]
		Type=oneshot
		TimeoutStartSec=$3
		ExecStart=/usr/local/bin/cctest-run
		StandardOutput=journal+console
		StandardError=journal+console

		[Install]
		WantedBy=multi-user.target
	EOF
	mkdir -p "$1/etc/systemd/system/multi-user.target.wants"
	ln -sf /etc/systemd/system/cctest.service "$1/etc/systemd/system/multi-user.target.wants/cctest.service"
	# A fresh guest state each run: the test owns /var/lib/cctest*.
	rm -rf "$1"/var/lib/cctest "$1"/var/lib/cctest-*
}
