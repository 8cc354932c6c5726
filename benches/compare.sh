#!/usr/bin/env bash
# Throughput/latency comparison of Strata against the reference Apache Kafka broker, using
# Kafka's own perf tools (org.apache.kafka.tools.ProducerPerformance / ConsumerPerformance)
# with identical settings on both. Each (target, acks) row runs on a freshly started broker
# with an empty data dir:
#   1. create topic with BENCH_PARTITIONS partitions (Java admin client)
#   2. ProducerPerformance: BENCH_RECORDS records of BENCH_RECORD_SIZE bytes, unthrottled,
#      acks=<1|all>, compression.type=BENCH_COMPRESSION
#   3. ConsumerPerformance: read the same records back
#   4. broker peak RSS (VmHWM from /proc/<pid>/status) and CPU time; stop the broker
#
#   benches/compare.sh                       # both targets
#   BENCH_RECORDS=200000 benches/compare.sh  # shorter run
#
# Environment:
#   STRATA_BIN            Strata binary (default target/release/strata); if missing, only
#                         Kafka runs. Started as: $STRATA_BIN serve --config <server.properties>
#   BENCH_TARGETS         default "strata kafka"
#   BENCH_RECORDS         records per producer run (default 2000000)
#   BENCH_RECORD_SIZE     bytes per record (default 1024)
#   BENCH_PARTITIONS      topic partitions (default 6)
#   BENCH_ACKS            default "1 all"
#   BENCH_COMPRESSION     default lz4
#   BENCH_PRODUCER_PROPS  extra producer properties, space-separated k=v (both targets)
#   BENCH_TRANSACTION_DURATION_MS  if set: transactional produce. ProducerPerformance gets
#                         --transactional-id bench-txn-<target>-<acks> and
#                         --transaction-duration-ms <this> (it commits a transaction every that
#                         many ms), and ConsumerPerformance reads with isolation.level=
#                         read_committed. Needs acks=all (benches/transactions.sh sets it).
#   BENCH_STRATA_EXTRA    extra lines for Strata's server.properties (newline-separated k=v)
#   BENCH_DIR             work dir (default: a new /tmp/strata-bench.XXXXXX); results.tsv and
#                         the tools' output stay there
#   BENCH_KEEP_DATA=1     keep broker data dirs (default: deleted after each row)
#   BENCH_START_TIMEOUT   seconds to wait for a broker to become ready (default 60)
#   BENCH_TOOL_HEAP       heap of the perf tool JVMs (default -Xmx512m)
#   BENCH_CLIENT          java (default: Kafka's perf tools) or loadgen: strata-loadgen
#                         (loadgen/), which resends pre-encoded batches and walks only
#                         batch headers, so it costs a few percent of a core and the broker is what
#                         is measured; rows then also give broker CPU-s per GiB of produce and
#                         of consume, and the floor measured in the same run (`strata-loadgen
#                         floor`: the same bytes over one loopback TCP connection appended to
#                         a file; the best of three, each after a sync) with each produce
#                         row's share of it. Every row starts after a sync.
#                         BENCH_LOADGEN_CONNECTIONS (4), BENCH_LOADGEN_INFLIGHT (5) and
#                         BENCH_LOADGEN_BATCH_BYTES (16384) tune it.
set -euo pipefail
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/common.sh"
# shellcheck source=benches/perf_tools.sh
source "$(dirname "${BASH_SOURCE[0]}")/perf_tools.sh"
ROOT="$STRATA_REPO_ROOT"

case "${1:-}" in
  "") ;;
  -h|--help) sed -n '2,44p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0   (configured through environment variables; see $0 --help)" >&2; exit 2 ;;
esac

