# scripts/lib.sh — helpers shared by metaq's scripts (sourced, not run).
# shellcheck shell=bash

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PROJECT_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
METAQ_BIN="${METAQ_BIN:-$PROJECT_ROOT/bin/metaq}"
SCRIPT_NAME="${0##*/}"

# msg (stdout) and err (stderr) say something prefixed with the script's name; a script may
# redefine them (test.sh makes msg bold).
msg() { echo "$SCRIPT_NAME: $*"; }
err() { echo "$SCRIPT_NAME: $*" >&2; }

# ensure_go puts Go on PATH (/usr/local/go/bin is where the official tarball installs it).
ensure_go() {
	if command -v go >/dev/null 2>&1; then
		return 0
	fi
	local d
	for d in /usr/local/go/bin "$HOME/go/bin" "$HOME/sdk/go/bin"; do
		if [[ -x "$d/go" ]]; then
			export PATH="$PATH:$d"
			return 0
		fi
	done
	err "Go is not installed (no 'go' on PATH or in /usr/local/go/bin); install Go 1.26+ from https://go.dev/dl/"
	exit 1
}

# metaq_stale: bin/metaq is missing or older than a Go source, go.mod or go.sum of the main module.
metaq_stale() {
	[[ -x "$METAQ_BIN" ]] || return 0
	local newer
	newer="$(cd "$PROJECT_ROOT" && find . \( -path ./run -o -path ./bench -o -path ./.git -o -path ./bin \) -prune -o \
		\( -name '*.go' -o -name go.mod -o -name go.sum \) -newer "$METAQ_BIN" -print -quit 2>/dev/null)"
	[[ -n "$newer" ]]
}

# build_metaq builds bin/metaq when it is missing or stale (FORCE=1: always).
build_metaq() {
	if [[ "${1:-}" != force ]] && ! metaq_stale; then
		return 0
	fi
	ensure_go
	msg "building $METAQ_BIN"
	mkdir -p "$(dirname "$METAQ_BIN")"
	(cd "$PROJECT_ROOT" && go build -o "$METAQ_BIN.tmp" ./tools/metaq) || {
		err "go build ./tools/metaq failed"
		exit 1
	}
	# The same bytes as before: keep the file (processes started from it still run the current
	# binary, see runs_current_binary), only mark it fresh.
	if [[ -f "$METAQ_BIN" ]] && cmp -s "$METAQ_BIN.tmp" "$METAQ_BIN"; then
		rm -f "$METAQ_BIN.tmp"
		touch "$METAQ_BIN"
		return 0
	fi
	mv -f "$METAQ_BIN.tmp" "$METAQ_BIN"
}

# runs_current_binary <pid>: the process runs the bytes $METAQ_BIN holds now (false when the
# binary was rebuilt with changes since the process started). Linux's /proc/<pid>/exe still
# reads the file the process started from after it was replaced; without it, assume current.
runs_current_binary() {
	local exe="/proc/$1/exe"
	[[ -r "$exe" ]] || return 0
	cmp -s "$exe" "$METAQ_BIN"
}

