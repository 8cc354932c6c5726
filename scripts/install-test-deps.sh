#!/usr/bin/env bash
# Install everything Strata's interop tests and benchmarks need, on a fresh machine.
# Idempotent: each step is skipped when its stamp says it is already done.
#
#   scripts/install-test-deps.sh            # all steps
#   scripts/install-test-deps.sh --force    # redo every step
#
# Steps:
#   1. Debian packages: kcat (or kafkacat), plus java/javac/mvn/curl/python3 if missing
#   2. Python virtualenv $STRATA_VENV with tests/interop/requirements.txt
#   3. Java jars from Maven Central into $STRATA_CACHE/jars/kafka-$KAFKA_VERSION/{clients,tools,broker,
#      streams,spark-s3,spark-iceberg,iceberg-rest} (streams: kafka-streams without rocksdbjni; the tests use in-memory stores;
#      spark-s3: hadoop-aws + the AWS SDK modules s3a needs, ~13 MB, for pyspark reading s3a://)
#   4. The Java interop client (scripts/build-java-tests.sh)
#   5. s3s-fs $S3S_FS_VERSION (an S3-compatible server over a directory, checks SigV4) from
#      crates.io into $STRATA_CACHE/s3s-fs/bin/s3s-fs for the tiering tests; built in its own
#      target dir under $STRATA_CACHE (removed afterwards), ~9 minutes on 2 cores, once
#   6. checkov (scripts/checkov-requirements.txt) in its own virtualenv $STRATA_CACHE/checkov-venv
#      for scripts/check-terraform.sh (~30 s, once)
#   7. pyspark 4.1 (scripts/spark-iceberg-requirements.txt) in its own virtualenv
#      $STRATA_CACHE/spark-iceberg-venv, with the spark-iceberg jar set (Iceberg's Spark 4.1
#      runtime), for the Spark reads of Iceberg tables (~1 min, ~520 MB, once)
#
# Environment: STRATA_CACHE (default ~/.cache/strata), STRATA_VENV (default $STRATA_CACHE/venv),
#              KAFKA_VERSION (default in scripts/lib/common.sh), S3S_FS_VERSION (default 0.14.1).
set -euo pipefail
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

FORCE=0
case "${1:-}" in
  "") ;;
  --force) FORCE=1 ;;
  -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) strata_die "unknown argument '$1' (usage: $0 [--force])" ;;
esac

mkdir -p "$STRATA_CACHE"

