#!/usr/bin/env bash
# Regenerates docs/perf/streaming.md and docs/perf/streaming-rows.svg in one command, on an idle
# machine (nothing compiling: every figure is a ratio of runs alternated in one sitting):
#
#   perf/streaming/run.sh                   # ROUNDS=3 SAMPLES=3000000 by default
#   ROUNDS=5 SAMPLES=5000000 BIN=build/tools OUT=/tmp/s.md perf/streaming/run.sh
#
# What it measures (ftrl, 2 servers + 2 workers over tcp, batch 256 per worker, asp):
#   pipe vs file   the same ferry-gen data trained from a file (--epochs 1, no held-out split)
#                  and through `cat FILE |` (--train -: dealt by the launcher, every sample
#                  scored before it is trained on, a window every 100k). Goal: >= 0.9x.
#   stdin          `--train - < FILE`: the dealer without a writer process.
#   windows        the stdin run against one window for the whole stream: the cost of closing
#                  windows (two collectives and an exact AUC each 100k). Scoring itself has no
#                  cost to isolate: the probabilities are the ones the training step computes.
#                  Goal: <= 5%.
#   eviction       a drifting stream (ferry-gen --stream --drift, written to a file once) through
#                  `cat |` with and without --evict-unseen 1 --evict-tick 0.25. Goal: <= 5%.
#   memory         resident rows per window over the drifting stream, with and without
#                  eviction: the plot.
# Throughput is ferry-train's own figure (samples / the slowest worker's training loop); wall
# times of the whole command are reported beside it.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${BIN:-$root/obj-x86_64-linux-gnu/tools}
rounds=${ROUNDS:-3}
samples=${SAMPLES:-3000000}
out=${OUT:-$root/docs/perf/streaming.md}
svg=${SVG:-$(dirname "$out")/streaming-rows.svg}
gen=$bin/gen/ferry-gen
train=$bin/train/ferry-train
plot=$bin/plot/ferry-plot
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$gen" --samples "$samples" --test-samples 10 --out "$work/tr.svm" --test-out "$work/te.svm" \
  --seed 7 -q >/dev/null
"$gen" --stream --samples "$samples" --drift 0.2 --drift-every 200000 --seed 7 >"$work/drift.svm"

common=(--model ftrl --transport tcp --batch-size 256 -q --progress never)
# run NAME CMD...: appends "NAME samples/s wall_s" to $work/runs.
run() {
  local name=$1
  shift
  local t0 t1 line
  t0=$(date +%s.%N)
  line=$("$@" | grep 'samples/s' || true)
  t1=$(date +%s.%N)
  [ -n "$line" ] || { echo "$name gave no summary" >&2; exit 1; }
  local rate
  rate=$(sed -n 's/.*(\([0-9]*\) samples\/s).*/\1/p' <<<"$line")
  echo "$name $rate $(echo "$t1 - $t0" | bc)" >>"$work/runs"
  echo "$name: $rate samples/s, $(echo "$t1 - $t0" | bc) s wall" >&2
}
file_run() { "$train" "${common[@]}" --train "$work/tr.svm" --epochs 1 --validation-fraction 0; }
pipe_run() { cat "$work/tr.svm" | "$train" "${common[@]}" --train - --window 100000; }
# The same stream with no writer process: stdin is the file itself, read by the dealer.
stdin_run() { "$train" "${common[@]}" --train - --window 100000 <"$work/tr.svm"; }
# And with one window for the whole stream: no window collectives, no per-window AUC.
once_run() { "$train" "${common[@]}" --train - --window 1000000000 <"$work/tr.svm"; }
kept_run() {
  cat "$work/drift.svm" | "$train" "${common[@]}" --train - --window 100000 \
    --metrics-json "$work/kept.jsonl"
}
evict_run() {
  cat "$work/drift.svm" | "$train" "${common[@]}" --train - --window 100000 \
    --evict-unseen 1 --evict-tick 0.25 --metrics-json "$work/evict.jsonl"
}
for r in $(seq "$rounds"); do
  echo "round $r" >&2
  run file file_run
  run pipe pipe_run
  run stdin stdin_run
  run once once_run
  run kept kept_run
  run evict evict_run
done

python3 - "$work" "$out" "$svg" "$plot" "$samples" "$rounds" <<'PY'
import json, os, statistics, subprocess, sys, datetime
work, out, svg, plot, samples, rounds = sys.argv[1:7]
runs = {}
for line in open(os.path.join(work, "runs")):
    name, rate, wall = line.split()
    runs.setdefault(name, []).append((float(rate), float(wall)))
def med(name, i):
    return statistics.median(v[i] for v in runs[name])
def ratio(a, b):
    rs = [x[0] / y[0] for x, y in zip(runs[a], runs[b])]
    return statistics.median(rs), min(rs), max(rs)
pipe = ratio("pipe", "file")
stdin = ratio("stdin", "file")
windows_cost = ratio("stdin", "once")
evict = ratio("evict", "kept")
def windows(path):
    return [j for j in map(json.loads, open(path)) if j["event"] == "window"]
kept, evicted = windows(os.path.join(work, "kept.jsonl")), windows(os.path.join(work, "evict.jsonl"))
spec = {"title": "resident rows over a drifting stream (ferry-gen --drift 0.2 every 200k)",
        "xlabel": "samples (millions)", "ylabel": "rows (thousands)",
        "series": [
            {"name": "no eviction", "points": [[w["samples"] / 1e6, w["rows"] / 1e3] for w in kept]},
            {"name": "--evict-unseen 1", "points": [[w["samples"] / 1e6, w["rows"] / 1e3] for w in evicted]}]}
