#!/usr/bin/env bash
# scripts/zk.sh — a standalone ZooKeeper on loopback for metaq developers, tests and users.
#
# Usage: scripts/zk.sh start|stop|restart|status|cli [zkCli args…] [--help]
#
# Uses Debian's `zookeeper` package (installed on demand, Java 17 runtime). Everything the server
# writes (config, data, logs, pid) lives under run/zk-<port>/ in the project, or under $ZK_DIR.
set -euo pipefail

# shellcheck source=lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

usage() {
	cat <<EOF
Usage: $(basename "$0") start|stop|restart|status|cli [args…]

  start     start a standalone ZooKeeper on \$ZK_HOST:\$ZK_PORT in the background and wait until it
            answers ruok/srvr (no-op when it is already running)
  stop      stop the server started by this script (by its recorded pid) and wait for it to exit
            (no-op when it is not running)
  restart   stop, then start
  status    print whether it runs and its srvr summary; exit 0 running, 3 not running, 1 broken
  cli       run zkCli.sh against it, e.g. "$(basename "$0") cli ls -R /meta" (interactive without args)

Environment (defaults in brackets):
  ZK_PORT            client port [2181]
  ZK_HOST            address the client port binds to [127.0.0.1]
  ZK_DIR             config/data/logs/pid directory [<project>/run/zk-\$ZK_PORT]
                     (point it at a tmpfs, e.g. /dev/shm/zk-test, for fast tests)
  ZK_TICK_MS         tickTime; sessions may last 2..20 ticks [2000]; tests use 500
  ZK_FORCE_SYNC      yes|no — fsync the transaction log [yes]; "no" for test speed
  ZK_PREALLOC_KB     transaction log preallocation [65536]; tests use e.g. 4096
  ZK_MIN_SESSION_MS  minSessionTimeout [2 × tick]
  ZK_MAX_SESSION_MS  maxSessionTimeout [20 × tick]
  ZK_MAX_CLIENT_CNXNS  connections per client IP, 0 = unlimited [0]
  ZK_HEAP_MB         JVM heap [256]
  ZK_START_TIMEOUT   seconds to wait for the server to answer [30]
  ZK_STOP_TIMEOUT    seconds to wait after SIGTERM before SIGKILL [15]
  JAVA               java binary [java on PATH, else /usr/bin/java]

Files: \$ZK_DIR/conf/zoo.cfg, \$ZK_DIR/data, \$ZK_DIR/logs/zookeeper.log (+ zookeeper.out),
       \$ZK_DIR/zk.pid
EOF
}

ZK_PORT="${ZK_PORT:-2181}"
ZK_HOST="${ZK_HOST:-127.0.0.1}"
ZK_DIR="${ZK_DIR:-$PROJECT_ROOT/run/zk-$ZK_PORT}"
ZK_TICK_MS="${ZK_TICK_MS:-2000}"
ZK_FORCE_SYNC="${ZK_FORCE_SYNC:-yes}"
ZK_PREALLOC_KB="${ZK_PREALLOC_KB:-65536}"
ZK_MIN_SESSION_MS="${ZK_MIN_SESSION_MS:-}"
ZK_MAX_SESSION_MS="${ZK_MAX_SESSION_MS:-}"
ZK_MAX_CLIENT_CNXNS="${ZK_MAX_CLIENT_CNXNS:-0}"
ZK_HEAP_MB="${ZK_HEAP_MB:-256}"
ZK_START_TIMEOUT="${ZK_START_TIMEOUT:-30}"
ZK_STOP_TIMEOUT="${ZK_STOP_TIMEOUT:-15}"

ZK_SHARE=/usr/share/zookeeper
ZK_JAR=/usr/share/java/zookeeper.jar
CONF_DIR="$ZK_DIR/conf"
DATA_DIR="$ZK_DIR/data"
LOG_DIR="$ZK_DIR/logs"
CFG="$CONF_DIR/zoo.cfg"
LOG4J="$CONF_DIR/log4j.properties"
PID_FILE="$ZK_DIR/zk.pid"
LOG_FILE="$LOG_DIR/zookeeper.log"
OUT_FILE="$LOG_DIR/zookeeper.out"


