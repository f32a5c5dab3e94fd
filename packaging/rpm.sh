#!/usr/bin/env bash
# Builds the RPM bootlet-<version>-<release>.<arch>.rpm (default: into target/generate-rpm/)
# from [package.metadata.generate-rpm] in Cargo.toml, with cargo-generate-rpm: the .deb's
# files (packaging/deb.sh) from the same binary, man pages and completions.
#
#   bash packaging/rpm.sh [--bin PATH] [--release N] [--out DIR]
#
# 1. cargo build --release --locked (skipped with --bin: package that binary instead; the
#    life-cycle test packages its own build this way). SOURCE_DATE_EPOCH is the commit's
#    time unless set, as in deb.sh: the build date, the files' mtimes and the package's
#    build time come from the commit.
# 2. The man pages and the bash/zsh/fish completions, written by the binary being packaged.
# 3. cargo generate-rpm over a staging target dir holding that binary and those files.
#    The payload is gzip, not cargo-generate-rpm's default zstd: every rpm reads gzip, while
#    zstd needs rpm 4.14 or newer (not RHEL 7 or Amazon Linux 2); and this whole script took
#    1.1 s with gzip against 5.3 s with zstd on 2 cores, for a package 17 % larger (3.8 MB
#    against 3.2 MB from the release binary).
#
# --release  the package's release (default: Cargo.toml's, 1); the version is Cargo.toml's
# --out      where the .rpm goes (default: target/generate-rpm); its path is printed last
# Needs cargo-generate-rpm (cargo install cargo-generate-rpm --locked); tests/run.sh
# --install-only installs it. No rpmbuild is involved.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=
out=
release=
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --release) release=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "rpm.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
command -v cargo-generate-rpm >/dev/null ||
  { echo "rpm.sh: cargo-generate-rpm is missing: cargo install cargo-generate-rpm --locked" >&2; exit 1; }

if [ -z "${SOURCE_DATE_EPOCH:-}" ] && git rev-parse -q --verify HEAD >/dev/null 2>&1; then
  SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)
  export SOURCE_DATE_EPOCH
fi
# The target dir, the version and the release the file is named after.
read -r target version default_release < <(cargo metadata --format-version 1 --no-deps --locked |
  python3 -c 'import json,sys; m=json.load(sys.stdin); p=[p for p in m["packages"] if p["name"] == "bootlet"][0]; print(m["target_directory"], p["version"], p["metadata"]["generate-rpm"]["release"])')
release=${release:-$default_release}
if [ -z "$bin" ]; then
  cargo build --release --locked --bin bootlet
  bin=$target/release/bootlet
fi
[ -x "$bin" ] || { echo "rpm.sh: $bin is not an executable" >&2; exit 1; }
out=${out:-$target/generate-rpm}

# cargo-generate-rpm reads `target/release/...` assets from <target dir>/release: a staging
# dir with only what this package holds, as in deb.sh.
stage=$(mktemp -d "${TMPDIR:-/tmp}/bootlet-rpm.XXXXXX")
trap 'rm -rf "$stage"' EXIT
# The binary, stripped, its man pages and completions (packaging/stage.sh).
. packaging/stage.sh
stage_release "$bin" "$stage"

mkdir -p "$out"
# -p .: the root package of the workspace (cargo-generate-rpm otherwise asks which).
# --auto-req builtin: the shared libraries ldd names (glibc's), also on a build host
# without rpm's find-requires.
cargo generate-rpm -p . --target-dir "$stage" --payload-compress gzip --auto-req builtin \
  --set-metadata "release = \"$release\"" --output "$out" >&2
rpm=$out/bootlet-$version-$release.$(uname -m).rpm
[ -f "$rpm" ] || { echo "rpm.sh: cargo generate-rpm wrote no $rpm" >&2; exit 1; }
echo "$rpm"
