#!/usr/bin/env bash
# The README's first command: bootlet against the embedded test control plane.
# Builds both binaries, starts `bootlet-testplane serve` on loopback with 60 s client
# certificates, runs `bootlet run` against it (CSR filed, approved, files written, a Lease
# renewal every 2 s, a rotation at ~45 s), and prints the kubectl line to look around.
# Ctrl-C stops both. Everything lives under $DEMO_DIR (default: a fresh temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --quiet --workspace --bins
dir=${DEMO_DIR:-$(mktemp -d /tmp/bootlet-demo.XXXXXX)}
mkdir -p "$dir/state" "$dir/node"

./target/debug/bootlet-testplane serve --listen 127.0.0.1:0 --state-dir "$dir/state" \
  --cert-ttl 60s --approve auto >"$dir/testplane.out" 2>"$dir/testplane.log" &
plane=$!
trap 'kill $plane 2>/dev/null; [ -n "${agent:-}" ] && kill $agent 2>/dev/null; wait 2>/dev/null' EXIT INT TERM
for _ in $(seq 100); do [ -s "$dir/testplane.out" ] && break; sleep 0.1; done
[ -s "$dir/testplane.out" ] || { cat "$dir/testplane.log"; exit 1; }

echo "test control plane: $(head -1 "$dir/testplane.out")   (state in $dir/state)"
echo "look at the objects with:"
echo "  kubectl --kubeconfig $dir/state/admin.conf get csr,nodes; kubectl --kubeconfig $dir/state/admin.conf get lease -n kube-node-lease -o wide"
echo "  kubectl --kubeconfig $dir/node/kubelet.conf get --raw /version    # the kubeconfig bootlet wrote"
echo

RUST_LOG=${RUST_LOG:-bootlet=debug,info} ./target/debug/bootlet run \
  --bootstrap-kubeconfig "$dir/state/bootstrap-kubelet.conf" \
  --kubeconfig "$dir/node/kubelet.conf" \
  --cert-dir "$dir/node/pki" \
  --node-name demo-node \
  --lease-renew-interval 2s --lease-duration 10s \
  --metrics-bind-address off &
agent=$!
wait $agent
