#!/usr/bin/env bash
# Runs CMD as NP ranks under OpenMPI's mpirun on this host.
#   tests/launch/run-mpirun.sh NP [--expect REGEX]... [--timeout S] [--coordinator HOST:PORT|auto]
#                              -- CMD ARGS...
# Adds --allow-run-as-root when root and --oversubscribe (more ranks than cores). --coordinator
# exports FERRY_COORDINATOR to every rank (rule (a) of ps/launch/rendezvous.h, the way to run without
# PMIx); "auto" is 127.0.0.1 and a port nobody listens on. Extra mpirun options come from
# $MPIRUN_ARGS. The output is passed through; --expect checks it.
# Exit: 0 pass, 1 fail, 77 skip (no mpirun).
set -uo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
LAUNCH_EXTRA_USAGE="[--coordinator HOST:PORT|auto] "
coordinator=""
launch_option() {
  case $1 in
    --coordinator) coordinator=$2 ;;
    *) return 1 ;;
  esac
}
launch_parse "$@"

# A TCP port in [10000, 20000) nobody listens on (below the ephemeral range and the Slurm-derived
# coordinator ports).
free_port() {
  local used port i
  used=" $(ss -Htan 2>/dev/null | awk '{ n = split($4, a, ":"); print a[n] }' | tr '\n' ' ') "
  port=$((10000 + RANDOM % 10000))
  for ((i = 0; i < 10000; i++)); do
    [[ $used == *" $port "* ]] || { echo "$port"; return 0; }
    port=$((port + 1 >= 20000 ? 10000 : port + 1))
  done
  return 1
}

if ! command -v mpirun >/dev/null; then
  echo "SKIP: mpirun not found (apt-get install openmpi-bin)"
  exit 77
fi
args=(--oversubscribe -np "$LAUNCH_N")
[[ $(id -u) -eq 0 ]] && args=(--allow-run-as-root "${args[@]}")
# shellcheck disable=SC2206
extra=(${MPIRUN_ARGS:-})
if [[ $coordinator == auto ]]; then
  coordinator=127.0.0.1:$(free_port) || { echo "FAIL: no free port for the coordinator" >&2; exit 1; }
fi
[[ -n $coordinator ]] && extra+=(-x "FERRY_COORDINATOR=$coordinator")

log=$(mktemp)
trap 'rm -f "$log"' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
echo "+ mpirun ${args[*]}${extra[*]:+ ${extra[*]}} ${LAUNCH_CMD[*]}"
start=$EPOCHREALTIME
launch_run "$log" mpirun "${args[@]}" "${extra[@]}" "${LAUNCH_CMD[@]}"
status=$LAUNCH_STATUS
awk -v s="$start" -v e="$EPOCHREALTIME" 'BEGIN { printf "mpirun took %.2f s\n", e - s }'
launch_check "$log" "$status"
