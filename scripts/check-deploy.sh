#!/usr/bin/env bash
# Checks what deploy/ ships, with the tools that will read it:
# - the Prometheus rules: `promtool check rules` and their unit tests
#   (`promtool test rules`, deploy/prometheus/lockscope.rules.test.yml);
# - the systemd unit: `systemd-analyze verify` (any warning fails), its
#   hardening (`systemd-analyze security`, exposure at most 2.0), and its
#   ExecStart command line run for real (as root: in the unit's sandbox,
#   approximated with unshare and setpriv, since no systemd runs here): the
#   server starts from a lockscope.toml passed as the unit passes it, listens
#   on that file's `listen`, keeps its files in the working (state) directory,
#   serves /metrics, and exits 0 on SIGTERM within the unit's TimeoutStopSec;
# - a real Prometheus scraping that server with the rules loaded: every rule
#   evaluates, every query of the Grafana dashboard answers with data.
# The metric names the rules and the dashboard use are checked against a real
# server's /metrics by `cargo test` (server/tests/it/deploy.rs).
# Needs promtool (Debian's prometheus, scripts/install.sh) and a built
# target/debug/lockscope (scripts/test.sh runs this after `cargo test`).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\033[1m[check-deploy]\033[0m %s\n' "$*"; }
bin=$PWD/target/debug/lockscope
unit=deploy/systemd/lockscope.service
# Not under /tmp: the unit's run below gets a private /tmp (PrivateTmp=).
mkdir -p target/tmp
work=$(mktemp -d "$PWD/target/tmp/check-deploy.XXXXXX")
chmod 0755 "$work"
server=
prom=
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  [ -n "$prom" ] && kill "$prom" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

say "promtool check rules"
promtool check rules deploy/prometheus/lockscope.rules.yml
say "promtool test rules"
(cd deploy/prometheus && promtool test rules lockscope.rules.test.yml)
# Every rule has unit tests: a rule added without them fails here.
for alert in $(sed -n 's/^ *- alert: *//p' deploy/prometheus/lockscope.rules.yml); do
  grep -q "alertname: $alert\$" deploy/prometheus/lockscope.rules.test.yml \
    || { echo "$alert has no test in lockscope.rules.test.yml" >&2; exit 1; }
done

# The dashboard's queries are PromQL too: promtool parses each one as a
# recording rule (Grafana's $__rate_interval and $fleet given values).
say "promtool: the dashboard's queries parse"
python3 - deploy/grafana/lockscope.json >"$work/dashboard.rules.yml" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
exprs = [t["expr"] for p in d["panels"] for t in p.get("targets", [])]
assert exprs, "no queries in the dashboard"
print("groups:\n  - name: dashboard\n    rules:")
for i, e in enumerate(exprs):
    e = e.replace("$__rate_interval", "5m").replace("$fleet", ".*")
    print(f"      - record: dashboard_query_{i}\n        expr: {json.dumps(e)}")
PY
promtool check rules "$work/dashboard.rules.yml"

# `verify` also checks that ExecStart's program exists: the unit names the
# installed path (/usr/local/bin/lockscope), so the copy verified names the
# binary cargo built instead; nothing else is changed.
say "systemd-analyze verify $unit"
sed "s|^ExecStart=/usr/local/bin/lockscope |ExecStart=$bin |" "$unit" >"$work/lockscope.service"
grep -q "^ExecStart=$bin " "$work/lockscope.service" || { echo "ExecStart is not /usr/local/bin/lockscope …" >&2; exit 1; }
# verify exits 0 on an unknown key or a bad value (it only warns): any output fails.
out=$(systemd-analyze verify "$work/lockscope.service" 2>&1) || { echo "$out" >&2; exit 1; }
[ -z "$out" ] || { echo "$out" >&2; exit 1; }
say "systemd-analyze security (exposure at most 2.0)"
systemd-analyze security --offline=yes --threshold=20 "$unit" | tail -1

