#!/usr/bin/env bash
# The floor under the Lease loop's CPU per renewal on this machine: what one timer
# wake-up costs (tokio's wheel vs bootlet's timerfd Ticker) and what a bare reqwest PUT
# of a Lease costs over HTTP/2 and HTTP/1.1 with mTLS, with no bootlet code around it.
# Compare with bench/agent.sh's "CPU per renewal" for the real binary.
#   bash bench/floor.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release --example floor
./target/release/examples/floor
