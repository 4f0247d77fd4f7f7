// ferry-train's flags for continuous jobs (StreamOptions), feature admission and eviction
// (FeatureOptions) and incremental export (ExportOptions), in their own help groups. Called by
// AddTrainFlags (flags.h).
//
// Ownership: the app keeps pointers to the options; they must outlive the parse.
// Threading: command-line setup, one thread.
#pragma once

#include "models/train/feature_options.h"

namespace CLI {
class App;  // <CLI/CLI.hpp>
}  // namespace CLI

namespace ferry::models {

void AddStreamFlags(CLI::App& app, StreamOptions* o);
void AddFeatureFlags(CLI::App& app, FeatureOptions* o);
void AddExportFlags(CLI::App& app, ExportOptions* o);

}  // namespace ferry::models
