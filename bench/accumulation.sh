#!/usr/bin/env bash
# bench/accumulation.sh — issue 21's accumulation run on one metaq broker: a backlog larger
# than what stays cached (the page cache is dropped), publishing while a reader drains it cold,
# the disk's sequential read bandwidth in the same run, recovery after kill -9 with that log,
# and startup with 10,000 partitions. See bench/README.md ("Accumulation").
set -euo pipefail

usage() {
	cat <<'EOF'
usage: bench/accumulation.sh [options]

  --backlog N        messages piled up before the measured phases (default 50000000)
  --duration D       length of each publish phase (default 10s)
  --msg-size N       payload bytes (default 100)
  --partitions N     partitions of the startup measurement (default 10000)
  --no-drop-caches   do not drop the page cache (needs root otherwise)
  --build-metaq      rebuild ../bin/metaq (built when missing)
  --keep             keep the data directories (default: removed)
  -h, --help

Runs `metaq bench accumulation` against a broker it starts (standalone, 1 GiB segments,
MetaQ's default async flush), then kill -9 + restart (recovery time, messages after
recovery), then a fresh broker with a topic of --partitions partitions: one message each,
clean restart and kill -9 restart (startup times). Results: bench/results/accumulation-<date>.{json,md}.
Data goes to $TMPDIR (default /tmp): about backlog x (msg-size + 85) bytes.
EOF
}

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
export PATH="$PATH:/usr/local/go/bin"
orig_args=("$@")
backlog=50000000 duration=10s msgsize=100 parts=10000 drop=1 build=0 keep=0
while [[ $# -gt 0 ]]; do
	case "$1" in
	--backlog) backlog="${2:?}"; shift ;;
	--duration) duration="${2:?}"; shift ;;
	--msg-size) msgsize="${2:?}"; shift ;;
	--partitions) parts="${2:?}"; shift ;;
	--no-drop-caches) drop=0 ;;
	--build-metaq) build=1 ;;
	--keep) keep=1 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "accumulation.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
	esac
	shift
done
log() { printf 'accumulation.sh: %s\n' "$*" >&2; }
. "$(dirname "${BASH_SOURCE[0]}")/warm.sh" # once per boot (bench/README.md, Caveats)
warm_memory

metaq="$root/bin/metaq"
if [[ $build == 1 || ! -x $metaq ]]; then
	log "building ../bin/metaq"
	(cd "$root" && go build -o bin/metaq ./tools/metaq)
