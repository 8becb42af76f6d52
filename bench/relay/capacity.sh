#!/usr/bin/env bash
# Relay capacity: one `commandcore relay serve` on loopback holding N idle
# device links (bench/relay/cmd/linksim, plus one real `commandcore agent`),
# at each N of LINKS: the relay's RSS per link, its idle CPU (heartbeats,
# standing polls, last-seen updates) and the p50/p99 of a real client's
# process.jobs call to the real agent. Raises the open-file limit for the
# links (the relay and linksim each hold one descriptor per link). About
# four minutes on an idle 2-vCPU VM with the defaults; the raw
# `go test -bench` output is kept in $OUT.
#
#   bench/relay/capacity.sh
#   LINKS=1,1000,2000 WINDOW=15s CALLS=100 bench/relay/capacity.sh
set -euo pipefail

cd "$(dirname "$0")/../.."
LINKS=${LINKS:-1,1000,5000,10000}
WINDOW=${WINDOW:-30s} # idle time per N over which the relay's CPU is counted
CALLS=${CALLS:-200}   # process.jobs calls timed per N
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/commandcore-capacity.XXXXXX")}
mkdir -p "$OUT"

top=${LINKS##*,}
need=$((top + 1024))
hard=$(ulimit -Hn)
if [[ $hard != unlimited && $hard -lt $need ]]; then
	echo "capacity: $top links need an open-file limit of $need; the hard limit is $hard" >&2
	exit 1
fi
ulimit -n "$need"

echo "== build" >&2
CGO_ENABLED=0 go build -o bin/commandcore ./cmd/commandcore
CGO_ENABLED=0 go build -o "$OUT/linksim" ./bench/relay/cmd/linksim
go test -c -o "$OUT/relay.test" ./bench/relay
go run ./internal/systemdtest/cmd/usermgr up >/dev/null

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date +%s)
echo "== capacity" >&2
(cd bench/relay && COMMANDCORE_BIN=$PWD/../../bin/commandcore LINKSIM_BIN=$OUT/linksim \
	CAPACITY_LINKS=$LINKS CAPACITY_WINDOW=$WINDOW CAPACITY_CALLS=$CALLS \
	"$OUT/relay.test" -test.run '^$' -test.bench '^BenchmarkRelayCapacity$' -test.benchtime 1x -test.timeout 60m) \
	>"$OUT/capacity.txt" 2>"$OUT/capacity.log" || { tail -20 "$OUT/capacity.log" >&2; exit 1; }
elapsed=$(($(date +%s) - start))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# m UNIT: the value reported for UNIT.
m() { awk -v u="$1" '$1 ~ /^BenchmarkRelayCapacity/ { for (i = 3; i < NF; i += 2) if ($(i+1) == u) print $i }' "$OUT/capacity.txt"; }
verdict() { awk -v v="$1" -v t="$2" 'BEGIN { if (v == "") print "-"; else print (v <= t) ? "met" : "MISSED" }'; }

cat <<EOF

===== Relay capacity: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) vCPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), kernel $(uname -r)
      $(go version | cut -d' ' -f3), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!bench' || echo ' (+ uncommitted changes)'), open-file limit $need
      load average before $load_before, after $load_after; ${elapsed}s; ${WINDOW} idle window and ${CALLS} calls per N; raw output in $OUT
      enrolling $((top - 1)) simulated devices (codes minted in the relay's state, redeemed at /v1/enroll): $(m enroll-s) s

   links   up (s)   relay RSS (KiB)  KiB/link  idle CPU (% core)  linksim CPU  process.jobs p50 / p99 (ms)  p50 vs 1  links lost
EOF
for n in ${LINKS//,/ }; do
	printf '   %5s  %7s  %15s  %8s  %17s  %11s  %12s / %-12s  %8s  %10s\n' "$n" "$(m "n$n-up-s")" "$(m "n$n-rss-KiB")" \
		"$(m "n$n-KiB-per-link")" "$(m "n$n-idle-cpu-pct")" "$(m "n$n-sim-cpu-pct")" "$(m "n$n-jobs-p50-ms")" "$(m "n$n-jobs-p99-ms")" \
		"$(m "n$n-jobs-p50-ratio")" "$(m "n$n-ends-after")"
done
cat <<EOF

   largest N reached: $(m links-reached)$(grep -h 'links not reached' "$OUT/capacity.txt" | sed 's/^ */; /')
   targets at $top links: KiB/link <= 64: $(verdict "$(m "n$top-KiB-per-link")" 64); idle CPU <= 5 %: $(verdict "$(m "n$top-idle-cpu-pct")" 5); p50 <= 1.2x at 1: $(verdict "$(m "n$top-jobs-p50-ratio")" 1.2)
EOF
