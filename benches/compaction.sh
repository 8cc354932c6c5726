#!/usr/bin/env bash
# Log compaction benchmark: cleaning MB/s and produce throughput while cleaning runs,
# on the same keyed data set for Strata (release build) and the reference Apache Kafka
# (scripts/kafka-ref.sh), in one run. Each target runs on a freshly started broker with an
# empty data dir and the same cleaner settings: log.cleaner.threads=1, the default
# log.cleaner.dedupe.buffer.size (128 MiB) and io.buffer.load.factor (0.9),
# log.cleaner.io.max.bytes.per.second unlimited (the default), log.cleaner.backoff.ms=
# BENCH_CLEANER_BACKOFF_MS.
#   1. create topics bench-a and bench-b: cleanup.policy=delete (so nothing is cleaned yet),
#      retention.ms=-1, segment.bytes=BENCH_SEGMENT_BYTES, min.cleanable.dirty.ratio=
#      BENCH_DIRTY_RATIO, min.compaction.lag.ms=0; and bench-c, the same but
#      cleanup.policy=compact with min.compaction.lag.ms=Long.MAX (compacted, never cleanable)
#   2. produce BENCH_RECORDS keyed records to bench-a, bench-b, then bench-c: keys drawn
#      uniformly (seeded) from BENCH_KEYS keys, values of BENCH_VALUE_SIZE random bytes.
#      Nothing is cleaned meanwhile, so these are the "produce without cleaning" figures
#      (bench-c: on a compacted topic, whose appends also check that every record has a key).
#   3. cleaning: set cleanup.policy=compact on bench-a (IncrementalAlterConfigs) and time from
#      the reply until the broker's cleaner-offset-checkpoint (Kafka's file format, written by
#      both brokers after each pass) reaches the active segment's base offset, i.e. nothing is
#      cleanable any more (for Strata also strata_partition_cleaner_dirty_ratio = 0).
#      Cleaning MiB/s = bytes of the sealed segments before the alter / that time. Also shown:
#      the cleaner's own figure (Strata: strata_log_cleaner_bytes_cleaned_total / passes'
#      duration from /metrics; Kafka: its "Log cleaner thread 0 cleaned log" reports in
#      server.log) and the broker's CPU seconds meanwhile.
#   4. produce while cleaning: set cleanup.policy=compact on bench-b (its BENCH_RECORDS
#      records become a dirty backlog) and at once produce BENCH_RECORDS more keyed records
#      to it; the cleaner works through the backlog and then every segment that rolls.
#      Compared with step 2's mean of bench-a/b and with bench-c.
#   5. Strata only: `strata cleaner status --admin ...` must list bench-a and bench-b
#      (a check of that subcommand; its output is printed).
# The keyed producer is benches/compaction_tool.py (confluent-kafka / librdkafka, acks=1,
# linger.ms=5, no compression), the same for both brokers: Kafka's ProducerPerformance cannot
# send keys.
#
#   benches/compaction.sh                                 # 2M records over 100k keys
#   BENCH_RECORDS=1000000 BENCH_KEYS=50000 benches/compaction.sh
#
# Environment:
#   STRATA_BIN               Strata binary (default ${CARGO_TARGET_DIR:-target}/release/strata);
#                            if missing, only Kafka runs
#   BENCH_TARGETS            default "strata kafka"
#   BENCH_RECORDS            records per produce (default 2000000)
#   BENCH_KEYS               distinct keys (default 100000)
#   BENCH_VALUE_SIZE         value bytes (default 100)
#   BENCH_PARTITIONS         partitions per topic (default 1)
#   BENCH_SEGMENT_BYTES      segment.bytes (default 16777216)
#   BENCH_DIRTY_RATIO        min.cleanable.dirty.ratio (default 0.01)
#   BENCH_CLEANER_BACKOFF_MS log.cleaner.backoff.ms of both brokers (default 100)
#   BENCH_STRATA_EXTRA       extra lines for Strata's server.properties (newline-separated k=v)
#   BENCH_KAFKA_EXTRA        extra lines for Kafka's server.properties (newline-separated k=v)
#   BENCH_DIR                work dir (default: a new /tmp/strata-compaction.XXXXXX); results,
#                            tool output, metrics snapshots and broker logs stay there
#   BENCH_KEEP_DATA=1        keep the brokers' data dirs
#   BENCH_START_TIMEOUT      seconds to wait for a broker to become ready (default 60)
#   BENCH_CLEAN_TIMEOUT      seconds to wait for cleaning (default 1800)
set -euo pipefail
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/common.sh"
ROOT="$STRATA_REPO_ROOT"

