// ferry-train's and ferry-predict's command lines and runs: each tool's main calls TrainMain or
// PredictMain, which hold the man page and the flags (cli.cc is the only file of either tool that
// compiles CLI11: its header costs ~7-10 s per file). The training itself is
// models/train/trainer.h, the scoring models/train/predict.h.
//
// ferry-train, not under a launcher, starts a local cluster of --servers + --workers copies of
// itself (ps/launch/local_cluster.h) and exits with the job's status; each copy (and each rank
// under mpirun/srun) joins the job (ps/node.h) and runs its part. Exit codes: 0 success, 2 bad
// command line, 1 the job failed (the reason on stderr). ferry-predict: 0, 2 bad command line,
// 1 any failure.
//
// Thread-safety: the main thread only. FormatTrainSummary is pure; TrainMain and PredictMain
// block until the job (or the scoring) is done.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "models/train/trainer.h"

namespace ferry::train {

// The line worker 0 prints after a successful job: model, shape, throughput, passes, test
// figures, malformed lines ("\n"-terminated).
std::string FormatTrainSummary(std::string_view model, uint32_t servers, uint32_t workers,
                               const std::string& transport, const models::TrainReport& report);

// ferry-train's main: parses argv (the flags of models/train/flags.h) and runs this process's
// part of the job (a local cluster when not under a launcher). Returns the exit code.
int TrainMain(int argc, char** argv);

// ferry-predict's main: parses argv, scores, writes the probabilities; returns the exit code.
int PredictMain(int argc, char** argv);

}  // namespace ferry::train
