#!/bin/bash
# perf/psbench/run.sh — ferry-ps-bench against its references, side by side, on this machine.
#
# Every figure is measured as pairs run ALTERNATELY (ours, reference, ours, reference, ...;
# PAIRS pairs, 5 by default), every sample goes to $OUT/samples.csv, then report.py writes
# docs/perf/ps.md (figure, ours, reference, ratio, goal, met?) and docs/perf/ps-samples.csv.
#
# Sections (each over the local backends tcp, ucx-shm = ucx with UCX_TLS=shm,self, and ucx-tcp =
# ucx with UCX_TLS=tcp,self over lo):
#   1x1      ferry-ps-bench 1 server 1 worker, pull / push / push-pull of 100k unique keys x 16
#            floats (Adagrad, populated 1M-key table)  vs  ps_reference (the in-process memcpy
#            gather limit, the memcpy alone, Adagrad applied in process) on the same batches
#   latency  ferry-ps-bench --latency (single-key synchronous pull and push)  vs  ferry-lat --local
#            -s 64 on the same backend: --op send (its default ping-pong; the goal's reference) and
#            --op write_imm (one write with notification each way: the PS data path's message
#            shape, for context). ferry-lat reports half the round trip; the report doubles it.
#   2x2      ferry-ps-bench 2 servers 2 workers, all ops  vs  ps_reference (single-thread figures
#            for scale; no goal)
#
# Usage: perf/psbench/run.sh [--quick] [--pairs N] [--sections 1x1,latency,2x2]
#                            [--backends tcp,ucx-shm,ucx-tcp] [--build DIR] [--out DIR]
#                            [--doc FILE | --no-doc]
#   --quick  tiny sizes (2k keys, 20k-key space, few iterations, 2 pairs) to check the pipeline end
#            to end; its report goes to $OUT/ps.md (never docs/perf/) and says QUICK MODE.
#   --build  an existing or new meson build dir (default build-psbench, --buildtype=release);
#            NINJA_JOBS=N limits the build's parallelism.
# Run it on an IDLE machine: the numbers are meaningless while anything else runs.
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
BUILD="$ROOT/build-psbench"
PAIRS=5
QUICK=0
SECTIONS="1x1,latency,2x2"
BACKENDS="tcp,ucx-shm,ucx-tcp"
OUT="${PSBENCH_OUT:-/tmp/ferry-psbench}"
DOC=""
WRITE_DOC=1

while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1; shift ;;
    --pairs) PAIRS=$2; shift 2 ;;
    --sections) SECTIONS=$2; shift 2 ;;
    --backends) BACKENDS=$2; shift 2 ;;
    --build) BUILD=$(cd "$(dirname "$2")" && pwd -P)/$(basename "$2"); shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --doc) DOC=$2; shift 2 ;;
    --no-doc) WRITE_DOC=0; shift ;;
    -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

# Sizes. The full run is what the goals name; --quick only proves the pipeline works.
if [ "$QUICK" = 1 ]; then
  KEYS=2000; SPACE=20000; ITERS=5; WARMUP=1; LAT_ITERS=200; LAT_WARMUP=20; LAT_OPS=200
  [ "$PAIRS" = 5 ] && PAIRS=2
  [ -z "$DOC" ] && DOC="$OUT/ps.md"
else
  KEYS=100000; SPACE=1000000; ITERS=100; WARMUP=10; LAT_ITERS=5000; LAT_WARMUP=500; LAT_OPS=5000
  [ -z "$DOC" ] && DOC="$ROOT/docs/perf/ps.md"
fi
DIM=16
PIPELINE=2
TIMEOUT_S=900

BENCH="$BUILD/tools/ps/ferry-ps-bench"
REF="$BUILD/perf/psbench/ps_reference"
LAT="$BUILD/tools/bench/ferry-lat"
LAUNCH="$BUILD/tools/launch/ferry-launch"
RUN_ENV="$ROOT/tests/launch/run-ferry-env.sh"
SAMPLES="$OUT/samples.csv"
CMDS="$OUT/commands.txt"

