// The record of finished passes that a job with periodic checkpoints keeps beside them
// (CHECKPOINT_DIR/EPOCHS), so that a resumed job takes the same early-stopping decisions and
// keeps the same model as the uninterrupted run.
//
//   ferry-train-epochs 1
//   epoch 1 kept 1 validation COUNT LOGLOSS AUC CALIBRATION test COUNT LOGLOSS AUC CALIBRATION
//           offset OFFSET
//   epoch 2 kept 0 validation ...        (test figures and offset only where kept is 1)
//   end
//
// Numbers are written with 17 significant digits (they read back to the same double) and
// "nan" where undefined. The kept model of epoch E is a checkpoint in CHECKPOINT_DIR/kept-E
// (KeptModelDir); the file is replaced atomically (tmp + rename) after each pass, and kept
// models of earlier epochs are deleted once a later one is recorded.
//
// Thread-safety: pure functions over strings and files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/train/evaluate.h"
#include "transport/status.h"

namespace ferry::models {

struct EpochEntry {
  uint32_t epoch = 0;
  bool kept = false;  // the model after this epoch was the best so far
  EvalMetrics validation;
  EvalMetrics test;   // of the kept model (count 0 when not kept or without a test set)
  double offset = 0;  // the kept model's intercept calibration
  bool operator==(const EpochEntry&) const;
};

std::string EncodeEpochLog(const std::vector<EpochEntry>& entries);
// kProtocol naming the line for anything malformed (epochs out of order included).
Result<std::vector<EpochEntry>> ParseEpochLog(std::string_view text);

// DIR/EPOCHS, written atomically; ReadEpochLog: nullopt when the file does not exist.
Status WriteEpochLog(const std::string& dir, const std::vector<EpochEntry>& entries);
Result<std::optional<std::vector<EpochEntry>>> ReadEpochLog(const std::string& dir);

// DIR/kept-E.
std::string KeptModelDir(const std::string& dir, uint32_t epoch);

}  // namespace ferry::models
