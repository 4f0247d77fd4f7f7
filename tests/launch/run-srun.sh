#!/usr/bin/env bash
# Runs CMD as NTASKS tasks of a Slurm job step on this host:
#   tests/launch/run-srun.sh NTASKS [--expect REGEX]... [--timeout S] [--mpi pmix|none]
#                            [--state DIR] -- CMD ARGS...
# With --state DIR (or $FERRY_SLURM_STATE) the cluster that `slurm-cluster.sh up DIR` started is
# used; otherwise a single-node cluster is brought up in a temporary folder for this one command
# and taken down again on exit (also on SIGINT/SIGTERM). Runs
#   srun -N1 -n NTASKS --overcommit --mpi=TYPE --kill-on-bad-exit=1 CMD ARGS...
# (TYPE defaults to pmix; extra srun options come from $SRUN_ARGS). Exit: 0 pass, 1 fail,
# 77 skip (Slurm is missing or cannot start here, with the reason).
set -uo pipefail
here=$(dirname "$(readlink -f "$0")")
source "$here/lib.sh"
LAUNCH_EXTRA_USAGE="[--mpi pmix|none] [--state DIR] "
mpi=pmix
state=${FERRY_SLURM_STATE:-}
launch_option() {
  case $1 in
    --mpi) mpi=$2 ;;
    --state) state=$2 ;;
    *) return 1 ;;
  esac
}
launch_parse "$@"

own=""  # the state folder of a cluster this script brought up
log=""
# shellcheck disable=SC2317  # run by the traps
cleanup() {
  [[ -n $log ]] && rm -f "$log"
  if [[ -n $own ]]; then
    "$here/slurm-cluster.sh" down "$own" >/dev/null
    rm -rf "$own"
  fi
}
# On SIGTERM/SIGINT (meson's timeout, ^C) the cluster is taken down by a detached process: meson
# SIGKILLs the test's process group 0.5 s after its SIGTERM, sooner than `down` finishes.
# shellcheck disable=SC2317,SC2016  # run by the traps; $0/$1 belong to the inner bash
on_signal() {
  trap - EXIT
  [[ -n $log ]] && rm -f "$log"
  if [[ -n $own ]]; then
    setsid bash -c '"$0" down "$1"; rm -rf "$1"' "$here/slurm-cluster.sh" "$own" \
      </dev/null >/dev/null 2>&1 &
  fi
  exit "$1"
}
trap cleanup EXIT
trap 'on_signal 143' TERM
trap 'on_signal 130' INT

if [[ -z $state ]]; then
  command -v srun >/dev/null || { echo "SKIP: srun not found (apt-get install slurm-client)"; exit 77; }
  own=$(mktemp -d /tmp/ferry-slurm.XXXXXX)
  state=$own
  "$here/slurm-cluster.sh" up "$state" &
  wait $!
  up_status=$?
  [[ $up_status -eq 0 ]] || exit "$up_status"
fi
[[ -r $state/cluster.env ]] || { echo "FAIL: no Slurm cluster in $state (slurm-cluster.sh up $state)" >&2; exit 1; }
SLURM_CONF=$(sed -n 's/^SLURM_CONF=//p' "$state/cluster.env")
export SLURM_CONF
if ! grep -qw -- "$mpi" <<<"$(srun --mpi=list 2>&1)"; then
  echo "SKIP: this Slurm has no MPI plugin '$mpi' (srun --mpi=list)"
  exit 77
fi

# shellcheck disable=SC2206
extra=(${SRUN_ARGS:-})
args=(-N1 -n "$LAUNCH_N" --overcommit "--mpi=$mpi" --kill-on-bad-exit=1)
log=$(mktemp)
echo "+ srun ${args[*]}${extra[*]:+ ${extra[*]}} ${LAUNCH_CMD[*]}"
start=$EPOCHREALTIME
launch_run "$log" srun "${args[@]}" "${extra[@]}" "${LAUNCH_CMD[@]}"
status=$LAUNCH_STATUS
awk -v s="$start" -v e="$EPOCHREALTIME" 'BEGIN { printf "srun took %.2f s\n", e - s }'
launch_check "$log" "$status"