log() { echo "[psbench $(date -u +%H:%M:%S)] $*" >&2; }

# ---------------------------------------------------------------- setup
setup() {
  local need=()
  command -v python3 >/dev/null || need+=(python3)
  if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2 \
      || { echo "run.sh: apt-get install ${need[*]} failed" >&2; exit 1; }
  fi
  # Always run ninja (a no-op when up to date): a stale binary would be measured silently.
  log "building ferry-ps-bench, ps_reference and ferry-lat in $BUILD"
  [ -d "$BUILD" ] || meson setup "$BUILD" "$ROOT" --buildtype=release -Dtests=false >&2 \
    || { echo "run.sh: meson setup $BUILD failed" >&2; exit 1; }
  local targets=(tools/ps/ferry-ps-bench perf/psbench/ps_reference tools/bench/ferry-lat)
  ninja -C "$BUILD" -t targets all 2>/dev/null | grep -q '^tools/launch/ferry-launch:' &&
    targets+=(tools/launch/ferry-launch)
  ninja -C "$BUILD" ${NINJA_JOBS:+-j"$NINJA_JOBS"} "${targets[@]}" >&2 || { echo "run.sh: the build failed" >&2; exit 1; }
  [ -x "$BENCH" ] && [ -x "$REF" ] && [ -x "$LAT" ] || { echo "run.sh: binaries missing in $BUILD" >&2; exit 1; }
  if [ -x "$LAUNCH" ]; then log "launcher: ferry-launch"; else log "launcher: tests/launch/run-ferry-env.sh (no ferry-launch in $BUILD yet)"; fi
}

source "$HERE/backends.sh"  # backend_args

# sample SECTION FIGURE BACKEND SHAPE PAIR SIDE METRIC VALUE UNIT STATUS
sample() { local IFS=,; echo "$*" >>"$SAMPLES"; }
note_cmd() { grep -qxF -- "$*" "$CMDS" 2>/dev/null || echo "$*" >>"$CMDS"; }
fail_note() { echo "$1,$2,$3: $(grep -m1 -iE 'error|fail|signal|timed out' "$4" 2>/dev/null | tr ',' ';' | cut -c1-200)" >>"$OUT/failures.csv"; }

# launch S W ARGS...: ferry-ps-bench as S+W ranks (ferry-launch when built, else the stand-in).
launch() {
  local s=$1 w=$2; shift 2
  if [ -x "$LAUNCH" ]; then
    timeout "$TIMEOUT_S" "$LAUNCH" --servers "$s" --workers "$w" -- "$BENCH" --servers "$s" --workers "$w" "$@"
  else
    timeout "$TIMEOUT_S" "$RUN_ENV" $((s + w)) --timeout "$TIMEOUT_S" -- "$BENCH" --servers "$s" --workers "$w" "$@"
  fi
}

