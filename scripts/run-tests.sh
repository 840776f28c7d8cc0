#!/usr/bin/env bash
# Builds the package and the tests, then runs every *.test.js with the given node (default: node on PATH).
# Usage: scripts/run-tests.sh [path/to/node] [--current-drivers] [--chaos-parts=1,2]
#   [--test-name-pattern=<regular expression>]...
# --current-drivers: the Redis, Redlock and GCS files run on their drivers' current majors instead of the
# pinned ones (scripts/current-drivers.sh builds them), in the same run, so the lanes stay full. CI's Node 24
# run does that: every file runs on Node 20 with the pinned drivers and on Node 24 with the current ones.
# --chaos-parts: only these parts of the short chaos set (build/test/chaos/chaos-<n>.test.js); the others
# are left out. CI runs each part once, on one of its two Nodes (scripts/test-all.sh says why).
set -euo pipefail
cd "$(dirname "$0")/.."
NODE_BIN="${1:-node}"
shift || true
CURRENT_DRIVERS=false
CHAOS_PARTS=all
while [ "$#" -gt 0 ]; do
  case "$1" in
  --current-drivers) CURRENT_DRIVERS=true ;;
  --chaos-parts=*) CHAOS_PARTS="${1#--chaos-parts=}" ;;
  *) break ;;
  esac
  shift
done
npx tsc -p tsconfig.build.json
npx tsc -p tsconfig.json
# Only *.test.js: fixtures and helpers under build/test are not tests (node --test would run any .js there).
# Longest first, by what each file took last run (scripts/test-order.mjs): scripts/run-tests.mjs starts
# them in that order as lanes free up (`node --test` would sort them by path), so the run does not end on
# a slow file started last, alone.
DURATIONS=build/test-durations.txt
mapfile -t files < <(find build/test -name '*.test.js' | sort)
if [ "$CHAOS_PARTS" != all ]; then
  keep="^build/test/chaos/chaos-(${CHAOS_PARTS//,/|})\.test\.js\$"
  mapfile -t files < <(printf '%s\n' "${files[@]}" | grep -Ev '^build/test/chaos/chaos-[0-9]+\.test\.js$' || true
    printf '%s\n' "${files[@]}" | grep -E "$keep" || true)
  [ "$(printf '%s\n' "${files[@]}" | grep -cE "$keep")" -eq "$(tr ',' '\n' <<<"$CHAOS_PARTS" | wc -l)" ] ||
    { echo "--chaos-parts=$CHAOS_PARTS names a part with no build/test/chaos/chaos-<n>.test.js" >&2; exit 1; }
fi
mapfile -t tests < <("$NODE_BIN" scripts/test-order.mjs "$DURATIONS" "${files[@]}")
TIMES="$DURATIONS"
if [ "$CURRENT_DRIVERS" = true ]; then
  # Each line: a compiled test file, a tab, its copy on the current drivers, which runs in its place (in
  # its place in the order too: the copy takes about as long). This run's times go beside the record.
  declare -A instead=()
  while IFS=$'\t' read -r pinned current; do instead["$pinned"]="$current"; done < <(bash scripts/current-drivers.sh)
  for i in "${!tests[@]}"; do tests[i]="${instead[${tests[i]}]:-${tests[i]}}"; done
  TIMES=build/test-durations-current-drivers.txt
fi
[ "${#tests[@]}" -gt 0 ] || { echo "no test files found under build/test" >&2; exit 1; }
# Three files at a time, even on two cores (node's default there is one): most of the run is waiting on
# servers, leases and chaos durations, not CPU (a quiet CI machine's Node 20 run took 33 min on two
# lanes, with the cores mostly idle). Every test must pass while other work loads both cores; a test that
# does not is a bug to fix, not a reason to go back to fewer lanes. FENCELOCK_TEST_LANES overrides it.
LANES="${FENCELOCK_TEST_LANES:-3}"
echo "running ${#tests[@]} test files on $("$NODE_BIN" --version), $LANES at a time"
# Beside the spec reporter, scripts/failure-report.mjs writes what a failing file left (its exit code or
# signal, its tests' errors, the runner's diagnostics of it, its stderr) to a file, printed last when the
# run fails: a CI log is often read by its tail only, where the spec reporter says just "test failed".
REPORT=build/test-failures.txt
rm -f "$REPORT"
# scripts/durations-report.mjs writes each file's duration (the next run's order) once the run ends; the
# record is read above, before the runner opens the file anew. A run of some tests only (a name pattern)
# writes beside it: its files' times would misorder the next full run.
[ "$#" -eq 0 ] || TIMES=build/test-durations-partial.txt
status=0
# An absolute folder on PATH: the tests' child processes (CLI, workers) find this node from any cwd.
PATH="$(cd "$(dirname "$(command -v "$NODE_BIN")")" && pwd):$PATH" "$NODE_BIN" scripts/run-tests.mjs "$LANES" "$REPORT" "$TIMES" \
  "$@" -- "${tests[@]}" || status=$?
if [ "$status" -ne 0 ]; then
  if [ -s "$REPORT" ]; then cat "$REPORT"; else echo "(no failing test file reported: see the output above)"; fi
fi
if [ -s "$TIMES" ]; then
  echo "the 15 slowest test files (seconds; every file in $TIMES):"
  head -n 15 "$TIMES"
fi
exit "$status"
