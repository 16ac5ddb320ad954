#!/usr/bin/env bash
# scripts/broker.sh — run a metaq broker in the background: start|stop|status|restart [conf].
set -euo pipefail

# shellcheck source=lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

usage() {
	cat <<EOF
Usage: $(basename "$0") start|stop|status|restart [server.ini]   (default conf/server.ini)

  start     build bin/metaq when it is missing or older than the sources, start
            "metaq broker -c <server.ini>" in the background and wait until its port answers
            the protocol's "version" command (no-op when that broker already runs; when it runs
            an older bin/metaq than the current one it says so, or restarts it with
            BROKER_RESTART_STALE=1)
  stop      SIGTERM (graceful: unregister from ZooKeeper, flush, close the store), then wait;
            SIGKILL after \$BROKER_STOP_TIMEOUT seconds (no-op when it is not running)
  status    print pid, address and version; exit 0 running, 3 not running, 1 broken
  restart   stop, then start

Files (one broker per serverPort): \$RUN_DIR/broker-<port>.pid and \$RUN_DIR/broker-<port>.log.

Environment (defaults in brackets):
  RUN_DIR                pid and log directory [<project>/run]
  BROKER_START_TIMEOUT   seconds to wait for the port to answer [60]
  BROKER_STOP_TIMEOUT    seconds to wait after SIGTERM before SIGKILL [60]
  BROKER_ARGS            extra arguments for "metaq broker" (e.g. "--log-level debug")
  BROKER_RESTART_STALE   1: start restarts a running broker whose binary was rebuilt since [0]
  METAQ_BIN              the binary [<project>/bin/metaq]
EOF
}

RUN_DIR="${RUN_DIR:-$PROJECT_ROOT/run}"
BROKER_START_TIMEOUT="${BROKER_START_TIMEOUT:-60}"
BROKER_STOP_TIMEOUT="${BROKER_STOP_TIMEOUT:-60}"
BROKER_ARGS="${BROKER_ARGS:-}"
BROKER_RESTART_STALE="${BROKER_RESTART_STALE:-0}"