# ours SECTION BACKEND S W PAIR ARGS...: one ferry-ps-bench run; a sample per op and metric.
ours() {
  local section=$1 be=$2 s=$3 w=$4 pair=$5; shift 5
  local json="$OUT/ours.json" err="$OUT/ours.log" attempt
  local -a bargs
  read -r -a bargs <<<"$(backend_args "$be")"
  note_cmd "launch --servers $s --workers $w -- ferry-ps-bench ${bargs[*]} $* --json FILE"
  for attempt in 1 2; do
    rm -f "$json"
    if launch "$s" "$w" "${bargs[@]}" "$@" --json "$json" >"$err" 2>&1 && [ -s "$json" ]; then
      python3 - "$json" "$section" "$be" "${s}x${w}" "$pair" >>"$SAMPLES" <<'PY' && return 0
import json, sys
path, section, be, shape, pair = sys.argv[1:]
j = json.load(open(path))
mode = j["mode"]
for r in j["results"]:
    fig = f"{r['op']}:{'latency' if mode == 'latency' else 'throughput'}:{r['keys_per_op']}"
    lat = r["latency_usec"]
    for metric, value, unit in (("keys_per_sec", r["keys_per_sec"], "keys/s"),
                                ("gb_per_sec", r["gb_per_sec"], "GB/s"),
                                ("p50_usec", lat["p50"], "usec"), ("p99_usec", lat["p99"], "usec"),
                                ("p99_9_usec", lat["p99_9"], "usec"),
                                ("unique_keys_per_op", r["unique_keys_per_op"], "keys")):
        print(f"{section},{fig},{be},{shape},{pair},ours,{metric},{value},{unit},ok")
print(f"{section},populate,{be},{shape},{pair},ours,rows_per_sec,{j['populate']['rows_per_sec']},rows/s,ok")
PY
    fi
    log "ferry-ps-bench failed ($section $be ${s}x$w pair $pair, attempt $attempt): $(grep -m1 -iE 'error|fail' "$err" | cut -c1-200)"
    fail_note "$section" "$be" "ferry-ps-bench ${s}x$w attempt $attempt" "$err"
  done
  sample "$section" all "$be" "${s}x${w}" "$pair" ours all "" "" "failed x2"
}

# ref SECTION BACKEND SHAPE PAIR: one ps_reference run (gather, memcpy, adagrad).
ref() {
  local section=$1 be=$2 shape=$3 pair=$4
  local json="$OUT/ref.json" err="$OUT/ref.log"
  local -a args=(--op all --keys "$KEYS" --dim "$DIM" --key-space "$SPACE" --iters "$ITERS" --warmup "$WARMUP")
  note_cmd "ps_reference ${args[*]} --json FILE"
  rm -f "$json"
  if timeout "$TIMEOUT_S" "$REF" "${args[@]}" --json "$json" >"$err" 2>&1 && [ -s "$json" ]; then
    python3 - "$json" "$section" "$be" "$shape" "$pair" >>"$SAMPLES" <<'PY' && return 0
import json, sys
path, section, be, shape, pair = sys.argv[1:]
j = json.load(open(path))
for r in j["results"]:
    lat = r["latency_usec"]
    for metric, value, unit in (("keys_per_sec", r["keys_per_sec"], "keys/s"),
                                ("gb_per_sec", r["gb_per_sec"], "GB/s"),
                                ("p50_usec", lat["p50"], "usec"), ("p99_usec", lat["p99"], "usec")):
        print(f"{section},ref:{r['op']},{be},{shape},{pair},ref,{metric},{value},{unit},ok")
print(f"{section},populate,{be},{shape},{pair},ref,rows_per_sec,{j['populate']['rows_per_sec']},rows/s,ok")
PY
  fi
  log "ps_reference failed ($section pair $pair): $(head -c 200 "$err")"
  fail_note "$section" "$be" "ps_reference" "$err"
  sample "$section" ref:all "$be" "$shape" "$pair" ref all "" "" failed
}

# latref BACKEND PAIR OP: ferry-lat --local --op OP -s 64 (half round trip: t_typical, p99).
latref() {
  local be=$1 pair=$2 op=$3 csv="$OUT/lat.csv" err="$OUT/lat.log" v
  local -a bargs
  read -r -a bargs <<<"$(backend_args "$be")"
  note_cmd "ferry-lat ${bargs[*]} --local --op $op -s 64 -n $LAT_OPS --csv FILE"
  rm -f "$csv"
  if timeout 300 "$LAT" "${bargs[@]}" --local --op "$op" -s 64 -n "$LAT_OPS" --csv "$csv" >"$err" 2>&1 && [ -s "$csv" ]; then
    v=$(python3 -c 'import csv,sys; r=next(csv.DictReader(open(sys.argv[1]))); print(r["t_typical_usec"], r["p99_usec"])' "$csv")
    sample latency "ferry-lat:$op:64" "$be" 1x1 "$pair" ref half_rtt_typical_usec "${v% *}" usec ok
    sample latency "ferry-lat:$op:64" "$be" 1x1 "$pair" ref half_rtt_p99_usec "${v#* }" usec ok
    return 0
  fi
  log "ferry-lat failed ($be $op pair $pair): $(grep -m1 -i error "$err" | cut -c1-200)"
  fail_note latency "$be" "ferry-lat $op" "$err"
  sample latency "ferry-lat:$op:64" "$be" 1x1 "$pair" ref half_rtt_typical_usec "" usec failed
}

