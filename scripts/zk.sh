#!/usr/bin/env bash
# scripts/zk.sh — a standalone ZooKeeper on loopback for metaq developers, tests and users.
#
# Usage: scripts/zk.sh start|stop|restart|status|kill|pause|resume|cli [zkCli args…] [--help]
#        ZK_ENSEMBLE=3 scripts/zk.sh start        (a 3-node ensemble on loopback; ZK_NODE=i: one member)
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
  kill      SIGKILL the server (fault tests: a crashed ZooKeeper node)
  pause     SIGSTOP the server (it keeps its sockets but answers nothing: a partitioned node)
  resume    SIGCONT a paused server

Ensemble (ZK_ENSEMBLE=N, N >= 2, usually 3): every command applies to the N members of a
replicated ensemble on loopback — member i (1..N) listens on \$ZK_PORT+i-1 for clients,
\$ZK_QUORUM_BASE+i-1 for followers and \$ZK_ELECTION_BASE+i-1 for leader election, with its own
directory \$ZK_DIR/node<i>. ZK_NODE=i restricts a command to member i (stop one node, start it
again). "status" prints each member's mode (leader/follower) and exits 0 only when a quorum runs.
Clients connect with  ZK_CONNECT=127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183  ("connect" prints it).
  connect   print the connect string (one host:port, or the ensemble's list)

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
  ZK_ENSEMBLE        members of a replicated ensemble [1 = standalone]
  ZK_NODE            ensemble member a command applies to [all]
  ZK_PORTS           comma-separated client ports of the members [\$ZK_PORT, \$ZK_PORT+1, …]
  ZK_QUORUM_PORTS    comma-separated follower ports [\$ZK_PORT+700, +701, …] (2881.. for 2181)
  ZK_ELECTION_PORTS  comma-separated election ports [\$ZK_PORT+1700, +1701, …] (3881.. for 2181)
  (an ensemble's ZK_DIR defaults to <project>/run/zk-ensemble-\$ZK_PORT)

Files: \$ZK_DIR/conf/zoo.cfg, \$ZK_DIR/data, \$ZK_DIR/logs/zookeeper.log (+ zookeeper.out),
       \$ZK_DIR/zk.pid
EOF
}

ZK_PORT="${ZK_PORT:-2181}"
ZK_HOST="${ZK_HOST:-127.0.0.1}"
ZK_ENSEMBLE="${ZK_ENSEMBLE:-1}"
ZK_NODE="${ZK_NODE:-}"
# Set (internally) when this process runs one member of an ensemble: its id and the server lines.
ZK_MYID="${ZK_MYID:-}"
ZK_SERVERS="${ZK_SERVERS:-}"
if [[ "$ZK_ENSEMBLE" =~ ^[0-9]+$ ]] && ((ZK_ENSEMBLE > 1)) && [[ -z "$ZK_MYID" ]]; then
	ZK_DIR="${ZK_DIR:-$PROJECT_ROOT/run/zk-ensemble-$ZK_PORT}"
else
	ZK_DIR="${ZK_DIR:-$PROJECT_ROOT/run/zk-$ZK_PORT}"
fi
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
		if [[ -n "$ZK_MYID" ]]; then
			# a member of a replicated ensemble: followers sync within 10 ticks, stay within 5
			echo "initLimit=10"
			echo "syncLimit=5"
			echo "standaloneEnabled=false"
			echo "reconfigEnabled=false"
			tr ';' '\n' <<<"$ZK_SERVERS"
		fi
	} >"$CFG.tmp"
	if [[ -n "$ZK_MYID" ]]; then
		echo "$ZK_MYID" >"$DATA_DIR/myid"
	fi
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
	local java cp start_ms main=org.apache.zookeeper.server.ZooKeeperServerMain
	# an ensemble member runs the quorum peer (leader election, replication)
	if [[ -n "$ZK_MYID" ]]; then main=org.apache.zookeeper.server.quorum.QuorumPeerMain; fi
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
			-cp "$cp" "$main" "$CFG"
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
	# A restart binds the same port at once: return only once nothing listens there any more.
	local deadline=$(($(now_ms) + ZK_STOP_TIMEOUT * 1000))
	while port_open "$ZK_HOST" "$ZK_PORT"; do
		if (($(now_ms) >= deadline)); then
			rm -f "$PID_FILE"
			err "ZooKeeper (pid $pid) stopped, but $ZK_HOST:$ZK_PORT still accepts connections after ${ZK_STOP_TIMEOUT}s (another process?)"
			return 1
		fi
		sleep 0.05
	done
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
	if ! grep -q '^Mode: ' <<<"$srvr"; then
		# an ensemble member without a quorum: "This ZooKeeper instance is not currently serving requests"
		msg "ZooKeeper pid $pid on $ZK_HOST:$ZK_PORT runs but is not serving: ${srvr%%$'\n'*}"
		return 1
	fi
	msg "ZooKeeper running on $ZK_HOST:$ZK_PORT (pid $pid, dir $ZK_DIR)"
	printf '%s\n' "$srvr" | sed 's/^/  /'
}

