#!/usr/bin/env bash
# Builds lockscope and runs the dashboard on http://127.0.0.1:3000.
#
# With nothing configured it runs on an embedded SQLite file
# (.lockscope/lockscope.db) with a simulated demo fleet, so there is a live,
# contended fleet to look at and no other service is needed. To watch real
# stores, set LOCKSCOPE_ETCD (comma-separated endpoints) and/or LOCKSCOPE_STORES
# (`;`-separated NAME=STORE, see `target/debug/lockscope --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh --run
cargo leptos build
listen=${LOCKSCOPE_LISTEN:-127.0.0.1:3000}
echo "open http://$listen"
exec target/debug/lockscope --listen "$listen" --site-root target/site
