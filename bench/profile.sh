#!/usr/bin/env bash
# bench/profile.sh — CPU profiles of a standalone broker and the benchmark client on one
# `metaq bench` workload (bench/README.md, "the profile on a quiet machine").
#
# Starts BIN's standalone broker (no ZooKeeper, 1 partition, MetaQ's default async flush, or
# sync flush with SYNC=1) with --cpuprofile OUT/broker.prof, runs `BIN bench WORKLOAD` against
# it with --cpuprofile OUT/client.prof, stops the broker gracefully (the profile is written at
# the stop), prints the rate, the broker's and the client's CPU µs per message, and removes the
# broker's data. Read the profiles with `go tool pprof -top -cum BIN OUT/broker.prof`.
# topics-1000 / partitions-10000 (and topics / partitions) get their topics' sections
# (bench/standalone.sh spread_ini; STANDALONE_INI, if set, replaces them). SIDE=base or
# SIDE=spread runs every phase on that side (`metaq bench --side`, after priming both), so two
# profiles, one per side, show what the spread adds: `go tool pprof -diff_base`.
#
# Usage: bench/profile.sh BIN WORKLOAD OUT [metaq bench flags…]
#   e.g. bench/profile.sh bin/metaq publish-batch /tmp/metaq-prof-batch --duration 8s
#        bench/profile.sh bin/metaq produce /tmp/metaq-prof-async --window 1000 --duration 8s
#        for s in base spread; do SIDE=$s bench/profile.sh bin/metaq topics-1000 /tmp/prof-$s --count 4000000; done
set -euo pipefail

[[ $# -ge 3 ]] || { sed -n '2,18p' "$0"; exit 2; }
BIN="$(realpath "$1")" WL="$2" OUT="$3"
shift 3
mkdir -p "$OUT"
OUT="$(realpath "$OUT")"
PID=""
cleanup() {
	[[ -n "$PID" ]] && kill -9 "$PID" 2>/dev/null || true
	rm -rf "$OUT/data"
}
trap cleanup EXIT
. "$(dirname "${BASH_SOURCE[0]}")/standalone.sh"
. "$(dirname "${BASH_SOURCE[0]}")/warm.sh" # once per boot (bench/README.md, Caveats)
warm_memory

port="$(free_port)"
rm -rf "$OUT/data"
STANDALONE_INI="${STANDALONE_INI-$(spread_ini "$WL")}" BROKER_ARGS="--cpuprofile $OUT/broker.prof" standalone_broker "$BIN" "$OUT" "$port" "${SYNC:-0}" 1
PID=$BROKER_PID
out="$("$BIN" bench "$WL" --json --server "127.0.0.1:$port" --server-pid "$PID" --topic bench \
	--cpuprofile "$OUT/client.prof" ${SIDE:+--side "$SIDE"} "$@" 2>/dev/null || true)"
stop_broker "$PID"
PID=""
python3 -c '
import json, re, sys
r = None
for line in sys.stdin:
    line = line.strip()
    if line.startswith("{"):
        r = json.loads(line)
if not r or r.get("error"):
    sys.exit("profile.sh: no result: %s" % (r or {}).get("error", "no JSON line"))
m = re.search(r"client CPU ([0-9.]+)", r.get("notes", ""))
print("%.0f msgs/s, broker %s µs/msg, client %s µs/msg" % (r.get("msgs_per_sec", 0),
      r.get("server_cpu_us_per_msg", "-"), m.group(1) if m else "-"))
' <<<"$out"
echo "profiles: $OUT/broker.prof $OUT/client.prof"
