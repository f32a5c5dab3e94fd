#!/usr/bin/env bash
# Issue 22: what protobuf and HTTP/2 on the wire save per Lease renewal: JSON vs protobuf,
# each over HTTP/1.1 (the testplane offering only http/1.1 by ALPN) and over HTTP/2. Runs
# the real bootlet binary four times against the testplane (`--test-lease-content-type
# json`, then `protobuf`), node bench-node with its Node registered (so the Lease carries the owner
# reference, as in bench/agent.sh), and prints per steady renewal: the bytes on the Lease
# connection at the testplane's TCP stream (TLS records included; request = what the
# server read, response = what it wrote) and bootlet's CPU (every thread's schedstat).
#   bash bench/proto.sh                      # 50 renewals at 200 ms each, per format
#   PROTO_RENEWALS=200 bash bench/proto.sh
#   PROTO_PROFILE=dev bash bench/proto.sh    # the debug build (bytes are the same; CPU is not)
# The release build is the shipped one minus fat LTO (as bench/testplane-lease.sh does),
# to keep the build short; CPU figures taken while other builds run are upper bounds.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=(--release)
if [ "${PROTO_PROFILE:-release}" = dev ]; then
  profile=()
else
  export CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
fi
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
PROTO_RENEWALS=${PROTO_RENEWALS:-50} cargo test --quiet "${profile[@]}" --features test-hooks --test local \
  lease_proto::bytes_and_cpu_per_renewal -- --nocapture --test-threads 1 2>&1 | grep '^|'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
