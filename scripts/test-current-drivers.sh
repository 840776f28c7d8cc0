#!/usr/bin/env bash
# Runs the backend suites whose driver has a newer major than the one package.json pins for the tests, on
# that newer major: what `npm install <driver>` gives a user today. The drivers go to a second install
# folder inside the repository; the sources and tests are copied beside them and compiled there, so both
# TypeScript and Node find the newer driver first (in that folder's node_modules) and everything else in
# the repository's. Usage: scripts/test-current-drivers.sh [path/to/node] (@google-cloud/storage 8 needs
# Node ≥ 22). FENCELOCK_DRIVERS_DIR overrides the folder (it must be inside the repository).
set -euo pipefail
cd "$(dirname "$0")/.."
NODE_BIN="${1:-node}"
DIR="${FENCELOCK_DRIVERS_DIR:-.cache/current-drivers}"

# The current majors, pinned for repeatable runs (the tests pin the older ones in package.json), and the
# test files of the backends that use each.
DRIVERS=('ioredis@6.0.0' '@google-cloud/storage@8.4.0')
TESTS=(test/backends/redis/*.test.ts test/backends/redlock/*.test.ts test/backends/gcs/*.test.ts)

# Node finds the other packages by walking up from the folder to a node_modules: the repository's, or, where
# node_modules is a link (a git worktree sharing another checkout's), the folder that holds the real one.
packages_home="$(dirname "$(realpath -m node_modules)")"
case "$(realpath -m "$DIR")/" in
"$(pwd -P)"/* | "$packages_home"/*) ;;
*) echo "FENCELOCK_DRIVERS_DIR=$DIR is outside the repository: its tests would not find the other packages" >&2; exit 1 ;;
esac

mkdir -p "$DIR"
wanted="$(printf '%s\n' "${DRIVERS[@]}")"
if [ "$(cat "$DIR/installed.txt" 2>/dev/null)" != "$wanted" ]; then
  echo '{ "name": "fencelock-current-drivers", "private": true, "type": "module" }' >"$DIR/package.json"
  (cd "$DIR" && npm install --no-audit --no-fund --save-exact --loglevel=error "${DRIVERS[@]}")
  echo "$wanted" >"$DIR/installed.txt"
fi
for driver in "${DRIVERS[@]}"; do
  name="${driver%@*}"
  echo "$name $(node -p "require('./$DIR/node_modules/$name/package.json').version")"
done

# All of src and test (the tests start the CLI and workers as child processes); bench for what the chaos
# helpers borrow from it (compiled when a test imports it; its .d.ts files, which declare the untyped peer
# packages, are included by name because nothing imports them).
rm -rf "$DIR/src" "$DIR/test" "$DIR/bench" "$DIR/build"
cp -r src test bench "$DIR/"
cat >"$DIR/tsconfig.json" <<EOF
{
  "extends": "$(pwd -P)/tsconfig.base.json",
  "compilerOptions": { "rootDir": ".", "outDir": "build" },
  "include": ["src", "test", "bench/*.d.ts"]
}
EOF
npx tsc -p "$DIR/tsconfig.json"

mapfile -t files < <(printf '%s\n' "${TESTS[@]}" | sed -E "s#^(.*)\.ts\$#$DIR/build/\1.js#")
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
