#!/usr/bin/env bash
# Installs wasm-bindgen-cli at exactly the version Cargo.lock pins (scripts/build-site.sh
# runs it on the wasm), unless that version is on PATH already: only the `wasm-bindgen`
# binary, without the default TLS (rustls and ring serve the test runner's downloads, which
# this project never runs), at opt-level 1: 80 s instead of 104 (138 s of CPU instead of
# 183), the same output byte for byte and as fast (0.4 s for the release wasm, 1.7 s for
# the debug one). Once per machine. Not --locked: its lockfile names a webpki-roots
# version the registry lacks.
#   scripts/install-wasm-bindgen.sh           install it if missing
#   scripts/install-wasm-bindgen.sh --check   only say: exit 0 if installed, 1 if not
set -euo pipefail
cd "$(dirname "$0")/.."
wbg=$(awk '$0 == "name = \"wasm-bindgen\"" { getline; gsub(/[^0-9.]/, ""); print; exit }' Cargo.lock)
[ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" = "$wbg" ] && exit 0
[ "${1:-}" = "--check" ] && exit 1
printf '\033[1m[install]\033[0m %s\n' "cargo install wasm-bindgen-cli $wbg (about 1.5 minutes, once)"
CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
  cargo install wasm-bindgen-cli --version "$wbg" --force --no-default-features --bin wasm-bindgen
