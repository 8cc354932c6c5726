#!/usr/bin/env bash
# Share groups (KIP-932), Strata against the reference Apache Kafka broker in the same run:
# records/s through one share group of several consumers on ONE partition (Kafka's
# ShareConsumerPerformance --threads, each record accepted), the broker's CPU-s and peak RSS
# over the consume, and the redelivery latency after a consumer dies holding records (a share
# consumer acquires 100 records and is killed with kill -9; the time until another member of
# the group, already waiting, receives them: the broker releases them when the dead consumer's
# connection closes, well before the acquisition lock would expire).
# Each target runs on a freshly started broker with an empty data dir.
#
#   benches/share_groups.sh                      # 1,000,000 x 1 KiB, 4 consumers
#   BENCH_RECORDS=200000 BENCH_SHARE_CONSUMERS=8 benches/share_groups.sh
#
# Environment: STRATA_BIN (default target/release/strata), BENCH_TARGETS ("strata kafka"),
# BENCH_RECORDS (1000000), BENCH_RECORD_SIZE (1024), BENCH_SHARE_CONSUMERS (4),
# BENCH_LOCK_MS (share.record.lock.duration.ms of the redelivery group, 60000), BENCH_DIR, BENCH_KEEP_DATA, BENCH_START_TIMEOUT (60),
# BENCH_TOOL_HEAP.
set -euo pipefail
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/common.sh"
# shellcheck source=benches/perf_tools.sh
source "$(dirname "${BASH_SOURCE[0]}")/perf_tools.sh"
ROOT="$STRATA_REPO_ROOT"

case "${1:-}" in
  "") ;;
  -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0   (configured through environment variables; see $0 --help)" >&2; exit 2 ;;
esac

