#!/usr/bin/env bash
# The live path's benchmark, on demand (not part of CI's pass/fail):
#
#   scripts/bench.sh [LOCKS] [RATE] [SECONDS] [VIEWERS]     (defaults: 1000 1000 20 200)
#
# Starts a private store, fills it with LOCKS locks, starts `lockscope` on it, then
# writes RATE changes per second for SECONDS (`lockscope-bench load`, 10 % of them to
# the rows the browser's view shows) while two probes watch:
# - VIEWERS websocket subscribers, each on a different view, acknowledging every
#   frame (`lockscope-bench viewers`; 0 skips it): store write -> frame p50 / p95 /
#   p99 / max over every (viewer, change) it saw, writes to a window not shown within
#   1 s, and how many viewers lagged (a frame over 1 s old, or such a write);
# - Debian's Chromium on one view (`end2end/bench/dom-latency.js`): store write -> row
#   in the DOM (p50 / p95 / p99 / max), changes never shown, and rows that still show an
#   older change than the last one written to them at the end (the page showing the past).
# Also prints: time from server start to live, page size, server CPU during the load,
# server RSS; then the goals, each with this run's figure and a met/missed line.
# Method and results: docs/performance.md.
#
# Environment:
#   STORE=etcd (default)  a private etcd on tmpfs, free ports
#   STORE=sqlite          a SQLite file on tmpfs (`--store bench=sqlite:///dev/shm/…`)
#   STORE=postgres://…    that PostgreSQL database (give it a database of its own: the
#                         locks are counted, and `fill` writes LOCKS locks into it)
#   PROFILE=debug         use the debug build instead of the release build
#   BROWSER=0             skip the Chromium probe (no built site needed)
#   KEEP=DIR              copy the run's logs there at the end (server.log, writes.log, …)
#   LOG=LEVEL             the server's log level (default warn), e.g. lockscope=debug
#   VIEW_ROWS=N           rows per websocket viewer's window (default 50; the page's first is 40)
#   ACK_AFTER_MS=N        the websocket viewers acknowledge each frame N ms after it came (as a
#                         page that acknowledges after its paint), not at once
#   NO_BUILD=1            use the binaries already in target/PROFILE (say, a debug build made
#                         with `cargo build --workspace --bins`) rather than building them
#   LAYOUT=etcd-mutex     etcd's native mutexes instead (STORE=etcd only): fill LOCKS mutex
#                         keys (`lockscope-bench mutex fill`, 16 per lease), serve them as an
#                         `etcd-mutex:` fleet, then hand RATE locks over per second for SECONDS
#                         (`lockscope-bench mutex load`), one write in 200 timed to its row in
#                         the API; no viewers or browser probe (their stamps are a lockscope
#                         record's purpose, which a mutex key has not)
#   HISTORY=on (default)  the lock history on, as a server has it by default, in a SQLite file in
#                         the run's temp dir; the run waits until it has written the first
#                         snapshot and prints how long after live that took, the RSS peak
#                         (VmHWM) by then and the RSS at rest after it
#   HISTORY=off           `--history off`
#   CHURN=1               rows entering and leaving the window instead of changing in place:
#                         the load takes new locks that sort into the browser's window and
#                         releases them again, RATE operations per second in all (`load
#                         --churn`); the probe also checks that every lock still held is in
#                         the window and every released one has left, and the page's main
#                         thread's busy share is judged (issue 26)
#   SITE=target/site      the built site the server serves to the probe (say, a release site
#                         kept apart from the debug one)
#   VIEW=QUERY            the probe's view instead of `fleet=bench&prefix=svc-0/&sort=name`
#                         (say `fleet=bench&sort=name&offset=500000`: a view new to the server);
#                         the probe also reports navigation start -> the page live
#   SERVER=FILE           run this lockscope binary as the server instead of $bin/lockscope (say, a
#                         copy of an earlier release build, for runs in turn against the new one);
#                         the load generator and probes stay target/PROFILE's
#   PERF=FILE             `perf record -F 499 -g` of the server for the viewers' first PERF_SECS
#                         seconds (default 6: the burst of new views), into FILE (`perf report -i FILE`)
set -euo pipefail
cd "$(dirname "$0")/.."
LOCKS=${1:-1000}
RATE=${2:-1000}
SECS=${3:-20}
VIEWERS=${4:-200}
STORE=${STORE:-etcd}
PROFILE=${PROFILE:-release}
BROWSER=${BROWSER:-1}
HISTORY=${HISTORY:-on}
CHURN=${CHURN:-0}
SITE=${SITE:-target/site}

