#!/usr/bin/env bash
# Regenerates docs/perf/serving.md in one command, on an idle machine (nothing compiling: every
# figure is a ratio of runs alternated in one sitting):
#
#   perf/serving/run.sh                     # ROUNDS=3 DURATION=10 by default
#   ROUNDS=5 DURATION=20 OUT=/tmp/s.md perf/serving/run.sh
#
# Needs wrk (apt-get install wrk), curl, taskset, and the build in BUILD (ninja is run for the
# two helpers of perf/serving/meson.build, which the default build leaves out).
#
# What it measures: ferry-serve (tools/serve) with an fm model that ferry-train exported
# (--export-dir) from ferry-gen data, driven by wrk (-t1 -c8 --latency, POST bodies from a Lua
# script cycling through the test lines), each round running ours and the reference back to back:
#   1 instance     requests/s, p50, p99 of 1-instance predict requests; the reference is the
#                  library's floor: serve_floor (perf/serving/serve_floor.cc), cpp-httplib with
#                  ferry-serve's settings and one handler returning a constant, same wrk settings,
#                  with TCP_NODELAY (FLOOR_NODELAY=0: without, as cpp-httplib's default; with Nagle
#                  on, an answer's body waits for the client's delayed ACK: ~40 ms a request).
#   100 instances  the same with 100 instances a request, against the floor at the same body.
#   compute limit  instances/s of the 100-instance requests against ferry-predict's offline
#                  samples/s on the same model (the export directory's newest version) and the
#                  same lines (the test file, PREDICT_REPEAT times; wall time of the command,
#                  model load included). Goal: >= 0.7x.
#   swaps          p99 of 1-instance requests while a loop publishes a new version every
#                  SWAP_EVERY seconds into the served directory (the training job's versions,
#                  bases and deltas, copied in as its writer does: files, then the MANIFEST by
#                  rename), against the 1-instance run without swaps of the same round.
# CPUs: the server (and ferry-predict, one thread) on SERVER_CPUS, wrk and the swap loop on
# CLIENT_CPUS (defaults 1 and 0 on a host with 2 or more cores; no pinning on one core).
#
# Knobs: ROUNDS (3), DURATION (10 s a wrk run), WARMUP (1 s of wrk before each run, discarded),
# CONNECTIONS (8), SERVER_THREADS (8, ferry-serve --threads and serve_floor's), SAMPLES (200000
# training samples, 2 epochs), TEST_LINES (100000), PREDICT_REPEAT (10), SWAP_EVERY (0.5 s),
# BIN (the tools, BUILD/tools), BUILD (obj-x86_64-linux-gnu), OUT (docs/perf/serving.md),
# SERVER_CPUS, CLIENT_CPUS, FLOOR_NODELAY (1), KEEP (1: keep the work directory: wrk outputs,
# server logs, bodies, the export), PROFILE (1: perf record -g of the server over one extra 100-instance
# run, its top symbols in the markdown; needs perf).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-$root/obj-x86_64-linux-gnu}
bin=${BIN:-$build/tools}
rounds=${ROUNDS:-3}
duration=${DURATION:-10}
warmup=${WARMUP:-1}
conns=${CONNECTIONS:-8}
sthreads=${SERVER_THREADS:-8}
samples=${SAMPLES:-200000}
test_lines=${TEST_LINES:-100000}
repeat=${PREDICT_REPEAT:-10}
swap_every=${SWAP_EVERY:-0.5}
profile=${PROFILE:-0}
floor_args=()
[ "${FLOOR_NODELAY:-1}" = 1 ] && floor_args=(--tcp-nodelay)
out=${OUT:-$root/docs/perf/serving.md}
gen=$bin/gen/ferry-gen
train=$bin/train/ferry-train
predict=$bin/train/ferry-predict
serve=$bin/serve/ferry-serve
floor=$build/perf/serving/serve_floor
prefixes=$build/perf/serving/export_prefixes
if [ "$(nproc)" -ge 2 ]; then
  server_cpus=${SERVER_CPUS:-1}
  client_cpus=${CLIENT_CPUS:-0}
