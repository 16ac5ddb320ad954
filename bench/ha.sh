#!/usr/bin/env bash
# bench/ha.sh — what replication costs (docs/replication.md, "Benchmarks" and "Cost"):
# `metaq bench produce` (100-byte messages, 1 connection, window 1000) against a master alone (A)
# and against a master with one slave (B), interleaved A B A B … in each mode:
#
#   async:  syncReplicas=0, async flush on both  vs  the master alone, async flush   goal >= 90%
#   sync:   syncReplicas=1, sync flush on both   vs  the master alone, sync flush    goal >= 60%
#
# Every run starts its brokers afresh (empty data directories) and reports its rate and the CPU
# time per acknowledged message of each process: the client (what `metaq bench` reports of
# itself), the master and the slave (/proc/<pid>/stat utime+stime over the run). The result is
# the median of the per-pair ratios (each B against the A run just before it, so that a swing of
# the machine's load hits both), and the CPU ratio: client + master [+ slave] µs per message alone
# divided by the same sum replicated. On 2 shared cores the CPU ratio is what the rate ratio tends
# to when the machine is quiet (the slave's and the master's stream CPU are taken from the
# producer's); it barely moves with the load, unlike the rates. The slave's lag is measured in
# the replicated runs of both modes (goal p99 <= 50 ms under both loads; docs/replication.md, "The
# slave's lag"): the replication latency of every send (the master's replication_slave0_latency_hist,
# write -> durable on the slave, merged over the runs: thousands of samples), with a stall probe
# beside each replicated run with STALL=1 (a thread that only sleeps: how late the machine woke it), and the
# gauge replication_slave0_lag_ms polled every 100 ms on one open connection (~20 samples a run).
# In sync mode it also prints the master's group-commit rounds of each run, alone and replicated
# (count, messages per round, mean fsync µs), and the slave's fdatasyncs (count, mean µs).
#
# Usage: bench/ha.sh            (PAIRS=3 DUR=5s MSG=100 WINDOW=1000 MODES="async sync"; ~110 s)
#        MODES=async PAIRS=5 bench/ha.sh
#        STALL=1 MODES=async PAIRS=5 bench/ha.sh   (the lag with a stall probe beside it; its CPU
#                                                   lowers the replicated rate: not for the ratio)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PAIRS="${PAIRS:-${ROUNDS:-3}}"
DUR="${DUR:-5s}"
MSG="${MSG:-100}"
WINDOW="${WINDOW:-1000}"
MODES="${MODES:-async sync}"
BIN="${METAQ_BIN:-$(mktemp -d)/metaq}"
T="$(mktemp -d /tmp/metaq-ha-bench.XXXXXX)"
PIDS=()

cleanup() {
	for p in "${PIDS[@]:-}"; do
		[[ -n "$p" ]] && kill "$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	rm -rf "$T"
}
trap cleanup EXIT

[[ -x "$BIN" ]] || (cd "$ROOT" && go build -o "$BIN" ./tools/metaq)
. "$ROOT/bench/warm.sh" # a fresh VM charges the first touch of each page (bench/README.md, Caveats)
warm_memory

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# start_broker <name> <port> <sync 0|1> <extra ini>: starts, waits for `stats`.
start_broker() {
	local name=$1 port=$2 sync=$3 extra=$4 flush
	if [[ $sync == 1 ]]; then flush="unflushThreshold=0"; else flush="unflushThreshold=1000
unflushInterval=1000"; fi
	mkdir -p "$T/$name"
	cat >"$T/$name/server.ini" <<EOF
[system]
brokerId=1
hostName=127.0.0.1
bindHost=127.0.0.1
serverPort=$port
dashboardHttpPort=0
dataPath=$T/$name/data
$flush
$extra
[zookeeper]
zk.zkEnable=false
[topic=bench]
numPartitions=4
EOF
	local prof=()
	[[ -n ${PROFILE:-} ]] && prof=(--cpuprofile "$PROFILE/$name-$RUNLABEL.prof")
	"$BIN" broker -c "$T/$name/server.ini" --log-level warn "${prof[@]}" >"$T/$name/log" 2>&1 &
	PIDS+=($!)
	for _ in $(seq 1 300); do
		if "$BIN" stats "127.0.0.1:$port" >/dev/null 2>&1; then return 0; fi
		sleep 0.1
	done
	echo "broker $name did not start:" >&2
	cat "$T/$name/log" >&2
	exit 1
}

stop_all() {
	for p in "${PIDS[@]:-}"; do
		[[ -n "$p" ]] && kill "$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	PIDS=()
	rm -rf "$T"/m "$T"/s
}

cputicks() { awk '{print $14+$15}' "/proc/$1/stat" 2>/dev/null || echo 0; }

