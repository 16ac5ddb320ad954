#!/usr/bin/env bash
# bench/syncab.sh — durable (sync-flush) puts, an older broker against this
# checkout's, in interleaved pairs: a fresh standalone broker with
# unflushThreshold=0 per run, then
#   metaq bench tx --sync --conns 4 --window 64 --tx-phases plain
# with this checkout's client for both. The order inside a pair alternates
# (old,new then new,old): on this disk the second run of a pair is faster,
# whichever broker it is. Prints each run, then the medians of the pairs'
# ratios new/old (msgs/s and broker CPU µs/msg) for each order and overall.
#
# usage: bench/syncab.sh [OLD_REV (d16a6b1)] [PAIRS (10)] [DURATION (5s)] [PORT (20510)]
set -euo pipefail
old_rev=${1:-d16a6b1} pairs=${2:-10} dur=${3:-5s} port=${4:-20510}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$PATH:/usr/local/go/bin"
work=$(mktemp -d /tmp/syncab.XXXX)
trap 'rm -rf "$work"; git -C "$root" worktree remove --force "$work/old-src" >/dev/null 2>&1 || true' EXIT
git -C "$root" worktree add -q --detach "$work/old-src" "$old_rev"
(cd "$work/old-src" && go build -o "$work/metaq.old" ./tools/metaq)
(cd "$root" && go build -o "$work/metaq.new" ./tools/metaq)
client="$work/metaq.new"
. "$root/bench/standalone.sh"

run() { # which -> prints "msgs/s cpu"
	local bin="$work/metaq.$1" d="$work/b"
	rm -rf "$d"
	PROBE_BIN="$client" standalone_broker "$bin" "$d" "$port" 1 1
	local pid=$BROKER_PID
	local out
	out=$("$client" bench tx --sync --conns 4 --window 64 --tx-phases plain --duration "$dur" \
		--server 127.0.0.1:$port --server-pid $pid --topic bench --json 2>/dev/null | grep '"tx-plain"' || true)
	kill $pid; wait $pid 2>/dev/null || true
	python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(r["msgs_per_sec"], r.get("server_cpu_us_per_msg",0))' "$out"
}

results="$work/results"
for i in $(seq "$pairs"); do
	order="old new"; ((i % 2 == 0)) && order="new old"
	for x in $order; do
		read -r rate cpu < <(run $x)
		echo "pair $i $x: $rate msg/s, broker $cpu µs/msg" | tee -a "$results"
		echo "$i $x $rate $cpu" >>"$results.raw"
	done
done
python3 - "$results.raw" <<'PY'
import sys, statistics as st
runs = {}
for line in open(sys.argv[1]):
    i, x, r, c = line.split()
    runs.setdefault(int(i), {})[x] = (float(r), float(c))
def show(label, keys):
    rr = [runs[i]["new"][0] / runs[i]["old"][0] for i in keys]
    cr = [runs[i]["new"][1] / runs[i]["old"][1] for i in keys if runs[i]["old"][1] > 0]
    print(f"{label}: {len(rr)} pairs, new/old msgs/s median {st.median(rr):.2f}, broker CPU µs/msg median {st.median(cr):.2f}")
ks = sorted(runs)
show("old first", [i for i in ks if i % 2 == 1])
show("new first", [i for i in ks if i % 2 == 0])
show("all", ks)
PY
