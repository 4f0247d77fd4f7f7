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
#include <CLI/CLI.hpp>

#include "tools/common/command.h"
#include "tools/launch/cli.h"

int main(int argc, char** argv) {
  CLI::App app;
  ferry::tools::SetUpCommand(
      app,
      {.name = "ferry-launch",
       .summary = "run a parameter-server job on this host, one process per rank",
       .description =
           "Rank 0 starts first and publishes the coordinator's address; then the other ranks "
           "start.\nThe first rank to fail stops the job; signals to ferry-launch are forwarded "
           "to every rank.\nEvery rank gets FERRY_RANK, FERRY_SIZE, FERRY_LOCAL_RANK, "
           "FERRY_LOCAL_SIZE, FERRY_SERVERS,\nFERRY_WORKERS, FERRY_TRANSPORT, FERRY_ROLE_RULE and "
           "the --env variables; rank 0\nFERRY_COORDINATOR_FILE, the others FERRY_COORDINATOR "
           "(docs/launchers.md).",
       .synopsis = ferry::launch::kUsage,
       .examples = {"ferry-launch --servers 2 --workers 2 -- ferry-train --data train.svm",
                    "ferry-launch -s 4 -w 4 --rule colocated --tag-output -- ./my_job --steps 100",
                    "ferry-launch -s 1 -w 3 --transport tcp --timeout 600 --env "
                    "UCX_TLS=shm,self -- ./my_job"},
       .exit_status = "The job's: 0 if every rank exited 0, else the first failing rank's status "
                      "or 128+signal;\n128+signal if ferry-launch was signalled; 124 after "
                      "--timeout; 2 bad command line;\n126 PROGRAM not executable; 127 PROGRAM not "
                      "found; 1 other launcher failures.",
       .see_also = {"mpirun(1)", "srun(1)", "ferry-train", "docs/launchers.md"}});
  ferry::launch::LaunchFlags flags;
  ferry::launch::AddFlags(app, flags);
  return ferry::launch::ParseAndExecute(app, flags, argc, argv);
}
