// ferry-ps-bench: pull, push and push-pull of K keys x D floats through a parameter-server job
// of S servers and W workers, per backend: keys/s, GB/s, per-op latency (p50/p99), or single-key
// latency with perftest's columns. One process per rank, started by a launcher:
//
//   ferry-launch --servers 2 --workers 2 -- ferry-ps-bench --json
//   ferry-launch --servers 1 --workers 1 -- ferry-ps-bench --op pull --transport ucx
//       --param UCX_TLS=shm,self                        (one command line)
//   ferry-launch --servers 1 --workers 1 -- ferry-ps-bench --latency --op pull
//   ferry-ps-bench --keys 10000           # no launcher: one rank, colocated server + worker
//
// The kernels are tools/ps/ps_bench.h; usage and method in docs/ps-bench.md.
#include "tools/ps/cli.h"

int main(int argc, char** argv) {
  return ferry::psbench::Main(argc, argv);
}
