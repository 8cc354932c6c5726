#!/usr/bin/env bash
# Replicated produce and leadership recovery: a 3-broker Strata cluster against a
# 3-broker reference Apache Kafka cluster (KRaft, every node broker+controller, a static
# 3-voter quorum), on 127.0.0.1, with the same settings and the same tools. Per target:
#   1. start the three brokers, each with an empty data dir
#   2. create a topic with BENCH_PARTITIONS partitions, replication factor 3,
#      min.insync.replicas=2 (Java admin client)
#   3. a warm-up ProducerPerformance run (BENCH_WARMUP_RECORDS to a topic of its own), then
#      ProducerPerformance, acks=all (idempotence on, the default): BENCH_RECORDS records of
#      BENCH_RECORD_SIZE bytes at BENCH_THROUGHPUT (default unthrottled),
#      compression.type=BENCH_COMPRESSION, bootstrapped with all three brokers; then
#      ConsumerPerformance reads them back
#   4. peak RSS (VmHWM) of the three broker processes and their CPU seconds during step
#      3 after the warm-up, summed
#   5. on a 9-partition RF=3 topic, BENCH_FAILOVER_CYCLES times each (benches/failover_probe.py):
#      kill -9 the leader of a partition that the metadata quorum leader does not lead, then
#      of one that it leads (the kill also costs a quorum election), with an idempotent acks=all
#      producer on that partition; time from the kill until a record produced after it is
#      acknowledged, and until Metadata names a new leader; then restart the killed broker and
#      wait until it is back in every ISR. The quorum leader is read from the brokers' logs.
#   6. stop the brokers (also on failure or Ctrl-C)
# and prints the throughput/latency table with the Strata/Kafka ratios, then the recovery
# times per cycle and their medians.
#
#   benches/cluster.sh
#   BENCH_RECORDS=200000 BENCH_FAILOVER_CYCLES=1 benches/cluster.sh   # shorter run
#
# Environment:
#   STRATA_BIN              Strata binary (default target/release/strata); if missing, only
#                           Kafka runs
#   BENCH_TARGETS           default "strata kafka"
#   BENCH_RECORDS           records per producer run (default 500000)
#   BENCH_RECORD_SIZE       bytes per record (default 1024)
#   BENCH_PARTITIONS        partitions of the throughput topic (default 6)
#   BENCH_COMPRESSION       default lz4
#   BENCH_THROUGHPUT        ProducerPerformance --throughput in records/s (default -1:
#                           unthrottled, so latency is mostly time in the producer's buffer;
#                           a rate both clusters sustain measures the brokers' latency)
#   BENCH_PRODUCER_PROPS    extra producer properties, space-separated k=v (both targets)
#   BENCH_WARMUP_RECORDS    records of the warm-up run (default 100000; 0: none)
#   BENCH_IDLE_SECONDS      the cost of a quiet cluster, measured before the warm-up (default
#                           60; 0: not measured): on a topic of BENCH_IDLE_PARTITIONS
#                           partitions (default 30), RF=3, the three brokers' CPU seconds
#                           over BENCH_IDLE_SECONDS with no client, after 10 s of quiet; then
#                           over BENCH_IDLE_SECONDS of ProducerPerformance at BENCH_LOW_RATE
#                           records/s (default 5000; 0: skipped), acks=all, to that topic.
#                           Printed as CPU-s per minute, summed over the brokers (cost.tsv)
#   BENCH_FAILOVER_CYCLES   kill -9 cycles per target and kind of victim (default 3; 0: none)
#   BENCH_CLUSTER_EXTRA     extra server properties for every broker of both targets
#                           (newline-separated k=v), e.g. broker.session.timeout.ms=3000
#   BENCH_STRATA_EXTRA      extra lines for Strata's server.properties only
#   BENCH_KAFKA_HEAP        heap of each Kafka broker (default "-Xmx1g -Xms1g")
#   BENCH_DIR               work dir (default: a new /tmp/strata-cluster-bench.XXXXXX);
#                           results.tsv, failover.tsv, logs and the tools' output stay there
#   BENCH_KEEP_DATA=1       keep broker data dirs (default: deleted after each target)
#   BENCH_START_TIMEOUT     seconds to wait for a cluster to become ready (default 120)
#   BENCH_TOOL_HEAP         heap of the perf tool JVMs (default -Xmx512m)
#   BENCH_CLIENT            java (default: Kafka's perf tools) or loadgen: strata-loadgen
#                           (loadgen/) runs the warm-up and the measured produce (acks=-1,
#                           non-idempotent, each partition to its leader) and consume, so the
#                           brokers are what the figures measure; rows then give the brokers'
#                           CPU-s per GiB of produce and of consume (summed over the three), and
#                           the machine's floor measured in the same run (see compare.sh).
#                           BENCH_LOADGEN_CONNECTIONS (2 per leader), BENCH_LOADGEN_INFLIGHT (5)
#                           and BENCH_LOADGEN_BATCH_BYTES (16384) tune it. Not with
#                           BENCH_THROUGHPUT (the generator does not throttle); the low-rate
#                           cost still uses ProducerPerformance
set -euo pipefail
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/common.sh"
# shellcheck source=benches/perf_tools.sh
source "$(dirname "${BASH_SOURCE[0]}")/perf_tools.sh"
ROOT="$STRATA_REPO_ROOT"