resolve_conf() {
	local c="${1:-conf/server.ini}"
	if [[ -f "$c" ]]; then
		:
	elif [[ "$c" != /* && -f "$PROJECT_ROOT/$c" ]]; then
		c="$PROJECT_ROOT/$c"
	else
		err "configuration file '$c' not found"
		exit 2
	fi
	echo "$(cd "$(dirname "$c")" && pwd)/$(basename "$c")"
}

setup() {
	CONF="$(resolve_conf "${1:-}")"
	PORT="$(ini_get "$CONF" system serverPort 8123)"
	if ! [[ "$PORT" =~ ^[0-9]+$ ]] || ((PORT < 1 || PORT > 65535)); then
		err "serverPort in $CONF is '$PORT'; this script needs a fixed port (1..65535)"
		exit 2
	fi
	HOST="$(ini_get "$CONF" system bindHost)"
	case "$HOST" in "" | 0.0.0.0 | "::") HOST=127.0.0.1 ;; esac
	PID_FILE="$RUN_DIR/broker-$PORT.pid"
	LOG_FILE="$RUN_DIR/broker-$PORT.log"
}

# our_pid prints the recorded pid when that process is alive and is a metaq broker.
our_pid() { recorded_pid "$PID_FILE" ' broker '; }

log_tail() {
	if [[ -s "$LOG_FILE" ]]; then
		echo "---- last lines of $LOG_FILE ----" >&2
		tail -n 20 "$LOG_FILE" >&2
	fi
}

check_zk() {
	local enable connect first host port
	enable="$(ini_get "$CONF" zookeeper zk.zkEnable true)"
	[[ "${enable,,}" == false ]] && return 0
	connect="$(ini_get "$CONF" zookeeper zk.zkConnect localhost:2181)"
	first="${connect%%,*}"
	first="${first%%/*}"
	host="${first%:*}"
	port="${first##*:}"
	[[ "$host" == "$first" ]] && port=2181
	if ! port_open "$host" "$port"; then
		msg "warning: ZooKeeper $host:$port (zk.zkConnect) does not answer; the broker serves anyway and" \
			"registers once it is up (start one with scripts/zk.sh start)"
	fi
}

cmd_start() {
	build_metaq
	mkdir -p "$RUN_DIR"
	local pid v
	if pid="$(our_pid)"; then
		v="$(broker_version "$HOST" "$PORT")"
		if [[ -n "$v" ]] && ! runs_current_binary "$pid"; then
			if [[ "$BROKER_RESTART_STALE" == 1 ]]; then
				msg "broker on $HOST:$PORT (pid $pid) runs an older $METAQ_BIN than the one built since: restarting it"
				cmd_stop
				cmd_start
				return
			fi
			msg "warning: broker already running on $HOST:$PORT (pid $pid, $v), but from an older $METAQ_BIN" \
				"(rebuilt since it started); 'scripts/broker.sh restart' runs the new one"
			return 0
		fi
		if [[ -n "$v" ]]; then
			msg "broker already running on $HOST:$PORT (pid $pid, $v, log $LOG_FILE)"
			return 0
		fi
		msg "broker pid $pid is alive but $HOST:$PORT does not answer yet; waiting"
	else
		rm -f "$PID_FILE"
		if port_open "$HOST" "$PORT"; then
			err "port $HOST:$PORT is already in use by another process (not a broker started with $PID_FILE);"
			err "stop it, or give this broker another serverPort in $CONF"
			return 1
		fi
		check_zk
		# A session of its own (setsid), so that Ctrl-C in this terminal does not reach it.
		local launcher=()
		if command -v setsid >/dev/null 2>&1; then launcher=(setsid); fi
		{
			echo "==== $(date -u +%Y-%m-%dT%H:%M:%SZ) broker.sh start: $METAQ_BIN broker -c $CONF $BROKER_ARGS"
		} >>"$LOG_FILE"
		# shellcheck disable=SC2086
		"${launcher[@]}" "$METAQ_BIN" broker -c "$CONF" $BROKER_ARGS >>"$LOG_FILE" 2>&1 </dev/null &
		pid=$!
		echo "$pid" >"$PID_FILE"
	fi
	local start deadline
	start=$(now_ms)
	deadline=$((start + BROKER_START_TIMEOUT * 1000))
	while :; do
		if ! alive "$pid"; then
			err "the broker (pid $pid) exited during start-up"
			log_tail
			rm -f "$PID_FILE"
			return 1
		fi
		v="$(broker_version "$HOST" "$PORT")"
		if [[ -n "$v" ]]; then
			break
		fi
		if (($(now_ms) > deadline)); then
			err "the broker (pid $pid) did not answer on $HOST:$PORT within ${BROKER_START_TIMEOUT}s"
			log_tail
			return 1
		fi
		sleep 0.1
	done
	msg "broker started on $HOST:$PORT (pid $pid, $v, config $CONF, log $LOG_FILE) in $(($(now_ms) - start))ms"
}

cmd_stop() {
	local pid
	if ! pid="$(our_pid)"; then
		if [[ -f "$PID_FILE" ]]; then
			rm -f "$PID_FILE"
			msg "broker on port $PORT is not running (removed a stale pid file)"
		else
			msg "broker on port $PORT is not running"
		fi
		return 0
	fi
	stop_pid "$pid" "$BROKER_STOP_TIMEOUT" broker \
		"broker (pid $pid) still running ${BROKER_STOP_TIMEOUT}s after SIGTERM; sending SIGKILL (the next start runs crash recovery)" || return 1
	rm -f "$PID_FILE"
	msg "broker on $HOST:$PORT stopped (pid $pid)"
}

cmd_status() {
	local pid v
	if ! pid="$(our_pid)"; then
		if port_open "$HOST" "$PORT"; then
			msg "no broker started by this script on port $PORT, but $HOST:$PORT is in use by another process"
			return 1
		fi
		msg "broker on $HOST:$PORT is not running"
		return 3
	fi
	v="$(broker_version "$HOST" "$PORT")"
	if [[ -z "$v" ]]; then
		msg "broker pid $pid is alive but does not answer on $HOST:$PORT"
		return 1
	fi
	msg "broker running on $HOST:$PORT (pid $pid, $v, config $CONF, log $LOG_FILE)"
}

main() {
	local cmd="${1:-}"
	handle_help "$cmd"
	shift
	if (($# > 1)); then
		err "too many arguments"
		usage >&2
		return 2
	fi
	require_uint BROKER_START_TIMEOUT BROKER_STOP_TIMEOUT
	case "$cmd" in
	start | stop | status | restart) setup "${1:-}" ;;
	*) unknown_command "$cmd" ;;
	esac
	case "$cmd" in
	start) cmd_start ;;
	stop) cmd_stop ;;
	status) cmd_status ;;
	restart)
		cmd_stop
		cmd_start
		;;
	esac
}

main "$@"
