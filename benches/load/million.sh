#!/usr/bin/env bash
# One node, N idle connections (issue 25 item 4): `ferromq serve` on its defaults (every
# core, the embedded store), then `ferromq bench conn` opening N MQTT 3.1.1 connections
# from many loopback source addresses, keeping them alive with PINGREQs for the hold,
# and reporting the connect rate, the node's RSS and the kernel's socket memory per
# connection (`--node-pid`). Needs root for the descriptor limits (2 per connection on
# one machine: the node's end and the generator's) and for /proc/slabinfo.
#
#   sudo benches/load/million.sh [clients] [workers] [out.json]
#   benches/load/million.sh 1000000 auto benches/load/results-million/w2.json
set -euo pipefail

clients=${1:-1000000}
workers=${2:-auto}
out=${3:-/tmp/million.json}
ferromq=${FERROMQ:-ferromq}
port=${PORT:-18830}
# A source address gives the generator 28,232 ports (ip_local_port_range 32768-60999).
addresses=$(( clients / 25000 + 1 ))

ulimit -Hn 1048576 && ulimit -Sn 1048576
data=$(mktemp -d)
trap 'kill "$node" 2>/dev/null || true; wait "$node" 2>/dev/null || true; rm -rf "$data"' EXIT
(cd "$data" && exec "$ferromq" serve -p "$port" --workers "$workers" > "$data/node.log" 2>&1) &
node=$!
for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.2
done
"$ferromq" bench conn --port "$port" --clients "$clients" --source-addresses "$addresses" \
    --keep-alive 60 --connect-timeout 300s --duration 60s --node-pid "$node" --quiet \
    --json "$out"
