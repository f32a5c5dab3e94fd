#!/usr/bin/env bash
# Runs each fuzz harness of tests/local/fuzz.rs (config, kubeconfig, PEM + verification, watch
# stream) for SECONDS (default 180) in a release build, one after the other, and prints
# executions and findings per target. Findings (inputs + what broke) are written under
# FUZZ_OUT (default target/fuzz-findings/TARGET/). Usage:
#   bash bench/fuzz.sh [SECONDS]          # FUZZ_SEED=N to replay a run's seed
# Exit status: 0 when no target found anything, 1 when one did, 2 when it could not run.
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-${FUZZ_SECONDS:-180}}
seed=${FUZZ_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
out=${FUZZ_OUT:-$PWD/target/fuzz-findings}
targets=(config:fuzz_config_parser kubeconfig:fuzz_kubeconfig_parser pem:fuzz_pem_and_verification watch:fuzz_watch_stream_decoder)

echo "building the fuzz harness (release)..." >&2
cargo test --release --locked --test local --no-run >&2 || exit 2

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
found=0
printf '%-11s %12s %10s %8s %9s %9s  %s\n' target execs execs/s corpus outcomes findings status
for entry in "${targets[@]}"; do
  name=${entry%%:*}
  test=${entry#*:}
  log="$logs/$name.log"
  rc=0
  FUZZ_SECONDS=$secs FUZZ_SEED=$seed FUZZ_OUT=$out \
    cargo test --release --locked --quiet --test local -- --exact "fuzz::$test" --nocapture --test-threads=1 \
    >"$log" 2>&1 || rc=$?
  line=$(grep -a "fuzz-summary target=$name " "$log" | tail -n 1 || true)
  field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
  if [ -z "$line" ]; then
    printf '%-11s %12s %10s %8s %9s %9s  %s\n' "$name" - - - - - "no summary (exit $rc)"
    tail -n 20 "$log" >&2
    found=1
    continue
  fi
  status=ok
  case $rc in
    0) ;;
    3) status="HANG (input saved under $out/$name)"; found=1 ;;
    *) status="FINDINGS (inputs under $out/$name)"; found=1 ;;
  esac
  printf '%-11s %12s %10s %8s %9s %9s  %s\n' "$name" "$(field execs)" "$(field execs_per_sec)" \
    "$(field corpus)" "$(field outcomes)" "$(field findings)" "$status"
  if [ "$rc" -ne 0 ]; then grep -a '^- \|^  input' "$log" >&2 || tail -n 40 "$log" >&2; fi
done
echo "seed $seed, $secs s per target; replay with FUZZ_SEED=$seed bash bench/fuzz.sh $secs"
exit "$found"