# run <mode async|sync> <replicated 0|1> → one line "rate client_us master_us slave_us"
run() {
	local mode=$1 repl=$2 sync=0 mp sp extra="" mpid spid=""
	[[ $mode == sync ]] && sync=1
	RUNLABEL="$mode-$repl"
	mp=$(free_port)
	if [[ $repl == 1 && $sync == 1 ]]; then extra="[replication]
syncReplicas=1
replicaTimeoutMs=10000"; fi
	start_broker m "$mp" "$sync" "$extra"
	mpid=${PIDS[-1]}
	if [[ $repl == 1 ]]; then
		sp=$(free_port)
		start_broker s "$sp" "$sync" "[slave]
slaveId=0
[replication]
masterAddr=127.0.0.1:$mp"
		spid=${PIDS[-1]}
	fi
	local lagf="$T/lag-$mode"
	local sampler=""
	if [[ $repl == 1 ]]; then
		# A light sampler: one `stats` every 100 ms on one connection kept open (bash's /dev/tcp,
		# no process started per sample: a Go binary's start costs tens of ms of CPU).
		(exec 3<>"/dev/tcp/127.0.0.1/$mp" || exit 0
		while :; do
			printf 'stats\r\n' >&3
			while IFS= read -r -t 5 line <&3; do
				line=${line%$'\r'}
				[[ $line == END ]] && break
				[[ $line == replication_slave0_lag_ms* ]] && echo "${line##* }" >>"$lagf"
			done
			sleep 0.1
		done) &
		sampler=$!
	fi
	local out m0 m1 s0=0 s1=0
	m0=$(cputicks "$mpid")
	[[ -n $spid ]] && s0=$(cputicks "$spid")
	local probe=()
	# STALL=1: a stall probe beside each replicated run (the lag's context). Off by default: on this
	# VM its ~770 wake-ups a second cost ~0.4 µs per message of client CPU at ~250k msg/s (measured,
	# loaded), which would be charged to the replicated side of the ratio.
	[[ $repl == 1 && ${STALL:-0} == 1 ]] && probe=(--stall-probe)
	out=$("$BIN" bench produce --server "127.0.0.1:$mp" --server-pid "$mpid" --topic bench --msg-size "$MSG" \
		--conns 1 --window "$WINDOW" --duration "$DUR" --json "${probe[@]}" 2>/dev/null)
	m1=$(cputicks "$mpid")
	[[ -n $spid ]] && s1=$(cputicks "$spid")
	if [[ $sync == 1 ]]; then
		# The master's group-commit rounds over the run (count, mean fsync µs): with the
		# messages acknowledged, the round size (docs/replication.md, "Cost").
		"$BIN" stats "127.0.0.1:$mp" 2>/dev/null | awk '$1=="group_commits"{g=$2} $1=="avg_fsync_us"{a=$2} END{if (g!="") print g, a}' >"$T/rounds.tmp" || true
	fi
	if [[ -n $sampler ]]; then kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true; fi
	if [[ -n $spid ]]; then
		# The replication latency of every send of the run, as the master's histogram
		# (replication_slave0_latency_hist "ms:count,…"; docs/replication.md, "The slave's lag").
		"$BIN" stats "127.0.0.1:$mp" 2>/dev/null | awk '$1=="replication_slave0_latency_hist"{h=$2} $1=="replication_slave0_latency_max_ms"{m=$2} END{if (h!="") print h, m}' >>"$T/lathist-$mode" || true
		OUT="$out" python3 -c "
import json, os
o = json.loads(os.environ['OUT'])
print(o.get('stall_p99_us', 0), o.get('stall_max_us', 0))" >>"$T/stall-$mode" || true
		# The slave's fdatasyncs over the run (count, mean µs): the F in the lag's bound
		# (docs/replication.md, "The slave's lag").
		"$BIN" stats "127.0.0.1:$sp" 2>/dev/null | awk '$1=="fsyncs"{f=$2} $1=="avg_fsync_us"{a=$2} END{if (f!="") print f, a}' >>"$T/fsync-$mode" || true
	fi
	if [[ -s "$T/rounds.tmp" ]]; then
		read -r g a <"$T/rounds.tmp"
		OUT="$out" python3 -c "
import json, os
o = json.loads(os.environ['OUT'])
print('$([[ $repl == 1 ]] && echo replicated || echo alone)', $g, round(o.get('msgs', 0) / max($g, 1)), $a)" >>"$T/rounds-$mode" || true
		rm -f "$T/rounds.tmp"
	fi
	stop_all
	OUT="$out" python3 -c "
import json, os, re
o = json.loads(os.environ['OUT'])
n = o.get('msgs') or 1
hz = $(getconf CLK_TCK)
m = re.search(r'client CPU ([0-9.]+) µs/msg', o.get('notes', ''))
print(o.get('msgs_per_sec', 0), m.group(1) if m else 'nan', round(($m1-$m0)/hz*1e6/n, 3),
      round(($s1-$s0)/hz*1e6/n, 3) if '$spid' else 0)"
}

