#!/bin/bash
# perf/compare/run.sh — Ferry vs reference tools, side by side, on this machine.
#
# Runs ferry-lat/ferry-bw and the reference tool for the same transport ALTERNATELY
# (ferry, reference, ferry, reference, ...) for PAIRS pairs, records every sample in
# $OUT/samples.csv, then perf/compare/report.py writes docs/perf/transport.md (ratio tables:
# Ferry ÷ reference, median of the pairs with min–max spread, next to the earlier run's in
# docs/perf/transport-samples-2026-11-22.csv) and SVG plots (drawn by the build's own
# `ferry-plot --spec`, tools/plot: no gnuplot).
#
# Like for like: every Ferry run makes two passes per size (--check both): a checked pass that
# verifies every transfer (recorded as side "ferry-checked") and the timed pass, which checks the
# way the reference tool does and uses its working set (side "ferry"). Only the timed pass is
# ever divided by a reference; the checked one is reported beside it.
#
# Sections: ucx-shm, ucx-tcp (ucx_perftest), tcp (iperf3, sockperf), sparse (memcpy gather and
# the measured pack-then-send runs pack_write / pack_read over tcp, ucx-shm and ucx-tcp), verbs
# (perftest and the same sparse comparisons inside the soft-RoCE VM; only with --with-vm).
#
# Usage: perf/compare/run.sh [--pairs N] [--with-vm] [--sections a,b,...] [--build DIR] [--no-doc]
#                            [--append]
#   --append keeps the samples of an earlier run in the same --out folder (e.g. the host sections
#   on an idle machine, then `--sections verbs --append` later) and regenerates the report over
#   all of them.
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd -P)
ROOT=$(cd "$HERE/../.." && pwd -P)
BUILD="$ROOT/build-perfcmp"
PAIRS=5
WITH_VM=0
SECTIONS="ucx-shm,ucx-tcp,tcp,sparse"
WRITE_DOC=1
INNER_VM=0
APPEND=0
OUT="${PERFCMP_OUT:-/tmp/ferry-perfcmp}"
# Parts of the verbs section (env PERFCMP_VERBS_PARTS, e.g. "lat" to re-run only the latency
# comparisons with --append after removing their rows).
VERBS_PARTS="${PERFCMP_VERBS_PARTS:-lat,bw,sparse}"

while [ $# -gt 0 ]; do
  case "$1" in
    --pairs) PAIRS=$2; shift 2 ;;
    --with-vm) WITH_VM=1; shift ;;
    --sections) SECTIONS=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --no-doc) WRITE_DOC=0; shift ;;
    --append) APPEND=1; shift ;;
    --vm-inner) INNER_VM=1; shift ;;   # internal: runs the verbs section inside the VM
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ "$WITH_VM" = 1 ] && SECTIONS="$SECTIONS,verbs"

LAT="$BUILD/tools/bench/ferry-lat"
BW="$BUILD/tools/bench/ferry-bw"
PLOT="$BUILD/tools/plot/ferry-plot"
# In the build folder, so the VM (which sees the host's tree, not its /tmp) runs the same binary.
GATHER="$BUILD/perfcmp-gather"
SAMPLES="$OUT/samples.csv"
CMDS="$OUT/commands.txt"
PORT=20000

log() { echo "[perfcmp $(date -u +%H:%M:%S)] $*" >&2; }
next_port() { PORT=$((PORT + 1)); }

