#!/usr/bin/env bash
# Parquet export benchmark: `strata export` against the path users take today (a Kafka
# consumer reading the topic and pyarrow writing Parquet), over the same offsets of one
# 1-partition topic on one Strata broker. Prints MB/s (wall), MB/s per core (per CPU second of
# the exporting process; the consumer path also with the broker's fetch CPU added) and peak
# RSS of both. See benches/export_bench.py.
#
#   benches/export.sh                           # 400k records of 512 B, lz4
#   BENCH_RECORDS=1000000 benches/export.sh
#
# Environment:
#   STRATA_BIN           Strata binary (default ${CARGO_TARGET_DIR:-target}/release/strata)
#   STRATA_VENV          Python venv with confluent-kafka and pyarrow
#                        (default ${STRATA_CACHE:-~/.cache/strata}/venv)
#   BENCH_RECORDS        records (default 400000)
#   BENCH_RECORD_SIZE    value bytes (default 512; JSON-like, compressible ~2-3x)
#   BENCH_COMPRESSION    producer compression.type (default lz4)
#   BENCH_SEGMENT_BYTES  segment size (default 33554432); only sealed segments are exported
#   BENCH_DIR            work dir (default a new /tmp/strata-export.XXXXXX)
#   BENCH_KEEP_DATA=1    keep the log and both exports
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "${1:-}" in
  "") ;;
  -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0   (configured through environment variables; see $0 --help)" >&2; exit 2 ;;
esac
export STRATA_BIN="${STRATA_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/strata}"
[[ "$STRATA_BIN" == /* ]] || STRATA_BIN="$ROOT/$STRATA_BIN"
[[ -x "$STRATA_BIN" ]] || { echo "no Strata binary at $STRATA_BIN (cargo build --release)" >&2; exit 1; }
VENV="${STRATA_VENV:-${STRATA_CACHE:-$HOME/.cache/strata}/venv}"
PY="$VENV/bin/python"
[[ -x "$PY" ]] || { echo "no venv at $VENV (pip install -r tests/interop/requirements.txt)" >&2; exit 1; }
exec "$PY" "$ROOT/benches/export_bench.py"
