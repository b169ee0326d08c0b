#!/usr/bin/env bash
# Builds lockscope and runs the dashboard on http://127.0.0.1:3000.
#
# With LOCKSCOPE_ETCD set, it watches that etcd. Without it, it starts a local
# etcd (data in .lockscope/etcd, client port 23790) for you and takes a few demo
# locks, so there is something to look at; the embedded SQLite default and the
# simulated demo fleet replace this later.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh --run
cargo leptos build

bin=target/debug/lockscope
listen=${LOCKSCOPE_LISTEN:-127.0.0.1:3000}
if [ -z "${LOCKSCOPE_ETCD:-}" ]; then
  port=${LOCKSCOPE_ETCD_PORT:-23790}
  peer=$((port + 10))
  export LOCKSCOPE_ETCD="http://127.0.0.1:$port"
  mkdir -p .lockscope
  echo "starting a local etcd on $LOCKSCOPE_ETCD (data in .lockscope/etcd, log in .lockscope/etcd.log)"
  etcd --name local --data-dir .lockscope/etcd \
    --listen-client-urls "$LOCKSCOPE_ETCD" --advertise-client-urls "$LOCKSCOPE_ETCD" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "local=http://127.0.0.1:$peer" >.lockscope/etcd.log 2>&1 &
  etcd_pid=$!
  trap 'kill $etcd_pid 2>/dev/null; wait $etcd_pid 2>/dev/null' EXIT
  for _ in $(seq 100); do
    ETCDCTL_API=3 etcdctl --endpoints "$LOCKSCOPE_ETCD" endpoint health >/dev/null 2>&1 && break
    sleep 0.1
  done
  # A few locks to look at; already-held ones are left as they are.
  "$bin" lock billing/invoice-run --purpose "nightly invoice run" --expected-runtime 600 --service billing 2>/dev/null || true
  "$bin" lock search/reindex --purpose "rebuild the product index" --expected-runtime 30 --service search 2>/dev/null || true
  "$bin" lock payments/settlement-eu --purpose "settle EU card payments" --expected-runtime 120 --service payments 2>/dev/null || true
fi
echo "open http://$listen"
"$bin" --listen "$listen" --site-root target/site
