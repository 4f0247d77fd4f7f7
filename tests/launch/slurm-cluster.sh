#!/usr/bin/env bash
# A single-node Slurm cluster on this host, for tests: munged + slurmctld + slurmd from Debian's
# munge and slurm-wlm packages, no systemd, everything inside STATE_DIR.
#
#   tests/launch/slurm-cluster.sh up     STATE_DIR   start it; wait until the node is idle
#   tests/launch/slurm-cluster.sh down   STATE_DIR   stop what `up` started (and only that)
#   tests/launch/slurm-cluster.sh status STATE_DIR   daemons, pids and sinfo
#   tests/launch/slurm-cluster.sh env    STATE_DIR   prints "export SLURM_CONF=..." for clients
#
# Clients (srun, sinfo, sbatch) find the cluster through SLURM_CONF=STATE_DIR/slurm/slurm.conf
# (also in STATE_DIR/cluster.env). Layout:
#   STATE_DIR/munge/{etc/munge.key, run/munge.sock, run/munged.pid, log/, lib/}
#   STATE_DIR/slurm/{slurm.conf, plugstack.conf, state/, spool/, log/, run/*.pid}
#   STATE_DIR/pids/{munged,slurmctld,slurmd}.pid   what `down` stops
#   STATE_DIR/cluster.env
#
# Isolation from anything else on the host (a system munged, another test's cluster, a cluster
# left over by a killed run): munged runs with its own key and socket (slurm.conf's AuthInfo
# points Slurm at it), slurmctld and slurmd listen on free ports chosen at `up` (below the Linux
# ephemeral range and below the 20000-40000 range of ps/ DerivedCoordinatorPort), FirstJobId is
# random so two clusters rarely hand out the same job ids (and coordinator ports), and every
# state, spool, pid and log path is under STATE_DIR. `up` in a STATE_DIR that still holds pid
# records of an earlier, killed run stops those daemons first if they are still alive and still
# ours (their command line names STATE_DIR), ignores stale records, then wipes the folders.
#
# Needs root (slurmd launches tasks as their user; SlurmUser=root as in
# /work/shared/launchers-facts.md), and every folder above STATE_DIR searchable by all (munged
# refuses a socket others cannot reach). Exit codes of `up`: 0 up, 77 Slurm cannot run here (the
# reason is printed; what was started is stopped again), 2 usage.
set -uo pipefail

usage() {
  echo "usage: $(basename "$0") up|down|status|env STATE_DIR" >&2
  exit 2
}
[[ $# -eq 2 ]] || usage
action=$1
state=$(readlink -m -- "$2")
conf=$state/slurm/slurm.conf
sock=$state/munge/run/munge.sock
node=$(hostname -s)
daemons=(slurmd slurmctld munged)  # the order `down` stops them in

log() { echo "slurm-cluster: $*"; }
skip() {
  echo "SKIP: slurm-cluster: $*"
  exit 77
}

# True when PID is alive, runs NAME and its command line mentions STATE_DIR: a recycled pid
# that now belongs to someone else is never touched.
ours() {
  local pid=$1 name=$2 cmdline
  [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name"* ]] || return 1
  cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)
  [[ $cmdline == *"$state/"* ]]
}

# Pids `up` recorded for NAME plus the one in the daemon's own pid file (a run killed between
# starting a daemon and recording it leaves only the latter).
recorded_pids() {
  local name=$1 f
  for f in "$state/pids/$name.pid" "$state/munge/run/$name.pid" "$state/slurm/run/$name.pid"; do
    [[ -r $f ]] && head -c 32 "$f" | tr -dc '0-9\n'
  done | sort -u
}

stop_daemon() {
  local name=$1 pid i
  for pid in $(recorded_pids "$name"); do
    if ! ours "$pid" "$name"; then
      log "$name: stale pid record $pid (not running, or not this cluster's): ignored"
      continue
    fi
    kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < 100; i++)); do
      ours "$pid" "$name" || break
      sleep 0.1
    done
    if ours "$pid" "$name"; then
      log "$name (pid $pid) ignored SIGTERM for 10 s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null
      sleep 0.2
    fi
    log "stopped $name (pid $pid)"
  done
  rm -f "$state/pids/$name.pid"
}

# Helpers the daemons fork (slurmstepd per job step, slurmctld's slurmscriptd) are not started by
# us and do not name STATE_DIR on their command line, but they hold this cluster's log files
# open: that is how one left behind by a killed daemon is recognised.
helper_pids() {
  local pid fd
  for pid in $(pgrep -x slurmstepd; pgrep -x slurmscriptd); do
    for fd in /proc/"$pid"/fd/*; do
      if [[ $(readlink "$fd" 2>/dev/null) == "$state/"* ]]; then
        echo "$pid"
        break
      fi
    done
  done
}

# Every descendant of PID (a leftover slurmstepd's tasks and their children).
descendants() {
  local children child
  children=$(awk -v p="$1" '$4 == p { print $1 }' /proc/[0-9]*/stat 2>/dev/null)
  for child in $children; do
    echo "$child"
    descendants "$child"
  done
}

