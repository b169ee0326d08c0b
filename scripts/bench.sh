#!/usr/bin/env bash
# The live path's benchmark, on demand (not part of CI's pass/fail):
#
#   scripts/bench.sh [LOCKS] [RATE] [SECONDS]     (defaults: 1000 1000 20)
#
# Starts a private etcd (tmpfs, free ports), fills it with LOCKS locks, starts the
# release `lockscope` on it, then writes RATE changes per second for SECONDS
# (`lockscope-bench load`, 10 % of them to the rows the probe's view shows) while
# Debian's Chromium watches that view (`end2end/bench/dom-latency.js`). Prints: time
# from server start to live, page size, store write -> row in the DOM (p50 / p95 /
# p99 / max), changes never shown, server CPU during the load, server RSS.
# Method and results: docs/performance.md.
set -euo pipefail
cd "$(dirname "$0")/.."
LOCKS=${1:-1000}
RATE=${2:-1000}
SECS=${3:-20}

cargo build --release -p lockscope --bins
if [ ! -f target/site/pkg/lockscope.wasm ]; then
  echo "no built site in target/site: run scripts/run.sh (or cargo leptos build) first" >&2
  exit 1
fi
bin=target/release
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
dir=$(mktemp -d /dev/shm/lockscope-bench-XXXX)
client=$(free_port); peer=$(free_port); listen=$(free_port)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

etcd --name bench --data-dir "$dir/etcd" --quota-backend-bytes 8589934592 \
  --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
  --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
  --initial-cluster "bench=http://127.0.0.1:$peer" --log-level error >"$dir/etcd.log" 2>&1 &
pids+=($!)
until curl -sf "http://127.0.0.1:$client/health" >/dev/null; do sleep 0.2; done
$bin/lockscope-bench fill --etcd "http://127.0.0.1:$client" --prefix /bench/ --locks "$LOCKS"

t0=$(date +%s%N)
$bin/lockscope --etcd "http://127.0.0.1:$client" --prefix /bench/ --listen "127.0.0.1:$listen" \
  --site-root target/site --log warn >"$dir/server.log" 2>&1 &
server=$!
pids+=($server)
until curl -s "http://127.0.0.1:$listen/healthz" | grep -q "\"held\":$LOCKS"; do sleep 0.1; done
t1=$(date +%s%N)
page_bytes=$(curl -s "http://127.0.0.1:$listen/" | wc -c)
cpu() { awk '{print $14 + $15}' "/proc/$server/stat"; }
rss() { awk '/VmRSS/ {print $2}' "/proc/$server/status"; }
rss_loaded=$(rss)

view="http://127.0.0.1:$listen/?prefix=svc-0/&sort=name"
cpu0=$(cpu); w0=$(date +%s%N)
$bin/lockscope-bench load --etcd "http://127.0.0.1:$client" --prefix /bench/ --locks "$LOCKS" \
  --rate "$RATE" --seconds "$SECS" --log "$dir/writes.log" >"$dir/load.out" &
load=$!
probe=$(node end2end/bench/dom-latency.js "$view" "$dir/writes.log" "$SECS")
wait $load
cpu1=$(cpu); w1=$(date +%s%N)
hz=$(getconf CLK_TCK)
for _ in $(seq 20); do curl -s -o /dev/null "http://127.0.0.1:$listen/"; done

echo
echo "== lockscope live path: $LOCKS locks in etcd, $RATE changes/s for $SECS s (release build, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg))"
echo "server start -> live with every lock:  $(( (t1 - t0) / 1000000 )) ms"
echo "GET / (default view):                   $page_bytes bytes"
echo "load generator:                         $(cat "$dir/load.out")"
echo "store write -> row in the DOM:          $probe"
echo "server CPU during the load:             $(echo "scale=0; 100 * ($cpu1 - $cpu0) / $hz / (($w1 - $w0) / 1000000000)" | bc) % of one core"
echo "server RSS:                             $(( rss_loaded / 1024 )) MiB loaded ($(( rss_loaded * 1024 / LOCKS )) bytes per lock incl. the empty server), $(( $(rss) / 1024 )) MiB after the load and 20 page views"
