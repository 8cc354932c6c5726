#!/usr/bin/env bash
# Tiered storage benchmark: upload throughput, consume throughput from local disk and from
# remote storage (cold and warm cache), object-store requests per GiB and broker memory, in
# one run against one Strata broker (release build) and an object store started here:
# moto_server from the test venv on a free 127.0.0.1 port with a fresh bucket (created with
# boto3), s3s-fs with BENCH_STORE=s3s (an S3 server over a directory that checks SigV4 and
# serves ranged GETs from the file, as S3 does; moto copies the whole object on every ranged
# GET, so remote-read figures against moto say nothing about S3), the local filesystem
# store with BENCH_STORE=file, or an S3 bucket elsewhere with BENCH_STORE=external (S3 itself,
# or a server on another host: then the store's work is not on this machine's cores).
#   1. start the store and the broker (tiering task every 200 ms, cache in <work>/cache)
#   2. create two topics with the same settings, segment.bytes=BENCH_SEGMENT_BYTES:
#      bench-local (no remote storage) and bench-tiered (local.retention.bytes=0, created with
#      remote.storage.enable=false); ProducerPerformance writes the same BENCH_RECORDS records
#      of BENCH_RECORD_SIZE bytes to each
#   3. upload: IncrementalAlterConfigs sets remote.storage.enable=true on bench-tiered; the
#      clock runs from there until every sealed segment is uploaded (strata_remote_segments_
#      uploaded_total and strata_remote_upload_lag_bytes on /metrics: only the active segment
#      is left). Only the rolled segments count: the active segment is not uploaded until it
#      rolls, and no extra records are produced to roll it. Enabling after the produce makes
#      the whole backlog wait, so the figure is the uploader's throughput, not the producer's.
#   4. ConsumerPerformance reads bench-local from offset 0 (local disk; recently written, so
#      mostly from the page cache)
#   5. restart the broker with an empty cache dir (strata.remote.cache.dir). Shutdown rolls and
#      uploads the active segment, and local retention deletes it, so bench-tiered is then
#      wholly remote. ConsumerPerformance reads it from offset 0 (cold cache), then again with
#      a new group (warm cache); the broker's VmRSS / RssAnon are sampled every 200 ms.
#   6. rehydration: local.retention.bytes=-1 and strata.remote.rehydrate.enable=true on
#      bench-tiered; the clock runs until its local segments hold every byte again, then
#      ConsumerPerformance reads it from offset 0 with a new group (now from local disk)
#   7. print a table: upload MB/s, consume MB/s, requests per GiB uploaded / read (deltas of
#      strata_remote_requests_total{topic="bench-tiered"}), peak RSS next to the cache sizes,
#      with the targets set for tiered reads, and who used the CPU during each read (the
#      machine's busy time from /proc/stat, the broker's and the store's from /proc/<pid>/stat;
#      the rest is the consumer and the kernel) and how long some task waited for a core
#      (/proc/pressure/cpu)
# All three consumes use Kafka's ConsumerPerformance (from the Java classpath, as
# benches/compare.sh) with the same settings; MB/s is its MB.sec (record bytes / wall time,
# group join included) and fetch-only MB/s its fetch.MB.sec.
#
#   benches/tiering.sh                                        # ~1 GiB, moto S3
#   BENCH_RECORDS=524288 benches/tiering.sh                   # 512 MiB
#   BENCH_STORE=file BENCH_RECORDS=524288 benches/tiering.sh  # filesystem store
#   BENCH_STORE=seaweedfs BENCH_STORE_CPUS=2,3 BENCH_CPUS=0,1 benches/tiering.sh
#                                                             # store on cores of its own
#   BENCH_STORE=external BENCH_S3_BUCKET=my-bucket AWS_ACCESS_KEY_ID=... \
#     AWS_SECRET_ACCESS_KEY=... benches/tiering.sh            # S3 itself
#
# Environment:
#   STRATA_BIN            Strata binary (default ${CARGO_TARGET_DIR:-target}/release/strata)
#   BENCH_STORE           s3 (moto_server, default), s3s (s3s-fs from install-test-deps.sh),
#                         seaweedfs (SeaweedFS, built once by scripts/build-seaweedfs.sh from
#                         the Go module proxy; behaves like S3 under load), file, or
#                         external (an existing bucket, not started here: see BENCH_S3_*)
#   BENCH_S3_BUCKET       external store: the bucket (must exist); the run writes under a
#                         prefix of its own, strata-bench-<time>-<pid>, and deletes it at exit
#   BENCH_S3_ENDPOINT     external store: endpoint URL (default: AWS S3 of BENCH_S3_REGION)
#   BENCH_S3_REGION       external store: region (default us-east-1)
#   BENCH_S3_PATH_STYLE   external store: true/false (default true with an endpoint, else
#                         false); credentials come from AWS_ACCESS_KEY_ID / _SECRET_ACCESS_KEY
#                         (and AWS_SESSION_TOKEN), read by the broker and by boto3
#   BENCH_STORE_CPUS      CPU list (taskset -c) for the store started here
#   BENCH_CPUS            CPU list (taskset -c) for the broker and the Kafka tools
#   BENCH_RECORDS         records per topic (default 1048576: 1 GiB with 1 KiB records)
#   BENCH_RECORD_SIZE     bytes per record (default 1024)
#   BENCH_PARTITIONS      partitions per topic (default 1)
#   BENCH_SEGMENT_BYTES   segment.bytes of both topics (default 134217728 = 128 MiB; min 1 MiB)
#   BENCH_COMPRESSION     producer compression.type (default none: ProducerPerformance repeats
#                         one payload, which any codec shrinks to almost nothing)
#   BENCH_PRODUCER_PROPS  extra producer properties, space-separated k=v
#   BENCH_CONSUMER_PROPS  extra consumer properties, space-separated k=v (all three consumes)
#   BENCH_STRATA_EXTRA    extra lines for Strata's server.properties (newline-separated k=v),
#                         e.g. strata.remote.chunk.bytes=8388608
#   BENCH_DIR             work dir (default: a new /tmp/strata-tiering.XXXXXX); the metrics
#                         snapshots, tool output and logs stay there
#   BENCH_KEEP_DATA=1     keep the broker's data and cache dirs and the store's data
#   BENCH_START_TIMEOUT   seconds to wait for the broker / moto to become ready (default 60)
#   BENCH_UPLOAD_TIMEOUT  seconds to wait for the uploads (default 1800)
#   BENCH_TOOL_HEAP       heap of the perf tool JVMs (default -Xmx512m)
#   BENCH_PERF=1          record a CPU profile of the broker during each consume with perf
#                         (<work>/perf-<phase>.data)
#   BENCH_ROUNDS          rounds of reads (default 1): each further round reads the local
#                         topic, restarts the broker with an empty cache and reads the tiered
#                         topic cold and warm again; the table adds each round's rates and
#                         the median ratios, which single runs on a small machine need
set -euo pipefail
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/common.sh"
ROOT="$STRATA_REPO_ROOT"

