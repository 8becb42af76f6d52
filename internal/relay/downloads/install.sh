#!/bin/sh
# Installs the CommandCore agent for the user who runs it, without root,
# from the relay that served this script:
#
#   curl --proto '=https' -fsSL https://relay.example/install.sh | COMMANDCORE_ENROLL_CODE=CODE sh
#
# COMMANDCORE_ENROLL_CODE is the one-time enrollment code (relay
# enroll-code, or the panel's Enrollment page), not used when this device
# has its identity already. It goes in the environment, never on a command
# line: other local users can read every process's command line (ps,
# /proc/PID/cmdline), while its environment only its own user and root can.
# Flags follow -s --:
#
#   --code CODE     the code as an argument, for older install lines; it
#                   shows in the process list while this runs
#   --name NAME     the device name to propose (default: the host name)
#   --service NAME  the agent's user unit (default commandcore); a name of
#                   its own keeps its own state and identity
#   --prefix DIR    where the binary goes (default ~/.local/lib/commandcore,
#                   linked from ~/.local/bin/commandcore); jobs see this
#                   directory read-only
#   --uninstall     stop and remove the service and the binary; the
#                   identity stays, and --purge removes it too
#
# It downloads the binary for this machine from the relay, checks it
# against the relay's SHA256SUMS, enrolls (unless this device has its
# identity), puts the binary in place, installs and starts the user service
# and shows `commandcore status`. By default the binary has a directory of
# its own, ~/.local/lib/commandcore, which the service runs it from and
# every job sees read-only, and ~/.local/bin/commandcore is a link to it
# that runs it by name; ~/.local/bin stays writable to jobs. Running it
# again upgrades in place and keeps the identity; an install of the
# binary in ~/.local/bin itself moves to that layout once the service runs
# on the new binary. Until the service is installed, a failure stops it
# with one line and leaves nothing behind. From an https relay it fetches
# over https alone, following no redirect to http; a plain http relay it
# accepts only on loopback.
set -u

relay='@RELAY_URL@'

# The code stays with this shell: no command it runs but enroll gets it.
code=${COMMANDCORE_ENROLL_CODE:-}
unset COMMANDCORE_ENROLL_CODE
name=
service=
prefix=
uninstall=
purge=
tmp=
staged=
previous=
newlink=
made=

die() {
	printf 'commandcore install: %s\n' "$*" >&2
	exit 1
}

cleanup() {
	[ -z "$staged" ] || rm -f "$staged"
	[ -z "$previous" ] || rm -f "$previous"
	[ -z "$newlink" ] || rm -f "$newlink"
	[ -z "$tmp" ] || rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM

need() {
	[ $# -ge 2 ] || die "$1 needs a value"
}

while [ $# -gt 0 ]; do
	case $1 in
	--code) need "$@"; code=$2; shift 2 ;;
	--code=*) code=${1#*=}; shift ;;
	--name) need "$@"; name=$2; shift 2 ;;
	--name=*) name=${1#*=}; shift ;;
	--service) need "$@"; service=$2; shift 2 ;;
	--service=*) service=${1#*=}; shift ;;
	--prefix) need "$@"; prefix=$2; shift 2 ;;
	--prefix=*) prefix=${1#*=}; shift ;;
	--uninstall) uninstall=1; shift ;;
	--purge) purge=1; shift ;;
	*) die "unknown argument $1 (want --code, --name, --service, --prefix, --uninstall, --purge)" ;;
	esac
done

# By default the binary is $HOME/.local/lib/commandcore/commandcore, in a
# directory of its own since every job sees the binary's directory
# read-only, and $link, in the directory people have on PATH, is a link to
# it. An older install put the binary in $linkdir itself: $old is that one.
link=
linkdir=
old=
if [ -z "$prefix" ]; then
	[ -n "${HOME:-}" ] || die "HOME is not set; give --prefix DIR"
	prefix=$HOME/.local/lib/commandcore
	linkdir=$HOME/.local/bin
	link=$linkdir/commandcore
	[ -L "$link" ] || [ ! -f "$link" ] || old=$link
fi
bin=$prefix/commandcore

# cc runs a commandcore command for the chosen service.
cc() {
	if [ -n "$service" ]; then
		"$@" --service "$service"
	else
		"$@"
	fi
}

# firstline is the first line of $1 without commandcore's prefix.
firstline() {
	line=${1%%
*}
	printf '%s' "${line#commandcore: }"
}

