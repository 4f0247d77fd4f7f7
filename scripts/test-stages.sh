# Stages of ./test.sh (sourced by it; bash). Each stage builds in its own directory, runs, and
# records pass/fail and wall time; a failing stage never stops the next one. test.sh prints
# ferry_stage_summary at the end and exits non-zero if any stage failed.
#
#   main  the Debian packages (dpkg-buildpackage -b: gcc, Debian's flags, -Dwerror=true), then
#         every suite in their build tree (with 'rdma' in the soft-RoCE VM and 'netns' as root;
#         'install' checks the packages and runs lintian).
#         With FERRY_REQUIRE_ALL=1 (a plain ./test.sh, CI's run, sets it) it also fails when a
#         test CI must run skipped: the launchers (mpirun, srun), LIBLINEAR, netns, the VM
#         (scripts/check-must-run.py has the list).
#   asan  clang, ASan+UBSan (UBSan without alignment and vptr), no jemalloc, no benchmarks, no
#         verbs backend: every suite but 'rdma',
#         'install' and 'ps-threads' (the ps suites again with two shard servers a rank)
#         (the VM's time budget: verbs in the VM run without sanitizers, and the host has no
#         RDMA device for verbs code to run on). Any report aborts the test: fail. train_formats
#         runs 6 of its 18 model x format pairs here, train_ranking its ModelRanking cases,
#         train_consistency its bsp/ssp/asp training case (not bsp's determinism runs),
#         train_replicas all but its launcher and server-threads cases, and
#         train_liblinear does not run here (tests/train/meson.build says which, and why).
#   tsan  gcc, TSan: only the multi-threaded tests (progress threads, two threads posting on one
#         transport, concurrent table readers, the pool, ferry-serve's request threads during hot
#         swaps, ps jobs with one and two shard servers a rank), via gtest filters. Any report:
#         fail.
#   fuzz  clang, libFuzzer + ASan + UBSan: tests/fuzz/run.sh, FERRY_FUZZ_SECONDS (default 10)
#         per target over its seed corpus. A crash: fail (inputs kept in build-fuzz/crash-*).
#
# Unless FERRY_BACKGROUND_BUILDS=0 (test.sh) the asan, tsan and fuzz builds start at nice 19
# beside the main stage's tests (ferry_background_builds below); each stage waits for its own.
#
# Build directories: obj-<triplet> (obj-x86_64-linux-gnu: debhelper's), FERRY_ASAN_BUILD_DIR (build-asan),
# FERRY_TSAN_BUILD_DIR (build-tsan), FERRY_FUZZ_BUILD_DIR (build-fuzz). FERRY_TEST_JOBS caps
# ninja's parallelism (default: ninja's own). Sanitizer logs: <build>/meson-logs/ and
# <build>/tsan-*.log.
#
# Results: every stage also records what the reliability page needs in FERRY_RESULTS_DIR
# (default build-results; files listed in scripts/reliability_doc.py): the main stage's RELIABILITY
# lines and meson results, the sanitizer stages' results, the fuzz stage's lines.
# ferry_reliability_doc writes the page from them.

FERRY_STAGE_RESULTS=()
FERRY_STAGE_FAILED=0
FERRY_RESULTS_DIR=${FERRY_RESULTS_DIR:-build-results}

# Empties the results folder and records what this run is (before anything writes to the tree).
ferry_results_init() {  # command line...
  local tree=" (clean tree)"
  if [ -n "$(git status --porcelain --untracked-files=no -- . ':!docs/reliability.md' ':!tests/fuzz' 2>/dev/null)" ]; then
    tree=" plus uncommitted changes"
  fi
  rm -rf "$FERRY_RESULTS_DIR"
  mkdir -p "$FERRY_RESULTS_DIR"
  FERRY_RESULTS_DIR=$(cd "$FERRY_RESULTS_DIR" && pwd -P)
  {
    echo "command=$*"
    echo "started=$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "tree=$tree"
  } >"$FERRY_RESULTS_DIR/meta.txt"
}

# Writes the reliability page from the results: into docs/reliability.md for a full run (every
# stage, no suite filter: what CI runs), else next to the results. Prints where.
ferry_reliability_doc() {  # full (1/0)
  local out="$FERRY_RESULTS_DIR/reliability.md"
  [ "$1" = 1 ] && out=docs/reliability.md
  python3 scripts/reliability_doc.py "$FERRY_RESULTS_DIR" "$out" >/dev/null
  local rc=$?
  echo "==== reliability page: $out (from this run's results$([ $rc -ne 0 ] && echo '; a fault scenario VIOLATED the rule'))"
  return $rc
}

