#!/usr/bin/env bash
# bench/ab.sh — interleaved A/B of two metaq binaries on one `metaq bench` workload.
#
# Each round starts a fresh standalone broker (no ZooKeeper, 1 partition, MetaQ's default async
# flush, or sync flush with SYNC=1) from binary A, runs the workload with A's own client, stops
# it, then does the same with B; ROUNDS rounds (A,B,A,B…). It prints each phase's rate and the
# broker's and the client's CPU µs per message, then the median rate of each binary and the
# median of the rounds' B/A ratios. On a loaded machine compare the CPU columns (they barely
# move with load); the rates only mean something on a quiet one.
#
# Usage: bench/ab.sh A_BIN B_BIN WORKLOAD [metaq bench flags…]
#   e.g. bench/ab.sh /tmp/metaq-main /tmp/metaq-new publish-batch --duration 5s
#        ROUNDS=5 bench/ab.sh /tmp/metaq-main /tmp/metaq-new produce --window 1000 --duration 5s
# Environment: ROUNDS (3), SYNC (0).
set -euo pipefail

[[ $# -ge 3 ]] || { sed -n '2,15p' "$0"; exit 2; }
A="$1" B="$2" WL="$3"
shift 3
ROUNDS="${ROUNDS:-3}"
SYNC="${SYNC:-0}"
T="$(mktemp -d /tmp/metaq-ab.XXXXXX)"
PID=""

cleanup() {
	[[ -n "$PID" ]] && kill -9 "$PID" 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$T"
}
trap cleanup EXIT
. "$(dirname "${BASH_SOURCE[0]}")/standalone.sh"

# phase BIN: one broker of BIN, one run of the workload with BIN's client; prints
# "<msgs/s> <broker µs/msg> <client µs/msg>".
phase() {
	local bin="$1" port
	shift
	port="$(free_port)"
	rm -rf "$T/data"
	standalone_broker "$bin" "$T" "$port" "$SYNC" 1
	PID=$BROKER_PID
	local out
	out="$("$bin" bench "$WL" --json --server "127.0.0.1:$port" --server-pid "$PID" --topic bench "$@" 2>/dev/null || true)"
	kill "$PID" 2>/dev/null || true
	for _ in $(seq 300); do kill -0 "$PID" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$PID" 2>/dev/null || true
	wait "$PID" 2>/dev/null || true
	PID=""
	python3 -c '
import json, re, sys
r = None
for line in sys.stdin:
    line = line.strip()
    if line.startswith("{"):
        r = json.loads(line)
if not r or r.get("error"):
    print("- - -", (r or {}).get("error", "no result"))
    sys.exit()
def us(k):
    v = r.get(k)
    return "%.3f" % v if isinstance(v, (int, float)) and v > 0 else "-"
m = re.search(r"client CPU ([0-9.]+)", r.get("notes", ""))
print("%.0f %s %s" % (r.get("msgs_per_sec", 0), us("server_cpu_us_per_msg"), m.group(1) if m else "-"))
' <<<"$out"
}

printf '%-5s %-3s %12s %10s %10s\n' round bin msgs/s broker-µs client-µs
ra=() rb=()
for i in $(seq "$ROUNDS"); do
	read -r a sa ca _ < <(phase "$A" "$@")
	printf '%-5s %-3s %12s %10s %10s\n' "$i" A "$a" "$sa" "$ca"
	read -r b sb cb _ < <(phase "$B" "$@")
	printf '%-5s %-3s %12s %10s %10s\n' "$i" B "$b" "$sb" "$cb"
	ra+=("$a") rb+=("$b")
done
python3 - "${ra[*]}" "${rb[*]}" <<'PY'
import statistics, sys
a = [float(x) for x in sys.argv[1].split() if x != "-"]
b = [float(x) for x in sys.argv[2].split() if x != "-"]
if a and b:
    print("median A %.0f msgs/s, B %.0f msgs/s; median of round ratios B/A %.3f"
          % (statistics.median(a), statistics.median(b),
             statistics.median([y / x for x, y in zip(a, b) if x > 0])))
PY
