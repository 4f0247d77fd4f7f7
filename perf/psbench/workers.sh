#!/bin/bash
# perf/psbench/workers.sh — what a worker joining and one leaving cost a running ferry-train job
# (#29, --worker-join-slots), and docs/perf/ps-elastic-workers.md from it. ROUNDS rounds over each
# backend in BACKENDS, alternated; each round runs the fixed job (WORKERS workers, the data
# sharded) and then the elastic one (the data dealt, one worker join slot): once training began
# a second ferry-train starts the join slot (--join-worker 0), and once it printed that it joined,
# worker 1 gets SIGTERM. Measured per elastic run:
#   join   from starting the joining ferry-train to its "joined the running job" line (its
#          process start, registration, connections to every server and the coordinator's start)
#   leave  from the SIGTERM to the leaver's "left the job" line (it trains the piece it holds:
#          1/(32 (W+1)) of a pass at most, then waits for its requests and the coordinator)
#   job    the elastic job's training time beside the fixed job's (the summary lines), and the
#          samples it counted (every line once per pass: passes x samples)
#
# Usage: [ROUNDS=3] [BACKENDS="tcp ucx"] [SAMPLES=200000] [EPOCHS=4] [WORKERS=2] [SERVERS=2]
#        [BUILD=obj-x86_64-linux-gnu] [DOC=docs/perf/ps-elastic-workers.md]
#        perf/psbench/workers.sh
# Run it on an IDLE machine (2 cores here: nothing else compiling).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd -P)
BUILD=${BUILD:-$ROOT/obj-x86_64-linux-gnu}
TRAIN="$BUILD/tools/train/ferry-train"
GEN="$BUILD/tools/gen/ferry-gen"
ROUNDS=${ROUNDS:-3}
BACKENDS=${BACKENDS:-"tcp ucx"}
SAMPLES=${SAMPLES:-200000}
EPOCHS=${EPOCHS:-4}
WORKERS=${WORKERS:-2}
SERVERS=${SERVERS:-2}
DOC=${DOC:-$ROOT/docs/perf/ps-elastic-workers.md}
for b in "$TRAIN" "$GEN"; do
  [ -x "$b" ] || { echo "workers.sh: $b not built" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$work"' EXIT

"$GEN" --out "$work/train.svm" --test-out "$work/test.svm" --fields 10 --features 50000 \
  --samples "$SAMPLES" --test-samples 5000 --seed 29 >/dev/null 2>&1
now() { date +%s.%N; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", (b - a) * 1000 }'; }
# Waits until file $1 holds text $2 (at most 60 s); prints the time it was seen.
seen() {
  for _ in $(seq 6000); do
    if grep -q "$2" "$1" 2>/dev/null; then now; return 0; fi
    sleep 0.01
  done
  echo "workers.sh: '$2' never appeared in $1" >&2
  return 1
}
# The pid of rank $2 among the children of $1.
rank_pid() {
  for p in $(pgrep -P "$1"); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "FERRY_RANK=$2"; then
      echo "$p"
      return 0
    fi
  done
  return 1
}
summary() { sed -n 's/.*: \([0-9]*\) samples in \([0-9.]*\) s.*test logloss \([0-9.]*\).*/\1 \2 \3/p' "$1"; }

started=$(date -u +%FT%TZ)
rows="$work/rows"
: >"$rows"
for round in $(seq "$ROUNDS"); do
  for backend in $BACKENDS; do
    args=(--model ftrl --train "$work/train.svm" --test "$work/test.svm" --consistency bsp
          --batch-size 64 --epochs "$EPOCHS" --workers "$WORKERS" --servers "$SERVERS" --seed 5
          --transport "$backend" --eval-every 50)
    "$TRAIN" "${args[@]}" -q >"$work/fixed.out" 2>"$work/fixed.err"
    read -r _ fixed_s fixed_loss < <(summary "$work/fixed.out")
    # Elastic (sharded): what the elastic machinery costs (pushes through the chain code).
    "$TRAIN" "${args[@]}" -q --elastic >"$work/elastic.out" 2>"$work/elastic.err"
    read -r _ elastic_s _ < <(summary "$work/elastic.out")
    # The data dealt, nobody joining or leaving: what dealing itself costs.
    "$TRAIN" "${args[@]}" -q --elastic --worker-join-slots 1 >"$work/dealt.out" 2>"$work/dealt.err"
    read -r _ dealt_s _ < <(summary "$work/dealt.out")
    port=$((40000 + RANDOM % 20000))
    export FERRY_COORDINATOR=127.0.0.1:$port
    "$TRAIN" "${args[@]}" -q --elastic --worker-join-slots 1 --metrics-json "$work/m.jsonl" \
      >"$work/job.out" 2>"$work/job.err" &
    job=$!
    seen "$work/m.jsonl" 'eval' >/dev/null
    t_join=$(now)
    "$TRAIN" "${args[@]}" --elastic --worker-join-slots 1 --join-worker 0 \
      >"$work/joiner.out" 2>"$work/joiner.err" &
    joiner=$!
    t_joined=$(seen "$work/joiner.err" "joined the running job")
    leaver=$(rank_pid "$job" "$((SERVERS + 1))")
    t_term=$(now)
    kill -TERM "$leaver"
    t_left=$(seen "$work/job.err" "left the job after")
    wait "$job" "$joiner"
    unset FERRY_COORDINATOR
    read -r samples job_s loss < <(summary "$work/job.out")
    grep -q "1 worker joined and 1 left while training" "$work/job.out" ||
      { echo "workers.sh: the summary names no join and leave:" >&2; cat "$work/job.out" >&2; exit 1; }
    [ "$samples" = $((SAMPLES * EPOCHS)) ] ||
      { echo "workers.sh: $samples samples counted, not $((SAMPLES * EPOCHS))" >&2; exit 1; }
    echo "$round $backend $(ms "$t_join" "$t_joined") $(ms "$t_term" "$t_left") $job_s $dealt_s" \
      "$elastic_s $fixed_s $loss $fixed_loss $samples" >>"$rows"
  done
done
ended=$(date -u +%FT%TZ)

{
  echo "# A worker joining and one leaving a running ferry-train job (#29)"
  echo
  echo "Written by \`perf/psbench/workers.sh\` ($started to $ended; ROUNDS=$ROUNDS"
  echo "BACKENDS=\"$BACKENDS\" SAMPLES=$SAMPLES EPOCHS=$EPOCHS WORKERS=$WORKERS SERVERS=$SERVERS, on"
  echo "$(nproc) cores, idle). Each round: the fixed ferry-train job (bsp, ftrl, batch 64, a streaming"
  echo "evaluation every 50 batches, the data sharded), then the same with \`--elastic --worker-join-slots 1\` (the data dealt in"
  echo "$((32 * (WORKERS + 1))) pieces a pass): once training began a second ferry-train starts"
  echo "\`--join-worker 0\`; once it joined, worker 1 gets SIGTERM and leaves after the piece it holds."
  echo
  echo "- **join**: from starting the joining ferry-train to its \"joined the running job\" line."
  echo "- **leave**: from the SIGTERM to the leaver's \"left the job\" line (the rest of its piece"
  echo "  trained, its requests done, the coordinator's word)."
  echo "- **job s**: training time (the summary's: the slowest worker's loop) of the elastic job,"
  echo "  which counted every sample once per pass (checked: samples = passes x $SAMPLES); beside"
  echo "  it the same job dealt but with nobody joining or leaving (**dealt s**: what dealing"
  echo "  costs), the job \`--elastic\` with its data sharded (**elastic s**: what an elastic job"
  echo "  costs, its pushes through the chain code) and the fixed job (**fixed s**)."
  echo
  echo "| round | backend | join ms | leave ms | job s | dealt s | elastic s | fixed s | test logloss | fixed |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  while read -r round backend join leave job dealt elastic fixed loss fixed_loss _; do
    echo "| $round | $backend | $join | $leave | $job | $dealt | $elastic | $fixed | $loss | $fixed_loss |"
  done <"$rows"
} >"$DOC"
echo "workers.sh: wrote $DOC"
