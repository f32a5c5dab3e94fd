#!/usr/bin/env bash
# Installs bootlet as a systemd service: the binary, bootlet.service, the kubelet drop-in
# and the example config (never overwriting an existing config; with the kubelet drop-in
# it says renewLease: false, since the kubelet then renews its own node Lease), the man
# pages and the bash/zsh/fish completions under PREFIX/share. For hosts without dpkg: the Debian package
# (packaging/deb.sh) is the primary install path.
#
#   systemd/install.sh [--prefix /usr/local] [--destdir DIR] [--bin PATH] [--no-kubelet-dropin]
#                      [--serving] [--kubelet-config FILE]
#
# --prefix   where the binary goes (PREFIX/bin/bootlet); ExecStart is rewritten to match.
# --destdir  staging root for packaging (files land in DESTDIR/...; systemctl is not run).
# --bin      the binary to install; default target/release/bootlet (built when missing).
# --serving  also install kubelet.service.d/30-bootlet-serving.conf (the kubelet serves with
#            bootlet's kubelet-server-current.pem; set serverTLSBootstrap: true in bootlet's
#            config). Refused while the kubelet's config sets its own serverTLSBootstrap true.
#            Without --serving, a 30-bootlet-serving.conf from an earlier run is removed.
# --kubelet-config  the kubelet's config file --serving checks; default
#            /var/lib/kubelet/config.yaml (under DESTDIR).
# Units go to /etc/systemd/system, the config to /etc/bootlet/config.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=/usr/local
destdir=
bin=
dropin=true
serving=false
kubelet_config=/var/lib/kubelet/config.yaml
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#*=}; shift ;;
    --destdir) destdir=$2; shift 2 ;;
    --destdir=*) destdir=${1#*=}; shift ;;
    --bin) bin=$2; shift 2 ;;
    --bin=*) bin=${1#*=}; shift ;;
    --no-kubelet-dropin) dropin=false; shift ;;
    --serving) serving=true; shift ;;
    --kubelet-config) kubelet_config=$2; shift 2 ;;
    --kubelet-config=*) kubelet_config=${1#*=}; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

pki=/var/lib/kubelet/pki
if $serving; then
  $dropin || { echo "install.sh: --serving needs the kubelet drop-in (drop --no-kubelet-dropin)" >&2; exit 2; }
  # serverTLSBootstrap has no kubelet flag: when the kubelet's config turns it on, the
  # kubelet ignores --tls-cert-file and files serving CSRs of its own. Check before
  # installing anything. YAML or JSON (comment lines skipped); the value in any case.
  kcfg="$destdir$kubelet_config"
  if [ -e "$kcfg" ] && grep -v '^[[:space:]]*#' "$kcfg" |
    grep -Eiq '(^|[{,[:space:]])"?serverTLSBootstrap"?[[:space:]]*:[[:space:]]*"?(true|yes|on)"?[[:space:]]*(,|}|#|$)'; then
    echo "install.sh: $kcfg sets serverTLSBootstrap: true; with --serving bootlet owns the" >&2
    echo "  serving certificate: set serverTLSBootstrap: false there (and serverTLSBootstrap: true" >&2
    echo "  in /etc/bootlet/config.yaml), then run install.sh --serving again" >&2
    exit 1
  fi
  if [ -z "$destdir" ] && [ ! -e "$kcfg" ]; then
    echo "note: $kcfg not found; keep the kubelet's serverTLSBootstrap false when it is written"
  fi
fi

if [ -z "$bin" ]; then
  bin=target/release/bootlet
  [ -x "$bin" ] || cargo build --release --locked --bin bootlet
fi
[ -x "$bin" ] || { echo "install.sh: $bin is not an executable" >&2; exit 1; }

unitdir="$destdir/etc/systemd/system"
install -D -m 0755 "$bin" "$destdir$prefix/bin/bootlet"
# The man pages and the shell completions, written by the binary itself (as in the package).
docs=$(mktemp -d)
trap 'rm -rf "$docs"' EXIT
"$bin" generate man "$docs" >/dev/null
"$bin" generate completions "$docs" >/dev/null
gzip -9n "$docs"/*.1
install -d -m 0755 "$destdir$prefix/share/man/man1"
install -m 0644 "$docs"/*.1.gz "$destdir$prefix/share/man/man1/"
install -D -m 0644 "$docs/bootlet.bash" "$destdir$prefix/share/bash-completion/completions/bootlet"
install -D -m 0644 "$docs/_bootlet" "$destdir$prefix/share/zsh/site-functions/_bootlet"
install -D -m 0644 "$docs/bootlet.fish" "$destdir$prefix/share/fish/vendor_completions.d/bootlet.fish"
install -d -m 0755 "$unitdir"
sed "s|^ExecStart=/usr/bin/bootlet|ExecStart=$prefix/bin/bootlet|" \
  systemd/bootlet.service >"$unitdir/bootlet.service"
chmod 0644 "$unitdir/bootlet.service"
if $dropin; then
  # Its ExecStartPre runs the bootlet just installed.
  install -d -m 0755 "$unitdir/kubelet.service.d"
  sed "s|^ExecStartPre=/usr/bin/bootlet |ExecStartPre=$prefix/bin/bootlet |" \
    systemd/kubelet.service.d/20-bootlet.conf >"$unitdir/kubelet.service.d/20-bootlet.conf"
  chmod 0644 "$unitdir/kubelet.service.d/20-bootlet.conf"
fi
serving_dropin="$unitdir/kubelet.service.d/30-bootlet-serving.conf"
if $serving; then
  install -D -m 0644 systemd/kubelet.service.d/30-bootlet-serving.conf "$serving_dropin"
  if [ -z "$destdir" ] && [ ! -e "$pki/kubelet-server-current.pem" ]; then
    echo "note: $pki/kubelet-server-current.pem does not exist yet: start bootlet (with"
    echo "      rotateServerCertificates/serverTLSBootstrap on) before the kubelet; it writes a"
    echo "      self-signed placeholder until the first kubelet-serving CSR is approved"
    echo "      (kubectl get csr; kubectl certificate approve NAME)"
  fi
elif [ -e "$serving_dropin" ]; then
  rm -f "$serving_dropin"
  echo "removed $serving_dropin (installed without --serving)"
fi
# With the kubelet drop-in the kubelet renews its own node Lease, so bootlet must not:
# two writers hide a dead kubelet. A fresh config says renewLease: false; an existing one
# that does not is named.
config="$destdir/etc/bootlet/config.yaml"
if [ -e "$config" ]; then
  echo "keeping the existing $config"
  if $dropin && ! grep -Eq '^renewLease:[[:space:]]*false[[:space:]]*(#.*)?$' "$config"; then
    echo "note: with the kubelet drop-in the kubelet renews its own node Lease: set"
    echo "      renewLease: false in $config (two writers hide a dead kubelet)"
  fi
elif $dropin; then
  install -d -m 0755 "$(dirname "$config")"
  sed 's/^renewLease: true$/renewLease: false/' config/bootlet.example.yaml >"$config"
  chmod 0644 "$config"
  grep -q '^renewLease: false$' "$config" || { echo "install.sh: could not set renewLease: false in $config" >&2; exit 1; }
else
  install -D -m 0644 config/bootlet.example.yaml "$config"
fi

echo "installed $destdir$prefix/bin/bootlet, $unitdir/bootlet.service$($dropin && echo ", the kubelet drop-in")$($serving && echo ", the serving drop-in") and /etc/bootlet/config.yaml"
if [ -z "$destdir" ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  echo "next: put the bootstrap kubeconfig at /etc/kubernetes/bootstrap-kubelet.conf, then"
  echo "      systemctl enable --now bootlet.service && systemctl restart kubelet.service"
fi
