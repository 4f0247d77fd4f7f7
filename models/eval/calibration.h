// Intercept calibration: one logit offset d that makes a model's mean prediction match the
// observed positive rate on held-out data, fitted by maximum likelihood, and applied to every
// prediction afterwards:
//
//   p' = sigmoid(logit(p) + d),   d = argmin_d  sum_i logloss(sigmoid(logit(p_i) + d), y_i)
//
// At the optimum sum_i p'_i = sum_i y_i exactly (the derivative of the loss in d), so the
// calibration ratio (mean prediction / positive rate) of the fitted data is 1. A model whose
// intercept drifts between passes (an MLP's output bias under Adam, a stale asynchronous bias)
// gets it right again at the cost of one parameter, which held-out data estimates well.
//
// The fit is Newton's method on d over sums a caller can gather from several workers:
//
//   OffsetFit fit;                              // d = 0
//   for (int i = 0; i < kOffsetIterations; ++i) {
//     OffsetSums s = SumsAt(fit.offset, my_logits, my_labels);   // per worker
//     ... add every worker's s (in worker order) ...
//     if (!fit.Step(total)) break;              // converged or degenerate
//   }
//
// Logits come from probabilities (the kernels' output) clamped to [kMinProbability, 1 -
// kMinProbability], so that ferry-train's evaluation and ferry-predict apply the same d to the
// same floats and report the same logloss.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

namespace ferry::models {

inline constexpr double kCalibrationMinProbability = 1e-7;
inline constexpr int kOffsetIterations = 12;
// |d| beyond this is a model that predicts nothing useful: the fit stops there.
inline constexpr double kMaxOffset = 10.0;

// logit(clamp(p)) as a double.
double LogitOf(float p);

struct OffsetSums {
  double gradient = 0;  // sum_i sigmoid(z_i + d) - y_i
  double hessian = 0;   // sum_i s (1 - s)
  uint64_t count = 0;
};

// The sums at offset d over logits z (LogitOf of the predictions) and labels (0/1).
OffsetSums SumsAt(double d, std::span<const double> logits, std::span<const float> labels);

struct OffsetFit {
  double offset = 0;
  // One Newton step from the summed sums; false when done (converged, no data, or a
  // degenerate label set such as all positives, where the offset is left as it was).
  bool Step(const OffsetSums& total);
};

// Applies d to probabilities in place and returns their summed logloss against the labels
// (each p' clamped as above before the log). d = 0 leaves them as they are (still clamped in
// the loss).
double ApplyOffset(double d, std::span<float> probs, std::span<const float> labels);

}  // namespace ferry::models