# ---------------------------------------------------------------- sections
COMMON=(--keys "$KEYS" --dim "$DIM" --key-space "$SPACE" --iters "$ITERS" --warmup "$WARMUP"
        --pipeline "$PIPELINE" --optimizer adagrad)

section_1x1() {
  local p be
  IFS=, read -r -a bes <<<"$BACKENDS"
  for p in $(seq 1 "$PAIRS"); do
    for be in "${bes[@]}"; do
      log "1x1 $be pair $p/$PAIRS"
      ours 1x1 "$be" 1 1 "$p" --op all "${COMMON[@]}"
      ref 1x1 "$be" 1x1 "$p"
    done
  done
}

section_latency() {
  local p be
  IFS=, read -r -a bes <<<"$BACKENDS"
  for p in $(seq 1 "$PAIRS"); do
    for be in "${bes[@]}"; do
      log "latency $be pair $p/$PAIRS"
      ours latency "$be" 1 1 "$p" --latency --op pull,push --key-space "$SPACE" --iters "$LAT_ITERS" --warmup "$LAT_WARMUP"
      latref "$be" "$p" send        # ferry-lat's ping-pong (its default op): the goal's reference
      latref "$be" "$p" write_imm   # the PS data path's message shape, for context
    done
  done
}

section_2x2() {
  local p be
  IFS=, read -r -a bes <<<"$BACKENDS"
  for p in $(seq 1 "$PAIRS"); do
    for be in "${bes[@]}"; do
      log "2x2 $be pair $p/$PAIRS"
      ours 2x2 "$be" 2 2 "$p" --op all "${COMMON[@]}"
      ref 2x2 "$be" 2x2 "$p"
    done
  done
}

# ---------------------------------------------------------------- main
mkdir -p "$OUT"
setup
echo "section,figure,backend,shape,pair,side,metric,value,unit,status" >"$SAMPLES"
: >"$CMDS"; : >"$OUT/failures.csv"; : >"$OUT/load.txt"
START=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_mark() { echo "$(date -u +%H:%M:%S) ($1): $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/load.txt"; }
IFS=, read -r -a secs <<<"$SECTIONS"
for sec in "${secs[@]}"; do
  load_mark "before $sec"
  case "$sec" in
    '') ;;
    1x1) section_1x1 ;;
    latency) section_latency ;;
    2x2) section_2x2 ;;
    *) echo "run.sh: unknown section $sec" >&2; exit 2 ;;
  esac
  load_mark "after $sec"
done
END=$(date -u +%Y-%m-%dT%H:%M:%SZ)
log "samples in $SAMPLES"
if [ "$WRITE_DOC" = 1 ]; then
  python3 "$HERE/report.py" --out "$OUT" --root "$ROOT" --build "$BUILD" --doc "$DOC" \
    --start "$START" --end "$END" --pairs "$PAIRS" --quick "$QUICK" \
    --sizes "keys=$KEYS dim=$DIM key_space=$SPACE iters=$ITERS warmup=$WARMUP pipeline=$PIPELINE latency_iters=$LAT_ITERS ferry_lat_iters=$LAT_OPS" \
    || { echo "run.sh: report.py failed" >&2; exit 1; }
  log "report: $DOC"
fi