# ---------------------------------------------------------------- setup
setup() {
  local need=()
  command -v iperf3 >/dev/null || need+=(iperf3)
  command -v sockperf >/dev/null || need+=(sockperf)
  command -v ucx_perftest >/dev/null || need+=(ucx-utils)
  command -v g++ >/dev/null || need+=(g++)
  command -v python3 >/dev/null || need+=(python3)
  if [ ${#need[@]} -gt 0 ]; then
    log "installing ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2 \
      || { echo "run.sh: apt-get install ${need[*]} failed" >&2; exit 1; }
  fi
  # Always run ninja (a no-op when up to date): a stale binary from an older tree would be
  # measured silently otherwise.
  log "building ferry-lat/ferry-bw/ferry-plot in $BUILD"
  [ -d "$BUILD" ] || meson setup "$BUILD" --buildtype=release -Dtests=false -Dbenchmarks=false >&2
  local i built=0
  for i in 1 2 3; do
    ninja -C "$BUILD" tools/bench/ferry-lat tools/bench/ferry-bw tools/plot/ferry-plot tools/info/ferry-info >&2 && { built=1; break; }
    log "build failed (attempt $i); retrying in 60 s"; sleep 60
  done
  [ "$built" = 1 ] && [ -x "$LAT" ] && [ -x "$BW" ] && [ -x "$PLOT" ] || { echo "run.sh: could not build the Ferry tools" >&2; exit 1; }
  g++ -O2 -std=c++20 -o "$GATHER" "$HERE/gather.cc" || { echo "run.sh: gather.cc did not build" >&2; exit 1; }
}

# sample SECTION TEST METRIC SIZE ROWS ROWSIZE PAIR SIDE VALUE UNIT STATUS
sample() { local IFS=,; echo "$*" >>"$SAMPLES"; }
note_cmd() { grep -qxF -- "$*" "$CMDS" 2>/dev/null || echo "$*" >>"$CMDS"; }

# ---------------------------------------------------------------- Ferry runs
# ferry SECTION TEST=METRIC[,TEST=METRIC...] PAIR TOOL ARGS...
# (metric: a column of Ferry's CSV.) One invocation covering all sizes and both passes; up to 3
# attempts; a failure is recorded per test. Rows of the timed pass (check "ref") are side
# "ferry", rows of the checked pass (check "full") side "ferry-checked".
ferry() {
  local section=$1 tests=$2 pair=$3; shift 3
  local csv="$OUT/ferry.csv" err="$OUT/ferry.err" attempt ok=0 tm
  note_cmd "$*"
  for attempt in 1 2 3; do
    rm -f "$csv"; next_port
    if timeout 300 "$@" -p "$PORT" --csv "$csv" >/dev/null 2>"$err" && [ -s "$csv" ]; then ok=1; break; fi
    log "ferry run failed (attempt $attempt): $section/$tests: $(grep -m1 -iE 'error|malformed|fail|signal' "$err" | cut -c1-160)"
    echo "$section,$tests,attempt $attempt: $(grep -m1 -iE 'error|malformed|fail|signal' "$err" | tr ',' ';' | cut -c1-200)" >>"$OUT/failures.csv"
  done
  if [ "$ok" = 1 ]; then
    python3 - "$csv" "$tests" "$section" "$pair" "$attempt" >>"$SAMPLES" <<'PY'
import csv, sys
path, tests, section, pair, attempt = sys.argv[1:]
status = "ok" + ("" if attempt == "1" else " (try " + attempt + ")")
for r in csv.DictReader(open(path)):
    side = "ferry" if r.get("check", "ref") == "ref" else "ferry-checked"
    for pairing in tests.split(","):
        test, metric = pairing.split("=")
        print(f"{section},{test},{metric},{r['bytes']},,,{pair},{side},{r[metric]},,{status}")
PY
  else
    for tm in ${tests//,/ }; do
      sample "$section" "${tm%%=*}" "${tm#*=}" all "" "" "$pair" ferry "" "" "failed x3"
    done
  fi
}

# ---------------------------------------------------------------- reference runs
# ucxref SECTION TEST SIZE PAIR ITERS   (env UCX_TLS etc. already exported)
ucxref() {
  local section=$1 test=$2 size=$3 pair=$4 iters=$5 attempt out srv
  # Both processes run with the variables (they are exported): the note says so on both sides,
  # since a reader pasting it with them on the server alone runs the client with every transport.
  local vars="UCX_TLS=$UCX_TLS${UCX_NET_DEVICES:+ UCX_NET_DEVICES=$UCX_NET_DEVICES}"
  note_cmd "$vars ucx_perftest -p PORT -t $test -s $size -n $iters  &  $vars ucx_perftest 127.0.0.1 -p PORT -t $test -s $size -n $iters"
  for attempt in 1 2 3; do
    next_port
    timeout 60 ucx_perftest -p "$PORT" -t "$test" -s "$size" -n "$iters" >/dev/null 2>&1 & srv=$!
    sleep 0.3
    out=$(timeout 60 ucx_perftest 127.0.0.1 -p "$PORT" -t "$test" -s "$size" -n "$iters" 2>&1 | grep '^Final:')
    wait "$srv" 2>/dev/null
    if [ -n "$out" ]; then
      # Final: iters  lat50  lat_avg  lat_overall  bw_avg  bw_overall  rate_avg  rate_overall
      if [[ $test == *lat ]]; then
        sample "$section" "$test" lat_p50_usec "$size" "" "" "$pair" ref "$(awk '{print $3}' <<<"$out")" usec ok
      else
        sample "$section" "$test" bw_mib_s "$size" "" "" "$pair" ref "$(awk '{print $7}' <<<"$out")" MiB/s ok
        # the message rate, in Mpps as ferry-bw prints it
        sample "$section" "${test%_bw}_rate" mpps "$size" "" "" "$pair" ref "$(awk '{print $9 / 1e6}' <<<"$out")" Mpps ok
      fi
      return
    fi
    echo "$section,$test,ucx_perftest size $size attempt $attempt failed" >>"$OUT/failures.csv"
  done
  sample "$section" "$test" ref "$size" "" "" "$pair" ref "" "" "failed x3"
}

sockref() {  # SIZE PAIR
  local size=$1 pair=$2 srv out
  next_port
  note_cmd "sockperf sr --tcp -i 127.0.0.1 -p PORT  &  sockperf pp --tcp -i 127.0.0.1 -p PORT -m $size -t 1"
  sockperf sr --tcp -i 127.0.0.1 -p "$PORT" >/dev/null 2>&1 & srv=$!
  sleep 0.3
  out=$(timeout 30 sockperf pp --tcp -i 127.0.0.1 -p "$PORT" -m "$size" -t 1 2>&1 | grep -m1 'percentile 50.000' | awk '{print $NF}')
  kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null
  sample tcp pingpong lat_p50_usec "$size" "" "" "$pair" ref "$out" usec "$([ -n "$out" ] && echo ok || echo failed)"
}

iperfref() {  # LEN PAIR
  local len=$1 pair=$2 srv out
  next_port
  note_cmd "iperf3 -s -1 -p PORT  &  iperf3 -c 127.0.0.1 -p PORT -l $len -t 1 -J"
  iperf3 -s -1 -p "$PORT" >/dev/null 2>&1 & srv=$!
  sleep 0.3
  out=$(timeout 30 iperf3 -c 127.0.0.1 -p "$PORT" -l "$len" -t 1 -J 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8/1048576)' 2>/dev/null)
  wait "$srv" 2>/dev/null
  sample tcp stream bw_mib_s "$len" "" "" "$pair" ref "$out" MiB/s "$([ -n "$out" ] && echo ok || echo failed)"
}

# ---------------------------------------------------------------- sections
section_ucx() {  # SECTION TLS
  local section=$1 tls=$2 p s
  local -a prm=(--param "UCX_TLS=$tls")
  export UCX_TLS=$tls
  if [ "$section" = ucx-tcp ]; then export UCX_NET_DEVICES=lo; prm+=(--param UCX_NET_DEVICES=lo); else unset UCX_NET_DEVICES; fi
  for p in $(seq 1 "$PAIRS"); do
    log "$section pair $p/$PAIRS"
    ferry "$section" tag_lat=t_typical_usec "$p" "$LAT" --transport ucx "${prm[@]}" --local --op send -s 8,4K,64K,1M -n 10000
    for s in 8 4096 65536 1048576; do ucxref "$section" tag_lat "$s" "$p" 10000; done
    ferry "$section" ucp_put_lat=t_typical_usec "$p" "$LAT" --transport ucx "${prm[@]}" --local --op write -s 8,4K,64K,1M -n 10000
    for s in 8 4096 65536 1048576; do ucxref "$section" ucp_put_lat "$s" "$p" 10000; done
    ferry "$section" ucp_put_bw=bw_avg_mb_s,ucp_put_rate=msg_rate_mpps "$p" "$BW" --transport ucx "${prm[@]}" --local --op write -s 8,4K,64K,1M -n 20000
    for s in 8 4096 65536 1048576; do ucxref "$section" ucp_put_bw "$s" "$p" 20000; done
  done
  unset UCX_TLS UCX_NET_DEVICES
}

section_tcp() {
  local p s
  for p in $(seq 1 "$PAIRS"); do
    log "tcp pair $p/$PAIRS"
    ferry tcp pingpong=t_typical_usec "$p" "$LAT" --transport tcp --local --op send -s 14,4K -n 5000
    for s in 14 4096; do sockref "$s" "$p"; done
    ferry tcp stream=bw_avg_mb_s "$p" "$BW" --transport tcp --local --op send -s 64K,1M -D 1
    for s in 65536 1048576; do iperfref "$s" "$p"; done
  done
}

# gather_rows SECTION PAIR: the in-process reference, a single-thread memcpy gather of the same
# rows (64 B / 256 B, 1k / 10k / 100k rows from random places of 64 MiB), recorded as test "gather".
gather_rows() {
  local sec=$1 p=$2 rs rows line
  for rs in 64 256; do
    for rows in 1000 10000 100000; do
      note_cmd "$GATHER ROWS ROW_SIZE 67108864 0.2"
      line=$("$GATHER" "$rows" "$rs" 67108864 0.2)
      sample "$sec" gather rows_per_sec "$((rows * rs))" "$rows" "$rs" "$p" ref "$(cut -d, -f5 <<<"$line")" rows/s \
        "$([ -n "$line" ] && echo ok || echo failed)"
    done
  done
}

# sparse_rows SECTION_PREFIX PAIR DURATION BACKEND... : the sparse ops and their measured
# pack-then-send references, 64 B / 256 B rows, 1k / 10k / 100k rows per op. sparse_write and
# sparse_read make both passes (checked, then timed); pack_write / pack_read run the timed pass
# only (a reference is never checked). Runs last DURATION seconds each (-D), so the first touch
# of a 64 MiB region's pages is a small share of every run.
sparse_rows() {
  local prefix=$1 p=$2 dur=$3 rs rows be op; shift 3
  local -a prm
  for rs in 64 256; do
    for rows in 1000 10000 100000; do
      for be in "$@"; do
        case $be in
          tcp) prm=(--transport tcp) ;;
          ucx-shm) prm=(--transport ucx --param UCX_TLS=shm,self) ;;
          ucx-tcp) prm=(--transport ucx --param UCX_TLS=tcp,self --param UCX_NET_DEVICES=lo) ;;
          verbs) prm=(--transport verbs --param device=rxe0 --param "gid_index=${FERRY_RDMA_GID_INDEX:-1}") ;;
        esac
        for op in sparse_write pack_write sparse_read pack_read; do
          local check=both
          [[ $op == pack_* ]] && check=ref
          ferry "$prefix$be" "$op:$rows:$rs=rows_per_sec" "$p" "$BW" "${prm[@]}" --local --op "$op" \
            --rows "$rows" --row-size "$rs" -D "$dur" -t 4 --check "$check" \
            --warmup "${SPARSE_WARMUP:-16}"
        done
      done
    done
  done
}

