#!/usr/bin/env bash
# Quick start, step 1: install what is missing, build, and run the main job on its embedded
# default — a local cluster on this machine: ferry-info, short latency and bandwidth runs over
# every local transport (tcp; ucx over shared memory and over tcp), a parameter-server benchmark
# on 2 servers + 2 workers, and the training demo: generate CTR data, train FTRL and FM on a
# local cluster, print test logloss/AUC and throughput, and score test lines through ferry-serve.
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
if grep -q '"available": *true' <<<"$("$bin/info/ferry-info" --backend ucx --json 2>/dev/null)"; then
  run "latency, ucx over shared memory" "$bin/bench/ferry-lat" --transport ucx --param UCX_TLS=shm,self --local --size 8,4096 --iters 2000
  run "bandwidth, ucx over shared memory" "$bin/bench/ferry-bw" --transport ucx --param UCX_TLS=shm,self --local --size 65536,1048576 --iters 500
  run "sparse write, ucx over shared memory: 10k rows of 64 B" "$bin/bench/ferry-bw" --transport ucx --param UCX_TLS=shm,self --local --op sparse_write --rows 10000 --row-size 64 --iters 50
  run "latency, ucx over tcp" "$bin/bench/ferry-lat" --transport ucx --param UCX_TLS=tcp,self --local --size 8,4096 --iters 2000
fi
run "sparse write, tcp: 10k rows of 64 B" "$bin/bench/ferry-bw" --transport tcp --local --op sparse_write --rows 10000 --row-size 64 --iters 50

# The parameter server: 2 servers + 2 workers started by ferry-launch, pull/push of 20k keys x
# 16 floats per op (checked in a separate pass, then timed).
run "parameter server: ferry-launch --servers 2 --workers 2 -- ferry-ps-bench" \
  "$bin/launch/ferry-launch" --servers 2 --workers 2 -- \
  "$bin/ps/ferry-ps-bench" --keys 20000 --iters 50 --key-space 200000

# The training demo: synthetic CTR data with pairwise interactions, FTRL and FM trained on a
# local cluster (ferry-train starts 2 servers + 2 workers of itself) with their defaults (passes
# until the held-out logloss stops improving), scored on the test file.
demo=$(mktemp -d)
trap 'rm -rf "$demo"' EXIT
run "training data: ferry-gen, 400k + 50k samples, 26 fields, FM ground truth" \
  "$bin/gen/ferry-gen" --samples 400000 --test-samples 50000 --truth fm --seed 7 \
  --out "$demo/train.svm" --test-out "$demo/test.svm"
run "ferry-train --model ftrl (2 servers + 2 workers)" \
  "$bin/train/ferry-train" --model ftrl --train "$demo/train.svm" --test "$demo/test.svm" \
  --progress never
run "ferry-train --model fm (2 servers + 2 workers)" \
  "$bin/train/ferry-train" --model fm --train "$demo/train.svm" --test "$demo/test.svm" \
  --progress never --model-out "$demo/fm.model" --export-dir "$demo/fm.export"
run "ferry-predict with the exported FM model" \
  "$bin/train/ferry-predict" "$demo/fm.model" "$demo/test.svm" -o "$demo/p.txt" --summary

# Online scoring: ferry-serve serves the FM job's export directory (and would follow it while a
# job kept publishing versions: docs/serving.md); a few test lines go through its HTTP API.
echo
echo "== ferry-serve with the FM export: 5 test lines scored over HTTP"
"$bin/serve/ferry-serve" --model-dir "$demo/fm.export" --model-name demo \
  --listen 127.0.0.1:0 2>"$demo/serve.log" &
serve_pid=$!
trap 'kill "$serve_pid" 2>/dev/null; rm -rf "$demo"' EXIT
port=$(scripts/serve-port.sh "$demo/serve.log" "$serve_pid")
python3 - "$port" "$demo/test.svm" <<'PY'
import json, sys, urllib.request
port, test = sys.argv[1], sys.argv[2]
with open(test) as f:
    lines = [next(f).rstrip("\n") for _ in range(5)]
body = {"instances": [l.split(" ", 1)[1] for l in lines]}  # the features, without the label
print("POST /v1/models/demo:predict", json.dumps(body)[:100] + " ...")
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/models/demo:predict",
                             json.dumps(body).encode(), {"Content-Type": "application/json"})
print(urllib.request.urlopen(req).read().decode().strip())
PY
kill "$serve_pid"
wait "$serve_pid" || true
