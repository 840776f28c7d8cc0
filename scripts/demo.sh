#!/usr/bin/env bash
# The README's first command: several `fencelock run` processes contend for one lock on the embedded default
# backend (a folder of lock files) and take turns; each prints the fence it was given.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d node_modules ] || npm ci --no-audit --no-fund --silent
npm run --silent build

dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
export FENCELOCK_URL="file://$dir"
echo "4 workers, 2 rounds each, one lock (\"demo\") in $dir:"
for worker in A B C D; do
  (
    for round in 1 2; do
      node dist/cli/main.js run demo --ttl 5s -- sh -c \
        "echo \"  worker $worker round $round: holds the lock with fence \$FENCELOCK_FENCE\"; sleep 0.2; echo \"  worker $worker round $round: done\""
    done
  ) &
done
wait
echo "Each 'holds' line is followed by its own 'done' line, and the fences only go up."
node dist/cli/main.js inspect demo
