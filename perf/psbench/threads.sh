#!/bin/bash
# perf/psbench/threads.sh — server threads (JobSpec::server_threads, --server-threads T): a
# server rank as T shard servers, each with its own table, thread and transport progress.
#   1. In process (the goal): ps_reference --op update --threads 1 against --threads 2, each
#      optimizer, ROUNDS rounds (default 5) alternated: T threads applying pushes to the tables
#      of their partitions, 100k unique keys x 16 floats a batch on a 1M-key table.
#   2. End to end (reported, not a goal: the workers share the 2 cores): ferry-ps-bench, 1 server
#      rank 1 worker, pull / push / push-pull with --server-threads 1 and 2 alternated, over each
#      backend in BACKENDS (default "ucx-shm tcp").
#   3. A 32-core projection on paper from the measured per-row costs.
#
# Usage: [ROUNDS=5] [BACKENDS="ucx-shm tcp"] [BUILD=obj-x86_64-linux-gnu] [DOC=FILE]
#        perf/psbench/threads.sh
# Run it on an IDLE machine (2 cores here: nothing else compiling).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd -P)
BUILD=${BUILD:-$ROOT/obj-x86_64-linux-gnu}
REF="$BUILD/perf/psbench/ps_reference"
BENCH="$BUILD/tools/ps/ferry-ps-bench"
LAUNCH="$BUILD/tools/launch/ferry-launch"
ROUNDS=${ROUNDS:-5}
BACKENDS=${BACKENDS:-"ucx-shm tcp"}
source "$ROOT/perf/psbench/backends.sh"
need_bins threads.sh "$REF" "$BENCH" "$LAUNCH"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sizes=(--keys 100000 --dim 16 --key-space 1000000 --iters 100 --warmup 10)
for round in $(seq "$ROUNDS"); do
  for opt in adagrad ftrl adam; do
    for t in 1 2; do
      timeout 300 "$REF" --op update --optimizer "$opt" --threads "$t" "${sizes[@]}" \
        --json "$work/ref.$opt.t$t.$round.json" >/dev/null
    done
  done
  for backend in $BACKENDS; do
    read -r -a bargs <<<"$(backend_args "$backend")"
    for t in 1 2; do
      timeout 300 "$LAUNCH" --servers 1 --workers 1 -- "$BENCH" --servers 1 --workers 1 \
        "${bargs[@]}" --server-threads "$t" --op all "${sizes[@]}" --pipeline 2 \
        --optimizer adagrad --json "$work/e2e.$backend.t$t.$round.json" >"$work/e2e.log" 2>&1 ||
        { cat "$work/e2e.log" >&2; exit 1; }
    done
  done
done

PYTHONPATH="$ROOT/perf/psbench" python3 - "$work" "$ROUNDS" "$BACKENDS" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)" "${DOC:-}" <<'PY'
import datetime, statistics, sys
from rounds import emit, keys_per_sec, ratio
work, rounds, backends, cpu, doc = sys.argv[1:]
rounds = range(1, int(rounds) + 1)
def ks(path, op):
    return [keys_per_sec(path.format(r=r), op) for r in rounds]
def mk(xs):
    return f"{statistics.median(xs) / 1e6:.2f} M"
lines = ["# Server threads: a server rank as T shard servers", "",
         f"Measured {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC by `perf/psbench/threads.sh`: "
         f"{len(rounds)} rounds, T = 1 and T = 2 alternated; {cpu.strip()}, 2 cores. 100,000 unique "
         "keys x 16 floats a batch, a 1M-key table. Keys/s medians; ratios per round, median "
         "[min-max].", "",
         "## In process: T threads applying pushes to their partitions (goal: T = 2 >= 1.8x T = 1)", "",
         "`ps_reference --op update --threads T`: the keys partitioned over T tables by "
         "`ps::Partition` (as over shard servers), each table owned by one thread, each batch split "
         "by owner beforehand (the worker's job, untimed), the threads in step batch by batch.", "",
         "| optimizer | T = 1 keys/s | T = 2 keys/s | T = 2 / T = 1 | goal |",
         "|---|---:|---:|---:|---|"]
per_row = {}
for opt in ("adagrad", "ftrl", "adam"):
    one = ks(f"{work}/ref.{opt}.t1.{{r}}.json", opt)
    two = ks(f"{work}/ref.{opt}.t2.{{r}}.json", f"{opt}-x2")
    med, text = ratio(two, one)
    per_row[opt] = (statistics.median(one), med)
    lines.append(f"| {opt} | {mk(one)} | {mk(two)} | {text} | >= 1.80x "
                 f"{'met' if med >= 1.8 else '**missed**'} |")
lines += ["", "## End to end: ferry-ps-bench with --server-threads 1 and 2 (reported)", "",
          "1 server rank, 1 worker (2 requests in flight), Adagrad. The worker, its progress and the "
          "server threads share 2 cores, so this shows what a second server thread costs or gains "
          "when the cores are already busy, not the scaling of a server with cores of its own.", "",
          "| backend | op | T = 1 keys/s | T = 2 keys/s | T = 2 / T = 1 |",
          "|---|---|---:|---:|---:|"]
for b in backends.split():
    for op in ("pull", "push", "push-pull"):
        one = ks(f"{work}/e2e.{b}.t1.{{r}}.json", op)
        two = ks(f"{work}/e2e.{b}.t2.{{r}}.json", op)
        lines.append(f"| {b} | {op} | {mk(one)} | {mk(two)} | {ratio(two, one)[1]} |")
rate, scale = per_row["adagrad"]
eff = scale / 2
link = 100e9 / 8 / 64 / 1.03  # 100 Gb/s of 64-B rows, ~3% headers
lines += ["", "## 32 cores, on paper", "",
          f"Measured: one thread applies Adagrad to {rate / 1e6:.1f} M rows/s "
          f"({1e9 / rate:.0f} ns a row, lookup + update of a 152-B row); two threads on two cores "
          f"give {scale:.2f}x, {eff:.0%} of linear per thread. Shard servers share nothing on the "
          "row path (own table, own transport, own progress thread), so a rank with T of them "
          f"on T cores projects to T x {eff:.2f} x {rate / 1e6:.1f} M rows/s while memory keeps up: "
          f"T = 8: {8 * eff * rate / 1e6:.0f} M, T = 16: {16 * eff * rate / 1e6:.0f} M, "
          f"T = 32: {32 * eff * rate / 1e6:.0f} M rows/s. A 100 Gb/s NIC carries ~{link / 1e6:.0f} M "
          f"rows/s of 64 B, so about {link / (eff * rate):.0f} server threads fill it with pushes "
          "(one thread used ~2% of it before). Each row costs ~2 random cache lines (the index "
          "group and the row: ~300 B of DRAM traffic with the write-back), so 190 M rows/s is ~60 "
          "GB/s of random access: within a 2-socket server's memory bandwidth, but the projection "
          "assumes it, and assumes requests large enough that the per-request cost (a few us) is "
          "amortised; small requests are bounded by the transport's message rate instead."]
emit(lines, doc)
PY