# ferry_stage NAME FUNCTION [ARGS...]: runs FUNCTION, records its outcome and wall time.
ferry_stage() {
  local name=$1 start rc
  shift
  echo "==== test.sh stage: $name ($(date -u '+%H:%M:%S UTC'), load $(cut -d' ' -f1-3 /proc/loadavg))"
  start=$(date +%s)
  "$@"
  rc=$?
  local secs=$(($(date +%s) - start))
  if [ -d "$FERRY_RESULTS_DIR" ]; then
    echo "$name $([ $rc -eq 0 ] && echo ok || echo FAILED) $secs" >>"$FERRY_RESULTS_DIR/stages.txt"
  fi
  if [ $rc -eq 0 ]; then
    FERRY_STAGE_RESULTS+=("$(printf '%-5s ok      %4ds' "$name" "$secs")")
  else
    FERRY_STAGE_RESULTS+=("$(printf '%-5s FAILED  %4ds (exit %d)' "$name" "$secs" "$rc")")
    FERRY_STAGE_FAILED=1
  fi
  echo "==== test.sh stage: $name done in ${secs}s (exit $rc)"
  return 0
}

ferry_stage_summary() {
  echo "==== test.sh summary (load $(cut -d' ' -f1-3 /proc/loadavg))"
  printf '  %s\n' "${FERRY_STAGE_RESULTS[@]}"
}

ferry_ninja() {  # dir [targets...]
  local dir=$1
  shift
  ninja -C "$dir" ${FERRY_TEST_JOBS:+-j"$FERRY_TEST_JOBS"} "$@"
}

# The later stages' builds (asan, tsan, fuzz), started in the background once the main stage's
# tests begin: those tests leave CPU idle (most cases wait on the network or on timers), and the
# builds should take only that. They run one after another in the order given; each stage then
# waits for its own build only (the tsan and fuzz builds go on beside the asan tests) and runs
# its own ninja, which finishes or reports whatever is left (a failure here is not reported twice:
# this log is kept in FERRY_RESULTS_DIR). Args: the later stages.
#
# Niceness alone does not make them background work: the kernel groups CPU time by session
# (autogroups, /proc/sys/kernel/sched_autogroup_enabled) and meson starts every test in a session
# of its own, so a nice-19 build in this script's session got the CPU of a whole session against
# each test's (measured: verbs_vm_veth 38.6 s idle, 65.7 s beside two nice-19 busy loops in
# another session, 49.8 s once those loops' own session had autogroup nice 19). The builder runs
# in a new session (setsid) whose autogroup it sets to nice 19, its compilers at nice 19 inside.
FERRY_BACKGROUND_PID=
ferry_background_builds() {
  [ $# -gt 0 ] || return 0
  # The asan and fuzz builds' compiler, installed now: apt must not run beside the 'install'
  # suite.
  case " $* " in *" asan "* | *" fuzz "*) ferry_install_packages "${FERRY_CLANG_PACKAGES[@]}" ;; esac
  rm -f "$FERRY_RESULTS_DIR"/background-*.done
  FERRY_RESULTS_DIR=$FERRY_RESULTS_DIR setsid bash -c '
    echo 19 >/proc/self/autogroup 2>/dev/null || echo "background builds: no autogroup nice"
    source scripts/deps.sh && source scripts/test-stages.sh && ferry_background_run "$@"' \
    ferry-background "$@" >"$FERRY_RESULTS_DIR/background-build.log" 2>&1 &
  FERRY_BACKGROUND_PID=$!
  echo "==== test.sh: building $* in the background at nice 19 (pid $FERRY_BACKGROUND_PID)"
}

