#!/usr/bin/env bash
# Runs the backend suites whose driver has a newer major than the one package.json pins for the tests, on
# that newer major (scripts/current-drivers.sh builds them): what `npm install <driver>` gives a user today.
# `npm run test:all` runs them inside its Node 24 run instead (scripts/run-tests.sh --current-drivers).
# Usage: scripts/test-current-drivers.sh [path/to/node] (@google-cloud/storage 8 needs Node ≥ 22).
set -euo pipefail
cd "$(dirname "$0")/.."
NODE_BIN="${1:-node}"
DIR="${FENCELOCK_DRIVERS_DIR:-.cache/current-drivers}"

mapfile -t files < <(bash scripts/current-drivers.sh | cut -f2)
# Longest first and three at a time, as the main runs (scripts/run-tests.sh says why), with the same runner:
# a file that leaves something open still exits once its tests are done.
mapfile -t tests < <("$NODE_BIN" scripts/test-order.mjs "$DIR/test-durations.txt" "${files[@]}")
LANES="${FENCELOCK_TEST_LANES:-3}"
echo "running ${#tests[@]} test files on $("$NODE_BIN" --version) with the current drivers, $LANES at a time"
REPORT="$DIR/test-failures.txt"
rm -f "$REPORT"
status=0
# An absolute folder on PATH: the tests' child processes (CLI, workers) find this node from any cwd.
PATH="$(cd "$(dirname "$(command -v "$NODE_BIN")")" && pwd):$PATH" "$NODE_BIN" scripts/run-tests.mjs "$LANES" "$REPORT" \
  "$DIR/test-durations.txt" -- "${tests[@]}" || status=$?
if [ "$status" -ne 0 ] && [ -s "$REPORT" ]; then cat "$REPORT"; fi
exit "$status"
