#!/usr/bin/env bash
# Transactional produce throughput/latency, Strata against the reference Apache Kafka broker in
# the same run: benches/compare.sh with Kafka's ProducerPerformance in transactional mode
# (--transactional-id, --transaction-duration-ms: a commitTransaction every that many ms) and
# acks=all, then ConsumerPerformance reading the records back with isolation.level=read_committed.
# Each target runs on a freshly started broker with an empty data dir.
#
#   benches/transactions.sh                              # 1,000,000 x 1 KiB, a commit every 100 ms
#   BENCH_RECORDS=300000 BENCH_TRANSACTION_DURATION_MS=50 benches/transactions.sh
#
# Environment: as benches/compare.sh (STRATA_BIN, BENCH_TARGETS, BENCH_RECORDS,
# BENCH_RECORD_SIZE, BENCH_PARTITIONS, BENCH_COMPRESSION, BENCH_PRODUCER_PROPS, BENCH_DIR, ...),
# with these defaults: BENCH_TRANSACTION_DURATION_MS=100, BENCH_RECORDS=1000000, BENCH_ACKS=all.
set -euo pipefail
case "${1:-}" in
  "") ;;
  -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0   (configured through environment variables; see $0 --help)" >&2; exit 2 ;;
esac
export BENCH_TRANSACTION_DURATION_MS="${BENCH_TRANSACTION_DURATION_MS:-100}"
export BENCH_RECORDS="${BENCH_RECORDS:-1000000}"
export BENCH_ACKS="${BENCH_ACKS:-all}"
exec "$(dirname "${BASH_SOURCE[0]}")/compare.sh"
