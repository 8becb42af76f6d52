#!/usr/bin/env bash
# Builds commandcore (and the supervisor-only prototype bench/cmd/minisup),
# makes sure the shared systemd user manager runs, runs the benchmarks
# and prints a summary. About a minute on an idle 2-vCPU VM; the raw
# `go test -bench` output is kept in $OUT (default: a temporary directory).
#
#   bench/run.sh                 # the three benchmarks
#   EXTRA=1 bench/run.sh         # plus the supervisor-build capture comparison (~30 s more)
#   SAMPLES=50 TABLE_SAMPLES=100 CAPTURE_RUNS=3 bench/run.sh
#   MEMORY_BASE=v1.2.0 bench/run.sh   # the memory guard's base (default below)
#
# The memory guard fails the run (exit 1, after the summary) when the
# supervisor's private memory mid-capture is more than 5% above a base
# build's: the least of MEMORY_GUARD_RUNS (5) runs of each, alternated, so
# load falls on both alike. The base is MEMORY_BASE, or HEAD when the tree
# has uncommitted changes outside bench/, or else HEAD~1: the change under
# test against what it changes.
set -euo pipefail

cd "$(dirname "$0")/.."
SAMPLES=${SAMPLES:-50}          # launches per latency sampler
TABLE_SAMPLES=${TABLE_SAMPLES:-100} # launches into each table (empty, full)
CAPTURE_RUNS=${CAPTURE_RUNS:-3} # 2 GiB runs per capture variant (plus one warm-up round)
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/commandcore-bench.XXXXXX")}
mkdir -p "$OUT"

echo "== build" >&2
make --no-print-directory build >&2
# As make build builds: static, -trimpath (internal/testkit.Build).
CGO_ENABLED=0 go build -trimpath -o "$OUT/minisup" ./bench/cmd/minisup
CGO_ENABLED=0 go build -trimpath -ldflags '-X main.maxProcs=1' -o "$OUT/minisup-p1" ./bench/cmd/minisup
go test -c -o "$OUT/bench.test" ./bench
go run ./internal/systemdtest/cmd/usermgr up >/dev/null

export COMMANDCORE_BIN=$PWD/bin/commandcore MINISUP_BIN=$OUT/minisup MINISUP_P1_BIN=$OUT/minisup-p1
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(date +%s)

run() { # name, benchtime, regexp, extra flags...
	local name=$1 benchtime=$2 re=$3
	shift 3
	echo "== $name" >&2
	(cd bench && "$OUT/bench.test" -test.run '^$' -test.bench "$re" -test.benchtime "$benchtime" "$@") | tee "$OUT/$name.txt" >&2
}
# metric FILE BENCHMARK UNIT: the value reported for UNIT on BENCHMARK's line.
metric() {
	awk -v b="$2" -v u="$3" '$1 ~ "^"b"(-[0-9]+)?$" { for (i = 3; i < NF; i += 2) if ($(i+1) == u) print $i }' "$OUT/$1.txt" | tail -1
}
s() { metric start BenchmarkStartCompare "$1"; }
t() { metric table BenchmarkStartFullTable "$1"; }
ph() { metric start BenchmarkStartPhases "$1-p50-ms"; }
c() { metric capture BenchmarkCaptureCompare "$1"; }
m() { metric memory "$1" "$2"; }
div() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
verdict() { awk -v v="$1" -v t="$2" -v op="$3" 'BEGIN { ok = (op == "<=") ? v <= t : v >= t; print ok ? "met" : "MISSED" }'; }

run start "${SAMPLES}x" '^Benchmark(StartCompare|StartBurst|StartPhases|ExecBinTrue|ExecCommandcoreVersion|ExecSupervise|ExecMiniSup)$'
run table "${TABLE_SAMPLES}x" '^BenchmarkStartFullTable$'
run capture "${CAPTURE_RUNS}x" '^BenchmarkCaptureCompare$'
run memory 1x '^Benchmark(SupervisorMemory(MiniSup)?|ConmonMemory)$' -test.v

# The memory guard: the base, built as make build builds it, from its
# tree alone (git archive), beside this one.
guard_runs=${MEMORY_GUARD_RUNS:-5}
if [[ -n ${MEMORY_BASE:-} ]]; then
	base_ref=$MEMORY_BASE
elif git diff --quiet HEAD -- . ':!bench'; then
	base_ref=HEAD~1
else
	base_ref=HEAD
fi
echo "== memory guard: base $base_ref" >&2
mkdir -p "$OUT/base-src"
git archive "$base_ref" | tar -x -C "$OUT/base-src"
make --no-print-directory -C "$OUT/base-src" build BIN="$OUT/base-commandcore" >&2
guard_base=() guard_this=()
for i in $(seq "$guard_runs"); do
	for side in base this; do
		bin=$PWD/bin/commandcore
		[[ $side == base ]] && bin=$OUT/base-commandcore
		COMMANDCORE_BIN=$bin run "guard-$side-$i" 1x '^BenchmarkSupervisorMemory$'
		v=$(metric "guard-$side-$i" BenchmarkSupervisorMemory Private-KiB)
		if [[ $side == base ]]; then guard_base+=("$v"); else guard_this+=("$v"); fi
	done