case "${1:-}" in
  "") ;;
  -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0   (configured through environment variables; see $0 --help)" >&2; exit 2 ;;
esac

STORE="${BENCH_STORE:-s3}"
RECORDS="${BENCH_RECORDS:-1048576}"
RECORD_SIZE="${BENCH_RECORD_SIZE:-1024}"
PARTITIONS="${BENCH_PARTITIONS:-1}"
ROUNDS="${BENCH_ROUNDS:-1}"
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || strata_die "BENCH_ROUNDS must be a positive integer"
SEGMENT_BYTES="${BENCH_SEGMENT_BYTES:-134217728}"
COMPRESSION="${BENCH_COMPRESSION:-none}"
START_TIMEOUT="${BENCH_START_TIMEOUT:-60}"
UPLOAD_TIMEOUT="${BENCH_UPLOAD_TIMEOUT:-1800}"
TOOL_HEAP="${BENCH_TOOL_HEAP:--Xmx512m}"
STRATA_BIN="${STRATA_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/strata}"
[[ "$STRATA_BIN" == /* ]] || STRATA_BIN="$ROOT/$STRATA_BIN"
for v in RECORDS RECORD_SIZE PARTITIONS SEGMENT_BYTES START_TIMEOUT UPLOAD_TIMEOUT; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || strata_die "$v must be a positive integer, got '${!v}'"
done
((SEGMENT_BYTES >= 1048576)) || strata_die "BENCH_SEGMENT_BYTES must be at least 1 MiB (segment.bytes' minimum)"
[[ "$STORE" =~ ^(s3|s3s|seaweedfs|file|external)$ ]] \
  || strata_die "BENCH_STORE must be s3, s3s, seaweedfs, file or external, got '$STORE'"
# Pinning: the store on cores of its own shows the read as it is when the store runs
# elsewhere (S3 itself), which two shared cores cannot.
PIN_STORE=() PIN=()
if [[ -n "${BENCH_STORE_CPUS:-}" ]]; then
  taskset -c "$BENCH_STORE_CPUS" true 2>/dev/null || strata_die "BENCH_STORE_CPUS: not a CPU list taskset takes: '$BENCH_STORE_CPUS'"
  PIN_STORE=(taskset -c "$BENCH_STORE_CPUS")
fi
if [[ -n "${BENCH_CPUS:-}" ]]; then
  taskset -c "$BENCH_CPUS" true 2>/dev/null || strata_die "BENCH_CPUS: not a CPU list taskset takes: '$BENCH_CPUS'"
  PIN=(taskset -c "$BENCH_CPUS")
fi
EXTERNAL_PREFIX=""
if [[ $STORE == external ]]; then
  [[ -n "${BENCH_S3_BUCKET:-}" ]] || strata_die "BENCH_STORE=external needs BENCH_S3_BUCKET (an existing bucket)"
  [[ -n "${AWS_ACCESS_KEY_ID:-}" && -n "${AWS_SECRET_ACCESS_KEY:-}" ]] \
    || strata_die "BENCH_STORE=external needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
  EXTERNAL_PREFIX="strata-bench-$(date +%Y%m%d%H%M%S)-$$"
fi
[[ -x "$STRATA_BIN" ]] || strata_die "no Strata binary at $STRATA_BIN (set STRATA_BIN or run 'cargo build --release')"

if [[ -n "${BENCH_DIR:-}" ]]; then
  WORK="$BENCH_DIR"
  mkdir -p "$WORK"
else
  WORK="$(mktemp -d /tmp/strata-tiering.XXXXXX)"
fi
WORK="$(cd "$WORK" && pwd)"
RESULTS="$WORK/results.env"
: >"$RESULTS"
LOCAL_TOPIC=bench-local
TIERED_TOPIC=bench-tiered

# ------------------------------------------------------------------ cleanup
BROKER_PID="" MOTO_PID="" TOOL_PID="" SAMPLER_PID=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "$SAMPLER_PID" ]]; then kill "$SAMPLER_PID" 2>/dev/null || true; wait "$SAMPLER_PID" 2>/dev/null || true; fi
  if [[ -n "$TOOL_PID" ]]; then strata_stop_pid "$TOOL_PID" 5 || true; fi
  # (Defined further down: an early failure gets here before it exists.)
  if declare -F stop_broker >/dev/null; then stop_broker || true; fi
  if [[ -n "$MOTO_PID" ]]; then
    strata_stop_pid "$MOTO_PID" 10 || true
    wait "$MOTO_PID" 2>/dev/null || true
  fi
  if [[ "${BENCH_KEEP_DATA:-0}" != 1 ]]; then
    rm -rf "${STATE_DIRS[@]}"
    if [[ -n "$EXTERNAL_PREFIX" && -n "${HELPER[*]:-}" ]]; then
      "${HELPER[@]}" delete-prefix "${BENCH_S3_ENDPOINT:-}" "${BENCH_S3_REGION:-us-east-1}" \
        "$BENCH_S3_BUCKET" "$EXTERNAL_PREFIX/" \
        || strata_log "could not delete s3://$BENCH_S3_BUCKET/$EXTERNAL_PREFIX/"
    fi
  fi
  exit "$rc"
}
# The broker's and the store's data: a run starts without them (a BENCH_DIR used before, or
# a run killed before its cleanup, left its bucket and topics there).
STATE_DIRS=("$WORK/data" "$WORK/cache" "$WORK/objects" "$WORK/weed" "$WORK/s3s")
rm -rf "${STATE_DIRS[@]}"
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Run a command in the background and wait for it, so that signals reach our traps promptly.
run_tool() {
  local out="$1"
  shift
  "$@" >"$out" 2>&1 &
  TOOL_PID=$!
  local rc=0
  wait "$TOOL_PID" || rc=$?
  TOOL_PID=""
  return "$rc"
}

record() { printf '%s=%s\n' "$1" "$2" >>"$RESULTS"; }

# ------------------------------------------------------------------ setup
"$ROOT/scripts/install-test-deps.sh" >/dev/null
TOOLS_CP="$("$ROOT/scripts/java-classpath.sh" tools)"
JAVA="$(strata_java)"
read -r -a TOOL_HEAP_ARGS <<<"$TOOL_HEAP"
JAVA_TOOL=("${PIN[@]}" "$JAVA" "${TOOL_HEAP_ARGS[@]}" -Dorg.slf4j.simpleLogger.defaultLogLevel=warn)
PY="$STRATA_VENV/bin/python"
[[ -x "$PY" ]] || strata_die "no Python venv at $STRATA_VENV; run scripts/install-test-deps.sh"
HELPER=("$PY" "$ROOT/benches/tiering_report.py")

# Options were renamed during 4.x (--producer-props -> --command-property, --messages -> --num-records).
PP_HELP="$("${JAVA_TOOL[@]}" -cp "$TOOLS_CP" org.apache.kafka.tools.ProducerPerformance --help 2>&1 || true)"
if grep -q -- '--command-property' <<<"$PP_HELP"; then PROPS_OPT=--command-property; else PROPS_OPT=--producer-props; fi
CP_HELP="$("${JAVA_TOOL[@]}" -cp "$TOOLS_CP" org.apache.kafka.tools.ConsumerPerformance --help 2>&1 || true)"
if grep -q -- '--num-records' <<<"$CP_HELP"; then NUM_OPT=--num-records; else NUM_OPT=--messages; fi
CONSUMER_ARGS=()
if [[ -n "${BENCH_CONSUMER_PROPS:-}" ]]; then
  grep -q -- '--command-property' <<<"$CP_HELP" \
    || strata_die "BENCH_CONSUMER_PROPS needs a ConsumerPerformance with --command-property"
  for p in $BENCH_CONSUMER_PROPS; do CONSUMER_ARGS+=(--command-property "$p"); done
fi

echo "tiering bench: store=$STORE records=$RECORDS size=${RECORD_SIZE}B partitions=$PARTITIONS" \
     "segment.bytes=$SEGMENT_BYTES compression=$COMPRESSION kafka-tools=$KAFKA_VERSION work=$WORK"

# ------------------------------------------------------------------ object store
STORE_PROPS=""
# Starts an S3 server (MOTO_PID) with `cmd...` listening on PORT, waits until it answers,
# creates the bucket and sets STORE_PROPS. Usage: start_s3_server NAME LOG cmd...
start_s3_server() {
  local name="$1" log="$2" start=$SECONDS
  shift 2
  strata_log "starting $name on 127.0.0.1:$PORT_S3"
  # (taskset execs the server: the pid is the server's.)
  "${PIN_STORE[@]}" "$@" >"$log" 2>&1 </dev/null &
  MOTO_PID=$!
  until curl -s -o /dev/null -m 1 "http://127.0.0.1:$PORT_S3/"; do
    strata_alive "$MOTO_PID" || { tail -n 20 "$log" >&2; strata_die "$name exited during startup"; }
    ((SECONDS - start < START_TIMEOUT)) || strata_die "$name not answering after ${START_TIMEOUT}s"
    sleep 0.2
  done
  "${HELPER[@]}" bucket "http://127.0.0.1:$PORT_S3" strata-bench
  STORE_PROPS="strata.remote.store.url=s3://strata-bench/bench
strata.remote.store.endpoint=http://127.0.0.1:$PORT_S3
strata.remote.store.region=us-east-1
strata.remote.store.access.key.id=strata-bench
strata.remote.store.secret.access.key=strata-bench
strata.remote.store.path.style=true"
}

start_moto() {
  local moto="${STRATA_MOTO_SERVER:-$STRATA_VENV/bin/moto_server}"
  [[ -x "$moto" ]] || strata_die "moto_server not found at $moto; run scripts/install-test-deps.sh"
  mkdir -p "$WORK/moto"
  start_s3_server moto_server "$WORK/moto/moto.log" \
    bash -c 'cd "$1" && exec "$2" -H 127.0.0.1 -p "$3"' _ "$WORK/moto" "$moto" "$PORT_S3"
}

# SeaweedFS (scripts/build-seaweedfs.sh builds it once): master, volume server, filer and
# S3 gateway in one process, every port free and on 127.0.0.1, data under $WORK/weed. No
# identities are configured, so it takes Strata's signed requests without checking them.
start_seaweedfs() {
  local bin
  bin="${STRATA_WEED:-$("$ROOT/scripts/build-seaweedfs.sh")}"
  [[ -x "$bin" ]] || strata_die "weed not found at $bin"
  mkdir -p "$WORK/weed"
  local master volume filer
  master="$(strata_free_port)" volume="$(strata_free_port)" filer="$(strata_free_port)"
  start_s3_server seaweedfs "$WORK/weed.log" "$bin" server -ip=127.0.0.1 -ip.bind=127.0.0.1 \
    -dir="$WORK/weed" -master.port="$master" -master.port.grpc="$(strata_free_port)" \
    -volume.port="$volume" -volume.port.grpc="$(strata_free_port)" \
    -filer.port="$filer" -filer.port.grpc="$(strata_free_port)" \
    -s3 -s3.port="$PORT_S3" -s3.port.grpc="$(strata_free_port)" \
    -s3.port.iceberg="$(strata_free_port)" -s3.port.lance="$(strata_free_port)" \
    -master.volumeSizeLimitMB=1024 -volume.max=0
}

start_s3s() {
  local bin="${STRATA_S3S_FS:-$STRATA_CACHE/s3s-fs/bin/s3s-fs}"
  [[ -x "$bin" ]] || strata_die "s3s-fs not found at $bin; run scripts/install-test-deps.sh"
  mkdir -p "$WORK/s3s"
  start_s3_server s3s-fs "$WORK/s3s.log" "$bin" --host 127.0.0.1 --port "$PORT_S3" \
    --access-key strata-bench --secret-key strata-bench "$WORK/s3s"
}

PORT_S3="$(strata_free_port)"
if [[ $STORE == s3 ]]; then
  start_moto
elif [[ $STORE == s3s ]]; then
  start_s3s
elif [[ $STORE == seaweedfs ]]; then
  start_seaweedfs
elif [[ $STORE == external ]]; then
  # The broker reads the credentials from the environment, as any AWS client does.
  STORE_PROPS="strata.remote.store.url=s3://$BENCH_S3_BUCKET/$EXTERNAL_PREFIX
strata.remote.store.region=${BENCH_S3_REGION:-us-east-1}"
  PATH_STYLE=false
  if [[ -n "${BENCH_S3_ENDPOINT:-}" ]]; then
    STORE_PROPS+=$'\n'"strata.remote.store.endpoint=$BENCH_S3_ENDPOINT"
    PATH_STYLE=true
  fi
  STORE_PROPS+=$'\n'"strata.remote.store.path.style=${BENCH_S3_PATH_STYLE:-$PATH_STYLE}"
  strata_log "external store: s3://$BENCH_S3_BUCKET/$EXTERNAL_PREFIX/ at ${BENCH_S3_ENDPOINT:-AWS S3}"
else
  mkdir -p "$WORK/objects"
  STORE_PROPS="strata.remote.store.url=file://$WORK/objects"
fi

# ------------------------------------------------------------------ broker
PORT="$(strata_free_port)"
ADMIN_PORT="$(strata_free_port)"
BOOTSTRAP="127.0.0.1:$PORT"
METRICS_URL="http://127.0.0.1:$ADMIN_PORT/metrics"
CONFIG="$WORK/server.properties"
mkdir -p "$WORK/data" "$WORK/cache"
cat >"$CONFIG" <<EOF
# generated by benches/tiering.sh
listeners=PLAINTEXT://127.0.0.1:$PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
log.dirs=$WORK/data
strata.admin.listener=127.0.0.1:$ADMIN_PORT
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
remote.log.storage.system.enable=true
# Upload and delete promptly, as tests/interop/test_tiering.py does.
remote.log.manager.task.interval.ms=200
log.retention.check.interval.ms=200
strata.remote.cache.dir=$WORK/cache
$STORE_PROPS
EOF
if [[ -n "${BENCH_STRATA_EXTRA:-}" ]]; then
  printf '%s\n' "$BENCH_STRATA_EXTRA" >>"$CONFIG"
fi

start_broker() {
  local start=$SECONDS code
  strata_log "starting Strata on $BOOTSTRAP (admin :$ADMIN_PORT): $STRATA_BIN serve --config $CONFIG"
  "${PIN[@]}" "$STRATA_BIN" serve --config "$CONFIG" >>"$WORK/strata.log" 2>&1 </dev/null &
  BROKER_PID=$!
  while :; do
    if ! strata_alive "$BROKER_PID"; then
      tail -n 40 "$WORK/strata.log" >&2 || true
      strata_die "Strata exited during startup"
    fi
    code="$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$ADMIN_PORT/health" || true)"
    [[ "$code" == 200 ]] && break
    if ((SECONDS - start >= START_TIMEOUT)); then
      tail -n 40 "$WORK/strata.log" >&2 || true
      strata_die "Strata not healthy after ${START_TIMEOUT}s (last /health status: ${code:-none})"
    fi
    sleep 0.5
  done
  strata_log "Strata ready after $((SECONDS - start))s (pid $BROKER_PID)"
}

stop_broker() {
  [[ -n "$BROKER_PID" ]] || return 0
  strata_log "stopping Strata (pid $BROKER_PID)"
  # Shutdown uploads the active segments of remote topics first: allow for it.
  strata_stop_pid "$BROKER_PID" 300 || true
  wait "$BROKER_PID" 2>/dev/null || true
  BROKER_PID=""
}

snapshot() { "${HELPER[@]}" snapshot "$METRICS_URL" "$WORK/metrics-$1.prom"; }

# The effective value of a broker setting: last line in the config file, else the default.
setting() {
  local v
  v="$(sed -n "s/^$1=//p" "$CONFIG" | tail -n 1)"
  printf '%s\n' "${v:-$2}"
}

produce() {
  local topic="$1"
  # shellcheck disable=SC2086
  if ! run_tool "$WORK/producer-$topic.out" "${JAVA_TOOL[@]}" -cp "$TOOLS_CP" \
      org.apache.kafka.tools.ProducerPerformance --bootstrap-server "$BOOTSTRAP" --topic "$topic" \
      --num-records "$RECORDS" --record-size "$RECORD_SIZE" --throughput -1 \
      "$PROPS_OPT" acks=1 compression.type="$COMPRESSION" ${BENCH_PRODUCER_PROPS:-}; then
    tail -n 20 "$WORK/producer-$topic.out" >&2
    strata_die "ProducerPerformance failed on $topic"
  fi
  grep 'records sent' "$WORK/producer-$topic.out" | tail -n 1 || true
}

consume() {
  local phase="$1" topic="$2" perf_pid=""
  if [[ -n "${BENCH_PERF:-}" ]] && command -v perf >/dev/null; then
    # A CPU profile of the broker during this read (perf report -i <file>).
    perf record -F 499 -g -p "$BROKER_PID" -o "$WORK/perf-$phase.data" >/dev/null 2>&1 &
    perf_pid=$!
  fi
  if ! run_tool "$WORK/consumer-$phase.out" "${JAVA_TOOL[@]}" -cp "$TOOLS_CP" \
      org.apache.kafka.tools.ConsumerPerformance --bootstrap-server "$BOOTSTRAP" --topic "$topic" \
      "$NUM_OPT" "$((RECORDS))" --timeout 60000 --group "bench-$phase-$$" "${CONSUMER_ARGS[@]}"; then
    tail -n 20 "$WORK/consumer-$phase.out" >&2
    strata_die "ConsumerPerformance ($phase) failed on $topic"
  fi
  if [[ -n "$perf_pid" ]]; then
    kill -INT "$perf_pid" 2>/dev/null || true
    wait "$perf_pid" 2>/dev/null || true
  fi
  grep -A1 'MB.sec' "$WORK/consumer-$phase.out" | tail -n 1 || true
}

# Writes "<VmRSS kB> <RssAnon kB>" of the broker every 200 ms to $1 until killed.
sample_rss() {
  local out="$1" pid="$BROKER_PID"
  while strata_alive "$pid"; do
    awk '/^VmRSS:/{r=$2} /^RssAnon:/{a=$2} END{print r, a}' "/proc/$pid/status" >>"$out" 2>/dev/null || true
    sleep 0.2
  done
}

status_kib() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$BROKER_PID/status"; }
# Bytes the broker has written to storage (its remote cache's disk tier, during remote reads).
write_bytes() { awk '$1 == "write_bytes:" {print $2}' "/proc/$BROKER_PID/io"; }
# CPU time so far, in clock ticks: the whole machine's busy time, the broker's and the
# object store's (0 for the filesystem store), then the time of day, then the microseconds
# some task has waited for a core (/proc/pressure/cpu; empty without PSI); for who used the
# cores during each read and how much they queued for them.
proc_ticks() {
  if [[ -n "$1" && -r "/proc/$1/stat" ]]; then
    sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'
  else
    echo 0
  fi
}
cpu_ticks() {
  printf '%s,%s,%s,%s,%s\n' "$(awk '$1 == "cpu" {print $2 + $3 + $4 + $7 + $8 + $9}' /proc/stat)" \
    "$(proc_ticks "$BROKER_PID")" "$(proc_ticks "$MOTO_PID")" "$(date +%s.%N)" \
    "$(sed -n 's/^some .*total=//p' /proc/pressure/cpu 2>/dev/null)"
}

start_broker
record tiered_topic "$TIERED_TOPIC"
record cache_memory_bytes "$(setting strata.remote.cache.memory.bytes 268435456)"
record cache_disk_bytes "$(setting strata.remote.cache.disk.bytes 1073741824)"

# ------------------------------------------------------------------ produce
COMMON_TOPIC_CONFIG=(segment.bytes="$SEGMENT_BYTES" retention.ms=-1 retention.bytes=-1)
"${HELPER[@]}" create-topic "$BOOTSTRAP" "$LOCAL_TOPIC" "$PARTITIONS" "${COMMON_TOPIC_CONFIG[@]}"
"${HELPER[@]}" create-topic "$BOOTSTRAP" "$TIERED_TOPIC" "$PARTITIONS" "${COMMON_TOPIC_CONFIG[@]}" \
  remote.storage.enable=false local.retention.bytes=0 local.retention.ms=-2
echo
echo "=== produce $RECORDS x ${RECORD_SIZE}B to $LOCAL_TOPIC and $TIERED_TOPIC ==="
produce "$LOCAL_TOPIC"
produce "$TIERED_TOPIC"

# ------------------------------------------------------------------ upload
read -r SEALED SEALED_BYTES ACTIVE_BYTES < <("${HELPER[@]}" segments "$WORK/data" "$TIERED_TOPIC" "$PARTITIONS")
record tiered_segment_bytes "$((SEALED_BYTES + ACTIVE_BYTES))"
echo
echo "=== upload: $SEALED sealed segments ($((SEALED_BYTES >> 20)) MiB; active: $((ACTIVE_BYTES >> 20)) MiB, not uploaded) ==="
((SEALED > 0)) || strata_die "no sealed segment: produce more than BENCH_SEGMENT_BYTES per partition"
snapshot upload-start
"${HELPER[@]}" alter-topic "$BOOTSTRAP" "$TIERED_TOPIC" remote.storage.enable=true
UPLOAD_SECONDS="$("${HELPER[@]}" wait-upload "$METRICS_URL" "$TIERED_TOPIC" "$SEALED" "$ACTIVE_BYTES" "$UPLOAD_TIMEOUT" \
  "$WORK/metrics-upload-start.prom")" \
  || strata_die "uploads did not finish (see $WORK/strata.log)"
snapshot upload-end
record upload_seconds "$UPLOAD_SECONDS"
echo "uploaded in ${UPLOAD_SECONDS}s"

# ------------------------------------------------------------------ local read
echo
echo "=== consume $LOCAL_TOPIC (local disk) ==="
record cpu_local_start "$(cpu_ticks)"
consume local "$LOCAL_TOPIC"
record cpu_local_end "$(cpu_ticks)"

# ------------------------------------------------------------------ remote reads
# Restarts the broker with an empty cache dir and waits until the tiered topic has no local
# bytes left (shutdown uploaded the active segment; local retention may still be deleting
# local copies). Sets LEFT_ALL.
restart_with_empty_cache() {
  echo
  echo "=== restart with an empty cache dir ==="
  stop_broker
  rm -rf "$WORK/cache"
  mkdir -p "$WORK/cache"
  start_broker
  for ((i = 0; i < 300; i++)); do
    LEFT_ALL="$(find "$WORK/data" -path "*/$TIERED_TOPIC-*" -name '*.log' -printf '%s\n' | awk '{s += $1} END {print s + 0}')"
    ((LEFT_ALL == 0)) && break
    sleep 0.2
  done
}
restart_with_empty_cache
echo "local bytes of $TIERED_TOPIC left: $LEFT_ALL (0 = every record is read from remote storage)"
record tiered_local_bytes_at_cold_read "$LEFT_ALL"
record rss_anon_before_kib "$(status_kib RssAnon)"

sample_rss "$WORK/rss.samples" &
SAMPLER_PID=$!
echo
echo "=== consume $TIERED_TOPIC (remote, cold cache) ==="
snapshot cold-start
record write_bytes_cold_start "$(write_bytes)"
record cpu_cold_start "$(cpu_ticks)"
consume cold "$TIERED_TOPIC"
record cpu_cold_end "$(cpu_ticks)"
snapshot cold-end
record write_bytes_cold_end "$(write_bytes)"
echo
echo "=== consume $TIERED_TOPIC (remote, warm cache) ==="
snapshot warm-start
record cpu_warm_start "$(cpu_ticks)"
consume warm "$TIERED_TOPIC"
record cpu_warm_end "$(cpu_ticks)"
snapshot warm-end
record write_bytes_warm_end "$(write_bytes)"
kill "$SAMPLER_PID" 2>/dev/null || true
wait "$SAMPLER_PID" 2>/dev/null || true
SAMPLER_PID=""
record rss_peak_kib "$(awk '$1 > m {m = $1} END {print m + 0}' "$WORK/rss.samples")"
record rss_anon_peak_kib "$(awk '$2 > m {m = $2} END {print m + 0}' "$WORK/rss.samples")"
record vm_hwm_kib "$(status_kib VmHWM)"

# ------------------------------------------------------------------ further rounds
for ((round = 2; round <= ROUNDS; round++)); do
  echo
  echo "=== round $round of $ROUNDS: consume $LOCAL_TOPIC, then $TIERED_TOPIC cold and warm ==="
  consume "local-$round" "$LOCAL_TOPIC"
  restart_with_empty_cache
  consume "cold-$round" "$TIERED_TOPIC"
  consume "warm-$round" "$TIERED_TOPIC"
done
record rounds "$ROUNDS"

# ------------------------------------------------------------------ rehydration
echo
echo "=== rehydrate $TIERED_TOPIC (local.retention.bytes=-1, strata.remote.rehydrate.enable) ==="
snapshot rehydrate-start
"${HELPER[@]}" alter-topic "$BOOTSTRAP" "$TIERED_TOPIC" local.retention.bytes=-1 \
  strata.remote.rehydrate.enable=true
REHYDRATE_SECONDS="$("${HELPER[@]}" wait-rehydrated "$WORK/data" "$TIERED_TOPIC" "$PARTITIONS" \
  "$((SEALED_BYTES + ACTIVE_BYTES))" "$UPLOAD_TIMEOUT")" \
  || strata_die "rehydration did not finish (see $WORK/strata.log)"
snapshot rehydrate-end
record rehydrate_seconds "$REHYDRATE_SECONDS"
echo "rehydrated in ${REHYDRATE_SECONDS}s"
echo
echo "=== consume $TIERED_TOPIC (rehydrated to local disk) ==="
snapshot rehydrated-start
consume rehydrated "$TIERED_TOPIC"
snapshot rehydrated-end
stop_broker

echo
echo "Results (store=$STORE, $RECORDS x ${RECORD_SIZE}B records, $PARTITIONS partition(s)," \
     "segment.bytes=$SEGMENT_BYTES, chunk=$(setting strata.remote.chunk.bytes 4194304)," \
     "readahead=$(setting strata.remote.readahead.chunks 8) chunks; raw: $WORK)"
"${HELPER[@]}" table "$WORK"
