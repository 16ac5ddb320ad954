#!/usr/bin/env bash
# scripts/zk-dump.sh — print a ZooKeeper subtree through zkCli.sh, one node per line, sorted:
#
#   <E|P> <path>[ <data>]        E = ephemeral, P = persistent; newlines in data shown as \n
#
# Usage: scripts/zk-dump.sh [path]     (default /meta)
# Server: $ZK_SERVER, else 127.0.0.1:${ZK_PORT:-2181}. zkmeta.FormatDump prints the same format,
# which lets the tests check that what metaq writes reads back identically through zkCli.sh.
set -euo pipefail

if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
	sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
	exit 0
fi
ROOT_PATH="${1:-/meta}"
ZK_SERVER="${ZK_SERVER:-127.0.0.1:${ZK_PORT:-2181}}"
ZKCLI="${ZKCLI:-/usr/share/zookeeper/bin/zkCli.sh}"

if [[ ! -x "$ZKCLI" ]]; then
	echo "zk-dump.sh: $ZKCLI not found; run scripts/zk.sh start once (it installs Debian's zookeeper)" >&2
	exit 1
fi
host="${ZK_SERVER%%,*}"
if ! (exec 3<>"/dev/tcp/${host%:*}/${host##*:}") 2>/dev/null; then
	echo "zk-dump.sh: no ZooKeeper answers at $host" >&2
	exit 1
fi
export CLIENT_JVMFLAGS="${CLIENT_JVMFLAGS:-} -XX:TieredStopAtLevel=1 -Xshare:auto"
cli() {
	if command -v timeout >/dev/null 2>&1; then
		timeout 120 "$ZKCLI" -server "$ZK_SERVER" "$@" 2>/dev/null
	else
		"$ZKCLI" -server "$ZK_SERVER" "$@" 2>/dev/null
	fi
}

paths="$(cli ls -R "$ROOT_PATH" | grep '^/' | LC_ALL=C sort -u || true)"
if [[ -z "$paths" ]]; then
	echo "zk-dump.sh: $ROOT_PATH does not exist on $ZK_SERVER" >&2
	exit 1
fi

# One zkCli.sh for every node: "get -s" prints the data, then the stat ending in numChildren.
printf 'get -s %s\n' $paths | cli | awk -v paths="$paths" '
BEGIN { n = split(paths, p, "\n"); i = 0; stats = 0; data = "" }
$0 == "WATCHER::" || /^WatchedEvent state:/ { next }
stats == 0 && /^cZxid = / { stats = 1; next }
stats == 0 { if ($0 != "") data = (data == "" ? $0 : data "\\n" $0); next }
/^ephemeralOwner = / { owner = $3; next }
/^dataLength = / { len = $3 + 0; next }
/^numChildren = / {
	i++
	line = (owner == "0x0" ? "P " : "E ") p[i]
	if (len > 0) line = line " " data
	print line
	stats = 0; data = ""; owner = ""; len = 0
}
END { if (i != n) { printf "zk-dump.sh: the tree changed while dumping (%d of %d nodes); try again\n", i, n > "/dev/stderr"; exit 2 } }
' | LC_ALL=C sort -k2,2
