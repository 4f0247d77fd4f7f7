#!/bin/bash
# perf/psbench/apply.sh — the server's push arithmetic in one process, no transport: each
# optimizer's update (ps_reference --op update: FindBatch + the SIMD row kernels, rows prefetched
# ahead) against the in-process gather of the same rows (--op gather, the pull's limit) and
# against the same update as plain loops without prefetch (--op plain), ROUNDS rounds (default
# 5) alternating the optimizers, 100k unique keys x 16 floats a batch on a 1M-key table.
#
# Usage: [ROUNDS=5] [BUILD=obj-x86_64-linux-gnu] [DOC=FILE] perf/psbench/apply.sh
# Run it on an IDLE machine (2 cores here: nothing else compiling).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd -P)
BUILD=${BUILD:-$ROOT/obj-x86_64-linux-gnu}
REF="$BUILD/perf/psbench/ps_reference"
ROUNDS=${ROUNDS:-5}
source "$ROOT/perf/psbench/backends.sh"
need_bins apply.sh "$REF"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for round in $(seq "$ROUNDS"); do
  for opt in adagrad ftrl adam; do
    timeout 300 "$REF" --op gather,update,plain --optimizer "$opt" --keys 100000 --dim 16 \
      --key-space 1000000 --iters 100 --warmup 10 --json "$work/$opt.$round.json" >/dev/null
  done
done
PYTHONPATH="$ROOT/perf/psbench" python3 - "$work" "$ROUNDS" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)" \
  "$(awk '/ avx2 /{print "avx2"; exit}' /proc/cpuinfo)" "${DOC:-}" <<'PY'
import datetime, statistics, sys
from rounds import emit, keys_per_sec, ratio
work, rounds, cpu, avx2, doc = sys.argv[1:]
rounds = range(1, int(rounds) + 1)
def ks(opt, op):
    return [keys_per_sec(f"{work}/{opt}.{r}.json", op) for r in rounds]
lines = ["# The push's arithmetic in one process: SIMD row kernels and rows prefetched ahead", "",
         f"Measured {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC by `perf/psbench/apply.sh`: "
         f"{len(rounds)} rounds, the optimizers alternated; `ps_reference --op gather,update,plain` "
         "(100,000 unique keys x 16 floats a batch, 1M-key table, one thread, no transport); "
         f"{cpu.strip()}, kernels: {'AVX2' if avx2 else 'SSE2'} (chosen at run time). Keys/s "
         "medians; ratios per round, median [min-max].", "",
         "| optimizer | update keys/s | gather keys/s | update / gather | goal | plain loops keys/s | update / plain |",
         "|---|---:|---:|---:|---:|---:|---:|"]
for opt in ("adagrad", "ftrl", "adam"):
    u, g, p = ks(opt, opt), ks(opt, "gather"), ks(opt, opt + "-plain")
    v, r_ug = ratio(u, g)
    _, r_up = ratio(u, p)
    verdict = "met" if v >= 0.7 else "**missed**"
    lines.append(f"| {opt} | {statistics.median(u)/1e6:.2f} M | {statistics.median(g)/1e6:.2f} M | "
                 f"{r_ug} | >= 0.70 {verdict} | {statistics.median(p)/1e6:.2f} M | {r_up} |")
lines += ["", "update: `ps::ApplyUpdate` (ps/store/row_update.h kernels) with the rows of the keys "
          "`kApplyAhead` on prefetched whole (`ArrayHashMap::PrefetchRowForUpdate`), as the "
          "server's ApplyPush; plain: `ps::ApplyUpdateScalar`, no prefetch ahead (the update as "
          "first written). Both give the same bytes (tests/ps/row_update_test.cc)."]
emit(lines, doc)
PY
