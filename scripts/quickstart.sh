#!/usr/bin/env bash
# scripts/quickstart.sh — from a fresh clone to a running metaq in one command: build, ZooKeeper,
# one broker, a message produced and consumed, and what to try next.
set -euo pipefail

# shellcheck source=lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

usage() {
	cat <<EOF
Usage: $(basename "$0") [--help]

Builds bin/metaq, starts ZooKeeper on 127.0.0.1:2181 (scripts/zk.sh: installs Debian's
zookeeper package when missing) and one broker with conf/server.ini on 127.0.0.1:8123
(scripts/broker.sh; data in run/data), then sends a message to topic "test" and reads it back
with the metaq CLI. Safe to run again: what already runs is reused, except a broker that runs
an older bin/metaq than the one just built, which is restarted.

Stop everything with:  scripts/broker.sh stop && scripts/zk.sh stop
EOF
}

case "${1:-}" in
-h | --help | help)
	usage
	exit 0
	;;
"") ;;
*)
	echo "quickstart.sh: unexpected argument '$1'" >&2
	usage >&2
	exit 2
	;;
esac

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

cd "$PROJECT_ROOT"
CONF="$PROJECT_ROOT/conf/server.ini"
PORT="$(ini_get "$CONF" system serverPort 8123)"

step "Building bin/metaq"
ensure_go
build_metaq force
"$METAQ_BIN" version

step "Starting ZooKeeper on 127.0.0.1:2181 (scripts/zk.sh start)"
ZK_PORT=2181 "$SCRIPT_DIR/zk.sh" start

step "Starting a broker on 127.0.0.1:$PORT (scripts/broker.sh start conf/server.ini)"
# A broker left running by an earlier quickstart is restarted when bin/metaq changed since.
BROKER_RESTART_STALE=1 "$SCRIPT_DIR/broker.sh" start "$CONF"

export METAQ_ZK=127.0.0.1:2181
# The broker registers its topics in ZooKeeper right after it starts.
registered=0
for _ in $(seq 1 300); do
	if "$METAQ_BIN" topics describe test >/dev/null 2>&1; then
		registered=1
		break
	fi
	sleep 0.1
done
if ((registered == 0)); then
	echo "quickstart.sh: the broker did not register topic 'test' in ZooKeeper 127.0.0.1:2181 within 30s;" >&2
	echo "quickstart.sh: zk.zkConnect in conf/server.ini is $(ini_get "$CONF" zookeeper zk.zkConnect); the broker's log says:" >&2
	tail -n 15 "$PROJECT_ROOT/run/broker-$PORT.log" >&2 || true
	exit 1
fi

step "The cluster as ZooKeeper sees it (metaq brokers, metaq topics)"
"$METAQ_BIN" brokers
echo
"$METAQ_BIN" topics

step "Producing a message (metaq produce)"
since_ms=$(now_ms)
body="hello from quickstart at $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "\$ metaq produce --topic test --message \"$body\" --key quickstart"
"$METAQ_BIN" produce --topic test --message "$body" --key quickstart
echo "(msgId, <brokerId>-<partition>, queue offset)"

step "Consuming it (metaq consume, from the time just before the send)"
echo "\$ metaq consume --topic test --from @$since_ms --count 1 --format verbose"
out="$("$METAQ_BIN" consume --topic test --from "@$since_ms" --count 1 --timeout 15s --format verbose)"
printf '%s\n' "$out"
if ! grep -qF "$body" <<<"$out"; then
	echo "quickstart.sh: the message did not come back" >&2
	exit 1
fi

step "The topic's partitions and offsets (metaq topics describe test)"
"$METAQ_BIN" topics describe test

nc_hint=""
if ! command -v nc >/dev/null 2>&1; then
	nc_hint="   (nc is not installed: apt-get install netcat-openbsd, or use telnet)"
fi
cat <<EOF

$(printf '\033[1m')metaq is running.$(printf '\033[0m')  ZooKeeper 127.0.0.1:2181, broker 0 on 127.0.0.1:$PORT (log run/broker-$PORT.log, data run/data)

Talk to the broker by hand — MetaQ's text protocol:$nc_hint

  \$ nc -C localhost $PORT
  put test 0 5 0 1              <- publish 5 bytes to partition 0 of topic "test", opaque 1
  hello
  result 200 … 1                <- msgId, partition, queue offset
  get test g 0 0 1048576 2      <- read partition 0 from offset 0, up to 1 MiB, opaque 2
  value … 2                     <- the stored records (binary header + "hello")
  version
  quit

The CLI (bin/metaq; add it to PATH: export PATH=\$PATH:$PROJECT_ROOT/bin):

  bin/metaq produce -t test -m 'order 42' --tag paid --key o-42
  seq 1 1000 | bin/metaq produce -t test --quiet
  bin/metaq consume -t test -g demo --count 10          # a consumer group: offsets in ZooKeeper
  bin/metaq groups describe demo                        # owners, committed offsets, lag
  bin/metaq offsets reset -g demo -t test --to -10m     # replay the last ten minutes
  bin/metaq query key test o-42
  bin/metaq stats 127.0.0.1:$PORT topics
  bin/metaq --help

More brokers: scripts/cluster.sh up 3 (stop this one first: it uses port $PORT too).
Run the tests:  scripts/test.sh
Stop:           scripts/broker.sh stop && scripts/zk.sh stop
EOF
