#!/usr/bin/env bash
# Issue #14: the API server gone for OUTAGE_SECONDS (300: five minutes) while bootlet renews
# its Lease at the real 10 s interval. Prints the agent's CPU in each 60 s window of the
# outage (budget: <= 1 % of one core), its wake-ups and warning lines, and the time from the
# server's return to the first request and the first Lease renewal (budget: <= one interval).
#   bash bench/outage.sh                                    # 5 minutes at 10 s (~6 min)
#   OUTAGE_SECONDS=60 bash bench/outage.sh                  # one 60 s window
#   OUTAGE_SECONDS=20 OUTAGE_INTERVAL_MS=1000 CPU_WINDOW_SECONDS=10 bash bench/outage.sh   # a quick look
# The short version runs in the test suite: tests/local/faults.rs
# (an_outage_costs_under_one_percent_of_a_core_and_the_lease_returns_within_one_interval).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release -p bootlet
cargo build --quiet --release -p bootlet-bench --bin outage
BOOTLET_BIN=${BOOTLET_BIN:-target/release/bootlet} ./target/release/outage