validate_env() {
	local v
	require_uint ZK_PORT ZK_TICK_MS ZK_PREALLOC_KB ZK_MAX_CLIENT_CNXNS ZK_HEAP_MB ZK_START_TIMEOUT ZK_STOP_TIMEOUT
	for v in ZK_MIN_SESSION_MS ZK_MAX_SESSION_MS; do
		if [[ -n "${!v}" ]]; then
			require_uint "$v"
		fi
	done
	if ((ZK_PORT < 1 || ZK_PORT > 65535)); then
		err "ZK_PORT out of range: $ZK_PORT"
		exit 2
	fi
	case "$ZK_FORCE_SYNC" in
	yes | no) ;;
	*)
		err "ZK_FORCE_SYNC must be yes or no, got '$ZK_FORCE_SYNC'"
		exit 2
		;;
	esac
}

find_java() {
	if [[ -n "${JAVA:-}" ]]; then
		echo "$JAVA"
	elif command -v java >/dev/null 2>&1; then
		command -v java
	else
		echo /usr/bin/java
	fi
}

# ensure_installed installs Debian's zookeeper package (and with it a Java runtime) when missing.
ensure_installed() {
	local java
	java="$(find_java)"
	if [[ -f "$ZK_JAR" && -x "$ZK_SHARE/bin/zkCli.sh" && -x "$java" ]]; then
		return 0
	fi
	msg "ZooKeeper (Debian package 'zookeeper') or Java is missing; installing it"
	local sudo=()
	if [[ "$(id -u)" != 0 ]]; then
		if ! command -v sudo >/dev/null 2>&1; then
			err "not root and sudo is not available; install it yourself: apt-get install -y zookeeper"
			exit 1
		fi
		sudo=(sudo)
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		err "apt-get not found; install ZooKeeper 3.8 (Debian package 'zookeeper') and Java 17 yourself"
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	if ! "${sudo[@]}" apt-get install -y zookeeper; then
		msg "apt-get install failed; refreshing package lists and retrying"
		"${sudo[@]}" apt-get update
		"${sudo[@]}" apt-get install -y zookeeper
	fi
	java="$(find_java)"
	if [[ ! -f "$ZK_JAR" || ! -x "$java" ]]; then
		err "installation finished but $ZK_JAR or java ($java) is still missing"
		exit 1
	fi
}

# classpath: the server jar (its manifest pulls in its dependencies) plus an slf4j binding so
# that the server actually writes a log (Debian's manifest ships none).
server_classpath() {
	local cp="$ZK_JAR"
	if [[ -f /usr/share/java/slf4j-log4j12.jar && -f /usr/share/java/log4j-1.2.jar ]]; then
		cp="$cp:/usr/share/java/slf4j-log4j12.jar:/usr/share/java/log4j-1.2.jar"
	elif [[ -f /usr/share/java/slf4j-simple.jar ]]; then
		cp="$cp:/usr/share/java/slf4j-simple.jar"
	fi
	echo "$cp"
}

write_config() {
	mkdir -p "$CONF_DIR" "$DATA_DIR" "$LOG_DIR"
	{
		echo "# generated by scripts/zk.sh at $(date -u +%Y-%m-%dT%H:%M:%SZ); edits are overwritten on start"
		echo "tickTime=$ZK_TICK_MS"
		echo "dataDir=$DATA_DIR"
		echo "clientPort=$ZK_PORT"
		echo "clientPortAddress=$ZK_HOST"
		echo "maxClientCnxns=$ZK_MAX_CLIENT_CNXNS"
		echo "admin.enableServer=false"
		echo "4lw.commands.whitelist=*"
		echo "forceSync=$ZK_FORCE_SYNC"
		echo "preAllocSize=$ZK_PREALLOC_KB"
		echo "autopurge.snapRetainCount=3"
		echo "autopurge.purgeInterval=1"
		if [[ -n "$ZK_MIN_SESSION_MS" ]]; then echo "minSessionTimeout=$ZK_MIN_SESSION_MS"; fi
		if [[ -n "$ZK_MAX_SESSION_MS" ]]; then echo "maxSessionTimeout=$ZK_MAX_SESSION_MS"; fi
	} >"$CFG.tmp"
	mv -f "$CFG.tmp" "$CFG"
	cat >"$LOG4J" <<EOF
log4j.rootLogger=INFO, FILE
log4j.appender.FILE=org.apache.log4j.RollingFileAppender
log4j.appender.FILE.File=$LOG_FILE
log4j.appender.FILE.MaxFileSize=10MB
log4j.appender.FILE.MaxBackupIndex=3
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d{ISO8601} %-5p [%t:%C{1}@%L] - %m%n
EOF
}

