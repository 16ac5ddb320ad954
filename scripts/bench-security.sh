#!/usr/bin/env bash
# scripts/bench-security.sh — `metaq bench produce` over TLS with authentication vs the plain
# port of the same broker, interleaved, and the ratio (docs/security.md, "Performance").
set -euo pipefail

# shellcheck source=lib.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

usage() {
	cat <<EOF2
Usage: $(basename "$0") [rounds] [duration]     (defaults: 3 rounds of 10s each way)

Starts one standalone broker (async flush) with a plain port and a TLS port whose clients must
authenticate (bcrypt secret, publish ACL), runs "metaq bench produce" against the plain port
and the TLS port in turn, rounds times, and prints each pair and the median ratio TLS+auth /
plain. Certificates are made with openssl in a temp dir; everything is removed at the end.
Extra "metaq bench" flags: BENCH_ARGS (e.g. "--conns 2 --msg-size 1024").
EOF2
}
[[ "${1:-}" == "-h" || "${1:-}" == "--help" ]] && { usage; exit 0; }
rounds="${1:-3}"
duration="${2:-10s}"

ensure_go
build_metaq
command -v openssl >/dev/null || { err "openssl is needed to make the test certificates"; exit 1; }

tmp="$(mktemp -d /tmp/metaq-bench-security.XXXXXX)"
pid=""
cleanup() {
	if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

cd "$tmp"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj /CN=metaq-bench-ca \
	-keyout ca-key.pem -out ca.pem 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
	-keyout broker-key.pem -out broker.csr 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >san.ext
openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 1 -extfile san.ext \
	-out broker.pem 2>/dev/null

secret="bench-$RANDOM-$RANDOM"
{ printf '%s\n' "$secret" | "$METAQ_BIN" auth hash --user bench; echo "publish = bench*"; } >users.ini

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
plain="$(free_port)"
tlsport="$(free_port)"
cat >server.ini <<EOF2
[system]
brokerId=0
hostName=127.0.0.1
bindHost=127.0.0.1
serverPort=$plain
dashboardHttpPort=0
dataPath=$tmp/data
[zookeeper]
zk.zkEnable=false
[security]
tlsPort=$tlsport
tlsCert=broker.pem
tlsKey=broker-key.pem
usersFile=users.ini
anonymous=all
[topic=bench]
numPartitions=4
EOF2
"$METAQ_BIN" broker -c server.ini >broker.log 2>&1 &
pid=$!
for _ in $(seq 1 200); do
	if "$METAQ_BIN" bench latency --server "127.0.0.1:$plain" --duration 100ms --json >/dev/null 2>&1; then break; fi
	sleep 0.1
done

rate() { python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["msgs_per_sec"])'; }
ratios=()
# shellcheck disable=SC2086
for i in $(seq 1 "$rounds"); do
	p="$("$METAQ_BIN" bench produce --server "127.0.0.1:$plain" --duration "$duration" --json ${BENCH_ARGS:-} | rate)"
	s="$(METAQ_SECRET="$secret" "$METAQ_BIN" bench produce --server "127.0.0.1:$tlsport" --tls-ca ca.pem --user bench \
		--duration "$duration" --json ${BENCH_ARGS:-} | rate)"
	r="$(python3 -c "print(f'{$s/$p:.3f}')")"
	ratios+=("$r")
	printf 'round %d: plain %.0f msgs/s, TLS+auth %.0f msgs/s, ratio %s\n' "$i" "$p" "$s" "$r"
done
median="$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')"
echo "median ratio TLS+auth / plain: $median (goal >= 0.70)"