case "${1:-}" in
  "") ;;
  -h|--help) sed -n '2,66p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0   (configured through environment variables; see $0 --help)" >&2; exit 2 ;;
esac

RECORDS="${BENCH_RECORDS:-500000}"
RECORD_SIZE="${BENCH_RECORD_SIZE:-1024}"
PARTITIONS="${BENCH_PARTITIONS:-6}"
COMPRESSION="${BENCH_COMPRESSION:-lz4}"
THROUGHPUT="${BENCH_THROUGHPUT:--1}"
TARGETS="${BENCH_TARGETS:-strata kafka}"
CYCLES="${BENCH_FAILOVER_CYCLES:-3}"
WARMUP="${BENCH_WARMUP_RECORDS:-100000}"
IDLE_SECONDS="${BENCH_IDLE_SECONDS:-60}"
IDLE_PARTITIONS="${BENCH_IDLE_PARTITIONS:-30}"
LOW_RATE="${BENCH_LOW_RATE:-5000}"
START_TIMEOUT="${BENCH_START_TIMEOUT:-120}"
KAFKA_HEAP="${BENCH_KAFKA_HEAP:--Xmx1g -Xms1g}"
STRATA_BIN="${STRATA_BIN:-$ROOT/target/release/strata}"
[[ "$STRATA_BIN" == /* ]] || STRATA_BIN="$ROOT/$STRATA_BIN"
PYTHON="$STRATA_VENV/bin/python"
NODES=(1 2 3)
for v in RECORDS RECORD_SIZE PARTITIONS CYCLES WARMUP START_TIMEOUT IDLE_SECONDS IDLE_PARTITIONS LOW_RATE; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || strata_die "$v must be a non-negative integer, got '${!v}'"
done
[[ "$THROUGHPUT" =~ ^(-1|[0-9]+)$ ]] || strata_die "BENCH_THROUGHPUT must be -1 or a number, got '$THROUGHPUT'"
CLIENT="${BENCH_CLIENT:-java}"
[[ $CLIENT == java || $CLIENT == loadgen ]] || strata_die "BENCH_CLIENT must be java or loadgen, got '$CLIENT'"
[[ $CLIENT == java || $THROUGHPUT == -1 ]] || strata_die "BENCH_THROUGHPUT needs BENCH_CLIENT=java (strata-loadgen does not throttle)"
[[ -x "$PYTHON" ]] || strata_die "no Python venv at $STRATA_VENV; run scripts/install-test-deps.sh"

if [[ -n "${BENCH_DIR:-}" ]]; then
  WORK="$BENCH_DIR"
  mkdir -p "$WORK"
else
  WORK="$(mktemp -d /tmp/strata-cluster-bench.XXXXXX)"
fi
WORK="$(cd "$WORK" && pwd)"
RESULTS="$WORK/results.tsv"
LOADGEN_RESULTS="$WORK/loadgen.tsv"
FAILOVER="$WORK/failover.tsv"
COST="$WORK/cost.tsv"

# ------------------------------------------------------------------ the cluster
# The cluster being run: its kind, dir, and per node id its pid, Kafka port and controller
# (metadata RPC) port.
CUR_KIND="" CUR_DIR=""
declare -A PID=() PORT=() CPORT=()

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "$TOOL_PID" ]]; then strata_stop_pid "$TOOL_PID" 5 || true; fi
  stop_cluster || true
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bootstrap() {
  local id out=""
  for id in "${NODES[@]}"; do out+="${out:+,}127.0.0.1:${PORT[$id]}"; done
  echo "$out"
}

# id=value,... of an associative array (the failover probe's --pids / --addrs).
node_list() {
  local -n arr="$1"
  local id out=""
  for id in "${NODES[@]}"; do out+="${out:+,}$id=${2:-}${arr[$id]}"; done
  echo "$out"
}

voters() {
  local id out=""
  for id in "${NODES[@]}"; do out+="${out:+,}$id@127.0.0.1:${CPORT[$id]}"; done
  echo "$out"
}

assign_ports() {
  local id
  for id in "${NODES[@]}"; do
    PORT[$id]="$(strata_free_port)"
    CPORT[$id]="$(strata_free_port)"
  done
}

# Strata: node-<id>/server.properties, data/, strata.log; ready once /health answers 200 (it
# has joined the quorum and synced the metadata).
strata_config() {
  local id="$1" dir="$CUR_DIR/node-$1"
  mkdir -p "$dir/data"
  cat >"$dir/server.properties" <<EOF
# generated by benches/cluster.sh
process.roles=broker,controller
node.id=$id
listeners=PLAINTEXT://127.0.0.1:${PORT[$id]},CONTROLLER://127.0.0.1:${CPORT[$id]}
advertised.listeners=PLAINTEXT://127.0.0.1:${PORT[$id]}
controller.listener.names=CONTROLLER
controller.quorum.voters=$(voters)
strata.admin.listener=127.0.0.1:$(strata_free_port)
log.dirs=$dir/data
num.partitions=$PARTITIONS
default.replication.factor=3
min.insync.replicas=2
# The reference brokers run with the same setting (scripts/kafka-ref.sh).
group.initial.rebalance.delay.ms=0
EOF
  if [[ -n "${BENCH_CLUSTER_EXTRA:-}" ]]; then printf '%s\n' "$BENCH_CLUSTER_EXTRA" >>"$dir/server.properties"; fi
  if [[ -n "${BENCH_STRATA_EXTRA:-}" ]]; then printf '%s\n' "$BENCH_STRATA_EXTRA" >>"$dir/server.properties"; fi
}

strata_launch() {
  local id="$1" dir="$CUR_DIR/node-$1"
  "$STRATA_BIN" serve --config "$dir/server.properties" >>"$dir/strata.log" 2>&1 </dev/null &
  PID[$id]=$!
}

strata_wait_ready() {
  local id="$1" dir="$CUR_DIR/node-$1" start=$SECONDS admin code
  admin="$(sed -n 's/^strata.admin.listener=//p' "$dir/server.properties")"
  while :; do
    if ! strata_alive "${PID[$id]}"; then
      tail -n 40 "$dir/strata.log" >&2 || true
      strata_log "Strata node $id exited during startup (log: $dir/strata.log)"
      return 1
    fi
    code="$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://$admin/health" || true)"
    [[ "$code" == 200 ]] && return 0
    if ((SECONDS - start >= START_TIMEOUT)); then
      tail -n 40 "$dir/strata.log" >&2 || true
      strata_log "Strata node $id not healthy after ${START_TIMEOUT}s (last /health: ${code:-none})"
      return 1
    fi
    sleep 0.2
  done
}

# Kafka: scripts/kafka-ref.sh per node (node-<id>/server.properties, data/, logs/). The
# nodes start concurrently: each waits for a quorum.
kafka_start_node() {
  local id="$1"
  KAFKA_REF_NODE_ID="$id" KAFKA_REF_VOTERS="$(voters)" KAFKA_REF_CLUSTER_ID="$KAFKA_CLUSTER_ID" \
    KAFKA_REF_CONTROLLER_PORT="${CPORT[$id]}" KAFKA_REF_HEAP_OPTS="$KAFKA_HEAP" \
    KAFKA_REF_TIMEOUT="$START_TIMEOUT" KAFKA_REF_EXTRA="num.partitions=$PARTITIONS
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2${BENCH_CLUSTER_EXTRA:+
$BENCH_CLUSTER_EXTRA}" \
    "$ROOT/scripts/kafka-ref.sh" start "${PORT[$id]}" "$CUR_DIR/node-$id" || return 1
  PID[$id]="$(cat "$CUR_DIR/node-$id/kafka.pid")"
}

start_cluster() {
  local kind="$1" id rc=0
  CUR_KIND="$kind" CUR_DIR="$WORK/$kind"
  rm -rf "$CUR_DIR"
  mkdir -p "$CUR_DIR"
  PID=()
  assign_ports
  case "$kind" in
    strata)
      for id in "${NODES[@]}"; do strata_config "$id"; done
      strata_log "starting 3 Strata brokers (voters $(voters)), dir $CUR_DIR"
      for id in "${NODES[@]}"; do strata_launch "$id"; done
      for id in "${NODES[@]}"; do strata_wait_ready "$id" || return 1; done ;;
    kafka)
      KAFKA_CLUSTER_ID="$(python3 -c 'import base64,uuid; print(base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))')"
      local -A job=()
      for id in "${NODES[@]}"; do
        kafka_start_node "$id" >"$CUR_DIR/start-$id.log" 2>&1 &
        job[$id]=$!
      done
      for id in "${NODES[@]}"; do
        if ! wait "${job[$id]}"; then
          cat "$CUR_DIR/start-$id.log" >&2
          rc=1
        fi
        # The pid file is written by kafka-ref.sh, in the subshell: read it here.
        PID[$id]="$(cat "$CUR_DIR/node-$id/kafka.pid" 2>/dev/null || true)"
      done
      return "$rc" ;;
  esac
  strata_log "$kind cluster ready: $(bootstrap) (pids $(node_list PID))"
}

restart_node() {
  local id="$1"
  case "$CUR_KIND" in
    strata) strata_launch "$id" && strata_wait_ready "$id" ;;
    kafka) kafka_start_node "$id" >>"$CUR_DIR/start-$id.log" 2>&1 ;;
  esac
}

# SIGTERM to all three at once (then SIGKILL after 30 s); a broker stopping alone would wait
# for a quorum that is gone.
stop_cluster() {
  [[ -n "$CUR_KIND" ]] || return 0
  local id
  strata_log "stopping the $CUR_KIND cluster"
  for id in "${NODES[@]}"; do
    if [[ -n "${PID[$id]:-}" ]]; then strata_stop_pid "${PID[$id]}" 30 & fi
  done
  wait
  if [[ $CUR_KIND == kafka ]]; then
    for id in "${NODES[@]}"; do rm -f "$CUR_DIR/node-$id/kafka.pid"; done
  fi
  if [[ "${BENCH_KEEP_DATA:-0}" != 1 ]]; then
    for id in "${NODES[@]}"; do rm -rf "$CUR_DIR/node-$id/data"; done
  fi
  CUR_KIND="" PID=()
}

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

echo "cluster bench: 3 brokers per target, RF=3, min.insync.replicas=2, acks=all;" \
     "records=$RECORDS size=${RECORD_SIZE}B partitions=$PARTITIONS compression=$COMPRESSION" \
     "throughput=$THROUGHPUT" \
     "failover cycles=$CYCLES kafka=$KAFKA_VERSION targets=[$TARGETS] work=$WORK"
printf 'target\tacks\tprod_rps\tprod_mbps\tp50\tp99\tp999\tavg\tmax\tcons_mbps\tcons_rps\trss_mib\tcpu_s\tstatus\n' >"$RESULTS"
printf 'target\tidle_cpu_s_per_min\tlow_rate_cpu_s_per_min\tlow_rate_rps\tlow_rate_p99_ms\tstatus\n' >"$COST"
printf 'target\tkind\tcycle\tpartition\tvictim\tquorum_leader\tnew_leader\tack_s\tmetadata_s\tdelivery_errors\tstatus\n' >"$FAILOVER"

create_topic() {
  local topic="$1" partitions="$2"
  run_tool "$CUR_DIR/create-$topic.out" "${JAVA_TOOL[@]}" -cp "$INTEROP_CP" \
    io.strata.interop.InteropClient admin-create --bootstrap "$(bootstrap)" --topic "$topic" \
    --partitions "$partitions" --replication-factor 3 --topic-config min.insync.replicas=2 \
    || { cat "$CUR_DIR/create-$topic.out" >&2; return 1; }
}

# node.id of the metadata quorum leader (the active controller). Strata's Metadata and
# DescribeCluster name it (and DescribeQuorum describes the quorum); Kafka's brokers report a
# random live broker there, so for Kafka it comes from the brokers' own logs: of the nodes
# whose latest Raft role change made them leader, the latest.
quorum_leader() {
  local id
  if [[ "$CUR_KIND" == strata ]]; then
    "$PYTHON" -c 'import sys; from confluent_kafka.admin import AdminClient
a = AdminClient({"bootstrap.servers": sys.argv[1]})
r = a.describe_cluster().result()
print(r.controller.id if r.controller else "")' "$(bootstrap)" 2>/dev/null
    return
  fi
  for id in "${NODES[@]}"; do
    case "$CUR_KIND" in
      kafka)
        grep -a 'Completed transition to ' "$CUR_DIR/node-$id/logs/server.log" | tail -n 1 \
          | awk -v id="$id" '/Completed transition to Leader\(/ { print $1, $2, id }' ;;
    esac
  done | sort | tail -n 1 | awk '{ print $NF }'
}

# One kill -9 cycle: kill the leader of a partition of the failover topic (led by the quorum
# leader or by another broker, as $2 says), record the times, restart the broker and wait
# until it is back in every ISR.
failover_cycle() {
  local target="$1" victim_kind="$2" cycle="$3" topic="$4" out quorum rc=0 json victim
  out="$CUR_DIR/failover-$victim_kind-$cycle"
  quorum="$(quorum_leader)"
  if [[ -z "$quorum" ]]; then
    strata_log "cannot tell the metadata quorum leader from the logs"
    printf '%s\t%s\t%s\t-\t-\t-\t-\t-\t-\t-\tno-quorum-leader\n' "$target" "$victim_kind" "$cycle" >>"$FAILOVER"
    return 1
  fi
  echo "--- $target: kill -9 a $victim_kind (cycle $cycle; quorum leader: node $quorum)"
  run_tool "$out.out" "$PYTHON" "$ROOT/benches/failover_probe.py" kill \
      --bootstrap "$(bootstrap)" --topic "$topic" --pids "$(node_list PID)" \
      --addrs "$(node_list PORT 127.0.0.1:)" --quorum-leader "$quorum" --victim "$victim_kind" \
      --timeout 90 || rc=$?
  json="$(grep '^{' "$out.out" | tail -n 1 || true)"
  if [[ -z "$json" ]]; then
    tail -n 20 "$out.out" >&2
    printf '%s\t%s\t%s\t-\t-\t%s\t-\t-\t-\t-\tprobe-failed\n' "$target" "$victim_kind" "$cycle" "$quorum" >>"$FAILOVER"
    return 1
  fi
  echo "$json"
  if ((rc == 3)); then
    printf '%s\t%s\t%s\t-\t-\t%s\t-\t-\t-\t-\tskipped\n' "$target" "$victim_kind" "$cycle" "$quorum" >>"$FAILOVER"
    return 0
  fi
  python3 - "$target" "$victim_kind" "$cycle" "$json" >>"$FAILOVER" <<'EOF'
import json, sys
t, kind, c, r = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
ok = r["ack_s"] is not None and r["metadata_s"] is not None and r["delivery_errors"] == 0
status = "ok" if ok else ("delivery-errors" if r["delivery_errors"] else "no-recovery")
cells = [t, kind, c] + ["-" if r[k] is None else str(r[k]) for k in (
    "partition", "victim", "quorum_leader", "new_leader", "ack_s", "metadata_s", "delivery_errors")]
print("\t".join(cells + [status]))
EOF
  victim="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["victim"])' "$json")"
  wait "${PID[$victim]}" 2>/dev/null || true
  strata_log "restarting node $victim"
  restart_node "$victim" || { strata_log "node $victim did not restart"; return 1; }
  run_tool "$out.isr" "$PYTHON" "$ROOT/benches/failover_probe.py" wait-isr \
    --bootstrap "$(bootstrap)" --topic "$topic" --replicas 3 --timeout 120 \
    || { cat "$out.isr" >&2; strata_log "node $victim did not rejoin the ISR"; return 1; }
}

run_failover() {
  local target="$1" topic="failover" kind cycle
  # Three partitions per broker, so that after restarts (a restarted broker leads nothing until
  # a preferred leader election) each broker still leads some.
  if ! create_topic "$topic" 9; then
    printf '%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\tcreate-topic-failed\n' "$target" >>"$FAILOVER"
    return 1
  fi
  for kind in partition-leader quorum-leader; do
    for ((cycle = 1; cycle <= CYCLES; cycle++)); do
      failover_cycle "$target" "$kind" "$cycle" "$topic" || return 1
    done
  done
}

# The summed CPU seconds of the three brokers so far ("-" if one is gone).
cluster_cpu() {
  local st
  read -r -a st <<<"$(proc_stats "${PID[@]}")"
  echo "${st[1]}"
}

# CPU-s per minute from two cluster_cpu readings over $3 seconds.
per_minute() {
  awk -v a="$1" -v b="$2" -v s="$3" 'BEGIN { if (a == "-" || b == "-") print "-"; else printf "%.2f", (b - a) * 60 / s }'
}

# The cost of a quiet cluster and of a low produce rate (cost.tsv).
run_cost() {
  local target="$1" topic="bench-idle" status=ok idle="-" low="-" rps="-" p99="-" c0 c1 p records
  if ! create_topic "$topic" "$IDLE_PARTITIONS"; then
    printf '%s\t-\t-\t-\t-\tcreate-topic-failed\n' "$target" >>"$COST"
    return 1
  fi
  sleep 10
  c0="$(cluster_cpu)"
  sleep "$IDLE_SECONDS"
  c1="$(cluster_cpu)"
  idle="$(per_minute "$c0" "$c1" "$IDLE_SECONDS")"
  echo "idle, $IDLE_PARTITIONS partitions RF=3: $idle broker CPU-s per minute (3 brokers summed)"
  if ((LOW_RATE > 0)); then
    records=$((LOW_RATE * IDLE_SECONDS))
    c0="$(cluster_cpu)"
    if run_tool "$CUR_DIR/low-rate.out" "${JAVA_TOOL[@]}" -cp "$TOOLS_CP" org.apache.kafka.tools.ProducerPerformance \
        --bootstrap-server "$(bootstrap)" --topic "$topic" --num-records "$records" \
        --record-size "$RECORD_SIZE" --throughput "$LOW_RATE" \
        "$PROPS_OPT" acks=all compression.type="$COMPRESSION"; then
      c1="$(cluster_cpu)"
      read -r -a p <<<"$(python3 "$ROOT/benches/perf_report.py" producer "$CUR_DIR/low-rate.out")"
      rps="${p[0]:--}" p99="${p[3]:--}"
      # Per minute of the producer's own run time (records / rate).
      low="$(awk -v a="$c0" -v b="$c1" -v n="$records" -v r="${p[0]:-0}" 'BEGIN { if (a == "-" || b == "-" || r <= 0) print "-"; else printf "%.2f", (b - a) * 60 / (n / r) }')"
      echo "at $LOW_RATE records/s: $low broker CPU-s per minute (3 brokers summed), p99 ${p99} ms"
    else
      tail -n 20 "$CUR_DIR/low-rate.out" >&2
      status="low-rate-producer-failed"
    fi
  fi
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$target" "$idle" "$low" "$rps" "$p99" "$status" >>"$COST"
}

# The warm-up and the measured produce and consume with strata-loadgen (a loadgen.tsv row).
# Sets status.
run_loadgen() {
  local target="$1" topic="$2" prod="" cons="" c0 c1 c2 stats="- -"
  local common=(--bootstrap "$(bootstrap)" --partitions "$PARTITIONS"
    --connections "${BENCH_LOADGEN_CONNECTIONS:-2}")
  local produce=(--record-size "$RECORD_SIZE" --acks -1 --compression "$COMPRESSION"
    --inflight "${BENCH_LOADGEN_INFLIGHT:-5}" --batch-bytes "${BENCH_LOADGEN_BATCH_BYTES:-16384}")
  if [[ $status == ok && $WARMUP -gt 0 ]]; then
    if create_topic "$topic-warmup" "$PARTITIONS" && run_tool "$CUR_DIR/warmup.out" "$LOADGEN" \
        produce "${common[@]}" --topic "$topic-warmup" --records "$WARMUP" "${produce[@]}"; then
      echo "warm-up: $(cat "$CUR_DIR/warmup.out")"
    else
      tail -n 20 "$CUR_DIR/warmup.out" >&2 || true
      status="warmup-failed"
    fi
  fi
  if [[ $status == ok ]]; then
    c0="$(cluster_cpu)"
    if run_tool "$CUR_DIR/producer.out" "$LOADGEN" produce "${common[@]}" --topic "$topic" \
        --records "$RECORDS" "${produce[@]}"; then
      prod="$(cat "$CUR_DIR/producer.out")"; echo "$prod"
    else
      cat "$CUR_DIR/producer.out" >&2; status="producer-failed"
    fi
    c1="$(cluster_cpu)"
  fi
  if [[ $status == ok ]]; then
    if run_tool "$CUR_DIR/consumer.out" "$LOADGEN" consume "${common[@]}" --topic "$topic" \
        --records "$RECORDS"; then
      cons="$(cat "$CUR_DIR/consumer.out")"; echo "$cons"
    else
      cat "$CUR_DIR/consumer.out" >&2; status="consumer-failed"
    fi
    c2="$(cluster_cpu)"
  fi
  if [[ $status != start-failed ]]; then
    stats="$(proc_stats "${PID[@]}")"
    [[ $stats != "- -" || $status != ok ]] || status="broker-died"
  fi
  echo "3 brokers: peak RSS MiB / CPU s (summed): ${stats}   status: $status"
  python3 "$ROOT/benches/loadgen_report.py" row "$target" all "$status" "${c0:-0}" "${c1:-0}" \
    "${c2:-0}" "${stats%% *}" "$prod" "$cons" >>"$LOADGEN_RESULTS"
}

run_target() {
  local target="$1" topic="bench-rf3"
  local status=ok prod="- - - - - - - -" cons="- - -" stats="- -" p c s
  echo
  echo "=== $target: 3 brokers, acks=all ==="
  start_cluster "$target" || status="start-failed"
  if [[ $status == ok ]] && ! create_topic "$topic" "$PARTITIONS"; then status="create-topic-failed"; fi
  if [[ $status == ok && $IDLE_SECONDS -gt 0 ]]; then
    run_cost "$target" || strata_log "$target: the idle cost was not measured"
  fi

  if [[ $CLIENT == loadgen ]]; then
    run_loadgen "$target" "$topic"
    if [[ $status != start-failed && $CYCLES -gt 0 ]]; then
      run_failover "$target" || strata_log "$target: failover cycles stopped early"
    fi
    stop_cluster
    return
  fi
  # Warm-up (JIT of the Kafka brokers, connections, first segments) on a topic of its own,
  # then the CPU time so far, so that the CPU column covers the measured runs only.
  local cpu_before=0 w
  if [[ $status == ok && $WARMUP -gt 0 ]]; then
    if create_topic "$topic-warmup" "$PARTITIONS" && run_tool "$CUR_DIR/warmup.out" \
        "${JAVA_TOOL[@]}" -cp "$TOOLS_CP" org.apache.kafka.tools.ProducerPerformance \
        --bootstrap-server "$(bootstrap)" --topic "$topic-warmup" --num-records "$WARMUP" \
        --record-size "$RECORD_SIZE" --throughput -1 \
        "$PROPS_OPT" acks=all compression.type="$COMPRESSION"; then
      echo "warm-up: $(grep 'records sent' "$CUR_DIR/warmup.out" | tail -n 1)"
    else
      tail -n 20 "$CUR_DIR/warmup.out" >&2 || true
      status="warmup-failed"
    fi
  fi
  if [[ $status == ok ]]; then
    read -r -a w <<<"$(proc_stats "${PID[@]}")"
    cpu_before="${w[1]}"
  fi

  if [[ $status == ok ]]; then
    # shellcheck disable=SC2086
    if run_tool "$CUR_DIR/producer.out" "${JAVA_TOOL[@]}" -cp "$TOOLS_CP" org.apache.kafka.tools.ProducerPerformance \
        --bootstrap-server "$(bootstrap)" --topic "$topic" --num-records "$RECORDS" \
        --record-size "$RECORD_SIZE" --throughput "$THROUGHPUT" \
        "$PROPS_OPT" acks=all compression.type="$COMPRESSION" ${BENCH_PRODUCER_PROPS:-}; then
      grep 'records sent' "$CUR_DIR/producer.out" | tail -n 1 || true
      prod="$(python3 "$ROOT/benches/perf_report.py" producer "$CUR_DIR/producer.out")" || { status="producer-failed"; prod="- - - - - - - -"; }
      read -r -a p <<<"$prod"
      [[ $status != ok || "${p[7]}" == "$RECORDS" ]] || status="producer-acked-${p[7]}-of-$RECORDS"
    else
      tail -n 20 "$CUR_DIR/producer.out" >&2
      status="producer-failed"
    fi
  fi

  if [[ $status == ok ]]; then
    if run_tool "$CUR_DIR/consumer.out" "${JAVA_TOOL[@]}" -cp "$TOOLS_CP" org.apache.kafka.tools.ConsumerPerformance \
        --bootstrap-server "$(bootstrap)" --topic "$topic" "$NUM_OPT" "$RECORDS" --timeout 30000 \
        --group bench-consumer; then
      grep -A1 'MB.sec' "$CUR_DIR/consumer.out" | tail -n 1 || true
      cons="$(python3 "$ROOT/benches/perf_report.py" consumer "$CUR_DIR/consumer.out")" || { status="consumer-failed"; cons="- - -"; }
      read -r -a c <<<"$cons"
      [[ $status != ok || "${c[2]}" == "$RECORDS" ]] || status="consumer-read-${c[2]}-of-$RECORDS"
    else
      tail -n 20 "$CUR_DIR/consumer.out" >&2
      status="consumer-failed"
    fi
  fi

  if [[ $status != start-failed ]]; then
    stats="$(proc_stats "${PID[@]}")"
    [[ $stats != "- -" || $status != ok ]] || status="broker-died"
    if [[ $stats != "- -" && $cpu_before != "-" ]]; then
      read -r -a s <<<"$stats"
      stats="${s[0]} $(awk -v a="${s[1]}" -v b="$cpu_before" 'BEGIN { printf "%.1f", a - b }')"
    fi
  fi
  read -r -a p <<<"$prod"
  read -r -a c <<<"$cons"
  read -r -a s <<<"$stats"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$target" all \
    "${p[0]}" "${p[1]}" "${p[2]}" "${p[3]}" "${p[4]}" "${p[5]}" "${p[6]}" \
    "${c[0]}" "${c[1]}" "${s[0]}" "${s[1]}" "$status" >>"$RESULTS"
  echo "3 brokers: peak RSS MiB / CPU s of the measured runs (summed): ${stats}   status: $status"

  if [[ $status != start-failed && $CYCLES -gt 0 ]]; then
    run_failover "$target" || strata_log "$target: failover cycles stopped early"
  fi
  stop_cluster
}

if [[ $CLIENT == loadgen ]]; then
  loadgen_setup
  python3 "$ROOT/benches/loadgen_report.py" header >"$LOADGEN_RESULTS"
  measure_floor "$((RECORDS * RECORD_SIZE))" "$WORK/floor.bin"
  echo "floor (best of 3): $FLOOR"
fi
for target in $TARGETS; do
  case "$target" in
    strata) [[ $STRATA_OK == 1 ]] || continue ;;
    kafka) ;;
    *) strata_die "unknown target '$target' in BENCH_TARGETS" ;;
  esac
  run_target "$target"
done

echo
if [[ $CLIENT == loadgen ]]; then
  echo "Results: 3 brokers each, RF=3, min.insync.replicas=2, acks=all, $RECORDS x ${RECORD_SIZE}B" \
       "records, $PARTITIONS partitions, compression=$COMPRESSION, strata-loadgen after a" \
       "$WARMUP-record warm-up, Kafka $KAFKA_VERSION; broker CPU-s per GiB of record bytes and" \
       "peak RSS summed over the three brokers (raw: $LOADGEN_RESULTS)"
  column -t -s $'\t' "$LOADGEN_RESULTS"
  python3 "$ROOT/benches/loadgen_report.py" shares "$LOADGEN_RESULTS" "$FLOOR"
else
  echo "Results: 3 brokers each, RF=3, min.insync.replicas=2, acks=all, $RECORDS x ${RECORD_SIZE}B" \
       "records, $PARTITIONS partitions, compression=$COMPRESSION, producer throughput limit" \
       "$THROUGHPUT records/s (-1: none), after a $WARMUP-record warm-up, Kafka $KAFKA_VERSION" \
       "perf tools; peak RSS and CPU (of the measured produce+consume) summed over the three" \
       "brokers (raw: $RESULTS)"
  python3 "$ROOT/benches/perf_report.py" table "$RESULTS"
fi
if ((IDLE_SECONDS > 0)); then
  echo
  echo "Cost of a quiet cluster: broker CPU-s per minute, 3 brokers summed, $IDLE_PARTITIONS" \
       "partitions RF=3, idle and at $LOW_RATE records/s of ${RECORD_SIZE}B, acks=all (raw: $COST)"
  python3 "$ROOT/benches/perf_report.py" cost "$COST"
fi
if ((CYCLES > 0)); then
  echo
  echo "Leadership recovery after kill -9 of a partition leader (seconds from the kill; raw: $FAILOVER)"
  python3 "$ROOT/benches/perf_report.py" failover "$FAILOVER"
fi