# ini_get <file> <section> <key> [default]: a value from a server.ini (comments and spaces
# stripped; the last occurrence wins).
ini_get() {
	local file="$1" section="$2" key="$3" def="${4:-}" v
	v="$(awk -v want="$section" -v key="$key" '
		/^[ \t]*[;#]/ { next }
		/^[ \t]*\[/ { s = $0; gsub(/^[ \t]*\[|\][ \t]*$/, "", s); insec = (s == want); next }
		insec {
			line = $0
			i = index(line, "="); j = index(line, ":")
			if (i == 0 || (j > 0 && j < i)) i = j
			if (i == 0) next
			k = substr(line, 1, i - 1); v = substr(line, i + 1)
			gsub(/^[ \t]+|[ \t]+$/, "", k)
			sub(/[ \t]+[;#].*$/, "", v)
			gsub(/^[ \t]+|[ \t]+$/, "", v)
			if (k == key) val = v
		}
		END { print val }' "$file")"
	if [[ -z "$v" ]]; then v="$def"; fi
	printf '%s\n' "$v"
}

# The helpers below that report problems use msg and err, and the sourcing script's usage.

# handle_help <command>: what every subcommand script does first: -h, --help and help print the
# usage and exit 0; no command at all prints it on stderr and exits 2. Returns otherwise.
handle_help() {
	case "${1:-}" in
	-h | --help | help)
		usage
		exit 0
		;;
	"")
		usage >&2
		exit 2
		;;
	esac
}

# unknown_command <command>: says so, prints the usage on stderr and exits 2.
unknown_command() {
	err "unknown command '$1'"
	usage >&2
	exit 2
}

# require_uint <variable>…: each named variable holds a non-negative integer; else says which and
# exits 2.
require_uint() {
	local v
	for v in "$@"; do
		if ! [[ "${!v}" =~ ^[0-9]+$ ]]; then
			err "$v must be a non-negative integer, got '${!v}'"
			exit 2
		fi
	done
}

now_ms() { date +%s%3N; }

# alive <pid>: the process exists and is not a zombie waiting for its (foreign) parent to reap it.
# A multi-threaded process (a JVM) that is exiting shows its first thread as a zombie while its
# other threads are still being torn down, and holds its files and sockets until the last one is
# gone: a zombie with more than one thread ("Threads:" in /proc/<pid>/status) is still alive.
# (Suspected, not reproduced, behind one failure of a ZooKeeper restart on the same port right
# after a stop, under load; zk.sh stop also waits for the port itself.)
alive() {
	kill -0 "$1" 2>/dev/null || return 1
	local st="" threads=""
	if [[ -r "/proc/$1/stat" ]]; then
		st="$(sed -e 's/^.*) //' -e 's/ .*//' "/proc/$1/stat" 2>/dev/null || true)"
	fi
	[[ "$st" != Z ]] && return 0
	threads="$(sed -n 's/^Threads:[[:space:]]*//p' "/proc/$1/status" 2>/dev/null || true)"
	[[ -n "$threads" && "$threads" -gt 1 ]]
}

# recorded_pid <pid-file> <text>: prints the pid recorded in pid-file when that process is alive
# and its command line contains text (so that a pid reused by an unrelated process does not count).
recorded_pid() {
	local file="$1" want="$2" pid
	[[ -f "$file" ]] || return 1
	pid="$(tr -dc '0-9' <"$file")"
	[[ -n "$pid" ]] || return 1
	alive "$pid" || return 1
	if [[ -r "/proc/$pid/cmdline" ]] && ! tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$want"; then
		return 1 # the pid was reused by an unrelated process
	fi
	echo "$pid"
}

# stop_pid <pid> <timeout-seconds> <label> <sigkill-message>: SIGTERM, then wait for the process to
# exit; after timeout-seconds print sigkill-message (msg), SIGKILL it and give it 0.3 s to go.
# Fails with "could not stop <label> pid <pid>" (err) when it is still alive. SIGCONT follows the
# SIGTERM: a stopped process (zk.sh pause, kill -STOP) only handles the SIGTERM once it runs
# again, and would otherwise be SIGKILLed after the timeout (for a broker: crash recovery).
stop_pid() {
	local pid="$1" timeout="$2" label="$3" kill_msg="$4" i
	kill -TERM "$pid" 2>/dev/null || true
	kill -CONT "$pid" 2>/dev/null || true
	local deadline=$(($(now_ms) + timeout * 1000))
	while alive "$pid"; do
		if (($(now_ms) > deadline)); then
			msg "$kill_msg"
			kill -KILL "$pid" 2>/dev/null || true
			for ((i = 0; i < 6; i++)); do
				alive "$pid" || break
				sleep 0.05
			done
			break
		fi
		sleep 0.05
	done
	if alive "$pid"; then
		err "could not stop $label pid $pid"
		return 1
	fi
}

# port_open <host> <port>
port_open() {
	(exec 3<>"/dev/tcp/$1/$2") 2>/dev/null
}

# broker_version <host> <port>: prints the broker's answer to `version` (empty when none),
# through bash's /dev/tcp, bounded by a 2 s read timeout.
broker_version() {
	(
		exec 3<>"/dev/tcp/$1/$2" || exit 0
		printf 'version 1\r\n' >&3
		IFS= read -r -t 2 head <&3 || exit 0
		head="${head%$'\r'}"
		case "$head" in
		"result 200 "*) ;;
		*) exit 0 ;;
		esac
		read -r _ _ len _ <<<"$head"
		body=""
		if [[ "$len" =~ ^[0-9]+$ ]] && ((len > 0)); then
			IFS= read -r -N "$len" -t 2 body <&3 || true
		fi
		printf '%s\n' "${body:-?}"
	) 2>/dev/null || true
}
