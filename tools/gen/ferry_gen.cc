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
#include "tools/gen/cli.h"

int main(int argc, char** argv) {
  return ferry::gen::Main(argc, argv);
}
