#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan+UBSan) and runs each for a bounded time over its
# seed corpus, FERRY_FUZZ_JOBS targets at once (default 2: one per core of the CI machine).
# A crash leaves its input in <build>/crash-<target>-*; copy it into tests/fuzz/crashes/<target>/
# once fixed (the normal build replays that folder in `meson test --suite fuzz`).
# Usage: tests/fuzz/run.sh [SECONDS_PER_TARGET] [RESULTS_FILE]
# Env: FERRY_FUZZ_BUILD_DIR (default build-fuzz), FERRY_FUZZ_JOBS; FERRY_FUZZ_BUILD_ONLY=1 builds
# the targets and stops (test.sh builds them in the background during its main stage).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
results=${2:-}
source scripts/deps.sh
ferry_install_packages "${FERRY_CLANG_PACKAGES[@]}"
build=${FERRY_FUZZ_BUILD_DIR:-build-fuzz}
jobs=${FERRY_FUZZ_JOBS:-2}
if [ ! -f "$build/build.ninja" ]; then
  # The parsers under test need no verbs/UCX backend: leaving them out builds faster.
  # -O1 with line tables only (libFuzzer's own advice: -O1 fuzzes faster than -O0, and reports
  # keep file:line), unity sources of up to 40 files as the sanitizer builds: most of this stage
  # was the -O0 -g build of the libraries.
  CXX=clang++ meson setup "$build" -Dfuzz=true -Djemalloc=false -Dbenchmarks=false \
    -Dverbs=disabled -Ducx=disabled -Doptimization=1 -Ddebug=false \
    -Dcpp_args=-gline-tables-only -Dunity=on -Dunity_size=40 >/dev/null
fi
mapfile -t targets < <(ninja -C "$build" -t targets all |
                       sed -nE 's/^(tests\/fuzz\/fuzz_[a-z_]+): cpp_LINKER$/\1/p')
if [ ${#targets[@]} -eq 0 ]; then
  echo "run.sh: no fuzz targets in $build" >&2
  exit 1
fi
ninja -C "$build" ${FERRY_TEST_JOBS:+-j"$FERRY_TEST_JOBS"} "${targets[@]}" >/dev/null
[ "${FERRY_FUZZ_BUILD_ONLY:-0}" = 1 ] && exit 0

# One target: fuzz, then print its result line (and its crash report, if any).
fuzz_one() {
  local name=$1 exe="$build/tests/fuzz/fuzz_$1" work log outcome execs corpus line
  work=$(mktemp -d)
  cp -r "tests/fuzz/corpus/$name/." "$work/" 2>/dev/null || true
  log="$build/fuzz-$name.log"
  if "$exe" -max_total_time="$seconds" -timeout=25 -max_len=65536 \
       -artifact_prefix="$build/crash-$name-" "$work" >"$log" 2>&1; then
    outcome=ok
  else
    outcome=CRASH
  fi
  execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || true)
  if [ -z "$execs" ]; then execs=$(grep -Eo '^#[0-9]+' "$log" | tail -1 | tr -d '#' || true); fi
  corpus=$(find "$work" -type f | wc -l)
  rm -rf "$work"
  line="fuzz $name: $outcome, ${execs:-?} executions in ${seconds}s, corpus $corpus inputs"
  echo "$line"
  [ -n "$results" ] && echo "$line" >>"$results"
  if [ "$outcome" != ok ]; then
    grep -E 'ERROR: |SUMMARY: |runtime error|#[0-9]+ 0x' "$log" | head -20
    return 1
  fi
}

status=0
running=0
for t in "${targets[@]}"; do
  fuzz_one "$(basename "$t" | sed 's/^fuzz_//')" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n || status=1
    running=$((running - 1))
  fi
done
while [ "$running" -gt 0 ]; do
  wait -n || status=1
  running=$((running - 1))
done
exit $status
