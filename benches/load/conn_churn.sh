#!/usr/bin/env bash
# Broker CPU per connection set up and torn down (issue 25 item 3): the broker on core
# 1, `ferromq bench conn` on core 0 opening 10,000 clients four times (CONNECT,
# CONNACK, one second held, DISCONNECT and close), 16 loopback source addresses so the
# generator's TIME-WAIT ports never run out. Prints the broker's CPU seconds (utime +
# stime from /proc) for the 40,000.
#
#   benches/load/conn_churn.sh PORT -- BROKER COMMAND...
#   FERROMQ_LOG__LEVEL=warning benches/load/conn_churn.sh 18844 -- \
#       ferromq serve -p 18844 --workers 1
#   benches/load/conn_churn.sh 18843 -- ~/.cache/ferromq-peers/flashmq/bin/flashmq \
#       --config-file benches/load/results-issue25-io/conn-churn/flashmq.conf
#
# BENCH_ARGS adds generator options, e.g. TLS 1.3 (benches/load/tls_pki.sh makes the
# certificates; the generator resumes sessions with the tickets the broker sends, and
# the printed line says how many of the 10,000 did):
#   BENCH_ARGS="--transport tls --tls-ca-file /tmp/pki/ca.pem" \
#       benches/load/conn_churn.sh 18845 -- ferromq serve --config tls.toml
set -euo pipefail
port=$1
shift 2
bench=${BENCH:-ferromq}
taskset -c 1 "$@" > /dev/null 2>&1 &
pid=$!  # taskset runs the broker in its own process
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT
sleep 3
before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
for _ in 1 2 3 4; do
    # shellcheck disable=SC2086 # BENCH_ARGS is a list of options
    taskset -c 0 "$bench" bench conn --port "$port" --clients 10000 --source-addresses 16 \
        --duration 1s --threads 1 --quiet ${BENCH_ARGS:-} | sed -n 2p
done
after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
echo "broker CPU for 40,000 connections: $(( (after - before) * 10 )) ms"
