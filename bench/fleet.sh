#!/usr/bin/env bash
# Issue #14's fleet: N real bootlet processes (default 200) against one in-process testplane,
# and what the API server sees: bootstrap completion times, the steady request rate and
# bytes per renewal, RSS, the return after a 60 s outage, a cluster-wide rotation.
#   bash bench/fleet.sh            # 200 agents, the real 10 s interval, ~6 minutes
#   bash bench/fleet.sh 50         # fewer agents
#   bash bench/fleet.sh 500 --real # on a real cluster, bootlet then the kubelet's code (~20 min)
#   FLEET_INTERVAL_MS=2000 FLEET_STEADY_SECONDS=20 FLEET_OUTAGE_SECONDS=10 \
#     FLEET_CERT_SECONDS=120 bash bench/fleet.sh 50   # a quick look (~2 minutes)
# See bench/README.md for every knob. Exit status 2 on a harness error only; a missed
# criterion prints FAIL.
set -euo pipefail
cd "$(dirname "$0")/.."

n=${1:-${FLEET_N:-200}}
# N --real: the real cluster instead (bench/src/bin/real/fleet.rs): bootlet's N, then the
# peer's (the kubelet's identity code), a kube-apiserver SIGKILL and restart, then APF
# throttling. The report goes to target/bench-fleet-real.md.
if [ "${2:-}" = "--real" ] || [ "${1:-}" = "--real" ]; then
  [ "$n" = "--real" ] && n=${2:-${FLEET_N:-500}}
  ulimit -n 65536 2>/dev/null || true
  cargo build --quiet --release -p bootlet --features test-hooks --bin bootlet
  cargo build --quiet --release -p bootlet-bench --bin real
  mkdir -p target
  exec ./target/release/real fleet "$n"
fi
# Each agent holds a few descriptors; the driver holds a notify socket and a log per agent.
ulimit -n "$(( n * 8 + 1024 ))" 2>/dev/null || true
# test-hooks: under a 1 s interval the agents run with --test-short-lease-interval.
cargo build --quiet --release -p bootlet --features test-hooks --bin bootlet
cargo build --quiet --release -p bootlet-bench --bin fleet
mkdir -p target
./target/release/fleet "$n" | tee target/bench-fleet.txt