section_sparse() {
  local p
  for p in $(seq 1 "$PAIRS"); do
    log "sparse pair $p/$PAIRS"
    gather_rows sparse "$p"
    sparse_rows sparse- "$p" 0.5 tcp ucx-shm ucx-tcp
  done
}

# verbs: perftest vs ferry inside one soft-RoCE VM boot. The inner part prints SAMPLE lines.
section_verbs_inner() {
  local p s t srv v
  local gid=${FERRY_RDMA_GID_INDEX:-1} addr=${FERRY_RDMA_ADDR:-127.0.0.1}
  local -a prm=(--transport verbs --param device=rxe0 --param "gid_index=$gid")
  SAMPLES=/dev/stdout
  # Latency runs 5000 round trips a size (0.1-0.6 s in the guest): with perftest's 300 the
  # typical of a TCG guest swung 0.84-1.64x between pairs; a 10 s run of each measured 1.03x.
  local n=${VERBS_LAT_ITERS:-5000}
  for p in $(seq 1 "$PAIRS"); do
    for t in write send read; do
      [[ ,$VERBS_PARTS, == *,lat,* ]] || continue
      ferry verbs "ib_${t}_lat=t_typical_usec" "$p" "$LAT" "${prm[@]}" --local --op "$t" -s 8,4K -n "$n"
      for s in 8 4096; do
        next_port
        "ib_${t}_lat" -d rxe0 -x "$gid" -s "$s" -n "$n" -p "$PORT" >/dev/null 2>&1 & srv=$!
        sleep 0.5
        v=$(timeout 60 "ib_${t}_lat" -d rxe0 -x "$gid" -s "$s" -n "$n" -p "$PORT" "$addr" 2>&1 | awk '$1 == '"$s"' {print $5}')
        wait "$srv" 2>/dev/null
        echo "verbs,ib_${t}_lat,lat_p50_usec,$s,,,$p,ref,$v,usec,$([ -n "$v" ] && echo ok || echo failed)"
      done
    done
    for t in write read; do
      [[ ,$VERBS_PARTS, == *,bw,* ]] || continue
      ferry verbs "ib_${t}_bw=bw_avg_mb_s" "$p" "$BW" "${prm[@]}" --local --op "$t" -s 64K,1M -n 100
      for s in 65536 1048576; do
        next_port
        "ib_${t}_bw" -d rxe0 -x "$gid" -s "$s" -n 100 -p "$PORT" >/dev/null 2>&1 & srv=$!
        sleep 0.5
        v=$(timeout 60 "ib_${t}_bw" -d rxe0 -x "$gid" -s "$s" -n 100 -p "$PORT" "$addr" 2>&1 | awk '$1 == '"$s"' {print $4}')
        wait "$srv" 2>/dev/null
        echo "verbs,ib_${t}_bw,bw_mib_s,$s,,,$p,ref,$v,MiB/s,$([ -n "$v" ] && echo ok || echo failed)"
      done
    done
    # The sparse comparisons over verbs (the guest CPU is emulated: only the ratios matter; an op
    # of 100k 256 B rows takes about a second there, hence the short warmup).
    [[ ,$VERBS_PARTS, == *,sparse,* ]] || continue
    SPARSE_WARMUP=2 sparse_rows sparse- "$p" 1 verbs
    # The memcpy gather measured in the same guest: the verbs cells are divided by it, not by
    # the host's (an emulated CPU copies far slower).
    gather_rows sparse-verbs "$p"
  done
}

