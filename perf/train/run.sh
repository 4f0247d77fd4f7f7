#!/bin/bash
# perf/train/run.sh — ferry-train against LIBLINEAR, side by side, on this machine; then
# perf/train/report.py writes docs/perf/training.md (figure, ours, reference, ratio, goal, met?)
# and training-samples.csv beside it.
#
# Sections:
#   goal        The issue's quality/speed goals. One data set: ferry-gen --samples 1000000
#               --features 16777216 (26 Zipf fields, lr truth) plus a 100k-sample test file.
#               LIBLINEAR (liblinear-train $LIBLINEAR_ARGS, default "-s 0": the goal's "-s 0,
#               about 46 s here") and ferry-train --model lr / --model ftrl on 2 servers + 2
#               workers run ALTERNATELY (reference first on odd pairs, ours first on even ones).
#               Goal: ferry-train's test logloss <= 1.01 x LIBLINEAR's, in <= 0.5 x its wall
#               time. Wall times: ferry-train's whole command (cluster start, reading, training,
#               the test evaluation, shutdown) against liblinear-train alone (its
#               liblinear-predict is timed and reported apart), so the ratio is conservative.
#   throughput  samples/s (ferry-train's "samples_per_sec": training samples over the training
#               time of the slowest worker) of lr, ftrl, fm and mlp, 2 servers with 1 and 2
#               workers, over each transport (--transports, default tcp,ucx), on the goal's
#               training file. Every configuration once per pair, in rotating order.
#
# ferry-train's flags (overridable): "--model lr" and "--model ftrl" with no other flag, i.e.
#   the defaults (docs/training.md): passes until the held-out logloss stops improving, the best
#   one kept; batch size and steps from the data size and the feature values. The wall time is
#   the automatic passes', not one pass's.
#   Tiny data (--quick) misses the time goal: starting the local cluster (0.4-0.7 s) is as long
#   as LIBLINEAR's whole run there.
#
# Usage: perf/train/run.sh [--quick | --size S,F,T] [--pairs N] [--sections goal,throughput]
#                          [--transports tcp,ucx] [--goal-transport auto|tcp|ucx]
#                          [--liblinear-args "..."] [--lr-flags "..."] [--ftrl-flags "..."]
#                          [--build DIR] [--out DIR] [--doc FILE | --no-doc]
#   --quick  tiny data (20k samples x 327,680 features, 5k test samples; 2 pairs) to check the
#            pipeline end to end; its report goes to $OUT/training.md (never docs/perf/) and says
#            QUICK MODE.
#   --size SAMPLES,FEATURES,TEST_SAMPLES  other data sizes (for example 200000,3355443,20000:
#            the goal's features-per-sample ratio at a fifth of its size); the report goes to
#            $OUT/training.md and says which sizes it used.
#   --build  an existing or new meson build dir (default build-perftrain, --buildtype=release);
#            NINJA_JOBS=N limits the build's parallelism.
#   --out    working folder (default $TRAINPERF_OUT or /tmp/ferry-trainperf): data, samples.csv,
#            commands.txt, logs. The generated data is kept and reused while its flags match.
# Run it on an IDLE machine: the numbers are meaningless while anything else runs.
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
BUILD="$ROOT/build-perftrain"
PAIRS=""
QUICK=0
SIZE=""
SECTIONS="goal,throughput"
TRANSPORTS="tcp,ucx"
GOAL_TRANSPORT="auto"
LIBLINEAR_ARGS="-s 0"
LR_FLAGS="--model lr"
FTRL_FLAGS="--model ftrl"
OUT="${TRAINPERF_OUT:-/tmp/ferry-trainperf}"
DOC=""
WRITE_DOC=1

while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1; shift ;;
    --size) SIZE=$2; shift 2 ;;
    --pairs) PAIRS=$2; shift 2 ;;
    --sections) SECTIONS=$2; shift 2 ;;
    --transports) TRANSPORTS=$2; shift 2 ;;
    --goal-transport) GOAL_TRANSPORT=$2; shift 2 ;;
    --liblinear-args) LIBLINEAR_ARGS=$2; shift 2 ;;
    --lr-flags) LR_FLAGS=$2; shift 2 ;;
    --ftrl-flags) FTRL_FLAGS=$2; shift 2 ;;
    --build) BUILD=$(cd "$(dirname "$2")" && pwd -P)/$(basename "$2"); shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --doc) DOC=$2; shift 2 ;;
    --no-doc) WRITE_DOC=0; shift ;;
    -h|--help) sed -n '2,47p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

