#!/bin/bash
# perf/psbench/variants.sh — what the optional data-path features cost and buy, each measured
# against the default path side by side in one run: fp16 rows on pulls (--fp16-pull), fp16
# gradients on pushes (--fp16-push), the significance filter (--push-filter, at a threshold that
# drops almost nothing: its cost; and at one that drops ~70% of the rows: its benefit), and
# one-sided pulls (--one-sided), in throughput (100k keys) and single-key latency modes, and
# chain replication (--replicas 2: every push applied on two servers before it is acknowledged;
# 2 servers 2 workers only), and 16 shards instead of one per server (--shards 16: a throughput
# op becomes a request per shard; a single key still one request).
#
# Variants run ALTERNATELY (base, fp16-pull, fp16-push, ..., base, ...), PAIRS rounds (default 3),
# 1 server 1 worker and 2 servers 2 workers, on tcp and ucx over shared memory. Every run keeps
# ferry-ps-bench's untimed checked pass ON (it verifies each wire format's rows), outside the timed
# loop. Results: docs/perf/ps-variants.md (medians, ratio to the base run of the same round) and
# the raw samples in $OUT/variants.csv.
#
# Usage: perf/psbench/variants.sh [--pairs N] [--backends tcp,ucx-shm] [--build DIR] [--out DIR]
#                                 [--doc FILE] [--quick] [--variants base,replicas-2,...]
#                                 [--title TEXT]
# Run it on an IDLE machine (2 cores here: nothing else compiling).
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
BUILD="$ROOT/build-psbench"
PAIRS=3
BACKENDS="tcp,ucx-shm"
OUT="${PSBENCH_OUT:-/tmp/ferry-psbench-variants}"
DOC="$ROOT/docs/perf/ps-variants.md"
QUICK=0
ONLY=""
TITLE="ferry-ps-bench: optional data-path features, each against the default path"
while [ $# -gt 0 ]; do
  case "$1" in
    --pairs) PAIRS=$2; shift 2 ;;
    --backends) BACKENDS=$2; shift 2 ;;
    --build) BUILD=$(cd "$(dirname "$2")" && pwd -P)/$(basename "$2"); shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --doc) DOC=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --variants) ONLY=",$2,"; shift 2 ;;
    --title) TITLE=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "variants.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ "$QUICK" = 1 ]; then
  KEYS=2000; SPACE=20000; ITERS=5; LAT_ITERS=100; PAIRS=1; DOC="$OUT/ps-variants.md"
else
  KEYS=100000; SPACE=1000000; ITERS=60; LAT_ITERS=3000
fi

BENCH="$BUILD/tools/ps/ferry-ps-bench"
LAUNCH="$BUILD/tools/launch/ferry-launch"
log() { echo "[variants $(date -u +%H:%M:%S)] $*" >&2; }

mkdir -p "$OUT"
[ -d "$BUILD" ] || meson setup "$BUILD" "$ROOT" --buildtype=release -Dtests=false >&2 ||
  { echo "variants.sh: meson setup failed" >&2; exit 1; }
ninja -C "$BUILD" tools/ps/ferry-ps-bench tools/launch/ferry-launch >&2 ||
  { echo "variants.sh: the build failed" >&2; exit 1; }

source "$HERE/backends.sh"  # backend_args

# name|mode|ops|flags  (mode: tp = throughput, lat = single-key latency)
VARIANTS=(
  "base|tp|all|"
  "fp16-pull|tp|pull,push-pull|--fp16-pull"
  "fp16-push|tp|push,push-pull|--fp16-push"
  "filter-0.03|tp|push|--push-filter 0.03"
  "filter-0.049|tp|push|--push-filter 0.049"
  "one-sided|tp|pull|--one-sided"
  "base-lat|lat|pull|"
  "one-sided-lat|lat|pull|--one-sided"
  "replicas-2|tp|push,push-pull|--replicas 2"
  "shards-16|tp|all|--shards 16"
  "shards-16-lat|lat|pull|--shards 16"
)

