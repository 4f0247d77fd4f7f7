// ferry-train: trains a sparse model on the parameter server.
//
//   ferry-train --model ftrl --train train.txt --test test.txt          # a local cluster
//   mpirun -np 4 ferry-train --servers 2 --model fm --train ...           # joins mpirun's job
//   srun -n 4 --mpi=pmix ferry-train --servers 2 ...                      # joins srun's job
//
// Not under a launcher, it starts a local cluster of --servers + --workers copies of itself
// (ps/launch/local_cluster.h) and exits with the job's status; each copy (and each rank under
// mpirun/srun) joins the job (ps/node.h) and runs its part (models/train/trainer.h). The man page,
// the flags and the run are tools/train/cli.cc.
#include "tools/train/cli.h"

int main(int argc, char** argv) {
  return ferry::train::TrainMain(argc, argv);
}