case "${1:-}" in
  "") ;;
  -h|--help) sed -n '2,58p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0   (configured through environment variables; see $0 --help)" >&2; exit 2 ;;
esac

RECORDS="${BENCH_RECORDS:-2000000}"
KEYS="${BENCH_KEYS:-100000}"
VALUE_SIZE="${BENCH_VALUE_SIZE:-100}"
PARTITIONS="${BENCH_PARTITIONS:-1}"
SEGMENT_BYTES="${BENCH_SEGMENT_BYTES:-16777216}"
DIRTY_RATIO="${BENCH_DIRTY_RATIO:-0.01}"
BACKOFF_MS="${BENCH_CLEANER_BACKOFF_MS:-100}"
TARGETS="${BENCH_TARGETS:-strata kafka}"
START_TIMEOUT="${BENCH_START_TIMEOUT:-60}"
CLEAN_TIMEOUT="${BENCH_CLEAN_TIMEOUT:-1800}"
STRATA_BIN="${STRATA_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/strata}"
[[ "$STRATA_BIN" == /* ]] || STRATA_BIN="$ROOT/$STRATA_BIN"
for v in RECORDS KEYS VALUE_SIZE PARTITIONS SEGMENT_BYTES BACKOFF_MS START_TIMEOUT CLEAN_TIMEOUT; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || strata_die "$v must be a positive integer, got '${!v}'"
done
((SEGMENT_BYTES >= 1048576)) || strata_die "BENCH_SEGMENT_BYTES must be at least 1 MiB (segment.bytes' minimum)"

if [[ -n "${BENCH_DIR:-}" ]]; then
  WORK="$BENCH_DIR"
  mkdir -p "$WORK"
else
  WORK="$(mktemp -d /tmp/strata-compaction.XXXXXX)"
fi
WORK="$(cd "$WORK" && pwd)"
RESULTS="$WORK/results.jsonl"
: >"$RESULTS"

# ------------------------------------------------------------------ cleanup
CUR_KIND="" CUR_PID="" CUR_DIR="" TOOL_PID="" ADMIN_PORT=""
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

stop_target() {
  case "$CUR_KIND" in
    kafka) "$ROOT/scripts/kafka-ref.sh" stop "$CUR_DIR" ;;
    strata)
      strata_log "stopping Strata (pid $CUR_PID)"
      strata_stop_pid "$CUR_PID" 30 || true
      wait "$CUR_PID" 2>/dev/null || true ;;
  esac
  if [[ -n "$CUR_DIR" && "${BENCH_KEEP_DATA:-0}" != 1 ]]; then rm -rf "$CUR_DIR/data"; fi
  CUR_KIND="" CUR_PID="" CUR_DIR="" ADMIN_PORT=""
}

# Run a command in the background and wait for it, so that signals reach our traps promptly.
run_tool() {
  local out="$1"
  shift
  "$@" >"$out" 2>"$out.err" &
  TOOL_PID=$!
  local rc=0
  wait "$TOOL_PID" || rc=$?
  TOOL_PID=""
  return "$rc"
}

# ------------------------------------------------------------------ setup
"$ROOT/scripts/install-test-deps.sh" >/dev/null
PY="$STRATA_VENV/bin/python"
[[ -x "$PY" ]] || strata_die "no Python venv at $STRATA_VENV; run scripts/install-test-deps.sh"
"$PY" -c 'import confluent_kafka' 2>/dev/null || strata_die "confluent-kafka missing from $STRATA_VENV"
TOOL=("$PY" "$ROOT/benches/compaction_tool.py")

STRATA_OK=0
if [[ " $TARGETS " == *" strata "* ]]; then
  if [[ -x "$STRATA_BIN" ]]; then
    STRATA_OK=1
  else
    echo "NOTE: Strata binary not found at $STRATA_BIN (set STRATA_BIN or run 'cargo build --release');"
    echo "      running the Kafka side only."
  fi
fi

# The cleaner settings both brokers get (the rest are Kafka's defaults on both).
CLEANER_PROPS="log.cleaner.enable=true
log.cleaner.threads=1
log.cleaner.backoff.ms=$BACKOFF_MS
log.cleaner.dedupe.buffer.size=134217728
log.cleaner.io.buffer.load.factor=0.9
log.cleaner.io.max.bytes.per.second=1.7976931348623157E308"
TOPIC_CONFIG=(--config cleanup.policy=delete --config retention.ms=-1
              --config "segment.bytes=$SEGMENT_BYTES" --config "min.cleanable.dirty.ratio=$DIRTY_RATIO"
              --config min.compaction.lag.ms=0)

echo "compaction bench: records=$RECORDS keys=$KEYS value=${VALUE_SIZE}B partitions=$PARTITIONS" \
     "segment.bytes=$SEGMENT_BYTES min.cleanable.dirty.ratio=$DIRTY_RATIO backoff=${BACKOFF_MS}ms" \
     "kafka=$KAFKA_VERSION targets=[$TARGETS] work=$WORK"

# ------------------------------------------------------------------ targets
start_kafka() {
  local port="$1" dir="$2"
  CUR_KIND=kafka CUR_DIR="$dir"
  KAFKA_REF_EXTRA="$CLEANER_PROPS
num.partitions=$PARTITIONS
log.initial.task.delay.ms=0${BENCH_KAFKA_EXTRA:+
$BENCH_KAFKA_EXTRA}" KAFKA_REF_TIMEOUT="$START_TIMEOUT" \
    "$ROOT/scripts/kafka-ref.sh" start "$port" "$dir" || return 1
  CUR_PID="$(cat "$dir/kafka.pid")" || return 1
}

start_strata() {
  local port="$1" dir="$2"
  ADMIN_PORT="$(strata_free_port)"
  mkdir -p "$dir/data"
  cat >"$dir/server.properties" <<EOF
# generated by benches/compaction.sh
listeners=PLAINTEXT://127.0.0.1:$port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
log.dirs=$dir/data
strata.admin.listener=127.0.0.1:$ADMIN_PORT
num.partitions=$PARTITIONS
group.initial.rebalance.delay.ms=0
$CLEANER_PROPS
EOF
  if [[ -n "${BENCH_STRATA_EXTRA:-}" ]]; then
    printf '%s\n' "$BENCH_STRATA_EXTRA" >>"$dir/server.properties"
  fi
  strata_log "starting Strata on 127.0.0.1:$port (admin :$ADMIN_PORT): $STRATA_BIN serve --config $dir/server.properties"
  "$STRATA_BIN" serve --config "$dir/server.properties" >"$dir/strata.log" 2>&1 </dev/null &
  CUR_KIND=strata CUR_PID=$! CUR_DIR="$dir"
  local start=$SECONDS code
  while :; do
    if ! strata_alive "$CUR_PID"; then
      tail -n 40 "$dir/strata.log" >&2 || true
      strata_log "Strata exited during startup"
      return 1
    fi
    code="$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$ADMIN_PORT/health" || true)"
    [[ "$code" == 200 ]] && break
    if ((SECONDS - start >= START_TIMEOUT)); then
      tail -n 40 "$dir/strata.log" >&2 || true
      strata_log "Strata not healthy after ${START_TIMEOUT}s (last /health status: ${code:-none})"
      return 1
    fi
    sleep 0.5
  done
  strata_log "Strata ready after $((SECONDS - start))s (pid $CUR_PID)"
}

# CPU seconds (user+sys) of a live process.
cpu_seconds() {
  local ticks
  ticks="$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $12 + $13}' || true)"
  awk -v t="${ticks:-0}" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f\n", t / hz }'
}

# One value of Strata's /metrics (sum over label sets), or 0.
metric() {
  awk -v n="$2" '$1 == n || index($1, n "{") == 1 { s += $2 } END { printf "%.6f\n", s + 0 }' "$1"
}

snapshot_metrics() {
  curl -s -m 10 "http://127.0.0.1:$ADMIN_PORT/metrics" >"$1" || : >"$1"
}

# Kafka's own cleaner reports for a topic, as JSON (passes, mib_processed, seconds).
kafka_stats() {
  "${TOOL[@]}" kafka-stats --log "$CUR_DIR/logs/server.log" --topic "$1"
}

run_target() {
  local target="$1"
  local dir="$WORK/$target" port status=ok
  rm -rf "$dir"
  mkdir -p "$dir"
  port="$(strata_free_port)"
  echo
  echo "=== $target ==="
  "start_$target" "$port" "$dir" || status="start-failed"
  local bootstrap="127.0.0.1:$port" data="$dir/data"
  local prod_a=null prod_b=null prod_c=null prod_while=null clean=null while_ratio_c=null
  local clean_internal=null clean_cpu=null while_mib=null while_passes=null while_ratio=null

  if [[ $status == ok ]]; then
    for t in bench-a bench-b bench-c; do
      local extra=()
      # bench-c: compacted (so appends take the compacted-topic path: every record must have a
      # key) but never cleanable, as its records never get older than min.compaction.lag.ms.
      [[ $t != bench-c ]] || extra=(--config cleanup.policy=compact --config min.compaction.lag.ms=9223372036854775807)
      run_tool "$dir/create-$t.out" "${TOOL[@]}" create --bootstrap "$bootstrap" --topic "$t" \
        --partitions "$PARTITIONS" "${TOPIC_CONFIG[@]}" "${extra[@]}" || { cat "$dir/create-$t.out.err" >&2; status="create-failed"; break; }
    done
  fi

  # 2. produce without cleaning
  if [[ $status == ok ]]; then
    for t in a b c; do
      if run_tool "$dir/produce-$t.out" "${TOOL[@]}" produce --bootstrap "$bootstrap" --topic "bench-$t" \
          --records "$RECORDS" --keys "$KEYS" --value-size "$VALUE_SIZE" --seed 1; then
        echo "produce bench-$t (no cleaning): $(cat "$dir/produce-$t.out")"
      else
        tail -n 20 "$dir/produce-$t.out" "$dir/produce-$t.out.err" >&2
        status="produce-$t-failed"
        break
      fi
    done
    [[ $status != ok ]] || { prod_a="$(cat "$dir/produce-a.out")"; prod_b="$(cat "$dir/produce-b.out")"; prod_c="$(cat "$dir/produce-c.out")"; }
  fi

  # 3. cleaning alone
  if [[ $status == ok ]]; then
    [[ $target != strata ]] || snapshot_metrics "$dir/metrics-before-clean.txt"
    local cpu0 cpu1
    cpu0="$(cpu_seconds "$CUR_PID")"
    if run_tool "$dir/clean.out" "${TOOL[@]}" clean --bootstrap "$bootstrap" --topic bench-a \
        --partitions "$PARTITIONS" --data-dir "$data" --timeout "$CLEAN_TIMEOUT"; then
      clean="$(cat "$dir/clean.out")"
      cpu1="$(cpu_seconds "$CUR_PID")"
      clean_cpu="$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { printf "%.2f", b - a }')"
      echo "clean bench-a: $clean"
      echo "broker CPU seconds while cleaning: $clean_cpu"
    else
      tail -n 20 "$dir/clean.out" "$dir/clean.out.err" >&2
      status="clean-failed"
    fi
    if [[ $target == strata ]]; then
      sleep 0.3 # the metrics are updated right after the checkpoint
      snapshot_metrics "$dir/metrics-after-clean.txt"
      local b0 b1 p0 p1 last
      b0="$(metric "$dir/metrics-before-clean.txt" strata_log_cleaner_bytes_cleaned_total)"
      b1="$(metric "$dir/metrics-after-clean.txt" strata_log_cleaner_bytes_cleaned_total)"
      p0="$(metric "$dir/metrics-before-clean.txt" strata_log_cleaner_passes_total)"
      p1="$(metric "$dir/metrics-after-clean.txt" strata_log_cleaner_passes_total)"
      last="$(metric "$dir/metrics-after-clean.txt" strata_log_cleaner_last_pass_duration_seconds)"
      echo "strata metrics: bytes_cleaned +$(awk -v a="$b0" -v b="$b1" 'BEGIN{printf "%.0f", b-a}')," \
           "passes +$(awk -v a="$p0" -v b="$p1" 'BEGIN{printf "%.0f", b-a}'), last pass ${last}s," \
           "dirty ratio of bench-a: $(grep '^strata_partition_cleaner_dirty_ratio{topic="bench-a"' "$dir/metrics-after-clean.txt" | awk '{print $2}' | paste -sd, -)"
      # The cleaner's own rate, when one pass did it all (only the last pass's duration is exported).
      if awk -v a="$p0" -v b="$p1" 'BEGIN{exit !(b - a == 1)}'; then
        clean_internal="$(awk -v a="$b0" -v b="$b1" -v s="$last" 'BEGIN{ if (s > 0) printf "%.2f", (b - a) / s / 1048576; else print "null" }')"
      fi
    else
      local ks
      ks="$(kafka_stats bench-a)"
      echo "kafka cleaner reports for bench-a: $ks"
      clean_internal="$(python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1])["mbps"]))' "$ks")"
    fi
  fi

  # 4. produce while cleaning
  if [[ $status == ok ]]; then
    [[ $target != strata ]] || snapshot_metrics "$dir/metrics-before-while.txt"
    local kb=""
    [[ $target != kafka ]] || kb="$(kafka_stats bench-b)"
    if run_tool "$dir/alter-b.out" "${TOOL[@]}" alter --bootstrap "$bootstrap" --topic bench-b \
          --config cleanup.policy=compact \
        && run_tool "$dir/produce-while.out" "${TOOL[@]}" produce --bootstrap "$bootstrap" --topic bench-b \
          --records "$RECORDS" --keys "$KEYS" --value-size "$VALUE_SIZE" --seed 2; then
      prod_while="$(cat "$dir/produce-while.out")"
      echo "produce bench-b while cleaning: $prod_while"
      echo "bench-b cleaning progress when the produce ended: $("${TOOL[@]}" checkpoint --data-dir "$data" --topic bench-b --partitions "$PARTITIONS")"
    else
      tail -n 20 "$dir/alter-b.out.err" "$dir/produce-while.out" "$dir/produce-while.out.err" >&2
      status="produce-while-failed"
    fi
    if [[ $target == strata ]]; then
      snapshot_metrics "$dir/metrics-after-while.txt"
      while_mib="$(awk -v a="$(metric "$dir/metrics-before-while.txt" strata_log_cleaner_bytes_cleaned_total)" \
        -v b="$(metric "$dir/metrics-after-while.txt" strata_log_cleaner_bytes_cleaned_total)" 'BEGIN{printf "%.1f", (b-a)/1048576}')"
      while_passes="$(awk -v a="$(metric "$dir/metrics-before-while.txt" strata_log_cleaner_passes_total)" \
        -v b="$(metric "$dir/metrics-after-while.txt" strata_log_cleaner_passes_total)" 'BEGIN{printf "%.0f", b-a}')"
    else
      local ka
      ka="$(kafka_stats bench-b)"
      read -r while_mib while_passes < <(python3 -c 'import json,sys; a=json.loads(sys.argv[1]); b=json.loads(sys.argv[2]); print(round(b["mib_processed"]-a["mib_processed"],1), b["passes"]-a["passes"])' "$kb" "$ka")
    fi
    echo "cleaner during that produce: ${while_mib} MiB in ${while_passes} pass(es)"
    if [[ $prod_while != null ]]; then
      while_ratio="$(python3 -c 'import json,sys; a,b,w=(json.loads(x)["rps"] for x in sys.argv[1:]); print(round(w/((a+b)/2),4))' "$prod_a" "$prod_b" "$prod_while")"
      while_ratio_c="$(python3 -c 'import json,sys; c,w=(json.loads(x)["rps"] for x in sys.argv[1:]); print(round(w/c,4))' "$prod_c" "$prod_while")"
    fi
  fi

  # 5. the cleaner status subcommand
  if [[ $target == strata && $status == ok ]]; then
    echo "--- $STRATA_BIN cleaner status --admin 127.0.0.1:$ADMIN_PORT"
    if "$STRATA_BIN" cleaner status --admin "127.0.0.1:$ADMIN_PORT" >"$dir/cleaner-status.out" 2>&1; then
      # (the internal topics' rows are left out here; the whole output is in cleaner-status.out)
      grep -v '^__' "$dir/cleaner-status.out"
      local t
      for t in bench-a bench-b; do
        grep -Eq "^$t +0 " "$dir/cleaner-status.out" || { echo "cleaner status lacks $t/0" >&2; status="cli-check-failed"; }
      done
    else
      cat "$dir/cleaner-status.out" >&2
      status="cli-check-failed"
    fi
  fi

  if [[ -n "$CUR_PID" ]] && ! strata_alive "$CUR_PID" && [[ $status == ok ]]; then status="broker-died"; fi
  if [[ $target == kafka ]]; then cp "$dir/logs/server.log" "$dir/server.log.saved" 2>/dev/null || true; fi
  stop_target
  python3 - "$target" "$status" "$prod_a" "$prod_b" "$prod_c" "$prod_while" "$clean" "$clean_internal" \
      "$clean_cpu" "$while_mib" "$while_passes" "$while_ratio" "$while_ratio_c" >>"$RESULTS" <<'EOF'
import json, sys
keys = ["target", "status", "prod_a", "prod_b", "prod_c", "prod_while", "clean", "clean_internal_mbps",
        "clean_cpu_s", "while_cleaned_mib", "while_passes", "while_ratio", "while_ratio_c"]
vals = sys.argv[1:3] + [json.loads(v) for v in sys.argv[3:]]
print(json.dumps(dict(zip(keys, vals))))
EOF
  echo "status: $status"
}

for target in $TARGETS; do
  case "$target" in
    strata) [[ $STRATA_OK == 1 ]] || continue ;;
    kafka) ;;
    *) strata_die "unknown target '$target' in BENCH_TARGETS" ;;
  esac
  run_target "$target"
done

echo
echo "Results ($RECORDS keyed records per produce over $KEYS keys, ${VALUE_SIZE}B values," \
     "segment.bytes=$SEGMENT_BYTES, $PARTITIONS partition(s), 1 cleaner thread, keyed producer:" \
     "confluent-kafka $("$PY" -c 'import confluent_kafka; print(confluent_kafka.libversion()[0])' 2>/dev/null)" \
     "(librdkafka); raw: $RESULTS)"
"${TOOL[@]}" report --results "$RESULTS"