# The background builder's body (ferry_background_builds runs it in its own session).
ferry_background_run() {
  # Two compilers at most (ninja's default here is 4): the idle core is one, and fewer
  # compilers leave the VM's emulated CPUs more of the caches (measured with 4: the rdma
  # suite's cases ran 20-45 % longer beside the build).
  local stage jobs=${FERRY_TEST_JOBS:-2}
  for stage in "$@"; do
    case $stage in
      asan)
        ferry_asan_setup "${FERRY_ASAN_BUILD_DIR:-build-asan}" &&
          nice -n 19 ninja -C "${FERRY_ASAN_BUILD_DIR:-build-asan}" -j"$jobs" ;;
      tsan)
        local dir=${FERRY_TSAN_BUILD_DIR:-build-tsan} targets=()
        ferry_tsan_setup "$dir" && mapfile -t targets < <(ferry_tsan_targets "$dir") &&
          nice -n 19 ninja -C "$dir" -j"$jobs" "${targets[@]}" ;;
      fuzz)
        FERRY_FUZZ_BUILD_ONLY=1 FERRY_TEST_JOBS=$jobs nice -n 19 tests/fuzz/run.sh ;;
    esac
    touch "$FERRY_RESULTS_DIR/background-$stage.done"
  done
}

# Waits until the background build of STAGE ended (or all of them did, when they all ended).
ferry_background_wait() {  # stage
  [ -n "$FERRY_BACKGROUND_PID" ] || return 0
  local start
  start=$(date +%s)
  while [ ! -e "$FERRY_RESULTS_DIR/background-$1.done" ] &&
    kill -0 "$FERRY_BACKGROUND_PID" 2>/dev/null; do
    sleep 2
  done
  echo "==== test.sh: background $1 build ended (waited $(($(date +%s) - start)) s;" \
    "log $FERRY_RESULTS_DIR/background-build.log)"
}

# Sanitizer runtime options: stop at the first report and fail the process, print a stack.
ferry_sanitizer_env() {
  export ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1:print_summary=1
  export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1:print_summary=1
  export LSAN_OPTIONS=suppressions=$PWD/scripts/lsan.supp:print_suppressions=0
  export TSAN_OPTIONS=halt_on_error=1:abort_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp:print_suppressions=0
}

# UCX's memory hooks (libucm patching mmap/munmap/brk) crash TSan-instrumented processes at
# start (measured: every TSan test binary died with SIGSEGV); TSan runs without them.
ferry_tsan_ucx_env() {
  export UCX_MEM_EVENTS=no UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none
}

# The main stage's build is Debian's: dpkg-buildpackage builds the packages (ferry, libferry0,
# libferry-dev: debian/) in obj-<triplet>/ with Debian's flags (-O2 -g, hardening) and -Werror,
# and every suite then runs in that same tree, so the tests run the binaries that were packaged.
# DEB_BUILD_OPTIONS: nocheck (the suites run next, all of them), noautodbgsym (no -dbgsym
# packages, and debian/rules then skips dh_dwz: packaging a built tree 38 s instead of 1m54).
# With no -dbgsym package the debug info would only be stripped again, so this build leaves out
# -g (DEB_*FLAGS_STRIP): 20-35 % less compile time per file (measured on ps/server/server.cc
# and tests/ps/replica_test.cc, 8.1 -> 5.9 s and 11.9 -> 9.7 s). Unity sources (up to 6 files as
# one) cut another quarter of the CPU time; up to 40, as the sanitizer builds, another 10 % at
# -O2 (ps + transport at -j2: 94 s of compile steps against 105 s at 6; the 248-step build
# 496 s wall, 937 s of steps). Every CI build is a unity build now: a source file missing an
# include shows in a plain `meson setup` build (unity off, the default), not in CI.
# The packages and their .changes land in FERRY_DEB_DIR (default build-deb/), not in '..'.
FERRY_DEB_DIR=${FERRY_DEB_DIR:-build-deb}

ferry_main_build_dir() { echo "obj-$(dpkg-architecture -qDEB_HOST_GNU_TYPE)"; }

