#!/usr/bin/env bash
# The redis:// fleet at scale, on demand (not part of CI's pass/fail):
#
#   scripts/bench-redis.sh [LOCKS]      (default 100000)
#
# Starts a private redis-server (free port, no persistence), writes LOCKS locks the way
# redis-py's Lock and redsync take them (`SET jobs:NNNNNN token NX PX 600000`, piped through
# `redis-cli --pipe`), then starts `lockscope --store perf=redis://…?match=jobs:*` (PROFILE=
# release|debug, default release; NO_BUILD=1 uses the binary already built) and prints the time from its start to live with
# every lock (/healthz `held`), and its RSS then, against its RSS watching an empty database:
# the cost per lock. Results: docs/performance.md, "Redis".
set -euo pipefail
cd "$(dirname "$0")/.."
LOCKS=${1:-100000}
. scripts/bench-lib.sh
bench_build lockscope
bench_dir redis
port=$(free_port)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" --loglevel warning \
  >"$dir/redis.log" 2>&1 &
pids+=($!)
until redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; do sleep 0.1; done

t=$(date +%s%N)
python3 - "$LOCKS" <<'EOF' | redis-cli -p "$port" --pipe >/dev/null
import sys, uuid
for i in range(int(sys.argv[1])):
    key, tok = "jobs:%06d" % i, uuid.uuid4().hex
    sys.stdout.write("*6\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$2\r\nNX\r\n$2\r\nPX\r\n$6\r\n600000\r\n"
                     % (len(key), key, len(tok), tok))
EOF
echo "filled $(redis-cli -p "$port" dbsize) locks in $(( ($(date +%s%N) - t) / 1000000 )) ms"

rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
# Sets $listen and $server (no subshell: both are needed after).
serve() {
  listen=$(free_port)
  $bin/lockscope --store "perf=redis://127.0.0.1:$port/$1?match=jobs:*" --listen "127.0.0.1:$listen" \
    --history off --audit "sqlite:$dir/audit-$2.db" --log warn >"$dir/server-$2.log" 2>&1 &
  server=$!
  pids+=("$server")
}

serve 1 empty
empty_server=$server
until curl -sf "http://127.0.0.1:$listen/healthz" >/dev/null; do sleep 0.1; done
sleep 3
rss_empty=$(rss "$empty_server")
kill "$empty_server"

t0=$(date +%s%N)
serve 0 full
until curl -s "http://127.0.0.1:$listen/healthz" | grep -q "\"held\":$LOCKS"; do sleep 0.1; done
t1=$(date +%s%N)
rss_full=$(rss "$server")
echo "$PROFILE build, load $(cut -d" " -f1-3 /proc/loadavg)"
echo "start -> live with $LOCKS locks: $(( (t1 - t0) / 1000000 )) ms"
echo "RSS: $rss_empty KiB empty, $rss_full KiB with $LOCKS locks: $(( (rss_full - rss_empty) * 1024 / LOCKS )) bytes per lock"

# A write -> row at RATE writes/s for SECONDS: each write hands a lock to a new holder (`SET key
# newtoken PX 600000`, what a redis-py lock taken again right after a release leaves); one write
# in 200 is timed from redis's OK to the new token in `GET /api/v1/fleets/perf/locks/KEY`
# (polled every 20 ms by a second thread, at most 10 s).
RATE=${RATE:-1000} SECONDS_LOADED=${SECONDS_LOADED:-20}
python3 - "$port" "$listen" "$LOCKS" "$RATE" "$SECONDS_LOADED" <<'EOF'
import sys, time, threading, uuid, urllib.request, redis
port, listen, locks, rate, secs = (int(a) for a in sys.argv[1:])
r = redis.Redis(port=port)
lat, lost, samples = [], [0], []
def probe(key, tok, t0):
    url = "http://127.0.0.1:%d/api/v1/fleets/perf/locks/%s" % (listen, key)
    while time.monotonic() - t0 < 10:
        try:
            if tok in urllib.request.urlopen(url, timeout=5).read().decode():
                lat.append((time.monotonic() - t0) * 1000); return
        except Exception:
            pass
        time.sleep(0.02)
    lost[0] += 1
start, n = time.monotonic(), 0
while time.monotonic() - start < secs:
    due = start + n / rate
    now = time.monotonic()
    if due > now:
        time.sleep(due - now)
    key, tok = "jobs:%06d" % (n * 7919 % locks), uuid.uuid4().hex
    r.set(key, tok, px=600000)
    if n % 200 == 0:
        t = threading.Thread(target=probe, args=(key, tok, time.monotonic())); t.start(); samples.append(t)
    n += 1
took = time.monotonic() - start
for t in samples: t.join()
lat.sort()
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")
print("load: %d writes in %.1f s (%.0f/s); write -> row in the API p50 %.0f / p95 %.0f / p99 %.0f / max %.0f ms over %d sampled writes (%d not shown within 10 s)"
      % (n, took, n / took, q(0.5), q(0.95), q(0.99), lat[-1] if lat else float("nan"), len(lat), lost[0]))
EOF
echo "server RSS after the load: $(rss "$server") KiB; load $(cut -d" " -f1-3 /proc/loadavg)"
