# shellcheck shell=bash
# Kafka's perf tools and process accounting shared by benches/compare.sh and
# benches/cluster.sh. Source it after scripts/lib/common.sh, then call perf_tools_setup.
#
# perf_tools_setup sets TOOLS_CP, INTEROP_CP, JAVA_TOOL (java + BENCH_TOOL_HEAP), PROPS_OPT
# and NUM_OPT (the perf tools' option names, renamed during 4.x).

# Installs the jars and the interop client, and finds the perf tools' option names.
# shellcheck disable=SC2034  # the variables it sets are for the scripts that source this
perf_tools_setup() {
  local root="$STRATA_REPO_ROOT" heap java pp_help cp_help
  "$root/scripts/install-test-deps.sh" >/dev/null
  TOOLS_CP="$("$root/scripts/java-classpath.sh" tools)"
  "$root/scripts/build-java-tests.sh" >/dev/null
  INTEROP_CP="$("$root/scripts/java-classpath.sh" interop)"
  java="$(strata_java)"
  read -r -a heap <<<"${BENCH_TOOL_HEAP:--Xmx512m}"
  JAVA_TOOL=("$java" "${heap[@]}" -Dorg.slf4j.simpleLogger.defaultLogLevel=warn)
  # --producer-props -> --command-property, --messages -> --num-records
  pp_help="$("${JAVA_TOOL[@]}" -cp "$TOOLS_CP" org.apache.kafka.tools.ProducerPerformance --help 2>&1 || true)"
  if grep -q -- '--command-property' <<<"$pp_help"; then PROPS_OPT=--command-property; else PROPS_OPT=--producer-props; fi
  cp_help="$("${JAVA_TOOL[@]}" -cp "$TOOLS_CP" org.apache.kafka.tools.ConsumerPerformance --help 2>&1 || true)"
  if grep -q -- '--num-records' <<<"$cp_help"; then NUM_OPT=--num-records; else NUM_OPT=--messages; fi
}

# Run a command in the background and wait for it, so that signals reach the caller's traps
# promptly; its pid is in TOOL_PID meanwhile (the caller's cleanup stops it).
TOOL_PID=""
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

# Peak RSS in MiB and CPU seconds (user+sys) of live processes, summed: "rss cpu" ("- -" if
# one of them is gone).
proc_stats() {
  local hz kib=0 ticks=0 pid h t
  hz="$(getconf CLK_TCK)"
  for pid in "$@"; do
    h="$(awk '/^VmHWM:/{print $2}' "/proc/$pid/status" 2>/dev/null || true)"
    t="$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{print $12 + $13}' || true)"
    if [[ -z "$h" || -z "$t" ]]; then
      echo "- -"
      return
    fi
    kib=$((kib + h)) ticks=$((ticks + t))
  done
  awk -v k="$kib" -v t="$ticks" -v hz="$hz" 'BEGIN { printf "%.1f %.1f\n", k / 1024, t / hz }'
}
