#!/usr/bin/env bash
# Installs what lockscope needs to build, run and test on a Debian machine, and
# skips whatever is already there (safe to run any number of times).
#   scripts/install.sh          everything, browser tests included
#   scripts/install.sh --run    only what running the dashboard needs
#   --no-wasm-bindgen           leave wasm-bindgen-cli to the caller, which installs it beside
#                               its builds (scripts/run.sh and scripts/test.sh do)
set -euo pipefail
cd "$(dirname "$0")/.."

want_tests=1 want_wasm_bindgen=1
for arg in "$@"; do
  case $arg in
    --run) want_tests=0 ;;
    --no-wasm-bindgen) want_wasm_bindgen=0 ;;
    *) echo "usage: $0 [--run] [--no-wasm-bindgen]" >&2; exit 2 ;;
  esac
done

say() { printf '\033[1m[install]\033[0m %s\n' "$*"; }
sudo_if_needed() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# Debian packages: protoc for etcd-client's build, OpenSSL's headers; for the tests also etcd,
# PostgreSQL, the sqlite3 shell, redis-server, Chromium and Node.
pkgs=()
command -v protoc >/dev/null || pkgs+=(protobuf-compiler)
[ -f /usr/include/google/protobuf/timestamp.proto ] || pkgs+=(libprotobuf-dev)
# OpenSSL's headers for the ScyllaDB driver's TLS (openssl-sys finds them by pkg-config).
[ -f /usr/include/openssl/ssl.h ] || pkgs+=(libssl-dev)
command -v pkg-config >/dev/null || pkgs+=(pkg-config)
if [ "$want_tests" = 1 ]; then
  # etcd for the etcd store's tests (each test starts its own).
  command -v etcd >/dev/null || pkgs+=(etcd-server)
  command -v etcdctl >/dev/null || pkgs+=(etcd-client)
  # PostgreSQL for the SQL store's tests (started by the tests on a free port).
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || pkgs+=(postgresql)
  [ -x /usr/bin/chromium ] || pkgs+=(chromium)
  # The sqlite3 shell: a second process holding the store's file (server/tests/it/store_busy.rs).
  command -v sqlite3 >/dev/null || pkgs+=(sqlite3)
  # Redis for the Redis fleet's tests (each test starts its own on a free port).
  command -v redis-server >/dev/null || pkgs+=(redis-server)
  # The openssl CLI: the rediss:// test makes its CA and certificate at test time.
  command -v openssl >/dev/null || pkgs+=(openssl)
fi
# npm: Playwright for the tests; binaryen's wasm-opt for the release site.
command -v npm >/dev/null || pkgs+=(nodejs npm)
# Installed without recommends (theirs are large and unused here):
# - promtool for scripts/check-deploy.sh (the alert rules' checks and unit tests): Debian ships
#   it only in `prometheus`, the server too (19 MB download, 96 MB installed, about 10 s);
# - systemd-analyze (the unit's checks), in `systemd`, present on most Debian machines;
# - ZooKeeper for the zk:// fleet's tests (each test file starts its own standalone server on
#   a free port): about 45 Java library packages (10 s here) and, on a fresh machine, OpenJDK
#   17's JRE through default-jre (a 44 MB download).
lean=()
if [ "$want_tests" = 1 ]; then
  command -v promtool >/dev/null || lean+=(prometheus)
  command -v systemd-analyze >/dev/null || lean+=(systemd)
  [ -f /usr/share/java/zookeeper.jar ] || lean+=(zookeeper)
fi
if [ "${#pkgs[@]}" -gt 0 ] || [ "${#lean[@]}" -gt 0 ]; then
  sudo_if_needed apt-get update -qq
fi
if [ "${#pkgs[@]}" -gt 0 ]; then
  say "apt-get install ${pkgs[*]}"
  DEBIAN_FRONTEND=noninteractive sudo_if_needed apt-get install -y -qq "${pkgs[@]}" >/dev/null
fi
if [ "${#lean[@]}" -gt 0 ]; then
  say "apt-get install --no-install-recommends ${lean[*]}"
  DEBIAN_FRONTEND=noninteractive sudo_if_needed apt-get install -y -qq --no-install-recommends "${lean[@]}" >/dev/null
fi
# Where services start on install (systemd, no policy-rc.d) prometheus's postinst starts its
# server: stopped and disabled at once, only promtool is used.
if [[ " ${lean[*]} " == *" prometheus "* ]]; then
  if [ -d /run/systemd/system ]; then
    sudo_if_needed systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  else
    sudo_if_needed service prometheus stop >/dev/null 2>&1 || true
    sudo_if_needed update-rc.d prometheus disable >/dev/null 2>&1 || true
  fi
fi

# Python's kazoo (PyPI `kazoo`): the tests hold ZooKeeper locks with its `Lock`, as services do.
if [ "$want_tests" = 1 ] && ! python3 -c 'import kazoo' 2>/dev/null; then
  say "python3 -m pip install kazoo"
  python3 -m pip install --quiet --disable-pip-version-check kazoo
fi

# Python's redis-py (PyPI `redis`): the tests hold Redis locks with its `Lock`, as services do.
if [ "$want_tests" = 1 ] && ! python3 -c 'import redis' 2>/dev/null; then
  say "python3 -m pip install redis"
  python3 -m pip install --quiet --disable-pip-version-check redis
fi

# PyPI's openapi-spec-validator (and the jsonschema it brings): the tests validate the served
# /api/v1/openapi.json and check the API's answers against its schemas (server/tests/it/openapi.rs).
if [ "$want_tests" = 1 ] && ! python3 -c 'import openapi_spec_validator, jsonschema, referencing' 2>/dev/null; then
  say "python3 -m pip install openapi-spec-validator"
  python3 -m pip install --quiet --disable-pip-version-check openapi-spec-validator
fi

# Rust: the wasm target, and wasm-bindgen-cli at exactly the version Cargo.lock
# pins (scripts/build-site.sh runs it). cargo-leptos is not needed: build-site.sh
# lays the site out as it does; install it yourself for `cargo leptos watch`
# (0.3.10 is the newest that builds on Rust 1.95; about 14 minutes on 2 cores).
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  say "rustup target add wasm32-unknown-unknown"
  rustup target add wasm32-unknown-unknown
fi
[ "$want_wasm_bindgen" = 0 ] || scripts/install-wasm-bindgen.sh

# wasm-opt for the release site: binaryen from npm (Debian's binaryen is too old
# for current Rust wasm).
if [ ! -x scripts/wasm-opt/node_modules/.bin/wasm-opt ] || [ scripts/wasm-opt/package-lock.json -nt scripts/wasm-opt/node_modules/.package-lock.json ]; then
  say "npm ci (binaryen's wasm-opt)"
  (cd scripts/wasm-opt && npm ci --no-audit --no-fund --loglevel=error)
fi

# Browser test driver: Playwright from npm, driving Debian's Chromium (it must
# never download a browser of its own).
if [ "$want_tests" = 1 ]; then
  if [ ! -d end2end/node_modules/@playwright/test ] || [ end2end/package-lock.json -nt end2end/node_modules/.package-lock.json ]; then
    say "npm ci (end2end)"
    (cd end2end && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
  fi
fi
say "ready"
