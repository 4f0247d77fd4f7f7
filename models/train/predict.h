// Scoring with an exported model (models/io): ferry-predict's engine. The same kernels as
// training run forward over rows looked up in the model file (a key the model does not know
// reads as a zero row, as an untrained feature would).
//
// Blocking: Predict reads every file (with parse_threads > 1 on reader threads of its own) and
// writes `out` before returning. Ownership: `model` and `out` are borrowed for the call; `out` is
// neither flushed nor closed. Call from any one thread.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "models/data/parse.h"
#include "models/io/model.h"
#include "transport/status.h"

namespace ferry::models {

struct PredictOptions {
  std::vector<std::string> files;
  // Empty: the format the model was trained on (its "format" parameter).
  std::string format;
  // A field map file (libsvm): overrides the map the model carries ("" : the model's, if any).
  std::string field_map;
  int parse_threads = 1;
  bool strict = false;
  uint32_t batch_size = 4096;
};

struct PredictReport {
  uint64_t samples = 0;
  double logloss = 0;  // against the files' labels
  double auc = 0;
  uint64_t malformed = 0;
};

// Writes one probability per line to `out` ("%.6g"), in input order. Files that hold no sample
// (empty, or every line malformed, blank or a comment) are InvalidArgument (NoSampleError,
// models/data/reader.h), with nothing written.
Status Predict(const Model& model, const PredictOptions& o, std::FILE* out, PredictReport* report);

}  // namespace ferry::models
