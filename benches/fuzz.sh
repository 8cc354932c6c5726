#!/usr/bin/env bash
# Fuzzing Strata: every decoder of outside bytes, in process and over the network.
#
#   benches/fuzz.sh smoke   [--seconds N]   # CI: netfuzz against a debug broker for N s (20)
#   benches/fuzz.sh net     [--seconds N] [--connections C]
#                                           # netfuzz against a release broker, prints figures
#   benches/fuzz.sh campaign [--seconds N] [--targets "request record_batch ..."]
#                                           # libFuzzer on each target (all of
#                                           # strata_fuzz::targets::ALL by default; N s each,
#                                           # 600), then
#                                           # netfuzz; prints inputs, inputs/s, crashes, peak RSS
#
# The in-process smoke of every target runs with `cargo test -p strata-fuzz` (STRATA_FUZZ_SECS
# per target). libFuzzer is built on the stable toolchain with coverage instrumentation
# (-C passes=sancov-module); no sanitizer is needed for safe Rust, and the fuzz allocator
# aborts on any allocation over 64 MiB, which libFuzzer reports as a crash.
set -euo pipefail
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/common.sh"
cd "$STRATA_REPO_ROOT"

mode="${1:-smoke}"; shift || true
seconds=""; connections=16
# Every target's name, from Target::name() (so a new target is fuzzed without editing this).
targets=$(sed -n 's/^ *Target::[A-Za-z]* => "\([a-z_]*\)",$/\1/p' fuzz/src/targets.rs | tr '\n' ' ')
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --connections) connections="$2"; shift 2 ;;
    --targets) targets="$2"; shift 2 ;;
    *) strata_die "unknown option $1" ;;
  esac
done

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$STRATA_CACHE/target}"

# Starts a broker from $1 on a free port with a scratch data dir; sets broker_pid/broker_port.
start_broker() {
  local bin="$1"
  work=$(mktemp -d)
  broker_port=$(strata_free_port)
  local admin_port; admin_port=$(strata_free_port)
  "$bin" serve -o "listeners=PLAINTEXT://127.0.0.1:$broker_port" -o "log.dirs=$work/data" \
    -o "strata.admin.listener=127.0.0.1:$admin_port" >"$work/broker.log" 2>&1 &
  broker_pid=$!
  for _ in $(seq 1 100); do
    strata_port_open "$broker_port" && return 0
    sleep 0.1
  done
  cat "$work/broker.log" >&2
  strata_die "broker did not start"
}

stop_broker() {
  if [[ -n "${broker_pid:-}" ]]; then
    kill "$broker_pid" 2>/dev/null || true
    wait "$broker_pid" 2>/dev/null || true
    broker_pid=""
  fi
  [[ -n "${work:-}" ]] && rm -rf "$work"
}
trap stop_broker EXIT

run_netfuzz() {
  local profile="$1" secs="$2"
  local bin="$CARGO_TARGET_DIR/$profile/strata" fuzzer="$CARGO_TARGET_DIR/$profile/strata-netfuzz"
  start_broker "$bin"
  local rc=0
  "$fuzzer" --addr "127.0.0.1:$broker_port" --connections "$connections" --seconds "$secs" \
    --pid "$broker_pid" || rc=$?
  if ! kill -0 "$broker_pid" 2>/dev/null; then
    strata_log "the broker died; its log:"; tail -50 "$work/broker.log" >&2; rc=1
  fi
  stop_broker
  return $rc
}

case "$mode" in
  smoke)
    cargo build --locked --bin strata -p strata --bin strata-netfuzz -p strata-fuzz
    run_netfuzz debug "${seconds:-20}"
    ;;
  net)
    cargo build --locked --release --bin strata -p strata --bin strata-netfuzz -p strata-fuzz
    run_netfuzz release "${seconds:-300}"
    ;;
  campaign)
    fuzz_target_dir="$STRATA_CACHE/target-libfuzzer"
    host=$(rustc -vV | sed -n 's/^host: //p')
    RUSTFLAGS="-C passes=sancov-module -C llvm-args=-sanitizer-coverage-level=4 \
      -C llvm-args=-sanitizer-coverage-inline-8bit-counters -C llvm-args=-sanitizer-coverage-pc-table \
      -C llvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -C debug-assertions -C overflow-checks" \
      CARGO_TARGET_DIR="$fuzz_target_dir" \
      cargo build --locked --release -p strata-fuzz --features libfuzzer --bin strata-libfuzzer \
        --target "$host"   # with --target, RUSTFLAGS skip build scripts and proc macros
    [[ -n "${targets// /}" ]] || strata_die "no fuzz targets found in fuzz/src/targets.rs"
    corpus_root="$STRATA_CACHE/fuzz-corpus"
    total=0; crashes=0
    for t in $targets; do
      mkdir -p "$corpus_root/$t" "$corpus_root/$t-artifacts"
      log=$(mktemp)
      STRATA_FUZZ_TARGET="$t" "$fuzz_target_dir/$host/release/strata-libfuzzer" "$corpus_root/$t" \
        -max_total_time="${seconds:-600}" -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
        -artifact_prefix="$corpus_root/$t-artifacts/" >"$log" 2>&1 || true
      runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
      rss=$(grep -o 'stat::peak_rss_mb: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo 0)
      found=$(find "$corpus_root/$t-artifacts" -type f | wc -l)
      per_s=$(( runs / ${seconds:-600} ))
      printf 'libfuzzer: %-20s inputs %10s  inputs/s %7s  crashes %s  peak RSS %s MiB\n' \
        "$t" "$runs" "$per_s" "$found" "$rss"
      total=$((total + runs)); crashes=$((crashes + found))
      [[ "$found" -gt 0 ]] && tail -40 "$log" >&2
      rm -f "$log"
    done
    printf 'libfuzzer: all targets        inputs %10s  crashes %s\n' "$total" "$crashes"
    cargo build --locked --release --bin strata -p strata --bin strata-netfuzz -p strata-fuzz
    run_netfuzz release "${seconds:-600}"
    [[ "$crashes" -eq 0 ]]
    ;;
  *) strata_die "unknown mode $mode (smoke, net, campaign)" ;;
esac