# four_letter <word>: prints the server's answer (empty when nothing answers). Uses bash's
# /dev/tcp, so nc is not needed; bounded by a read timeout.
four_letter() {
	(
		exec 3<>"/dev/tcp/$ZK_HOST/$ZK_PORT" || exit 0
		printf '%s' "$1" >&3
		line="" out=""
		while IFS= read -r -t 2 line <&3; do out+="$line"$'\n'; done
		printf '%s%s' "$out" "$line"
	) 2>/dev/null || true
}

# our_pid prints the pid from the pid file when that process is alive and is our server.
our_pid() { recorded_pid "$PID_FILE" "$CFG"; }

log_tail() {
	local f
	for f in "$OUT_FILE" "$LOG_FILE"; do
		if [[ -s "$f" ]]; then
			echo "---- last lines of $f ----" >&2
			tail -n 25 "$f" >&2
		fi
	done
}

lock_dir() {
	mkdir -p "$ZK_DIR"
	if command -v flock >/dev/null 2>&1; then
		exec 9>"$ZK_DIR/.zk.sh.lock"
		if ! flock -w 120 9; then
			err "another zk.sh holds $ZK_DIR/.zk.sh.lock"
			exit 1
		fi
	fi
}

wait_ready() {
	local pid="$1" deadline=$(($(now_ms) + ZK_START_TIMEOUT * 1000))
	while :; do
		if ! alive "$pid"; then
			err "ZooKeeper (pid $pid) exited during start-up"
			return 1
		fi
		if [[ "$(four_letter ruok)" == imok ]] && four_letter srvr | grep -q '^Mode: '; then
			return 0
		fi
		if (($(now_ms) > deadline)); then
			err "ZooKeeper (pid $pid) did not answer ruok/srvr on $ZK_HOST:$ZK_PORT within ${ZK_START_TIMEOUT}s"
			return 1
		fi
		sleep 0.1
	done
}

cmd_start() {
	ensure_installed
	lock_dir
	local pid
	if pid="$(our_pid)"; then
		if [[ "$(four_letter ruok)" == imok ]]; then
			msg "ZooKeeper already running on $ZK_HOST:$ZK_PORT (pid $pid, dir $ZK_DIR)"
			return 0
		fi
		msg "ZooKeeper pid $pid is alive but not answering yet; waiting"
		if wait_ready "$pid"; then
			msg "ZooKeeper running on $ZK_HOST:$ZK_PORT (pid $pid, dir $ZK_DIR)"
			return 0
		fi
		log_tail
		return 1
	fi
	rm -f "$PID_FILE"
	if port_open "$ZK_HOST" "$ZK_PORT"; then
		err "port $ZK_HOST:$ZK_PORT is already in use by another process (not started from $ZK_DIR);"
		err "pick another ZK_PORT or stop that process"
		return 1
	fi
	write_config
	local java cp start_ms
	java="$(find_java)"
	cp="$(server_classpath)"
	: >"$OUT_FILE"
	start_ms=$(now_ms)
	# A new session (setsid) so that signals aimed at the caller's process group (Ctrl-C, test
	# runners) don't reach the server; setsid execs java, so $! is java's pid.
	local launcher=()
	if command -v setsid >/dev/null 2>&1; then launcher=(setsid); fi
	(
		exec 9>&- # the lock must not be inherited by the server
		cd "$ZK_DIR"
		exec "${launcher[@]}" "$java" \
			"-Xms$((ZK_HEAP_MB < 32 ? ZK_HEAP_MB : 32))m" "-Xmx${ZK_HEAP_MB}m" -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto \
			-XX:+HeapDumpOnOutOfMemoryError "-XX:HeapDumpPath=$LOG_DIR" \
			"-Dzookeeper.log.dir=$LOG_DIR" "-Dzookeeper.log.file=zookeeper.log" \
			"-Dlog4j.configuration=file:$LOG4J" \
			-Dzookeeper.admin.enableServer=false \
			"-Dzookeeper.datadir.autocreate=true" \
			-cp "$cp" org.apache.zookeeper.server.ZooKeeperServerMain "$CFG"
	) >>"$OUT_FILE" 2>&1 </dev/null &
	pid=$!
	echo "$pid" >"$PID_FILE"
	if ! wait_ready "$pid"; then
		log_tail
		if kill -0 "$pid" 2>/dev/null; then
			kill -KILL "$pid" 2>/dev/null || true
		fi
		rm -f "$PID_FILE"
		return 1
	fi
	msg "ZooKeeper started on $ZK_HOST:$ZK_PORT (pid $pid, dir $ZK_DIR, tick ${ZK_TICK_MS}ms) in $(($(now_ms) - start_ms))ms"
}

