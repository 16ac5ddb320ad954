#!/usr/bin/env bash
# bench-shared.sh — broker-managed delivery benchmarks (docs/push.md, "Benchmarks") in one
# command: starts a standalone broker on a free loopback port with a fresh data directory and a
# one-partition topic, runs `metaq bench shared` against it, stops it.
#
#   scripts/bench-shared.sh                 # all three phases (about 1-2 minutes on 2 cores)
#   scripts/bench-shared.sh --sync          # the broker in sync-flush mode (group commit)
#   scripts/bench-shared.sh -- --shared-phases lateness --json   # extra `metaq bench` flags
#   scripts/bench-shared.sh -- --shared-phases inflight --shared-inflight 5000000
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH=$PATH:/usr/local/go/bin
flush="unflushThreshold=1000
unflushInterval=1000"
while [[ $# -gt 0 ]]; do
	case "$1" in
	--sync) flush="unflushThreshold=0"; shift ;;
	--) shift; break ;;
	*) break ;;
	esac
done
(cd "$ROOT" && go build -o bin/metaq ./tools/metaq)
dir="$(mktemp -d "${TMPDIR:-/tmp}/metaq-bench-shared.XXXXXX")"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
cat >"$dir/server.ini" <<INI
[system]
brokerId=0
hostName=127.0.0.1
bindHost=127.0.0.1
serverPort=$port
dashboardHttpPort=0
dataPath=$dir/data
$flush
# room for --shared-inflight above the default per-window cap (2,000,000)
popMaxInflight=10000000
[zookeeper]
zk.zkEnable=false
[topic=shared1]
numPartitions=1
INI
"$ROOT/bin/metaq" broker -c "$dir/server.ini" >"$dir/broker.log" 2>&1 &
pid=$!
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
for _ in $(seq 100); do
	"$ROOT/bin/metaq" version --broker "127.0.0.1:$port" >/dev/null 2>&1 && break
	sleep 0.1
done
"$ROOT/bin/metaq" bench shared --server "127.0.0.1:$port" --server-pid "$pid" --topic shared1 --count 500000 "$@"
