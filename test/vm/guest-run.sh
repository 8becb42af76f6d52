#!/bin/sh
# Runs at boot inside the test VM (cctest.service, a oneshot whose end powers
# the guest off). Marker files on the disk tell the boots apart:
#   boot 1: oom, reboot-1, then an orderly power-off (SuccessAction)
#   boot 2: reboot-2, crash-1, then an abrupt power-off (sysrq, no shutdown)
#   boot 3: crash-2, relay-service
# Results go to /dev/ttyS1 from the driver itself.
export XDG_RUNTIME_DIR=/run/user/0
export DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/0/bus
export HOME=/root
guest=/usr/local/bin/cctest-guest

if [ ! -e /var/lib/cctest-boot1 ]; then
	touch /var/lib/cctest-boot1
	$guest oom
	$guest reboot-1
	sync
elif [ ! -e /var/lib/cctest-boot2 ]; then
	touch /var/lib/cctest-boot2
	$guest reboot-2
	$guest crash-1
	# Power loss: no unit is stopped, so no supervisor records an end.
	sync
	echo o >/proc/sysrq-trigger
	sleep 30
else
	$guest crash-2
	$guest relay-service
fi
exit 0
