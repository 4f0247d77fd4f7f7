#!/bin/bash
# perf/psbench/builds.sh — two builds of ferry-ps-bench side by side in one run: an older build
# (OLD, e.g. a worktree of the commit before a change) against the current one (NEW), alternated
# round by round (old, new, in-process reference, old, new, ...), 1 server 1 worker, pull / push /
# push-pull of 100k unique keys x 16 floats (the sizes of run.sh), with ps_reference's in-process
# gather and Adagrad of the same round beside them. Every ratio is per round, then the median.
#
# Usage: OLD=DIR [NEW=DIR] [BACKEND=tcp] [ROUNDS=5] [DOC=FILE] [TITLE=TEXT] perf/psbench/builds.sh
#   OLD, NEW  folders holding ferry-ps-bench and ferry-launch (NEW also ps_reference); NEW defaults
#             to the build's tools (BUILD, default obj-x86_64-linux-gnu: tools/ps, tools/launch,
#             perf/psbench). Copy the older binaries aside before rebuilding (they link libferry
#             statically), or point OLD at another build tree's folders laid out the same way.
#   DOC       the markdown written (default: stdout only).
# Run it on an IDLE machine (2 cores here: nothing else compiling).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd -P)
BUILD=${BUILD:-$ROOT/obj-x86_64-linux-gnu}
: "${OLD:?OLD=DIR holding the older ferry-ps-bench and ferry-launch}"
BACKEND=${BACKEND:-tcp}
ROUNDS=${ROUNDS:-5}
TITLE=${TITLE:-"ferry-ps-bench: two builds alternated"}
source "$ROOT/perf/psbench/backends.sh"
read -r -a bargs <<<"$(backend_args "$BACKEND")"

bin() {  # bin WHICH NAME: the binary of a build
  local which=$1 name=$2
  if [ "$which" = old ]; then
    echo "$OLD/$name"
  elif [ -n "${NEW:-}" ]; then
    echo "$NEW/$name"
  else
    case "$name" in
      ferry-ps-bench) echo "$BUILD/tools/ps/ferry-ps-bench" ;;
      ferry-launch) echo "$BUILD/tools/launch/ferry-launch" ;;
      ps_reference) echo "$BUILD/perf/psbench/ps_reference" ;;
    esac
  fi
}
need_bins builds.sh "$(bin old ferry-ps-bench)" "$(bin old ferry-launch)" \
  "$(bin new ferry-ps-bench)" "$(bin new ferry-launch)" "$(bin new ps_reference)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sizes=(--keys 100000 --dim 16 --key-space 1000000 --iters 100 --warmup 10)
for round in $(seq "$ROUNDS"); do
  for which in old new; do
    timeout 300 "$(bin $which ferry-launch)" --servers 1 --workers 1 -- \
      "$(bin $which ferry-ps-bench)" --servers 1 --workers 1 "${bargs[@]}" --op all "${sizes[@]}" \
      --pipeline 2 --optimizer adagrad --json "$work/$which.$round.json" >"$work/$which.log" 2>&1 ||
      { cat "$work/$which.log" >&2; exit 1; }
  done
  timeout 300 "$(bin new ps_reference)" --op all "${sizes[@]}" --json "$work/ref.$round.json" \
    >"$work/ref.log" 2>&1 || { cat "$work/ref.log" >&2; exit 1; }
done

PYTHONPATH="$ROOT/perf/psbench" python3 - "$work" "$ROUNDS" "$BACKEND" "$TITLE" "$OLD" \
  "${NEW:-$BUILD}" "${DOC:-}" <<'PY'
import datetime, statistics, sys
from rounds import emit, keys_per_sec, ratio as ratio_of
work, rounds, backend, title, old, new, doc = sys.argv[1:]
rounds = range(1, int(rounds) + 1)
def keys(which, op):
    return [keys_per_sec(f"{work}/{which}.{r}.json", op) for r in rounds]
def ratio(a, b):
    return ratio_of(a, b)[1]
def mk(xs):
    return f"{statistics.median(xs) / 1e6:.2f} M"
ref = {"pull": keys("ref", "gather"), "push": keys("ref", "adagrad")}
lines = [f"# {title}", "",
         f"Measured {datetime.datetime.utcnow():%Y-%m-%d %H:%M} UTC by `perf/psbench/builds.sh`: "
         f"{len(rounds)} rounds of (old build, new build, in-process reference), 1 server 1 worker "
         f"over {backend}, 100,000 unique keys x 16 floats a request, a 1M-key table, Adagrad; "
         "keys/s medians, ratios per round (median [min-max]).", "",
         f"Old: `{old}`. New: `{new}`.", "",
         "| op | old keys/s | new keys/s | new / old | old / reference | new / reference | reference |",
         "|---|---:|---:|---:|---:|---:|---|"]
for op in ("pull", "push", "push-pull"):
    o, n = keys("old", op), keys("new", op)
    r = ref.get(op)
    lines.append(f"| {op} | {mk(o)} | {mk(n)} | {ratio(n, o)} | "
                 + (f"{ratio(o, r)} | {ratio(n, r)} | "
                    f"{'in-process gather (FindBatch + memcpy)' if op == 'pull' else 'Adagrad in process (FindBatch + ApplyUpdate)'} {mk(r)} |"
                    if r else "| | |"))
emit(lines, doc)
PY
