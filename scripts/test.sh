#!/usr/bin/env bash
# scripts/test.sh — the whole check, as CI runs it: gofmt, go vet, go test -race against a
# private ZooKeeper.
set -euo pipefail

# shellcheck source=lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

usage() {
	cat <<EOF
Usage: $(basename "$0") [go test arguments…]

  1. installs what the tests need: Debian's zookeeper package (through scripts/zk.sh) and, for
     -race (cgo), gcc when there is no C compiler, and chromium for the dashboard's browser tests
  2. starts a private ZooKeeper on a free loopback port (tickTime 500 ms, no fsync, data in a
     temporary directory), stopped again when the script ends (also on Ctrl-C)
  3. gofmt -l (every .go file must be formatted)
  4. go vet ./...
  5. go mod tidy -diff in the main module and in bench/ (go.mod/go.sum must already be tidy)
  6. go test -race -count=1 -timeout \$TEST_TIMEOUT ./... [arguments] with METAQ_TEST_ZK set

Exits with the tests' status (or 1 when only gofmt, vet or tidy failed). Arguments go to go test:
  $(basename "$0") -run TestKill9 ./tools/...     # packages given replace ./...
  $(basename "$0") -short

Environment:
  TEST_TIMEOUT   go test -timeout [45m]
  TEST_RACE      0 to run without -race [1]
  SKIP_LINT      1 to skip gofmt, go vet and the tidy check [0]
EOF
}

case "${1:-}" in
-h | --help | help)
	usage
	exit 0
	;;
esac

TEST_TIMEOUT="${TEST_TIMEOUT:-45m}"
TEST_RACE="${TEST_RACE:-1}"
SKIP_LINT="${SKIP_LINT:-0}"

msg() { printf '\033[1mtest.sh: %s\033[0m\n' "$*"; }

cd "$PROJECT_ROOT"
ensure_go
go version

# -race needs cgo, hence a C compiler: install Debian's gcc when there is none (or run without
# -race, saying so, when it cannot be installed).
ensure_cc() {
	[[ "$TEST_RACE" == 0 ]] && return 0
	if command -v "$(go env CC)" >/dev/null 2>&1; then
		return 0
	fi
	msg "no C compiler for go test -race (cgo); installing gcc"
	local sudo=()
	if [[ "$(id -u)" != 0 ]] && command -v sudo >/dev/null 2>&1; then sudo=(sudo); fi
	export DEBIAN_FRONTEND=noninteractive
	if command -v apt-get >/dev/null 2>&1 &&
		{ "${sudo[@]}" apt-get install -y gcc libc6-dev || { "${sudo[@]}" apt-get update && "${sudo[@]}" apt-get install -y gcc libc6-dev; }; }; then
		return 0
	fi
	err "could not install gcc: running the tests without -race"
	TEST_RACE=0
}
ensure_cc

# The dashboard's browser tests (broker/httpapi) drive Debian's chromium with chromedp: install
# it when missing. Without it they skip, except under CI, where they fail.
ensure_chromium() {
	local b
	for b in chromium chromium-browser google-chrome; do
		command -v "$b" >/dev/null 2>&1 && return 0
	done
	msg "no chromium for the dashboard's browser tests; installing Debian's chromium"
	local sudo=()
	if [[ "$(id -u)" != 0 ]] && command -v sudo >/dev/null 2>&1; then sudo=(sudo); fi
	export DEBIAN_FRONTEND=noninteractive
	if command -v apt-get >/dev/null 2>&1 &&
		{ "${sudo[@]}" apt-get install -y chromium || { "${sudo[@]}" apt-get update && "${sudo[@]}" apt-get install -y chromium; }; }; then
		return 0
	fi
	err "could not install chromium: the browser tests will be skipped (or fail under CI)"
}
ensure_chromium

