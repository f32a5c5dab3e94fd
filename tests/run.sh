#!/usr/bin/env bash
# The README's test command: one command that passes on a fresh machine from any checkout
# location. It installs what the suite needs and the machine lacks (as root, from the
# distribution's packages and crates.io), builds the real Kubernetes components once for
# each end of the supported range (testplane/kube and testplane/kube-oldest: cached in
# GOCACHE/GOMODCACHE and target/kube, target/kube-oldest, seconds when warm), then
# runs the whole suite: every unit and integration test of the workspace, the real-cluster
# tests (tests/kube/) beside the rest, since they spend their time waiting for
# certificates to age while the others keep the cores busy. Everything is built with the
# `test-hooks` feature (the hidden --test-* flags most integration tests start bootlet
# with; without it they are ignored, never passed), then tests/local/cli.rs once more without
# it: the shipped build refuses those flags and carries none of their strings.
#   bash tests/run.sh                  # everything (~13 minutes on 2 cores, warm caches)
#   bash tests/run.sh --serial         # one test binary at a time, as plain cargo test does
#   bash tests/run.sh --install-only   # only install what is missing (.ci/run does this first)
# Exit status: 0 when every test passed; otherwise the first failing part's status.
set -euo pipefail
cd "$(dirname "$0")/.."

serial=false
install_only=false
for arg in "$@"; do
  case $arg in
    --serial) serial=true ;;
    --install-only) install_only=true ;;
    *) echo "tests/run.sh: unknown argument $arg (--serial, --install-only)" >&2; exit 2 ;;
  esac
done

have() { command -v "$1" >/dev/null 2>&1; }
apt_updated=false
apt_install() {
  if [ "$(id -u)" != 0 ]; then
    echo "tests/run.sh: $* missing; run as root (the systemd tests need root anyway)" >&2
    return 1
  fi
  if ! $apt_updated; then apt-get update -qq || true; apt_updated=true; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

# What the tests drive for real: openssl (chains, subjects), ss (tests/local/lease.rs reads the
# Lease connection's TCP keepalive timer), systemd-nspawn and systemd-analyze (the systemd
# tests boot containers), python3 (the kubelet stand-in's /healthz in them), promtool
# (tests/local/alert_rules.rs: Debian ships it in prometheus), the Debian package tools
# (tests/root/systemd/package.rs builds and installs the .deb: cargo-deb, pinned to the version
# its maintainer scripts were checked with; dpkg-shlibdeps; strip; man for its man page).
# kubectl is not among them: the tests use the one built from the pinned release.
have openssl || apt_install openssl
have ss || apt_install iproute2
have systemd-analyze || apt_install systemd
have systemd-nspawn || apt_install systemd-container
have python3 || apt_install python3
have promtool || apt_install --no-install-recommends prometheus
have dpkg-shlibdeps || apt_install dpkg-dev
have strip || apt_install binutils
have lintian || apt_install --no-install-recommends lintian
have man || apt_install man-db
# kubeadm join's preflight needs iptables on PATH (FileExisting-iptables) on the node the
# kubeadm test boots from this machine's root (tests/root/systemd/kubeadm.rs).
have iptables || apt_install iptables
have cargo-deb || cargo install --locked cargo-deb --version 3.8.0
# The RPM (tests/root/systemd/package.rs builds, installs, upgrades and erases it beside the
# .deb; .ci/run lints it): cargo-generate-rpm, pinned to the version its metadata and
# scriptlets were checked with, and Debian's rpm (no rpmbuild involved) and rpmlint.
have cargo-generate-rpm || cargo install --locked cargo-generate-rpm --version 0.21.1
have rpm || apt_install --no-install-recommends rpm
have rpmlint || apt_install --no-install-recommends rpmlint
# Go builds the real Kubernetes components. A Go older than testplane/kube/go.mod's `go`
# line (1.21 or newer) fetches the toolchain that line names through the module proxy
# (GOTOOLCHAIN=auto, Go's default).
if ! have go && [ -x /usr/local/go/bin/go ]; then export PATH=$PATH:/usr/local/go/bin; fi
have go || apt_install golang-go
go version
$install_only && exit 0

# One feature set for every invocation below but the last, so nothing is compiled twice.
# --include-ignored: the tests a plain `cargo test` lists as ignored, with the reason
# (they need root, systemd-nspawn or the Kubernetes build), run here.
features=(--features bootlet/test-hooks)
# The default build's own check (tests/local/cli.rs), after the rest: bootlet compiled
# again without the feature (below, in target/default: its first run compiles the
# dependencies there too, a few minutes; later runs only bootlet).
default_build() { cargo test -p bootlet --locked --test local cli::; }

echo "== build (the workspace's tests, then the Kubernetes components)" >&2
cargo test --workspace --locked "${features[@]}" --no-run
# Its own progress on stderr; seconds when target/kube/kube is newer than its sources.
# Both ends of the supported range: the newest release (tests/kube/) and the
# oldest supported minor (target/kube-oldest/kube, tests/kube/oldest.rs).
cargo run --quiet --locked -p bootlet-testplane -- kube-build
cargo run --quiet --locked -p bootlet-testplane -- kube-build --release oldest

if $serial; then
  status=0
  cargo test --workspace --locked "${features[@]}" --no-fail-fast -- --include-ignored || status=$?
  default_build || { s=$?; [ $status != 0 ] || status=$s; }
  exit $status
fi

# The real-cluster tests (tests/kube/) in the background: one binary whose modules each
# start a cluster of their own, at most two at a time; everything else in the foreground. Their
# output goes to a log, printed whole at the end so the two never interleave.
# Every invocation names the whole workspace, as the build above did: one feature set, so
# nothing is compiled again (`-p` of one package would unify features differently).
mkdir -p target
kube_log=target/tests-kube.log
started=$SECONDS
# A process group of its own, so an interrupted run stops the test binaries (and, through
# them, their clusters) too.
setsid cargo test --workspace --locked "${features[@]}" --no-fail-fast --test kube -- --include-ignored >"$kube_log" 2>&1 &
kube_pid=$!
trap 'kill -- "-$kube_pid" 2>/dev/null || true' EXIT

status=0
cargo test --workspace --locked "${features[@]}" --no-fail-fast --lib --bins --test local --test root -- --include-ignored || status=$?
cargo test --workspace --locked "${features[@]}" --doc || { s=$?; [ $status != 0 ] || status=$s; }
echo "== the rest done in $((SECONDS - started)) s; the default build beside the real-cluster tests" >&2
# In a target directory of its own: the real-cluster tests still start target/debug/bootlet,
# built with the feature, which this build must not replace under them.
CARGO_TARGET_DIR=target/default default_build || { s=$?; [ $status != 0 ] || status=$s; }

kube_status=0
wait "$kube_pid" || kube_status=$?
trap - EXIT
echo "== the real-cluster tests (tests/kube/), done in $((SECONDS - started)) s"
cat "$kube_log"
[ $status = 0 ] && status=$kube_status
exit $status
