// ferry-train's command line: flags -> TrainOptions. Shared by the tool and its tests.
//
// Ownership: AddTrainFlags stores pointers to `o` and `text` in the app; both must outlive the
// parse. Threading: command-line setup, one thread. FinalizeTrainFlags is pure.
#pragma once

#include <string>

#include "models/train/train_options.h"

namespace CLI {
class App;  // <CLI/CLI.hpp>: only the .cc files that build the flags include it
}  // namespace CLI

namespace ferry::models {

// Strings the flags fill before they become typed options (Finalize converts them).
struct TrainFlagText {
  std::string model = "ftrl";
  std::string format = "libsvm";
  std::string consistency = "asp";
  std::string model_format = "binary";
  std::string progress = "auto";
  std::string hidden = "64,32";
  std::string epochs = "auto";
  std::string batch_size = "auto";
  std::string refit = "auto";
};

void AddTrainFlags(CLI::App& app, TrainOptions* o, TrainFlagText* text);
// Converts the text flags and validates; kInvalidArgument naming the flag.
Status FinalizeTrainFlags(const TrainFlagText& text, TrainOptions* o);

}  // namespace ferry::models
