#!/usr/bin/env bash
# Runs Ferry's reliability checks and regenerates docs/reliability.md from what actually happened:
#   1. the libFuzzer targets (tests/fuzz/run.sh, clang + ASan/UBSan), SECONDS each;
#   2. the netns suite (tests/netns: network faults between two namespaces, tcp and ucx over tcp)
#      and its SIGKILL loop; both print RELIABILITY lines that are collected here;
#   3. when built, the error-path cases of the conformance suite, the fault-injection wrapper's
#      tests, the tcp backend's hostile-peer tests and the fuzz corpus replay;
#   4. the sanitizer stages of ./test.sh (scripts/test-stages.sh): the ASan+UBSan build running
#      every suite but 'rdma', and the TSan build running the multi-threaded tests.
# Usage: scripts/reliability-report.sh [FUZZ_SECONDS_PER_TARGET (default 60)]
# Env: FERRY_RELIABILITY_BUILD_DIR (default build-reliability), FERRY_NETNS_KILLS,
#      FERRY_NETNS_SEED, FERRY_SKIP_FUZZ=1 (keeps the fuzz rows out, says so in the report),
#      FERRY_SKIP_SANITIZERS=1 (likewise for step 4), FERRY_ASAN_BUILD_DIR (default
#      build-reliability-asan), FERRY_TSAN_BUILD_DIR (default build-reliability-tsan).
# Needs root for the netns suite (it skips itself otherwise, and the report says so).
set -uo pipefail
cd "$(dirname "$0")/.."
fuzz_seconds=${1:-60}
build=${FERRY_RELIABILITY_BUILD_DIR:-build-reliability}
out=docs/reliability.md
work=$(mktemp -d)
# A fuzz build of its own (never another build directory's).
export FERRY_FUZZ_BUILD_DIR=${FERRY_FUZZ_BUILD_DIR:-build-reliability-fuzz}

