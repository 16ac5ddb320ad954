#!/usr/bin/env bash
# bench/trace.sh — what message tracing costs (docs/trace.md, "Cost"): `metaq bench trace`
# against a standalone async-flush broker (no ZooKeeper): publish phases of 1 producer (100-byte
# messages, window 1000) without and with Config.Trace, interleaved off,on / on,off …; prints the
# ratio of the median rates (goal >= 0.90), the median of the adjacent pairs' ratios, and the
# client's and the broker's CPU µs per message of every phase (the broker's from
# /proc/<pid>/stat): the CPU ratio barely moves with the machine's load, unlike the rates.
#
# Usage: bench/trace.sh            (RUNS=3 DUR=3s by default; about a minute)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="${RUNS:-3}"
DUR="${DUR:-3s}"
BIN="${METAQ_BIN:-$(mktemp -d)/metaq}"
T="$(mktemp -d /tmp/metaq-trace-bench.XXXXXX)"
PID=""

cleanup() {
	[[ -n "$PID" ]] && kill "$PID" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$T"
}
trap cleanup EXIT

[[ -x "$BIN" ]] || (cd "$ROOT" && go build -o "$BIN" ./tools/metaq)

PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')"
cat >"$T/server.ini" <<INI
[system]
brokerId=0
serverPort=$PORT
dashboardHttpPort=0
hostName=127.0.0.1
bindHost=127.0.0.1
dataPath=$T/data
unflushThreshold=1000
unflushInterval=1000

[zookeeper]
zk.zkEnable=false

[topic=bench]
numPartitions=4
INI
"$BIN" broker -c "$T/server.ini" >"$T/broker.log" 2>&1 &
PID=$!
for _ in $(seq 100); do
	"$BIN" version --broker "127.0.0.1:$PORT" >/dev/null 2>&1 && break
	sleep 0.2
done
"$BIN" bench trace --server "127.0.0.1:$PORT" --server-pid "$PID" --duration "$DUR" --trace-runs "$RUNS"
