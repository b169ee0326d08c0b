#!/usr/bin/env bash
# Every test lockscope has: unit tests, integration tests against a real etcd
# (started by the tests on free loopback ports), and end-to-end tests in Debian's
# Chromium against the real server. Installs what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh --no-wasm-bindgen
# wasm-bindgen-cli (~1.5 minutes of both cores on a fresh machine, for the site below) builds
# beside the tests' build, whose serial stretches (type checking the server, linking the test
# binaries) leave a core idle; it is waited for before the site is built.
wbg_log=$(mktemp) wbg_done=$(mktemp -u)
(scripts/install-wasm-bindgen.sh >"$wbg_log" 2>&1; echo $? >"$wbg_done") &

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
echo "== build the tests"
cargo test --workspace --locked --no-run
# The site's wasm builds BESIDE the cargo tests, not after them: the integration tests
# mostly wait (for stores to start, leases to expire, servers to answer; a warm run used
# a third of the CPU), so on 2 cores the build fits in their idle time. It runs at the
# lowest priority (nice 19), so the tests, some of which assert how soon a change is
# shown, get the CPU first; its output is printed once the tests are done. Chromium's
# tests run after both, with the machine to themselves.
# The server is the one `cargo test --no-run` has just built (target/debug/lockscope: the
# integration tests run it). A plain `cargo build -p lockscope` would build it again from
# scratch below tokio: dev-dependencies turn on features (tokio's test-util, the store's
# test-util) that change every crate above them, about 8 minutes of one core on a fresh
# machine. The binary the tests built is the same code; those features only add test
# helpers it never calls.
site_log=$(mktemp)
(
  set -e
  while [ ! -s "$wbg_done" ]; do sleep 1; done
  [ "$(cat "$wbg_done")" = 0 ] || { echo "installing wasm-bindgen-cli failed" >&2; exit 1; }
  nice -n 19 scripts/build-site.sh --no-server
) >"$site_log" 2>&1 &
site=$!
# On an interrupt, take the site's build down too (its whole process tree).
kill_tree() { local child; for child in $(pgrep -P "$1"); do kill_tree "$child"; done; kill "$1" 2>/dev/null || true; }
trap 'kill_tree "$site"' EXIT
echo "== unit and integration tests (real etcd; the site builds beside them)"
status=0
cargo test --workspace --locked || status=$?
if [ "$status" = 0 ]; then
  scripts/check-deploy.sh || status=$?  # deploy/: promtool check + test rules, systemd-analyze verify, the unit's ExecStart run
fi
echo "== cargo tests done at ${SECONDS} s; the site (hydrating wasm; the server is the one cargo test built):"
site_status=0
wait "$site" || site_status=$?
trap - EXIT
cat "$wbg_log" "$site_log"; rm -f "$wbg_log" "$wbg_done" "$site_log"
[ "$site_status" = 0 ] || { echo "building the site failed" >&2; exit 1; }
echo "== end-to-end (Chromium, real server, real etcd; from ${SECONDS} s)"
(cd end2end && npx playwright test) || status=$?
echo "== done at ${SECONDS} s"
exit "$status"