else
  server_cpus=${SERVER_CPUS:-}
  client_cpus=${CLIENT_CPUS:-}
fi
command -v wrk >/dev/null || { echo "run.sh: wrk is missing (apt-get install wrk)" >&2; exit 1; }
command -v curl >/dev/null || { echo "run.sh: curl is missing" >&2; exit 1; }
# Always run ninja (a no-op when up to date): a stale binary would be measured silently.
lock=()
command -v flock >/dev/null && lock=(flock /tmp/ferry-ninja.lock)
"${lock[@]}" ninja -C "$build" tools/gen/ferry-gen tools/train/ferry-train tools/train/ferry-predict \
  tools/serve/ferry-serve perf/serving/serve_floor perf/serving/export_prefixes >&2
# pin CPUS CMD...: CMD on CPUS (none given: as is).
pin() {
  local cpus=$1
  shift
  if [ -n "$cpus" ]; then taskset -c "$cpus" "$@"; else "$@"; fi
}

work=$(mktemp -d)
spid=
loop_pid=
cleanup() {
  [ -n "$loop_pid" ] && kill "$loop_pid" 2>/dev/null || true
  [ -n "$spid" ] && kill "$spid" 2>/dev/null && wait "$spid" 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then echo "run.sh: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

# The model: fm trained on ferry-gen data, publishing a version every export_every samples (bases
# every 5 versions, deltas between, every version kept) so that the swap runs have enough to
# publish: DURATION / SWAP_EVERY of them, and a few more.
need=$(python3 -c "import math; print(math.ceil($duration / $swap_every) + 3)")
export_every=$((2 * samples / need))
echo "training fm on $samples samples (2 epochs), a version every $export_every samples" >&2
"$gen" --samples "$samples" --test-samples "$test_lines" --out "$work/tr.svm" \
  --test-out "$work/te.svm" --seed 7 -q >/dev/null
"$train" --model fm --train "$work/tr.svm" --epochs 2 --validation-fraction 0 --transport tcp -q \
  --progress never --export-dir "$work/exp" --export-every "$export_every" --base-every 5 \
  --export-keep-bases 0 >&2
mkdir "$work/manifests"
versions=$("$prefixes" "$work/exp" "$work/manifests")
echo "$versions versions exported" >&2
[ "$versions" -ge 2 ] || { echo "run.sh: fewer than 2 versions to swap" >&2; exit 1; }
model_kind=fm

# Request bodies: the test lines without their label, 1 and 100 instances a request.
python3 - "$work" <<'PY'
import json, os, sys
work = sys.argv[1]
feats = []
for line in open(os.path.join(work, "te.svm")):
    parts = line.split(None, 1)
    feats.append(parts[1].strip() if len(parts) > 1 else "")
with open(os.path.join(work, "bodies1.jsonl"), "w") as f:
    for x in feats:
        f.write(json.dumps({"instances": [x]}) + "\n")
with open(os.path.join(work, "bodies100.jsonl"), "w") as f:
    for i in range(0, len(feats) - len(feats) % 100, 100):
        f.write(json.dumps({"instances": feats[i:i + 100]}) + "\n")
PY
[ -s "$work/bodies100.jsonl" ] || { echo "run.sh: TEST_LINES must be at least 100" >&2; exit 1; }
cat >"$work/bodies.lua" <<'LUA'
-- POSTs the bodies of the file $BODIES (one JSON document a line) in turn.
local bodies = {}
for line in io.lines(os.getenv("BODIES")) do bodies[#bodies + 1] = line end
local i = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  i = i % #bodies + 1
  return wrk.format(nil, nil, nil, bodies[i])
end
LUA

# start_server LOG CMD...: CMD in the background on SERVER_CPUS; sets spid and url once it prints
# the port it listens on.
start_server() {
  local log=$1
  shift
  # Not through pin(): $! must be the server itself (a function would run in a subshell).
  if [ -n "$server_cpus" ]; then
    taskset -c "$server_cpus" "$@" >"$log" 2>&1 &
  else
    "$@" >"$log" 2>&1 &
  fi
  spid=$!
  local port
  port=$("$root/scripts/serve-port.sh" "$log" "$spid") || exit 1
  url=http://127.0.0.1:$port
}
stop_server() {
  kill "$spid"
  wait "$spid" || true
  spid=
}
# load NAME BODIES: warm-up, then the measured wrk run against $url, its output in $work/NAME.
load() {
  local name=$1 bodies=$2
  local target=$url/v1/models/bench:predict
  if [ "$warmup" != 0 ]; then
    BODIES=$bodies pin "$client_cpus" wrk -t1 -c"$conns" -d"${warmup}s" -s "$work/bodies.lua" \
      "$target" >/dev/null
  fi
  BODIES=$bodies pin "$client_cpus" wrk -t1 -c"$conns" -d"${duration}s" --latency \
    -s "$work/bodies.lua" "$target" >"$work/$name"
  echo "$name: $(grep -E 'Requests/sec' "$work/$name")" >&2
}
# A fresh served directory holding version 1 only.
fresh_dir() {
  rm -rf "$work/served"
  mkdir "$work/served"
  local first
  first=$(sed -n '2s/^v [0-9]* [a-z]* \([^ ]*\) .*/\1/p' "$work/manifests/MANIFEST.1")
  cp "$work/exp/$first" "$work/served/"
  cp "$work/manifests/MANIFEST.1" "$work/served/MANIFEST"
}
# The swap loop: every SWAP_EVERY seconds the next version's file, then its manifest by rename.
swap_loop() {
  local k file
  for k in $(seq 2 "$versions"); do
    sleep "$swap_every"
    file=$(sed -n "$((k + 1))s/^v [0-9]* [a-z]* \([^ ]*\) .*/\1/p" "$work/manifests/MANIFEST.$k")
    cp "$work/exp/$file" "$work/served/"
    cp "$work/manifests/MANIFEST.$k" "$work/served/.MANIFEST.tmp"
    mv "$work/served/.MANIFEST.tmp" "$work/served/MANIFEST"
  done
}
serve_args=(--model-name bench --listen 127.0.0.1:0 --threads "$sthreads")

for r in $(seq "$rounds"); do
  echo "round $r" >&2
  # ours: 1 and 100 instances on the newest version, no swaps
  start_server "$work/serve.log" "$serve" --model-dir "$work/exp" "${serve_args[@]}"
  load "serve1.$r" "$work/bodies1.jsonl"
  load "serve100.$r" "$work/bodies100.jsonl"
  curl -fsS "$url/metrics" >"$work/metrics.serve.$r"
  stop_server
  # the library's floor, same bodies
  start_server "$work/floor.log" "$floor" --listen 127.0.0.1:0 --threads "$sthreads" \
    ${floor_args[@]+"${floor_args[@]}"}
  load "floor1.$r" "$work/bodies1.jsonl"
  load "floor100.$r" "$work/bodies100.jsonl"
  stop_server
  # ferry-predict: the same lines, PREDICT_REPEAT times, on the same version
  files=()
  for _ in $(seq "$repeat"); do files+=("$work/te.svm"); done
  t0=$(date +%s.%N)
  pin "$server_cpus" "$predict" --threads 1 "$work/exp" "${files[@]}" -o /dev/null
  t1=$(date +%s.%N)
  echo "$r $(echo "$t1 - $t0" | bc)" >>"$work/predict"
  echo "predict.$r: $((test_lines * repeat)) lines in $(echo "$t1 - $t0" | bc) s" >&2
  # ours during swaps: 1 instance, from version 1 on, a version every SWAP_EVERY
  fresh_dir
  start_server "$work/swap.log" "$serve" --model-dir "$work/served" "${serve_args[@]}"
  swap_loop &
  loop_pid=$!
  load "swap1.$r" "$work/bodies1.jsonl"
  kill "$loop_pid" 2>/dev/null || true
  wait "$loop_pid" 2>/dev/null || true
  loop_pid=
  curl -fsS "$url/metrics" >"$work/metrics.swap.$r"
  stop_server
  if grep -q 'refused' "$work/swap.log"; then cat "$work/swap.log" >&2; fi
done

# An extra 100-instance run under perf record (not in the figures): where the server's time goes.
if [ "$profile" = 1 ]; then
  start_server "$work/serve.log" "$serve" --model-dir "$work/exp" "${serve_args[@]}"
  # A first run makes the library's pool threads, which perf record -p attaches to (it does not
  # follow threads made after it starts).
  BODIES=$work/bodies100.jsonl pin "$client_cpus" wrk -t1 -c"$conns" -d1s -s "$work/bodies.lua" \
    "$url/v1/models/bench:predict" >/dev/null
  perf record -g -o "$work/perf.data" -p "$spid" -- sleep "$duration" 2>"$work/perf.log" &
  perf_pid=$!
  saved_warmup=$warmup
  warmup=0
  load "profile100" "$work/bodies100.jsonl"
  warmup=$saved_warmup
  wait "$perf_pid" || cat "$work/perf.log" >&2
  stop_server
  perf report -i "$work/perf.data" --stdio --no-children --percent-limit 1.5 --sort symbol \
    2>/dev/null | grep -E '^ +[0-9.]+%' | head -25 >"$work/profile.txt" || true
fi

python3 - "$work" "$out" "$rounds" "$duration" "$warmup" "$conns" "$sthreads" "$samples" \
  "$test_lines" "$repeat" "$swap_every" "$versions" "$export_every" "${server_cpus:-any}" \
  "${client_cpus:-any}" "$model_kind" "${FLOOR_NODELAY:-1}" <<'PY'
import datetime, os, re, statistics, sys
(work, out, rounds, duration, warmup, conns, sthreads, samples, test_lines, repeat, swap_every,
 versions, export_every, server_cpus, client_cpus, model_kind, floor_nodelay) = sys.argv[1:18]
rounds, test_lines, repeat = int(rounds), int(test_lines), int(repeat)
UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}
def ms(text):
    m = re.match(r"([0-9.]+)(us|ms|s|m)$", text)
    return float(m.group(1)) * UNIT[m.group(2)]
def wrk(name):
    text = open(os.path.join(work, name)).read()
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", text).group(1))
    pct = dict(re.findall(r"^\s+(50|99)%\s+(\S+)$", text, re.M))
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    errors = (int(bad.group(1)) if bad else 0) + (sum(map(int, sock.groups())) if sock else 0)
    total = int(re.search(r"(\d+) requests in", text).group(1))
    return {"rps": rps, "p50": ms(pct["50"]), "p99": ms(pct["99"]), "errors": errors, "n": total}
runs = {k: [wrk(f"{k}.{r}") for r in range(1, rounds + 1)]
        for k in ("serve1", "serve100", "floor1", "floor100", "swap1")}
predict = [test_lines * repeat / float(l.split()[1]) for l in open(os.path.join(work, "predict"))]
def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r"\s+([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0
swaps = [metric(open(os.path.join(work, f"metrics.swap.{r}")).read(), "ferry_serve_model_swaps_total")
         for r in range(1, rounds + 1)]
fails = [metric(open(os.path.join(work, f"metrics.swap.{r}")).read(),
                "ferry_serve_model_load_failures_total") for r in range(1, rounds + 1)]
med = statistics.median
def m(name, key):
    return med(x[key] for x in runs[name])
def ratio(xs, ys):
    rs = [x / y for x, y in zip(xs, ys)]
    return f"{med(rs):.3f} [{min(rs):.3f}-{max(rs):.3f}]", med(rs)
def col(name, key):
    return [x[key] for x in runs[name]]
def verdict(ok):
    return "met" if ok else "**missed**"
inst = [x["rps"] * 100 for x in runs["serve100"]]
r_compute, v_compute = ratio(inst, predict)
r_swap, v_swap = ratio(col("swap1", "p99"), col("serve1", "p99"))
r1, _ = ratio(col("serve1", "rps"), col("floor1", "rps"))
r100, _ = ratio(col("serve100", "rps"), col("floor100", "rps"))
r1p99, _ = ratio(col("serve1", "p99"), col("floor1", "p99"))
r100p99, _ = ratio(col("serve100", "p99"), col("floor100", "p99"))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
errors = {k: sum(x["errors"] for x in v) for k, v in runs.items()}
lines = [
    "# Serving: ferry-serve under load, against its library's floor and ferry-predict",
    "",
    f"Measured {datetime.date.today()} by `perf/serving/run.sh` ({rounds} alternating rounds, "
    f"{duration} s a run after {warmup} s of warm-up; {os.cpu_count()} cores, {cpu}). "
    f"Load: `wrk -t1 -c{conns} --latency` (Debian's wrk 4.1) with a Lua script posting the test "
    f"lines in turn, on CPU {client_cpus}; the server (`--threads {sthreads}`) on CPU {server_cpus}. "
    f"Model: {model_kind} trained by `ferry-train --export-dir` on {int(samples):,} ferry-gen samples "
    f"(2 epochs, {versions} versions: a version every {int(export_every):,} samples, a base every 5); "
    f"requests carry the {test_lines:,} lines of `ferry-gen --test-out` without their label. "
    "Ratios are medians of per-round ratios (min-max in brackets); figures are medians.",
    "",
    "| comparison | ours | reference | ratio | goal | |",
    "|---|---:|---:|---:|---:|---|",
    f"| instances/s of 100-instance requests vs `ferry-predict --threads 1` on the same model and lines "
    f"(samples/s, wall time of {test_lines * repeat:,} lines, model load included) | {med(inst):,.0f} | "
    f"{med(predict):,.0f} | {r_compute} | >= 0.70 | {verdict(v_compute >= 0.7)} |",
    f"| p99 of 1-instance requests during swaps (a version every {swap_every} s) vs without (ms) | "
    f"{m('swap1', 'p99'):.3f} | {m('serve1', 'p99'):.3f} | {r_swap} | | |",
    f"| requests/s, 1 instance, vs the library's floor (a handler returning a constant) | "
    f"{m('serve1', 'rps'):,.0f} | {m('floor1', 'rps'):,.0f} | {r1} | | |",
    f"| requests/s, 100 instances, vs the library's floor | {m('serve100', 'rps'):,.0f} | "
    f"{m('floor100', 'rps'):,.0f} | {r100} | | |",
    "",
    "The issue sets a figure for the compute limit only; the swap and floor rows are reported as "
    "measured. The floor is `perf/serving/serve_floor` (cpp-httplib with ferry-serve's pool, timeouts "
    "and keep-alive cap, one handler answering a constant) "
    + ("with TCP_NODELAY on its connections." if floor_nodelay == "1" else
       "with cpp-httplib's default socket options (Nagle on).")
    + (" ferry-serve's 1-instance p50 is over 35 ms where the floor's is under 5: its answers wait "
       "for the client's delayed ACK (cpp-httplib leaves Nagle on unless `set_tcp_nodelay(true)`; "
       "the header and the body are separate writes)."
       if m("serve1", "p50") > 35 and m("floor1", "p50") < 5 else ""),
    "",
    "## Latency",
    "",
    "| run | requests/s | p50 (ms) | p99 (ms) | failed |",
    "|---|---:|---:|---:|---:|",
]
for name, what in (("serve1", "ferry-serve, 1 instance"), ("swap1", "ferry-serve, 1 instance, during swaps"),
                   ("floor1", "floor, 1-instance body"), ("serve100", "ferry-serve, 100 instances"),
                   ("floor100", "floor, 100-instance body")):
    lines.append(f"| {what} | {m(name, 'rps'):,.0f} | {m(name, 'p50'):.3f} | {m(name, 'p99'):.3f} | "
                 f"{errors[name]} |")
lines += [
    "",
    f"p99 over the floor's: {r1p99} at 1 instance, {r100p99} at 100. \"failed\": non-2xx answers "
    "and socket errors, all rounds. During the swap runs the server swapped in "
    f"{', '.join(str(int(s)) for s in swaps)} versions (by round) and refused "
    f"{int(sum(fails))}; each swap loads the newest base and the deltas after it (docs/serving.md, "
    "Limits).",
    "",
    "## Settings",
    "",
    "```sh",
    f"ROUNDS={rounds} DURATION={duration} WARMUP={warmup} CONNECTIONS={conns} SERVER_THREADS={sthreads} \\",
    f"  SAMPLES={samples} TEST_LINES={test_lines} PREDICT_REPEAT={repeat} SWAP_EVERY={swap_every} \\",
    f"  SERVER_CPUS={server_cpus} CLIENT_CPUS={client_cpus} FLOOR_NODELAY={floor_nodelay} perf/serving/run.sh",
    "```",
    "",
]
prof = os.path.join(work, "profile.txt")
profile = open(prof).read().splitlines() if os.path.exists(prof) else []
if profile:
    lines += ["## Where the server's time goes (100 instances, `perf record -g`)", "", "```"]
    lines += [re.sub(r"(\s+-)*\s*$", "", l) for l in profile]  # no empty IPC columns
    lines += ["```", ""]
# Per instance on the server's CPU, from this run: ferry-serve, the library's floor at the same
# body (HTTP and reading it), ferry-predict's whole sample; with a profile, the shares of JSON
# decoding (nlohmann's lexer and the token buffer it fills a character at a time) and scoring.
us_serve = 1e6 / med(inst)
us_floor = 1e6 / (m("floor100", "rps") * 100)
us_predict = 1e6 / med(predict)
def share(pattern):
    return sum(float(l.split("%")[0]) for l in profile
               if re.match(r"\s*[0-9.]+%", l) and re.search(pattern, l)) / 100
missed = [] if v_compute >= 0.7 else ["the compute limit"]
why = [f"Per instance on the server's one CPU: ferry-serve {us_serve:.2f} us "
       f"({med(inst):,.0f} instances/s); the library's floor at the same 100-instance body "
       f"{us_floor:.2f} us (HTTP and reading the body); ferry-predict {us_predict:.2f} us for a whole "
       "sample (reading, parsing, scoring, writing)."]
if profile:
    json_share = share(r"nlohmann|basic_string<.*>::push_back")
    score_share = share(r"ferry::models::(Scorer|UniqueIds|ModelTable)")
    us_json = json_share * us_serve
    ceiling = us_predict / (us_floor + us_json + us_predict)
    why.append(
        f"The profile puts {json_share:.0%} of the server's CPU in JSON decoding (nlohmann's lexer "
        f"and the token buffer it fills one character at a time), {us_json:.2f} us an instance, and "
        f"{score_share:.0%} in scoring ({score_share * us_serve:.2f} us, batches of 100 where "
        "ferry-predict scores 4,096). The floor, the JSON decoding and ferry-predict's whole cost add "
        f"up to {us_floor + us_json + us_predict:.2f} us: a ceiling of {ceiling:.2f}x while the JSON "
        f"is nlohmann's; 0.7x ({us_predict / 0.7:.2f} us) would leave "
        f"{us_predict / 0.7 - us_floor - us_json:.2f} us to parse and score an instance.")
else:
    why.append("Run with PROFILE=1 for the shares of JSON decoding and scoring.")
lines += ["## Why a goal is missed (profile)" if missed else "## Per-instance costs", "",
          (f"Missed: {', '.join(missed)}, {v_compute:.2f}x. " if missed else "") + " ".join(why), ""]
with open(out, "w") as f:
    f.write("\n".join(lines))
print("\n".join(lines))
if any(errors.values()):
    print(f"run.sh: failed requests: {errors}", file=sys.stderr)
PY