p99() { sort -n "$1" 2>/dev/null | awk '{a[NR]=$1} END {if (NR==0) {print "n/a"; exit} i=int(NR*0.99); if (i<1) i=1; print a[i]}'; }
# lagdist <file>: "p50 / p90 / max over n samples" (context for the p99)
lagdist() { sort -n "$1" 2>/dev/null | awk '{a[NR]=$1} END {if (NR==0) {print "n/a"; exit} m=int(NR*0.5); n=int(NR*0.9); if (m<1) m=1; if (n<1) n=1; printf "p50 %s / p90 %s / max %s ms over %d samples", a[m], a[n], a[NR], NR}'; }

RES="$T/results"
: >"$RES"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
steal0=$(steal_mark)
for mode in $MODES; do
	for r in $(seq 1 "$PAIRS"); do
		for repl in 0 1; do
			read -r rate cl ms sl < <(run "$mode" "$repl")
			label=alone
			[[ $repl == 1 ]] && label=replicated
			printf '%-5s pair %d  %-10s %9s msg/s   CPU µs/msg: client %s  master %s  slave %s\n' \
				"$mode" "$r" "$label" "$rate" "$cl" "$ms" "$([[ $repl == 1 ]] && echo "$sl" || echo -)"
			echo "$mode $r $repl $rate $cl $ms $sl" >>"$RES"
		done
	done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg); steal time during the runs: $(steal_pct "$steal0")% (above a few percent the VM's cores are shared: bench/README.md, Caveats)"
echo
python3 - "$RES" <<'EOF'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
goal = {'async': 90, 'sync': 60}
for mode in ('async', 'sync'):
    rs = [r for r in rows if r[0] == mode]
    if not rs:
        continue
    a = {int(r[1]): r for r in rs if r[2] == '0'}
    b = {int(r[1]): r for r in rs if r[2] == '1'}
    pairs = sorted(set(a) & set(b))
    ratios = [float(b[p][3]) / float(a[p][3]) for p in pairs if float(a[p][3]) > 0]
    med = lambda xs: st.median(xs) if xs else float('nan')
    ca = [med([float(r[i]) for r in a.values()]) for i in (4, 5)]
    cb = [med([float(r[i]) for r in b.values()]) for i in (4, 5, 6)]
    print(f"{mode}: replicated / alone, median of {len(ratios)} pairs: {100*med(ratios):.0f}%"
          f"  (pairs: {' '.join(f'{100*x:.0f}%' for x in ratios)}; goal >= {goal[mode]}%)")
    print(f"{mode}: rate medians: alone {med([float(r[3]) for r in a.values()]):.0f}, replicated {med([float(r[3]) for r in b.values()]):.0f} msg/s")
    print(f"{mode}: CPU µs/msg medians: alone client {ca[0]:.3f} + master {ca[1]:.3f} = {sum(ca):.3f};"
          f" replicated client {cb[0]:.3f} + master {cb[1]:.3f} + slave {cb[2]:.3f} = {sum(cb):.3f};"
          f" CPU ratio {100*sum(ca)/sum(cb):.0f}%")
EOF
for mode in $MODES; do
	python3 - "$mode" "$T/lathist-$mode" "$T/stall-$mode" <<'EOF'
import os, sys
mode, hist, stall = sys.argv[1:4]
counts, mx = {}, 0
try:
    for line in open(hist):
        f = line.split()
        if len(f) < 2 or f[0] == '-':
            continue
        mx = max(mx, int(f[1]))
        for kv in f[0].split(','):
            lo, c = kv.split(':')
            counts[int(lo)] = counts.get(int(lo), 0) + int(c)
except FileNotFoundError:
    pass
n = sum(counts.values())
def q(p):
    rank, seen = max(1, round(p * n)), 0
    for lo in sorted(counts):
        seen += counts[lo]
        if seen >= rank:
            return lo
if n:
    print(f"{mode}: replication latency of every send, write -> durable on the slave (all replicated runs merged, {n} sends):"
          f" p50 {q(.5)} / p90 {q(.9)} / p99 {q(.99)} / p99.9 {q(.999)} / max {mx} ms   (goal: p99 <= 50 ms)")
    st = [l.split() for l in open(stall) if l.strip()] if os.path.exists(stall) else []
    if st and any(float(a) > 0 for a, b in st):
        print(f"{mode}: stall probe (a thread that only sleeps 1.3 ms, beside each replicated run): woke late by p99 "
              + ' '.join(f"{float(a)/1000:.1f}" for a, b in st) + " ms, max " + ' '.join(f"{float(b)/1000:.0f}" for a, b in st) + " ms per run")
EOF
	echo "$mode: the lag gauge sampled every 100 ms (age of the oldest unconfirmed byte): p99 $(p99 "$T/lag-$mode") ms   ($(lagdist "$T/lag-$mode"))"
	[[ ! -s "$T/fsync-$mode" ]] || echo "$mode: the slave's fdatasyncs per run (count, mean µs): $(tr '\n' ';' <"$T/fsync-$mode")"
	if [[ -s "$T/rounds-$mode" ]]; then # sync mode only (an && list would end the script with 1 under set -e)
		echo "$mode: the master's group-commit rounds per run (count, messages per round, mean fsync µs): $(tr '\n' ';' <"$T/rounds-$mode")"
	fi
done