# Sizes. The full run is what the goals name; --quick only proves the pipeline works.
if [ "$QUICK" = 1 ]; then
  SAMPLES=20000; TEST_SAMPLES=5000; FEATURES=327680
  [ -z "$PAIRS" ] && PAIRS=2
  [ -z "$DOC" ] && DOC="$OUT/training.md"
elif [ -n "$SIZE" ]; then
  IFS=, read -r SAMPLES FEATURES TEST_SAMPLES <<<"$SIZE"
  [ -n "$SAMPLES" ] && [ -n "$FEATURES" ] && [ -n "$TEST_SAMPLES" ] \
    || { echo "run.sh: --size wants SAMPLES,FEATURES,TEST_SAMPLES" >&2; exit 2; }
  [ -z "$PAIRS" ] && PAIRS=3
  [ -z "$DOC" ] && DOC="$OUT/training.md"
else
  SAMPLES=1000000; TEST_SAMPLES=100000; FEATURES=16777216
  [ -z "$PAIRS" ] && PAIRS=3
  [ -z "$DOC" ] && DOC="$ROOT/docs/perf/training.md"
fi
GEN_ARGS="--samples $SAMPLES --test-samples $TEST_SAMPLES --features $FEATURES --truth lr --seed 1"
TIMEOUT_S=1800

TRAIN_BIN="$BUILD/tools/train/ferry-train"
GEN_BIN="$BUILD/tools/gen/ferry-gen"
DATA="$OUT/data"
TRAIN="$DATA/train.svm"
TEST="$DATA/test.svm"
SAMPLES_CSV="$OUT/samples.csv"
CMDS="$OUT/commands.txt"

