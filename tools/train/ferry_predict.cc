// ferry-predict MODEL FILE...: one probability per line for every sample of FILE, with a model
// ferry-train exported (--model-out). Runs in one process; no parameter server.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "models/io/model_reader.h"
#include "models/train/predict.h"
#include "tools/common/command.h"

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
  std::string model_path, out_path = "-";
  ferry::models::PredictOptions o;
  bool summary = false;
  app.add_option("MODEL", model_path, "model file (binary or text)")->required();
  app.add_option("FILE", o.files, "samples to score (plain or gzip)")->required();
  app.add_option("--format", o.format, "libsvm, criteo or libffm (default: the model's)")
      ->check(CLI::IsMember({"libsvm", "svmlight", "criteo", "libffm"}));
  app.add_option("-o,--out", out_path, "where the probabilities go (- for stdout)")
      ->capture_default_str();
  app.add_option("--field-map", o.field_map,
                 "libsvm field map (default: the one the model was trained with)");
  app.add_option("--threads", o.parse_threads, "parsing threads")->check(CLI::Range(1, 64));
  app.add_flag("--strict", o.strict, "a malformed line is fatal (default: report, skip, count)");
  app.add_flag("--summary", summary, "print logloss and AUC against the files' labels on stderr");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  auto model = ferry::models::ReadModelFile(model_path);
  if (!model.ok()) {
    std::fprintf(stderr, "ferry-predict: %s: %s\n", model_path.c_str(),
                 model.status().ToString().c_str());
    return 1;
  }
  std::FILE* out = stdout;
  if (out_path != "-") {
    out = std::fopen(out_path.c_str(), "w");
    if (out == nullptr) {
      std::fprintf(stderr, "ferry-predict: cannot write %s: %s\n", out_path.c_str(),
                   std::strerror(errno));
      return 1;
    }
  }
  ferry::models::PredictReport report;
  ferry::Status s = ferry::models::Predict(*model, o, out, &report);
  if (out != stdout && std::fclose(out) != 0 && s.ok()) {
    s = ferry::IoError("close " + out_path, errno);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "ferry-predict: %s\n", s.ToString().c_str());
    return 1;
  }
  if (summary) {
    std::fprintf(stderr, "ferry-predict: %llu samples, logloss %.5f, AUC %.5f\n",
                 static_cast<unsigned long long>(report.samples), report.logloss, report.auc);
  }
  return 0;
}
