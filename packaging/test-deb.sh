#!/bin/sh
# Installs the built .deb, checks it, removes it and checks that nothing is
# left (`make package-test`). Run as root on a Debian machine without
# commandcore installed; a disposable one, as on CI.
#
#   packaging/test-deb.sh [dist/commandcore_VERSION_ARCH.deb]
set -eu
cd "$(dirname "$0")/.."

fail() { echo "test-deb: FAIL: $*" >&2; exit 1; }

if [ $# -gt 0 ]; then
	deb=$1
else
	set -- dist/commandcore_*.deb
	[ $# -eq 1 ] && [ -f "$1" ] || fail "want exactly one dist/commandcore_*.deb, found: $*"
	deb=$1
fi
[ "$(id -u)" -eq 0 ] || fail "must run as root"
command -v dpkg >/dev/null || fail "not a Debian machine (no dpkg)"
if dpkg-query -W -f '${Status}' commandcore 2>/dev/null | grep -q ' installed$'; then
	fail "commandcore is already installed; refusing to touch it"
fi

files="/usr/bin/commandcore
/usr/lib/systemd/user/commandcore.service
/usr/lib/systemd/system/commandcore-relay.service
/etc/commandcore/relay.env
/usr/share/doc/commandcore/README.md
/usr/share/doc/commandcore/docs/architecture.md
/usr/share/doc/commandcore/docs/deploy.md
/usr/share/doc/commandcore/docs/limits.md
/usr/share/doc/commandcore/docs/states.md
/usr/share/doc/commandcore/docs/tools.md
/usr/share/doc/commandcore/user-manager-recovery.conf.example"
for f in $files; do
	[ ! -e "$f" ] || fail "$f exists before the install"
done

# Whatever happens below, leave the machine as it was.
installed=
cleanup() { [ -z "$installed" ] || dpkg -P commandcore >/dev/null 2>&1 || true; }
trap cleanup EXIT

# The .rpm beside the .deb carries the relay's files as the .deb does (when
# rpm is at hand to read it): mode, owner, the configuration flags and path.
rpms=$(find "$(dirname "$deb")" -maxdepth 1 -name 'commandcore-*.rpm')
if command -v rpm >/dev/null && [ -n "$rpms" ]; then
	[ "$(echo "$rpms" | wc -l)" -eq 1 ] || fail "want one commandcore-*.rpm beside $deb, found: $rpms"
	listing=$(rpm -qp --queryformat '[%{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME} %{FILEFLAGS:fflags} %{FILENAMES}\n]' "$rpms") ||
		fail "rpm -qp $rpms"
	for want in \
		'-rw-r--r-- root:root  /usr/lib/systemd/system/commandcore-relay.service' \
		'-rw------- root:root cn /etc/commandcore/relay.env' \
		'drwxr-xr-x root:root  /etc/commandcore'; do
		echo "$listing" | grep -qxF -- "$want" || fail "$rpms lacks: $want"
	done
	echo "test-deb: $rpms: the relay's unit and relay.env: ok"
fi

echo "test-deb: dpkg -i $deb"
dpkg -i "$deb"
installed=1

for f in $files; do
	[ -f "$f" ] || fail "$f missing after the install"
done
[ -x /usr/bin/commandcore ] || fail "/usr/bin/commandcore is not executable"
command -v commandcore | grep -qx /usr/bin/commandcore || fail "commandcore is not on PATH as /usr/bin/commandcore"
out=$(commandcore version) || fail "commandcore version exited $?"
echo "test-deb: commandcore version: $out"
[ -n "$out" ] || fail "commandcore version printed nothing"
unit=/usr/lib/systemd/user/commandcore.service
grep -qx 'ExecStart=/usr/bin/commandcore agent --installed' "$unit" || fail "$unit does not run /usr/bin/commandcore agent --installed"
grep -qx 'Type=notify' "$unit" || fail "$unit is not Type=notify"
[ "$(stat -c %a "$unit")" = 644 ] || fail "$unit mode $(stat -c %a "$unit"), want 644"
# Nothing enables the user unit for anyone.
for d in /etc/systemd/user /usr/lib/systemd/user; do
	[ ! -e "$d/default.target.wants/commandcore.service" ] || fail "the package enabled the unit globally ($d)"
done
[ ! -e /etc/systemd/system/user@.service.d/commandcore-recovery.conf ] || fail "the recovery drop-in was installed"
# The relay's system unit, installed and not enabled.
relay=/usr/lib/systemd/system/commandcore-relay.service
grep -qx 'ExecStart=/usr/bin/commandcore relay serve --state-dir /var/lib/commandcore-relay $COMMANDCORE_RELAY_ARGS' "$relay" ||
	fail "$relay does not run /usr/bin/commandcore relay serve"
grep -qx 'EnvironmentFile=/etc/commandcore/relay.env' "$relay" || fail "$relay does not read /etc/commandcore/relay.env"
grep -qx 'DynamicUser=yes' "$relay" || fail "$relay has no DynamicUser=yes"
[ "$(stat -c '%a %U:%G' "$relay")" = '644 root:root' ] || fail "$relay is $(stat -c '%a %U:%G' "$relay"), want 644 root:root"
[ -z "$(find /etc/systemd/system -name commandcore-relay.service)" ] || fail "the package enabled the relay"
env=/etc/commandcore/relay.env
[ "$(stat -c '%a %U:%G' "$env")" = '600 root:root' ] || fail "$env is $(stat -c '%a %U:%G' "$env"), want 600 root:root"
grep -qx 'COMMANDCORE_RELAY_ARGS="--listen 127.0.0.1:8440"' "$env" || fail "$env does not default to --listen 127.0.0.1:8440"
dpkg-query -W -f '${Conffiles}' commandcore | grep -q "^ $env " || fail "$env is not a conffile"
dpkg -V commandcore || fail "dpkg -V reports modified files"
# With a user manager's runtime directory at hand, let systemd parse the unit.
if [ -n "${XDG_RUNTIME_DIR:-}" ] && command -v systemd-analyze >/dev/null; then
	systemd-analyze --user verify "$unit" || fail "systemd-analyze --user verify $unit"
	echo "test-deb: systemd-analyze --user verify: ok"
fi
if command -v systemd-analyze >/dev/null; then
	systemd-analyze security --offline=yes "$relay" | tail -1
fi

echo "test-deb: dpkg -P commandcore"
dpkg -P commandcore
installed=
dpkg-query -W -f '${Status}' commandcore 2>/dev/null | grep -q ' installed$' && fail "still installed after dpkg -P"
for f in $files /usr/share/doc/commandcore /etc/commandcore; do
	[ ! -e "$f" ] || fail "$f left after the removal"
done
echo "test-deb: ok"
