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
#include <cstring>
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

namespace {

// The float's bits as an unsigned integer of the same order (negative floats flipped, positive
// ones offset past them); -0.0f counts as 0.0f, so signed zeros tie, as they compare equal.
uint32_t OrderedBits(float f) {
  if (f == 0.0f) f = 0.0f;
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

// Sorts by the high 32 bits (the score's OrderedBits; bit 0 holds the label): a stable LSD radix
// sort, four passes of 8 bits. A window of 100k scores sorts in well under a millisecond, where
// std::sort of (score, label) pairs took several (2% of a streaming job's CPU, measured).
void SortByScore(std::vector<uint64_t>* v) {
  std::vector<uint64_t> tmp(v->size());
  for (int shift = 32; shift < 64; shift += 8) {
    size_t count[257] = {};
    for (uint64_t x : *v) ++count[((x >> shift) & 0xff) + 1];
    for (int b = 0; b < 256; ++b) count[b + 1] += count[b];
    for (uint64_t x : *v) tmp[count[(x >> shift) & 0xff]++] = x;
    v->swap(tmp);
  }
}

}  // namespace

Result<AucResult> ExactAuc(std::span<const float> scores, std::span<const float> labels) {
  if (scores.size() != labels.size()) return LengthMismatch(scores.size(), labels.size());
  AucResult r;
  std::vector<uint64_t> keyed;  // OrderedBits(score) << 32 | positive
  keyed.reserve(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) {
    const bool positive = IsPositive(labels[i]);
    (positive ? r.positives : r.negatives) += 1;
    if (std::isnan(scores[i])) {
      ++r.nan_scores;  // NaN has no order
    } else {
      keyed.push_back(uint64_t{OrderedBits(scores[i])} << 32 | (positive ? 1u : 0u));
    }
  }
  if (!r.defined()) {
    r.auc = std::numeric_limits<double>::quiet_NaN();
    return r;
  }
  SortByScore(&keyed);
  uint64_t twice_u = 0;
  uint64_t neg_before = 0;
  for (size_t start = 0; start < keyed.size();) {
    size_t end = start;
    uint64_t pos_g = 0;
    uint64_t neg_g = 0;
    // One group per distinct score: ties count half.
    for (; end < keyed.size() && (keyed[end] >> 32) == (keyed[start] >> 32); ++end) {
      ((keyed[end] & 1) != 0 ? pos_g : neg_g) += 1;
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