cmd_stop() {
	lock_dir
	local pid
	if ! pid="$(our_pid)"; then
		if [[ -f "$PID_FILE" ]]; then
			rm -f "$PID_FILE"
			msg "ZooKeeper on port $ZK_PORT is not running (removed stale pid file)"
		else
			msg "ZooKeeper on port $ZK_PORT is not running"
		fi
		return 0
	fi
	stop_pid "$pid" "$ZK_STOP_TIMEOUT" ZooKeeper \
		"ZooKeeper (pid $pid) ignored SIGTERM for ${ZK_STOP_TIMEOUT}s; sending SIGKILL" || return 1
	rm -f "$PID_FILE"
	msg "ZooKeeper on $ZK_HOST:$ZK_PORT stopped (pid $pid)"
}

cmd_status() {
	local pid
	if ! pid="$(our_pid)"; then
		if port_open "$ZK_HOST" "$ZK_PORT"; then
			msg "no ZooKeeper started from $ZK_DIR, but $ZK_HOST:$ZK_PORT is in use by another process"
			return 1
		fi
		msg "ZooKeeper on $ZK_HOST:$ZK_PORT is not running"
		return 3
	fi
	local srvr
	srvr="$(four_letter srvr)"
	if [[ -z "$srvr" ]]; then
		msg "ZooKeeper pid $pid is alive but does not answer on $ZK_HOST:$ZK_PORT"
		return 1
	fi
	msg "ZooKeeper running on $ZK_HOST:$ZK_PORT (pid $pid, dir $ZK_DIR)"
	printf '%s\n' "$srvr" | sed 's/^/  /'
}

cmd_cli() {
	ensure_installed
	if ! port_open "$ZK_HOST" "$ZK_PORT"; then
		err "no ZooKeeper answers on $ZK_HOST:$ZK_PORT; start one with: ZK_PORT=$ZK_PORT $0 start"
		return 1
	fi
	# zkEnv.sh fixes ZOO_LOG_DIR to /var/log/zookeeper; a later -D wins, so point the client's log
	# at our directory. JLine is used when stdin is a terminal.
	mkdir -p "$LOG_DIR"
	export CLIENT_JVMFLAGS="${CLIENT_JVMFLAGS:-} -Dzookeeper.log.dir=$LOG_DIR -XX:TieredStopAtLevel=1 -Xshare:auto"
	exec "$ZK_SHARE/bin/zkCli.sh" -server "$ZK_HOST:$ZK_PORT" "$@"
}

main() {
	local cmd="${1:-}"
	handle_help "$cmd"
	shift
	validate_env
	case "$cmd" in
	start) cmd_start ;;
	stop) cmd_stop ;;
	restart)
		cmd_stop
		exec 9>&- || true
		cmd_start
		;;
	status) cmd_status ;;
	cli) cmd_cli "$@" ;;
	*) unknown_command "$cmd" ;;
	esac
}

main "$@"
