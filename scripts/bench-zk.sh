#!/usr/bin/env bash
# The zk:// fleet at scale, on demand (not part of CI's pass/fail):
#
#   scripts/bench-zk.sh [LOCKS]      (default 100000)
#
# Starts a private standalone ZooKeeper (Debian's package, data on tmpfs, free port),
# has one kazoo session hold LOCKS locks the documented recipe's way (a persistent
# znode /perf/job-NNNNNN with one ephemeral sequential child lock-NNNNNNNNNN each), then
# starts `lockscope --store perf=zk://…/perf` (PROFILE=release|debug, default release;
# NO_BUILD=1 uses the binary already built) and prints the time from its start to live with every lock (/healthz `held`),
# and its RSS then, against its RSS watching an empty ROOT: the cost per lock.
# Results: docs/performance.md, "ZooKeeper".
set -euo pipefail
cd "$(dirname "$0")/.."
LOCKS=${1:-100000}
. scripts/bench-lib.sh
bench_build lockscope
bench_dir zk
zk=$(free_port)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

cat >"$dir/zoo.cfg" <<EOF
tickTime=200
dataDir=$dir/data
clientPort=$zk
clientPortAddress=127.0.0.1
admin.enableServer=false
maxClientCnxns=0
maxSessionTimeout=60000
4lw.commands.whitelist=ruok
EOF
java -Xmx2g -Djute.maxbuffer=16777216 -cp /usr/share/java/zookeeper.jar \
  org.apache.zookeeper.server.ZooKeeperServerMain "$dir/zoo.cfg" >"$dir/zk.log" 2>&1 &
pids+=($!)
until [ "$( (exec 3<>/dev/tcp/127.0.0.1/$zk && printf ruok >&3 && cat <&3) 2>/dev/null)" = imok ]; do sleep 0.2; done

# One kazoo session holds every lock until killed (its nodes are ephemeral).
mkfifo "$dir/ready"
python3 - "$zk" "$LOCKS" >"$dir/ready" <<'EOF' &
import sys, time
from kazoo.client import KazooClient
zk = KazooClient(hosts="127.0.0.1:" + sys.argv[1], timeout=30.0)
zk.start()
n = int(sys.argv[2])
t = time.time()
zk.ensure_path("/perf")
zk.ensure_path("/empty")
for start in range(0, n, 5000):
    batch = range(start, min(n, start + 5000))
    for r in [zk.create_async("/perf/job-%06d" % i) for i in batch]:
        r.get()
    for r in [zk.create_async("/perf/job-%06d/lock-" % i, ephemeral=True, sequence=True) for i in batch]:
        r.get()
print("filled %d locks in %.1f s" % (n, time.time() - t), flush=True)
while True:
    time.sleep(3600)
EOF
pids+=($!)
read -r filled <"$dir/ready"
echo "$filled"

rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
serve() {
  listen=$(free_port)
  $bin/lockscope --store "perf=zk://127.0.0.1:$zk$1" --listen "127.0.0.1:$listen" --history off \
    --audit "sqlite:$dir/audit-$2.db" --log warn >"$dir/server-$2.log" 2>&1 &
  server=$!
  pids+=($server)
}

serve /empty empty
empty_server=$server
until curl -sf "http://127.0.0.1:$listen/healthz" >/dev/null; do sleep 0.1; done
sleep 3
rss_empty=$(rss "$empty_server")
kill "$empty_server"

t0=$(date +%s%N)
serve /perf full
until curl -s "http://127.0.0.1:$listen/healthz" | grep -q "\"held\":$LOCKS"; do sleep 0.1; done
t1=$(date +%s%N)
rss_full=$(rss "$server")
echo "$PROFILE build, load $(cut -d" " -f1-3 /proc/loadavg)"
echo "start -> live with $LOCKS locks: $(( (t1 - t0) / 1000000 )) ms"
echo "RSS: $rss_empty KiB empty, $rss_full KiB with $LOCKS locks: $(( (rss_full - rss_empty) * 1024 / LOCKS )) bytes per lock"
