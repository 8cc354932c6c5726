# shellcheck shell=bash
# Shared settings for Strata's test/benchmark scripts. Source it, don't run it.
#
#   STRATA_CACHE   where downloaded/built test dependencies live (default ~/.cache/strata)
#   STRATA_VENV    Python virtualenv with pytest + Kafka clients (default $STRATA_CACHE/venv)
#   KAFKA_VERSION  Apache Kafka version of the Java jars (clients, tools, reference broker)

# shellcheck disable=SC2034  # used by the scripts that source this file
STRATA_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export STRATA_CACHE="${STRATA_CACHE:-${HOME:-/root}/.cache/strata}"
export STRATA_VENV="${STRATA_VENV:-$STRATA_CACHE/venv}"
# Newest 4.x that Maven Central serves here and that runs on Java 17.
export KAFKA_VERSION="${KAFKA_VERSION:-4.4.0}"
# shellcheck disable=SC2034
STRATA_JARS_DIR="$STRATA_CACHE/jars/kafka-$KAFKA_VERSION"
# shellcheck disable=SC2034
STRATA_JAVA_CLASSES="$STRATA_CACHE/java-classes"

strata_log() { printf '[%s] %s\n' "$(basename "$0")" "$*" >&2; }
strata_die() { printf '[%s] ERROR: %s\n' "$(basename "$0")" "$*" >&2; exit 1; }

# Hash of stdin (used for "already done?" stamps).
strata_hash() { sha256sum | cut -c1-16; }

# Java binary: $JAVA_HOME/bin/java if set, else java on PATH.
strata_java() {
  if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
    printf '%s\n' "$JAVA_HOME/bin/java"
  else
    command -v java || strata_die "java not found; run scripts/install-test-deps.sh"
  fi
}

# Print a free TCP port on 127.0.0.1 (best effort: the port is released before use).
strata_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# True if something accepts TCP connections on 127.0.0.1:$1.
strata_port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# True if PID is running (a zombie counts as gone).
strata_alive() {
  local st
  kill -0 "$1" 2>/dev/null || return 1
  st="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true)"
  [[ -n "$st" && "$st" != Z ]]
}

# Wait for a process to exit: strata_stop_pid PID [TIMEOUT_SECONDS]
# Sends SIGTERM, then SIGKILL after the timeout. Returns 0 once it's gone.
strata_stop_pid() {
  local pid="$1" timeout="${2:-30}" i
  strata_alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < timeout * 5; i++)); do
    strata_alive "$pid" || return 0
    sleep 0.2
  done
  strata_log "pid $pid still alive after ${timeout}s; sending SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  for ((i = 0; i < 25; i++)); do
    strata_alive "$pid" || return 0
    sleep 0.2
  done
  return 1
}