cleanup() {
  # Namespaces of test processes that died without cleaning up (their own handlers normally do).
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^ferry-' || true); do
    pid=$(echo "$ns" | cut -d- -f2)
    if ! kill -0 "$pid" 2>/dev/null; then ip netns del "$ns" 2>/dev/null || true; fi
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Whether the tree differs from HEAD, read before anything here writes (this report itself
# and the fuzz corpora do not count: the run rewrites them).
if [ -n "$(git status --porcelain --untracked-files=no -- . ':!docs/reliability.md' ':!tests/fuzz' 2>/dev/null)" ]; then
  tree_state=" plus uncommitted changes in the tree"
else
  tree_state=" (clean tree)"
fi
source scripts/deps.sh
set +e  # deps.sh turns on -e; every step here records its failure and carries on
if [ "$(id -u)" -eq 0 ]; then
  ferry_install_packages iproute2 nftables
fi

log() { echo "reliability: $*" >&2; }

# ---- build -----------------------------------------------------------------------------------
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" -Dbenchmarks=false >"$work/setup.log" 2>&1 || {
    cat "$work/setup.log" >&2
    exit 1
  }
fi
targets=(tests/netns/netns_test tests/common/ferry_test_peer)
fuzz_names=(handshake region tcp_frames snapshot tools readers ps_wire model_file)
optional=(tests/conformance/conformance tests/fault/fault_test tests/tcp/tcp_test)
for t in "${fuzz_names[@]}"; do optional+=("tests/fuzz/fuzz_replay_$t"); done
log "building ${targets[*]}"
ninja -C "$build" "${targets[@]}" >"$work/build.log" 2>&1 || {
  tail -30 "$work/build.log" >&2
  exit 1
}
for t in "${optional[@]}"; do
  ninja -C "$build" "$t" >>"$work/build.log" 2>&1 || log "could not build $t (row marked not built)"
done

# ---- 1. fuzz ---------------------------------------------------------------------------------
fuzz_status="skipped (FERRY_SKIP_FUZZ=1)"
if [ "${FERRY_SKIP_FUZZ:-0}" != 1 ]; then
  log "fuzzing each target for ${fuzz_seconds}s"
  # The parsers under test need no backend: building without verbs/UCX is faster and keeps a
  # backend that clang cannot compile from blocking the fuzz run.
  if [ ! -f "$FERRY_FUZZ_BUILD_DIR/build.ninja" ]; then
    ferry_install_packages clang libclang-rt-14-dev
    CXX=clang++ meson setup "$FERRY_FUZZ_BUILD_DIR" -Dfuzz=true -Djemalloc=false \
      -Dbenchmarks=false -Dverbs=disabled -Ducx=disabled >"$work/fuzz-setup.log" 2>&1 ||
      log "fuzz build setup failed: $(tail -3 "$work/fuzz-setup.log")"
  fi
  if tests/fuzz/run.sh "$fuzz_seconds" "$work/fuzz.txt" >"$work/fuzz.log" 2>&1; then
    fuzz_status="ok"
  else
    fuzz_status="FAILED (see $build/fuzz-*.log and tests/fuzz/run.sh output)"
  fi
fi

# ---- 2. netns suite --------------------------------------------------------------------------
log "running the netns suite (network faults and the SIGKILL loop)"
start=$(date +%s)
FERRY_RELIABILITY_RESULTS="$work/netns.txt" meson test -C "$build" --suite netns --no-rebuild \
  >"$work/netns-meson.txt" 2>&1
netns_seconds=$(( $(date +%s) - start ))
touch "$work/netns.txt"
# Cases that skipped (not root, missing tools) print why; keep the first reason.
skip_reason=$(grep -ho 'every case skips: .*' "$build/meson-logs/testlog.txt" 2>/dev/null | head -1)

# ---- 3. error-path suites --------------------------------------------------------------------
gtest_row() {  # name exe filter -> "| name | filter | passed | failed | skipped | outcome |"
  local name=$1 exe=$2 filter=$3 logf="$work/$1.log" p f s outcome
  if [ ! -x "$exe" ]; then
    echo "| $name | \`$filter\` | - | - | - | not built |"
    return
  fi
  timeout 300 "$exe" --gtest_filter="$filter" >"$logf" 2>&1
  local rc=$?
  p=$(grep -Eo '^\[  PASSED  \] [0-9]+' "$logf" | grep -Eo '[0-9]+$' || true)
  f=$(grep -Eo '^\[  FAILED  \] [0-9]+ test' "$logf" | grep -Eo '[0-9]+' || true)
  s=$(grep -Eo '^\[  SKIPPED \] [0-9]+' "$logf" | grep -Eo '[0-9]+$' || true)
  if [ $rc -eq 0 ]; then outcome=pass; elif [ $rc -eq 124 ]; then outcome="TIMEOUT"; else outcome="FAIL (exit $rc)"; fi
  echo "| $name | \`$filter\` | ${p:-0} | ${f:-0} | ${s:-0} | $outcome |"
}
log "running the error-path suites"
{
  gtest_row conformance-error-paths "$build/tests/conformance/conformance" \
    '*Violation*:*TargetChecks*:*PeerKilled*:*CloseCancels*:*Failure*:*Error*'
  gtest_row fault-wrapper "$build/tests/fault/fault_test" '*'
  gtest_row tcp-hostile-peers "$build/tests/tcp/tcp_test" '*Hostile*:*Forged*'
} >"$work/errpaths.md"
replay_rows=""
for t in "${fuzz_names[@]}"; do
  exe="$build/tests/fuzz/fuzz_replay_$t"
  if [ -x "$exe" ]; then
    if "$exe" "tests/fuzz/corpus/$t" "tests/fuzz/crashes/$t" >"$work/replay-$t.log" 2>&1; then r=pass; else r=FAIL; fi
    n=$(find "tests/fuzz/corpus/$t" "tests/fuzz/crashes/$t" -type f 2>/dev/null | wc -l)
    replay_rows+="| $t | $n | $r |"$'\n'
  else
    replay_rows+="| $t | - | not built |"$'\n'
  fi
done

# ---- 4. sanitizers ---------------------------------------------------------------------------
san_status="skipped (FERRY_SKIP_SANITIZERS=1)"
asan_rows=""
tsan_rows=""
if [ "${FERRY_SKIP_SANITIZERS:-0}" != 1 ]; then
  source scripts/test-stages.sh
  export FERRY_ASAN_BUILD_DIR=${FERRY_ASAN_BUILD_DIR:-build-reliability-asan}
  export FERRY_TSAN_BUILD_DIR=${FERRY_TSAN_BUILD_DIR:-build-reliability-tsan}
  log "ASan+UBSan stage (every suite but rdma) in $FERRY_ASAN_BUILD_DIR"
  start=$(date +%s)
  ferry_asan_stage >"$work/asan.log" 2>&1
  asan_rc=$?
  asan_seconds=$(( $(date +%s) - start ))
  log "TSan stage (multi-threaded tests) in $FERRY_TSAN_BUILD_DIR"
  start=$(date +%s)
  ferry_tsan_stage >"$work/tsan.log" 2>&1
  tsan_rc=$?
  tsan_seconds=$(( $(date +%s) - start ))
  # meson's per-test results, the gtest cases they ran and every sanitizer report in the logs.
  asan_log="$FERRY_ASAN_BUILD_DIR/meson-logs/testlog.txt"
  asan_json="$FERRY_ASAN_BUILD_DIR/meson-logs/testlog.json"
  if [ -f "$asan_json" ]; then
    asan_rows=$(python3 - "$asan_json" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    t = json.loads(line)
    print(f"| {t['name']} | {t['result']} | {t['duration']:.1f} |")
PY
)
  fi
  asan_tests=$(grep -Eo '^\[  PASSED  \] [0-9]+' "$asan_log" 2>/dev/null | awk '{s += $NF} END {print s + 0}')
  asan_reports=$(grep -cE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$asan_log" 2>/dev/null)
  asan_meson=$(grep -E '^(Ok|Fail|Skipped|Timeout|Expected Fail|Unexpected Pass):' "$work/asan.log" | tr -s ' ' | paste -sd ' ')
  tsan_rows=$(grep -E '^tsan ' "$work/tsan.log" | sed -E 's/^tsan ([^:]+): (.*)$/| \1 | \2 |/')
  tsan_tests=$(cat "$FERRY_TSAN_BUILD_DIR"/tsan-*.log 2>/dev/null | grep -Eo '^\[  PASSED  \] [0-9]+' | awk '{s += $NF} END {print s + 0}')
  tsan_reports=$(cat "$FERRY_TSAN_BUILD_DIR"/tsan-*.log 2>/dev/null | grep -c 'WARNING: ThreadSanitizer')
  if [ $asan_rc -eq 0 ] && [ $tsan_rc -eq 0 ]; then san_status=ok; else san_status="FAILED"; fi
  [ $asan_rc -eq 0 ] || log "ASan stage failed: see $asan_log"
  [ $tsan_rc -eq 0 ] || log "TSan stage failed: see $FERRY_TSAN_BUILD_DIR/tsan-*.log"
fi

# ---- report ----------------------------------------------------------------------------------
# RELIABILITY lines: key=value fields, `error=` last (runs to the end of the line).
netns_rows() {  # filter: "kill" or "faults"
  awk -v want="$1" '
    /^RELIABILITY / {
      line = substr($0, 13); err = ""
      i = index(line, " error="); if (i > 0) { err = substr(line, i + 7); line = substr(line, 1, i - 1) }
      delete f; n = split(line, kv, " ")
      for (j = 1; j <= n; j++) { e = index(kv[j], "="); f[substr(kv[j], 1, e - 1)] = substr(kv[j], e + 1) }
      gsub(/\|/, "/", err)
      is_kill = (f["scenario"] == "sigkill")
      if ((want == "kill") != is_kill) next
      note = f["note"]; gsub(/,/, ", ", note); gsub(/;/, "; ", note)
      mib = (f["bytes"] ~ /^[0-9]+$/) ? sprintf("%.1f", f["bytes"] / 1048576) : "-"
      if (want == "kill")
        printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", f["backend"], f["outcome"], f["ops"], f["errors"], f["detect_ms"], f["drain_ms"], note, err
      else
        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", f["scenario"], f["backend"], f["outcome"], f["ops"], f["errors"], mib, f["detect_ms"], f["drain_ms"], f["proxy_bytes"], note, err
    }' "$work/netns.txt"
}
fault_rows=$(netns_rows faults)
kill_rows=$(netns_rows kill)
meson_rows=$(grep -E '^ *[0-9]+/[0-9]+ ' "$work/netns-meson.txt" |
  sed -E 's/^ *[0-9]+\/[0-9]+ +([^ ]+ \/ )?//' |
  awk '{d=""; for (i = 4; i <= NF; i++) d = d " " $i; printf "| %s | %s | %s | %s |\n", $1, $2, $3, d}')
fuzz_rows=""
if [ -s "$work/fuzz.txt" ]; then
  fuzz_rows=$(sed -E 's/^fuzz ([^:]+): ([A-Za-z]+), ([0-9?]+) executions in ([0-9]+)s, corpus ([0-9]+) inputs$/| \1 | \3 | \4 | \5 | \2 |/' "$work/fuzz.txt")
fi
bad=$(grep -cE 'outcome=(hang|late|corrupt|unclear-error|undetected|crash|setup|violation)' "$work/netns.txt" || true)

{
  echo "# Reliability report"
  echo
  echo "Generated by \`scripts/reliability-report.sh $fuzz_seconds\` on $(date -u '+%Y-%m-%d %H:%M UTC');"
  echo "commit \`$(git rev-parse --short HEAD 2>/dev/null || echo unknown)\`${tree_state},"
  echo "kernel $(uname -r), $(nproc) cores. Do not edit by hand: rerun the script."
  echo
  echo "The rule every fault case checks: each transfer either completes with the right bytes"
  echo "(pattern-checked byte for byte), or fails with a clear error (a message and a failure code,"
  echo "and the endpoint reports why) within \`peer_timeout\` + slack of the fault (here 2000 ms +"
  echo "3000 ms). Never a hang (each case has a hard deadline), never corrupted bytes."
  echo
  echo "## Summary"
  echo
  echo "| What | Outcome |"
  echo "|---|---|"
  echo "| Fuzzing (${fuzz_seconds}s per target) | $fuzz_status |"
  if [ "$san_status" = "${san_status#skipped}" ]; then
    echo "| ASan+UBSan, every suite but rdma (${asan_seconds}s) | exit $asan_rc: ${asan_tests} gtest cases passed, ${asan_reports} sanitizer reports; meson: ${asan_meson:-no summary} |"
    echo "| TSan, multi-threaded tests (${tsan_seconds}s) | exit $tsan_rc: ${tsan_tests} gtest cases passed, ${tsan_reports} reports |"
  else
    echo "| Sanitizers | $san_status |"
  fi
  if [ -n "$skip_reason" ]; then
    echo "| netns suite | skipped: ${skip_reason#every case skips: } |"
  else
    echo "| netns suite (${netns_seconds}s) | $(grep -cE '^RELIABILITY ' "$work/netns.txt") scenario results, $bad violating the rule |"
  fi
  echo
  echo "## Fuzz targets (bad inputs)"
  echo
  echo "| Target | Executions | Seconds | Corpus after run | Outcome |"
  echo "|---|---|---|---|---|"
  if [ -n "$fuzz_rows" ]; then echo "$fuzz_rows"; else echo "| (not run: $fuzz_status) | - | - | - | - |"; fi
  echo
  echo "Saved inputs replayed by the normal build (\`meson test --suite fuzz\`):"
  echo
  echo "| Target | Inputs (corpus + crashes) | Replay |"
  echo "|---|---|---|"
  printf '%s' "$replay_rows"
  echo
  echo "## Sanitizer runs (the asan and tsan stages of ./test.sh)"
  echo
  echo "Built with gcc; any report aborts the process, so it fails its test"
  echo "(\`halt_on_error=1:abort_on_error=1\`, leaks checked). The 'rdma' suite (verbs in the"
  echo "soft-RoCE VM) runs without sanitizers only: the VM's time budget leaves no room for a"
  echo "second, slower pass. Wall times include the builds."
  echo
  echo "ASan+UBSan (\`-Db_sanitize=address,undefined\`), meson tests:"
  echo
  echo "| Test | Result | Seconds |"
  echo "|---|---|---|"
  if [ -n "$asan_rows" ]; then echo "$asan_rows"; else echo "| (not run: $san_status) | - | - |"; fi
  echo
  echo "TSan (\`-Db_sanitize=thread\`), gtest filters from scripts/test-stages.sh:"
  echo
  echo "| Binary | Outcome |"
  echo "|---|---|"
  if [ -n "$tsan_rows" ]; then echo "$tsan_rows"; else echo "| (not run: $san_status) | - |"; fi
  echo
  echo "## Network faults (tests/netns, two namespaces joined by a veth pair)"
  echo
  echo "Scenarios: \`loss1\`/\`loss10\`: nftables drops 1 % / 10 % of the packets leaving each"
  echo "namespace for the whole run; \`blackhole\`: nftables drops everything between the two"
  echo "addresses mid-transfer; \`rate10mbit\`: tbf at 10 Mbit/s on both veth ends; \`linkdown\`:"
  echo "\`ip link set … down\` mid-transfer; \`proxy-*\`: the peer connects through a user-space relay"
  echo "(tests/netns/proxy.h) that delays every byte 50 ms, re-segments the stream into 1-1400 byte"
  echo "pieces with pauses, stalls (sockets open, nothing moves) or resets the connection mid-transfer."
  echo "Traffic: rounds of 1 MiB written to the peer in 256 KiB ops and read back, checked per op."
  echo "\`detect_ms\`: fault to first error; \`drain_ms\`: fault to the last affected op's completion."
  echo
  echo "| Scenario | Backend | Outcome | Ops | Errors | MiB ok | detect_ms | drain_ms | Proxy bytes | Note | First error |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  if [ -n "$fault_rows" ]; then echo "$fault_rows"; else echo "| (no results) | | | | | | | | | | |"; fi
  echo
  echo "## Peer killed with SIGKILL mid-transfer"
  echo
  echo "Each kill: a fresh peer writes 4 MiB ops into the survivor's region while the survivor keeps"
  echo "four 1 MiB reads of the peer's region in flight; the peer is SIGKILLed after a seeded random"
  echo "50-800 ms. The survivor must fail every pending op within the bound, leave only the peer's"
  echo "pattern (or zeros) in its region, close the endpoint and deregister both regions, then accept"
  echo "the next peer on the same transport; after the loop a fresh peer serves a full checked read."
  echo "\`detect_ms\`/\`drain_ms\`: the worst over all kills."
  echo
  echo "| Backend | Outcome | Ops | Errors | detect_ms (max) | drain_ms (max) | Note | Last error |"
  echo "|---|---|---|---|---|---|---|---|"
  if [ -n "$kill_rows" ]; then echo "$kill_rows"; else echo "| (no results) | | | | | | | |"; fi
  echo
  echo "## meson tests of the netns suite"
  echo
  echo "| Test | Status | Time | Detail |"
  echo "|---|---|---|---|"
  echo "$meson_rows"
  echo
  echo "## Error-path suites"
  echo
  echo "| Suite | Filter | Passed | Failed | Skipped | Outcome |"
  echo "|---|---|---|---|---|---|"
  cat "$work/errpaths.md"
  echo
  echo "## Outcomes"
  echo
  echo "- \`completed\`: every op finished and every byte matched."
  echo "- \`failed-in-bound\`: ops failed with a clear error, the last no later than the bound."
  echo "- \`hang\`: ops still pending at the bound (or the test's hard deadline ended the process)."
  echo "- \`late\`, \`unclear-error\`, \`corrupt\`, \`undetected\` (a fault on the data path went"
  echo "  unreported), \`crash\` (the survivor process died, e.g. a library abort), \`setup\`: violations."
  echo "- A note \`data-lanes-bypass-proxy\`: UCX over tcp sends data on its own connections to the"
  echo "  worker address it exchanged, so only Ferry's control connection runs through the proxy."
} >"$out"
log "wrote $out"
cat "$out"
if [ "$bad" -ne 0 ] || ! grep -q 'Ok:' "$work/netns-meson.txt"; then exit 1; fi
if [ "$san_status" = FAILED ]; then exit 1; fi
exit 0
