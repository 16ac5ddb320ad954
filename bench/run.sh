#!/usr/bin/env bash
# bench/run.sh — build the peers, run the issue-7 workloads on metaq, NATS
# JetStream, NSQ and Redis Streams in one run, and print one comparison table
# (peers as ratios to metaq). See bench/README.md.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: bench/run.sh [options]

Builds nats-server and nsqd into bench/bin (from the Go module proxy, pinned by
bench/peers/*/go.mod), installs Debian's redis-server when it is missing,
builds peerbench, then measures every system on 127.0.0.1 with a fresh data
directory per run, and prints the comparison table.

metaq is measured through `../bin/metaq bench <workload> --json ...` (see
bench/README.md); ../bin/metaq is built from ../tools/metaq when it is missing.
When there is none, or it has no `bench` subcommand yet, metaq is skipped with
a note.

options:
  --quick             smoke run: 2 s per phase, 100,000-message backlog
                      (results go to results/quick-<date>.*)
  --duration D        length of each measured phase (default 10s)
  --count N           consume-backlog size (default 1000000)
  --systems LIST      comma-separated: metaq,jetstream,jetstream-sync,nsq,nsq-disk,redis,redis-aof (default all)
  --workloads LIST    comma-separated: publish-async,publish-durable,latency,consume-backlog,e2e,
                      topics-1000,partitions-10000,publish-batch,publish-batch-durable (default all)
  --batch N           publish-batch: messages per batch (default 1000: 100 KB of payload)
  --batch-inflight N  publish-batch: batches in flight on the one connection (default 5)
  --repeat N          run each system×workload N times, the systems in turn (metaq, peer,
                      metaq, peer …); the table takes the median (default 1)
  --rt PRIO           run peerbench, and so every broker and client it starts, under
                      `chrt -f PRIO` (SCHED_FIFO; root): on a machine shared with other
                      work the latency and e2e tails are otherwise mostly the other
                      work's (bench/README.md, "Latency tails on a shared machine")
  --no-build          use the binaries already in bench/bin
  --no-metaq          skip metaq even if its binary exists
  --build-metaq       rebuild ../bin/metaq from ../tools/metaq even if it exists
                      (by default it is built only when missing)
  -h, --help          this text

Output: bench/results/<date>.json (one benchkit Result JSON object per line)
and bench/results/<date>.md (the table with the machine's details).
EOF
}

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
export PATH="$PATH:/usr/local/go/bin"

orig_args=("$@")
quick=0 build=1 metaq=1 build_metaq=0 repeat=1 rt=""
duration="" count="" batch="" inflight="" systems="all" workloads="all"
while [[ $# -gt 0 ]]; do
	case "$1" in
	--quick) quick=1 ;;
	--duration) duration="${2:?--duration needs a value}"; shift ;;
	--count) count="${2:?--count needs a value}"; shift ;;
	--systems) systems="${2:?--systems needs a value}"; shift ;;
	--workloads) workloads="${2:?--workloads needs a value}"; shift ;;
	--repeat) repeat="${2:?--repeat needs a value}"; shift ;;
	--batch) batch="${2:?--batch needs a value}"; shift ;;
	--batch-inflight) inflight="${2:?--batch-inflight needs a value}"; shift ;;
	--rt) rt="${2:?--rt needs a priority (1-99)}"; shift ;;
	--no-build) build=0 ;;
	--no-metaq) metaq=0 ;;
	--build-metaq) build_metaq=1 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
	esac
	shift
done

log() { printf 'run.sh: %s\n' "$*" >&2; }

cd "$here"
mkdir -p bin results

if [[ $build == 1 ]]; then
	log "building nats-server, nsqd, peerbench, benchtable into bench/bin"
	(cd peers/nats-server && go build -o ../../bin/nats-server github.com/nats-io/nats-server/v2)
	(cd peers/nsqd && go build -o ../../bin/nsqd github.com/nsqio/nsq/apps/nsqd)
	go build -o bin/ ./cmd/peerbench ./cmd/benchtable
fi
for b in nats-server nsqd peerbench benchtable; do
	[[ -x bin/$b ]] || { echo "run.sh: bin/$b missing (run without --no-build)" >&2; exit 1; }
done

if ! command -v redis-server >/dev/null 2>&1; then
	log "redis-server missing: installing Debian's redis-server (only the binary is used; no service is started here)"
	if [[ $(id -u) == 0 ]]; then
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
	else
		sudo apt-get update -qq
		sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
	fi
fi

# metaq: ../bin/metaq, built from ../tools/metaq when it is missing.
metaq_note=""
metaq_bin="$root/bin/metaq"
if [[ $metaq == 0 ]]; then
	metaq_note="metaq skipped (--no-metaq)"
else
	if [[ $build == 1 && ( ! -e $metaq_bin || $build_metaq == 1 ) ]] && ls "$root"/tools/metaq/*.go >/dev/null 2>&1; then
		log "building ../bin/metaq"
		if ! (cd "$root" && go build -o bin/metaq ./tools/metaq) >&2; then
			log "NOTE: building ../bin/metaq failed"
		fi
	fi
	if [[ -x $metaq_bin ]]; then
		log "metaq: $metaq_bin ($(date -r "$metaq_bin" '+built %Y-%m-%d %H:%M'))"
	fi
	if [[ ! -x $metaq_bin ]]; then
		metaq_note="metaq skipped: $metaq_bin does not exist yet (the broker and the 'metaq bench' CLI are not written yet)"
	elif ! "$metaq_bin" bench --help >/dev/null 2>&1; then
		metaq_note="metaq skipped: $metaq_bin has no working 'bench' subcommand yet"
	fi
fi
if [[ -n $metaq_note ]]; then
	log "NOTE: $metaq_note"
	if [[ $systems == all ]]; then
		systems="jetstream,jetstream-sync,nsq,nsq-disk,redis,redis-aof"
	else
		systems="$(tr ',' '\n' <<<"$systems" | grep -vx metaq | paste -sd, -)"
		[[ -n $systems ]] || { log "nothing to run"; exit 1; }
	fi
fi

args=(-bin bin -metaq "$metaq_bin" -systems "$systems" -workloads "$workloads" -repeat "$repeat")
[[ $quick == 1 ]] && args+=(-quick)
[[ -n $duration ]] && args+=(-duration "$duration")
[[ -n $count ]] && args+=(-count "$count")
[[ -n $batch ]] && args+=(-batch "$batch")
[[ -n $inflight ]] && args+=(-batch-inflight "$inflight")

stamp="$(date +%Y-%m-%d-%H%M%S)"
[[ $quick == 1 ]] && stamp="quick-$stamp"
json="results/$stamp.json"
md="results/$stamp.md"

. "$here/warm.sh" # a fresh VM charges the first touch of each page (bench/README.md, Caveats)
warm_memory
log "running: bin/peerbench ${args[*]}"
log "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) before the run"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
steal0=$(steal_mark)
status=0
runner=()
[[ -n $rt ]] && runner=(chrt -f "$rt")
"${runner[@]}" bin/peerbench "${args[@]}" >"$json" || status=$?
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
steal="$(steal_pct "$steal0")"

{
	echo "# Peer comparison $stamp"
	echo
	echo "- command: \`bench/run.sh ${orig_args[*]}\` → \`${runner[*]}${runner:+ }bin/peerbench ${args[*]}\`"
	echo "- machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(go version | cut -d' ' -f3), load average $load_before before / $load_after after, steal time $steal% of the run's CPU time (bench/README.md, Caveats)"
	echo "- peers: $(bin/nats-server --version 2>&1 | head -1), $(bin/nsqd --version 2>&1 | head -1), $(redis-server --version | cut -d' ' -f1-3)"
	[[ -n $metaq_note ]] && echo "- NOTE: $metaq_note"
	echo "- 100-byte messages unless stated, everything on 127.0.0.1; client and server share the cores"
	echo
	bin/benchtable -base metaq "$json"
} >"$md"

cat "$md"
log "results: bench/$json and bench/$md"
if [[ $status != 0 ]]; then
	log "some runs failed (see the 'error' fields in bench/$json)"
fi
exit "$status"
