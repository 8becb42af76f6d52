#!/bin/sh
# Drives CommandCore with the official MCP Inspector CLI, a client that is
# not ours and not Go: through the relay over Streamable HTTP (as
# `make run` sets it up) and over stdio. Opt-in (`make inspector-test`):
# it installs the pinned Inspector and a Node 22 binary from the npm
# registry into test/inspector/node_modules (see ../shared/MCP-CLIENTS.md).
set -eu
bin=${1:?usage: run.sh BIN}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$here"
if [ ! -x node_modules/.bin/mcp-inspector ]; then
	# npm ci trips over an optional dependency the registry no longer serves.
	npm install --no-audit --no-fund >/dev/null
fi
PATH=$here/node_modules/.bin:$PATH
export PATH

name=inspector-test
. "$root/test/runlocal.sh"

fail() { echo "inspector-test: FAIL: $*" >&2; exit 1; }
# http ARGS...: one Inspector call to the relay; prints its output, returns its exit code.
http() { mcp-inspector --cli "$url" --transport http --header "Authorization: Bearer $token" "$@" 2>&1; }
# expect CODE TEXT ARGS...: the call exits CODE and its output contains TEXT.
expect() {
	want=$1 text=$2
	shift 2
	set +e
	out=$(http "$@")
	got=$?
	set -e
	[ "$got" = "$want" ] || fail "$* exited $got, want $want: $out"
	case $out in *"$text"*) ;; *) fail "$* printed no '$text': $out" ;; esac
	printf '%s' "$out"
}

# The device links a moment after make run's set-up prints.
for i in $(seq 100); do
	http --method tools/call --tool-name process.jobs >/dev/null && break
	[ "$i" = 100 ] && fail "the device never came online"
	sleep 0.2
done
for tool in process.start process.status process.output process.stop process.jobs \
	process.forget process.run process.list system.metrics files.search; do
	expect 0 "\"$tool\"" --method tools/list >/dev/null
done
out=$(expect 0 '"state": "exited"' --method tools/call --tool-name process.start \
	--tool-arg 'command=echo inspector-marker' --tool-arg wait_ms=10000)
id=$(printf '%s\n' "$out" | sed -n 's/.*"process_id": "\([0-9a-f-]*\)".*/\1/p' | head -1)
[ -n "$id" ] || fail "no process_id in: $out"
expect 0 'inspector-marker' --method tools/call --tool-name process.output --tool-arg "process_id=\"$id\"" >/dev/null
expect 0 'run-marker' --method tools/call --tool-name process.run --tool-arg 'command=echo run-marker' >/dev/null
expect 5 'invalid_argument' --method tools/call --tool-name process.start --tool-arg 'command=true' --tool-arg 'detach=true' >/dev/null
set +e
out=$(mcp-inspector --cli "$url" --transport http --header "Authorization: Bearer cct_bogus" --method tools/list 2>&1)
got=$?
set -e
[ "$got" != 0 ] || fail "a bogus token listed tools: $out"

# The same tools over stdio, for a client on the machine.
out=$(mcp-inspector --cli "$bin" mcp --state-dir "$work/stdio" --config-dir "$work/stdio-config" --method tools/list 2>&1) ||
	fail "stdio tools/list: $out"
case $out in *'"process.start"'*) ;; *) fail "stdio tools/list: $out" ;; esac
echo "inspector-test: ok (relay over Streamable HTTP and stdio)"
