#!/usr/bin/env bash
# Print a Java classpath (colon-separated jar list) for one dependency set.
#
#   scripts/java-classpath.sh clients   # kafka-clients + slf4j-simple
#   scripts/java-classpath.sh tools     # kafka-tools (ProducerPerformance, TopicCommand, ...)
#   scripts/java-classpath.sh broker    # kafka_2.13 broker + kafka-tools + log4j2
#   scripts/java-classpath.sh streams   # kafka-streams (no rocksdbjni) + kafka-clients + slf4j-simple
#   scripts/java-classpath.sh spark-s3  # hadoop-aws + the AWS SDK modules s3a uses (for pyspark's
#                                       # spark.jars; pyspark brings hadoop itself)
#   scripts/java-classpath.sh spark-iceberg  # Iceberg's Spark 4.1 runtime (for the
#                                       # spark-iceberg venv's pyspark)
#   scripts/java-classpath.sh iceberg-rest  # an Iceberg REST catalog (RESTCatalogServlet on
#                                       # Jetty, JdbcCatalog on SQLite) for the interop tests
#   scripts/java-classpath.sh interop   # clients + the compiled InteropClient classes
#   scripts/java-classpath.sh streams-app  # streams + the compiled classes (StreamsWordCount)
#
# The jars are installed by scripts/install-test-deps.sh.
set -euo pipefail
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

usage() { echo "usage: $0 <clients|tools|broker|streams|spark-s3|spark-iceberg|iceberg-rest|interop|streams-app>" >&2; exit 2; }
[[ $# -eq 1 ]] || usage

jars_of() {
  local dir="$STRATA_JARS_DIR/$1"
  [[ -f "$dir/.strata-stamp" ]] \
    || strata_die "$dir is missing; run scripts/install-test-deps.sh"
  local out="" j
  for j in "$dir"/*.jar; do out+="${out:+:}$j"; done
  printf '%s' "$out"
}

case "$1" in
  clients|tools|broker|streams|spark-s3|spark-iceberg|iceberg-rest) jars_of "$1"; echo ;;
  interop|streams-app)
    [[ -f "$STRATA_JAVA_CLASSES/.strata-stamp" ]] \
      || strata_die "$STRATA_JAVA_CLASSES is missing; run scripts/build-java-tests.sh"
    if [[ $1 == interop ]]; then jarset=clients; else jarset=streams; fi
    printf '%s:%s\n' "$STRATA_JAVA_CLASSES" "$(jars_of "$jarset")" ;;
  -h|--help) usage ;;
  *) usage ;;
esac
