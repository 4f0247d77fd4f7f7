#!/usr/bin/env bash
# Runs CMD as N ranks on this host with ferry-launch's protocol, driven by this script instead of
# ferry-launch (the launch_ferry_env test keeps the protocol checked for other launchers; to run a
# program, prefer run-ferry-launch.sh, which uses the real ferry-launch):
#   tests/launch/run-ferry-env.sh N [--expect REGEX]... [--timeout S] -- CMD ARGS...
# Rank 0 starts first with FERRY_RANK=0 FERRY_SIZE=N FERRY_COORDINATOR_FILE=<tmp file>; once it
# has written its bound address there, ranks 1..N-1 start with FERRY_COORDINATOR=<that address>
# (rules (b) and (a) of ps/launch/rendezvous.h). Exit: 0 pass, 1 fail.
set -uo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
launch_parse "$@"

dir=$(mktemp -d)
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

file=$dir/coordinator
start=$EPOCHREALTIME
FERRY_RANK=0 FERRY_SIZE=$LAUNCH_N FERRY_COORDINATOR_FILE=$file \
  timeout --foreground -k 5 "$LAUNCH_TIMEOUT" "${LAUNCH_CMD[@]}" >"$dir/out.0" 2>&1 &
pids+=($!)
deadline=$((SECONDS + LAUNCH_TIMEOUT))
while [[ ! -s $file ]]; do
  if ! kill -0 "${pids[0]}" 2>/dev/null || [[ $SECONDS -ge $deadline ]]; then
    cat "$dir/out.0"
    echo "FAIL: rank 0 did not write $file" >&2
    exit 1
  fi
  sleep 0.05
done
coordinator=$(head -n1 "$file")
echo "+ rank 0 wrote FERRY_COORDINATOR_FILE: $coordinator; starting ranks 1..$((LAUNCH_N - 1))"
for ((r = 1; r < LAUNCH_N; r++)); do
  FERRY_RANK=$r FERRY_SIZE=$LAUNCH_N FERRY_COORDINATOR=$coordinator \
    timeout --foreground -k 5 "$LAUNCH_TIMEOUT" "${LAUNCH_CMD[@]}" >"$dir/out.$r" 2>&1 &
  pids+=($!)
done
status=0
for ((r = 0; r < LAUNCH_N; r++)); do
  wait "${pids[$r]}" || { s=$?; echo "rank $r exited with status $s" >&2; status=1; }
done
pids=()
for ((r = 0; r < LAUNCH_N; r++)); do cat "$dir/out.$r"; done | tee "$dir/log"
awk -v s="$start" -v e="$EPOCHREALTIME" 'BEGIN { printf "ferry-env launch took %.2f s\n", e - s }'
launch_check "$dir/log" "$status"
