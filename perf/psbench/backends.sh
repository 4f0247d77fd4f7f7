# Sourced by perf/psbench/run.sh and variants.sh (bash): the local backends' names and flags.

# backend_args NAME: the transport flags of a backend name, for ferry-ps-bench and ferry-lat alike.
backend_args() {
  case "$1" in
    tcp) echo "--transport tcp" ;;
    ucx-shm) echo "--transport ucx --param UCX_TLS=shm,self" ;;
    ucx-tcp) echo "--transport ucx --param UCX_TLS=tcp,self --param UCX_NET_DEVICES=lo" ;;
    *) echo "$(basename "$0"): unknown backend $1 (tcp, ucx-shm, ucx-tcp)" >&2; exit 2 ;;
  esac
}
