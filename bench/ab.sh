#!/usr/bin/env bash
# bench/ab.sh — interleaved A/B of two metaq binaries on one `metaq bench` workload.
#
# Each round starts a fresh standalone broker (no ZooKeeper, 1 partition, MetaQ's default async
# flush, or sync flush with SYNC=1) from binary A, runs the workload with A's own client, stops
# it, then does the same with B; ROUNDS rounds (A,B,A,B…). It prints each phase's rate and the
# broker's and the client's CPU µs per message (topics-1000 / partitions-10000: of the spread side,
# then the ratio and the base side's broker and client CPU), then the median rate of each binary and the
# median of the rounds' B/A ratios. On a loaded machine compare the CPU columns (they barely
# move with load); the rates only mean something on a quiet one.
#
# Usage: bench/ab.sh A_BIN B_BIN WORKLOAD [metaq bench flags…]
#   e.g. bench/ab.sh /tmp/metaq-main /tmp/metaq-new publish-batch --duration 5s
#        ROUNDS=5 bench/ab.sh /tmp/metaq-main /tmp/metaq-new produce --window 1000 --duration 5s
#   topics-1000 / partitions-10000 get their topics' sections, and print the degradation ratio:
#        CLIENT_BIN=bin/metaq bench/ab.sh /tmp/metaq-main bin/metaq partitions-10000 --duration 5s
# Environment: ROUNDS (3), SYNC (0), CLIENT_BIN (the client for both brokers; default each
# binary's own — set it when the two clients measure differently).
set -euo pipefail

[[ $# -ge 3 ]] || { sed -n '2,18p' "$0"; exit 2; }
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
. "$(dirname "${BASH_SOURCE[0]}")/warm.sh" # once per boot (bench/README.md, Caveats)
warm_memory
steal0=$(steal_mark)

# phase BIN: one broker of BIN, one run of the workload with BIN's client; prints
# "<msgs/s> <broker µs/msg> <client µs/msg>".
phase() {
	local bin="$1" port
	shift
	port="$(free_port)"
	rm -rf "$T/data"
	STANDALONE_INI="$(spread_ini "$WL")" standalone_broker "$bin" "$T" "$port" "$SYNC" 1
	PID=$BROKER_PID
	local out
	out="$("${CLIENT_BIN:-$bin}" bench "$WL" --json --server "127.0.0.1:$port" --server-pid "$PID" --topic bench "$@" 2>/dev/null || true)"
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
    print("- - -", (r or {}).get("error", "no result"))
    sys.exit()
def us(k):
    v = r.get(k)
    return "%.3f" % v if isinstance(v, (int, float)) and v > 0 else "-"
notes = r.get("notes", "")
m = re.search(r"client CPU ([0-9.]+)", notes)
# topics-1000 / partitions-10000: the CPU of the base side (1 topic / 1 partition) too
bs = re.search(r"server CPU [0-9.]+ µs/msg \(base ([0-9.]+)\)", notes)
bc = re.search(r"client CPU [0-9.]+ µs/msg \(base ([0-9.]+)\)", notes)
print("%.0f %s %s %s %s %s" % (r.get("msgs_per_sec", 0), us("server_cpu_us_per_msg"), m.group(1) if m else "-", us("degradation_ratio"),
      bs.group(1) if bs else "-", bc.group(1) if bc else "-"))
' <<<"$out"
}

printf '%-5s %-3s %12s %10s %10s %8s %10s %10s\n' round bin msgs/s broker-µs client-µs ratio base-brkr base-cli
ra=() rb=() da=() db=()
for i in $(seq "$ROUNDS"); do
	read -r a sa ca xa bsa bca _ < <(phase "$A" "$@")
	printf '%-5s %-3s %12s %10s %10s %8s %10s %10s\n' "$i" A "$a" "$sa" "$ca" "$xa" "$bsa" "$bca"
	read -r b sb cb xb bsb bcb _ < <(phase "$B" "$@")
	printf '%-5s %-3s %12s %10s %10s %8s %10s %10s\n' "$i" B "$b" "$sb" "$cb" "$xb" "$bsb" "$bcb"
	ra+=("$a") rb+=("$b") da+=("$xa") db+=("$xb")
	printf 'A %s %s %s %s\nB %s %s %s %s\n' "$sa" "$ca" "$bsa" "$bca" "$sb" "$cb" "$bsb" "$bcb" >>"$T/cpu"
done
python3 - "${ra[*]}" "${rb[*]}" "${da[*]}" "${db[*]}" "$T/cpu" <<'PY'
import statistics, sys
extra = {"A": ([], []), "B": ([], [])}  # spread - base CPU µs/msg: broker, client
for line in open(sys.argv[5]):
    f = line.split()
    for k, (s, b) in enumerate(((f[1], f[3]), (f[2], f[4]))):
        if "-" not in (s, b):
            extra[f[0]][k].append(float(s) - float(b))
if all(extra[x][0] and extra[x][1] for x in "AB"):
    print("median extra CPU of the spread side (µs/msg): broker A %+.3f, B %+.3f; client A %+.3f, B %+.3f"
          % tuple(statistics.median(extra[x][k]) for k in (0, 1) for x in "AB"))
a = [float(x) for x in sys.argv[1].split() if x != "-"]
b = [float(x) for x in sys.argv[2].split() if x != "-"]
da = [float(x) for x in sys.argv[3].split() if x != "-"]
db = [float(x) for x in sys.argv[4].split() if x != "-"]
if da and db:
    print("median degradation ratio A %.3f, B %.3f" % (statistics.median(da), statistics.median(db)))
if a and b:
    print("median A %.0f msgs/s, B %.0f msgs/s; median of round ratios B/A %.3f"
          % (statistics.median(a), statistics.median(b),
             statistics.median([y / x for x, y in zip(a, b) if x > 0])))
PY
echo "steal time during the rounds: $(steal_pct "$steal0")% (bench/README.md, Caveats)"
