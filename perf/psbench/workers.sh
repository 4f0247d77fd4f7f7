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
# Then the same over a stream (ferry-gen --stream | ferry-train --train -, asp, STREAM_SAMPLES
# lines): rank 0 deals it over TCP (tools/train/stream_ranks.h); the joiner connects to the
# dealer, the leaver tells it to stop, trains what its connection holds and closes a last window
# with the others. Beside it the same stream with join slots but nobody joining (rank 0 deals,
# blocks copied) and the fixed job (the launcher deals over pipes, blocks spliced).
#
# Usage: [ROUNDS=3] [BACKENDS="tcp ucx"] [SAMPLES=200000] [EPOCHS=4] [WORKERS=2] [SERVERS=2]
#        [STREAM_SAMPLES=1500000] [BUILD=obj-x86_64-linux-gnu]
#        [DOC=docs/perf/ps-elastic-workers.md]
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
STREAM_SAMPLES=${STREAM_SAMPLES:-1500000}
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
# Starts the worker join slot (ferry-train ARGS... --join-worker 0, its stderr to $3) into the
# running job whose launcher is $1 and whose stderr is $2; once it joined, sends worker 1
# SIGTERM and waits until it left. Sets join_ms (start to "joined") and leave_ms (SIGTERM to
# "left the job").
join_and_leave() {
  local job=$1 job_err=$2 joiner_err=$3 t_join t_joined t_term t_left leaver
  shift 3
  t_join=$(now)
  "$TRAIN" "$@" --elastic --worker-join-slots 1 --join-worker 0 </dev/null >/dev/null \
    2>"$joiner_err" &
  t_joined=$(seen "$joiner_err" "joined the running job")
  leaver=$(rank_pid "$job" "$((SERVERS + 1))")
  t_term=$(now)
  kill -TERM "$leaver"
  t_left=$(seen "$job_err" "left the job after")
  join_ms=$(ms "$t_join" "$t_joined")
  leave_ms=$(ms "$t_term" "$t_left")
}
# The stream: ferry-gen's, as fast as the job takes it.
stream() {
  "$GEN" --stream --samples "$STREAM_SAMPLES" --fields 10 --features 50000 --seed 29 2>/dev/null
}

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
    join_and_leave "$job" "$work/job.err" "$work/joiner.err" "${args[@]}"
    wait
    unset FERRY_COORDINATOR
    read -r samples job_s loss < <(summary "$work/job.out")
    grep -q "1 worker joined and 1 left while training" "$work/job.out" ||
      { echo "workers.sh: the summary names no join and leave:" >&2; cat "$work/job.out" >&2; exit 1; }
    [ "$samples" = $((SAMPLES * EPOCHS)) ] ||
      { echo "workers.sh: $samples samples counted, not $((SAMPLES * EPOCHS))" >&2; exit 1; }
    echo "$round $backend $join_ms $leave_ms $job_s $dealt_s $elastic_s $fixed_s $loss" \
      "$fixed_loss $samples" >>"$rows"
  done
done
stream_rows="$work/stream_rows"
: >"$stream_rows"
for round in $(seq "$ROUNDS"); do
  for backend in $BACKENDS; do
    args=(--model ftrl --train - --test "$work/test.svm" --window 50000 --workers "$WORKERS"
          --servers "$SERVERS" --seed 5 --transport "$backend")
    stream | "$TRAIN" "${args[@]}" -q >"$work/sfixed.out" 2>"$work/sfixed.err"
    read -r _ sfixed_s sfixed_loss < <(summary "$work/sfixed.out")
    stream | "$TRAIN" "${args[@]}" -q --elastic --worker-join-slots 1 >"$work/sdealt.out" \
      2>"$work/sdealt.err"
    read -r _ sdealt_s _ < <(summary "$work/sdealt.out")
    port=$((40000 + RANDOM % 20000))
    export FERRY_COORDINATOR=127.0.0.1:$port
    # Not -q: the stream's report says what each worker was dealt.
    stream | "$TRAIN" "${args[@]}" --progress never --elastic --worker-join-slots 1 \
      --metrics-json "$work/s.jsonl" >"$work/sjob.out" 2>"$work/sjob.err" &
    job=$!  # the pipeline's last process: ferry-train's launcher
    seen "$work/s.jsonl" 'window' >/dev/null
    join_and_leave "$job" "$work/sjob.err" "$work/sjoiner.err" "${args[@]}"
    wait
    unset FERRY_COORDINATOR
    read -r samples job_s loss < <(summary "$work/sjob.out")
    grep -q "1 worker joined and 1 left while training" "$work/sjob.out" ||
      { echo "workers.sh: the stream's summary names no join and leave:" >&2; cat "$work/sjob.out" "$work/sjob.err" >&2; exit 1; }
    [ "$samples" = "$STREAM_SAMPLES" ] ||
      { echo "workers.sh: $samples stream samples counted, not $STREAM_SAMPLES" >&2; exit 1; }
    shares=$(sed -n 's/.*lines per worker: \([0-9, ]*\) (.*/\1/p' "$work/sjob.err" | tr -d ' ')
    echo "$round $backend $join_ms $leave_ms $job_s $sdealt_s $sfixed_s $loss $sfixed_loss" \
      "$shares" >>"$stream_rows"
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
  echo
  echo "## Over a stream"
  echo
  echo "\`ferry-gen --stream --samples $STREAM_SAMPLES | ferry-train --train - --window 50000\` (asp):"
  echo "the elastic job (\`--elastic --worker-join-slots 1\`: rank 0 deals the stream over TCP, blocks"
  echo "copied) with a join once the first window closed and worker 1's SIGTERM once it joined"
  echo "(**leave**: until its \"left the job\" line: it trains what its connection holds and closes a"
  echo "last window with the others); beside it the same with nobody joining (**dealt s**) and the"
  echo "fixed job (**fixed s**: the launcher deals over pipes, blocks spliced). **lines** are what the"
  echo "dealer gave workers 0, 1 (the leaver) and 2 (the joiner); the job counted every one"
  echo "(checked: samples = $STREAM_SAMPLES)."
  echo
  echo "| round | backend | join ms | leave ms | job s | dealt s | fixed s | test logloss | fixed | lines |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  while read -r round backend join leave job dealt fixed loss fixed_loss shares; do
    echo "| $round | $backend | $join | $leave | $job | $dealt | $fixed | $loss | $fixed_loss | $shares |"
  done <"$stream_rows"
} >"$DOC"
echo "workers.sh: wrote $DOC"
