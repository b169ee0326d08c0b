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
PROFILE=${PROFILE:-release}
case $PROFILE in
  release) bin=target/release; build=(cargo build --release --locked -p lockscope --bin lockscope) ;;
  debug) bin=target/debug; build=(cargo build --workspace --locked --bins) ;;
  *) echo "PROFILE=$PROFILE: release or debug" >&2; exit 1 ;;
esac
[ -n "${NO_BUILD:-}" ] || "${build[@]}"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
dir=$(mktemp -d /dev/shm/lockscope-bench-redis-XXXX)
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
