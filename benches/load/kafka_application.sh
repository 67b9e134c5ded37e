#!/usr/bin/env bash
# APPLICATION subscribers whose queues are in Kafka (storage.application_store = "kafka"):
# P2P, 10 persistent pairs, one shard on the embedded primary store, against a running
# Kafka. Prints delivered msg/s and the broker's and Kafka's cores over the run.
#
#   benches/load/kafka_application.sh <venv> <kafka host:port> <qos> [kafka|embedded]
#
# <venv> holds the ferromq build to measure (two builds side by side: run it with each,
# interleaved). Kafka's CPU is read from the first `kafka.Kafka` process on this machine
# (tests/support/services.py starts one); the broker listens on port 21883.
set -euo pipefail
VENV=$1 KAFKA=$2 QOS=$3 STORE=${4:-kafka}
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
cat > "$DIR/broker.toml" <<T
[[listeners]]
port = 21883
[storage]
path = "$DIR/data"
T
if [ "$STORE" = kafka ]; then
    cat >> "$DIR/broker.toml" <<T
application_client_prefixes = ["app-s"]
application_store = "kafka"
[kafka]
bootstrap_servers = "$KAFKA"
topic_prefix = "bench.$$.$RANDOM."
T
fi
FERROMQ_SERVER__WORKERS=1 "$VENV/bin/ferromq" serve --config "$DIR/broker.toml" > "$DIR/log" 2>&1 &
BROKER=$!
trap 'kill $BROKER 2>/dev/null; rm -rf "$DIR"' EXIT
for _ in $(seq 50); do (echo > /dev/tcp/127.0.0.1/21883) 2>/dev/null && break; sleep 0.2; done
JVM=$(pgrep -f kafka.Kafka | head -1)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
b0=$(ticks $BROKER) k0=$(ticks "$JVM") t0=$(date +%s.%N)
"$VENV/bin/ferromq" bench p2p --port 21883 --qos "$QOS" --pairs 10 --persistent \
    --client-id-prefix app --duration 10s --inflight 16 --json "$DIR/report.json" --quiet
b1=$(ticks $BROKER) k1=$(ticks "$JVM") t1=$(date +%s.%N)
python3 - "$DIR/report.json" "$b0" "$b1" "$k0" "$k1" "$t0" "$t1" "$QOS" "$STORE" <<'P'
import json, os, sys
report, b0, b1, k0, k1, t0, t1, qos, store = sys.argv[1:]
r = json.load(open(report))
hz, wall = os.sysconf("SC_CLK_TCK"), float(t1) - float(t0)
print(
    f"{store} QoS {qos}: {r['received_per_s']:,.0f} msg/s delivered, "
    f"broker {(int(b1) - int(b0)) / hz / wall:.2f} cores, "
    f"Kafka {(int(k1) - int(k0)) / hz / wall:.2f} cores over {wall:.1f} s"
)
P