ferry_package_build() {
  local build
  build=$(ferry_main_build_dir)
  # A configured tree is reused (no clean: an incremental build). dh's stamp must go, or dh
  # would skip the build steps and package stale binaries, and so must debian/files, or the
  # packages an earlier build made (its -dbgsym ones) are looked for again.
  local keep=()
  if [ -f "$build/build.ninja" ]; then
    keep=(-nc)
    rm -f debian/debhelper-build-stamp debian/files
  fi
  FERRY_MESON_OPTIONS="-Dwerror=true -Dunity=on -Dunity_size=40" DEB_CFLAGS_STRIP=-g \
    DEB_CXXFLAGS_STRIP=-g DEB_BUILD_OPTIONS="nocheck noautodbgsym ${DEB_BUILD_OPTIONS:-}" \
    dpkg-buildpackage -us -uc -b "${keep[@]}" -J"${FERRY_TEST_JOBS:-$(nproc)}" || return 1
  # dpkg-buildpackage writes next to the source tree; gather what this build made (.changes
  # lists it) into FERRY_DEB_DIR.
  local changes version
  version=$(dpkg-parsechangelog -S Version)
  changes=../ferry_${version}_$(dpkg-architecture -qDEB_HOST_ARCH).changes
  [ -f "$changes" ] || { echo "test.sh: dpkg-buildpackage left no $changes" >&2; return 1; }
  rm -rf "$FERRY_DEB_DIR"
  mkdir -p "$FERRY_DEB_DIR"
  local f
  for f in $(awk '/^Files:/ {on = 1; next} /^[^ ]/ {on = 0} on {print $NF}' "$changes"); do
    mv "../$f" "$FERRY_DEB_DIR/" || return 1
  done
  mv "$changes" "$FERRY_DEB_DIR/"
  echo "==== packages: $(cd "$FERRY_DEB_DIR" && ls | paste -sd ' ')"
}

