#!/usr/bin/env bash
# Builds the release site and server, and runs the dashboard on http://127.0.0.1:3000.
#
# With nothing configured it runs on an embedded SQLite file
# (.lockscope/lockscope.db) with a simulated demo fleet, so there is a live,
# contended fleet to look at and no other service is needed. To watch real
# stores, set LOCKSCOPE_ETCD (comma-separated endpoints) and/or LOCKSCOPE_STORES
# (`;`-separated NAME=STORE, see `target/release/lockscope --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
# wasm-bindgen-cli is installed by build-site.sh, beside its builds.
scripts/install.sh --run --no-wasm-bindgen
# Release server and size-optimised wasm (wasm-opt from npm's binaryen).
scripts/build-site.sh --release
listen=${LOCKSCOPE_LISTEN:-127.0.0.1:3000}
# Say where to open the page only once the server listens (it prints that line).
target/release/lockscope --listen "$listen" --site-root target/site | while IFS= read -r line; do
  echo "$line"
  case $line in "lockscope listening on "*) echo "open ${line#lockscope listening on }" ;; esac
done
