// ferry-launch: runs a parameter-server job on this host, one process per rank, the way
// `mpirun -np N` would; the rank environment, failure and signal rules are
// ps/launch/local_cluster.h's. The flags and the run are tools/launch/cli.h.
//
//   ferry-launch --servers 2 --workers 2 -- ferry-train --data train.svm
//   ferry-launch -s 4 -w 4 --rule colocated --tag-output --timeout 600 -- ./my_job --steps 100
//
// Exit codes: the job's (0 when every rank exited 0; the failing rank's status or 128+signal;
// 128+signal when ferry-launch itself was signalled; 124 on --timeout), 2 bad command line,
// 126 PROGRAM not executable, 127 PROGRAM not found, 1 any other launcher failure.
#include "tools/launch/cli.h"

int main(int argc, char** argv) {
  return ferry::launch::Main(argc, argv);
}
