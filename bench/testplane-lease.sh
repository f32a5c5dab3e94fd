#!/bin/sh
# Lease-update throughput of the testplane over keep-alive TLS connections (issue #2:
# >= 2,000 updates/s on a 2-core machine). Usage: bench/testplane-lease.sh [WORKERS] [SECONDS]
# Builds the driver (bench/src/bin/lease_bench.rs) optimised; thin LTO is turned off only to keep the build short.
set -eu
cd "$(dirname "$0")/.."
export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
       CARGO_PROFILE_RELEASE_OPT_LEVEL=2 CARGO_PROFILE_RELEASE_STRIP=false
cargo build -q --release -p bootlet-bench --bin lease_bench
exec target/release/lease_bench "${1:-8}" "${2:-5}"