log() { echo "[trainperf $(date -u +%H:%M:%S)] $*" >&2; }
now() { echo "$EPOCHREALTIME"; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$1" "$2"; }

# ---------------------------------------------------------------- setup
setup() {
  local need=()
  command -v python3 >/dev/null || need+=(python3)
  command -v liblinear-train >/dev/null || need+=(liblinear-tools)
  if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2 \
      || log "apt-get install ${need[*]} failed; the goal section needs liblinear-train"
  fi
  # Always run ninja (a no-op when up to date): a stale binary would be measured silently.
  log "building ferry-train and ferry-gen in $BUILD"
  [ -d "$BUILD" ] || meson setup "$BUILD" "$ROOT" --buildtype=release -Dtests=false \
    -Dbenchmarks=false >&2 || { echo "run.sh: meson setup $BUILD failed" >&2; exit 1; }
  local i built=0
  for i in 1 2 3; do
    ninja -C "$BUILD" ${NINJA_JOBS:+-j"$NINJA_JOBS"} tools/train/ferry-train tools/gen/ferry-gen >&2 \
      && { built=1; break; }
    log "build failed (attempt $i); retrying in 60 s (another engineer's file may be mid-edit)"
    sleep 60
  done
  [ "$built" = 1 ] && [ -x "$TRAIN_BIN" ] && [ -x "$GEN_BIN" ] \
    || { echo "run.sh: could not build ferry-train / ferry-gen in $BUILD" >&2; exit 1; }
}

# The data, generated once per set of flags (a stamp file holds them).
make_data() {
  mkdir -p "$DATA"
  if [ -s "$TRAIN" ] && [ -s "$TEST" ] && [ "$(cat "$DATA/stamp" 2>/dev/null)" = "$GEN_ARGS" ]; then
    log "reusing $DATA ($GEN_ARGS)"
    return
  fi
  log "ferry-gen $GEN_ARGS"
  note_cmd "ferry-gen $GEN_ARGS --out train.svm --test-out test.svm"
  rm -f "$DATA/stamp"
  # shellcheck disable=SC2086
  "$GEN_BIN" $GEN_ARGS --out "$TRAIN" --test-out "$TEST" >"$DATA/gen.txt" 2>&1 \
    || { cat "$DATA/gen.txt" >&2; echo "run.sh: ferry-gen failed" >&2; exit 1; }
  echo "$GEN_ARGS" >"$DATA/stamp"
  cat "$DATA/gen.txt" >&2
}

# sample SECTION FIGURE CONFIG PAIR SIDE METRIC VALUE UNIT STATUS
sample() { local IFS=,; echo "$*" >>"$SAMPLES_CSV"; }
note_cmd() { grep -qxF -- "$*" "$CMDS" 2>/dev/null || echo "$*" >>"$CMDS"; }
fail_note() { echo "$1,$2: $(grep -m1 -iE 'error|fail|signal|timed out|killed' "$3" 2>/dev/null | tr ',' ';' | cut -c1-200)" >>"$OUT/failures.csv"; }

# Test logloss and AUC of liblinear-predict -b 1 output against the LIBSVM file's labels.
ll_metrics() { python3 "$HERE/metrics.py" "$1" "$2" --liblinear; }

# ref PAIR: liblinear-train (timed) then liblinear-predict -b 1 (timed apart).
ref() {
  local pair=$1 model="$OUT/ll.model" pred="$OUT/ll.pred" err="$OUT/ll.log" t0 t1 t2 m
  local -a args
  read -r -a args <<<"$LIBLINEAR_ARGS"
  note_cmd "liblinear-train ${args[*]} -q train.svm MODEL; liblinear-predict -b 1 test.svm MODEL OUT"
  t0=$(now)
  if ! timeout "$TIMEOUT_S" liblinear-train "${args[@]}" -q "$TRAIN" "$model" >"$err" 2>&1; then
    log "liblinear-train failed (pair $pair): $(head -c 200 "$err")"
    fail_note goal "liblinear-train pair $pair" "$err"
    sample goal liblinear "$LIBLINEAR_ARGS" "$pair" ref all "" "" failed
    return
  fi
  t1=$(now)
  if ! timeout "$TIMEOUT_S" liblinear-predict -b 1 "$TEST" "$model" "$pred" >"$err" 2>&1; then
    log "liblinear-predict failed (pair $pair): $(head -c 200 "$err")"
    fail_note goal "liblinear-predict pair $pair" "$err"
    sample goal liblinear "$LIBLINEAR_ARGS" "$pair" ref all "" "" failed
    return
  fi
  t2=$(now)
  m=$(ll_metrics "$pred" "$TEST") || { sample goal liblinear "$LIBLINEAR_ARGS" "$pair" ref all "" "" failed; return; }
  sample goal liblinear "$LIBLINEAR_ARGS" "$pair" ref wall_s "$(elapsed "$t0" "$t1")" s ok
  sample goal liblinear "$LIBLINEAR_ARGS" "$pair" ref predict_s "$(elapsed "$t1" "$t2")" s ok
  sample goal liblinear "$LIBLINEAR_ARGS" "$pair" ref logloss "${m% *}" "" ok
  sample goal liblinear "$LIBLINEAR_ARGS" "$pair" ref auc "${m#* }" "" ok
  log "  liblinear ${args[*]}: train $(elapsed "$t0" "$t1") s, logloss ${m% *}, auc ${m#* }"
}

# ours SECTION FIGURE PAIR ARGS...: one ferry-train run (wall time, metrics of the final line).
ours() {
  local section=$1 figure=$2 pair=$3; shift 3
  local json="$OUT/metrics.jsonl" err="$OUT/ours.log" t0 t1 attempt config="${*//,/;}"
  config=${config//$TRAIN/train.svm}
  config=${config//$TEST/test.svm}
  note_cmd "ferry-train $config --metrics-json FILE --progress never -q"
  for attempt in 1 2; do
    rm -f "$json"
    t0=$(now)
    if timeout "$TIMEOUT_S" "$TRAIN_BIN" "$@" --metrics-json "$json" --progress never -q >"$err" 2>&1 \
        && [ -s "$json" ]; then
      t1=$(now)
      sample "$section" "$figure" "$config" "$pair" ours wall_s "$(elapsed "$t0" "$t1")" s ok
      python3 - "$json" "$section" "$figure" "$config" "$pair" >>"$SAMPLES_CSV" <<'PY' || break
import json, sys
path, section, figure, config, pair = sys.argv[1:]
last = json.loads(open(path).read().strip().split("\n")[-1])
assert last["event"] == "final", last
for metric, unit in (("logloss", ""), ("auc", ""), ("samples_per_sec", "samples/s"),
                     ("elapsed_s", "s"), ("samples", "samples")):
    v = last.get(metric)
    if v is not None:
        print(f"{section},{figure},{config},{pair},ours,{metric},{v},{unit},ok")
PY
      log "  $figure: $(elapsed "$t0" "$t1") s wall; $(tail -1 "$err" | cut -c1-200)"
      return 0
    fi
    log "ferry-train failed ($figure pair $pair, attempt $attempt): $(grep -m1 -iE 'error|fail' "$err" | cut -c1-200)"
    fail_note "$section" "$figure pair $pair attempt $attempt" "$err"
  done
  sample "$section" "$figure" "$config" "$pair" ours all "" "" "failed x2"
}

# ---------------------------------------------------------------- sections
section_goal() {
  if ! command -v liblinear-train >/dev/null || ! command -v liblinear-predict >/dev/null; then
    log "goal section skipped: liblinear-train / liblinear-predict not found (apt-get install liblinear-tools)"
    echo "goal,skipped: liblinear-tools not installed" >>"$OUT/failures.csv"
    return
  fi
  local p
  local -a lr ftrl common
  read -r -a lr <<<"$LR_FLAGS"
  read -r -a ftrl <<<"$FTRL_FLAGS"
  common=(--servers 2 --workers 2 --transport "$GOAL_TRANSPORT" --train "$TRAIN" --test "$TEST")
  for p in $(seq 1 "$PAIRS"); do
    log "goal pair $p/$PAIRS"
    if [ $((p % 2)) = 1 ]; then
      ref "$p"
      ours goal lr "$p" "${lr[@]}" "${common[@]}"
      ours goal ftrl "$p" "${ftrl[@]}" "${common[@]}"
    else
      ours goal ftrl "$p" "${ftrl[@]}" "${common[@]}"
      ours goal lr "$p" "${lr[@]}" "${common[@]}"
      ref "$p"
    fi
  done
}

section_throughput() {
  local p i n t w m
  local -a configs=() ts
  IFS=, read -r -a ts <<<"$TRANSPORTS"
  for t in "${ts[@]}"; do
    for w in 1 2; do
      for m in lr ftrl fm ffm mlp deepfm; do configs+=("$m:$t:$w"); done
    done
  done
  n=${#configs[@]}
  for p in $(seq 1 "$PAIRS"); do
    log "throughput round $p/$PAIRS"
    # Rotate the order each round, so no configuration always runs first (or after a heavy one).
    for i in $(seq 0 $((n - 1))); do
      IFS=: read -r m t w <<<"${configs[$(((i + p - 1) % n))]}"
      # One pass (--epochs 1): samples/s of training, not of the automatic passes' evaluations.
      ours throughput "$m $t ${w}w" "$p" --model "$m" --servers 2 --workers "$w" --transport "$t" \
        --train "$TRAIN" --epochs 1
    done
  done
}

# ---------------------------------------------------------------- main
mkdir -p "$OUT"
setup
: >"$CMDS"; : >"$OUT/failures.csv"; : >"$OUT/load.txt"
make_data
echo "section,figure,config,pair,side,metric,value,unit,status" >"$SAMPLES_CSV"
START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_mark() { echo "$(date -u +%H:%M:%S) ($1): $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/load.txt"; }
IFS=, read -r -a secs <<<"$SECTIONS"
for sec in "${secs[@]}"; do
  load_mark "before $sec"
  case "$sec" in
    '') ;;
    goal) section_goal ;;
    throughput) section_throughput ;;
    *) echo "run.sh: unknown section $sec" >&2; exit 2 ;;
  esac
  load_mark "after $sec"
done
END=$(date -u +%Y-%m-%dT%H:%M:%SZ)
log "samples in $SAMPLES_CSV"
if [ "$WRITE_DOC" = 1 ]; then
  python3 "$HERE/report.py" --out "$OUT" --root "$ROOT" --build "$BUILD" --doc "$DOC" \
    --start "$START" --end "$END" --pairs "$PAIRS" --quick "$QUICK" --custom "$([ -n "$SIZE" ] && echo 1 || echo 0)" \
    --sizes "samples=$SAMPLES test_samples=$TEST_SAMPLES features=$FEATURES" \
    "--gen=$(tr '\n' ' ' <"$DATA/gen.txt" 2>/dev/null)" \
    "--liblinear-args=$LIBLINEAR_ARGS" "--lr-flags=$LR_FLAGS" "--ftrl-flags=$FTRL_FLAGS" \
    || { echo "run.sh: report.py failed" >&2; exit 1; }
  log "report: $DOC"
fi
