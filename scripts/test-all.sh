#!/usr/bin/env bash
# Install everything the tests need, then run them all: Rust unit/property/integration tests
# and the interop suite driven by real Kafka clients against Strata.
#
#   scripts/test-all.sh                 # everything
#   STRATA_TEST_KAFKA=1 scripts/test-all.sh   # also run the interop suite against a reference
#                                             # Apache Kafka broker (checks the expectations)
#
# CARGO_TARGET_DIR defaults to $STRATA_CACHE/target so repeated runs (and CI's fresh clones on
# the same machine) build incrementally; it is wiped when it grows past 20 GiB.
set -euo pipefail
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
cd "$STRATA_REPO_ROOT"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$STRATA_CACHE/target}"
if [[ -d "$CARGO_TARGET_DIR" ]]; then
  size_kb=$(du -sk "$CARGO_TARGET_DIR" | cut -f1)
  if (( size_kb > 20 * 1024 * 1024 )); then
    strata_log "target dir is $((size_kb / 1024)) MiB: wiping it"
    rm -rf "$CARGO_TARGET_DIR"
  fi
fi

if ! command -v cargo >/dev/null; then
  strata_die "cargo not found: install Rust (rustup) first"
fi

strata_log "installing test dependencies"
scripts/install-test-deps.sh

strata_log "cargo test"
cargo build --locked --bin strata
cargo test --locked --workspace --all-targets

export STRATA_BIN="$CARGO_TARGET_DIR/debug/strata"

# Mutated request frames over 16 connections for 20 s: the broker must keep answering.
strata_log "network fuzz smoke"
benches/fuzz.sh smoke --seconds 20

# ----------------------------------------------------------------------------- terraform
# fmt, checkov, and the broker config template checked with this build's `strata config check`.
strata_log "terraform checks"
scripts/check-terraform.sh

strata_log "interop suite against Strata ($STRATA_BIN)"
STRATA_TEST_TARGET=strata "$STRATA_VENV/bin/python" -m pytest tests/interop -q

if [[ "${STRATA_TEST_KAFKA:-0}" == "1" ]]; then
  strata_log "interop suite against the reference Apache Kafka $KAFKA_VERSION"
  STRATA_TEST_TARGET=kafka "$STRATA_VENV/bin/python" -m pytest tests/interop -q
fi