if [ -n "$uninstall" ]; then
	if [ ! -x "$bin" ] && [ -n "$old" ] && [ -x "$old" ]; then
		# An install of the older layout: the binary in $linkdir.
		bin=$old
		prefix=$linkdir
		link=
	fi
	[ -x "$bin" ] || die "there is no commandcore in $prefix${linkdir:+ or $linkdir} to uninstall (give --prefix DIR)"
	out=$(cc "$bin" uninstall ${purge:+--purge} 2>&1) || die "uninstall failed: $(firstline "$out")"
	# The link goes only if it is this binary's.
	[ -n "$link" ] && [ -L "$link" ] && [ "$link" -ef "$bin" ] || link=
	rm -f "$bin" || die "could not remove $bin"
	printf '%s\nremoved %s\n' "$out" "$bin"
	# An update's rollback copy, kept beside the binary.
	if [ -e "$prefix/commandcore.previous" ]; then
		rm -f "$prefix/commandcore.previous" || die "could not remove $prefix/commandcore.previous"
		echo "removed $prefix/commandcore.previous"
	fi
	if [ -n "$link" ]; then
		rm -f "$link" || die "could not remove $link"
		echo "removed $link"
	fi
	if [ -n "$linkdir" ] && [ "$prefix" != "$linkdir" ] && rmdir "$prefix" 2>/dev/null; then
		echo "removed $prefix"
	fi
	exit 0
fi
[ -z "$purge" ] || die "--purge goes with --uninstall"
# mv -f over a directory, or a link to one, would move the link into it.
[ -z "$link" ] || [ ! -d "$link" ] || die "$link is a directory; move it away, or give --prefix DIR"