down() {
  if [[ -r $conf ]] && ours "$(recorded_pids slurmctld | head -n1)" slurmctld; then
    # Cancel this cluster's jobs first so slurmd tears their steps down cleanly.
    local jobs i
    jobs=$(SLURM_CONF=$conf timeout 10 squeue -h -o %i 2>/dev/null | tr '\n' ' ')
    if [[ -n ${jobs// /} ]]; then
      log "cancelling jobs $jobs"
      # shellcheck disable=SC2086
      SLURM_CONF=$conf timeout 10 scancel $jobs 2>/dev/null
      for ((i = 0; i < 50; i++)); do
        [[ -z $(SLURM_CONF=$conf timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
        sleep 0.2
      done
    fi
  fi
  local name pid
  for name in "${daemons[@]}"; do stop_daemon "$name"; done
  for pid in $(helper_pids); do
    log "killing leftover $(cat "/proc/$pid/comm" 2>/dev/null) (pid $pid) of this cluster and" \
      "its tasks: $(descendants "$pid" | tr '\n' ' ')"
    # shellcheck disable=SC2046
    kill -KILL "$pid" $(descendants "$pid") 2>/dev/null
  done
  return 0
}

# A TCP port in [lo, hi) nobody listens on, other than those in $taken.
pick_port() {
  local lo=$1 hi=$2 taken=$3 used port i
  used=" $(ss -Htan 2>/dev/null | awk '{ n = split($4, a, ":"); print a[n] }' | tr '\n' ' ') $taken "
  port=$((lo + RANDOM % (hi - lo)))
  for ((i = 0; i < hi - lo; i++)); do
    [[ $used == *" $port "* ]] || { echo "$port"; return 0; }
    port=$((port + 1 >= hi ? lo : port + 1))
  done
  return 1
}

# Runs "$@" until it succeeds or SECONDS pass.
wait_for() {
  local seconds=$1 i
  shift
  for ((i = 0; i < seconds * 10; i++)); do
    "$@" && return 0
    sleep 0.1
  done
  return 1
}

pid_file_ready() { [[ -s $1 ]] && ours "$(head -n1 "$1")" "$2"; }
munge_works() { munge -S "$sock" -n 2>/dev/null | unmunge -S "$sock" >/dev/null 2>&1; }
node_idle() {
  [[ $(SLURM_CONF=$conf timeout 5 sinfo -h -n "$node" -o %T 2>/dev/null) == idle ]]
}

# Records the daemon's pid, or stops everything and skips with its log.
record() {
  local name=$1 pidfile=$2 logfile=$3
  if ! wait_for 15 pid_file_ready "$pidfile" "$name"; then
    echo "--- $logfile" && tail -n 30 "$logfile" 2>/dev/null
    down >/dev/null
    skip "$name did not start (no live pid in $pidfile within 15 s); its log is above"
  fi
  head -n1 "$pidfile" >"$state/pids/$name.pid"
  log "started $name (pid $(cat "$state/pids/$name.pid"))"
}

up() {
  local b
  [[ $(id -u) -eq 0 ]] || skip "needs root (slurmd runs tasks as their owner; SlurmUser=root)"
  for b in munged munge unmunge slurmctld slurmd srun sinfo squeue scancel ss pgrep; do
    command -v "$b" >/dev/null ||
      skip "$b not found (apt-get install munge slurm-wlm slurm-client iproute2 procps)"
  done
  mkdir -p "$state" || skip "cannot create $state"

  # Leftovers of an earlier run in this STATE_DIR (killed before `down`).
  if [[ -d $state/pids || -d $state/munge || -d $state/slurm ]]; then
    log "cleaning up an earlier run in $state"
    down
  fi
  rm -rf "$state/munge" "$state/slurm" "$state/pids" "$state/cluster.env"

  # munged: the socket's folder and every folder above it must be searchable by all.
  chmod 755 "$state"
  local d=$state
  while [[ $d != / ]]; do
    d=$(dirname "$d")
    [[ $(stat -c %A "$d") == ?????????[xt] ]] ||
      skip "munged needs every folder above its socket searchable by all; $d is not (o+x): use a STATE_DIR under /tmp"
  done
  [[ ${#sock} -lt 100 ]] || skip "STATE_DIR is too long for a unix socket path ($sock)"

  mkdir -p "$state"/munge/{etc,run,log,lib} "$state"/slurm/{state,spool,log,run} "$state/pids"
  chmod 700 "$state"/munge/{etc,log,lib}
  chmod 755 "$state/munge" "$state/munge/run"
  local key=$state/munge/etc/munge.key
  if command -v mungekey >/dev/null; then
    mungekey -c -f -k "$key" || skip "mungekey -c failed"
  else
    dd if=/dev/urandom of="$key" bs=1024 count=1 status=none || skip "cannot write $key"
  fi
  chmod 400 "$key"

  # munged runs as root here: its key and folders are root's, and nothing else uses this socket.
  munged --key-file="$key" --socket="$sock" --pid-file="$state/munge/run/munged.pid" \
    --log-file="$state/munge/log/munged.log" --seed-file="$state/munge/lib/munged.seed" \
    >"$state/munge/log/munged.out" 2>&1 ||
    { cat "$state/munge/log/munged.out"; down >/dev/null; skip "munged did not start (output above)"; }
  record munged "$state/munge/run/munged.pid" "$state/munge/log/munged.log"
  if ! wait_for 10 munge_works; then
    tail -n 20 "$state/munge/log/munged.log"
    down >/dev/null
    skip "munged runs but 'munge -n | unmunge' fails (log above)"
  fi

  local ctld_port slurmd_port
  ctld_port=$(pick_port 10000 20000 "") || skip "no free port for slurmctld"
  slurmd_port=$(pick_port 10000 20000 "$ctld_port") || skip "no free port for slurmd"
  cat >"$conf" <<CONF
# Written by tests/launch/slurm-cluster.sh: a one-node test cluster without systemd or cgroups.
ClusterName=ferrytest
SlurmctldHost=$node
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
FirstJobId=$((1000 + (RANDOM * 32768 + RANDOM) % 1000000))
MailProg=/bin/true
PlugStackConfig=$state/slurm/plugstack.conf
StateSaveLocation=$state/slurm/state
SlurmdSpoolDir=$state/slurm/spool
SlurmctldPidFile=$state/slurm/run/slurmctld.pid
SlurmdPidFile=$state/slurm/run/slurmd.pid
SlurmctldLogFile=$state/slurm/log/slurmctld.log
SlurmdLogFile=$state/slurm/log/slurmd.log
NodeName=$node CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  : >"$state/slurm/plugstack.conf"  # not /etc/slurm's

  slurmctld -f "$conf" >"$state/slurm/log/slurmctld.out" 2>&1 ||
    { cat "$state/slurm/log/slurmctld.out"; down >/dev/null; skip "slurmctld did not start (output above)"; }
  record slurmctld "$state/slurm/run/slurmctld.pid" "$state/slurm/log/slurmctld.log"
  slurmd -f "$conf" >"$state/slurm/log/slurmd.out" 2>&1 ||
    { cat "$state/slurm/log/slurmd.out"; down >/dev/null; skip "slurmd did not start (output above)"; }
  record slurmd "$state/slurm/run/slurmd.pid" "$state/slurm/log/slurmd.log"

  if ! wait_for 30 node_idle; then
    SLURM_CONF=$conf timeout 5 sinfo -N -l 2>&1
    echo "--- slurmctld.log" && tail -n 20 "$state/slurm/log/slurmctld.log"
    echo "--- slurmd.log" && tail -n 20 "$state/slurm/log/slurmd.log"
    down >/dev/null
    skip "node $node did not become idle within 30 s (sinfo and logs above)"
  fi
  printf 'SLURM_CONF=%s\nSLURM_TEST_NODE=%s\nSLURMCTLD_PORT=%s\nSLURMD_PORT=%s\n' \
    "$conf" "$node" "$ctld_port" "$slurmd_port" >"$state/cluster.env"
  log "up: node $node idle, slurmctld port $ctld_port, slurmd port $slurmd_port; export SLURM_CONF=$conf"
}

status() {
  local name pid running=0
  for name in munged slurmctld slurmd; do
    pid=$(cat "$state/pids/$name.pid" 2>/dev/null)
    if [[ -z $pid ]]; then
      echo "$name: not started"
    elif ours "$pid" "$name"; then
      echo "$name: running (pid $pid)"
      running=$((running + 1))
    else
      echo "$name: stale record (pid $pid is gone or not ours)"
    fi
  done
  [[ $running -gt 0 && -r $conf ]] && SLURM_CONF=$conf timeout 5 sinfo
  [[ $running -eq 3 ]]
}

case $action in
  up) up ;;
  down) down; log "down" ;;
  status) status ;;
  env) [[ -r $conf ]] || { echo "no cluster in $state" >&2; exit 1; }; echo "export SLURM_CONF=$conf" ;;
  *) usage ;;
esac
