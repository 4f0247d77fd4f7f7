// ferry-gen: synthetic click-through data or text documents of any size with a known
// ("hidden") truth model.
//
//   ferry-gen --samples 1000000 --out train.svm
//   ferry-gen --samples 1e7 --test-samples 1e6 --test-out test.svm --out train.svm
//             --features 16777216 --truth fm --truth-out truth.txt --gzip
//   ferry-gen --format criteo --samples 100000 --out day_0.tsv
//   ferry-gen --layout text --vocab 20000 --words 100 --logit-sd 4 --samples 20000 --out docs.svm
//
// The files are streamed (memory stays small at any size) and identical for identical flags.
// At the end the truth model's own logloss and AUC on the test set (the training set without
// one) are printed: the best any learned model can reach. The generator lives in
// models/data/gen.h, the flags and the run tools/gen/cli.h; this file is the man page.
//
// Exit codes: 0 success (and --help), 2 bad command line, 1 I/O failure.
#include <CLI/CLI.hpp>

#include "tools/common/command.h"
#include "tools/gen/cli.h"

int main(int argc, char** argv) {
  CLI::App app;
  ferry::tools::SetUpCommand(
      app,
      {.name = "ferry-gen",
       .summary = "synthetic CTR data or text documents for ferry-train",
       .description =
           "--layout ctr: Zipf-distributed categorical fields and optional numeric "
           "features, labelled by a\nhidden lr / fm / ffm / mlp truth model, written as "
           "LIBSVM, libffm or Criteo TSV.\n--layout text: bag-of-words documents (Zipf "
           "word frequencies, log-normal lengths, tf-idf\nvalues of unit L2 norm), labelled by "
           "a hidden lr over words, written as LIBSVM or libffm.\nPlain or gzip. "
           "--logit-sd and --positive-rate set how separable the classes are and how\n"
           "many are positive; the summary gives the truth model's own logloss and AUC.",
       .examples = {"ferry-gen --samples 1M --out train.svm",
                    "ferry-gen --samples 10M --test-samples 1M --test-out test.svm --out "
                    "train.svm --features 16777216 --truth fm --truth-out truth.txt --gzip",
                    "ferry-gen --format criteo --samples 100K --out day_0.tsv",
                    "ferry-gen --truth ffm --fields 10 --samples 1M --out train.ffm "
                    "--format libffm",
                    "ferry-gen --layout text --vocab 20000 --words 100 --logit-sd 4 "
                    "--samples 20K --test-samples 5K --test-out test.svm --out train.svm"},
       .see_also = {"ferry-train", "docs/data-formats.md"}});
  ferry::gen::GenFlags flags;
  ferry::gen::AddFlags(app, flags);
  return ferry::gen::ParseAndExecute(app, flags, argc, argv);
}
