#!/usr/bin/env bash
# The inner loop: the gates a change meets before the whole test command, in a few
# minutes, on a machine where `bash scripts/test.sh` ran once (its .venv and toolchain).
#
#   bash scripts/quick.sh                       # build, lint, the Rust core, the unit tests
#   bash scripts/quick.sh tests/cluster/test_will_adoption.py   # and these pytest paths
#
# Paths that need Redis or Kafka get them from tests/conftest.py as in the full run. The
# whole suite, the fuzzing, the wheel and the second pass at two shards stay with
# scripts/test.sh, which CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    echo "quick: no .venv here: run 'bash scripts/test.sh' once first" >&2
    exit 2
fi
# shellcheck disable=SC1091
. .venv/bin/activate

step() { printf '\n==== %s (%s)\n' "$*" "$(date +%T)"; }

step "build: the compiled modules (incremental)"
# test.sh installs ferromq as a wheel; an editable build without isolation needs the
# build requirements (pyproject.toml [build-system]) in the venv itself.
pip install -q "setuptools>=77" "setuptools-rust>=1.9" "Cython>=3.0" wheel
pip install -q -e . --no-build-isolation --no-deps

step "lint: ruff, mypy --strict, stubtest, cargo fmt, clippy"
ruff check python tests benches scripts
ruff format --check python tests benches scripts
mypy
# the hand-written .pyi of the compiled modules against the build, from /tmp as in CI
root=$PWD
(cd /tmp && python -m mypy.stubtest ferromq._core ferromq._protocol \
    --mypy-config-file "$root/pyproject.toml")
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings

step "rust: the core's tests"
cargo test -p ferromq-core -p ferromq-io --quiet

step "python: the unit tests${*:+ and $*}"
paths=("$PWD/tests/unit")
for path in "$@"; do
    paths+=("$(realpath "$path")")
done
# From /tmp, as the full run: the tests import the installed package, not ./python.
(cd /tmp && python -m pytest -p no:cacheprovider -q -n 2 "${paths[@]}")