RECORDS="${BENCH_RECORDS:-1000000}"
RECORD_SIZE="${BENCH_RECORD_SIZE:-1024}"
CONSUMERS="${BENCH_SHARE_CONSUMERS:-4}"
LOCK_MS="${BENCH_LOCK_MS:-60000}"
PARTITIONS=1
TARGETS="${BENCH_TARGETS:-strata kafka}"
START_TIMEOUT="${BENCH_START_TIMEOUT:-60}"
STRATA_BIN="${STRATA_BIN:-$ROOT/target/release/strata}"
[[ "$STRATA_BIN" == /* ]] || STRATA_BIN="$ROOT/$STRATA_BIN"
for v in RECORDS RECORD_SIZE CONSUMERS LOCK_MS START_TIMEOUT; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || strata_die "$v must be a positive integer, got '${!v}'"
done
WORK="${BENCH_DIR:-$(mktemp -d /tmp/strata-share-bench.XXXXXX)}"
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"

HOLDER_PID=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "$TOOL_PID" ]]; then strata_stop_pid "$TOOL_PID" 5 || true; fi
  if [[ -n "$HOLDER_PID" ]]; then kill -9 "$HOLDER_PID" 2>/dev/null || true; fi
  if [[ -n "$TAKER_PID" ]]; then kill -9 "$TAKER_PID" 2>/dev/null || true; fi
  stop_target || true
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

perf_tools_setup
echo "share bench: records=$RECORDS size=${RECORD_SIZE}B consumers=$CONSUMERS partition=1" \
     "lock=${LOCK_MS}ms kafka=$KAFKA_VERSION targets=[$TARGETS] work=$WORK"

# Sets a group config with Kafka's kafka-configs tool.
group_config() {
  local bootstrap="$1" group="$2" config="$3" out="$4"
  run_tool "$out" "${JAVA_TOOL[@]}" -cp "$TOOLS_CP" org.apache.kafka.tools.ConfigCommand \
    --bootstrap-server "$bootstrap" --alter --entity-type groups --entity-name "$group" \
    --add-config "$config"
}

# Milliseconds from a kill -9 of a share consumer holding records until another member of the
# group, already joined and waiting, receives them again ("-" if it does not within a minute).
# Its own topic of 100 records, all held by the first member.
TAKER_PID=""
redelivery_ms() {
  local bootstrap="$1" dir="$2" group="redelivery" topic="redelivery"
  local app=("${JAVA_TOOL[@]}" -cp "$INTEROP_CP" io.strata.interop.ShareConsumerApp
             --bootstrap "$bootstrap" --group "$group" --topic "$topic")
  run_tool "$dir/redelivery-topic.out" "${JAVA_TOOL[@]}" -cp "$INTEROP_CP" \
    io.strata.interop.InteropClient admin-create --bootstrap "$bootstrap" --topic "$topic" \
    --partitions 1 --if-not-exists || { echo "-"; return; }
  run_tool "$dir/redelivery-producer.out" "${JAVA_TOOL[@]}" -cp "$TOOLS_CP" \
    org.apache.kafka.tools.ProducerPerformance --bootstrap-server "$bootstrap" --topic "$topic" \
    --num-records 100 --record-size 100 --throughput -1 "$PROPS_OPT" acks=all || { echo "-"; return; }
  group_config "$bootstrap" "$group" \
    "share.auto.offset.reset=earliest,share.record.lock.duration.ms=$LOCK_MS" \
    "$dir/redelivery-config.out" || { echo "-"; return; }
  "${app[@]}" --mode hold >"$dir/holder.out" 2>&1 </dev/null &
  HOLDER_PID=$!
  local waited=0
  until grep -q '"event":"holding"' "$dir/holder.out" 2>/dev/null; do
    sleep 0.1
    waited=$((waited + 1))
    if ((waited > 900)); then echo "-"; return; fi
  done
  "${app[@]}" --mode accept --max-records 100 --first-record-timeout-ms 120000 \
    --idle-exit-ms 5000 >"$dir/taker.out" 2>&1 </dev/null &
  TAKER_PID=$!
  # Long enough for the second member to join and be assigned the partition.
  sleep 15
  local killed
  killed="$(date +%s%3N)"
  kill -9 "$HOLDER_PID" 2>/dev/null || true
  wait "$HOLDER_PID" 2>/dev/null || true
  HOLDER_PID=""
  wait "$TAKER_PID" 2>/dev/null || true
  TAKER_PID=""
  python3 - "$dir/taker.out" "$killed" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    ev = json.loads(line)
    if ev.get("event") == "record" and ev.get("delivery_count", 1) >= 2:
        print(int(ev["t"]) - int(sys.argv[2]))
        break
else:
    print("-")
EOF
}

printf 'target\tconsumers\trecords_per_s\tmb_per_s\tconsumed\tbroker_cpu_s\tcpu_s_per_gib\tpeak_rss_mib\tredelivery_ms\tstatus\n' >"$WORK/results.tsv"
for target in $TARGETS; do
  if [[ $target == strata && ! -x "$STRATA_BIN" ]]; then
    echo "NOTE: no Strata binary at $STRATA_BIN (cargo build --release); skipping Strata."
    continue
  fi
  dir="$WORK/$target"
  rm -rf "$dir"
  mkdir -p "$dir"
  port="$(strata_free_port)"
  bootstrap="127.0.0.1:$port"
  topic="share-bench"
  status=ok rps="-" mbps="-" consumed="-" cpu="-" per_gib="-" rss="-" redelivery="-"
  echo
  echo "=== $target ==="
  "start_$target" "$port" "$dir" || status="start-failed"
  if [[ $status == ok ]]; then
    run_tool "$dir/create.out" "${JAVA_TOOL[@]}" -cp "$INTEROP_CP" io.strata.interop.InteropClient \
      admin-create --bootstrap "$bootstrap" --topic "$topic" --partitions 1 --if-not-exists \
      || status="create-topic-failed"
  fi
  if [[ $status == ok ]]; then
    run_tool "$dir/producer.out" "${JAVA_TOOL[@]}" -cp "$TOOLS_CP" org.apache.kafka.tools.ProducerPerformance \
      --bootstrap-server "$bootstrap" --topic "$topic" --num-records "$RECORDS" \
      --record-size "$RECORD_SIZE" --throughput -1 "$PROPS_OPT" acks=1 linger.ms=5 \
      || status="producer-failed"
    grep 'records sent' "$dir/producer.out" | tail -n 1 || true
  fi
  if [[ $status == ok ]]; then
    group_config "$bootstrap" bench-share "share.auto.offset.reset=earliest" "$dir/config.out" \
      || status="group-config-failed"
  fi
  if [[ $status == ok ]]; then
    read -r _ cpu0 <<<"$(proc_stats "$CUR_PID")"
    if run_tool "$dir/share-consumer.out" "${JAVA_TOOL[@]}" -cp "$TOOLS_CP" \
        org.apache.kafka.tools.ShareConsumerPerformance --bootstrap-server "$bootstrap" \
        --topic "$topic" --group bench-share --threads "$CONSUMERS" --num-records "$RECORDS" \
        --timeout 60000; then
      # start.time, end.time, MB, MB.sec, nMsg.sec, nMsg, fetch.time.ms
      line="$(grep -E '^[0-9]{4}-' "$dir/share-consumer.out" | tail -n 1 || true)"
      IFS=', ' read -r -a f <<<"$(sed 's/, /,/g' <<<"$line" | tr ',' ' ')"
      if ((${#f[@]} >= 9)); then
        mbps="${f[5]}" rps="${f[6]}" consumed="${f[7]}"
      fi
      [[ "$consumed" == "$RECORDS" ]] || status="consumed-$consumed-of-$RECORDS"
    else
      tail -n 20 "$dir/share-consumer.out" >&2
      status="share-consumer-failed"
    fi
    read -r rss cpu1 <<<"$(proc_stats "$CUR_PID")"
    if [[ "$cpu1" != "-" && "$cpu0" != "-" ]]; then
      cpu="$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { printf "%.1f", b - a }')"
      per_gib="$(awk -v c="$cpu" -v n="$RECORDS" -v s="$RECORD_SIZE" 'BEGIN { printf "%.2f", c / (n * s / 1073741824) }')"
    fi
    redelivery="$(redelivery_ms "$bootstrap" "$dir")"
  fi
  if [[ -n "$CUR_PID" ]] && ! strata_alive "$CUR_PID"; then status="broker-died"; fi
  stop_target
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$target" "$CONSUMERS" "$rps" "$mbps" \
    "$consumed" "$cpu" "$per_gib" "$rss" "$redelivery" "$status" >>"$WORK/results.tsv"
done

echo
column -t -s $'\t' "$WORK/results.tsv"