# A free loopback port for ZooKeeper, below the kernel's ephemeral range (a port in that range can
# be taken at any moment as the local end of an outgoing connection, and then ZooKeeper's bind
# fails): probe random ports with bash's /dev/tcp until one refuses connections.
free_port() {
	local lo=32768 p
	if [[ -r /proc/sys/net/ipv4/ip_local_port_range ]]; then
		read -r lo _ </proc/sys/net/ipv4/ip_local_port_range || lo=32768
	fi
	((lo > 12000)) || lo=32768
	for _ in $(seq 1 200); do
		p=$((10000 + RANDOM % (lo - 10000)))
		if ! port_open 127.0.0.1 "$p"; then
			echo "$p"
			return
		fi
	done
	err "no free port found below $lo"
	exit 1
}

TMP_ROOT="$(mktemp -d "${TMPDIR:-/tmp}/metaq-test.XXXXXX")"
ZK_TEST_PORT="$(free_port)"
export ZK_PORT="$ZK_TEST_PORT" ZK_DIR="$TMP_ROOT/zk" ZK_TICK_MS=500 ZK_FORCE_SYNC=no ZK_PREALLOC_KB=4096 ZK_HEAP_MB=256

cleanup() {
	local rc=$?
	"$SCRIPT_DIR/zk.sh" stop >/dev/null 2>&1 || "$SCRIPT_DIR/zk.sh" stop || true
	rm -rf "$TMP_ROOT"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

msg "starting a private ZooKeeper on 127.0.0.1:$ZK_TEST_PORT"
"$SCRIPT_DIR/zk.sh" start
export METAQ_TEST_ZK="127.0.0.1:$ZK_TEST_PORT"
# Tests of other packages start ZooKeepers of their own with zktest.StartZooKeeper; they only
# need the package, which zk.sh start just made sure of.

status=0
lint_status=0
start_all=$(now_ms)

if [[ "$SKIP_LINT" != 1 ]]; then
	msg "gofmt -l"
	unformatted="$(find . \( -path ./run -o -path ./.git -o -path ./bin \) -prune -o -name '*.go' -print0 | xargs -0 gofmt -l)"
	if [[ -n "$unformatted" ]]; then
		err "these files need gofmt -w:"
		printf '  %s\n' $unformatted >&2
		lint_status=1
	fi
	msg "go vet ./..."
	if ! go vet ./...; then
		lint_status=1
	fi
	# Code and docs point at the project's own docs/, never at the design contract outside the
	# repository.
	if git grep -n 'DESIGN §' -- ':!scripts/test.sh' 2>/dev/null; then
		err "the lines above cite DESIGN §…, which is not in the repository: cite docs/*.md instead"
		lint_status=1
	fi
	# go.mod/go.sum must be what go mod tidy makes them, in the main module and in bench/ (its own
	# module, which replaces the main one with ../ and so sees the main module's requirements too).
	for mod in . bench; do
		msg "go mod tidy -diff ($mod)"
		if ! (cd "$mod" && go mod tidy -diff); then
			err "go.mod/go.sum in $mod are not tidy: run (cd $mod && go mod tidy)"
			lint_status=1
		fi
	done
fi

args=("$@")
has_pkg=0
for a in "${args[@]}"; do
	case "$a" in ./* | github.com/*) has_pkg=1 ;; esac
done
if ((has_pkg == 0)); then args+=(./...); fi
race=()
if [[ "$TEST_RACE" != 0 ]]; then race=(-race); fi

msg "go test ${race[*]} -count=1 -timeout $TEST_TIMEOUT ${args[*]}   (METAQ_TEST_ZK=$METAQ_TEST_ZK)"
start_tests=$(now_ms)
go test "${race[@]}" -count=1 -timeout "$TEST_TIMEOUT" "${args[@]}" || status=$?
msg "go test finished in $((($(now_ms) - start_tests) / 1000))s with status $status (everything: $((($(now_ms) - start_all) / 1000))s)"

if ((status == 0 && lint_status != 0)); then
	err "tests passed, but gofmt, go vet or go mod tidy -diff failed"
	status=1
fi
exit "$status"
