#!/usr/bin/env bash
# Every test lockscope has: unit tests, integration tests against a real etcd
# (started by the tests on free loopback ports), and end-to-end tests in Debian's
# Chromium against the real server. Installs what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh --no-wasm-bindgen
# wasm-bindgen-cli (~3 minutes of both cores on a fresh machine, for the site below) builds
# beside the tests' build, whose serial stretches (type checking the server, linking the test
# binaries) leave a core idle; it is waited for before the site is built.
wbg_log=$(mktemp)
scripts/install-wasm-bindgen.sh >"$wbg_log" 2>&1 &
wbg_install=$!

export RUST_BACKTRACE=1
# A fresh clone (CI) gains nothing from incremental caches: they would only add
# ~3 GB to a disk that CI shares (stop 33's CI ran out of space). A warm target
# keeps cargo's default, so local runs do not rebuild the workspace crates.
if [ ! -d target/debug ]; then export CARGO_INCREMENTAL=0; fi
echo "== formatting"
cargo fmt --all --check
echo "== import circles between modules (scripts/check-modules.py, tested by its --self-test)"
scripts/check-modules.py --self-test
# --parents=server::web: web/'s children import state, error and caller, never web/mod.rs.
scripts/check-modules.py --parents=server::web model app server
echo "== unit and integration tests (real etcd)"
cargo test --workspace --locked
scripts/check-deploy.sh   # deploy/: promtool check + test rules, systemd-analyze verify, the unit's ExecStart run
echo "== build the site (hydrating wasm; the server is the one cargo test built)"
# `cargo test --workspace` has just built target/debug/lockscope (the integration
# tests run it). A plain `cargo build -p lockscope` would build it again from
# scratch below tokio: dev-dependencies turn on features (tokio's test-util, the
# store's test-util) that change every crate above them, about 8 minutes of one
# core on a fresh machine. The binary the tests built is the same code; those
# features only add test helpers it never calls.
wait "$wbg_install" || { cat "$wbg_log" >&2; echo "installing wasm-bindgen-cli failed" >&2; exit 1; }
cat "$wbg_log"; rm -f "$wbg_log"
scripts/build-site.sh --no-server
echo "== end-to-end (Chromium, real server, real etcd)"
(cd end2end && npx playwright test)