# cmd_signal <SIG> <verb>: send a signal to the running server (kill, pause, resume).
cmd_signal() {
	local sig="$1" verb="$2" pid
	if ! pid="$(our_pid)"; then
		msg "ZooKeeper on port $ZK_PORT is not running"
		return 0
	fi
	kill "-$sig" "$pid"
	if [[ "$sig" == KILL ]]; then
		local i
		for ((i = 0; i < 100; i++)); do
			alive "$pid" || break
			sleep 0.05
		done
		rm -f "$PID_FILE"
	fi
	msg "ZooKeeper on $ZK_HOST:$ZK_PORT $verb (pid $pid, SIG$sig)"
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

# ---- ensemble: N members, each run by this script as a standalone-looking member ----

# port_list <explicit-list> <base>: the N ports of the members (explicit comma list, else base+i).
port_list() {
	local list="$1" base="$2" i out=()
	if [[ -n "$list" ]]; then
		IFS=, read -r -a out <<<"$list"
	else
		for ((i = 0; i < ZK_ENSEMBLE; i++)); do out+=($((base + i))); done
	fi
	if ((${#out[@]} != ZK_ENSEMBLE)); then
		err "expected $ZK_ENSEMBLE ports, got '${out[*]}'"
		exit 2
	fi
	for i in "${out[@]}"; do
		if ! [[ "$i" =~ ^[0-9]+$ ]] || ((i < 1 || i > 65535)); then
			err "bad port '$i' in '${out[*]}'"
			exit 2
		fi
	done
	echo "${out[*]}"
}

ensemble_setup() {
	read -r -a E_PORTS <<<"$(port_list "${ZK_PORTS:-}" "$ZK_PORT")"
	read -r -a E_QPORTS <<<"$(port_list "${ZK_QUORUM_PORTS:-}" $((ZK_PORT + 700)))"
	read -r -a E_EPORTS <<<"$(port_list "${ZK_ELECTION_PORTS:-}" $((ZK_PORT + 1700)))"
	E_SERVERS=""
	local i
	for ((i = 1; i <= ZK_ENSEMBLE; i++)); do
		E_SERVERS+="server.$i=$ZK_HOST:${E_QPORTS[i - 1]}:${E_EPORTS[i - 1]};"
	done
	E_SERVERS="${E_SERVERS%;}"
	E_MEMBERS=()
	if [[ -n "$ZK_NODE" ]]; then
		if ! [[ "$ZK_NODE" =~ ^[0-9]+$ ]] || ((ZK_NODE < 1 || ZK_NODE > ZK_ENSEMBLE)); then
			err "ZK_NODE must be 1..$ZK_ENSEMBLE, got '$ZK_NODE'"
			exit 2
		fi
		E_MEMBERS=("$ZK_NODE")
	else
		for ((i = 1; i <= ZK_ENSEMBLE; i++)); do E_MEMBERS+=("$i"); done
	fi
}

ensemble_connect() {
	local i out=""
	for ((i = 0; i < ZK_ENSEMBLE; i++)); do out+="$ZK_HOST:${E_PORTS[i]},"; done
	echo "${out%,}"
}

# member <i> <command> [args]: this script for member i alone.
member() {
	local i="$1"
	shift
	ZK_ENSEMBLE=1 ZK_NODE="" ZK_MYID="$i" ZK_SERVERS="$E_SERVERS" ZK_PORT="${E_PORTS[i - 1]}" \
		ZK_DIR="$ZK_DIR/node$i" "$SCRIPT_DIR/zk.sh" "$@"
}

ensemble_main() {
	local cmd="$1"
	shift
	ensemble_setup
	local i rc=0 pids=()
	case "$cmd" in
	start)
		ensure_installed
		# In parallel: a member answers srvr with a Mode only once a quorum has formed.
		for i in "${E_MEMBERS[@]}"; do
			member "$i" start &
			pids+=($!)
		done
		for i in "${pids[@]}"; do wait "$i" || rc=1; done
		if ((rc == 0)); then
			msg "ensemble of $ZK_ENSEMBLE up: $(ensemble_connect)"
		fi
		return "$rc"
		;;
	stop | kill | pause | resume)
		for i in "${E_MEMBERS[@]}"; do member "$i" "$cmd" || rc=1; done
		return "$rc"
		;;
	restart)
		for i in "${E_MEMBERS[@]}"; do member "$i" stop || rc=1; done
		((rc == 0)) || return "$rc"
		ZK_NODE="$ZK_NODE" ensemble_main start
		;;
	status)
		local up=0 r
		for i in "${E_MEMBERS[@]}"; do
			r=0
			member "$i" status || r=$?
			if ((r == 0)); then up=$((up + 1)); fi
		done
		if [[ -n "$ZK_NODE" ]]; then
			((up == 1)) && return 0
			return 3
		fi
		msg "$up of $ZK_ENSEMBLE members serving; quorum needs $((ZK_ENSEMBLE / 2 + 1)); connect string $(ensemble_connect)"
		if ((up > ZK_ENSEMBLE / 2)); then return 0; fi
		if ((up == 0)); then return 3; fi
		return 1
		;;
	connect) ensemble_connect ;;
	cli)
		ensure_installed
		mkdir -p "$ZK_DIR"
		export CLIENT_JVMFLAGS="${CLIENT_JVMFLAGS:-} -Dzookeeper.log.dir=$ZK_DIR -XX:TieredStopAtLevel=1 -Xshare:auto"
		exec "$ZK_SHARE/bin/zkCli.sh" -server "$(ensemble_connect)" "$@"
		;;
	*) unknown_command "$cmd" ;;
	esac
}

main() {
	local cmd="${1:-}"
	handle_help "$cmd"
	shift
	validate_env
	require_uint ZK_ENSEMBLE
	if ((ZK_ENSEMBLE > 1)); then
		ensemble_main "$cmd" "$@"
		return
	fi
	case "$cmd" in
	start) cmd_start ;;
	stop) cmd_stop ;;
	restart)
		cmd_stop
		exec 9>&- || true
		cmd_start
		;;
	status) cmd_status ;;
	kill) cmd_signal KILL killed ;;
	pause) cmd_signal STOP paused ;;
	resume) cmd_signal CONT resumed ;;
	connect) echo "$ZK_HOST:$ZK_PORT" ;;
	cli) cmd_cli "$@" ;;
	*) unknown_command "$cmd" ;;
	esac
}

main "$@"
