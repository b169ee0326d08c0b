#!/usr/bin/env bash
# Lock hand-off, on demand (not part of CI's pass/fail):
#
#   scripts/bench-handoff.sh [WAITERS] [ROUNDS] [HOLD_MS]     (defaults: 10 200 5)
#
# One lock, WAITERS sessions of the client library contending for it: the
# holder's release -> the next waiter's acquisition (`lockscope-bench handoff`),
# on a private etcd (beside `etcdctl lock`'s own hand-off, measured the same
# way in the same run), a private PostgreSQL (waiters woken by LISTEN/NOTIFY)
# and SQLite (waiters back off 25-250 ms: no notifications), all on tmpfs.
# Prints p50 / p90 / p99 / max per store and a met/missed line per goal.
# Method and results: docs/performance.md, "Lock hand-off".
#
#   PROFILE=debug   use the debug build instead of the release build
#   NO_BUILD=1      use the lockscope-bench already in target/PROFILE (as scripts/bench.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
WAITERS=${1:-10}
ROUNDS=${2:-200}
HOLD=${3:-5}
PROFILE=${PROFILE:-release}
build=cargo; [ "${NO_BUILD:-0}" = 0 ] || build=true
case $PROFILE in
  release) $build build --release -p lockscope --bin lockscope-bench; bin=target/release ;;
  debug) $build build -p lockscope --bin lockscope-bench; bin=target/debug ;;
  *) echo "PROFILE=$PROFILE: release or debug" >&2; exit 1 ;;
esac
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
dir=$(mktemp -d /dev/shm/lockscope-handoff-XXXX)
pids=()
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  [ -d "$dir/pg" ] && su_pg "$pgbin/pg_ctl" -D "$dir/pg" -m immediate stop >/dev/null 2>&1 || true
  wait 2>/dev/null || true
  rm -rf "$dir"
}
# PostgreSQL refuses to run as root: as the postgres user when we are root.
su_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
trap cleanup EXIT
run() { $bin/lockscope-bench handoff --store "$1" --waiters "$WAITERS" --rounds "$ROUNDS" --hold-ms "$HOLD"; }

echo "== etcd $(etcd --version | awk '/etcd Version/ {print $3}') on tmpfs"
client=$(free_port); peer=$(free_port)
etcd --name handoff --data-dir "$dir/etcd" \
  --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
  --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
  --initial-cluster "handoff=http://127.0.0.1:$peer" --log-level error >"$dir/etcd.log" 2>&1 &
pids+=($!)
until curl -sf "http://127.0.0.1:$client/health" >/dev/null; do sleep 0.2; done
run "etcd:http://127.0.0.1:$client"

echo "== PostgreSQL $("$pgbin/postgres" --version | awk '{print $3}') on tmpfs"
port=$(free_port)
mkdir -p "$dir/pg" && [ "$(id -u)" = 0 ] && chown postgres "$dir" "$dir/pg"
su_pg "$pgbin/initdb" -D "$dir/pg" -A trust -U postgres >/dev/null
su_pg "$pgbin/pg_ctl" -D "$dir/pg" -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off" -w start >/dev/null
run "postgres://postgres@127.0.0.1:$port/postgres"

echo "== SQLite on tmpfs"
run "sqlite:$dir/handoff.db"
