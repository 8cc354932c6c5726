#!/usr/bin/env bash
# Compile the Java interop client and the Kafka Streams test app (tests/java/src/**.java) with
# plain javac against the kafka-streams classpath (which includes kafka-clients), into
# $STRATA_CACHE/java-classes. Skips when sources are unchanged. InteropClient itself only needs
# kafka-clients at run time (java-classpath.sh interop); StreamsWordCount needs streams-app.
#
#   scripts/build-java-tests.sh [--force]
#
# Run it afterwards with:
#   java -cp "$(scripts/java-classpath.sh interop)" io.strata.interop.InteropClient --help
#   java -cp "$(scripts/java-classpath.sh streams-app)" io.strata.interop.StreamsWordCount ...
set -euo pipefail
# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

FORCE=0
case "${1:-}" in
  "") ;;
  --force) FORCE=1 ;;
  -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "usage: $0 [--force]" >&2; exit 2 ;;
esac

SRC="$STRATA_REPO_ROOT/tests/java/src"
CP="$("$STRATA_REPO_ROOT/scripts/java-classpath.sh" streams)"
mapfile -t sources < <(find "$SRC" -name '*.java' | sort)
((${#sources[@]})) || strata_die "no Java sources under $SRC"

stamp="$( { cat "${sources[@]}"; echo "$CP"; } | strata_hash)"
if [[ $FORCE -eq 0 && "$(cat "$STRATA_JAVA_CLASSES/.strata-stamp" 2>/dev/null)" == "$stamp" ]]; then
  strata_log "java test classes up to date: $STRATA_JAVA_CLASSES"
  exit 0
fi

JAVAC=javac
[[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/javac" ]] && JAVAC="$JAVA_HOME/bin/javac"
tmp="$STRATA_JAVA_CLASSES.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
strata_log "javac ${#sources[@]} file(s) -> $STRATA_JAVA_CLASSES"
"$JAVAC" --release 17 -Xlint:all,-options,-serial -encoding UTF-8 -cp "$CP" -d "$tmp" "${sources[@]}"
echo "$stamp" >"$tmp/.strata-stamp"
rm -rf "$STRATA_JAVA_CLASSES"
mv "$tmp" "$STRATA_JAVA_CLASSES"