RECORDS="${BENCH_RECORDS:-2000000}"
RECORD_SIZE="${BENCH_RECORD_SIZE:-1024}"
PARTITIONS="${BENCH_PARTITIONS:-6}"
ACKS_LIST="${BENCH_ACKS:-1 all}"
COMPRESSION="${BENCH_COMPRESSION:-lz4}"
TARGETS="${BENCH_TARGETS:-strata kafka}"
START_TIMEOUT="${BENCH_START_TIMEOUT:-60}"
STRATA_BIN="${STRATA_BIN:-$ROOT/target/release/strata}"
[[ "$STRATA_BIN" == /* ]] || STRATA_BIN="$ROOT/$STRATA_BIN"
TXN_MS="${BENCH_TRANSACTION_DURATION_MS:-}"
for v in RECORDS RECORD_SIZE PARTITIONS START_TIMEOUT ${TXN_MS:+TXN_MS}; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || strata_die "$v must be a positive integer, got '${!v}'"
done
if [[ -n "$TXN_MS" && " $ACKS_LIST " != " all " && " $ACKS_LIST " != " -1 " ]]; then
  strata_die "transactional produce needs acks=all (BENCH_ACKS=all), got '$ACKS_LIST'"
fi

if [[ -n "${BENCH_DIR:-}" ]]; then
  WORK="$BENCH_DIR"
  mkdir -p "$WORK"
else
  WORK="$(mktemp -d /tmp/strata-bench.XXXXXX)"
fi
WORK="$(cd "$WORK" && pwd)"
RESULTS="$WORK/results.tsv"

# ------------------------------------------------------------------ cleanup
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "$TOOL_PID" ]]; then strata_stop_pid "$TOOL_PID" 5 || true; fi
  stop_target || true
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ------------------------------------------------------------------ setup
perf_tools_setup

STRATA_OK=0
if [[ " $TARGETS " == *" strata "* ]]; then
  if [[ -x "$STRATA_BIN" ]]; then
    STRATA_OK=1
  else
    echo "NOTE: Strata binary not found at $STRATA_BIN (set STRATA_BIN or run 'cargo build --release');"
    echo "      running the Kafka side only."
  fi
fi

echo "bench: records=$RECORDS size=${RECORD_SIZE}B partitions=$PARTITIONS acks=[$ACKS_LIST]" \
     "compression=$COMPRESSION kafka=$KAFKA_VERSION targets=[$TARGETS]" \
     "${TXN_MS:+transactions=${TXN_MS}ms }work=$WORK"
printf 'target\tacks\tprod_rps\tprod_mbps\tp50\tp99\tp999\tavg\tmax\tcons_mbps\tcons_rps\trss_mib\tcpu_s\tstatus\n' >"$RESULTS"

run_row() {
  local target="$1" acks="$2"
  local dir="$WORK/$target-acks$acks" port topic="bench-$PARTITIONS-$acks" p c
  local status=ok prod="- - - - - - - -" cons="- - -" stats="- -"
  rm -rf "$dir"
  mkdir -p "$dir"
  port="$(strata_free_port)"
  echo
  echo "=== $target, acks=$acks ==="
  if ! "start_$target" "$port" "$dir"; then
    status="start-failed"
  fi
  local bootstrap="127.0.0.1:$port"

  if [[ $status == ok ]] && ! run_tool "$dir/create-topic.out" "${JAVA_TOOL[@]}" -cp "$INTEROP_CP" \
      io.strata.interop.InteropClient admin-create --bootstrap "$bootstrap" --topic "$topic" \
      --partitions "$PARTITIONS" --if-not-exists; then
    cat "$dir/create-topic.out" >&2
    status="create-topic-failed"
  fi

  local txn_args=() cons_args=()
  if [[ -n "$TXN_MS" ]]; then
    txn_args=(--transactional-id "bench-txn-$target-$acks" --transaction-duration-ms "$TXN_MS")
    cons_args=(--command-property isolation.level=read_committed)
  fi
  if [[ $status == ok ]]; then
    # shellcheck disable=SC2086
    if run_tool "$dir/producer.out" "${JAVA_TOOL[@]}" -cp "$TOOLS_CP" org.apache.kafka.tools.ProducerPerformance \
        --bootstrap-server "$bootstrap" --topic "$topic" --num-records "$RECORDS" \
        --record-size "$RECORD_SIZE" --throughput -1 "${txn_args[@]}" \
        "$PROPS_OPT" acks="$acks" compression.type="$COMPRESSION" ${BENCH_PRODUCER_PROPS:-}; then
      grep 'records sent' "$dir/producer.out" | tail -n 1 || true
      prod="$(python3 "$ROOT/benches/perf_report.py" producer "$dir/producer.out")" || { status="producer-failed"; prod="- - - - - - - -"; }
      read -r -a p <<<"$prod"
      [[ $status != ok || "${p[7]}" == "$RECORDS" ]] || status="producer-acked-${p[7]}-of-$RECORDS"
    else
      tail -n 20 "$dir/producer.out" >&2
      status="producer-failed"
    fi
  fi

  if [[ $status == ok ]]; then
    if run_tool "$dir/consumer.out" "${JAVA_TOOL[@]}" -cp "$TOOLS_CP" org.apache.kafka.tools.ConsumerPerformance \
        --bootstrap-server "$bootstrap" --topic "$topic" "$NUM_OPT" "$RECORDS" --timeout 30000 \
        --group "bench-consumer-$acks" "${cons_args[@]}"; then
      grep -A1 'MB.sec' "$dir/consumer.out" | tail -n 1 || true
      cons="$(python3 "$ROOT/benches/perf_report.py" consumer "$dir/consumer.out")" || { status="consumer-failed"; cons="- - -"; }
      read -r -a c <<<"$cons"
      [[ $status != ok || "${c[2]}" == "$RECORDS" ]] || status="consumer-read-${c[2]}-of-$RECORDS"
    else
      tail -n 20 "$dir/consumer.out" >&2
      status="consumer-failed"
    fi
  fi

  if [[ -n "$CUR_PID" ]] && strata_alive "$CUR_PID"; then
    stats="$(proc_stats "$CUR_PID")"
  elif [[ $status == ok ]]; then
    status="broker-died"
  fi
  stop_target

  local s
  read -r -a p <<<"$prod"
  read -r -a c <<<"$cons"
  read -r -a s <<<"$stats"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$target" "$acks" \
    "${p[0]}" "${p[1]}" "${p[2]}" "${p[3]}" "${p[4]}" "${p[5]}" "${p[6]}" \
    "${c[0]}" "${c[1]}" "${s[0]}" "${s[1]}" "$status" >>"$RESULTS"
  echo "peak RSS MiB / CPU s: ${stats}   status: $status"
}

# CPU seconds (user+sys) of a live process.
cpu_seconds() {
  sed 's/^.*) //' "/proc/$1/stat" | awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f\n", ($12 + $13) / hz}'
}

# One row with strata-loadgen: produce, then consume, each with the broker's CPU seconds per
# GiB of record bytes; the broker's peak RSS; and the generator's own CPU seconds.
run_row_loadgen() {
  local target="$1" acks="$2"
  local dir="$WORK/$target-acks$acks" port topic="bench-$PARTITIONS-$acks" status=ok
  local prod="" cons="" c0 c1 c2 stats="- -"
  rm -rf "$dir"; mkdir -p "$dir"
  port="$(strata_free_port)"
  echo; echo "=== $target, acks=$acks (strata-loadgen) ==="
  # Each row starts with nothing left to write back from the one before.
  sync
  "start_$target" "$port" "$dir" || status="start-failed"
  local bootstrap="127.0.0.1:$port"
  if [[ $status == ok ]] && ! run_tool "$dir/create-topic.out" "${JAVA_TOOL[@]}" -cp "$INTEROP_CP" \
      io.strata.interop.InteropClient admin-create --bootstrap "$bootstrap" --topic "$topic" \
      --partitions "$PARTITIONS" --if-not-exists; then
    cat "$dir/create-topic.out" >&2; status="create-topic-failed"
  fi
  local common=(--bootstrap "$bootstrap" --topic "$topic" --partitions "$PARTITIONS"
    --records "$RECORDS" --connections "${BENCH_LOADGEN_CONNECTIONS:-4}")
  if [[ $status == ok ]]; then
    c0="$(cpu_seconds "$CUR_PID")"
    if run_tool "$dir/producer.out" "$LOADGEN" produce "${common[@]}" --record-size "$RECORD_SIZE" \
        --acks "${acks/all/-1}" --compression "$COMPRESSION" --inflight "${BENCH_LOADGEN_INFLIGHT:-5}" \
        --batch-bytes "${BENCH_LOADGEN_BATCH_BYTES:-16384}"; then
      prod="$(cat "$dir/producer.out")"; echo "$prod"
    else
      cat "$dir/producer.out" >&2; status="producer-failed"
    fi
    c1="$(cpu_seconds "$CUR_PID")"
  fi
  if [[ $status == ok ]]; then
    if run_tool "$dir/consumer.out" "$LOADGEN" consume "${common[@]}"; then
      cons="$(cat "$dir/consumer.out")"; echo "$cons"
    else
      cat "$dir/consumer.out" >&2; status="consumer-failed"
    fi
    c2="$(cpu_seconds "$CUR_PID")"
  fi
  if [[ -n "$CUR_PID" ]] && strata_alive "$CUR_PID"; then stats="$(proc_stats "$CUR_PID")"
  elif [[ $status == ok ]]; then status="broker-died"; fi
  stop_target
  python3 "$ROOT/benches/loadgen_report.py" row "$target" "$acks" "$status" "${c0:-0}" "${c1:-0}" \
    "${c2:-0}" "${stats%% *}" "$prod" "$cons" >>"$LOADGEN_RESULTS"
}

LOADGEN_RESULTS="$WORK/loadgen.tsv"
if [[ "${BENCH_CLIENT:-java}" == loadgen ]]; then
  loadgen_setup
  python3 "$ROOT/benches/loadgen_report.py" header >"$LOADGEN_RESULTS"
  measure_floor "$((RECORDS * RECORD_SIZE))" "$WORK/floor.bin"
  echo "floor (best of 3): $FLOOR"
  for acks in $ACKS_LIST; do
    for target in $TARGETS; do
      case "$target" in
        strata) [[ $STRATA_OK == 1 ]] || continue ;;
        kafka) ;;
        *) strata_die "unknown target '$target' in BENCH_TARGETS" ;;
      esac
      run_row_loadgen "$target" "$acks"
    done
  done
  echo
  echo "Results ($RECORDS x ${RECORD_SIZE}B records, $PARTITIONS partitions, compression=$COMPRESSION," \
       "strata-loadgen, Kafka $KAFKA_VERSION; broker CPU-s per GiB of record bytes; raw: $LOADGEN_RESULTS)"
  column -t -s $'\t' "$LOADGEN_RESULTS"
  python3 "$ROOT/benches/loadgen_report.py" shares "$LOADGEN_RESULTS" "$FLOOR"
  exit 0
fi

for acks in $ACKS_LIST; do
  for target in $TARGETS; do
    case "$target" in
      strata) [[ $STRATA_OK == 1 ]] || continue ;;
      kafka) ;;
      *) strata_die "unknown target '$target' in BENCH_TARGETS" ;;
    esac
    run_row "$target" "$acks"
  done
done

echo
echo "Results ($RECORDS x ${RECORD_SIZE}B records, $PARTITIONS partitions, compression=$COMPRESSION," \
     "${TXN_MS:+transactional (a commit every ${TXN_MS} ms, read_committed consumer), }Kafka $KAFKA_VERSION perf tools; raw: $RESULTS)"
if [[ " $TARGETS " == *" strata "* && $STRATA_OK == 0 ]]; then
  echo "NOTE: Strata was not run (no binary at $STRATA_BIN): Kafka side only."
fi
python3 "$ROOT/benches/perf_report.py" table "$RESULTS"
