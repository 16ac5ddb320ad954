#!/usr/bin/env bash
# bench/ha.sh — what replication costs (docs/replication.md): `metaq bench produce` (100-byte
# messages, 1 connection, window 1000) against a master alone and against a master with one slave,
# interleaved, in both modes:
#
#   async replication (syncReplicas=0, async flush)  vs  unreplicated async publish   goal >= 90%
#   syncReplicas=1 (sync flush, durable on the slave) vs  unreplicated sync flush      goal >= 60%
#
# and the slave's lag p99 during the syncReplicas=1 runs (the master's
# replication_slave0_lag_ms, sampled every 100 ms; goal <= 50 ms). Each run also reports the CPU
# time per message of the master and of the slave (/proc/<pid>/stat utime+stime over the run): it
# barely moves with the machine's load, unlike the rates.
#
# Usage: bench/ha.sh            (ROUNDS=2 DUR=10s MSG=100 WINDOW=1000 by default; ~2 minutes)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS="${ROUNDS:-2}"
DUR="${DUR:-10s}"
MSG="${MSG:-100}"
WINDOW="${WINDOW:-1000}"
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

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# start_broker <name> <port> <sync 0|1> <extra ini>: starts, waits for `version`.
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
	"$BIN" broker -c "$T/$name/server.ini" --log-level warn >"$T/$name/log" 2>&1 &
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

# run <label> <sync 0|1> <replicated 0|1> → prints "msgs/s master_us/msg slave_us/msg"
run() {
	local label=$1 sync=$2 repl=$3 mp sp extra="" mpid spid=""
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
	local lagf="$T/lag-$label"
	: >"$lagf"
	local sampler=""
	if [[ $repl == 1 && $sync == 1 ]]; then
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
	local out rate msgs m0 m1 s0=0 s1=0
	m0=$(cputicks "$mpid")
	[[ -n $spid ]] && s0=$(cputicks "$spid")
	out=$("$BIN" bench produce --server "127.0.0.1:$mp" --topic bench --msg-size "$MSG" --conns 1 \
		--window "$WINDOW" --duration "$DUR" --json 2>/dev/null)
	m1=$(cputicks "$mpid")
	[[ -n $spid ]] && s1=$(cputicks "$spid")
	rate=$(jq -r '.. | .msgs_per_sec? // empty' <<<"$out" | head -1)
	msgs=$(jq -r '.. | .msgs? // empty' <<<"$out" | head -1)
	if [[ -n $sampler ]]; then kill "$sampler" 2>/dev/null || true; wait "$sampler" 2>/dev/null || true; fi
	stop_all
	python3 -c "
hz=$(getconf CLK_TCK); n=${msgs:-0} or 1
print('${rate:-0}', round(($m1-$m0)/hz*1e6/n, 3), round(($s1-$s0)/hz*1e6/n, 3) if '$spid' else '-')"
}

p99() { sort -n "$1" | awk '{a[NR]=$1} END {if (NR==0) {print "n/a"; exit} i=int(NR*0.99); if (i<1) i=1; print a[i]}'; }

declare -A sum mc sc
for r in $(seq 1 "$ROUNDS"); do
	for cfg in "async-unrep 0 0" "async-repl 0 1" "sync-unrep 1 0" "sync-repl 1 1"; do
		set -- $cfg
		read -r v mcpu scpu < <(run "$1" "$2" "$3")
		printf 'round %d  %-12s %12s msg/s   CPU per message: master %s µs, slave %s µs\n' "$r" "$1" "$v" "$mcpu" "$scpu"
		sum[$1]=$(python3 -c "print(${sum[$1]:-0} + ${v:-0})")
		mc[$1]+="$mcpu "
		sc[$1]+="$scpu "
		[[ $1 == sync-repl ]] && cat "$T/lag-sync-repl" >>"$T/lag-all" 2>/dev/null || true
	done
done
ratio() { python3 -c "a=${sum[$1]:-0}; b=${sum[$2]:-0}; print('%.0f%%' % (100*a/b) if b else 'n/a')"; }
echo
echo "async replication / unreplicated async publish: $(ratio async-repl async-unrep)   (goal >= 90%)"
echo "syncReplicas=1 durable / unreplicated sync flush: $(ratio sync-repl sync-unrep)   (goal >= 60%)"
med() { python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[1:] if x!='-']; print(round(statistics.median(v),3) if v else '-')" $1; }
for k in async-unrep async-repl sync-unrep sync-repl; do
	echo "CPU per message, median ($k): master $(med "${mc[$k]}") µs, slave $(med "${sc[$k]}") µs"
done
echo "slave lag p99 under syncReplicas=1 load: $(p99 "$T/lag-all" 2>/dev/null || echo n/a) ms   (goal <= 50 ms)"
