#!/usr/bin/env bash
# Builds the package and the tests, then runs every *.test.js with the given node (default: node on PATH).
# Usage: scripts/run-tests.sh [path/to/node] [extra node --test arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
NODE_BIN="${1:-node}"
shift || true
npx tsc -p tsconfig.build.json
npx tsc -p tsconfig.json
# Only *.test.js: fixtures and helpers under build/test are not tests (node --test would run any .js there).
mapfile -t tests < <(find build/test -name '*.test.js' | sort)
[ "${#tests[@]}" -gt 0 ] || { echo "no test files found under build/test" >&2; exit 1; }
echo "running ${#tests[@]} test files on $("$NODE_BIN" --version)"
PATH="$(dirname "$(command -v "$NODE_BIN")"):$PATH" "$NODE_BIN" --test "$@" "${tests[@]}"
