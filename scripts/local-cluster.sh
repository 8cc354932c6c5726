#!/usr/bin/env bash
# A local 3-broker Strata cluster on 127.0.0.1 for trying cluster mode out: three
# `strata serve --config` processes forming one metadata quorum (every node is broker and
# controller, all three are voters).
#
#   scripts/local-cluster.sh start [dir]    start; returns once all three serve Kafka clients
#   scripts/local-cluster.sh stop [dir]     SIGTERM each broker, SIGKILL after 60 s
#   scripts/local-cluster.sh status [dir]   list the brokers and whether they run
#
# [dir] (default ./local-cluster) holds node-<id>/server.properties, data/, strata.log and
# strata.pid. Kafka listeners: 127.0.0.1:19092..19094 (bootstrap with any of them); metadata
# RPC: 127.0.0.1:19192..19194; admin HTTP: 127.0.0.1:19292..19294.
#
# Environment:
#   STRATA_BIN            the strata binary (default target/debug/strata)
#   STRATA_CLUSTER_BASE   first Kafka port (default 19092; RPC +100, admin +200)
set -euo pipefail

usage() {
  sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${STRATA_BIN:-$repo_root/target/debug/strata}"
base="${STRATA_CLUSTER_BASE:-19092}"
cmd="${1:-}"
dir="${2:-./local-cluster}"
[[ -n "$cmd" ]] || usage

voters() {
  local v=""
  for id in 1 2 3; do
    v+="${v:+,}$id@127.0.0.1:$((base + 100 + id - 1))"
  done
  echo "$v"
}

pid_of() {
  local f="$dir/node-$1/strata.pid"
  [[ -f "$f" ]] || return 1
  local pid
  pid="$(cat "$f")"
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

start() {
  [[ -x "$bin" ]] || { echo "strata binary not found at $bin (cargo build, or set STRATA_BIN)" >&2; exit 1; }
  local q
  q="$(voters)"
  for id in 1 2 3; do
    local node="$dir/node-$id"
    if pid_of "$id" >/dev/null; then
      echo "node $id already runs (pid $(pid_of "$id"))"
      continue
    fi
    mkdir -p "$node/data"
    cat >"$node/server.properties" <<EOF
process.roles=broker,controller
node.id=$id
cluster.id=strata-local-cluster
listeners=PLAINTEXT://127.0.0.1:$((base + id - 1)),CONTROLLER://127.0.0.1:$((base + 100 + id - 1))
controller.listener.names=CONTROLLER
controller.quorum.voters=$q
strata.admin.listener=127.0.0.1:$((base + 200 + id - 1))
log.dirs=$(cd "$node/data" && pwd)
default.replication.factor=3
min.insync.replicas=2
EOF
    nohup "$bin" serve --config "$node/server.properties" >>"$node/strata.log" 2>&1 &
    echo $! >"$node/strata.pid"
    echo "node $id: pid $!, kafka 127.0.0.1:$((base + id - 1)), log $node/strata.log"
  done
  # Each broker serves its admin /health once it has joined the quorum and synced.
  local deadline=$((SECONDS + 120))
  for id in 1 2 3; do
    until curl -fsS "http://127.0.0.1:$((base + 200 + id - 1))/health" >/dev/null 2>&1; do
      if ! pid_of "$id" >/dev/null; then
        echo "node $id exited; see $dir/node-$id/strata.log" >&2
        exit 1
      fi
      if ((SECONDS > deadline)); then
        echo "node $id did not become healthy within 120 s; see $dir/node-$id/strata.log" >&2
        exit 1
      fi
      sleep 0.2
    done
  done
  echo "cluster up: bootstrap.servers=127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))"
}

stop() {
  for id in 1 2 3; do
    local pid
    if pid="$(pid_of "$id")"; then
      kill -TERM "$pid"
      local deadline=$((SECONDS + 60))
      while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS > deadline)); then
          echo "node $id did not stop within 60 s: SIGKILL" >&2
          kill -KILL "$pid" 2>/dev/null || true
          break
        fi
        sleep 0.2
      done
      echo "node $id stopped"
    fi
    rm -f "$dir/node-$id/strata.pid"
  done
}

status() {
  for id in 1 2 3; do
    if pid="$(pid_of "$id")"; then
      echo "node $id: running (pid $pid), kafka 127.0.0.1:$((base + id - 1))"
    else
      echo "node $id: stopped"
    fi
  done
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) usage ;;
esac
