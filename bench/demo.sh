#!/usr/bin/env bash
# The README's first command: bootlet against the embedded test control plane.
# Builds both binaries, starts `bootlet-testplane serve` on loopback with 60 s client
# certificates, runs `bootlet run` against it (CSR filed, approved, files written, a Lease
# renewal every 2 s, a rotation at ~45 s), and prints the kubectl line to look around.
#
# `--real`: the same against real Kubernetes (`bootlet-testplane kube`: etcd,
# kube-apiserver and kube-controller-manager built from upstream, built first if needed —
# the first build takes 15-25 minutes on 2 cores, later ones seconds). The real signer
# issues 3-minute certificates here (--cluster-signing-duration=3m, the shortest this demo
# uses; it backdates notBefore by 5 minutes, so 75 % of the 8-minute lifetime comes about
# a minute after issuance) and kubectl is the one built with it.
#
# Ctrl-C stops everything. Everything lives under $DEMO_DIR (default: a fresh temp dir).
set -euo pipefail
cd "$(dirname "$0")/.."

real=false
case "${1:-}" in
  --real) real=true ;;
  "") ;;
  *) echo "usage: bash bench/demo.sh [--real]" >&2; exit 2 ;;
esac

cargo build --quiet --workspace --bins
dir=${DEMO_DIR:-$(mktemp -d /tmp/bootlet-demo.XXXXXX)}
mkdir -p "$dir/state" "$dir/node"

if $real; then
  # Progress of a first build shows here; the cluster itself logs to $dir/state/logs/.
  kube=$(./target/debug/bootlet-testplane kube-build)
  kubectl="$kube kubectl"
  ./target/debug/bootlet-testplane kube --listen 127.0.0.1:0 --state-dir "$dir/state" \
    --cert-ttl 3m --approve auto >"$dir/testplane.out" 2>"$dir/testplane.log" &
  wait_tenths=1800
else
  kubectl=kubectl
  ./target/debug/bootlet-testplane serve --listen 127.0.0.1:0 --state-dir "$dir/state" \
    --cert-ttl 60s --approve auto >"$dir/testplane.out" 2>"$dir/testplane.log" &
  wait_tenths=100
fi
plane=$!
trap 'kill $plane 2>/dev/null; [ -n "${agent:-}" ] && kill $agent 2>/dev/null; wait 2>/dev/null' EXIT INT TERM
for _ in $(seq $wait_tenths); do [ -s "$dir/testplane.out" ] && break; sleep 0.1; done
[ -s "$dir/testplane.out" ] || { cat "$dir/testplane.log"; exit 1; }

if $real; then
  echo "Kubernetes $($kubectl version --client -o json | sed -n 's/.*"gitVersion": "\(v[^"]*\)".*/\1/p' | head -1): $(head -1 "$dir/testplane.out")   (state and component logs in $dir/state)"
else
  echo "test control plane: $(head -1 "$dir/testplane.out")   (state in $dir/state)"
fi
echo "look at the objects with:"
echo "  $kubectl --kubeconfig $dir/state/admin.conf get csr,nodes; $kubectl --kubeconfig $dir/state/admin.conf get lease -n kube-node-lease -o wide"
echo "  $kubectl --kubeconfig $dir/node/kubelet.conf auth whoami    # the kubeconfig bootlet wrote"
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
