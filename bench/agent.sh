#!/usr/bin/env bash
# Budgets of issues #3 and #4, measured on the release binary against the in-process
# testplane: bootstrap latency and peak RSS, then the Lease loop (requests and TLS
# handshakes per renewal, interval deviation, CPU per renewal, steady RSS).
#   LEASE_SECONDS=600 LEASE_INTERVAL_MS=10000 bash bench/agent.sh   # the issue's 10 minutes at 10 s
#   LEASE_SECONDS=60  LEASE_INTERVAL_MS=1000  bash bench/agent.sh   # a quick look
#   UNDER_SYSTEMD=1 bash bench/agent.sh   # as systemd runs it: notify socket, WATCHDOG_USEC=30s
#   UNDER_SYSTEMD=1 WATCHDOG_USEC=3000000 LEASE_INTERVAL_MS=1000 LEASE_SECONDS=60 bash bench/agent.sh   # quick, same ratios
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release -p bootlet
cargo build --quiet --release -p bootlet-bench --bin agent_bench
echo "release binary: $(stat -c %s target/release/bootlet) bytes ($(du -h target/release/bootlet | cut -f1))"
BOOTLET_BIN=target/release/bootlet ./target/release/agent_bench
