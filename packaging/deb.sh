#!/usr/bin/env bash
# Builds the Debian package bootlet_<version>-<revision>_<arch>.deb (default: into
# target/debian/) from [package.metadata.deb] in Cargo.toml, with cargo-deb.
#
#   bash packaging/deb.sh [--bin PATH] [--deb-version V] [--out DIR] [--fast]
#
# 1. cargo build --release --locked (skipped with --bin: package that binary instead; the
#    life-cycle test packages its own build this way). SOURCE_DATE_EPOCH is the commit's
#    time unless set, so `bootlet version`'s build date, the man pages' date and the
#    files' mtimes come from the commit: two builds of one commit give the same package.
# 2. The man pages and the bash/zsh/fish completions, written by the binary being packaged
#    (`bootlet generate man|completions DIR`): generated from its clap definition, they
#    cannot drift from its --help. CHANGELOG.md becomes /usr/share/doc/bootlet/changelog.gz.
# 3. cargo deb --no-build over a staging target dir holding that binary and those files.
#
# --deb-version  the package version (default: Cargo.toml's version, revision 1)
# --out          where the .deb goes (default: target/debian); its path is printed last
# --fast         quicker, larger compression (tests)
# Needs cargo-deb (cargo install cargo-deb --locked); .ci/run installs it.
set -euo pipefail
cd "$(dirname "$0")/.."

bin=
out=
deb_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --deb-version) deb_args+=(--deb-version "$2"); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --fast) deb_args+=(--fast); shift ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "deb.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
command -v cargo-deb >/dev/null ||
  { echo "deb.sh: cargo-deb is missing: cargo install cargo-deb --locked" >&2; exit 1; }

if [ -z "${SOURCE_DATE_EPOCH:-}" ] && git rev-parse -q --verify HEAD >/dev/null 2>&1; then
  SOURCE_DATE_EPOCH=$(git log -1 --format=%ct)
  export SOURCE_DATE_EPOCH
fi
target=$(cargo metadata --format-version 1 --no-deps --locked |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
if [ -z "$bin" ]; then
  cargo build --release --locked --bin bootlet
  bin=$target/release/bootlet
fi
[ -x "$bin" ] || { echo "deb.sh: $bin is not an executable" >&2; exit 1; }
out=${out:-$target/debian}

# cargo-deb reads `target/release/...` assets from $CARGO_TARGET_DIR/release: a staging
# dir with only what this package holds, so no stale file of another build slips in.
stage=$(mktemp -d "${TMPDIR:-/tmp}/bootlet-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT
# The binary, stripped, its man pages and completions (packaging/stage.sh).
. packaging/stage.sh
stage_release "$bin" "$stage"
# The upstream changelog under the name Debian gives it (dh_installchangelogs; lintian's
# wrong-name-for-upstream-changelog otherwise).
gzip -9n <CHANGELOG.md >"$stage/release/packaging/changelog.gz"

mkdir -p "$out"
deb=$(CARGO_TARGET_DIR=$stage cargo deb --no-build --locked --quiet -p bootlet \
  --output "$out" "${deb_args[@]}" | tail -n 1)

# cargo-deb writes no DEBIAN/md5sums; add it as dh_md5sums does (every file but the
# conffiles), so that `dpkg --verify bootlet` can tell a modified binary on a node.
pkg=$stage/pkg
dpkg-deb -R "$deb" "$pkg"
(cd "$pkg" && find . -path ./DEBIAN -prune -o -type f -printf '%P\n' | LC_ALL=C sort |
  grep -vxF -f <(sed 's|^/||' DEBIAN/conffiles) | tr '\n' '\0' | xargs -0 md5sum) \
  >"$pkg/DEBIAN/md5sums"
chmod 0644 "$pkg/DEBIAN/md5sums"
compress=(-Zxz)
[[ " ${deb_args[*]} " == *" --fast "* ]] && compress=(-Zgzip -z1)
dpkg-deb --root-owner-group "${compress[@]}" --build "$pkg" "$deb" >/dev/null
echo "$deb"
