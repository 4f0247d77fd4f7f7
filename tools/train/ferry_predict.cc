// ferry-predict MODEL FILE...: one probability per line for every sample of FILE, with a model
// ferry-train exported (--model-out). Runs in one process; no parameter server.
#include <CLI/CLI.hpp>

#include "tools/common/command.h"
#include "tools/train/cli.h"

int main(int argc, char** argv) {
  CLI::App app;
  ferry::tools::SetUpCommand(
      app, {.name = "ferry-predict",
            .summary = "score samples with a model exported by ferry-train --model-out",
            .description = "Writes one probability per line, in input order. Runs in one process; "
                           "no parameter server.",
            .examples = {"ferry-train --model fm --train tr.txt --model-out fm.model",
                         "ferry-predict fm.model te.txt > p.txt"},
            .see_also = {"ferry-train", "docs/model-format.md"}});
  ferry::train::PredictFlags flags;
  ferry::train::AddPredictFlags(app, flags);
  return ferry::train::PredictParseAndExecute(app, flags, argc, argv);
}
