#!/usr/bin/env bash
# Every test lockscope has: unit tests, integration tests against a real etcd
# (started by the tests on free loopback ports), and end-to-end tests in Debian's
# Chromium against the real server. Installs what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh

export RUST_BACKTRACE=1
echo "== formatting"
cargo fmt --all --check
echo "== unit and integration tests (real etcd)"
cargo test --workspace --locked
echo "== build the site (server + hydrating wasm)"
scripts/build-site.sh
echo "== end-to-end (Chromium, real server, real etcd)"
(cd end2end && npx playwright test)
