// Streaming evaluation metrics for binary classifiers: mean logloss and EXACT AUC.
//
// Both accumulators expose their raw state (sums, counts, the score and label vectors) so that
// a coordinator can gather them from every worker and Merge() them; merging is exact: the merged
// accumulator reports what one accumulator fed with every sample would have reported.
//
// AUC is the Mann-Whitney statistic with tie correction: all (score, label) pairs are sorted,
// tied scores share their average rank, and
//   AUC = (sum of positive ranks - P (P + 1) / 2) / (P N)
// which equals P(score+ > score-) + 1/2 P(score+ == score-) over all positive/negative pairs.
// A label > 0.5 is positive. With no positives or no negatives (or a NaN score) the AUC is
// undefined: AucResult::auc is NaN and AucResult::Explain() says why.
//
// Thread-safety: none; one accumulator per thread, merge afterwards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "transport/status.h"

namespace ferry::models {

// Mean logloss over a stream of samples.
class LoglossAccumulator {
 public:
  // Probabilities are clamped to [kMinProbability, 1 - kMinProbability] by AddProbabilities, so
  // a confidently wrong prediction costs about 16.1 nats instead of infinity.
  static constexpr double kMinProbability = 1e-7;

  // Adds a kernel's summed loss over `count` samples (the preferred path: kernels compute the
  // loss from logits, exactly, without clamping).
  void AddSum(double loss_sum, uint64_t count) {
    sum_ += loss_sum;
    count_ += count;
  }
  // Adds -[y log p + (1 - y) log(1 - p)] per sample, p clamped as above.
  // kInvalidArgument (nothing added) when the spans differ in length.
  Status AddProbabilities(std::span<const float> probs, std::span<const float> labels);
  void Merge(const LoglossAccumulator& other) { AddSum(other.sum_, other.count_); }
  void Clear() { *this = LoglossAccumulator(); }

  double sum() const { return sum_; }
  uint64_t count() const { return count_; }
  // sum / count; NaN when no sample was added.
  double Mean() const;

 private:
  double sum_ = 0.0;
  uint64_t count_ = 0;
};

struct AucResult {
  double auc = 0.0;  // NaN when undefined
  uint64_t positives = 0;
  uint64_t negatives = 0;
  uint64_t nan_scores = 0;

  bool defined() const { return positives > 0 && negatives > 0 && nan_scores == 0; }
  // "" when defined, otherwise why the AUC is NaN, e.g.
  // "AUC undefined: all 1000 samples are negative (no positive label)".
  std::string Explain() const;
};

// Exact AUC of one set of (score, label) pairs. O(n log n) time, O(n) memory (a sorted copy).
// Counts are exact for n up to about 6e9 samples. Spans of different length are refused.
Result<AucResult> ExactAuc(std::span<const float> scores, std::span<const float> labels);

// Keeps every (score, label) pair it is given: exact AUC needs all of them (8 bytes a sample).
class AucAccumulator {
 public:
  // kInvalidArgument (nothing added) when the spans differ in length.
  Status Add(std::span<const float> scores, std::span<const float> labels);
  void Add(float score, float label) {
    scores_.push_back(score);
    labels_.push_back(label);
  }
  void Merge(const AucAccumulator& other);
  void Clear() {
    scores_.clear();
    labels_.clear();
  }

  // Raw state for gathering across workers: scores()[i] belongs with labels()[i].
  const std::vector<float>& scores() const { return scores_; }
  const std::vector<float>& labels() const { return labels_; }
  size_t size() const { return scores_.size(); }

  AucResult Compute() const;

 private:
  std::vector<float> scores_;
  std::vector<float> labels_;
};

}  // namespace ferry::models
