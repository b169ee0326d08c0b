#!/usr/bin/env bash
# The advisory+postgres:// fleet's poll at scale, on demand (not part of CI's pass/fail):
#
#   scripts/bench-advisory.sh [LOCKS]      (default 10000)
#   PROFILE=debug|release (default release), CONNECTIONS (4), WAITERS (10), POLLS (100),
#   SECONDS_SERVED (30), NO_BUILD=1 (use the binaries already built)
#
# Starts a private PostgreSQL on tmpfs (free port, max_locks_per_transaction=1024 so the
# lock table has room), then `lockscope-bench advisory`: LOCKS session-level advisory locks
# over CONNECTIONS connections and WAITERS waiting connections, the fleet's poll statement
# timed POLLS times (p50/p99) and lockscope's CPU per poll in that process. Then, with the
# locks still held, the real server (`lockscope --store pg=advisory+…#limit=…`, poll 1 s):
# the time from its start to live with every lock (/healthz `held`), and its CPU per poll
# over SECONDS_SERVED seconds of polling (utime+stime from /proc, over the polls it made).
# Results: docs/performance.md, "PostgreSQL advisory locks".
set -euo pipefail
cd "$(dirname "$0")/.."
LOCKS=${1:-10000}
CONNECTIONS=${CONNECTIONS:-4}
WAITERS=${WAITERS:-10}
POLLS=${POLLS:-100}
SECONDS_SERVED=${SECONDS_SERVED:-30}
. scripts/bench-lib.sh
bench_build lockscope-bench lockscope
bench_dir advisory
pids=()
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n1)
# PostgreSQL refuses to run as root: as the postgres user when we are root.
su_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  [ -d "$dir/pg" ] && su_pg "$pgbin/pg_ctl" -D "$dir/pg" -m immediate stop >/dev/null 2>&1 || true
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

port=$(free_port)
mkdir -p "$dir/pg" && [ "$(id -u)" = 0 ] && chown postgres "$dir" "$dir/pg"
su_pg "$pgbin/initdb" -D "$dir/pg" -A trust -U postgres >/dev/null
su_pg "$pgbin/pg_ctl" -D "$dir/pg" -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off \
  -c max_locks_per_transaction=1024" -w start >/dev/null
url="postgres://postgres@127.0.0.1:$port/postgres"
echo "== PostgreSQL $("$pgbin/postgres" --version | awk '{print $3}') on tmpfs, $PROFILE build, load $(cut -d' ' -f1-3 /proc/loadavg)"

# The bench holds the locks until it exits: run it, then keep them held for the server part
# with a psql session of our own (the bench's connections end with it).
$bin/lockscope-bench advisory --url "$url" --locks "$LOCKS" --connections "$CONNECTIONS" \
  --waiters "$WAITERS" --polls "$POLLS"

mkfifo "$dir/held"
( psql -X -q -d "$url" -v ON_ERROR_STOP=1 <<EOF
SELECT count(pg_advisory_lock(k)) FROM generate_series(1, $LOCKS) k;
\! echo held > $dir/held
SELECT pg_sleep(3600);
EOF
) >/dev/null &
pids+=($!)
read -r _ <"$dir/held"

ticks=$(getconf CLK_TCK)
cpu_ms() { awk -v t="$ticks" '{print int(($14 + $15) * 1000 / t)}' "/proc/$1/stat"; }
listen=$(free_port)
t0=$(date +%s%N)
$bin/lockscope --store "pg=advisory+$url#limit=$((LOCKS + 1))" --listen "127.0.0.1:$listen" --history off \
  --audit "sqlite:$dir/audit.db" --log warn >"$dir/server.log" 2>&1 &
server=$!
pids+=($server)
until curl -s "http://127.0.0.1:$listen/healthz" | grep -q "\"held\":$LOCKS"; do sleep 0.1; done
t1=$(date +%s%N)
echo "lockscope start -> live with $LOCKS advisory locks: $(( (t1 - t0) / 1000000 )) ms"
sleep 3
# The polls it made: distinct `polled.at` of GET /api/v1/fleets (a poll starts 1 s after the
# previous one's snapshot is sent, so there are fewer than one a second).
count_polls() {
  python3 - "$listen" "$1" <<'EOF'
import json, sys, time, urllib.request
seen, end = set(), time.time() + float(sys.argv[2])
while time.time() < end:
    fleets = json.load(urllib.request.urlopen("http://127.0.0.1:%s/api/v1/fleets" % sys.argv[1]))
    seen.add((fleets[0].get("polled") or {}).get("at"))
    time.sleep(0.05)
print(max(len(seen) - 1, 1))
EOF
}
c0=$(cpu_ms "$server")
polls=$(count_polls "$SECONDS_SERVED")
c1=$(cpu_ms "$server")
echo "lockscope server CPU while polling (poll=1s): $(( c1 - c0 )) ms over $polls polls in ${SECONDS_SERVED} s: $(( (c1 - c0) / polls )) ms per poll"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
