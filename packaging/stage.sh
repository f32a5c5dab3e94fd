# Sourced by deb.sh and rpm.sh (from the repository root). cargo-deb and
# cargo-generate-rpm read `target/release/...` assets from <target dir>/release: a staging
# dir holding only what the package holds, so no stale file of another build slips in.

# stage_release BIN STAGE: STAGE/release/ gets the binary, stripped as dh_strip does (no
# symbols, no .comment and .note sections: lintian's and rpmlint's unstripped-binary), and
# the man pages (gzipped; -n leaves the name and time out, reproducible) and completions it
# writes itself.
stage_release() {
  local bin=$1 stage=$2
  mkdir -p "$stage/release/packaging/man" "$stage/release/packaging/completions"
  strip --remove-section=.comment --remove-section=.note -o "$stage/release/bootlet" "$bin"
  "$stage/release/bootlet" generate man "$stage/release/packaging/man" >/dev/null
  "$stage/release/bootlet" generate completions "$stage/release/packaging/completions" >/dev/null
  gzip -9n "$stage"/release/packaging/man/*.1
}
