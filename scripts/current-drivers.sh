#!/usr/bin/env bash
# Builds the copy of the backend suites whose driver has a newer major than the one package.json pins for
# the tests, compiled against that newer major: what `npm install <driver>` gives a user today. The drivers
# go to a second install folder inside the repository; the sources and tests are copied beside them and
# compiled there, so both TypeScript and Node find the newer driver first (in that folder's node_modules)
# and everything else in the repository's.
# Prints one line per test file: the repository's compiled file, a tab, the copy's (which runs instead of
# it on the newer driver). Everything else goes to stderr.
# Usage: scripts/current-drivers.sh. FENCELOCK_DRIVERS_DIR overrides the folder (it must be inside the
# repository). @google-cloud/storage 8 needs Node ≥ 22 to run.
set -euo pipefail
cd "$(dirname "$0")/.."
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

{
  mkdir -p "$DIR"
  wanted="$(printf '%s\n' "${DRIVERS[@]}")"
  if [ "$(cat "$DIR/installed.txt" 2>/dev/null)" != "$wanted" ]; then
    echo '{ "name": "fencelock-current-drivers", "private": true, "type": "module" }' >"$DIR/package.json"
    (cd "$DIR" && npm install --no-audit --no-fund --save-exact --loglevel=error "${DRIVERS[@]}")
    echo "$wanted" >"$DIR/installed.txt"
  fi
  for driver in "${DRIVERS[@]}"; do
    name="${driver%@*}"
    echo "current driver: $name $(node -p "require('./$DIR/node_modules/$name/package.json').version")"
  done

  # All of src and test (the tests start the CLI and workers as child processes); bench for what the chaos
  # helpers borrow from it (compiled when a test imports it; its .d.ts files, which declare the untyped peer
  # packages, are included by name because nothing imports them).
  rm -rf "$DIR/src" "$DIR/test" "$DIR/bench" "$DIR/build"
  cp -r src test bench "$DIR/"
  cat >"$DIR/tsconfig.json" <<JSON
{
  "extends": "$(pwd -P)/tsconfig.base.json",
  "compilerOptions": { "rootDir": ".", "outDir": "build" },
  "include": ["src", "test", "bench/*.d.ts"]
}
JSON
  npx tsc -p "$DIR/tsconfig.json"
} >&2

printf '%s\n' "${TESTS[@]}" | sed -E "s#^(.*)\.ts\$#build/\1.js\t$DIR/build/\1.js#"