fi
mkdir -p "$here/results"
stamp="$(date +%Y-%m-%d-%H%M%S)"
json="$here/results/accumulation-$stamp.json"
md="$here/results/accumulation-$stamp.md"
: >"$json"
work="$(mktemp -d "${TMPDIR:-/tmp}/metaq-accum-XXXXXX")"
pid=""
cleanup() {
	if [[ -n $pid ]]; then kill -9 "$pid" 2>/dev/null || true; fi
	if [[ $keep == 0 ]]; then rm -rf "$work"; else log "data kept in $work"; fi
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# write_ini dir port topic-section
write_ini() {
	cat >"$1/server.ini" <<EOF
[system]
brokerId=0
hostName=127.0.0.1
bindHost=127.0.0.1
serverPort=$2
dashboardHttpPort=0
numPartitions=1
dataPath=$1/data

[zookeeper]
zk.zkEnable=false

$3
EOF
}

# ask port request: one request line, prints the first line of the reply body ("" on failure).
ask() {
	local port=$1 req=$2 line body=""
	if { exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null; then
		printf '%s\r\n' "$req" >&3
		if IFS= read -r -t 2 line <&3; then IFS= read -r -t 2 body <&3 || true; fi
		exec 3>&- 3<&-
	fi
	printf '%s' "${body%$'\r'}"
}

# start_broker dir port: starts the broker, waits until it answers `version`, sets pid and
# ready_s (seconds from exec to the first answer).
start_broker() {
	local dir=$1 port=$2 t0
	t0=$(date +%s.%N)
	setsid "$metaq" broker -c "$dir/server.ini" >>"$dir/broker.log" 2>&1 &
	pid=$!
	disown "$pid" 2>/dev/null || true # no "Killed" job notice for the kill -9 below
	until [[ -n $(ask "$port" "version 1") ]]; do
		kill -0 "$pid" 2>/dev/null || { log "broker exited: $(tail -5 "$dir/broker.log")"; exit 1; }
		sleep 0.02
	done
	ready_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')
}

stop_broker() { # clean
	kill -TERM "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
	pid=""
}

kill9_broker() {
	kill -9 "$pid"
	while kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
	pid=""
}

result() { # workload seconds msgs notes
	printf '{"system":"metaq","workload":"%s","msg_size":%s,"msgs":%s,"seconds":%s,"msgs_per_sec":0,"mb_per_sec":0,"notes":"%s"}\n' \
		"$1" "$msgsize" "$3" "$2" "$4" >>"$json"
}

log "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), load $(cut -d' ' -f1-3 /proc/loadavg)"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
steal0=$(steal_mark)

# 1. Accumulation.
a="$work/accum"
mkdir -p "$a"
port=$(free_port)
write_ini "$a" "$port" $'[topic=bench]\nnumPartitions=1'
start_broker "$a" "$port"
log "broker pid $pid on 127.0.0.1:$port, data in $a/data; backlog $backlog x $msgsize B"
dc=()
[[ $drop == 1 ]] && dc=(--drop-caches)
"$metaq" bench accumulation --json --server "127.0.0.1:$port" --server-pid "$pid" --topic bench \
	--msg-size "$msgsize" --duration "$duration" --backlog "$backlog" --data-dir "$a/data" "${dc[@]}" >>"$json"

# 2. Recovery after kill -9 with that log.
before=$(ask "$port" "offset bench g 0 9223372036854775807 2")
sleep 1.5 # past one checkpoint interval (1 s): what a broker that ran for a while has
kill9_broker
start_broker "$a" "$port"
after=$(ask "$port" "offset bench g 0 9223372036854775807 3")
rec=$(grep -o 'recovery: done.*' "$a/broker.log" | tail -1 | tr -d '"' | cut -c1-300)
logbytes=$(du -sb "$a/data/commitlog" | cut -f1)
log "recovery after kill -9: ready in ${ready_s}s, partition 0 max offset $before before, $after after"
result recovery-kill9 "$ready_s" "${after:-0}" "kill -9 with $before messages in the log (commit-log files $logbytes bytes, preallocated segments included), restart until the broker answers version: ${ready_s}s; max offset $before before, $after after; broker log: $rec"
stop_broker
[[ $keep == 0 ]] && rm -rf "$a/data"

# 3. Startup with many partitions.
s="$work/parts"
mkdir -p "$s"
port=$(free_port)
write_ini "$s" "$port" $'[topic=bench]\nnumPartitions=1\n\n[topic=bench-p]\nnumPartitions='"$parts"
start_broker "$s" "$port"
fresh=$ready_s
"$metaq" bench partitions --server "127.0.0.1:$port" --partitions "$parts" --duration 1s >/dev/null 2>&1 ||
	log "priming the partitions failed (see $s/broker.log)"
stop_broker
start_broker "$s" "$port"
clean=$ready_s
sleep 1.5
kill9_broker
start_broker "$s" "$port"
crash=$ready_s
log "startup with $parts partitions: fresh ${fresh}s, clean restart ${clean}s, after kill -9 ${crash}s"
result startup-partitions "$clean" "$parts" "$parts partitions of one topic, each holding messages: fresh data dir ${fresh}s, restart after SIGTERM ${clean}s, restart after kill -9 ${crash}s (until the broker answers version)"
result startup-partitions-kill9 "$crash" "$parts" "restart after kill -9 with $parts partitions: ${crash}s"
stop_broker

{
	echo "# Accumulation $stamp"
	echo
	echo "- command: \`bench/accumulation.sh ${orig_args[*]}\`"
	echo "- machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), load average $load_before before / $(cut -d' ' -f1-3 /proc/loadavg) after, steal time $(steal_pct "$steal0")% (bench/README.md, Caveats)"
	echo "- metaq: $("$metaq" version 2>/dev/null | head -1), broker standalone, async flush (unflushThreshold 1000), 1 GiB segments"
	echo
	python3 - "$json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    rate = r.get("msgs_per_sec", 0)
    head = f"- **{r['workload']}**: "
    if r.get("error"):
        print(head + "FAILED: " + r["error"]); continue
    if rate:
        head += f"{rate:,.0f} msg/s"
        if r.get("mb_per_sec"): head += f", {r['mb_per_sec']:.0f} MB/s"
        if r.get("degradation_ratio"): head += f", {r['degradation_ratio']:.2f} of {r['baseline_msgs_per_sec']:,.0f} msg/s without a reader"
        if r.get("server_cpu_us_per_msg"): head += f", server CPU {r['server_cpu_us_per_msg']:.2f} µs/msg"
    else:
        head += f"{r['seconds']:.2f} s"
    print(head + " — " + r.get("notes", ""))
PY
} >"$md"
cat "$md"
log "results: $json and $md"
