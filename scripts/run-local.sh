#!/bin/sh
# Starts a relay and an enrolled agent on loopback, each with its own state
# in a fresh temporary directory, prints the MCP URL and a client token,
# and stops both (by PID) on Ctrl-C. Used by `make run`.
set -eu
bin=${1:?usage: run-local.sh BIN}
dir=$(mktemp -d "${TMPDIR:-/tmp}/commandcore-run.XXXXXX")
relay= agent=
cleanup() {
	for pid in $agent $relay; do kill "$pid" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The log exists before the relay writes it, so the wait below reads it.
: >"$dir/relay.log"
"$bin" relay serve --listen "${LISTEN:-127.0.0.1:0}" --state-dir "$dir/relay" --config-dir "$dir/relay-config" >"$dir/relay.log" 2>&1 &
relay=$!
url=
for _ in $(seq 100); do
	url=$(sed -n 's/^relay: listening on //p' "$dir/relay.log")
	[ -n "$url" ] && break
	kill -0 "$relay" 2>/dev/null || { cat "$dir/relay.log" >&2; exit 1; }
	sleep 0.1
done
[ -n "$url" ] || { echo "run-local: the relay did not start" >&2; exit 1; }

code=$("$bin" relay enroll-code --name local --state-dir "$dir/relay")
"$bin" enroll --server "$url" --code "$code" --state-dir "$dir/agent" --config-dir "$dir/agent-config" >/dev/null
"$bin" agent --state-dir "$dir/agent" --config-dir "$dir/agent-config" >"$dir/agent.log" 2>&1 &
agent=$!
token=$("$bin" relay token create --name local --state-dir "$dir/relay" 2>/dev/null)

cat <<MSG
CommandCore is running on loopback (state in $dir).
  MCP endpoint (Streamable HTTP): $url/mcp/local
  Authorization: Bearer $token
Try it with the MCP Inspector:
  npx @modelcontextprotocol/inspector --cli $url/mcp/local --transport http \\
    --header "Authorization: Bearer $token" --method tools/list
Local views: $bin status --state-dir $dir/agent ; $bin activity --state-dir $dir/agent
Press Ctrl-C to stop.
MSG
wait "$agent"
