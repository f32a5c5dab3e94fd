#!/usr/bin/env bash
# Installs bootlet as a systemd service: the binary, bootlet.service, the kubelet drop-in
# and the example config (never overwriting an existing config).
#
#   systemd/install.sh [--prefix /usr/local] [--destdir DIR] [--bin PATH] [--no-kubelet-dropin]
#
# --prefix   where the binary goes (PREFIX/bin/bootlet); ExecStart is rewritten to match.
# --destdir  staging root for packaging (files land in DESTDIR/...; systemctl is not run).
# --bin      the binary to install; default target/release/bootlet (built when missing).
# Units go to /etc/systemd/system, the config to /etc/bootlet/config.yaml.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=/usr/local
destdir=
bin=
dropin=true
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#*=}; shift ;;
    --destdir) destdir=$2; shift 2 ;;
    --destdir=*) destdir=${1#*=}; shift ;;
    --bin) bin=$2; shift 2 ;;
    --bin=*) bin=${1#*=}; shift ;;
    --no-kubelet-dropin) dropin=false; shift ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [ -z "$bin" ]; then
  bin=target/release/bootlet
  [ -x "$bin" ] || cargo build --release --locked --bin bootlet
fi
[ -x "$bin" ] || { echo "install.sh: $bin is not an executable" >&2; exit 1; }

unitdir="$destdir/etc/systemd/system"
install -D -m 0755 "$bin" "$destdir$prefix/bin/bootlet"
install -d -m 0755 "$unitdir"
sed "s|^ExecStart=/usr/local/bin/bootlet|ExecStart=$prefix/bin/bootlet|" \
  systemd/bootlet.service >"$unitdir/bootlet.service"
chmod 0644 "$unitdir/bootlet.service"
if $dropin; then
  install -D -m 0644 systemd/kubelet.service.d/20-bootlet.conf \
    "$unitdir/kubelet.service.d/20-bootlet.conf"
fi
if [ -e "$destdir/etc/bootlet/config.yaml" ]; then
  echo "keeping the existing $destdir/etc/bootlet/config.yaml"
else
  install -D -m 0644 config/bootlet.example.yaml "$destdir/etc/bootlet/config.yaml"
fi

echo "installed $destdir$prefix/bin/bootlet, $unitdir/bootlet.service$($dropin && echo ", the kubelet drop-in") and /etc/bootlet/config.yaml"
if [ -z "$destdir" ] && [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  echo "next: put the bootstrap kubeconfig at /etc/kubernetes/bootstrap-kubelet.conf, then"
  echo "      systemctl enable --now bootlet.service && systemctl restart kubelet.service"
fi