done
least() { printf '%s\n' "$@" | sort -n | head -1; }
guard_b=$(least "${guard_base[@]}") guard_t=$(least "${guard_this[@]}")
guard_ratio=$(awk -v a="$guard_t" -v b="$guard_b" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "n/a" }')
guard_ok=$(awk -v r="$guard_ratio" 'BEGIN { print (r != "n/a" && r <= 1.05) ? "met" : "MISSED" }')

if [[ ${EXTRA:-} == 1 ]]; then
	run extra "${CAPTURE_RUNS}x" '^BenchmarkCaptureSupervisors$'
fi

elapsed=$(($(date +%s) - start))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)


cat <<EOF

===== CommandCore benchmarks: $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) vCPU $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), kernel $(uname -r)
      $(systemctl --version | head -1), $(go version | cut -d' ' -f3), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!bench' || echo ' (+ uncommitted changes)')
      load average before $load_before, after $load_after; ${elapsed}s of benchmarks; raw output in $OUT

1. process.start latency, ${SAMPLES} launches of \`true\` each, interleaved (ms)        p50      p90
   MCP process.start (client call -> result)                                 $(printf '%8s %8s' "$(s mcp-p50-ms)" "$(s mcp-p90-ms)")
   jobs.Service.Start in process                                             $(printf '%8s %8s' "$(s svc-p50-ms)" "$(s svc-p90-ms)")
   systemd-run --user --no-block --quiet -p Type=exec true                   $(printf '%8s %8s' "$(s sdrun-noblock-p50-ms)" "$(s sdrun-noblock-p90-ms)")
   systemd-run --user --quiet -p Type=exec true (waits for the start job)    $(printf '%8s %8s' "$(s sdrun-block-p50-ms)" "$(s sdrun-block-p90-ms)")
   the same with the job units' hiding (TemporaryFileSystem=, BindPaths=)   $(printf '%8s %8s' "$(s sdrun-block-hide-p50-ms)" "$(s sdrun-block-hide-p90-ms)")
   StartTransientUnit(/bin/true) from Go, until the start job is done        $(printf '%8s %8s' "$(s dbus-true-p50-ms)" "$(s dbus-true-p90-ms)")
   jobs.Service.Start, supervisor = minisup prototype                        $(printf '%8s %8s' "$(s svc-minisup-p50-ms)" "$(s svc-minisup-p90-ms)")
   jobs.Service.Start, the agent's directories not hidden from the unit     $(printf '%8s %8s' "$(s svc-nohide-p50-ms)" "$(s svc-nohide-p90-ms)")
   jobs.Service.Start without systemd (fallback fork/exec)                   $(printf '%8s %8s' "$(s svc-fallback-p50-ms)" "$(s svc-fallback-p90-ms)")
   MCP process.status of an unknown job (the MCP round trip alone)          $(printf '%8s %8s' "$(s mcp-status-p50-ms)" "$(s mcp-status-p90-ms)")
   ratio MCP / systemd-run blocking (p50):   $(s mcp/sdrun-block)  target <= 1.0: $(verdict "$(s mcp/sdrun-block)" 1.0 "<=")
   ratio MCP / D-Bus floor (p50):            $(s mcp/dbus-true)  target <= 2.0: $(verdict "$(s mcp/dbus-true)" 2.0 "<=")
   ratio MCP / systemd-run blocking, same hiding (p50): $(s mcp/sdrun-block-hide)
   ratio MCP / in-process (p50):             $(s mcp/svc)
   ratio minisup in-process / in-process:    $(s svc-minisup/svc)
   ratio not hidden / hidden (in-process):   $(s svc-nohide/svc)
   4 launches back to back over MCP (p50 ms): the first $(metric start BenchmarkStartBurst first-p50-ms), the 3 after it $(metric start BenchmarkStartBurst rest-p50-ms) (p90 $(metric start BenchmarkStartBurst rest-p90-ms)): a spare serves one launch at a time
   launch phases (p50 ms): policy $(ph policy), admit $(ph admit), D-Bus unit start $(ph unit), exec->claim $(ph claim), claim->READY $(ph ready), get $(ph get), host_health $(ph health); sum $(ph total)
     (interleaved Service.Start p50 $(metric start BenchmarkStartPhases svc-p50-ms): claim polling adds about $(metric start BenchmarkStartPhases poll-loss-ms) ms)
   exec floors (p50 ms): /bin/true $(metric start BenchmarkExecBinTrue p50-ms), commandcore version $(metric start BenchmarkExecCommandcoreVersion p50-ms), commandcore supervise (role start, no job) $(metric start BenchmarkExecSupervise p50-ms), minisup $(metric start BenchmarkExecMiniSup p50-ms)
   a full table (99 ended jobs, read, and 31 live), ${TABLE_SAMPLES} launches each, interleaved (p50 ms): empty $(t empty-p50-ms), full $(t full-p50-ms);
     full / empty $(t full/empty-p50)  target <= 1.1: $(verdict "$(t full/empty-p50)" 1.1 "<="); process.jobs over it $(t jobs-p50-ms)  target <= 10: $(verdict "$(t jobs-p50-ms)" 10 "<=")

2. capture throughput, 2 GiB to stdout, median of ${CAPTURE_RUNS} (MB/s = 10^6 B/s, start -> terminal)
   head -c 2G /dev/zero: captured $(c mcp-head-MB/s), plain pipe to cat $(c pipe-head-MB/s); ratio $(c head-captured/pipe)  target >= 0.8: $(verdict "$(c head-captured/pipe)" 0.8 ">=")
   dd bs=1M (fast producer): captured $(c mcp-dd-MB/s), plain pipe to cat $(c pipe-dd-MB/s); ratio $(c dd-captured/pipe)  target >= 0.9: $(verdict "$(c dd-captured/pipe)" 0.9 ">=")
   consumer CPU time (ms, median): head: supervisor $(c mcp-head-consumer-cpu-ms) vs cat $(c pipe-head-consumer-cpu-ms); dd: supervisor $(c mcp-dd-consumer-cpu-ms) vs cat $(c pipe-dd-consumer-cpu-ms)
   dd consumer CPU, supervisor / cat: $(div "$(c mcp-dd-consumer-cpu-ms)" "$(c pipe-dd-consumer-cpu-ms)")  target <= 1.2: $(verdict "$(div "$(c mcp-dd-consumer-cpu-ms)" "$(c pipe-dd-consumer-cpu-ms)")" 1.2 "<=")

3. supervisor memory during the 2 GiB capture (KiB, /proc/PID/status sampled every 2 ms)
   commandcore supervise: VmHWM $(m BenchmarkSupervisorMemory VmHWM-KiB), peak VmRSS $(m BenchmarkSupervisorMemory peak-VmRSS-KiB) (anon $(m BenchmarkSupervisorMemory RssAnon-KiB), file $(m BenchmarkSupervisorMemory RssFile-KiB)), at claim $(m BenchmarkSupervisorMemory claim-VmRSS-KiB), Pss $(m BenchmarkSupervisorMemory Pss-KiB), private $(m BenchmarkSupervisorMemory Private-KiB)  target private <= 2048: $(verdict "$(m BenchmarkSupervisorMemory Private-KiB)" 2048 "<=")
   minisup prototype:     VmHWM $(m BenchmarkSupervisorMemoryMiniSup VmHWM-KiB), peak VmRSS $(m BenchmarkSupervisorMemoryMiniSup peak-VmRSS-KiB) (anon $(m BenchmarkSupervisorMemoryMiniSup RssAnon-KiB), file $(m BenchmarkSupervisorMemoryMiniSup RssFile-KiB)), at claim $(m BenchmarkSupervisorMemoryMiniSup claim-VmRSS-KiB)
   conmon + runc (k8s-file log): VmHWM $(m BenchmarkConmonMemory VmHWM-KiB), private $(m BenchmarkConmonMemory Private-KiB)$([[ -n "$(m BenchmarkConmonMemory Private-KiB)" ]] || echo " (n/a: apt-get install conmon runc busybox-static)"); ours / conmon, private: $(div "$(m BenchmarkSupervisorMemory Private-KiB)" "$(m BenchmarkConmonMemory Private-KiB)")  target <= 1.0: $(verdict "$(div "$(m BenchmarkSupervisorMemory Private-KiB)" "$(m BenchmarkConmonMemory Private-KiB)")" 1.0 "<=")

4. memory guard: supervisor private memory mid-capture, least of ${guard_runs} alternated runs (KiB)
   base $base_ref ($(git rev-parse --short "$base_ref")): $guard_b (runs: ${guard_base[*]}); this tree: $guard_t (runs: ${guard_this[*]})
   this / base: $guard_ratio  target <= 1.05: $guard_ok
EOF
if [[ ${EXTRA:-} == 1 ]]; then
	x() { metric extra BenchmarkCaptureSupervisors "$1-MB/s"; }
	cat <<EOF

extra: dd bs=1M 2 GiB by supervisor build, median of ${CAPTURE_RUNS} (MB/s): over MCP $(x mcp), in process with commandcore $(x svc-commandcore),
       minisup $(x svc-minisup), minisup GOMAXPROCS=1 $(x svc-minisup-p1); plain pipe $(x pipe)
EOF
fi
if [[ $guard_ok != met ]]; then
	echo "bench: the supervisor's private memory rose more than 5% over $base_ref ($guard_b -> $guard_t KiB)" >&2
	exit 1
fi
