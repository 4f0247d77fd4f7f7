#!/usr/bin/env bash
# Quick start, step 1: install what is missing, build, and run the main job on its embedded
# default — a local cluster on this machine: ferry-info, then short latency and bandwidth runs
# over every local transport (tcp; ucx over shared memory and over tcp).
set -euo pipefail
cd "$(dirname "$0")"
source scripts/deps.sh
ferry_install_packages "${FERRY_PACKAGES[@]}"

BUILD=${FERRY_BUILD_DIR:-build}
if [ ! -f "$BUILD/build.ninja" ]; then
  meson setup "$BUILD" --buildtype=release >/dev/null
fi
ninja -C "$BUILD" >/dev/null

bin="$BUILD/tools"
echo "== ferry-info"
"$bin/info/ferry-info"

run() {  # run <title> <command...>
  echo
  echo "== $1"
  shift
  "$@"
}
run "latency, tcp, loopback" "$bin/bench/ferry-lat" --transport tcp --local --size 8,4096 --iters 2000
run "bandwidth, tcp, loopback" "$bin/bench/ferry-bw" --transport tcp --local --size 65536,1048576 --iters 500
if "$bin/info/ferry-info" --backend ucx --json 2>/dev/null | grep -q '"available": *true'; then
  run "latency, ucx over shared memory" "$bin/bench/ferry-lat" --transport ucx --param UCX_TLS=shm,self --local --size 8,4096 --iters 2000
  run "bandwidth, ucx over shared memory" "$bin/bench/ferry-bw" --transport ucx --param UCX_TLS=shm,self --local --size 65536,1048576 --iters 500
  run "sparse write, ucx over shared memory: 10k rows of 64 B" "$bin/bench/ferry-bw" --transport ucx --param UCX_TLS=shm,self --local --op sparse_write --rows 10000 --row-size 64 --iters 50
  run "latency, ucx over tcp" "$bin/bench/ferry-lat" --transport ucx --param UCX_TLS=tcp,self --local --size 8,4096 --iters 2000
fi
run "sparse write, tcp: 10k rows of 64 B" "$bin/bench/ferry-bw" --transport tcp --local --op sparse_write --rows 10000 --row-size 64 --iters 50