CSV="$OUT/variants.csv"
echo "pair,backend,shape,variant,op,keys_per_sec,p50_usec,p99_usec,bytes_sent_per_op,filtered_per_op,status" >"$CSV"
START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
IFS=, read -r -a bes <<<"$BACKENDS"
for p in $(seq 1 "$PAIRS"); do
  for shape in 1x1 2x2; do
    s=${shape%x*}; w=${shape#*x}
    for be in "${bes[@]}"; do
      for v in "${VARIANTS[@]}"; do
        IFS='|' read -r name mode ops flags <<<"$v"
        if [ -n "$ONLY" ] && [[ "$ONLY" != *",$name,"* ]]; then continue; fi
        # Two replicas need two servers.
        if [ "$name" = replicas-2 ] && [ "$s" -lt 2 ]; then continue; fi
        read -r -a bargs <<<"$(backend_args "$be")"
        read -r -a fargs <<<"$flags"
        if [ "$mode" = lat ]; then
          margs=(--latency --iters "$LAT_ITERS" --key-space "$SPACE")
        else
          margs=(--keys "$KEYS" --key-space "$SPACE" --iters "$ITERS" --warmup 5 --pipeline 2)
        fi
        log "pair $p $shape $be $name"
        json="$OUT/run.json"
        rm -f "$json"
        if timeout 600 "$LAUNCH" --servers "$s" --workers "$w" -- "$BENCH" --servers "$s" \
             --workers "$w" "${bargs[@]}" --op "$ops" "${margs[@]}" "${fargs[@]}" --json "$json" \
             >"$OUT/run.log" 2>&1 && [ -s "$json" ]; then
          python3 - "$json" "$p" "$be" "$shape" "$name" >>"$CSV" <<'PY'
import json, sys
path, pair, be, shape, name = sys.argv[1:]
j = json.load(open(path))
per_op = {}
for wk in j["workers"]:
    for o in wk["ops"]:
        a = per_op.setdefault(o["op"], [0, 0, 0])
        a[0] += o["bytes_sent"]; a[1] += o["filtered_rows"]; a[2] += o["iterations"]
for r in j["results"]:
    b, f, n = per_op.get(r["op"], [0, 0, 1])
    lat = r["latency_usec"]
    print(f"{pair},{be},{shape},{name},{r['op']},{r['keys_per_sec']},{lat['p50']},{lat['p99']},"
          f"{b / max(n, 1):.0f},{f / max(n, 1):.1f},ok")
PY
        else
          log "failed: $(grep -m1 -iE 'error|fail' "$OUT/run.log" | cut -c1-200)"
          echo "$p,$be,$shape,$name,,,,,,,failed" >>"$CSV"
        fi
      done
    done
  done
done
END=$(date -u +%Y-%m-%dT%H:%M:%SZ)

LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
python3 - "$CSV" "$DOC" "$START" "$END" "$PAIRS" "$KEYS" "$SPACE" "$QUICK" "$TITLE" "$LOAD" <<'PY'
import csv, statistics, sys, platform, os
path, doc, start, end, pairs, keys, space, quick, title, load = sys.argv[1:]
rows = [r for r in csv.DictReader(open(path)) if r["status"] == "ok"]
failed = sum(1 for r in csv.DictReader(open(path)) if r["status"] != "ok")
def med(xs): return statistics.median(xs) if xs else float("nan")
# Ratio to the base run of the same round, backend, shape and op, then the median of the ratios.
base = {}
for r in rows:
    if r["variant"] in ("base", "base-lat"):
        base[(r["pair"], r["backend"], r["shape"], r["op"], r["variant"] == "base-lat")] = r
groups = {}
for r in rows:
    groups.setdefault((r["backend"], r["shape"], r["variant"], r["op"]), []).append(r)
cpu = "?"
try:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip(); break
except OSError:
    pass
out = []
out.append(f"# {title}\n")
if quick == "1":
    out.append("**QUICK MODE: tiny sizes, not results.**\n")
out.append(f"Generated by `perf/psbench/variants.sh` ({start} .. {end}, {pairs} alternating rounds; "
           f"{os.cpu_count()} cores, {cpu}, {platform.release()}; load average at the end {load}). Throughput rows: {keys} unique "
           f"keys x 16 floats per op, populated {space}-key table, Adagrad, 2 ops in flight per "
           "worker; latency rows: single-key synchronous pulls. Every run's untimed checked pass "
           "verified its rows in that wire format. Ratio = median over rounds of (variant / the "
           "base run of the same round): > 1 is faster for keys/s, lower is better for p50.\n")
out.append("| backend | shape | variant | op | keys/s (median) | ratio to base | p50 us | "
           "bytes sent / op | rows filtered / op |")
out.append("|---|---|---|---|---:|---:|---:|---:|---:|")
order = ["base", "fp16-pull", "fp16-push", "filter-0.03", "filter-0.049", "one-sided",
         "base-lat", "one-sided-lat", "replicas-2", "shards-16", "shards-16-lat"]
for key in sorted(groups, key=lambda k: (k[0], k[1], order.index(k[2]) if k[2] in order else 99, k[3])):
    be, shape, variant, op = key
    g = groups[key]
    kps = med([float(r["keys_per_sec"]) for r in g])
    p50 = med([float(r["p50_usec"]) for r in g])
    lat = variant.endswith("-lat")
    ratios = []
    for r in g:
        b = base.get((r["pair"], be, shape, op, lat))
        if b is None or variant in ("base", "base-lat"):
            continue
        if lat:
            ratios.append(float(r["p50_usec"]) / max(float(b["p50_usec"]), 1e-9))
        else:
            ratios.append(float(r["keys_per_sec"]) / max(float(b["keys_per_sec"]), 1e-9))
    ratio = f"{med(ratios):.2f}" + (" (p50)" if lat else "") if ratios else "-"
    sent = med([float(r["bytes_sent_per_op"]) for r in g])
    filt = med([float(r["filtered_per_op"]) for r in g])
    out.append(f"| {be} | {shape} | {variant} | {op} | {kps / 1e6:.2f} M | {ratio} | {p50:.1f} | "
               f"{sent:,.0f} | {filt:,.0f} |")
if failed:
    out.append(f"\n{failed} run(s) failed; see {path}.")
out.append("\nBytes sent / op counts what one worker's op puts on the wire towards the servers (keys, "
           "gradients, headers); fp16 pulls halve the rows coming back, which that column does not "
           "show. Raw samples: the CSV next to the run (`--out`).")
open(doc, "w").write("\n".join(out) + "\n")
print(doc)
PY