build=cargo; [ "${NO_BUILD:-0}" = 0 ] || build=true
case $PROFILE in
  release) $build build --release -p lockscope --bins; bin=target/release ;;
  debug) $build build -p lockscope --bins; bin=target/debug ;;
  *) echo "PROFILE=$PROFILE: release or debug" >&2; exit 1 ;;
esac
server_bin=${SERVER:-$bin/lockscope}
[ -x "$server_bin" ] || { echo "SERVER=$server_bin: not an executable" >&2; exit 1; }
if [ "$BROWSER" != 0 ] && [ ! -f "$SITE/pkg/lockscope.wasm" ]; then
  echo "no built site in $SITE: run scripts/run.sh (or cargo leptos build) first, or BROWSER=0" >&2
  exit 1
fi
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
dir=$(mktemp -d /dev/shm/lockscope-bench-XXXX)
listen=$(free_port)
pids=()
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  # The logs only (the stores' files can be gigabytes); a copy that fails still cleans up.
  if [ -n "${KEEP:-}" ]; then
    { mkdir -p "$KEEP" && cp "$dir"/*.log "$dir"/*.out "$dir"/*.err "$dir"/*.fig "$KEEP"/ 2>/dev/null; } ||
      echo "KEEP=$KEEP: not every file was copied" >&2
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
case $HISTORY in
  on) history=(--history "sqlite:$dir/history.db") ;;
  off) history=(--history off) ;;
  *) echo "HISTORY=$HISTORY: on or off" >&2; exit 1 ;;
esac

# bench_store: how lockscope-bench names the store; serve_store: how the server does.
case $STORE in
  etcd)
    client=$(free_port); peer=$(free_port)
    etcd --name bench --data-dir "$dir/etcd" --quota-backend-bytes 8589934592 \
      --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
      --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
      --initial-cluster "bench=http://127.0.0.1:$peer" --log-level error >"$dir/etcd.log" 2>&1 &
    pids+=($!)
    until curl -sf "http://127.0.0.1:$client/health" >/dev/null; do sleep 0.2; done
    bench_store=(--etcd "http://127.0.0.1:$client" --prefix /bench/)
    serve_store=(--etcd "http://127.0.0.1:$client" --prefix /bench/ --fleet bench)
    where="etcd $(etcd --version | awk '/etcd Version/ {print $3}') on tmpfs"
    ;;
  sqlite)
    bench_store=(--store "sqlite://$dir/bench.db")
    serve_store=(--store "bench=sqlite://$dir/bench.db")
    where="SQLite on tmpfs"
    ;;
  postgres://* | postgresql://*)
    bench_store=(--store "$STORE")
    serve_store=(--store "bench=$STORE")
    where="PostgreSQL"
    ;;
  *) echo "STORE=$STORE: etcd, sqlite or a postgres:// URL" >&2; exit 1 ;;
esac
if [ "${LAYOUT:-lockscope}" = etcd-mutex ]; then
  [ "$STORE" = etcd ] || { echo "LAYOUT=etcd-mutex needs STORE=etcd" >&2; exit 1; }
  mx=(--etcd "http://127.0.0.1:$client" --prefix /mx/ --locks "$LOCKS")
  $bin/lockscope-bench mutex fill "${mx[@]}"
  t0=$(date +%s%N)
  "$server_bin" --store "bench=etcd-mutex:http://127.0.0.1:$client#/mx/" --unlocker bench=off \
    --listen "127.0.0.1:$listen" --site-root "$SITE" --log warn >"$dir/server.log" 2>&1 &
  server=$!
  pids+=($server)
  until curl -s "http://127.0.0.1:$listen/healthz" | grep -q "\"held\":$LOCKS"; do sleep 0.1; done
  t1=$(date +%s%N)
  rss_loaded=$(awk '/VmRSS/ {print $2}' "/proc/$server/status")
  cpu() { awk '{print $14 + $15}' "/proc/$server/stat"; }
  cpu0=$(cpu); w0=$(date +%s%N)
  out=$($bin/lockscope-bench mutex load "${mx[@]}" --rate "$RATE" --seconds "$SECS" --url "http://127.0.0.1:$listen")
  cpu1=$(cpu); w1=$(date +%s%N)
  echo
  echo "== lockscope etcd-mutex fleet: $LOCKS etcd native mutexes in $where, $RATE hand-offs/s for $SECS s ($PROFILE build, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg))"
  echo "server start -> live with every lock:  $(( (t1 - t0) / 1000000 )) ms"
  echo "load:                                   $out"
  echo "server CPU during the load:             $(echo "scale=0; 100 * ($cpu1 - $cpu0) / $(getconf CLK_TCK) / (($w1 - $w0) / 1000000000)" | bc) % of one core"
  echo "server RSS:                             $(( rss_loaded / 1024 )) MiB loaded ($(( rss_loaded * 1024 / LOCKS )) bytes per lock incl. the empty server), $(( $(awk '/VmRSS/ {print $2}' "/proc/$server/status") / 1024 )) MiB after the load"
  exit 0
fi
$bin/lockscope-bench fill "${bench_store[@]}" --locks "$LOCKS"

t0=$(date +%s%N)
# Every viewer connects from this one address: room for them past [limits]' default 64.
printf '[limits]\nws_per_identity = %d\nws_per_address = %d\n' $((VIEWERS + 16)) $((VIEWERS + 16)) >"$dir/lockscope.toml"
"$server_bin" --config "$dir/lockscope.toml" "${serve_store[@]}" "${history[@]}" --listen "127.0.0.1:$listen" \
  --site-root "$SITE" --log "${LOG:-warn}" >"$dir/server.log" 2>&1 &
server=$!
pids+=($server)
until curl -s "http://127.0.0.1:$listen/healthz" | grep -q "\"held\":$LOCKS"; do sleep 0.1; done
t1=$(date +%s%N)
page_bytes=$(curl -s "http://127.0.0.1:$listen/" | wc -c)
cpu() { awk '{print $14 + $15}' "/proc/$server/stat"; }
rss() { awk '/VmRSS/ {print $2}' "/proc/$server/status"; }
rss_loaded=$(rss)
# The server's RSS every second from here on (its peak is judged: viewers'
# indexes are freed when they leave, before "after the load" is read).
(while kill -0 "$server" 2>/dev/null; do rss >>"$dir/rss.log" 2>/dev/null; sleep 1; done) &
pids+=($!)
history_out="off (HISTORY=off)"
if [ "$HISTORY" = on ]; then
  # Caught up: every lock's acquisition written, nothing queued.
  metric() { curl -s "http://127.0.0.1:$listen/metrics" | awk -v m="$1" '$1 ~ m {print $2; exit}'; }
  until [ "$(metric '^lockscope_history_events_written')" -ge "$LOCKS" ] 2>/dev/null &&
    [ "$(metric '^lockscope_history_events_queued')" = 0 ]; do sleep 0.2; done
  t2=$(date +%s%N)
  hwm=$(awk '/VmHWM/ {print $2}' "/proc/$server/status")
  sleep 2
  rss_rest=$(rss)
  history_out="first snapshot written $(( (t2 - t1) / 1000000 )) ms after live; RSS peak by then $(( hwm / 1024 )) MiB ($(( hwm * 1024 / LOCKS )) bytes per lock), at rest after it $(( rss_rest / 1024 )) MiB ($(( rss_rest * 1024 / LOCKS )) bytes per lock)"
fi

# The load reads what it needs first (at 1,000,000 SQL locks, seconds of fencing
# tokens) and says when it is ready; its first write waits for `load.go`, so the
# viewers and the page are timed from its first write, not its launch.
churn=(); [ "$CHURN" = 0 ] || churn=(--churn)
$bin/lockscope-bench load "${bench_store[@]}" --locks "$LOCKS" "${churn[@]}" \
  --rate "$RATE" --seconds "$SECS" --log "$dir/writes.log" --ready "$dir/load.ready" --go "$dir/load.go" \
  >"$dir/load.out" &
load=$!
pids+=($load)
until [ -e "$dir/load.ready" ]; do
  kill -0 $load 2>/dev/null || { echo "lockscope-bench load failed:" >&2; cat "$dir/load.out" >&2; exit 1; }
  sleep 0.1
done
cpu0=$(cpu); w0=$(date +%s%N)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
# The viewers subscribe a second before the load's first write and watch until about two
# seconds after its last, then judge every logged write to their windows.
if [ "$VIEWERS" -gt 0 ]; then
  $bin/lockscope-bench viewers --url "http://127.0.0.1:$listen" --fleet bench --viewers "$VIEWERS" \
    --seconds $((SECS + 3)) --writes "$dir/writes.log" --figures "$dir/viewers.fig" --ack-after-ms "${ACK_AFTER_MS:-0}" \
    --limit "${VIEW_ROWS:-50}" \
    >"$dir/viewers.out" 2>"$dir/viewers.err" &
  viewers=$!
  pids+=($viewers)
  if [ -n "${PERF:-}" ]; then
    perf record -F 499 -g -o "$PERF" -p "$server" -- sleep "${PERF_SECS:-6}" >"$dir/perf.out" 2>&1 &
    pids+=($!)
  fi
  sleep 1
fi
touch "$dir/load.go"
probe="skipped (BROWSER=0)"
if [ "$BROWSER" != 0 ]; then
  view="http://127.0.0.1:$listen/?${VIEW:-fleet=bench&prefix=svc-0/&sort=name}"
  # The probe reads the page once `load.done` exists (the write log complete).
  node end2end/bench/dom-latency.js "$view" "$dir/writes.log" "$SECS" "$dir/load.done" \
    >"$dir/probe.out" 2>"$dir/probe.err" &
  probe_pid=$!
  pids+=($probe_pid)
fi
wait $load || { echo "lockscope-bench load failed:" >&2; cat "$dir/load.out" >&2; exit 1; }
touch "$dir/load.done"
cpu1=$(cpu); w1=$(date +%s%N)
if [ "$BROWSER" != 0 ]; then
  # A probe that fails (say, the page does not load in its 30 s) is reported with the
  # rest, not the end of the run.
  if wait $probe_pid; then
    probe=$(cat "$dir/probe.out")
  else
    probe="failed: $(grep -m1 -E 'Error|error' "$dir/probe.err" || tail -n1 "$dir/probe.err")"
  fi
fi
viewers_out="skipped (VIEWERS=0)"
if [ "$VIEWERS" -gt 0 ]; then
  wait $viewers || { echo "lockscope-bench viewers failed:" >&2; cat "$dir/viewers.err" >&2; exit 1; }
  viewers_out=$(cat "$dir/viewers.out")
fi
hz=$(getconf CLK_TCK)
for _ in $(seq 20); do curl -s -o /dev/null "http://127.0.0.1:$listen/"; done

echo
changes="changes/s"; [ "$CHURN" = 0 ] || changes="rows entering or leaving the window per second (CHURN=1)"
[ -z "${SERVER:-}" ] || echo "server binary: $server_bin"
echo "== lockscope live path: $LOCKS locks in $where, $RATE $changes for $SECS s, $VIEWERS websocket viewers, history $HISTORY ($PROFILE build, $(nproc) cores, load average $load_start as the viewers and load began, $(cut -d' ' -f1-3 /proc/loadavg) at the end)"
echo "server start -> live with every lock:  $(( (t1 - t0) / 1000000 )) ms"
echo "history:                                $history_out"
echo "GET / (default view):                   $page_bytes bytes"
echo "load generator:                         $(cat "$dir/load.out")"
echo "websocket viewers:                      $viewers_out"
if [ -s "$dir/viewers.err" ]; then
  echo "  lagged or failed viewers ($(wc -l <"$dir/viewers.err")), the first 5:"
  head -5 "$dir/viewers.err" | sed 's/^/    /'
  { grep -o 'error: .*' "$dir/viewers.err" || true; } | cut -c1-100 | sort | uniq -c | sed 's/^/    errors: /' | head -5
fi
echo "store write -> row in the DOM:          $probe"
echo "server CPU during the load:             $(echo "scale=0; 100 * ($cpu1 - $cpu0) / $hz / (($w1 - $w0) / 1000000000)" | bc) % of one core"
rss_after=$(rss)
rss_peak=$(sort -n "$dir/rss.log" | tail -1)
echo "server RSS:                             $(( rss_loaded / 1024 )) MiB loaded ($(( rss_loaded * 1024 / LOCKS )) bytes per lock incl. the empty server), peak $(( rss_peak / 1024 )) MiB, $(( rss_after / 1024 )) MiB after the load and 20 page views"

# The goals (issue 26), each with a met/missed line for this run's figures; a goal
# whose conditions this run does not meet says so instead.
goal() { # goal WHAT FIGURE LIMIT [UNIT]: met when 0 <= FIGURE <= LIMIT
  local verdict=missed
  if [ "$2" = "" ] || [ "$2" -lt 0 ]; then verdict="not measured"; elif [ "$2" -le "$3" ]; then verdict=met; fi
  printf '  %-58s %8s %-3s  goal <= %s %s: %s\n' "$1" "${2:-?}" "${4:-}" "$3" "${4:-}" "$verdict"
}
echo "goals:"
goal "server start -> live with every lock" $(( (t1 - t0) / 1000000 )) 30000 ms
if [ "$LOCKS" -ge 100000 ]; then
  goal "RSS per held lock, loaded (incl. the empty server)" $(( rss_loaded * 1024 / LOCKS )) 1024 B
else
  echo "  RSS per held lock (goal <= 1024 B): judged from 100,000 locks (the empty server dominates below)"
fi
if [ "$VIEWERS" -gt 0 ] && [ -s "$dir/viewers.fig" ]; then
  # shellcheck disable=SC1091
  . "$dir/viewers.fig"
  goal "$VIEWERS views opened at once: first frame, slowest" $((no_first_frame > 0 ? 999999 : first_frame_max_ms)) 1000 ms
  goal "$VIEWERS views opened at once: first frame p50" "$first_frame_p50_ms" 200 ms
  goal "$VIEWERS views: viewers lagged (or failed)" $((lagged + errors)) 0
  goal "$VIEWERS views: RSS growth, loaded -> peak during the run" $(( (rss_peak - rss_loaded) / 1024 )) 200 MiB
  if [ "$VIEWERS" = 1 ] && [ "$RATE" -le 100 ]; then
    goal "store write -> idle websocket client p50, $RATE writes/s" "$write_frame_p50_ms" 5 ms
  else
    echo "  store write -> idle websocket client p50 (goal <= 5 ms): judged with VIEWERS=1, RATE<=100 (e.g. bench.sh 1000 100 20 1)"
  fi
fi
if [ "$BROWSER" != 0 ]; then
  nav=$(grep -o '"navigation_to_live_ms":[0-9]*' <<<"$probe" | cut -d: -f2)
  if [ -n "${VIEW:-}" ]; then
    goal "navigation -> live, a view new to the server (VIEW)" "${nav:--1}" 500 ms
  else
    echo "  navigation -> live: ${nav:-?} ms (goal <= 500 ms: judged on a view new to the server, VIEW=...)"
  fi
  dom_p50=$(grep -o '"p50_ms":[0-9]*' <<<"$probe" | head -1 | cut -d: -f2)
  dom_p99=$(grep -o '"p99_ms":[0-9]*' <<<"$probe" | head -1 | cut -d: -f2)
  goal "store write -> row in the DOM p50" "${dom_p50:--1}" 25 ms
  goal "store write -> row in the DOM p99" "${dom_p99:--1}" 100 ms
  busy=$(grep -o '"main_thread_busy_pct":[0-9]*' <<<"$probe" | cut -d: -f2)
  goal "page's main thread busy during the load" "${busy:--1}" 40 %
  cpu=$(grep -o '"cpu_pct":[0-9]*' <<<"$probe" | cut -d: -f2)
  echo "    (its CPU time: ${cpu:-?} % of a core; the busy share counts tasks' wall time, waits for a core included)"
  never=$(grep -o '"never_shown":[0-9]*' <<<"$probe" | cut -d: -f2)
  goal "changes never shown" "${never:--1}" 0
  stale=$(grep -o '"stale_at_end":[0-9]*' <<<"$probe" | cut -d: -f2)
  goal "rows showing an older change than the last written, at the end" "${stale:--1}" 0
  if [ "$CHURN" != 0 ]; then
    not_shown=$(grep -o '"held_not_shown":[0-9]*' <<<"$probe" | cut -d: -f2)
    not_left=$(grep -o '"released_not_left":[0-9]*' <<<"$probe" | cut -d: -f2)
    goal "churn: locks held at the end but not in the window" "${not_shown:--1}" 0
    goal "churn: released locks still in the window at the end" "${not_left:--1}" 0
  fi
fi
