#!/usr/bin/env bash
# The baseline bootlet is measured against (bench/run.sh): what operators write by hand
# today to give a node its identity without an agent. openssl makes the key and the CSR
# (CN system:node:NAME, O system:nodes), kubectl files it with the bootstrap kubeconfig,
# waits for the certificate, writes the kubelet-layout files and a kubeconfig, then renews
# the node Lease with kubectl every INTERVAL seconds, forever.
#
#   NODE_NAME=n1 BOOTSTRAP_KUBECONFIG=/etc/kubernetes/bootstrap-kubelet.conf \
#   KUBECONFIG_OUT=/etc/kubernetes/kubelet.conf CERT_DIR=/var/lib/kubelet/pki bash bench/baseline.sh
#
# KUBECTL names the kubectl binary (default: kubectl on PATH), INTERVAL the renewal period
# in seconds (10), LEASE_DURATION the Lease's leaseDurationSeconds (40). No rotation, no
# retry beyond "try again next round": it is the script as written, not as it should be.
set -euo pipefail
: "${NODE_NAME:?}" "${BOOTSTRAP_KUBECONFIG:?}" "${KUBECONFIG_OUT:?}" "${CERT_DIR:?}"
INTERVAL=${INTERVAL:-10}
LEASE_DURATION=${LEASE_DURATION:-40}
KUBECTL=${KUBECTL:-kubectl}

umask 077
mkdir -p "$CERT_DIR"
chmod 0700 "$CERT_DIR"
key=$CERT_DIR/kubelet-client.key.tmp
pem=$CERT_DIR/kubelet-client-current.pem

# 1. Key and CSR.
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$key"
openssl req -new -key "$key" -subj "/O=system:nodes/CN=system:node:$NODE_NAME" \
  -out "$CERT_DIR/kubelet-client.csr"

# 2. File it with the bootstrap token and wait for the signed certificate.
csr=node-csr-$NODE_NAME-$(date +%s)
"$KUBECTL" --kubeconfig "$BOOTSTRAP_KUBECONFIG" create -f - <<EOF
apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata:
  name: $csr
spec:
  request: $(base64 -w0 <"$CERT_DIR/kubelet-client.csr")
  signerName: kubernetes.io/kube-apiserver-client-kubelet
  usages: [digital signature, client auth]
EOF
"$KUBECTL" --kubeconfig "$BOOTSTRAP_KUBECONFIG" wait "csr/$csr" \
  --for=jsonpath='{.status.certificate}' --timeout=1h
"$KUBECTL" --kubeconfig "$BOOTSTRAP_KUBECONFIG" get csr "$csr" \
  -o jsonpath='{.status.certificate}' | base64 -d >"$CERT_DIR/kubelet-client.crt"

# 3. The kubelet's layout: certificate and key in one file, moved into place.
cat "$CERT_DIR/kubelet-client.crt" "$key" >"$pem.tmp"
mv "$pem.tmp" "$pem"
rm -f "$key" "$CERT_DIR/kubelet-client.crt" "$CERT_DIR/kubelet-client.csr"

# 4. A kubeconfig for the new identity (server and CA from the bootstrap kubeconfig).
server=$("$KUBECTL" config view --kubeconfig "$BOOTSTRAP_KUBECONFIG" --raw --minify \
  -o jsonpath='{.clusters[0].cluster.server}')
"$KUBECTL" config view --kubeconfig "$BOOTSTRAP_KUBECONFIG" --raw --minify \
  -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d >"$CERT_DIR/ca.crt"
tmp=$KUBECONFIG_OUT.tmp
rm -f "$tmp"
"$KUBECTL" config --kubeconfig "$tmp" set-cluster default --server="$server" \
  --certificate-authority="$CERT_DIR/ca.crt" --embed-certs=true >/dev/null
"$KUBECTL" config --kubeconfig "$tmp" set-credentials default \
  --client-certificate="$pem" --client-key="$pem" >/dev/null
"$KUBECTL" config --kubeconfig "$tmp" set-context default --cluster=default --user=default >/dev/null
"$KUBECTL" config --kubeconfig "$tmp" use-context default >/dev/null
mv "$tmp" "$KUBECONFIG_OUT"

# 5. The node Lease: create it once, then bump renewTime every INTERVAL seconds.
now() { date -u +%Y-%m-%dT%H:%M:%S.%6NZ; }
"$KUBECTL" --kubeconfig "$KUBECONFIG_OUT" create -f - <<EOF || true
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: $NODE_NAME
  namespace: kube-node-lease
spec:
  holderIdentity: $NODE_NAME
  leaseDurationSeconds: $LEASE_DURATION
  renewTime: $(now)
EOF
while sleep "$INTERVAL"; do
  "$KUBECTL" --kubeconfig "$KUBECONFIG_OUT" -n kube-node-lease patch lease "$NODE_NAME" \
    --type merge -p "{\"spec\":{\"renewTime\":\"$(now)\"}}" >/dev/null ||
    echo "baseline: lease renewal failed" >&2
done