ferry_main_stage() {
  local build
  build=$(ferry_main_build_dir)
  # A partial run (./test.sh --suite X) over an existing tree only rebuilds what changed.
  if [ $# -gt 0 ] && [ -f "$build/build.ninja" ]; then
    ferry_ninja "$build" || return 1
  else
    ferry_package_build || return 1
  fi
  # shellcheck disable=SC2086  # a word list
  ferry_background_builds ${FERRY_BACKGROUND_STAGES:-}
  local rc=0
  FERRY_DEB_DIR=$(cd "$FERRY_DEB_DIR" 2>/dev/null && pwd -P) \
    FERRY_RELIABILITY_RESULTS="$FERRY_RESULTS_DIR/reliability-lines.txt" \
    meson test -C "$build" --print-errorlogs "$@" || rc=$?
  cp "$build/meson-logs/testlog.json" "$FERRY_RESULTS_DIR/main-testlog.json" 2>/dev/null
  # meson counts a skip as no failure: here a skip of a test CI must run is one. With a suite
  # filter (arguments) the rules' tests may be absent.
  if [ "${FERRY_REQUIRE_ALL:-0}" = 1 ]; then
    local absent=()
    [ $# -gt 0 ] && absent=(--allow-absent)
    python3 scripts/check-must-run.py "${absent[@]}" "$build/meson-logs/testlog.json" || rc=1
  fi
  return $rc
}

ferry_asan_setup() {  # dir
  [ -f "$1/build.ninja" ] && return 0
  ferry_install_packages "${FERRY_CLANG_PACKAGES[@]}" || return 1
  CC=clang CXX=clang++ meson setup "$1" -Dwerror=true -Db_sanitize=address,undefined -Db_lundef=false \
    -Dcpp_args=-fno-sanitize=alignment,vptr -Doptimization=1 -Ddebug=false -Djemalloc=false \
    -Dbenchmarks=false -Dverbs=disabled -Dunity=on -Dunity_size=40 >/dev/null
}

ferry_asan_stage() {
  local build=${FERRY_ASAN_BUILD_DIR:-build-asan}
  # clang, not gcc: the same build (ASan+UBSan, -O1, unity 40) took 913 s of compile steps with
  # clang 14 against 1402 s with gcc 12 (-j2 here, 7m46 wall), and the asan build is CI's
  # critical path (below). The main stage's build stays gcc (Debian's compiler), so every file
  # still compiles warning-free (-Werror) with both; clang 14 needs compiler-rt's builtins for
  # one test's half floats (tests/ps/meson.build), from the fuzz stage's packages.
  # -O1: gcc compiled ASan+UBSan code about 4x slower than plain -O2 and -O1 cut that by 40 %;
  # the sanitizers still see everything (ASan's documented recommendation is -O1). No -g: debug
  # info is a large share of a sanitized build's compile and link time on 2 cores, and reports
  # still name the functions (symbol tables); rebuild with -Ddebug=true to get line numbers.
  # Unity sources (up to 40 files compiled as one): most of a file's compile time here is
  # parsing the same headers; measured on ps + transport, 25 % less CPU at 6 files (246+16 s
  # against 309+40 s) and 45 % less again at 40 (~160 s against 288 s). The asan build is CI's
  # critical path (it runs at nice 19 beside the main stage's tests and the asan stage waited
  # 633 s for it at 6): the whole build at 40 is 1402 s of CPU. Fewer, larger sources build
  # with less parallelism, which the background build does not need.
  # UBSan without its 'alignment' and 'vptr' checks: gcc compiled ASan+UBSan 1.7-2.4x slower
  # than ASan alone, and those two checks are a third of the whole (measured: ps unity2 35.8 s
  # -> 24.9 s, ps_replica_test 22.0 s -> 14.4 s; ASan alone 21.4 s and 9.1 s). x86-64 loads
  # unaligned data, our wire decoders copy fields out with memcpy, and the fuzz stage's clang
  # build keeps every UBSan check (alignment and vptr included) on those decoders.
  ferry_background_wait asan
  ferry_asan_setup "$build" || return 1
  ferry_ninja "$build" || return 1
  local rc=0
  (
    ferry_sanitizer_env
    # Sanitized code runs 2-3x slower: give every test three times its timeout.
    # 'ps-threads' (the ps suites again with two shard servers per rank) runs in main and,
    # for the tcp jobs, under TSan: the same code with more threads.
    meson test -C "$build" --print-errorlogs --no-suite rdma --no-suite install \
      --no-suite ps-threads --timeout-multiplier 3
  ) | tee "$FERRY_RESULTS_DIR/asan-meson.txt" || rc=1
  cp "$build/meson-logs/testlog.json" "$FERRY_RESULTS_DIR/asan-testlog.json" 2>/dev/null
  local log="$build/meson-logs/testlog.txt" summary passed reports
  summary=$(grep -E '^(Ok|Fail|Skipped|Timeout):' "$FERRY_RESULTS_DIR/asan-meson.txt" | tr -s ' ' | paste -sd ' ')
  passed=$(grep -Eo '^\[  PASSED  \] [0-9]+' "$log" 2>/dev/null | awk '{s += $NF} END {print s + 0}')
  reports=$(grep -cE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$log" 2>/dev/null)
  echo "exit $rc: $passed gtest cases passed, ${reports:-0} sanitizer reports; meson: ${summary:-no summary}" \
    >"$FERRY_RESULTS_DIR/asan-summary.txt"
  return $rc
}

# Multi-threaded tests and the gtest filters that select them (binary relative to the build),
# optionally with one VAR=VALUE for the run after a second '|'.
FERRY_TSAN_RUNS=(
  "tests/conformance/conformance|*TwoThreadsPostAndPollOneTransport*:*IntegrityWithTargetProgressThread*:*PeerKilled*:*CloseCancels*"
  "tests/tcp/tcp_test|TcpStream.TwoThreads*:TcpStream.Deregister*:TcpStream.SilentPeer*:TcpStream.CloseCancels*:TcpHostile.*"
  # ArrayHashMap's Threading.* (one table per thread, concurrent readers): TSan builds grow
  # tables with calls TSan intercepts (MappedBuffer::GrowVisibly) instead of the raw mremap
  # syscall it cannot see, so moved tables no longer look like races.
  "tests/ps/ps_test|TcpGather.*:Threading.*"
  # Parameter-server jobs in one process (every rank a thread: coordinator, control pumps,
  # servers, workers) over tcp. Tables of different servers grow here; TSan builds move them
  # with calls it intercepts (MappedBuffer::GrowVisibly) rather than the raw mremap. Standby.*:
  # control clients rejoining a standby coordinator that takes over.
  "tests/ps/ps_job_test|*/tcp:*/tcp_*:Standby.*"
  # Replicated shards: forwards, acks and failovers between server threads, the coordinator's
  # accusation window, workers re-sending to new heads (tcp).
  "tests/ps/ps_replica_test|*/tcp"
  # The same with two shard servers per server rank (JobSpec::server_threads): more threads per
  # process, each with its own tables and transport.
  "tests/ps/ps_job_test|*/tcp:*/tcp_*|FERRY_TEST_SERVER_THREADS=2"
  "tests/ps/ps_replica_test|*/tcp|FERRY_TEST_SERVER_THREADS=2"
  "tests/fault/fault_test|*"
  "tests/topology/pool_test|*Concurrent*"
  # The progress thread, and the heartbeat thread that answers while the owner is stuck.
  "tests/ucx/ucx_test|*ProgressThread*:*OwnerStuck*"
  # ferry-serve in process: request threads scoring while the follower swaps versions under
  # continuous load, metrics, timeouts (exports made by this build's ferry-train; ~15 s).
  "tests/serve/serve_test|*"
)
# The commands serve_test runs (its FERRY_* variables), built with TSan too.
FERRY_TSAN_COMMANDS=(FERRY_TRAIN=tools/train/ferry-train FERRY_PREDICT=tools/train/ferry-predict
  FERRY_GEN=tools/gen/ferry-gen FERRY_SERVE=tools/serve/ferry-serve)

# Unity sources of up to 40 files, as the asan build (which says why): the stage's 108 targets
# built in 169 s at -j2 here, and its runs stayed free of reports.
ferry_tsan_setup() {  # dir
  [ -f "$1/build.ninja" ] && return 0
  meson setup "$1" -Dwerror=true -Db_sanitize=thread -Db_lundef=false -Djemalloc=false \
    -Doptimization=1 -Ddebug=false -Dbenchmarks=false -Dverbs=disabled -Dunity=on \
    -Dunity_size=40 >/dev/null
}

# The targets the tsan stage runs, one a line: the FERRY_TSAN_RUNS binaries this build has, the
# peers the conformance and netns harnesses spawn, and the commands serve_test runs.
ferry_tsan_targets() {  # dir
  # The target list is read whole first: `ninja -t targets | grep -q` under test.sh's pipefail
  # failed whenever grep quit before ninja finished writing (SIGPIPE), which silently dropped
  # tcp_test from this stage.
  local all_targets run exe command
  all_targets=$(ninja -C "$1" -t targets all 2>/dev/null)
  for run in "${FERRY_TSAN_RUNS[@]}"; do
    exe=${run%%|*}
    if grep -q "^$exe:" <<<"$all_targets"; then echo "$exe"; fi
  done
  echo tests/common/ferry_test_peer
  for command in "${FERRY_TSAN_COMMANDS[@]}"; do echo "${command#*=}"; done
}

ferry_tsan_stage() {
  local build=${FERRY_TSAN_BUILD_DIR:-build-tsan} run exe filter targets=() rc=0
  ferry_background_wait tsan
  ferry_tsan_setup "$build" || return 1
  mapfile -t targets < <(ferry_tsan_targets "$build")
  local command
  ferry_ninja "$build" "${targets[@]}" || return 1
  local out=0
  (
    ferry_sanitizer_env
    ferry_tsan_ucx_env
    local root
    root=$(cd "$build" && pwd)
    for command in "${FERRY_TSAN_COMMANDS[@]}"; do export "${command%%=*}=$root/${command#*=}"; done
    for run in "${FERRY_TSAN_RUNS[@]}"; do
      exe=${run%%|*}
      filter=${run#*|}
      local var="" name
      if [[ $filter == *"|"* ]]; then
        var=${filter#*|}
        filter=${filter%%|*}
      fi
      name=$(basename "$exe")${var:+ ($var)}
      if [ ! -x "$build/$exe" ]; then  # a backend this build lacks (e.g. no UCX)
        echo "tsan $name: skipped (not built here)"
        continue
      fi
      local log
      log="$build/tsan-$(basename "$exe")${var:+-${var//[^A-Za-z0-9]/_}}.log"
      if [ -n "$var" ]; then
        env "$var" timeout 900 "$build/$exe" --gtest_filter="$filter" >"$log" 2>&1
      else
        timeout 900 "$build/$exe" --gtest_filter="$filter" >"$log" 2>&1
      fi
      local status=$?
      if [ $status -eq 0 ]; then
        echo "tsan $name: ok, $(grep -Eo '^\[  PASSED  \] [0-9]+' "$log" | grep -Eo '[0-9]+$') tests passed"
      elif [ $status -eq 77 ]; then  # every case skipped (tests/common/skips.h): nothing ran
        echo "tsan $name: SKIPPED, every case skipped (log $log)"
      else
        echo "tsan $name: FAILED (log $log)"
        grep -E 'WARNING: ThreadSanitizer|SUMMARY: ThreadSanitizer|^\[  FAILED  \]' "$log" | head -20
        rc=1
      fi
    done
    exit $rc
  ) | tee "$FERRY_RESULTS_DIR/tsan.txt" || out=1
  return $out
}

ferry_fuzz_stage() {
  ferry_background_wait fuzz
  tests/fuzz/run.sh "${FERRY_FUZZ_SECONDS:-10}" "$FERRY_RESULTS_DIR/fuzz.txt"
}