# --------------------------------------------------------------------------- apt
SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; fi
fi
APT_UPDATED=0
apt_update_once() {
  if [[ $APT_UPDATED -eq 0 ]]; then
    strata_log "apt-get update"
    $SUDO apt-get update -qq
    APT_UPDATED=1
  fi
}
# True if apt knows an installable candidate for package $1.
apt_has_candidate() {
  local c
  c="$(apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/{print $2}')"
  [[ -n "$c" && "$c" != "(none)" ]]
}
apt_install() {
  # $@: packages. Runs apt-get update first only if apt doesn't know one of them.
  local p
  for p in "$@"; do
    apt_has_candidate "$p" || { apt_update_once; break; }
  done
  strata_log "apt-get install -y $*"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

need_pkgs=()
command -v curl >/dev/null || need_pkgs+=(curl)
command -v python3 >/dev/null || need_pkgs+=(python3 python3-venv)
command -v javac >/dev/null || need_pkgs+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || need_pkgs+=(maven)
if ((${#need_pkgs[@]})); then
  apt_install "${need_pkgs[@]}"
fi

if command -v kcat >/dev/null || command -v kafkacat >/dev/null; then
  :
else
  if apt_has_candidate kcat || { apt_update_once; apt_has_candidate kcat; }; then
    apt_install kcat
  else
    apt_install kafkacat
  fi
fi
KCAT="$(command -v kcat || command -v kafkacat)"

# --------------------------------------------------------------------------- venv
REQ="$STRATA_REPO_ROOT/tests/interop/requirements.txt"
venv_stamp="$( { cat "$REQ"; python3 --version 2>&1; } | strata_hash)"
if [[ $FORCE -eq 0 && -x "$STRATA_VENV/bin/python" && "$(cat "$STRATA_VENV/.strata-stamp" 2>/dev/null)" == "$venv_stamp" ]]; then
  strata_log "venv up to date: $STRATA_VENV"
else
  strata_log "creating virtualenv $STRATA_VENV"
  if ! python3 -m venv --clear "$STRATA_VENV" 2>/dev/null; then
    apt_install python3-venv
    python3 -m venv --clear "$STRATA_VENV"
  fi
  "$STRATA_VENV/bin/python" -m pip install -q --upgrade pip
  "$STRATA_VENV/bin/python" -m pip install -q -r "$REQ"
  "$STRATA_VENV/bin/python" -c 'import pytest, confluent_kafka, kafka, boto3, moto' \
    || strata_die "python packages failed to import"
  echo "$venv_stamp" >"$STRATA_VENV/.strata-stamp"
fi

# --------------------------------------------------------------------------- jars
# One dependency set per pom under scripts/maven/<set>/.
resolve_set() {
  local set="$1" pom="$STRATA_REPO_ROOT/scripts/maven/$1/pom.xml"
  local dest="$STRATA_JARS_DIR/$set" stamp tmp
  stamp="$( { cat "$pom"; echo "$KAFKA_VERSION"; } | strata_hash)"
  if [[ $FORCE -eq 0 && -f "$dest/.strata-stamp" && "$(cat "$dest/.strata-stamp")" == "$stamp" ]]; then
    strata_log "jars up to date: $dest"
    return
  fi
  strata_log "resolving $set jars (kafka $KAFKA_VERSION) with mvn"
  tmp="$dest.tmp.$$"
  mkdir -p "$(dirname "$dest")"
  rm -rf "$tmp"
  if ! mvn -B -q -Dstyle.color=never -f "$pom" -Dkafka.version="$KAFKA_VERSION" \
      dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$tmp" \
      >"$tmp.log" 2>&1; then
    cat "$tmp.log" >&2
    rm -rf "$tmp" "$tmp.log"
    strata_die "mvn failed to resolve the $set set"
  fi
  rm -f "$tmp.log"
  ls "$tmp"/*.jar >/dev/null 2>&1 || strata_die "no jars resolved for $set"
  echo "$stamp" >"$tmp/.strata-stamp"
  rm -rf "$dest"
  mv "$tmp" "$dest"
}
for set in clients tools broker streams spark-s3 spark-iceberg iceberg-rest; do
  resolve_set "$set"
done

# --------------------------------------------------------------------------- java
if [[ $FORCE -eq 1 ]]; then
  "$STRATA_REPO_ROOT/scripts/build-java-tests.sh" --force
else
  "$STRATA_REPO_ROOT/scripts/build-java-tests.sh"
fi

# --------------------------------------------------------------------------- s3s-fs
# The tiering tests run against two real S3 servers: moto (from the venv, lenient) and s3s-fs
# (checks SigV4 signatures). The stamp is the version, so a new S3S_FS_VERSION (or --force)
# rebuilds; otherwise cargo is not even asked (resolving its index alone takes a while).
S3S_FS_VERSION="${S3S_FS_VERSION:-0.14.1}"
S3S_FS_ROOT="$STRATA_CACHE/s3s-fs"
S3S_FS="$S3S_FS_ROOT/bin/s3s-fs"
s3s_fs_stamp="$S3S_FS_VERSION"
if [[ $FORCE -eq 0 && -x "$S3S_FS" && "$(cat "$S3S_FS_ROOT/.strata-stamp" 2>/dev/null)" == "$s3s_fs_stamp" ]]; then
  strata_log "s3s-fs up to date: $S3S_FS"
else
  command -v cargo >/dev/null || strata_die "cargo not found: install Rust (rustup) first"
  strata_log "building s3s-fs $S3S_FS_VERSION from crates.io (takes several minutes, once)"
  s3s_fs_target="$STRATA_CACHE/s3s-fs-target"
  rm -f "$S3S_FS_ROOT/.strata-stamp"
  if ! CARGO_TARGET_DIR="$s3s_fs_target" cargo install "s3s-fs@$S3S_FS_VERSION" \
      --features binary --locked --force --root "$S3S_FS_ROOT"; then
    rm -rf "$s3s_fs_target"
    strata_die "cargo install s3s-fs@$S3S_FS_VERSION failed"
  fi
  rm -rf "$s3s_fs_target"
  "$S3S_FS" --help >/dev/null || strata_die "$S3S_FS does not run"
  echo "$s3s_fs_stamp" >"$S3S_FS_ROOT/.strata-stamp"
fi

# --------------------------------------------------------------------------- checkov
# Its own venv: checkov pins a python-hcl2 fork that must not share a venv with other packages.
CHECKOV_REQ="$STRATA_REPO_ROOT/scripts/checkov-requirements.txt"
CHECKOV_VENV="$STRATA_CACHE/checkov-venv"
checkov_stamp="$( { cat "$CHECKOV_REQ"; python3 --version 2>&1; } | strata_hash)"
if [[ $FORCE -eq 0 && -x "$CHECKOV_VENV/bin/checkov" && "$(cat "$CHECKOV_VENV/.strata-stamp" 2>/dev/null)" == "$checkov_stamp" ]]; then
  strata_log "checkov venv up to date: $CHECKOV_VENV"
else
  strata_log "creating checkov virtualenv $CHECKOV_VENV"
  rm -f "$CHECKOV_VENV/.strata-stamp"
  if ! python3 -m venv --clear "$CHECKOV_VENV" 2>/dev/null; then
    apt_install python3-venv
    python3 -m venv --clear "$CHECKOV_VENV"
  fi
  "$CHECKOV_VENV/bin/python" -m pip install -q --upgrade pip
  "$CHECKOV_VENV/bin/python" -m pip install -q -r "$CHECKOV_REQ"
  "$CHECKOV_VENV/bin/checkov" --version >/dev/null || strata_die "checkov does not run"
  echo "$checkov_stamp" >"$CHECKOV_VENV/.strata-stamp"
fi

# --------------------------------------------------------------------------- spark-iceberg
# Its own venv: Iceberg's Spark runtime exists for Spark 4.1, the main venv's pyspark is 4.3.
SPARK_ICEBERG_REQ="$STRATA_REPO_ROOT/scripts/spark-iceberg-requirements.txt"
SPARK_ICEBERG_VENV="$STRATA_CACHE/spark-iceberg-venv"
spark_iceberg_stamp="$( { cat "$SPARK_ICEBERG_REQ"; python3 --version 2>&1; } | strata_hash)"
if [[ $FORCE -eq 0 && -x "$SPARK_ICEBERG_VENV/bin/python" && "$(cat "$SPARK_ICEBERG_VENV/.strata-stamp" 2>/dev/null)" == "$spark_iceberg_stamp" ]]; then
  strata_log "spark-iceberg venv up to date: $SPARK_ICEBERG_VENV"
else
  strata_log "creating spark-iceberg virtualenv $SPARK_ICEBERG_VENV"
  rm -f "$SPARK_ICEBERG_VENV/.strata-stamp"
  if ! python3 -m venv --clear "$SPARK_ICEBERG_VENV" 2>/dev/null; then
    apt_install python3-venv
    python3 -m venv --clear "$SPARK_ICEBERG_VENV"
  fi
  "$SPARK_ICEBERG_VENV/bin/python" -m pip install -q --upgrade pip
  "$SPARK_ICEBERG_VENV/bin/python" -m pip install -q -r "$SPARK_ICEBERG_REQ"
  "$SPARK_ICEBERG_VENV/bin/python" -c 'import pyspark' || strata_die "pyspark does not import"
  echo "$spark_iceberg_stamp" >"$SPARK_ICEBERG_VENV/.strata-stamp"
fi

cat <<EOF
Strata test dependencies ready:
  kcat:            $KCAT
  python venv:     $STRATA_VENV  (activate: source $STRATA_VENV/bin/activate)
  kafka version:   $KAFKA_VERSION
  client jars:     $STRATA_JARS_DIR/clients   (scripts/java-classpath.sh clients)
  tools jars:      $STRATA_JARS_DIR/tools     (scripts/java-classpath.sh tools)
  broker jars:     $STRATA_JARS_DIR/broker    (scripts/java-classpath.sh broker)
  streams jars:    $STRATA_JARS_DIR/streams   (scripts/java-classpath.sh streams)
  spark s3a jars:  $STRATA_JARS_DIR/spark-s3  (scripts/java-classpath.sh spark-s3)
  iceberg spark:   $STRATA_JARS_DIR/spark-iceberg with $SPARK_ICEBERG_VENV
  iceberg REST:    $STRATA_JARS_DIR/iceberg-rest  (scripts/java-classpath.sh iceberg-rest)
  java test client: $STRATA_JAVA_CLASSES  (scripts/java-classpath.sh interop)
  s3s-fs:          $S3S_FS
  checkov:         $CHECKOV_VENV/bin/checkov
EOF
