# bench/standalone.sh — sourced by the bench scripts that run a broker of their own.
#
# standalone_broker BIN DIR PORT SYNC PARTITIONS writes DIR/server.ini for a standalone broker
# (no ZooKeeper, 127.0.0.1:PORT, topic `bench` with PARTITIONS partitions; SYNC=1 sync flush, else
# MetaQ's default async flush), starts BIN's broker with its log in DIR/broker.log, sets
# BROKER_PID, and waits until it answers `version` (asked with $PROBE_BIN, default BIN: an old
# broker's own CLI may not have `version --broker`). $BROKER_ARGS adds flags to the broker's
# command line (bench/profile.sh: --cpuprofile).
# STANDALONE_INI, if set, is appended to the server.ini (more [topic=…] sections).
# spread_ini WORKLOAD prints the sections topics-1000 / partitions-10000 need (bench-0 … bench-999,
# bench-p with 10,000 partitions), nothing for the other workloads.
# free_port prints a free TCP port on 127.0.0.1.
# stop_broker PID stops a broker started here: SIGTERM, up to 30 s for it to exit (a broker run
# with --cpuprofile writes its profile then), SIGKILL if it has not, and reaps it.

spread_ini() {
	case "$1" in
	topics | topics-1000) for i in $(seq 0 999); do printf '\n[topic=bench-%d]\nnumPartitions=1\n' "$i"; done ;;
	partitions | partitions-10000) printf '\n[topic=bench-p]\nnumPartitions=10000\n' ;;
	esac
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

stop_broker() {
	local pid="$1"
	kill "$pid" 2>/dev/null || true
	for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

standalone_broker() {
	local bin="$1" dir="$2" port="$3" sync="$4" parts="$5"
	local probe="${PROBE_BIN:-$bin}" flush=$'unflushThreshold=1000\nunflushInterval=1000'
	[[ "$sync" == 1 ]] && flush="unflushThreshold=0"
	mkdir -p "$dir"
	cat >"$dir/server.ini" <<INI
[system]
brokerId=0
serverPort=$port
dashboardHttpPort=0
hostName=127.0.0.1
bindHost=127.0.0.1
dataPath=$dir/data
$flush

[zookeeper]
zk.zkEnable=false

[topic=bench]
numPartitions=$parts
${STANDALONE_INI:-}
INI
	# shellcheck disable=SC2086 # BROKER_ARGS: extra broker flags, word-split on purpose
	"$bin" broker -c "$dir/server.ini" ${BROKER_ARGS:-} >"$dir/broker.log" 2>&1 &
	BROKER_PID=$!
	for _ in $(seq 200); do
		"$probe" version --broker "127.0.0.1:$port" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "standalone_broker: $bin does not answer on 127.0.0.1:$port (log: $dir/broker.log)" >&2
}