# ExecStart as systemd runs it: %d is the credentials directory (where
# LoadCredential= puts lockscope.toml), the working directory is the state directory.
say "the unit's ExecStart, run"
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$work/credentials" "$work/state"
cat >"$work/credentials/lockscope.toml" <<TOML
listen = "127.0.0.1:$port"
[[fleets]]
name = "main"
store = "sqlite:fleet.db"
TOML
cmd=${exec_start//%d/$work/credentials}
cmd=${cmd/#\/usr\/local\/bin\/lockscope /$bin }
stop_secs=$(sed -n 's/^TimeoutStopSec=\([0-9]*\)s$/\1/p' "$unit")
if [ "$(id -u)" = 0 ]; then
  # As root (CI), the unit's sandbox, approximated as systemd makes it: a
  # user of no account (DynamicUser=; here nobody) owning only the state
  # directory and its credential, no capabilities, no new privileges
  # (CapabilityBoundingSet=, NoNewPrivileges=), every file system read-only
  # but the state directory (ProtectSystem=strict, StateDirectory=), a
  # private /tmp (PrivateTmp=).
  chown -R 65534:65534 "$work/state" "$work/credentials"
  chmod 0700 "$work/state"; chmod 0500 "$work/credentials"; chmod 0400 "$work/credentials/lockscope.toml"
  # shellcheck disable=SC2016 # expanded by the inner shell
  LOCKSCOPE_LOG=warn unshare --mount sh -c '
    set -e
    state=$1; shift
    mount --make-rprivate /
    mount --bind "$state" "$state"
    mount -o remount,bind,ro /
    mount -t tmpfs -o mode=1777 tmpfs /tmp
    cd "$state"
    exec setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs \
      --bounding-set=-all --inh-caps=-all "$@"' sandbox "$work/state" $cmd >"$work/log" 2>&1 &
else
  (cd "$work/state" && LOCKSCOPE_LOG=warn exec $cmd) >"$work/log" 2>&1 &
fi
server=$!
for _ in $(seq 200); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  kill -0 "$server" 2>/dev/null || { cat "$work/log" >&2; echo "lockscope exited at start" >&2; exit 1; }
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$port/metrics" >"$work/metrics"
grep -q '^lockscope_store_up{fleet="main"}' "$work/metrics" \
  || { cat "$work/log" "$work/metrics" >&2; echo "no lockscope_store_up for the configured fleet" >&2; exit 1; }
[ -f "$work/state/fleet.db" ] || { echo "fleet.db is not in the working directory" >&2; exit 1; }

# A real Prometheus scrapes that server every second with the rules loaded:
# every rule evaluates without error, and every dashboard query answers with data.
say "prometheus: the rules evaluate and the dashboard's queries answer"
prom_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$work/prometheus.yml" <<YML
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: ["$PWD/deploy/prometheus/lockscope.rules.yml"]
scrape_configs:
  - job_name: lockscope
    static_configs: [{targets: ["127.0.0.1:$port"]}]
YML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
prom=$!
python3 - "http://127.0.0.1:$prom_port" deploy/grafana/lockscope.json <<'PY' || { cat "$work/prometheus.log" >&2; exit 1; }
import json, sys, time, urllib.parse, urllib.request
base, dashboard = sys.argv[1], json.load(open(sys.argv[2]))
def get(path, **params):
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.load(r)["data"]
def query(expr):
    return get("/api/v1/query", query=expr)["result"]
deadline = time.time() + 30
while True:  # ready, and 5 scrapes in (rates over 10s have samples)
    try:
        if float(query('count_over_time(up{job="lockscope"}[10s])')[0]["value"][1]) >= 5:
            break
    except Exception:
        pass
    if time.time() > deadline:
        sys.exit("prometheus did not scrape lockscope 5 times in 30 s")
    time.sleep(0.5)
time.sleep(1.5)  # a rule evaluation after that
rules = [r for g in get("/api/v1/rules")["groups"] for r in g["rules"]]
bad = [(r["name"], r.get("health"), r.get("lastError")) for r in rules if r.get("health") != "ok"]
assert rules and not bad, f"rules that do not evaluate: {bad}"
exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
empty = [e for e in exprs if not query(e.replace("$__rate_interval", "10s").replace("$fleet", ".*"))]
assert not empty, f"dashboard queries with no data from a live lockscope: {empty}"
print(f"{len(rules)} rules evaluate, {len(exprs)} dashboard queries answer")
PY
kill "$prom"; wait "$prom" 2>/dev/null || true
prom=

kill -TERM "$server"
for _ in $(seq $((stop_secs * 10))); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$server" 2>/dev/null; then echo "lockscope still runs ${stop_secs}s after SIGTERM" >&2; exit 1; fi
status=0; wait "$server" || status=$?
server=
[ "$status" = 0 ] || { cat "$work/log" >&2; echo "lockscope exited $status on SIGTERM" >&2; exit 1; }
say "ok"
