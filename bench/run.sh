#!/usr/bin/env bash
# Issue #13's one command, one table: bootlet, the hand-written baseline (bench/baseline.sh:
# bash + openssl + kubectl) and the bare HTTP stack (bench/src/bin/floor.rs), against one in-process
# testplane, each figure beside its budget. See bench/README.md for every knob and how to read it.
#   bash bench/run.sh                                  # the real 10 s interval, ~7 minutes
#   BENCH_INTERVAL_MS=1000 BENCH_WINDOW1_SECONDS=20 BENCH_STEADY_SECONDS=20 \
#     BENCH_BASELINE_SECONDS=20 bash bench/run.sh      # a quick look, under a minute
# The table is also written to target/bench-table.md. Exit status 2 on a harness error only;
# a missed budget prints FAIL.
#   bash bench/run.sh --real                           # on a real cluster, beside the kubelet's code (~50 min)
set -euo pipefail
cd "$(dirname "$0")/.."

# --real: bootlet beside the kubelet's own identity code (kube kubelet-identity) on a real
# cluster, with the floor (bench/src/bin/floor.rs) and the baseline (bench/baseline.sh) as references
# (bench/src/bin/real/, bench/README.md "run.sh --real"); the table goes to
# target/bench-real.md.
if [ "${1:-}" = "--real" ]; then
  # test-hooks: the "bootlet over HTTP/1.1" subject runs it with --test-lease-http1.
  cargo build --quiet --release -p bootlet --features test-hooks --bin bootlet
  cargo build --quiet --release -p bootlet-bench --bin floor --bin real
  mkdir -p target
  ulimit -n 65536 2>/dev/null || true
  ./target/release/real bench
  exec ./target/release/real rotation
fi

command -v openssl >/dev/null || { echo "bench: openssl is not on PATH" >&2; exit 2; }
if [ -z "${KUBECTL:-}" ]; then
  KUBECTL=$(command -v kubectl) || { echo "bench: kubectl is not on PATH (or set KUBECTL)" >&2; exit 2; }
  # Google Cloud SDK's kubectl is a dispatcher: each call first asks the server for /version
  # and then execs the matching kubectl.1.NN, a second connection and process no plain
  # kubectl makes. The baseline uses the binary it would pick (the testplane says v1.33).
  # (Read whole, not piped into grep -q: under pipefail an early exit of the reader fails the pipe.)
  client=$("$KUBECTL" version --client 2>/dev/null || true)
  if [[ $client == *dispatcher* ]]; then
    direct=$(dirname "$(readlink -f "$KUBECTL")")/kubectl.1.33
    if [ -x "$direct" ]; then KUBECTL=$direct; fi
  fi
fi
export KUBECTL

cargo build --quiet --release -p bootlet --bin bootlet
cargo build --quiet --release -p bootlet-bench --bin floor --bin suite
mkdir -p target
./target/release/suite | tee target/bench-table.md