section_verbs() {
  log "verbs: booting the soft-RoCE VM (one boot for the whole section)"
  note_cmd "tools/softroce/ferry-vm run --timeout 4800 -- perf/compare/run.sh --vm-inner --pairs $PAIRS --build $BUILD"
  "$ROOT/tools/softroce/ferry-vm" run --wait --timeout 4800 --cwd "$ROOT" -- \
      env PERFCMP_VERBS_PARTS="$VERBS_PARTS" "$HERE/run.sh" --vm-inner --pairs "$PAIRS" --build "$BUILD" --out "$OUT" 2>"$OUT/vm.err" |
    grep -E '^(verbs|sparse-verbs),' >>"$SAMPLES" || log "verbs section failed or timed out; partial samples kept (see $OUT/vm.err)"
}

# ---------------------------------------------------------------- main
if [ "$INNER_VM" = 1 ]; then
  OUT=$(mktemp -d); CMDS=/dev/null
  section_verbs_inner
  exit 0
fi

mkdir -p "$OUT"
setup
if [ "$APPEND" = 0 ] || [ ! -s "$SAMPLES" ]; then
  echo "section,test,metric,size,rows,row_size,pair,side,value,unit,status" >"$SAMPLES"
  : >"$CMDS"; : >"$OUT/failures.csv"; : >"$OUT/load.txt"
  date -u +%Y-%m-%dT%H:%M:%SZ >"$OUT/start.txt"
fi
START=$(cat "$OUT/start.txt" 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)
load_mark() { echo "$(date -u +%H:%M) ($1): $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/load.txt"; }
load_mark "start of ${SECTIONS}"
IFS=, read -r -a secs <<<"$SECTIONS"
for sec in "${secs[@]}"; do
  case "$sec" in
    '') ;;
    ucx-shm) section_ucx ucx-shm shm,self ;;
    ucx-tcp) section_ucx ucx-tcp tcp,self ;;
    tcp) section_tcp ;;
    sparse) section_sparse ;;
    verbs) section_verbs ;;
    *) echo "run.sh: unknown section $sec" >&2; exit 2 ;;
  esac
done
END=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_mark "end of ${SECTIONS}"
log "samples in $SAMPLES"
if [ "$WRITE_DOC" = 1 ]; then
  python3 "$HERE/report.py" --out "$OUT" --root "$ROOT" --start "$START" --end "$END" --pairs "$PAIRS" --sections "$SECTIONS" \
    --plotter "$PLOT"
fi
