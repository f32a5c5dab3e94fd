#!/usr/bin/env bash
# Many more SIGKILLs than `cargo test` runs: tests/local/crash.rs with CRASH_KILLS (default 2000)
# kills in all (the ~90 at every file operation of a bootstrap and a rotation, the rest at
# random moments of bootstraps and rotations, network steps included), each followed by a
# restart and the checks; then the power-cut tests on the simulated disk. Prints the kill
# counts per phase and per step. Usage: bench/crash.sh [KILLS]
set -euo pipefail
cd "$(dirname "$0")/.."
kills=${1:-${CRASH_KILLS:-2000}}
start=$(date +%s)
# --test-crash-at exists only in a test-hooks build.
CRASH_KILLS=$kills cargo test --quiet --features test-hooks --test local crash:: -- --nocapture --test-threads 1 2>&1 |
  grep -oE '(bootstrap|rotation|timed): .*|^test result.*|panicked.*' || { echo "crash tests FAILED"; exit 1; }
cargo test --quiet --features test-hooks --lib pki::files::powercut -- --nocapture --test-threads 1 2>&1 |
  grep -E 'power cuts|^test result|panicked'
echo "wall: $(( $(date +%s) - start )) s for $kills kills"
