#!/usr/bin/env bash
# The randomized crash checker's long campaign: random kill -9 and SIGSTOP of brokers under
# idempotent and transactional producers and a committing consumer group, on one broker (plain,
# compacted, tiered, tiered+compacted and transactional topics) and on a 3-node RF=3 cluster;
# then the whole history is checked. Prints one summary line per configuration.
#
#   benches/crash-checker.sh [--cycles N] [--seed S]      # default 100 cycles per configuration
#   STRATA_TEST_TARGET=kafka benches/crash-checker.sh     # the single-broker run against Kafka
set -euo pipefail
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/common.sh"
cd "$STRATA_REPO_ROOT"

cycles=100; seed=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --cycles) cycles="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    *) strata_die "unknown option $1" ;;
  esac
done
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$STRATA_CACHE/target}"
cargo build --locked --release --bin strata
export STRATA_BIN="$CARGO_TARGET_DIR/release/strata"
export STRATA_CRASH_CYCLES="$cycles"
[[ -n "$seed" ]] && export STRATA_CRASH_SEED="$seed"
"$STRATA_VENV/bin/python" -m pytest tests/interop/test_crash_checker.py -q -s \
  -o timeout=$((cycles * 30 + 600)) 2>&1 | grep -E '^(crash-checker:|   |[0-9]+ (passed|failed))'
