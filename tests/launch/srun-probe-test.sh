#!/usr/bin/env bash
# meson test launch_srun: brings up a single-node Slurm (slurm-cluster.sh) in a temporary folder,
# runs rendezvous_probe as 4 tasks with `srun --mpi=pmix` (PMIx rule, when the library has PMIx)
# and with `srun --mpi=none` (the derived-port rule), checks both OK lines, and always takes the
# cluster down. Exit: 0 pass, 1 fail, 77 skip (Slurm cannot start here; the reason is printed).
#   tests/launch/srun-probe-test.sh PATH/TO/rendezvous_probe
set -uo pipefail
here=$(dirname "$(readlink -f "$0")")
[[ $# -eq 1 && -x $1 ]] || { echo "usage: $0 PATH/TO/rendezvous_probe" >&2; exit 2; }
probe=$(readlink -f "$1")

command -v srun >/dev/null || { echo "SKIP: srun not found (apt-get install slurm-wlm)"; exit 77; }
state=$(mktemp -d /tmp/ferry-slurm.XXXXXX)
# shellcheck disable=SC2317  # run by the traps
cleanup() {
  "$here/slurm-cluster.sh" down "$state"
  rm -rf "$state"
}
# On SIGTERM/SIGINT (meson's timeout, ^C) the cluster is taken down by a detached process: meson
# SIGKILLs the test's process group 0.5 s after its SIGTERM, sooner than `down` finishes. Every
# step below runs in the background and is waited for, so the trap runs at once.
# shellcheck disable=SC2317,SC2016  # run by the traps; $0/$1 belong to the inner bash
on_signal() {
  trap - EXIT
  setsid bash -c '"$0" down "$1"; rm -rf "$1"' "$here/slurm-cluster.sh" "$state" \
    </dev/null >/dev/null 2>&1 &
  exit "$1"
}
trap cleanup EXIT
trap 'on_signal 143' TERM
trap 'on_signal 130' INT

t0=$EPOCHREALTIME
"$here/slurm-cluster.sh" up "$state" &
wait $!
up_status=$?
[[ $up_status -eq 0 ]] || exit "$up_status"
awk -v s="$t0" -v e="$EPOCHREALTIME" 'BEGIN { printf "slurm up took %.2f s\n", e - s }'

pmix_rule=pmix
"$probe" --has-pmix || pmix_rule=slurm-port  # a library built without libpmix
status=0
"$here/run-srun.sh" 4 --state "$state" --mpi pmix --timeout 120 \
  --expect "^RENDEZVOUS OK launcher=srun size=4 coordinator=[^ ]+ rule=$pmix_rule\$" \
  -- "$probe" --timeout-s 60 &
wait $! || status=1
"$here/run-srun.sh" 4 --state "$state" --mpi none --timeout 120 \
  --expect '^RENDEZVOUS OK launcher=srun size=4 coordinator=127\.0\.0\.1:[0-9]+ rule=slurm-port$' \
  -- "$probe" --timeout-s 60 &
wait $! || status=1
exit $status
