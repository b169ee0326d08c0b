# Sourced by the on-demand store benchmarks (bench-redis.sh, bench-zk.sh, bench-advisory.sh):
# which build they run and building it, free loopback ports, a scratch directory on tmpfs.
#
#   bench_build BIN...   PROFILE=release (default: `cargo build --release` of the named
#                        binaries of the lockscope crate) or debug (the workspace's binaries);
#                        sets $bin to their directory; NO_BUILD=1 uses what is built already.
#   free_port            a free TCP port on 127.0.0.1.
#   bench_dir NAME       sets $dir to a fresh /dev/shm/lockscope-bench-NAME-XXXX.

PROFILE=${PROFILE:-release}

bench_build() {
  local build=()
  case $PROFILE in
    release)
      bin=target/release
      build=(cargo build --release --locked -p lockscope)
      for b in "$@"; do build+=(--bin "$b"); done
      ;;
    debug) bin=target/debug; build=(cargo build --workspace --locked --bins) ;;
    *) echo "PROFILE=$PROFILE: release or debug" >&2; exit 1 ;;
  esac
  [ -n "${NO_BUILD:-}" ] || "${build[@]}"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

bench_dir() { dir=$(mktemp -d "/dev/shm/lockscope-bench-$1-XXXX"); }
