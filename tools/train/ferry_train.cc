// ferry-train: trains a sparse model on the parameter server.
//
//   ferry-train --model ftrl --train train.txt --test test.txt          # a local cluster
//   mpirun -np 4 ferry-train --servers 2 --model fm --train ...           # joins mpirun's job
//   srun -n 4 --mpi=pmix ferry-train --servers 2 ...                      # joins srun's job
//
// Not under a launcher, it starts a local cluster of --servers + --workers copies of itself
// (ps/launch/local_cluster.h) and exits with the job's status; each copy (and each rank under
// mpirun/srun) joins the job (ps/node.h) and runs its part (models/train/trainer.h). The run is
// tools/train/cli.h.
#include <CLI/CLI.hpp>

#include "tools/common/command.h"
#include "tools/train/cli.h"

int main(int argc, char** argv) {
  CLI::App app;
  ferry::tools::SetUpCommand(
      app, {.name = "ferry-train",
            .summary = "train LR, FTRL, FM, FFM, an embedding MLP or DeepFM on Ferry's parameter "
                       "server",
            .description = "Without a launcher it runs a local cluster (--servers, --workers); "
                           "under mpirun or srun\nit joins that job. By default passes go on "
                           "while the logloss on held-out data\nimproves (--epochs auto), and "
                           "the batch size follows the data size.",
            .examples = {"ferry-gen --samples 200000 --test-samples 20000 --out tr.txt --test-out "
                         "te.txt",
                         "ferry-train --model ftrl --train tr.txt --test te.txt",
                         "ferry-train --model fm --train tr.txt --test te.txt --metrics-json "
                         "m.jsonl --model-out fm.model",
                         "ferry-train --model ffm --format libffm --train tr.ffm --validation "
                         "va.ffm --test te.ffm",
                         "mpirun -np 4 ferry-train --servers 2 --model lr --train tr.txt --test "
                         "te.txt"},
            .exit_status = "0 success; 2 bad command line; 1 the job failed (the reason is on "
                           "stderr).",
            .see_also = {"ferry-gen", "ferry-predict", "ferry-launch", "docs/training.md"}});
  ferry::models::TrainOptions o;
  ferry::models::TrainFlagText text;
  ferry::models::AddTrainFlags(app, &o, &text);
  return ferry::train::TrainParseAndExecute(app, o, text, argc, argv);
}
