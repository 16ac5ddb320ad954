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

. "$ROOT/bench/standalone.sh"
PORT="$(free_port)"
standalone_broker "$BIN" "$T" "$PORT" 0 4
PID=$BROKER_PID
"$BIN" bench trace --server "127.0.0.1:$PORT" --server-pid "$PID" --duration "$DUR" --trace-runs "$RUNS"
