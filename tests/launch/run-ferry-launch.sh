#!/usr/bin/env bash
# Runs CMD as N ranks on this host under ferry-launch (tools/launch/), as run-mpirun.sh and
# run-srun.sh do under their launchers:
#   tests/launch/run-ferry-launch.sh N [--expect REGEX]... [--timeout S] [--servers S]
#                                    [--rule servers-first|colocated] [--transport T] -- CMD ARGS...
# Servers-first: S servers (default N/2 rounded up) and N-S workers. Colocated: S servers
# (default N) and N workers. ferry-launch is $FERRY_LAUNCH, else the one in PATH; extra
# ferry-launch options come from $FERRY_LAUNCH_ARGS. A --timeout (default 120 s) SIGTERMs
# ferry-launch, which stops the ranks. Exit: 0 pass, 1 fail, 77 skip (no ferry-launch).
set -uo pipefail
source "$(dirname "$(readlink -f "$0")")/lib.sh"
LAUNCH_EXTRA_USAGE="[--servers S] [--rule servers-first|colocated] [--transport T] "
servers="" rule=servers-first transport=auto
launch_option() {
  case $1 in
    --servers) [[ $2 =~ ^[1-9][0-9]*$ ]] || return 1; servers=$2 ;;
    --rule) rule=$2 ;;
    --transport) transport=$2 ;;
    *) return 1 ;;
  esac
}
launch_parse "$@"

launcher=${FERRY_LAUNCH:-$(command -v ferry-launch)}
if [[ -z $launcher || ! -x $launcher ]]; then
  echo "SKIP: ferry-launch not found (set FERRY_LAUNCH or put it in PATH)"
  exit 77
fi
if [[ $rule == colocated ]]; then
  servers=${servers:-$LAUNCH_N}
  workers=$LAUNCH_N
else
  servers=${servers:-$(((LAUNCH_N + 1) / 2))}
  workers=$((LAUNCH_N - servers))
  if [[ $workers -lt 1 ]]; then
    echo "$(basename "$0"): $LAUNCH_N ranks leave no worker after $servers servers" >&2
    exit 2
  fi
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
start=$EPOCHREALTIME
# shellcheck disable=SC2086  # FERRY_LAUNCH_ARGS is a list of options
launch_run "$log" "$launcher" --servers "$servers" --workers "$workers" --rule "$rule" \
  --transport "$transport" ${FERRY_LAUNCH_ARGS:-} -- "${LAUNCH_CMD[@]}"
awk -v s="$start" -v e="$EPOCHREALTIME" 'BEGIN { printf "ferry-launch took %.2f s\n", e - s }'
launch_check "$log" "$LAUNCH_STATUS"
