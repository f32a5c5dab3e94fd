#!/usr/bin/env bash
# The floor under the Lease loop's CPU per renewal on this machine: what one timer
# wake-up costs (tokio's wheel vs bootlet's timerfd Ticker) and what a bare reqwest PUT
# of a Lease costs over HTTP/2 and HTTP/1.1 with mTLS, with no bootlet code around it
# (HTTP/2 also from a child process), and what bootlet's own Lease loop costs in-process.
# Compare with bench/agent.sh's "CPU per renewal" for the real binary.
#   FLOOR_INTERVAL_MS=10000 FLOOR_ROUNDS=18 bash bench/floor.sh   # the real interval, 3 min
#   bash bench/floor.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release -p bootlet-bench --bin floor
./target/release/floor
