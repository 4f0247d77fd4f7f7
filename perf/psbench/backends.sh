# Sourced by the perf/psbench scripts (bash): the local backends' names and flags, and a check
# for their binaries.

# backend_args NAME: the transport flags of a backend name, for ferry-ps-bench and ferry-lat alike.
backend_args() {
  case "$1" in
    tcp) echo "--transport tcp" ;;
    ucx-shm) echo "--transport ucx --param UCX_TLS=shm,self" ;;
    ucx-tcp) echo "--transport ucx --param UCX_TLS=tcp,self --param UCX_NET_DEVICES=lo" ;;
    verbs) echo "--transport verbs" ;;  # inside tools/softroce/ferry-vm (or on an RDMA host)
    *) echo "$(basename "$0"): unknown backend $1 (tcp, ucx-shm, ucx-tcp, verbs)" >&2; exit 2 ;;
  esac
}

# need_bins WHO FILE...: exits (1) naming the first FILE that is not an executable.
need_bins() {
  local who=$1 f
  shift
  for f in "$@"; do
    [ -x "$f" ] || { echo "$who: $f missing" >&2; exit 1; }
  done
}
