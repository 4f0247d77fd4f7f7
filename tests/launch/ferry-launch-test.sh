#!/usr/bin/env bash
# ferry-launch's behaviour, one case per run (tests/launch/meson.build registers each case as a
# test of its own):
#   tests/launch/ferry-launch-test.sh CASE FERRY_LAUNCH EXIT_PROBE
# Cases: exit-code, signal, rank0, sigterm, sigkill, grace, timeout, tag-output, environment,
# missing-program, bad-flags. exit_probe's sleeping ranks sleep 60 s, and every ferry-launch run
# here is bounded to 20 s: a case that passes has shown that ferry-launch stopped the job itself.
# Exit: 0 pass, 1 fail.
set -uo pipefail
[[ $# -eq 3 ]] || { echo "usage: $0 CASE FERRY_LAUNCH EXIT_PROBE" >&2; exit 2; }
case_name=$1 launch=$2 probe=$3

dir=$(mktemp -d)
bg=""
cleanup() {
  [[ -n $bg ]] && kill -KILL "$bg" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

show() {
  local f
  for f in out err; do
    [[ -f $dir/$f ]] && { echo "--- $f"; cat "$dir/$f"; }
  done
}
fail() {
  echo "FAIL ($case_name): $*" >&2
  show >&2
  exit 1
}

# run STATUS ARGS...: ferry-launch ARGS with stdout/stderr in $dir/out and $dir/err; the exit
# status must be STATUS.
run() {
  local want=$1 t0=$EPOCHREALTIME
  shift
  timeout -k 5 20 "$launch" "$@" >"$dir/out" 2>"$dir/err"
  local status=$?
  awk -v s="$t0" -v e="$EPOCHREALTIME" -v st="$status" -v a="$*" \
    'BEGIN { printf "+ ferry-launch %s -> status %d in %.2f s\n", a, st, e - s }'
  [[ $status -eq 124 && $want -ne 124 ]] && fail "ferry-launch did not finish within 20 s"
  [[ $status -eq $want ]] || fail "expected exit status $want, got $status"
}
# has FILE REGEX: some line of $dir/FILE matches. count FILE REGEX: how many do.
has() { grep -Eq -- "$2" "$dir/$1" || fail "no line of $1 matches /$2/"; }
hasnt() { ! grep -Eq -- "$2" "$dir/$1" || fail "a line of $1 matches /$2/"; }
count() { grep -Ec -- "$2" "$dir/$1"; }
expect_count() {
  local n
  n=$(count "$1" "$2")
  [[ $n -eq $3 ]] || fail "$n lines of $1 match /$2/, expected $3"
}

# A rank process is gone once it has no /proc entry or is a zombie (reaped later by init).
alive() {
  local state
  state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n $state && $state != Z ]]
}

# start_bg ARGS...: ferry-launch ARGS in the background; waits until every rank printed its
# "ready" line (the number of ranks is $ranks); sets $bg and $rank_pids.
start_bg() {
  "$launch" "$@" >"$dir/out" 2>"$dir/err" &
  bg=$!
  local deadline=$((SECONDS + 15))
  until [[ $(count out ' ready ') -eq $ranks ]]; do
    [[ $SECONDS -lt $deadline ]] || fail "the ranks did not all start"
    sleep 0.05
  done
  mapfile -t rank_pids < <(sed -nE 's/^(\[rank [0-9]+\] )?exit_probe rank [0-9]+ pid ([0-9]+) ready.*/\2/p' \
    "$dir/out")
}
# wait_ranks_gone: every rank pid gone within 5 s.
wait_ranks_gone() {
  local deadline=$((SECONDS + 5)) p
  for p in "${rank_pids[@]}"; do
    while alive "$p"; do
      [[ $SECONDS -lt $deadline ]] || fail "rank pid $p still runs"
      sleep 0.05
    done
  done
}

cause='^ferry-launch: rank [0-9]+ \([^)]*\) (exited with|was killed by)'
case $case_name in
  exit-code)
    run 2 --servers 2 --workers 2 -- "$probe" --fail-rank 3 --exit-code 2
    expect_count err "$cause" 1
    has err '^ferry-launch: rank 3 \(worker 1\) exited with status 2$'
    expect_count err '^ferry-launch: rank [0-2] \((server 0|server 1|worker 0)\) stopped after rank 3 failed \(was killed by signal 15 \(SIGTERM\)\)$' 3
    # colocated roles
    run 5 --servers 2 --workers 3 --rule colocated -- "$probe" --fail-rank 1 --exit-code 5
    has err '^ferry-launch: rank 1 \(server 1, worker 1\) exited with status 5$'
    expect_count err "$cause" 1
    ;;
  signal)
    run 137 --servers 2 --workers 2 -- "$probe" --fail-rank 1 --signal 9
    has err '^ferry-launch: rank 1 \(server 1\) was killed by signal 9 \(SIGKILL\)$'
    expect_count err "$cause" 1
    expect_count err 'stopped after rank 1 failed' 3
    ;;
  rank0)
    # Rank 0 dies before publishing the coordinator: named, and no other rank ever starts.
    run 3 --servers 1 --workers 2 -- "$probe" --fail-rank 0 --exit-code 3 --before-rendezvous
    has err '^ferry-launch: rank 0 \(server 0\) exited with status 3 before writing its coordinator address'
    hasnt out ' ready '
    # A program that never publishes the coordinator (rank 0 exits 0 without the file).
    run 1 --servers 1 --workers 1 -- true
    has err '^ferry-launch: rank 0 \(server 0\) exited with status 0 before writing its coordinator address'
    # ... which is fine for a one-rank job (nobody needs the address).
    run 0 --servers 1 --workers 1 --rule colocated -- true
    # Rank 0 alive but silent: bounded by --startup-timeout.
    run 1 --servers 1 --workers 1 --startup-timeout 0.5 -- sleep 60
    has err '^ferry-launch: rank 0 \(server 0\) did not write its coordinator address .* within 0.5 s'
    ;;
  sigterm)
    ranks=4
    start_bg --servers 2 --workers 2 -- "$probe"
    t0=$EPOCHREALTIME
    kill -TERM "$bg"
    wait "$bg"
    status=$?
    bg=""
    awk -v s="$t0" -v e="$EPOCHREALTIME" 'BEGIN { printf "+ ferry-launch exited %.2f s after SIGTERM\n", e - s }'
    [[ $status -eq 143 ]] || fail "expected exit status 143 after SIGTERM, got $status"
    has err '^ferry-launch: received SIGTERM; forwarding it to 4 ranks$'
    expect_count err 'stopped after SIGTERM \(was killed by signal 15 \(SIGTERM\)\)$' 4
    wait_ranks_gone
    ;;
  sigkill)
    # A SIGKILLed launcher leaves no orphans: the ranks die with it (parent-death signal).
    ranks=3
    start_bg --servers 1 --workers 2 --tag-output -- "$probe" --print-env
    kill -KILL "$bg"
    wait "$bg" 2>/dev/null
    bg=""
    wait_ranks_gone
    echo "+ all ${#rank_pids[@]} ranks gone after SIGKILL of ferry-launch"
    # The coordinator folder a killed ferry-launch leaves behind.
    file=$(sed -nE 's/.* env FERRY_COORDINATOR_FILE=(.*)$/\1/p' "$dir/out")
    [[ $file == */ferry-launch.*/coordinator ]] && rm -rf "$(dirname "$file")"
    ;;
  grace)
    # Ranks that ignore SIGTERM get SIGKILL after --kill-grace.
    run 1 --servers 1 --workers 2 --kill-grace 0.5 -- "$probe" --fail-rank 2 --exit-code 1 --ignore-term
    has err '^ferry-launch: rank 2 \(worker 1\) exited with status 1$'
    has err '^ferry-launch: rank 0 \(server 0\) is still running 0.5 s after it was told to stop; sending SIGKILL$'
    expect_count err 'stopped after rank 2 failed \(was killed by signal 9 \(SIGKILL\)\)$' 2
    ;;
  timeout)
    run 124 --servers 1 --workers 1 --timeout 1 -- "$probe"
    has err '^ferry-launch: the job is still running after the timeout of 1 s; stopping it$'
    expect_count err 'stopped after the timeout \(was killed by signal 15 \(SIGTERM\)\)$' 2
    expect_count err "$cause" 0
    ;;
  tag-output)
    run 0 --servers 1 --workers 2 --tag-output -- "$probe" --lines 3 --partial --sleep-s 0
    expect_count out '^\[rank [0-2]\] exit_probe rank [0-2] ' "$(wc -l <"$dir/out")"  # all tagged
    expect_count err '^\[rank [0-2]\] exit_probe rank [0-2] ' "$(wc -l <"$dir/err")"
    for r in 0 1 2; do
      want=$(printf '[rank %d] exit_probe rank %d %s\n' $r $r "stdout 0" $r $r "stdout 1" $r $r \
        "stdout 2" $r $r partial)
      got=$(grep -F "[rank $r] exit_probe rank $r " "$dir/out" | grep -v ' ready ')
      [[ $got == "$want" ]] || fail "rank $r stdout: got <$got>, want <$want>"
      want=$(printf '[rank %d] exit_probe rank %d stderr %d\n' $r $r 0 $r $r 1 $r $r 2)
      got=$(grep -F "[rank $r] " "$dir/err")
      [[ $got == "$want" ]] || fail "rank $r stderr: got <$got>, want <$want>"
      has out "^\[rank $r\] exit_probe rank $r pid [0-9]+ ready"
    done
    # Without --tag-output the ranks write straight to ferry-launch's stdout and stderr.
    run 0 --servers 1 --workers 1 -- "$probe" --lines 1 --sleep-s 0
    has out '^exit_probe rank 1 stdout 0$'
    has err '^exit_probe rank 0 stderr 0$'
    ;;
  environment)
    # Inherited launcher variables are replaced; --env reaches every rank.
    FERRY_RANK=7 FERRY_SERVERS=9 FERRY_COORDINATOR_FILE=/nonexistent \
      run 0 --servers 2 --workers 1 --transport tcp --env FERRY_TEST_EXTRA=a=b -- \
      "$probe" --print-env --sleep-s 0
    for v in FERRY_RANK=2 FERRY_SIZE=3 FERRY_LOCAL_RANK=2 FERRY_LOCAL_SIZE=3 FERRY_SERVERS=2 \
      FERRY_WORKERS=1 FERRY_TRANSPORT=tcp FERRY_ROLE_RULE=servers-first FERRY_TEST_EXTRA=a=b \
      FERRY_COORDINATOR=127.0.0.1:9; do
      has out "^exit_probe rank 2 env $v\$"
    done
    has out '^exit_probe rank 0 env FERRY_COORDINATOR_FILE=.*/ferry-launch\.[^/]+/coordinator$'
    hasnt out '^exit_probe rank 0 env FERRY_COORDINATOR='
    hasnt out '^exit_probe rank [12] env FERRY_COORDINATOR_FILE'
    expect_count out ' env FERRY_RANK=' 3
    # An explicit FERRY_COORDINATOR: every rank starts at once and uses it, no file.
    run 0 --servers 1 --workers 2 --rule colocated --env FERRY_COORDINATOR=127.0.0.1:5 -- \
      "$probe" --print-env --sleep-s 0
    expect_count out ' ready coordinator=127\.0\.0\.1:5$' 2
    hasnt out 'FERRY_COORDINATOR_FILE'
    has out '^exit_probe rank 1 env FERRY_ROLE_RULE=colocated$'
    ;;
  missing-program)
    run 127 --servers 1 --workers 1 -- /nonexistent/ferry-prog
    has err "^ferry-launch: error: program '/nonexistent/ferry-prog' does not exist$"
    run 127 --servers 1 --workers 1 -- ferry-no-such-program --flag
    has err "^ferry-launch: error: program 'ferry-no-such-program' not found in PATH"
    touch "$dir/not-executable"
    run 126 --servers 1 --workers 1 -- "$dir/not-executable"
    has err "is not executable$"
    run 2 --servers 1 --workers 1
    has err '^ferry-launch: error: no PROGRAM to run'
    run 2 --servers 1 --workers 1 --
    has err '^ferry-launch: error: no PROGRAM to run'
    ;;
  bad-flags)
    run 2 --servers 0 --workers 1 -- true
    has err 'servers'
    run 2 --workers 1 -- true
    has err 'servers is required'
    run 2 --servers 1 --workers 1 --transport carrier-pigeon -- true
    has err 'carrier-pigeon'
    run 2 --servers 1 --workers 1 --rule sideways -- true
    has err 'sideways'
    run 2 --servers 1 --workers 1 --timeout soon -- true
    has err 'timeout'
    run 2 --servers 1 --workers 1 --env NOEQUALS -- true
    has err "^ferry-launch: error: --env 'NOEQUALS' is not KEY=VALUE$"
    run 2 --servers 1 --workers 1 --env FERRY_RANK=3 -- true
    has err '^ferry-launch: error: FERRY_RANK is set by the launcher itself'
    run 2 --servers 1 --workers 1 --no-such-flag -- true
    has err 'no-such-flag'
    run 0 --version
    has out '^ferry-launch \(Ferry\) [0-9]+\.[0-9]+\.[0-9]+$'
    run 0 --help
    for flag in --servers --workers --rule --transport --timeout --startup-timeout --kill-grace \
      --tag-output --env --version 'PROGRAM ARGS'; do
      has out "$flag"
    done
    ;;
  *)
    echo "unknown case '$case_name'" >&2
    exit 2
    ;;
esac
echo "PASS: ferry-launch $case_name"
