// Generate(): writes the training (and test) file and the truth file, and scores the truth
// model as it goes. AUC comes from a histogram of logits (2^16 bins over [-16, 16)), so memory
// does not grow with the number of samples; the error is far below the AUC's own sampling noise.
#include <algorithm>
#include <cmath>

#include "models/data/gen_internal.h"

namespace ferry::models {
namespace {

class Scorer {
 public:
  Scorer() : pos_(kBins, 0), neg_(kBins, 0) {}
  void Add(double logit, float label) {
    // Logloss from the logit, stably: log(1 + e^-|l|) + max(l, 0) - y l.
    loss_ += std::log1p(std::exp(-std::abs(logit))) + std::max(logit, 0.0) - label * logit;
    const double at = (std::clamp(logit, -kRange, kRange) + kRange) / (2 * kRange) * kBins;
    const size_t bin = std::min(static_cast<size_t>(at), kBins - 1);
    (label > 0.5f ? pos_ : neg_)[bin]++;
    ++n_;
    positives_ += label > 0.5f;
  }
  double logloss() const { return n_ ? loss_ / static_cast<double>(n_) : 0; }
  double positive_rate() const { return n_ ? static_cast<double>(positives_) / n_ : 0; }
  double auc() const {
    // Pairs (pos, neg) with the positive scored higher, ties (same bin) counting one half.
    double pairs = 0, neg_below = 0, negatives = 0;
    for (size_t b = 0; b < kBins; ++b) {
      pairs += pos_[b] * (neg_below + 0.5 * neg_[b]);
      neg_below += neg_[b];
    }
    negatives = neg_below;
    const double positives = static_cast<double>(positives_);
    return positives > 0 && negatives > 0 ? pairs / (positives * negatives) : 0.5;
  }

 private:
  static constexpr size_t kBins = 1 << 16;
  static constexpr double kRange = 16.0;
  std::vector<double> pos_, neg_;
  double loss_ = 0;
  uint64_t n_ = 0, positives_ = 0;
};

// Features and tokens over the samples written, for the summary's per-sample means.
struct Sizes {
  uint64_t features = 0, tokens = 0;
  void Add(const GenOptions& o, const GenSample& s) {
    if (o.layout == Layout::kText) {
      features += s.words.size();
      for (uint32_t c : s.word_counts) tokens += c;
    } else if (o.format == Format::kCriteo) {
      features += uint64_t{o.fields} + o.numeric;  // every column, a 0 count too
    } else {
      features += o.fields;
      for (uint32_t c : s.counts) features += c != 0;  // ln(1 + 0) = 0 is left out
    }
  }
};

// Writes `count` samples drawn by `next` to `path`; scores them into *scorer.
template <typename Next>
Status WriteSamples(const Generator& gen, const std::string& path, uint64_t count, Next next,
                    Scorer* scorer, Sizes* sizes) {
  FERRY_ASSIGN_OR_RETURN(auto file, internal::OutputFile::Open(path, gen.options().gzip));
  GenSample s;
  for (uint64_t i = 0; i < count; ++i) {
    next(&s);
    gen.AppendLine(s, &file->buffer());
    scorer->Add(s.logit, s.label);
    sizes->Add(gen.options(), s);
    FERRY_RETURN_IF_ERROR(file->MaybeFlush());
  }
  return file->Close();
}

// What files need on top of Generator::Create's checks (a stream has none of these).
Status CheckFileOptions(const GenOptions& o) {
  if (o.samples == 0) return InvalidArgument("--samples must be at least 1");
  if (o.out.empty()) return InvalidArgument("--out is required");
  if ((o.test_samples > 0) != !o.test_out.empty()) {
    return InvalidArgument("--test-samples and --test-out go together");
  }
  if (o.drift > 0 && o.test_samples > 0) {
    return InvalidArgument(
        "--drift has no --test-samples: the distribution moves, so there is no fixed one to hold "
        "out (hold out the stream's own recent samples instead)");
  }
  if (o.drift > 0 && !o.truth_out.empty()) {
    return InvalidArgument("--drift has no --truth-out: the truth changes every epoch");
  }
  return Status::Ok();
}

}  // namespace

Result<GenSummary> Generate(const GenOptions& options) {
  FERRY_RETURN_IF_ERROR(CheckFileOptions(options));
  FERRY_ASSIGN_OR_RETURN(std::unique_ptr<Generator> gen, Generator::Create(options));
  Scorer train, test;
  Sizes train_sizes, test_sizes;
  FERRY_RETURN_IF_ERROR(WriteSamples(
      *gen, options.out, options.samples, [&](GenSample* s) { gen->NextTrain(s); }, &train,
      &train_sizes));
  if (options.test_samples > 0) {
    FERRY_RETURN_IF_ERROR(WriteSamples(
        *gen, options.test_out, options.test_samples, [&](GenSample* s) { gen->NextTest(s); },
        &test, &test_sizes));
  }
  if (!options.truth_out.empty()) FERRY_RETURN_IF_ERROR(gen->WriteTruth(options.truth_out));
  GenSummary sum;
  sum.samples = options.samples;
  sum.test_samples = options.test_samples;
  sum.positive_rate = train.positive_rate();
  sum.test_positive_rate = test.positive_rate();
  sum.on_test = options.test_samples > 0;
  const Scorer& scored = sum.on_test ? test : train;
  sum.bayes_logloss = scored.logloss();
  sum.bayes_auc = scored.auc();
  sum.bias = gen->bias();
  sum.scale = gen->scale();
  sum.total_vocab = gen->total_vocab();
  const auto n = static_cast<double>(options.samples);
  sum.mean_features = static_cast<double>(train_sizes.features) / n;
  sum.mean_tokens = static_cast<double>(train_sizes.tokens) / n;
  return sum;
}

}  // namespace ferry::models