with open(os.path.join(work, "spec.json"), "w") as f:
    json.dump(spec, f)
subprocess.run([plot, "--spec", os.path.join(work, "spec.json"), "-o", svg], check=True)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
def verdict(ok):
    return "met" if ok else "**missed**"
lines = [
    "# Streaming: throughput from a pipe, the cost of eviction, memory over time",
    "",
    f"Measured {datetime.date.today()} by `perf/streaming/run.sh` ({rounds} alternating rounds, "
    f"{int(samples):,} samples each run; {os.cpu_count()} cores, {cpu}). ftrl on 2 servers + 2 "
    "workers over tcp, batch 256 per worker, asp. Throughput is ferry-train's own figure "
    "(samples / the slowest worker's training loop); ratios are medians of per-round ratios "
    "(min-max in brackets).",
    "",
    "| comparison | ours (samples/s) | reference (samples/s) | ratio | goal | |",
    "|---|---:|---:|---:|---:|---|",
    f"| `cat FILE \\| ferry-train --train -` vs `--train FILE --epochs 1` | {med('pipe', 0):,.0f} | "
    f"{med('file', 0):,.0f} | {pipe[0]:.3f} [{pipe[1]:.3f}-{pipe[2]:.3f}] | >= 0.90 | {verdict(pipe[0] >= 0.9)} |",
    f"| `ferry-train --train - < FILE` (the dealer, no writer process) vs the file | {med('stdin', 0):,.0f} | "
    f"{med('file', 0):,.0f} | {stdin[0]:.3f} [{stdin[1]:.3f}-{stdin[2]:.3f}] | | |",
    f"| windows of 100k (stdin run) vs one window for the whole stream | {med('stdin', 0):,.0f} | "
    f"{med('once', 0):,.0f} | {windows_cost[0]:.3f} [{windows_cost[1]:.3f}-{windows_cost[2]:.3f}] | >= 0.95 | {verdict(windows_cost[0] >= 0.95)} |",
    f"| drifting stream with `--evict-unseen 1 --evict-tick 0.25` vs without | {med('evict', 0):,.0f} | "
    f"{med('kept', 0):,.0f} | {evict[0]:.3f} [{evict[1]:.3f}-{evict[2]:.3f}] | >= 0.95 | {verdict(evict[0] >= 0.95)} |",
    "",
    "Wall times of the whole command (startup, dealing, the final export included), medians: "
    f"file {med('file', 1):.2f} s, pipe {med('pipe', 1):.2f} s, stdin from the file {med('stdin', 1):.2f} s, drifting stream {med('kept', 1):.2f} s "
    f"without eviction and {med('evict', 1):.2f} s with.",
    "",
    "## Memory over time",
    "",
    "![resident rows per window, with and without eviction](streaming-rows.svg)",
    "",
    f"Without eviction the rows grow with the vocabulary seen: {kept[0]['rows']:,} after the first "
    f"window, {kept[-1]['rows']:,} at the end. With `--evict-unseen 1` they plateau: "
    f"{evicted[-1]['rows']:,} at the end, at most {max(w['rows'] for w in evicted):,}; "
    f"{sum(w['table.weights.evicted'] for w in evicted):,} rows were evicted and "
    f"{sum(w['table.weights.admitted'] for w in evicted):,} admitted. The rows buffer keeps its "
    f"size ({evicted[-1]['bytes_resident'] / 2**20:.1f} MiB resident at the end against "
    f"{kept[-1]['bytes_resident'] / 2**20:.1f} MiB without eviction): freed rows are reused, the "
    "buffer is not shrunk.",
    "",
    '## What the pipe pays (profile)',
    '',
    "Since 6f6869c the launcher splices the pipe's blocks into the workers' pipes (splice(2),",
    "tee(2); only each block's last 16 KiB are read, to cut it after a line), whole blocks into",
    "pipes with room for them. `perf record -a` of a pipe run of 2,000,000 samples (2026-11-29, this",
    '2-core host): the launcher process (the dealer, with the coordinator) takes 0.8% of all',
    'samples, against 3.2% for the dealing thread alone when it read and wrote every byte, and',
    "`cat` 3.4% (its pages now leave the pipe instead of being reused: a page allocation per 4 KiB",
    'written). Both cores are idle 4.8% of the time against 2.6% in the file run: the workers wait',
    'on their pipes now and then. A first version of the splice path kept the dealer\'s read buffer',
    'reading ahead whenever it held lines, and planned blocks by bytes where a pipe counts page',
    'slots: half the bytes were still copied and the pipe run measured 0.874 (10 rounds) before',
    "that was fixed. After it, 21 alternating rounds of the file and pipe runs (this page's 5, and",
    '16 of the two alone, 3,000,000 samples): median 0.907, quartiles 0.894-0.926; before splicing',
    '0.851-0.873. The per-window collectives cost nothing measurable (100k windows against 500k,',
    '5 rounds: within the noise). On a host with spare cores `cat` and the dealer stop competing',
    'with the ranks.',
    '',
    'Eviction was 0.90x before this run: tables that track sightings resolved each key with a lone',
    "`ArrayHashMap::Access` (20.7% of the job's CPU against `FindBatch`'s 8.2%); they now run the",
    "same prefetch pipeline as `FindBatch` (10.9%), and rows seen this tick skip the score decay's",
    '`exp2`.',
    '',
]
with open(out, "w") as f:
    f.write("\n".join(lines))
print("\n".join(lines))
PY
