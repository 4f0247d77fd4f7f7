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
// models/data/gen.h; this file only maps flags onto GenOptions.
//
// Exit codes: 0 success (and --help), 2 bad command line, 1 I/O failure.
#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdio>
#include <string>

#include "models/data/gen.h"
#include "tools/common/command.h"

namespace {

using ferry::models::GenOptions;

// Accepts "1000000", "1e6" or "1M" style counts.
ferry::Result<uint64_t> ParseCount(const std::string& flag, const std::string& text) {
  double v = 0;
  const auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  size_t used = r.ec == std::errc() ? static_cast<size_t>(r.ptr - text.data()) : 0;
  double mult = 1;
  if (used + 1 == text.size()) {
    switch (text[used]) {
      case 'k':
      case 'K':
        mult = 1e3;
        break;
      case 'm':
      case 'M':
        mult = 1e6;
        break;
      case 'g':
      case 'G':
        mult = 1e9;
        break;
      default:
        used = 0;
    }
  } else if (used != text.size()) {
    used = 0;
  }
  v *= mult;
  if (used == 0 || !(v >= 0) || v > 1e15 || v != static_cast<double>(static_cast<uint64_t>(v))) {
    return ferry::InvalidArgument(flag + " '" + text +
                                  "' is not a count (e.g. 1000000, 1e6 or 1M)");
  }
  return static_cast<uint64_t>(v);
}

}  // namespace

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
  GenOptions o;
  std::string samples = "", test_samples = "0", features = "0", format = "libsvm", truth = "lr",
              layout = "ctr";
  bool quiet = false;
  app.add_option("--samples", samples, "training samples (e.g. 1000000, 1e6, 1M)")->required();
  app.add_option("--out", o.out, "training file to write")->required();
  app.add_option("--test-samples", test_samples, "held-out samples, written to --test-out")
      ->capture_default_str();
  app.add_option("--test-out", o.test_out, "held-out file to write");
  app.add_option("--format", format, "output format: libsvm, libffm or criteo")
      ->capture_default_str()
      ->check(CLI::IsMember({"libsvm", "libffm", "criteo"}));
  app.add_option("--layout", layout, "ctr (one value per field) or text (bags of words)")
      ->capture_default_str()
      ->check(CLI::IsMember({"ctr", "text"}));
  auto* fields = app.add_option("--fields", o.fields, "categorical fields (criteo: 26; not text)")
                     ->capture_default_str();
  app.add_option("--vocab", o.vocab, "distinct values per field; text: words in the vocabulary")
      ->capture_default_str();
  app.add_option("--features", features,
                 "total distinct values over all fields instead of --vocab (e.g. 16777216)");
  app.add_option("--zipf", o.zipf, "Zipf exponent of value / word frequencies (0: uniform)")
      ->capture_default_str();
  auto* words =
      app.add_option("--words", o.words, "text: mean tokens per document")->capture_default_str();
  auto* numeric =
      app.add_option("--numeric", o.numeric, "count-valued numeric features (criteo: 13)")
          ->capture_default_str();
  app.add_option("--truth", truth, "hidden model: lr, fm, ffm or mlp (text: lr)")
      ->capture_default_str()
      ->check(CLI::IsMember({"lr", "fm", "ffm", "mlp"}));
  app.add_option("--factors", o.factors, "fm, ffm: factor length; mlp: embedding length")
      ->capture_default_str();
  app.add_option("--hidden", o.hidden, "mlp: hidden units")->capture_default_str();
  app.add_option("--logit-sd", o.logit_sd,
                 "standard deviation of the truth's logits, (0, 10]: 1.5 gives a Bayes AUC "
                 "about 0.82, 4 about 0.95")
      ->capture_default_str();
  app.add_option("--positive-rate", o.positive_rate, "mean click probability, (0, 1)")
      ->capture_default_str();
  app.add_option("--truth-out", o.truth_out, "write the truth model (text) to this file");
  app.add_flag("--gzip", o.gzip, "gzip the data files (level 1)");
  app.add_option("--seed", o.seed, "random seed: same flags and seed, same bytes")
      ->capture_default_str();
  app.add_flag("-q,--quiet", quiet, "do not print the summary");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }

  const auto fail = [](const ferry::Status& s, int code) {
    std::fprintf(stderr, "ferry-gen: error: %s\n", s.message().c_str());
    if (code == 2) std::fprintf(stderr, "Run with --help for usage.\n");
    return code;
  };
  auto n = ParseCount("--samples", samples);
  auto nt = ParseCount("--test-samples", test_samples);
  auto nf = ParseCount("--features", features);
  for (const auto* r : {&n, &nt, &nf}) {
    if (!r->ok()) return fail(r->status(), 2);
  }
  o.samples = *n;
  o.test_samples = *nt;
  o.features = *nf;
  o.format = *ferry::models::ParseFormat(format);
  o.truth = *ferry::models::ParseTruth(truth);
  o.layout = *ferry::models::ParseLayout(layout);
  const bool text = o.layout == ferry::models::Layout::kText;
  if (text && fields->count() > 0) {
    return fail(ferry::InvalidArgument("--fields does not apply to --layout text (the "
                                       "vocabulary is one field; use --vocab)"),
                2);
  }
  if (!text && words->count() > 0) {
    return fail(ferry::InvalidArgument("--words applies to --layout text only"), 2);
  }
  if (o.format == ferry::models::Format::kCriteo && !text) {
    if (fields->count() == 0) o.fields = ferry::models::kCriteoCatColumns;
    if (numeric->count() == 0) o.numeric = ferry::models::kCriteoIntColumns;
  }
  auto summary = ferry::models::Generate(o);
  if (!summary.ok()) {
    const bool usage = summary.status().code() == ferry::Code::kInvalidArgument;
    return fail(summary.status(), usage ? 2 : 1);
  }
  if (!quiet) {
    const auto& s = *summary;
    std::printf("wrote %llu samples to %s (positive rate %.4f)\n",
                static_cast<unsigned long long>(s.samples), o.out.c_str(), s.positive_rate);
    if (s.test_samples > 0) {
      std::printf("wrote %llu samples to %s (positive rate %.4f)\n",
                  static_cast<unsigned long long>(s.test_samples), o.test_out.c_str(),
                  s.test_positive_rate);
    }
    if (!o.truth_out.empty()) std::printf("wrote the truth model to %s\n", o.truth_out.c_str());
    if (text) {
      std::printf(
          "truth %s on text: %llu words; %.1f tokens, %.1f distinct words per document; "
          "bias %.4f, scale %.4f\n",
          std::string(ferry::models::TruthName(o.truth)).c_str(),
          static_cast<unsigned long long>(s.total_vocab), s.mean_tokens, s.mean_features, s.bias,
          s.scale);
    } else {
      std::printf(
          "truth %s: %llu categorical values in %u fields, %u numeric; bias %.4f, scale %.4f\n",
          std::string(ferry::models::TruthName(o.truth)).c_str(),
          static_cast<unsigned long long>(s.total_vocab), o.fields, o.numeric, s.bias, s.scale);
    }
    std::printf("bayes (truth model on the %s set): logloss %.5f  auc %.5f\n",
                s.on_test ? "test" : "training", s.bayes_logloss, s.bayes_auc);
  }
  return 0;
}
