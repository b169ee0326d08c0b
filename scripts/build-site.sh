#!/usr/bin/env bash
# Builds the site into target/site exactly as `cargo leptos build` lays it out —
# the `lockscope` server binary, pkg/lockscope.{js,wasm} (the hydrating app) and
# pkg/lockscope.css, plus public/ — with nothing beyond cargo, wasm-bindgen-cli
# (the version Cargo.lock pins) and, for --release, wasm-opt from npm's binaryen.
# It spares a fresh machine cargo-leptos's 14-minute install; `cargo leptos build`
# and `cargo leptos watch` keep working for development (Cargo.toml's
# [workspace.metadata.leptos] describes the same layout).
#
#   scripts/build-site.sh            debug server (target/debug) and wasm
#   scripts/build-site.sh --release  release server (target/release), size-optimised wasm
#   scripts/build-site.sh --no-server  the wasm only, beside the debug server `cargo test`
#                                    just built (scripts/test.sh: see there)
set -euo pipefail
cd "$(dirname "$0")/.."

release=0 server=1
case "${1:-}" in
  --release) release=1 ;;
  --no-server) server=0 ;;
  "") ;;
  *) echo "usage: $0 [--release|--no-server]" >&2; exit 2 ;;
esac
site=target/site
pkg=$site/pkg
# (The LEPTOS_* build variables cargo-leptos would set are in .cargo/config.toml.)

if [ "$release" = 1 ]; then
  server_profile=release wasm_profile=wasm-release wasm_dir=wasm-release
  command -v wasm-opt >/dev/null || PATH="$PWD/scripts/wasm-opt/node_modules/.bin:$PATH"
  command -v wasm-opt >/dev/null || { echo "no wasm-opt: run scripts/install.sh" >&2; exit 1; }
else
  server_profile=dev wasm_profile=dev wasm_dir=debug
fi

# wasm-bindgen-cli (scripts/install-wasm-bindgen.sh: once per machine, ~1.5 minutes of both
# cores) is installed beside the builds below, not before them: their serial stretches (a
# crate's type checking, the links, the wasm's single-threaded LTO) leave a core idle.
wbg_install= wbg_log=
if ! scripts/install-wasm-bindgen.sh --check; then
  wbg_log=$(mktemp)
  scripts/install-wasm-bindgen.sh >"$wbg_log" 2>&1 &
  wbg_install=$!
fi

# The server and the wasm build at the same time, in target dirs of their own (the
# wasm in target/front, as cargo-leptos does), so neither waits for the other's
# lock and the release wasm's long single-threaded LTO step overlaps the server.
if [ "$server" = 1 ]; then
  cargo build --locked -p lockscope --bin lockscope --profile "$server_profile" &
  server_build=$!
else
  [ -x target/debug/lockscope ] || { echo "--no-server: no target/debug/lockscope (run cargo test first)" >&2; exit 1; }
fi
# `--cfg erase_components` comes from .cargo/config.toml, for the server and the wasm
# alike (it changes the rendered markup, so both need it or neither).
# The wasm is lockscope-front (a cdylib around lockscope-app, which stays an rlib so
# that the server's build pipelines behind it: front/Cargo.toml says why).
cargo build --locked -p lockscope-front --lib --features hydrate \
  --target wasm32-unknown-unknown --target-dir target/front --profile "$wasm_profile"
if [ "$server" = 1 ]; then wait "$server_build"; fi
if [ -n "$wbg_install" ]; then
  wait "$wbg_install" || { cat "$wbg_log" >&2; echo "installing wasm-bindgen-cli failed" >&2; exit 1; }
  cat "$wbg_log"; rm -f "$wbg_log"
fi

mkdir -p "$pkg"
rm -f "$pkg/lockscope.wasm" "$pkg/lockscope_bg.wasm"
wasm-bindgen --target web --no-typescript --out-name lockscope --out-dir "$pkg" \
  "target/front/wasm32-unknown-unknown/$wasm_dir/lockscope_front.wasm"
# Leptos's page asks for lockscope.wasm when leptos was compiled with
# LEPTOS_OUTPUT_NAME set (as .cargo/config.toml does, and cargo-leptos renames the
# file to match), lockscope_bg.wasm otherwise; cargo does not rebuild a registry
# crate when only that variable changed, so a target dir may hold either. Both names
# point at the same file.
mv "$pkg/lockscope_bg.wasm" "$pkg/lockscope.wasm"
if [ "$release" = 1 ]; then
  wasm-opt -Oz --enable-bulk-memory --enable-nontrapping-float-to-int "$pkg/lockscope.wasm" -o "$pkg/lockscope.wasm"
fi
ln -f "$pkg/lockscope.wasm" "$pkg/lockscope_bg.wasm"
cp style/main.css "$pkg/lockscope.css"
[ -d public ] && cp -r public/. "$site/"
echo "site built in $site ($(du -sh "$pkg/lockscope.wasm" | cut -f1) of wasm); server: target/$([ "$release" = 1 ] && echo release || echo debug)/lockscope"
