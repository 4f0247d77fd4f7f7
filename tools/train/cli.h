// ferry-train's and ferry-predict's runs (each tool's main is SetUpCommand + the flags +
// Train/Predict ParseAndExecute; the training itself is models/train/trainer.h, the scoring
// models/train/predict.h).
//
// ferry-train, not under a launcher, starts a local cluster of --servers + --workers copies of
// itself (ps/launch/local_cluster.h) and exits with the job's status; each copy (and each rank
// under mpirun/srun) joins the job (ps/node.h) and runs its part. Exit codes: 0 success, 2 bad
// command line, 1 the job failed (the reason on stderr). ferry-predict: 0, 2 bad command line,
// 1 any failure.
//
// Thread-safety: the main thread only. FormatTrainSummary is pure; the ParseAndExecute
// functions block until the job (or the scoring) is done.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "models/train/flags.h"
#include "models/train/predict.h"
#include "models/train/trainer.h"

namespace ferry::train {

// The line worker 0 prints after a successful job: model, shape, throughput, passes, test
// figures, malformed lines ("\n"-terminated).
std::string FormatTrainSummary(std::string_view model, uint32_t servers, uint32_t workers,
                               const std::string& transport, const models::TrainReport& report);

// Parses argv into `o` / `text` (the flags of models/train/flags.h) and runs this process's part
// of the job. Returns the exit code.
int TrainParseAndExecute(CLI::App& app, models::TrainOptions& o, models::TrainFlagText& text,
                         int argc, char** argv);

struct PredictFlags {
  models::PredictOptions options;
  std::string model_path, out_path = "-";
  bool summary = false;
};

void AddPredictFlags(CLI::App& app, PredictFlags& f);

// Parses argv into `f`, scores, writes the probabilities; returns the exit code.
int PredictParseAndExecute(CLI::App& app, PredictFlags& f, int argc, char** argv);

}  // namespace ferry::train