# loopback reports whether the URL $1 names a loopback host (localhost,
# 127.0.0.0/8 or [::1]), as the agent's link allows plain http only there.
loopback() {
	host=${1#*://}
	host=${host%%/*}
	case $host in
	'[::1]' | '[::1]:'*) return 0 ;;
	'['*) return 1 ;;
	esac
	host=${host%:*}
	case $host in
	[Ll][Oo][Cc][Aa][Ll][Hh][Oo][Ss][Tt] | [Ll][Oo][Cc][Aa][Ll][Hh][Oo][Ss][Tt].) return 0 ;;
	*[!0-9.]* | *..* | *. | *[0-9][0-9][0-9][0-9]* | *.*.*.*.*) return 1 ;;
	127.*.*.*) return 0 ;;
	esac
	return 1
}

# Nothing is fetched or run before the relay's URL is known to be safe.
case $relay in
https://*) ;;
http://*)
	loopback "$relay" ||
		die "$relay is plain http off loopback, so anyone on the way could change what it serves; serve the relay over https (--tls-cert and --tls-key, or a TLS proxy with --public-url https://...) and install from there"
	;;
*) die "run this script as a relay serves it: curl --proto '=https' -fsSL https://RELAY/install.sh | COMMANDCORE_ENROLL_CODE=CODE sh" ;;
esac

# From an https relay, every download is https, redirects included. GNU
# wget's --https-only holds only in recursive mode, so wget follows no
# redirect at all (the relay serves its files itself); busybox's wget has
# neither option.
if command -v curl >/dev/null 2>&1; then
	case $relay in
	https://*) fetch() { curl -fsL --proto '=https' --proto-redir '=https' -o "$2" "$1" 2>/dev/null; } ;;
	*) fetch() { curl -fsL --proto '=http,https' -o "$2" "$1" 2>/dev/null; } ;;
	esac
elif command -v wget >/dev/null 2>&1; then
	case $relay in
	https://*)
		wget --help 2>&1 | grep -q -e --https-only ||
			die "this wget cannot be kept from following a redirect to http (busybox's cannot); install curl, or GNU wget 1.17 or later, and run this again"
		fetch() { wget -q --https-only --max-redirect=0 -O "$2" "$1" 2>/dev/null; }
		;;
	*) fetch() { wget -q -O "$2" "$1" 2>/dev/null; } ;;
	esac
else
	die "neither curl nor wget is installed; install one and run this again"
fi

os=$(uname -s)
[ "$os" = Linux ] || die "this is $os; the agent runs on Linux"
machine=$(uname -m)
case $machine in
x86_64 | amd64) arch=amd64 ;;
aarch64 | arm64) arch=arm64 ;;
*) die "unsupported architecture $machine: the agent is built for x86_64 and aarch64" ;;
esac

command -v systemctl >/dev/null 2>&1 && systemctl --user show-environment >/dev/null 2>&1 ||
	die "no systemd user manager answers (systemctl --user); the agent runs as a user service: run this in your own login session, or where there is none, have root run: loginctl enable-linger $(id -un 2>/dev/null || echo USER), then: export XDG_RUNTIME_DIR=/run/user/$(id -u 2>/dev/null || echo UID) and run this again"

if command -v sha256sum >/dev/null 2>&1; then
	sha256() { sha256sum "$1"; }
elif command -v busybox >/dev/null 2>&1 && busybox sha256sum </dev/null >/dev/null 2>&1; then
	sha256() { busybox sha256sum "$1"; }
else
	die "no sha256sum to check the download with; install coreutils or busybox"
fi

tmp=$(mktemp -d 2>/dev/null) || die "could not make a temporary directory"
file=commandcore-linux-$arch
fetch "$relay/download/SHA256SUMS" "$tmp/SHA256SUMS" || die "could not download $relay/download/SHA256SUMS"
want=
while read -r sum name_ || [ -n "$sum" ]; do
	case $name_ in
	"$file" | "*$file") want=$sum ;;
	esac
done <"$tmp/SHA256SUMS"
[ -n "$want" ] || die "the relay serves no agent for linux/$arch"
fetch "$relay/download/$file" "$tmp/commandcore" || die "could not download $relay/download/$file"
got=$(sha256 "$tmp/commandcore") || die "could not compute the download's SHA-256"
got=${got%% *}
[ "$got" = "$want" ] || die "checksum mismatch: $file is $got, the relay's SHA256SUMS says $want; nothing was installed"
chmod 755 "$tmp/commandcore" || die "could not make the download executable"

# Enrolling first, with the downloaded binary: a refused code leaves
# nothing behind. The code goes in enroll's environment alone, exported in
# the command substitution's subshell.
enrolled=$(
	[ -z "$code" ] || export COMMANDCORE_ENROLL_CODE="$code"
	cc "$tmp/commandcore" enroll --keep-identity --server "$relay" ${name:+--name "$name"} 2>&1
) || die "enrollment failed: $(firstline "$enrolled")"

# mkdirs makes the directory $1 and those above it that are missing,
# noting each it made in $made, deepest first.
mkdirs() {
	[ ! -d "$1" ] || return 0
	case $1 in
	?*/*) mkdirs "${1%/*}" || return 1 ;;
	esac
	mkdir "$1" || return 1
	made="$1
$made"
}

# unmake removes the binary and the directories mkdirs made for it.
unmake() {
	rm -f "$bin"
	printf '%s' "$made" | while IFS= read -r dir; do
		rmdir "$dir" 2>/dev/null
	done
}

# An upgrade from $old (the older layout) leaves it in place until the
# service runs on the new binary; one of $bin keeps a copy of it.
fresh=
newbin=
[ -e "$bin" ] || newbin=1
[ -z "$newbin" ] || [ -n "$old" ] || fresh=1
if ! mkdirs "$prefix"; then
	unmake
	die "could not create $prefix"
fi
if [ -z "$newbin" ]; then
	# An upgrade keeps the binary it replaces until the service runs on
	# the new one.
	previous=$prefix/.commandcore.previous.$$
	cp -p "$bin" "$previous" || die "could not keep a copy of $bin"
fi
staged=$prefix/.commandcore.$$
if ! cp "$tmp/commandcore" "$staged" || ! chmod 755 "$staged" || ! mv -f "$staged" "$bin"; then
	[ -z "$newbin" ] || unmake
	die "could not install $bin"
fi
staged=

if ! installed=$(cc "$bin" install 2>&1); then
	if [ -n "$fresh" ]; then
		cc "$bin" uninstall >/dev/null 2>&1
		unmake
		die "the service did not start: $(firstline "$installed"); the identity is kept, so running this again retries"
	fi
	if [ -n "$previous" ]; then
		mv -f "$previous" "$bin" && previous= && cc "$bin" install >/dev/null 2>&1
	else
		# From the older layout: the service goes back to $old, still in
		# place, and what was put beside the new binary goes.
		cc "$old" install >/dev/null 2>&1
		unmake
	fi
	die "the service did not start on the new binary: $(firstline "$installed"); the previous binary is back in place"
fi
[ -z "$previous" ] || rm -f "$previous"
previous=

# Now that the service runs $bin, $link is made a link to it in one step:
# made under a name of its own beside it and renamed over it (mv renames
# the link itself). An older install's binary and its rollback copy go.
linked=
if [ -n "$link" ]; then
	newlink=$linkdir/.commandcore.link.$$
	if mkdirs "$linkdir" && rm -f "$newlink" && ln -s "$bin" "$newlink" && mv -f "$newlink" "$link"; then
		newlink=
		linked=1
		[ -z "$old" ] || rm -f "$linkdir/commandcore.previous"
	fi
fi

# enroll's first line says what it did; its hint on starting an agent is
# not for this script, which has just started one.
printf '%s\n' "${enrolled%%
*}"
printf '%s\n' "$installed" | grep -v '^note: '
echo "installed $bin"
onpath=$prefix
if [ -n "$link" ]; then
	onpath=$linkdir
	if [ -n "$linked" ]; then
		echo "linked $link to it"
	else
		echo "note: could not make $link a link to $bin; the service runs $bin all the same"
	fi
fi
case :${PATH:-}: in
*:"$onpath":*) ;;
*) echo "note: $onpath is not in your PATH; add it to run commandcore by name" ;;
esac
echo
# The agent links within moments of starting; status then says so.
tries=0
while [ $tries -lt 200 ] && ! cc "$bin" status --json 2>/dev/null | grep -q '"state": "connected"'; do
	sleep 0.05 2>/dev/null || sleep 1
	tries=$((tries + 1))
done
cc "$bin" status || true
echo
user=$(id -un 2>/dev/null || echo "$USER")
linger=$(loginctl show-user "$user" -p Linger --value 2>/dev/null) || linger=
if [ -z "$linger" ] && [ -e "/var/lib/systemd/linger/$user" ]; then
	linger=yes
fi
if [ "$linger" = yes ]; then
	echo "lingering is on: the agent keeps running after you log out, and starts at boot"
else
	echo "lingering is off: the agent runs only while you are logged in; to keep it running and start it at boot, run: sudo loginctl enable-linger $user"
fi
