// Logloss and exact (tie-corrected) AUC.
//
// AUC without ranks: sort by score ascending and walk the groups of tied scores. A positive in a
// group beats every negative seen in earlier (lower-score) groups and ties with the group's own
// negatives, so
//   2 * U = sum over groups g of  pos_g * (2 * neg_before_g + neg_g)
//   AUC   = U / (P * N)
// which is the average-rank Mann-Whitney U, in exact integer arithmetic (2U <= 2PN <= n^2 / 2
// fits uint64_t for n < 6e9).
#include "models/eval/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace ferry::models {
namespace {

Status LengthMismatch(size_t scores, size_t labels) {
  return InvalidArgument("metrics: " + std::to_string(scores) + " scores but " +
                         std::to_string(labels) + " labels");
}

bool IsPositive(float label) {
  return label > 0.5f;
}

}  // namespace

Status LoglossAccumulator::AddProbabilities(std::span<const float> probs,
                                            std::span<const float> labels) {
  if (probs.size() != labels.size()) return LengthMismatch(probs.size(), labels.size());
  double sum = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    const double p = std::clamp<double>(probs[i], kMinProbability, 1.0 - kMinProbability);
    const double y = labels[i];
    sum -= y * std::log(p) + (1.0 - y) * std::log1p(-p);
  }
  AddSum(sum, probs.size());
  return Status::Ok();
}

double LoglossAccumulator::Mean() const {
  if (count_ == 0) return std::numeric_limits<double>::quiet_NaN();
  return sum_ / static_cast<double>(count_);
}

std::string AucResult::Explain() const {
  if (defined()) return "";
  if (nan_scores > 0) {
    return "AUC undefined: " + std::to_string(nan_scores) + " scores are NaN (diverged model?)";
  }
  const uint64_t n = positives + negatives;
  if (n == 0) return "AUC undefined: no samples";
  if (positives == 0) {
    return "AUC undefined: all " + std::to_string(n) + " samples are negative (no positive label)";
  }
  return "AUC undefined: all " + std::to_string(n) + " samples are positive (no negative label)";
}

Result<AucResult> ExactAuc(std::span<const float> scores, std::span<const float> labels) {
  if (scores.size() != labels.size()) return LengthMismatch(scores.size(), labels.size());
  AucResult r;
  std::vector<std::pair<float, bool>> pairs;
  pairs.reserve(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) {
    const bool positive = IsPositive(labels[i]);
    (positive ? r.positives : r.negatives) += 1;
    if (std::isnan(scores[i])) {
      ++r.nan_scores;  // NaN has no order; sorting it would be undefined behaviour
    } else {
      pairs.emplace_back(scores[i], positive);
    }
  }
  if (!r.defined()) {
    r.auc = std::numeric_limits<double>::quiet_NaN();
    return r;
  }
  std::sort(pairs.begin(), pairs.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  uint64_t twice_u = 0;
  uint64_t neg_before = 0;
  for (size_t start = 0; start < pairs.size();) {
    size_t end = start;
    uint64_t pos_g = 0;
    uint64_t neg_g = 0;
    // -0.0f == 0.0f, so signed zeros form one group, as they should.
    for (; end < pairs.size() && pairs[end].first == pairs[start].first; ++end) {
      (pairs[end].second ? pos_g : neg_g) += 1;
    }
    twice_u += pos_g * (2 * neg_before + neg_g);
    neg_before += neg_g;
    start = end;
  }
  r.auc = static_cast<double>(twice_u) /
          (2.0 * static_cast<double>(r.positives) * static_cast<double>(r.negatives));
  return r;
}

Status AucAccumulator::Add(std::span<const float> scores, std::span<const float> labels) {
  if (scores.size() != labels.size()) return LengthMismatch(scores.size(), labels.size());
  scores_.insert(scores_.end(), scores.begin(), scores.end());
  labels_.insert(labels_.end(), labels.begin(), labels.end());
  return Status::Ok();
}

void AucAccumulator::Merge(const AucAccumulator& other) {
  if (&other == this) {  // inserting a vector's own range into itself is undefined
    const AucAccumulator copy = other;
    Merge(copy);
    return;
  }
  scores_.insert(scores_.end(), other.scores_.begin(), other.scores_.end());
  labels_.insert(labels_.end(), other.labels_.begin(), other.labels_.end());
}

AucResult AucAccumulator::Compute() const {
  // The two vectors only grow together, so ExactAuc cannot refuse them.
  Result<AucResult> r = ExactAuc(scores_, labels_);
  return r.ok() ? *r : AucResult{std::numeric_limits<double>::quiet_NaN(), 0, 0, 0};
}

}  // namespace ferry::models
