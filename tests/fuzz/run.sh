#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan+UBSan) and runs each for a bounded time over its
# seed corpus. New crashes are copied into tests/fuzz/corpus/<target>/ by hand as regression
# inputs (the normal build replays that folder in `meson test --suite fuzz`).
# Usage: tests/fuzz/run.sh [SECONDS_PER_TARGET] [RESULTS_FILE]
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
results=${2:-}
source scripts/deps.sh
ferry_install_packages clang libclang-rt-14-dev
build=${FERRY_FUZZ_BUILD_DIR:-build-fuzz}
if [ ! -f "$build/build.ninja" ]; then
  CXX=clang++ meson setup "$build" -Dfuzz=true -Djemalloc=false -Dbenchmarks=false >/dev/null
fi
ninja -C "$build" >/dev/null
status=0
for exe in "$build"/tests/fuzz/fuzz_*; do
  [ -f "$exe" ] && [ -x "$exe" ] || continue
  name=$(basename "$exe"); name=${name#fuzz_}
  work=$(mktemp -d)
  cp -r "tests/fuzz/corpus/$name/." "$work/" 2>/dev/null || true
  log="$build/fuzz-$name.log"
  if "$exe" -max_total_time="$seconds" -max_len=65536 -artifact_prefix="$build/crash-$name-" \
       "$work" >"$log" 2>&1; then
    outcome=ok
  else
    outcome=CRASH
    status=1
  fi
  execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || true)
  if [ -z "$execs" ]; then execs=$(grep -Eo '^#[0-9]+' "$log" | tail -1 | tr -d '#' || true); fi
  corpus=$(find "$work" -type f | wc -l)
  line="fuzz $name: $outcome, ${execs:-?} executions in ${seconds}s, corpus $corpus inputs"
  echo "$line"
  [ -n "$results" ] && echo "$line" >>"$results"
  rm -rf "$work"
done
exit $status
